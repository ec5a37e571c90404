"""Time that moves only when a test says so, and waiting without polling (FakeClock, FakeStop, Activity)."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from kuberhealthy.base.times import format_time

T = TypeVar("T")

class FakeClock:
    """Monotonic seconds (call it) and wall seconds (.wall()) that move only by advance().

    Monotonic starts a day ahead of the real clock: Resources.update_with_retry measures the caller's
    deadline (fake time) against time.monotonic(), and must never find it passed already.
    """

    def __init__(self, wall: float = 1_700_000_000.0) -> None:
        self._lock = threading.Lock()
        self.now = time.monotonic() + 86400.0
        self.wall_now = wall
        self._on_advance: list[Callable[[], None]] = []

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.wall_now

    def on_advance(self, fn: Callable[[], None]) -> None:
        self._on_advance.append(fn)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds
            self.wall_now += seconds
        for fn in list(self._on_advance):
            fn()


def stamp(clock: FakeClock) -> str:
    """The fake wall clock's now, as metav1.Time writes it."""
    return format_time(clock.wall())


class FakeStop(threading.Event):
    """A run's stop event whose timed wait() passes fake time instead of real time (retry backoff)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self._clock = clock

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is None or self.is_set():
            return super().wait(timeout)
        self._clock.advance(timeout)
        return self.is_set()


class Activity:
    """Wakes the test's until() whenever another thread calls the fake API or reads a fake cache."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._waiting: int | None = None  # the thread inside until(); its own reads wake nobody

    def touch(self) -> None:
        if threading.get_ident() != self._waiting:
            self._event.set()

    def until(self, predicate: Callable[[], T], what: str, timeout: float = 10.0) -> T:
        """predicate()'s first truthy value, re-evaluated after each touch; AssertionError after `timeout`
        real seconds (a safety net: a passing test never gets near it)."""
        end = time.monotonic() + timeout
        self._waiting = threading.get_ident()
        try:
            while True:
                self._event.clear()
                value = predicate()
                if value:
                    return value
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for {what}")
                self._event.wait(left)
        finally:
            self._waiting = None
