"""The simulated kubelet's per-pod background threads (a graceful deletion, a disruption): started
unless the kubelet is stopping, forgotten once done, joined on stop."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class ThreadSet:
    """Threads started on behalf of pods; `stop` is the kubelet's: none starts once it is set."""

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self, name: str, target: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            if self._stop.is_set():
                return
            self._threads = [x for x in self._threads if x.is_alive()] + [t]
            t.start()

    def join(self, timeout: float) -> None:
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(timeout)
            if t.is_alive():
                logger.error("%s did not stop within %ss", t.name, timeout)
