"""`GET /status` and its stylesheet: the status page's prepared bytes (page.py), or 404 while it is off.

    /status                 the page (statusPage.enabled); ETag + If-None-Match -> 304, gzip when asked,
                            cacheable by anyone for MAX_AGE seconds; HEAD as GET without the body
    /status/status.css?v=H  its stylesheet; cached for a year when H is the file's own fingerprint

While statusPage.enabled is false both answer 404 like any unknown URL, so a disabled page says
nothing about itself. The page has no script, no form, no link into the dashboard or the API: it is
for people outside the team.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, cast

from flask import (
    Blueprint,
    Flask,
    Response,
    abort,
    get_template_attribute,
    render_template,
    request,
    send_from_directory,
)
from flask.blueprints import BlueprintSetupState
from markupsafe import Markup

from kuberhealthy.records.checkspec import KIND_HEALTHCHECK
from kuberhealthy.web.charts import day_bar, legend, uptime_text
from kuberhealthy.web.context import WebContext, context
from kuberhealthy.web.entries import ViewCache
from kuberhealthy.web.htmlheaders import secure
from kuberhealthy.web.parts import install, part
from kuberhealthy.web.statuspage.board import Board, Item, month
from kuberhealthy.web.statuspage.page import Key, PreparedStatusPage
from kuberhealthy.web.uptime import Uptime

bp = Blueprint("statuspage", __name__, template_folder="templates")

STATIC = Path(__file__).parent / "static"
CSS = "status.css"
MAX_AGE = 30  # seconds a browser or proxy may keep the page without asking again
YEAR = 365 * 24 * 3600


@bp.record_once
def _install(state: BlueprintSetupState) -> None:
    """The page's part, over the parts create_app installed before registering this blueprint."""
    app = cast(Flask, state.app)
    services = part(WebContext, app).services
    v3 = services.kinds.named(KIND_HEALTHCHECK)
    caches = [services.khchecks, services.khjobs, services.khstates, *([v3.checks] if v3 else [])]
    install(app, PreparedStatusPage(part(ViewCache, app), part(Uptime, app), caches).attach())


@cache
def fingerprint(name: str) -> str:
    return hashlib.sha256((STATIC / name).read_bytes()).hexdigest()[:12]


class JinjaRenderer:
    """The page and each check's part of it, from the templates under templates/statuspage/."""

    def check(self, item: Item, days: list[dict[str, Any]]) -> str:
        macro = get_template_attribute("statuspage/macros.html", "check")
        uptime, known = month(days)
        return str(macro(item, day_bar(days, f"{item.name} ({item.namespace})"),
                         uptime_text(uptime) if uptime is not None else None, known if known < len(days) else None))

    def page(self, board: Board, checks: Mapping[Key, str]) -> str:
        return render_template("statuspage/status.html", board=board,
                               checks={k: Markup(v) for k, v in checks.items()},  # rendered by check()
                               css=f"/status/{CSS}?v={fingerprint(CSS)}", legend=legend())


RENDERER = JinjaRenderer()


def _enabled() -> None:
    if not context().services.config.status_page.enabled:
        abort(404)


@bp.route("/status", methods=["GET", "HEAD"])
def status() -> Response:
    _enabled()
    show_errors = context().services.config.status_page.show_errors
    page = part(PreparedStatusPage).prepared(show_errors, RENDERER)
    zipped = request.accept_encodings["gzip"] > 0
    resp = Response(page.gzipped if zipped else page.body, content_type="text/html; charset=utf-8")
    if zipped:
        resp.headers["Content-Encoding"] = "gzip"
    resp.headers["Cache-Control"] = f"public, max-age={MAX_AGE}"
    resp.vary.add("Accept-Encoding")
    resp.set_etag(page.etag, weak=True)
    secure(resp).make_conditional(request)  # 304 for a matching If-None-Match
    return resp


@bp.route(f"/status/{CSS}", methods=["GET", "HEAD"])
def stylesheet() -> Response:
    _enabled()
    resp = send_from_directory(STATIC, CSS, max_age=0, conditional=True, etag=True)
    fresh = request.args.get("v") == fingerprint(CSS)
    resp.headers["Cache-Control"] = f"public, max-age={YEAR}, immutable" if fresh else "no-cache"
    resp.headers["X-Content-Type-Options"] = "nosniff"
    return resp
