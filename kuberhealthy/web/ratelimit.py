"""Per-source rate limits for the report endpoint (and run requests): a token bucket per address.

The defaults (config `reportRateLimit` / `reportRateBurst`) sit far above what a node's checkers send
even when a whole node reaches us from one SNAT address: they only stop a flood from holding every
server thread. A refused request learns when a token will be back (Retry-After, whole seconds).

Memory is bounded: at most MAX_SOURCES buckets; the least recently used go first (a forgotten source
starts again with a full bucket, which errs on the side of accepting).
"""
from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

MAX_SOURCES = 10000


class RateLimiter:
    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic,
                 max_sources: int = MAX_SOURCES) -> None:
        self.rate = rate  # tokens per second
        self.burst = float(burst)
        self._clock = clock
        self._max = max_sources
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # source -> (tokens, at)

    def take(self, source: str) -> float:
        """0.0 when `source` may go on (a token is spent), else the seconds until it may try again."""
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.pop(source, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            wait = 0.0
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) / self.rate
            self._buckets[source] = (tokens, now)
            while len(self._buckets) > self._max:
                self._buckets.popitem(last=False)
            return wait

    @staticmethod
    def retry_after(wait: float) -> str:
        """A Retry-After header value (whole seconds, at least 1)."""
        return str(max(1, math.ceil(wait)))


class ConfiguredLimiter:
    """The per-source limiter for the current rates, one per app, shared by the report endpoint and the
    run-now route: `rates()` says (rate, burst) now; a reload that changes them starts afresh."""

    def __init__(self, rates: Callable[[], tuple[float, int]]) -> None:
        self._rates = rates
        self._lock = threading.Lock()
        self._current: RateLimiter | None = None

    def current(self) -> RateLimiter:
        rate, burst = self._rates()
        with self._lock:
            current = self._current
            if current is None or (current.rate, current.burst) != (rate, float(burst)):
                current = self._current = RateLimiter(rate, burst)
            return current

    def take(self, source: str) -> float:
        """RateLimiter.take on the limiter for the current rates."""
        return self.current().take(source)
