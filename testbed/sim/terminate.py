"""The simulated kubelet's graceful deletion, as a real kubelet does it (Timings.graceful, timings.py).

Per deleted pod, on a thread of its own (`sim-terminate-<ns>/<name>`): after `stop_after` its running
container "stops" (the status a SIGTERM leaves: exit 143, phase Failed, while the pod is still
Terminating), and after `remove_after` (`remove_finished_after` for a pod that had finished) the
object is deleted with grace 0. The waits are on the kubelet's stop event only: stop() ends them at
once (the pod is left Terminating). Without graceful timings the kubelet deletes at once instead.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from testbed.cluster.builders import MERGE_PATCH
from testbed.sim.driver import PodDriver
from testbed.sim.rawapi import RawApi, SimApiError
from testbed.sim.timings import Timings

logger = logging.getLogger(__name__)

EXIT_SIGTERM = 143  # 128 + SIGTERM: a container stopped by its pod's deletion
JOIN_TIMEOUT = 5.0


class Terminator:
    """Graceful deletions: per deleted pod, stop its container, then remove the object, on the timings."""

    def __init__(self, api: Callable[[], RawApi | None], timings: Timings, stop: threading.Event,
                 remove: Callable[[str, str], None]) -> None:
        self._api = api
        self.timings = timings
        self._stop = stop
        self._remove = remove  # the kubelet's grace-0 delete (key, uid)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def terminate(self, driver: PodDriver) -> None:
        """Start the pod's graceful deletion (once per pod: the caller dedupes by uid)."""
        t = threading.Thread(target=self._run, args=(driver,), name=f"sim-terminate-{driver.record.key}",
                             daemon=True)
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
        finished = rec.phase in ("Succeeded", "Failed")
        if not finished:
            if not self._wait_until(seen + self.timings.stop_after):
                return
            driver.join(JOIN_TIMEOUT)  # the pod's own thread writes nothing more once cancelled
            patch = driver.stopped_status(EXIT_SIGTERM)
            if patch is not None and not self._write(driver, patch):
                return
            if patch is not None:
                rec.exited, rec.exit_code, rec.phase = time.monotonic(), EXIT_SIGTERM, "Failed"
                logger.debug("pod %s stopped on its deletion (exit %d); Terminating", rec.key, EXIT_SIGTERM)
        after = self.timings.remove_finished_after if finished else self.timings.remove_after
        if self._wait_until(seen + after):
            self._remove(rec.key, rec.uid)

    def _write(self, driver: PodDriver, patch: dict[str, object]) -> bool:
        api = self._api()
        if api is None:
            return False
        meta = (driver.pod.get("metadata") or {})
        path = f"/api/v1/namespaces/{meta.get('namespace')}/pods/{meta.get('name')}/status"
        try:
            return api.call_until(self._stop, "PATCH", path, patch, content_type=MERGE_PATCH) is not None
        except SimApiError as e:
            if e.status != 404:
                driver.record.errors.append(f"status write on deletion: {e}")
            return False
