"""Reports accepted while the API server was away, written as soon as it is back.

A checker pod reports once and its client gives up at its deadline; if the khstate write fails
because the control plane is unreachable or overloaded, refusing the report would turn a healthy
check into a false alarm. So the report handler hands the report here, answers 200, and this part's
thread writes them, a few at a time, with a jittered backoff until it is stored, refused, or its run's
deadline has passed. khstate.record_report decides on the khstate as it is when written: a held report
is written only while the khstate still names its run as current and not finished (a run meanwhile
finished as an error keeps its error), and not without a token for a check bound to tokens meanwhile;
otherwise it is dropped and counted by why (DROP_REASONS; `dropped_by`).

Bounded: at most MAX_HELD reports (the handler answers 503 beyond that). Each replica holds only
what it accepted; nothing is persisted (a replica that dies loses its held reports, and those runs
end as skipped or timed out, as without this).
"""
from __future__ import annotations

import datetime as dt
import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from kuberhealthy.base.errors import ApiError, is_transient
from kuberhealthy.base.threads import BackgroundThread
from kuberhealthy.kube import Api, Bounds
from kuberhealthy.records import khstate

logger = logging.getLogger(__name__)

MAX_HELD = 5000
RETRY_FIRST = 0.25  # seconds
RETRY_MAX = 2.0  # seconds
WRITE_TIMEOUT = 5.0  # seconds per request while flushing
FLUSH_WORKERS = 8  # held reports written at once
# why a held report was dropped: its deadline passed; its run was no longer current; its run was over;
# its check was bound to tokens and it had none; a lasting API error
EXPIRED, STALE, FINISHED, TOKEN_BOUND, FAILED = "expired", "stale", "finished", "token-bound", "failed"
DROP_REASONS = (EXPIRED, STALE, FINISHED, TOKEN_BOUND, FAILED)


@dataclass(frozen=True)
class Held:
    namespace: str
    check: str
    run_uuid: str
    ok: bool
    errors: tuple[str, ...]
    received: dt.datetime  # becomes LastRun: when the checker reported, not when we could write
    expires: float  # wall-clock unix seconds (the run's KH_CHECK_RUN_DEADLINE, plus a little)
    binding: khstate.TokenBinding | None = field(default=None)  # as judged when it was accepted
    store: khstate.StateStore = field(default=khstate.KHSTATE_STORE)  # where the check's state lives


class HeldReports(BackgroundThread):
    def __init__(self, resources: Api, pod_name: Callable[[], str],
                 wall: Callable[[], float] = time.time) -> None:
        super().__init__("kh-held-reports")
        self._res = resources
        self._pod_name = pod_name
        self._wall = wall
        self._lock = threading.Lock()
        self._held: dict[str, Held] = {}  # by run uuid: a re-sent report replaces the held one
        self._wakeup = threading.Event()
        self.written = 0
        self.dropped = 0
        self.dropped_by = dict.fromkeys(DROP_REASONS, 0)

    def add(self, report: Held) -> bool:
        """Hold a report; False when the store is full (the caller answers 503)."""
        with self._lock:
            if report.run_uuid not in self._held and len(self._held) >= MAX_HELD:
                return False
            self._held[report.run_uuid] = report
        logger.warning("Holding the report of run %s for %s/%s until the API server answers", report.run_uuid,
                       report.namespace, report.check)
        self._wakeup.set()
        return True

    def holds(self, run_uuid: str) -> bool:
        with self._lock:
            return run_uuid in self._held

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def stop(self) -> None:
        super().stop()
        self._wakeup.set()

    def flush_once(self) -> bool:
        """Try every held report once, FLUSH_WORKERS at a time; True when nothing is left.

        Each report is tried on its own: a slow or failing write does not hold up the others (an API
        server that is slow rather than away still stores most of them within their deadlines).
        """
        with self._lock:
            pending = list(self._held.values())
        if not pending:
            return True
        workers = min(FLUSH_WORKERS, len(pending))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kh-held-write") as pool:
            list(pool.map(self._flush, pending))
        return len(self) == 0

    def _flush(self, held: Held) -> None:
        if self._stop.is_set():
            return
        if self._wall() > held.expires:
            logger.warning("Dropping the held report of run %s for %s/%s: its deadline passed",
                           held.run_uuid, held.namespace, held.check)
            self._forget(held, EXPIRED)
            return
        try:
            write = khstate.RunWrite(self._res, held.namespace, held.check, held.run_uuid, self._pod_name(),
                                     bounds=Bounds(WRITE_TIMEOUT), store=held.store)
            khstate.record_report(write, held.ok, list(held.errors), now=held.received, binding=held.binding)
        except khstate.RunFinished:
            logger.warning("Held report of run %s for %s/%s dropped: the run was finished meanwhile",
                           held.run_uuid, held.namespace, held.check)
            self._forget(held, FINISHED)
        except khstate.StaleReport:
            logger.info("Held report of run %s for %s/%s is stale now; dropped", held.run_uuid,
                        held.namespace, held.check)
            self._forget(held, STALE)
        except khstate.TokenBound as e:
            logger.warning("Held report of run %s dropped: %s", held.run_uuid, e)
            self._forget(held, TOKEN_BOUND)
        except ApiError as e:
            if is_transient(e):
                logger.debug("Held report of run %s not written yet: %s", held.run_uuid, e)
                return  # kept; the next round tries again
            logger.error("Held report of run %s for %s/%s cannot be written: %s", held.run_uuid,
                         held.namespace, held.check, e)
            self._forget(held, FAILED)
        else:
            logger.info("Wrote the held report of run %s for %s/%s", held.run_uuid, held.namespace, held.check)
            self._forget(held, None)

    def _forget(self, held: Held, dropped: str | None) -> None:
        """Done with a held report: written (`dropped` None) or dropped for that reason (DROP_REASONS)."""
        with self._lock:
            if self._held.get(held.run_uuid) is held:
                del self._held[held.run_uuid]
            if dropped is None:
                self.written += 1
            else:
                self.dropped += 1
                self.dropped_by[dropped] += 1

    def _run(self) -> None:
        backoff = RETRY_FIRST
        while not self._stop.is_set():
            self._wakeup.wait()
            self._wakeup.clear()
            while not self._stop.is_set():
                try:
                    if self.flush_once():
                        backoff = RETRY_FIRST
                        break
                except Exception:  # keep the held reports; try again after the backoff
                    logger.exception("Writing held reports failed")
                if self._stop.wait(backoff * (0.5 + random.random() / 2)):
                    break
                backoff = min(backoff * 2, RETRY_MAX)
