"""The control loop: which checks run, not how.

Events arrive on a queue: khcheck changes (from the khcheck cache), khjob changes, leadership, stop.
Becoming leader is queued (the elector thread must go on renewing while checks start); losing the
lead is handled synchronously on the elector's call, so every worker has stopped (and removed its
pod) before the elector lets the Lease go.

Khcheck changes are debounced: reconciliations are at least `checkChangeDebounce` apart. A
reconciliation is per check: new checks start, deleted ones stop, and only checks whose runInterval,
timeout, podSpec, extraLabels or extraAnnotations changed restart (v2 restarted them all).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from kuberhealthy import khstate
from kuberhealthy.checks import CheckSpec
from kuberhealthy.errors import ApiError
from kuberhealthy.kube import KHJOBS, Obj, key_of
from kuberhealthy.runner import Runner
from kuberhealthy.threads import BackgroundThread

logger = logging.getLogger(__name__)

RunnerFactory = Callable[[Any, CheckSpec, threading.Event], Runner]


class _Worker(BackgroundThread):
    """A thread that runs one check's (or job's) runs; stopping it also ends the current run at once."""

    def __init__(self, services: Any, spec: CheckSpec, runner: RunnerFactory, name: str) -> None:
        super().__init__(name)
        self.s = services
        self.spec = spec
        self._runner = runner

    def stop(self) -> None:
        super().stop()
        self.s.notifier.wake()  # the run's waits share the notifier; wake them to see the stop


class CheckWorker(_Worker):
    """One check's thread: run now, then every runInterval measured from each run's start."""

    def __init__(self, services: Any, spec: CheckSpec, runner: RunnerFactory = Runner,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(services, spec, runner, f"kh-check-{spec.namespace}/{spec.name}")
        self._clock = clock
        self.runs = 0

    def _run(self) -> None:
        next_due = self._clock()
        while not self._stop.wait(max(0.0, next_due - self._clock())):
            started = self._clock()
            try:
                self._runner(self.s, self.spec, self._stop).run()
            except Exception as e:  # the run could not even record its failure: log, keep the schedule
                logger.exception("Check %s: run crashed", self.spec.key)
                if not self._stop.is_set():
                    self._record_crash(e)
            self.runs += 1
            next_due = max(started + self.spec.run_interval, self._clock())

    def _record_crash(self, e: Exception) -> None:
        try:
            khstate.record_error(self.s.resources, self.spec.namespace, self.spec.name,
                                 [f"Check execution error: {self.spec.key}: {e}"], self.s.config.pod_name,
                                 workload=self.spec.workload)
        except Exception:  # this worker must outlive whatever went wrong; the next run tries again
            logger.exception("Check %s: could not record the crash in its khstate", self.spec.key)


class JobWorker(_Worker):
    """A khjob runs once: phase "" → Running → (the run) → Completed."""

    def __init__(self, services: Any, job: Obj, runner: RunnerFactory = Runner) -> None:
        spec = CheckSpec.of_job(job)
        super().__init__(services, spec, runner, f"kh-job-{spec.key}")

    def _set_phase(self, phase: str) -> None:
        self.s.resources.merge_patch(KHJOBS, self.spec.namespace, self.spec.name, {"spec": {"phase": phase}})

    def _run(self) -> None:
        try:
            self._set_phase("Running")
            self._runner(self.s, self.spec, self._stop).run()
            if not self._stop.is_set():
                self._set_phase("Completed")
        except ApiError as e:
            logger.warning("Job %s: %s", self.spec.key, e)
        except Exception:  # top of this thread's only loop
            logger.exception("Job %s crashed", self.spec.key)


class Controller(BackgroundThread):
    """Starts and stops check workers, job workers and leader-only parts."""

    def __init__(self, services: Any, leader_parts: Callable[[], list[Any]] = list,
                 runner: RunnerFactory = Runner, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__("kh-controller")
        self.s = services
        self._leader_parts_factory = leader_parts
        self._runner = runner
        self._clock = clock
        self._events: queue.Queue[str] = queue.Queue()
        self._lock = threading.RLock()
        self._leading = False
        self._want_lead = False  # the elector says we lead; the loop acts on it
        self.workers: dict[str, CheckWorker] = {}
        self.jobs: dict[str, JobWorker] = {}
        self._retiring: list[CheckWorker] = []  # stopped by a reconcile, maybe still removing a pod
        self._parts: list[Any] = []
        self._last_reconcile = -1e18
        self._specs: dict[str, tuple[str, CheckSpec]] = {}  # key -> (resourceVersion, parsed spec)
        self.reconciles = 0
        services.khchecks.add_listener(lambda *_: self._events.put("checks"))
        services.khjobs.add_listener(lambda *_: self._events.put("jobs"))

    def stop(self) -> None:
        super().stop()
        self._events.put("stop")
        self.lost_leadership()

    # --- leadership (called synchronously by the elector) ------------------------------------------

    def became_leader(self) -> None:
        """Called by the elector; the controller thread starts the checks."""
        if self._stop.is_set():
            return
        self._want_lead = True
        self._events.put("lead")

    def _start_leading(self) -> None:
        self.s.wait_synced(30.0)  # outside the lock: a step-down must never wait for this
        with self._lock:
            if self._leading or not self._want_lead or self._stop.is_set():
                return
            self._leading = True
            logger.info("Leading: starting checks")
            self._parts = self._leader_parts_factory()
            for part in self._parts:
                part.start()
            self._reconcile_checks()
            self._reconcile_jobs()

    def lost_leadership(self, timeout: float = 30.0) -> None:
        """Stop every worker and leader-only part, and wait for them (their pods are removed)."""
        self._want_lead = False
        with self._lock:
            if not self._leading:
                return
            self._leading = False
            logger.info("Not leading: stopping %d checks and %d jobs", len(self.workers), len(self.jobs))
            everything: list[Any] = [*self.workers.values(), *self.jobs.values(), *self._retiring, *self._parts]
            for w in everything:
                w.stop()
            deadline = self._clock() + timeout
            for w in everything:
                w.join(max(0.1, deadline - self._clock()))
            self.workers.clear()
            self.jobs.clear()
            self._retiring = []
            self._parts = []

    def is_leading(self) -> bool:
        return self._leading

    # --- the loop ------------------------------------------------------------------------------------

    def _run(self) -> None:
        dirty = False
        while True:
            timeout = None
            if dirty:
                timeout = max(0.0, self._last_reconcile + self.s.config.check_change_debounce - self._clock())
            try:
                event = self._events.get(timeout=timeout)
            except queue.Empty:
                event = ""
            try:
                if event == "stop":
                    return
                if event == "lead":
                    self._start_leading()
                elif event == "checks":
                    dirty = True
                elif event == "jobs":
                    with self._lock:
                        if self._leading:
                            self._reconcile_jobs()
                due = self._last_reconcile + self.s.config.check_change_debounce
                if dirty and self._clock() >= due:
                    dirty = False
                    with self._lock:
                        if self._leading:
                            self._reconcile_checks()
            except Exception:  # keep controlling; the next event retries
                logger.exception("Controller loop error")

    def _reconcile_checks(self) -> None:
        self._last_reconcile = self._clock()
        self.reconciles += 1
        desired = {key_of(o): self._spec(o) for o in self.s.khchecks.list()}
        self._specs = {k: v for k, v in self._specs.items() if k in desired}
        # Stopped workers are not joined here (a step-down must never wait behind a slow pod removal):
        # a restarted check's new run waits in CLEAR for the old run's pod to go anyway.
        self._retiring = [w for w in self._retiring if w.is_alive()]
        for key, worker in list(self.workers.items()):
            if desired.get(key) != worker.spec:
                logger.info("Check %s %s", key, "changed: restarting" if key in desired else "removed: stopping")
                worker.stop()
                self._retiring.append(worker)
                del self.workers[key]
        for key, spec in desired.items():
            if key not in self.workers:
                worker = CheckWorker(self.s, spec, self._runner, self._clock)
                self.workers[key] = worker
                worker.start()
                logger.info("Check %s started (every %.0fs, timeout %.0fs)", key, spec.run_interval, spec.timeout)

    def _spec(self, obj: Obj) -> CheckSpec:
        """Parse a khcheck once per version (a bad runInterval is then logged once, not per reconcile)."""
        key, rv = key_of(obj), str((obj.get("metadata") or {}).get("resourceVersion") or "")
        cached = self._specs.get(key)
        if cached is None or cached[0] != rv or not rv:
            cached = (rv, CheckSpec.of(obj))
            self._specs[key] = cached
        return cached[1]

    def _reconcile_jobs(self) -> None:
        for key, worker in list(self.jobs.items()):
            if not worker.is_alive():
                del self.jobs[key]
        for job in self.s.khjobs.list():
            key = key_of(job)
            if key in self.jobs or str((job.get("spec") or {}).get("phase") or ""):
                continue
            worker = JobWorker(self.s, job, self._runner)
            self.jobs[key] = worker
            worker.start()
            logger.info("Job %s started", key)
