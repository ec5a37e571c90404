"""The HTTP API every replica serves: the v2 status page, Prometheus metrics, check reports, probes.

`create_app(services)` builds a Flask app over the daemon's caches; the gunicorn wiring lives in
server.py. Handlers read the caches (khstates, khjobs, checker pods) and write only through
khstate.record_report; nothing here schedules checks, talks to the Lease or lists pods from the API.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Response, current_app
from prometheus_client.registry import CollectorRegistry
from werkzeug.exceptions import HTTPException

from kuberhealthy.metrics import make_registry
from kuberhealthy.services import Services
from kuberhealthy.state import StatusCache

CALLER_WAIT = 0.8  # seconds a report waits for its pod to show up in the pod cache (then: one read)
REPORT_SLOTS = 24  # reports handled at once; the web server's other threads stay free for `/` and probes
EXTENSION = "kuberhealthy"


@dataclass
class WebContext:
    """What the handlers share; one per app."""

    services: Services
    status: StatusCache
    registry: CollectorRegistry
    caller_wait: float
    report_slots: threading.BoundedSemaphore = field(default_factory=lambda: threading.BoundedSemaphore(REPORT_SLOTS))


def context() -> WebContext:
    ctx: WebContext = current_app.extensions[EXTENSION]
    return ctx


def one_line(text: str, limit: int = 500) -> str:
    """A reason fit for a one-line plain-text answer: no line breaks or control characters, bounded."""
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return clean if len(clean) <= limit else clean[: limit - 3] + "..."


def plain(status: int, reason: str = "", headers: dict[str, str] | None = None) -> Response:
    """A plain-text answer; a non-empty reason becomes exactly one line."""
    body = one_line(reason) + "\n" if reason else ""
    return Response(body, status=status, content_type="text/plain; charset=utf-8", headers=headers)


def _http_error(e: HTTPException) -> Any:
    """404/405/... as one line of plain text instead of Flask's HTML page."""
    return plain(e.code or 500, f"{e.name}: {e.description}" if e.description else e.name)


def create_app(services: Services, *, caller_wait: float = CALLER_WAIT) -> Flask:
    """The Flask app over running (or about to run) services."""
    from kuberhealthy.web import health, report, status  # blueprints import context() from here

    app = Flask(__name__)
    cache = StatusCache(services.khstates, services.khjobs).attach()
    registry = make_registry(cache.summary, services.current_master, lambda: services.config.prom_metrics,
                             services.cache_status, services.stats.collectors())
    app.extensions[EXTENSION] = WebContext(services=services, status=cache, registry=registry,
                                           caller_wait=caller_wait)
    app.register_blueprint(status.bp)
    app.register_blueprint(report.bp)
    app.register_blueprint(health.bp)
    app.register_error_handler(HTTPException, _http_error)
    return app


__all__ = ["CALLER_WAIT", "WebContext", "context", "create_app", "one_line", "plain"]
