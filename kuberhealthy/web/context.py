"""What every handler shares: the daemon's services and the per-source rate limit.

Part of web/'s ground: it knows none of its users. What a single room needs (the status cache, the
report admission, the JSON API's entries) is a part of its own (parts.py), built by create_app.
"""
from __future__ import annotations

from dataclasses import dataclass

from kuberhealthy.needs import WebNeeds
from kuberhealthy.web.parts import part
from kuberhealthy.web.ratelimit import ConfiguredLimiter


@dataclass(frozen=True)
class WebContext:
    """What the handlers share; one per app."""

    services: WebNeeds
    limiter: ConfiguredLimiter  # per source address: reports and run requests


def context() -> WebContext:
    """The current app's WebContext."""
    return part(WebContext)
