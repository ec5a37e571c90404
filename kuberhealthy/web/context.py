"""What the HTTP handlers share: the per-app context and the plain-text answer helpers.

Its own module so the blueprints and create_app() (web/__init__.py) import it, not each other.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from flask import Response, current_app
from prometheus_client.registry import CollectorRegistry

from kuberhealthy.needs import WebNeeds
from kuberhealthy.web.entries import ViewCache
from kuberhealthy.web.ratelimit import RateLimiter
from kuberhealthy.web.report.stats import ReportStats
from kuberhealthy.web.report.tokens import TokenVerifier
from kuberhealthy.web.report.triage import Triage
from kuberhealthy.web.status.page import StatusCache

CALLER_WAIT = 0.8  # seconds a report waits for its pod to show up in the pod cache (then: one read)
REPORT_SLOTS = 24  # reports of runs the caches know handled at once (others: triage.py's pool, no slot)
EXTENSION = "kuberhealthy"


@dataclass
class WebContext:
    """What the handlers share; one per app."""

    services: WebNeeds
    status: StatusCache
    registry: CollectorRegistry
    caller_wait: float
    report_stats: ReportStats
    tokens: TokenVerifier
    views: ViewCache  # the JSON API's entries (web/api.py) and the per-check metrics
    triage: Triage  # sorts reports by what the caches know, before any takes a slot
    report_slots: threading.BoundedSemaphore = field(default_factory=lambda: threading.BoundedSemaphore(REPORT_SLOTS))
    _limiter: RateLimiter | None = None
    _limiter_lock: threading.Lock = field(default_factory=threading.Lock)

    def limiter(self) -> RateLimiter:
        """The per-source limiter for the current config (a reload of the rates starts afresh)."""
        config = self.services.config
        with self._limiter_lock:
            current = self._limiter
            if current is None or (current.rate, current.burst) != (config.report_rate_limit,
                                                                    float(config.report_rate_burst)):
                current = self._limiter = RateLimiter(config.report_rate_limit, config.report_rate_burst)
            return current


def context() -> WebContext:
    ctx: WebContext = current_app.extensions[EXTENSION]
    return ctx


def requested_namespaces(raw: str) -> list[str]:
    """`?namespace=a,b`: empty items (`?namespace=,`) are ignored, as in v2."""
    return [n for n in raw.split(",") if n]


def one_line(text: str, limit: int = 500) -> str:
    """A reason fit for a one-line plain-text answer: no line breaks or control characters, bounded."""
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return clean if len(clean) <= limit else clean[: limit - 3] + "..."


def plain(status: int, reason: str = "", headers: dict[str, str] | None = None) -> Response:
    """A plain-text answer; a non-empty reason becomes exactly one line."""
    body = one_line(reason) + "\n" if reason else ""
    return Response(body, status=status, content_type="text/plain; charset=utf-8", headers=headers)
