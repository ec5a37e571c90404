"""The shape of every long-lived activity: one named daemon thread with a stop Event.

start() once, stop() any number of times (it only sets the event; subclasses extend it to wake what
their thread blocks on), join(timeout) on shutdown, is_alive() for the supervisor. Loops are
`while not self._stop.wait(interval):` so a stop is noticed at once, never after a sleep.
"""
from __future__ import annotations

import threading


class BackgroundThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} was already started; make a new instance")
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        raise NotImplementedError
