"""`GET /dashboard`: the page for people (web/dashboard/render.py renders it), its live updates and its assets.

    /dashboard                        the overview (?q=&ns=&state= filter it; a link keeps the filter)
    /dashboard/live[?since=TOKEN]     what changed since TOKEN, as rendered rows (JSON); 304 when nothing;
                                      400 for a TOKEN of no shape a replica issues (changelog.well_formed)
    /dashboard/<ns>/<name>[?kind=]    a check page: every kind with that name (404 when none has it);
                                      `?kind=healthcheck` (or the name `hc:<name>`) the HealthCheck alone,
                                      as the overview links a HealthCheck (its name may be a khcheck's too)
    /dashboard/<ns>/<name>/live       its changing parts (JSON); 304 when nothing changed
    /dashboard/_static/<file>?v=HASH  CSS, script, icon; cached for a year when HASH is the file's own
                                      ("_static" can be no namespace's name)
    /favicon.ico                      the icon (browsers ask for it, also on the JSON pages)

Everything is served by the daemon itself from its caches: no external fonts, CDNs or trackers (clusters
are often offline), and the page works with JavaScript off. `GET /` serves the same overview to
browsers only with `dashboardAtRoot` (web/status.py).
"""
from __future__ import annotations

from flask import Blueprint, Response, abort, request, send_from_directory

from kuberhealthy.web import charts
from kuberhealthy.web.answers import plain
from kuberhealthy.web.dashboard import changelog
from kuberhealthy.web.dashboard import render as dashpage
from kuberhealthy.web.dashboard import rows as dashview

bp = Blueprint("dashboard", __name__, template_folder="templates")

YEAR = 365 * 24 * 3600
ASSETS = ("dashboard.css", "dashboard.js", "favicon.svg")
DAY = 24 * 3600


@bp.app_template_filter("dur")
def _dur(seconds: float | None) -> str:
    return charts.duration_text(seconds)


@bp.app_template_filter("pct")
def _pct(fraction: float | None) -> str:
    return dashview.percent(fraction)


@bp.route("/dashboard", methods=["GET", "HEAD"])
def overview() -> Response:
    return dashpage.overview()


@bp.route("/dashboard/live", methods=["GET", "HEAD"])
def live() -> Response:
    since = request.args.get("since", "")
    if since and not changelog.well_formed(since):
        return plain(400, f"malformed since token {since[:40]!r}: expected <epoch>.<generation>.<digest> as "
                          "the page's ETag gives it (ASCII letters and digits, at most "
                          f"{changelog.TOKEN_MAX} characters)")
    return dashpage.overview_live()


@bp.route("/dashboard/<namespace>/<name>", methods=["GET", "HEAD"])
def check(namespace: str, name: str) -> Response:
    return dashpage.check_page(namespace, name)


@bp.route("/dashboard/<namespace>/<name>/live", methods=["GET", "HEAD"])
def check_live(namespace: str, name: str) -> Response:
    return dashpage.check_live(namespace, name)


@bp.route("/dashboard/_static/<file>", methods=["GET", "HEAD"])
def static(file: str) -> Response:
    """An asset: immutable for a year under its fingerprint, else revalidated (ETag) on every use."""
    if file not in ASSETS:
        abort(404)
    resp = send_from_directory(dashpage.STATIC, file, max_age=0, conditional=True, etag=True)
    if request.args.get("v") == dashpage.fingerprint(file):
        resp.headers["Cache-Control"] = f"public, max-age={YEAR}, immutable"
    else:
        resp.headers["Cache-Control"] = "no-cache"
    resp.headers["X-Content-Type-Options"] = "nosniff"
    return resp


@bp.route("/favicon.ico", methods=["GET", "HEAD"])
def favicon() -> Response:
    resp = send_from_directory(dashpage.STATIC, "favicon.svg", mimetype="image/svg+xml", max_age=DAY)
    resp.headers["X-Content-Type-Options"] = "nosniff"
    return resp
