"""Rendering the dashboard: the overview and check pages, their live updates, and the `/` negotiation.

Its own module so both the dashboard blueprint (web/dashboard.py) and `GET /` (web/status.py, when
`dashboardAtRoot` is on) render the overview without importing each other. Pages are Jinja templates
under web/templates/dashboard/ over the JSON API's entries (checkview.ViewCache: the cache rebuilt on
change that `/api/checks` serves) turned into rows by web/dashview.py. Live updates are JSON whose rows
are rendered by the same template macros, so the page script never renders a row itself.

What it does not do: decide anything, or call the API server (every read is a cache read).
"""
from __future__ import annotations

import gzip
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from flask import Flask, Response, current_app, get_template_attribute, jsonify, render_template, request
from werkzeug.datastructures import MIMEAccept

from kuberhealthy.base.times import format_time
from kuberhealthy.records.runnow import RUN_NOW_ANNOTATION
from kuberhealthy.web import htmlheaders
from kuberhealthy.web.answers import plain, requested_kinds
from kuberhealthy.web.charts import legend
from kuberhealthy.web.checkkinds import CheckKinds
from kuberhealthy.web.context import WebContext, context
from kuberhealthy.web.dashboard import changelog
from kuberhealthy.web.dashboard import rows as dashview
from kuberhealthy.web.dashboard.pictures import Pictures
from kuberhealthy.web.entries import Built, ViewCache
from kuberhealthy.web.parts import part
from kuberhealthy.web.uptime import Uptime

DASHBOARD = "kuberhealthy.dashboard"  # app.extensions key
DAY, HOUR = 86400, 3600
STATIC = Path(__file__).parent / "static"
POLL_MS = 5000  # how often the page asks what changed (a 304 when nothing did)
GZIP_MIN = 2048  # bytes: smaller answers go as they are
GZIP_LEVEL = 5  # a 1,000-check overview: ~600 KB of repetitive markup, tens of KB gzipped, in ~15 ms
CSP = htmlheaders.CSP  # one policy for every HTML page of the daemon


@dataclass
class Dashboard:
    """Per app: the change log of the overview's rows (the entries are the app's ViewCache, shared with
    /api/checks) and the pictures drawn of each check."""

    changes: changelog.ChangeLog = field(default_factory=changelog.ChangeLog)
    pictures: Pictures = field(default_factory=Pictures)


def init_app(app: Flask) -> None:
    app.extensions[DASHBOARD] = Dashboard()


def _dashboard() -> Dashboard:
    dash: Dashboard = current_app.extensions[DASHBOARD]
    return dash


# --- assets ---------------------------------------------------------------------------------------------

@cache
def fingerprint(name: str) -> str:
    """A short hash of a static file's content: its URL changes with it, so it can be cached for a year."""
    return hashlib.sha256((STATIC / name).read_bytes()).hexdigest()[:12]


def asset(name: str) -> str:
    return f"/dashboard/_static/{name}?v={fingerprint(name)}"


def secure(resp: Response) -> Response:
    """Headers of every dashboard page: no script or style but ours (check errors are untrusted text)."""
    return compressed(htmlheaders.secure(resp))


def compressed(resp: Response) -> Response:
    """gzip a large page or update for a client that takes it (ETags are weak: one per content)."""
    resp.vary.add("Accept-Encoding")
    if resp.status_code != 200 or request.accept_encodings["gzip"] <= 0:
        return resp
    data = resp.get_data()
    if len(data) >= GZIP_MIN:
        resp.set_data(gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0))
        resp.headers["Content-Encoding"] = "gzip"
    return resp


# --- negotiation on `/` -----------------------------------------------------------------------------------

def prefers_html(accept: MIMEAccept) -> bool:
    """Accept ranks text/html strictly above application/json (a browser; not curl's */*, not none)."""
    return accept.quality("text/html") > accept.quality("application/json")


# --- the overview ------------------------------------------------------------------------------------------

def _now() -> float:
    return time.time()


def _common(ctx: WebContext, now: float) -> dict[str, object]:
    config = ctx.services.config
    return {"asset": asset, "now": now, "now_iso": format_time(now),
            "json_url": "/?format=json" if config.dashboard_at_root else "/",
            "run_api": config.enable_run_api, "expose_logs": config.expose_logs, "poll_ms": POLL_MS,
            "run_now_annotation": RUN_NOW_ANNOTATION}


def _observe(ctx: WebContext, now: float) -> tuple[list[Built], str]:
    """Every entry and the change-log token that names exactly this state (no rendering yet). A row
    changes with its entry and with the UTC day (its 30-day bar moves at midnight)."""
    built = part(ViewCache).entries()
    day = int(now // DAY)
    versions = {dashview.row_id(b.view["kind"], b.view["namespace"], b.view["name"]): (b.version, day)
                for b in built}
    return built, _dashboard().changes.observe(versions, ctx.services.current_master())


def _row(b: Built, now: float, uptime: Uptime, pictures: Pictures) -> dashview.Row:
    pics = pictures.row(uptime, b, now)
    return dashview.row(b.view, now, day_bar=pics.day_bar, spark=pics.spark)


def overview() -> Response:
    """The overview page, filtered by the query string (?q=&ns=&state=)."""
    ctx = context()
    now = _now()
    built, token = _observe(ctx, now)
    uptime, pictures = part(Uptime), _dashboard().pictures
    rows = [_row(b, now, uptime, pictures) for b in built]
    filt = dashview.Filter.of(request.args)
    shown = sum(1 for r in rows if filt.matches(r))
    html = render_template("dashboard/overview.html", **_common(ctx, now), token=token, filt=filt,
                           summary=dashview.banner([b.view for b in built], ctx.services.current_master()),
                           groups=dashview.groups(rows), shown=shown, total=len(rows),
                           namespaces=sorted({r.namespace for r in rows}), states=dashview.STATE_TEXT,
                           form_action=request.path, legend=legend())
    return secure(Response(html, content_type="text/html; charset=utf-8",
                           headers={"Cache-Control": "no-cache"}))


def _banner(summary: dashview.Banner) -> dict[str, object]:
    return {"healthy": summary.healthy, "headline": summary.headline, "master": summary.master or "none",
            "running": summary.running, "total": summary.total, "failing": summary.failing,
            "paused": summary.paused}


def _not_modified(token: str, same: Callable[[str], bool] | None = None) -> Response | None:
    """304 when If-None-Match names `token` (or, given `same`, a token it says names the same state),
    or is `*` (RFC 9110: any current representation)."""
    tags = request.if_none_match
    held = {t for t in tags.as_set(include_weak=True) if t}  # `""` parses as None
    if tags.star_tag or token in held or (same is not None and any(same(t) for t in held)):
        return Response(status=304, headers={"ETag": f'W/"{token}"', "Cache-Control": "no-cache",
                                             "Vary": "Accept-Encoding"})
    return None


def _json(token: str, **body: object) -> Response:
    resp = jsonify(token=token, **body)
    resp.headers["ETag"] = f'W/"{token}"'
    resp.headers["Cache-Control"] = "no-cache"
    return compressed(resp)


def overview_live() -> Response:
    """What changed since `?since=<token>` (everything without one): the changed rows' HTML, the removed
    rows' ids, the banner. `ETag` is the new token; If-None-Match with the current token gets 304, so a
    poll while nothing changed costs one small request and no rendering."""
    ctx = context()
    now = _now()
    built, token = _observe(ctx, now)
    changes = _dashboard().changes
    unchanged = _not_modified(token, changes.unchanged)
    if unchanged is not None:
        return unchanged
    since = request.args.get("since", "")
    delta = changes.since(since if since else "-")  # no token: everything
    wanted = set(delta.changed)
    render_row: Callable[[dashview.Row], str] = get_template_attribute("dashboard/macros.html", "row")
    uptime, pictures = part(Uptime), _dashboard().pictures
    out = []
    for b in built:
        r_id = dashview.row_id(b.view["kind"], b.view["namespace"], b.view["name"])
        if r_id in wanted:
            html = str(render_row(_row(b, now, uptime, pictures)))
            out.append({"id": r_id, "ns": b.view["namespace"], "html": html})
    return _json(delta.token, full=delta.full, now=format_time(now), nowMs=int(now * 1000),
                 banner=_banner(dashview.banner([b.view for b in built], ctx.services.current_master())),
                 rows=out, removed=delta.removed)


# --- a check page -------------------------------------------------------------------------------------------

def _check_token(ctx: WebContext, built: list[Built], now: float) -> str:
    """Names what a check page shows: its entries' versions, the UTC hour (its timelines move with it) and
    the two settings that change the page."""
    digest = hashlib.sha256(repr(([b.version for b in built], int(now // HOUR))).encode()).hexdigest()[:16]
    config = ctx.services.config
    return f"{digest}.{int(config.enable_run_api)}{int(config.expose_logs)}"


def _details(built: list[Built], now: float) -> list[dashview.Detail]:
    kinds = part(CheckKinds)
    uptime, pictures = part(Uptime), _dashboard().pictures
    out = []
    for b in built:
        kind = kinds.of_entry(b.view["kind"])
        obj = kind.objects.get(b.view["namespace"], b.view["name"]) if kind is not None else None
        out.append(dashview.detail(b.view, obj, now, plots=pictures.plots(uptime, b.view, now)))
    return out


def _entries(namespace: str, name: str) -> tuple[str, str, list[Built]]:
    """A check page's entries: of the name (`hc:<name>` names a HealthCheck) and `?kind=`; the bare name,
    and the query the page's own URLs keep."""
    raw = request.args.get("kind", "")
    bare, kinds = part(CheckKinds).named_entries(name, requested_kinds(raw))
    query = f"?kind={','.join(kinds)}" if kinds is not None else ""
    return bare, query, part(ViewCache).one(namespace, bare, kinds)


def check_page(namespace: str, name: str) -> Response:
    ctx = context()
    now = _now()
    bare, query, built = _entries(namespace, name)
    html = render_template("dashboard/check.html", **_common(ctx, now), namespace=namespace, name=bare, query=query,
                           entries=_details(built, now), token=_check_token(ctx, built, now))
    return secure(Response(html, status=200 if built else 404, content_type="text/html; charset=utf-8",
                           headers={"Cache-Control": "no-cache"}))


def check_live(namespace: str, name: str) -> Response:
    """The changing parts of a check page, rendered; ETag/If-None-Match → 304 while nothing changed."""
    ctx = context()
    now = _now()
    _, _, built = _entries(namespace, name)
    if not built:
        return plain(404, f"no khcheck, khjob or HealthCheck {namespace}/{name}")
    token = _check_token(ctx, built, now)
    unchanged = _not_modified(token)
    if unchanged is not None:
        return unchanged
    render_entry: Callable[[dashview.Detail], str] = get_template_attribute("dashboard/macros.html", "entry")
    parts = {f"live-{d.kind}": str(render_entry(d)) for d in _details(built, now)}
    return _json(token, now=format_time(now), nowMs=int(now * 1000), parts=parts)
