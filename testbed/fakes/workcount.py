"""Counting the work a scripted run does over the fakes: Python calls into the product, and a way to drive a
run one step at a time so that every run takes the same steps.

Counts, not times: the same on any machine for one Python version, so a unit test can hold them to a
budget (tests/unit/work_budget.py). API requests are read off FakeApi.calls and watch events off
FakeCache.applied; this module adds what the fakes cannot see:

  CallCounter   every Python function entered (sys.setprofile 'call' events, generators resumed included)
                for the product, on the calling thread and on threads started while it counts: the
                product's own functions and the library functions (standard library, third-party) it
                calls, so moving work from the product into a library call does not hide it. A test
                scene's own calls into the product (a kubelet stamping a time) count too; what libraries
                do for the scene (a fake API copying objects) does not.
  ParkingFlag   a wake-up flag (threading.Event) that tells the driving test when its waiter's thread
                blocks on it. A test that acts only while the run is parked never races the run: each
                action wakes it once, it looks once, so the work per run does not depend on scheduling.

Nothing here imports the product: the directory to count is the caller's.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any


class CallCounter:
    """Python function calls made for the product, summed over every window of counting(): calls into
    files under `product`, and calls into libraries (any file neither under `product` nor under `scene`)
    whose nearest caller outside the libraries is the product's. The scene's own calls, and what the
    libraries do for the scene (a fake API deep-copying its objects), are not counted."""

    def __init__(self, product: Path, scene: tuple[Path, ...]) -> None:
        # as the modules were imported: co_filename says the same
        self._product = str(product) + os.sep
        self._scene = tuple(str(root) + os.sep for root in scene)
        self.calls = 0
        self._ticks = itertools.count()

    def _for_product(self, frame: FrameType | None) -> bool:
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(self._product):
                return True
            if name.startswith(self._scene):
                return False
            frame = frame.f_back
        return False  # a thread's own start-up, below any caller of ours

    def _profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call" and self._for_product(frame):
            next(self._ticks)  # one C call, atomic under the GIL: threads never lose a count

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        """Count on this thread and on threads started inside the block; join those threads inside it."""
        if sys.getprofile() is not None:
            raise RuntimeError("another profiler is active: calls cannot be counted")
        self._ticks = itertools.count()
        threading.setprofile(self._profile)
        sys.setprofile(self._profile)
        try:
            yield
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
            self.calls += next(self._ticks)


class ParkingFlag(threading.Event):
    """A waiter's flag that counts the times its thread blocked on it (a wait that found it set returns at once
    and does not count). The driving test acts, then waits for the next park: the run has taken the action in.
    The thread calls ended() as it ends, which counts as a park that never returns."""

    def __init__(self) -> None:
        super().__init__()
        self._parked = threading.Condition()
        self.parks = 0
        self._ended = False

    def wait(self, timeout: float | None = None) -> bool:
        if not self.is_set():
            with self._parked:
                self.parks += 1
                self._parked.notify_all()
        return super().wait(timeout)

    def ended(self) -> None:
        with self._parked:
            self._ended = True
            self._parked.notify_all()

    def parked_after(self, parks: int, what: str, timeout: float = 10.0) -> None:
        """Until the thread has blocked more than `parks` times in all, or ended; AssertionError after `timeout`
        real seconds (a safety net: a passing test never gets near it)."""
        with self._parked:
            if not self._parked.wait_for(lambda: self.parks > parks or self._ended, timeout):
                raise AssertionError(f"the run did not take in {what} (parked {self.parks} times)")
