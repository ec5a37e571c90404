"""`GET /healthz` (the process serves HTTP) and `GET /readyz` (every cache has synced once).

Probes for the chart: liveness must not depend on the API server (a slow or absent API server is no
reason to restart us). Readiness waits for the first sync of the caches, since before that `/` and
reports would see nothing; after that it stays ready through an API outage: every replica shares the
API server, so an outage would pull them all out of the Service at once and drop every report, while
`/` can still serve the last known state. The body says how fresh each cache is (so does the metric
`kuberhealthy_cache_current`).
"""
from __future__ import annotations

from flask import Blueprint, Response

from kuberhealthy.web.answers import plain
from kuberhealthy.web.context import context

bp = Blueprint("health", __name__)


OK = "ok"


def _ok() -> Response:
    return Response(OK, status=200, content_type="text/plain; charset=utf-8")


@bp.route("/healthz", methods=["GET", "HEAD"])
def healthz() -> Response:
    return _ok()


def _freshness() -> str:
    lines = []
    for name, current, stale in context().services.cache_status():
        lines.append(f"{name}: current" if current else f"{name}: not current for {stale:.0f}s")
    return "\n".join(lines)


@bp.route("/readyz", methods=["GET", "HEAD"])
def readyz() -> Response:
    services = context().services
    if services.ready():
        return Response(f"{OK}\n{_freshness()}\n", status=200, content_type="text/plain; charset=utf-8")
    return plain(503, "caches not synced yet")
