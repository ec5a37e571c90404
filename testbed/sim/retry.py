"""Backoff with jitter and `Retry-After` parsing, shared by the report sender, API writes and the watch.

A thousand simulated pods that fail together must not retry together, so every wait is jittered
("equal jitter", as kuberhealthy/checkclient.py does: between half and all of the exponential step).
Nothing here waits; callers wait on their own stop or cancel event.
"""
from __future__ import annotations

import email.utils
import math
import random
import time


def backoff(attempt: int, base: float, cap: float) -> float:
    """Seconds to wait after failed attempt number `attempt` (1, 2, ...): in [s/2, s], s = min(cap, base*2^(n-1))."""
    step = min(cap, base * 2.0 ** min(max(attempt, 1) - 1, 32))
    return step / 2 + random.uniform(0, step / 2)


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A `Retry-After` header as seconds from now: delay-seconds or an HTTP-date; None when absent or
    unreadable (then the caller's own backoff applies). Never negative."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)


def honour_retry_after(seconds: float) -> float:
    """The wait for a server's `Retry-After`: at least what it asked, plus a little jitter so pods told
    the same number do not come back in one burst."""
    return seconds + random.uniform(0, min(1.0, 0.05 + seconds / 4))
