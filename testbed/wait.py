"""Polling helper for integration tests: a generous deadline, never a fixed sleep."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(fn: Callable[[], T], timeout: float = 30.0, interval: float = 0.05, what: str = "condition") -> T:
    """Call fn until it returns something truthy; return that, or fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = fn()
            if value:
                return value
        except AssertionError as e:  # let assertion-style predicates be retried
            last_exc = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}") from last_exc
        time.sleep(interval)
