"""The shape of every long-lived activity: one named daemon thread with a stop Event.

start() once, stop() any number of times (it only sets the event; subclasses extend it to wake what
their thread blocks on), join(timeout) on shutdown. Loops are `while not self._stop.wait(interval):`
so a stop is noticed at once, never after a sleep.

A thread that ends while nobody asked it to stop (its loop returned, or an exception escaped it)
reports itself to the `Deaths` it was given (`supervised_by`): the supervisor waits on that, it does
not poll threads. PeriodicThread is the "call tick() every interval, log what a tick raises, go on"
loop that the reapers, the elector and the config watcher share.
"""
from __future__ import annotations

import logging
import threading

from kuberhealthy.base.osnames import name_this_thread

logger = logging.getLogger(__name__)


class Deaths:
    """Where threads report an unexpected end. `event` is set on the first report (or by wake())."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: list[str] = []
        self.event = threading.Event()

    def report(self, name: str) -> None:
        with self._lock:
            self._names.append(name)
        self.event.set()

    def names(self) -> list[str]:
        with self._lock:
            return list(self._names)

    def wake(self) -> None:
        """Let whoever waits on `event` look again (used on shutdown)."""
        self.event.set()


class BackgroundThread:
    finite = False  # True: the thread may end by itself (a one-off job); only an exception is a death

    def __init__(self, name: str) -> None:
        self.name = name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._deaths: Deaths | None = None

    def supervised_by(self, deaths: Deaths) -> None:
        """Report an unexpected end of this thread to `deaths` (call before start())."""
        self._deaths = deaths

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} was already started; make a new instance")
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def stopping(self) -> bool:
        return self._stop.is_set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _main(self) -> None:
        name_this_thread(self.name)
        failed = False
        try:
            self._run()
        except BaseException:  # the thread's top: what escaped _run() ends it, and it says so
            logger.exception("%s: thread failed", self.name)
            failed = True
        if not self._stop.is_set() and (failed or not self.finite):
            logger.error("%s: thread ended unexpectedly", self.name)
            if self._deaths is not None:
                self._deaths.report(self.name)

    def _run(self) -> None:
        raise NotImplementedError


class PeriodicThread(BackgroundThread):
    """Calls tick() every `interval` seconds (first at once when `tick_at_start`) until stop().

    A tick that raises is logged, passed to tick_failed(), and the loop goes on: one bad cycle must
    not end the activity. finish() runs on the thread after the last tick (e.g. release a Lease).
    """

    def __init__(self, name: str, interval: float, *, tick_at_start: bool = False) -> None:
        super().__init__(name)
        self.interval = interval
        self._tick_at_start = tick_at_start

    def tick(self) -> None:
        raise NotImplementedError

    def tick_failed(self) -> None:
        """Called after a tick raised (the exception is already logged)."""

    def finish(self) -> None:
        """Called on the thread once the loop has ended."""

    def _safe_tick(self) -> None:
        try:
            self.tick()
        except Exception:  # the loop's top
            logger.exception("%s: cycle failed; next try in %.1fs", self.name, self.interval)
            self.tick_failed()

    def _run(self) -> None:
        if self._tick_at_start:
            self._safe_tick()
        while not self._stop.wait(self.interval):
            self._safe_tick()
        self.finish()
