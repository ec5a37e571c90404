"""The simulated kubelet's graceful deletion, as a real kubelet does it (Timings.graceful, timings.py).

Per deleted pod, on a thread of its own (`sim-terminate-<ns>/<name>`): after `stop_after` its running
containers "stop" (the status a SIGTERM leaves: exit 143, a sidecar its own SIM_SIDECAR_EXIT; phase
Failed, or Succeeded when every regular container exited 0, while the pod is still Terminating), and
after `remove_after` (`remove_finished_after` for a pod that had finished) the object is deleted
with grace 0. The waits are on the kubelet's stop event only: stop() ends them at
once (the pod is left Terminating). Without graceful timings the kubelet deletes at once instead.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from testbed.sim.driver import PodDriver
from testbed.sim.podmodel import EXIT_SIGTERM
from testbed.sim.podstatus import TERMINAL
from testbed.sim.threadset import ThreadSet
from testbed.sim.timings import Timings

logger = logging.getLogger(__name__)

JOIN_TIMEOUT = 5.0


class Terminator:
    """Graceful deletions: per deleted pod, stop its container, then remove the object, on the timings."""

    def __init__(self, timings: Timings, stop: threading.Event, remove: Callable[[str, str], None]) -> None:
        self.timings = timings
        self._stop = stop
        self._remove = remove  # the kubelet's grace-0 delete (key, uid)
        self._threads = ThreadSet(stop)

    def terminate(self, driver: PodDriver) -> None:
        """Start the pod's graceful deletion (once per pod: the caller dedupes by uid)."""
        self._threads.start(f"sim-terminate-{driver.record.key}", self._run, driver)

    def join(self, timeout: float) -> None:
        self._threads.join(timeout)

    def _run(self, driver: PodDriver) -> None:
        try:
            self._terminate(driver)
        except Exception:  # top of the thread: log, never kill the test process
            logger.exception("graceful deletion of %s failed", driver.record.key)
            driver.record.errors.append("graceful deletion crashed; see log")

    def _wait_until(self, at: float) -> bool:
        """False when the kubelet stops first."""
        return not self._stop.wait(max(0.0, at - time.monotonic()))

    def _terminate(self, driver: PodDriver) -> None:
        rec = driver.record
        seen = rec.terminating or time.monotonic()
        finished = rec.phase in TERMINAL
        if not finished:
            if not self._wait_until(seen + self.timings.stop_after):
                return
            driver.join(JOIN_TIMEOUT)  # the pod's own thread writes nothing more once cancelled
            patch = driver.stopped_status(EXIT_SIGTERM)
            if patch is not None and not driver.write_status_until(self._stop, patch, "deletion"):
                return
            if patch is not None:
                driver.note_phase()
                logger.debug("pod %s stopped on its deletion (%s); Terminating", rec.key, rec.phase)
        after = self.timings.remove_finished_after if finished else self.timings.remove_after
        if self._wait_until(seen + after):
            self._remove(rec.key, rec.uid)
