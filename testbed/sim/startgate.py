"""Pods that start slowly, on purpose: a token bucket between a pod's first Pending status and Running.

A saturated node or container runtime starts containers no faster than it can: when checks are due
faster than that, Pending pods pile up. `SimKubelet(timings=Timings(start_rate=R))` gives every pod a place in one
first-come-first-served queue after its ContainerCreating status is written, and lets at most R pods per
second (burst 1) go on to Running; `set_rate()` changes R while pods wait (0: the gate is open, every
waiting pod goes at once). A pod deleted while it waits leaves the queue without using a turn. Without
a start_rate (the default) there is no gate at all and nothing changes.

One thread (`sim-start-gate`) hands out the turns; each waiting pod's thread blocks on an event of its
own, which its cancel() sets too, so a deletion wakes only that pod. What it does not do: decide what
happens after the turn (the pod's driver goes on with its own delays), or order pods other than by arrival.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

JOIN_TIMEOUT = 5.0
GRANTS_KEPT = 1000  # the times of the latest turns kept, for tests and benchmarks


@dataclass(frozen=True)
class _Waiting:
    turn: threading.Event  # set by the gate (the pod's turn) or by the pod's cancel()
    cancelled: threading.Event


class StartGate:
    """At most `rate` pods per second through admit(), in arrival order. start() once, stop() once."""

    def __init__(self, rate: float = 0.0) -> None:
        self._rate = max(0.0, rate)
        self._cond = threading.Condition()
        self._queue: deque[_Waiting] = deque()
        self._last = float("-inf")  # monotonic time of the last turn: the next is 1/rate after it (burst 1)
        self._stopped = False
        self.granted = 0  # turns given
        self.dropped = 0  # pods that left the queue cancelled (deleted while waiting)
        self.peak_waiting = 0  # the longest the queue has been (cancelled entries not yet dropped included)
        self.granted_at: deque[float] = deque(maxlen=GRANTS_KEPT)  # monotonic times of the latest turns
        self._thread = threading.Thread(target=self._run, name="sim-start-gate", daemon=True)

    @property
    def rate(self) -> float:
        with self._cond:
            return self._rate

    def set_rate(self, rate: float) -> None:
        """Pods per second from now on (0: open)."""
        with self._cond:
            if rate != self._rate:
                logger.info("start rate %.3g -> %.3g pods/s", self._rate, rate)
            self._rate = max(0.0, rate)
            self._cond.notify_all()

    def start(self) -> StartGate:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop handing out turns; pods still waiting are the kubelet's to cancel."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread.ident is not None:
            self._thread.join(JOIN_TIMEOUT)

    def admit(self, turn: threading.Event, cancelled: threading.Event) -> bool:
        """Block until the pod's turn (True) or its cancellation (False). The caller's cancel() must set
        `turn` as well as `cancelled`, so a deleted pod stops waiting at once."""
        with self._cond:
            if self._stopped or cancelled.is_set():
                return False
            if self._rate <= 0 and not self._queue:
                self.granted += 1
                self.granted_at.append(time.monotonic())
                return True
            self._queue.append(_Waiting(turn, cancelled))
            self.peak_waiting = max(self.peak_waiting, len(self._queue))
            self._cond.notify_all()
        turn.wait()
        return not cancelled.is_set()

    def stats(self) -> dict[str, Any]:
        with self._cond:
            waiting = sum(1 for w in self._queue if not w.cancelled.is_set())
            return {"rate": self._rate, "granted": self.granted, "dropped": self.dropped, "waiting": waiting,
                    "peak_waiting": self.peak_waiting}

    def _head(self) -> _Waiting | None:
        """The first pod still waiting (under the lock); cancelled ones ahead of it are dropped."""
        while self._queue and self._queue[0].cancelled.is_set():
            self._queue.popleft()
            self.dropped += 1
        return self._queue[0] if self._queue else None

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                head = self._head()
                if head is None:
                    self._cond.wait()
                    continue
                now = time.monotonic()
                if self._rate > 0 and now < self._last + 1.0 / self._rate:
                    self._cond.wait(self._last + 1.0 / self._rate - now)  # set_rate() and stop() wake it early
                    continue
                self._queue.popleft()
                self.granted += 1
                self._last = now
                self.granted_at.append(now)
                head.turn.set()
