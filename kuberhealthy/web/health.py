"""`GET /healthz` (the process serves HTTP) and `GET /readyz` (every cache has synced once).

Probes for the chart: liveness must not depend on the API server (a slow API server is no reason to
restart us); readiness waits for the caches, since before that `/` and reports would see nothing.
"""
from __future__ import annotations

from flask import Blueprint, Response

from kuberhealthy.web import context, plain

bp = Blueprint("health", __name__)


OK = "ok"


def _ok() -> Response:
    return Response(OK, status=200, content_type="text/plain; charset=utf-8")


@bp.route("/healthz", methods=["GET", "HEAD"])
def healthz() -> Response:
    return _ok()


@bp.route("/readyz", methods=["GET", "HEAD"])
def readyz() -> Response:
    if context().services.ready():
        return _ok()
    return plain(503, "caches not synced yet")
