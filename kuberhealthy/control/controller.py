"""The control loop: which checks run, not how.

Events arrive on a queue: khcheck changes (from the khcheck cache), khjob changes, leadership, stop.
Becoming leader is queued (the elector thread must go on renewing while checks start); losing the
lead is handled synchronously on the elector's call, so every worker has stopped (and removed its
pod) before the elector lets the Lease go.

Khcheck changes are debounced: reconciliations are at least `checkChangeDebounce` apart. A
reconciliation is per check: new checks start, deleted ones stop, and only checks whose runInterval,
timeout, podSpec, extraLabels or extraAnnotations changed restart (v2 restarted them all).

Each check runs on its own CheckWorker, each khjob on a JobWorker (workers.py).

Run now (runnow.py): a khcheck change that sets the run-now annotation is acted on at once, not after
the debounce: the check's worker starts a run (or, with a run in flight, the request is dropped and
the annotation removed). A new worker whose khcheck carries the annotation (leadership just began, or
the check is new) runs at once too.

Pause (pause.py): a khcheck change that sets, changes or removes the pause annotations nudges that
check's worker at once (it waits out the pause, or runs at once when it ended); an unparsable
paused-until value is logged and raises a PauseIgnored Warning Event, once per value.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
import zlib
from collections.abc import Callable

from kuberhealthy.base.errors import ApiError
from kuberhealthy.base.threads import BackgroundThread
from kuberhealthy.base.times import parse_time
from kuberhealthy.control.workers import CheckWorker, JobWorker, RunnerFactory
from kuberhealthy.kube import KHJOBS, Obj, key_of
from kuberhealthy.needs import ControlNeeds, Part
from kuberhealthy.outputs.events import KIND_CHECK, ObjectRef
from kuberhealthy.records import khstate, pause, runnow
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.run.runner import Runner

logger = logging.getLogger(__name__)

MAX_SPREAD = 30.0  # seconds: the widest window a batch of overdue checks is spread over (never over half an interval)
MAX_GAP = 0.25  # seconds: the widest gap between two first runs of such a batch (a small batch starts at once)
RUN_NOW_EVENT = "run-now:"  # + "<ns>/<name>": the khcheck's run-now annotation was newly set
PAUSE_EVENT = "pause:"  # + "<ns>/<name>": the khcheck's pause annotations changed


def spread(overdue: list[CheckSpec], now: float) -> dict[str, float]:
    """First due times for checks that are overdue or never ran, started together: evenly over a window
    of min(MAX_SPREAD, half the interval), at most MAX_GAP apart (a small batch starts at once).

    Evenly, not as fast as possible: a check keeps the phase of its first run, so a batch started within
    a few seconds would come due within a few seconds every interval after, for good (a burst of pods
    each time, a backlog where the cluster starts pods slowly)."""
    # A stable, name-independent order, so the same checks are not always the last of a batch.
    order = sorted(overdue, key=lambda sp: zlib.crc32(sp.key.encode()))
    return {spec.key: now + i * min(MAX_GAP, min(MAX_SPREAD, spec.run_interval / 2) / len(order))
            for i, spec in enumerate(order)}


class Controller(BackgroundThread):
    """Starts and stops check workers, job workers and leader-only parts."""

    def __init__(self, services: ControlNeeds, leader_parts: Callable[[], list[Part]] = list,
                 runner: RunnerFactory = Runner, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        super().__init__("kh-controller")
        self.services = services
        self._leader_parts_factory = leader_parts
        self._runner = runner
        self._clock = clock
        self._wall = wall  # LastRun is wall time: a check's cadence continues from it
        self._events: queue.Queue[str] = queue.Queue()
        self._lock = threading.RLock()
        self._leading = False
        self._want_lead = False  # the elector says we lead; the loop acts on it
        self.workers: dict[str, CheckWorker] = {}
        self.jobs: dict[str, JobWorker] = {}
        self._retiring: list[CheckWorker] = []  # stopped by a reconcile, maybe still removing a pod
        self._parts: list[Part] = []
        self._last_reconcile = -1e18
        self._specs: dict[str, tuple[str, CheckSpec]] = {}  # key -> (resourceVersion, parsed spec)
        self.reconciles = 0
        self._pause_warned: dict[str, str] = {}  # key -> the unparsable paused-until value warned about
        services.khchecks.add_listener(self._check_changed)
        services.khjobs.add_listener(lambda *_: self._events.put("jobs"))

    def stop(self) -> None:
        super().stop()
        self._events.put("stop")
        self.lost_leadership()

    def _check_changed(self, etype: str, obj: Obj, prev: Obj | None) -> None:
        """The khcheck cache's listener (its watch thread): queue, never act here."""
        self._events.put("checks")
        if etype != "DELETED" and runnow.newly_requested(obj, prev) is not None:
            self._events.put(RUN_NOW_EVENT + key_of(obj))
        if etype != "DELETED" and pause.changed(obj, prev):
            self._events.put(PAUSE_EVENT + key_of(obj))

    # --- leadership (called synchronously by the elector) ------------------------------------------

    def became_leader(self) -> None:
        """Called by the elector; the controller thread starts the checks."""
        if self._stop.is_set():
            return
        self._want_lead = True
        self._events.put("lead")

    def _start_leading(self) -> None:
        self.services.wait_synced(30.0)  # outside the lock: a step-down must never wait for this
        with self._lock:
            if self._leading or not self._want_lead or self._stop.is_set():
                return
            self._leading = True
            logger.info("Leading: starting checks")
            self._parts = self._leader_parts_factory()
            for part in self._parts:
                part.supervised_by(self.services.deaths)
                part.start()
            self._reconcile_checks(continuity=True)
            self._recover_jobs()
            self._reconcile_jobs()

    def lost_leadership(self, timeout: float = 30.0) -> None:
        """Stop every worker and leader-only part, and wait for them (their pods are removed)."""
        self._want_lead = False
        with self._lock:
            if not self._leading:
                return
            self._leading = False
            logger.info("Not leading: stopping %d checks and %d jobs", len(self.workers), len(self.jobs))
            everything: list[Part] = [*self.workers.values(), *self.jobs.values(), *self._retiring, *self._parts]
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

    def restart_checks(self) -> None:
        """Stop every check and start it again now (a setting every run uses changed)."""
        with self._lock:
            for worker in self.workers.values():
                worker.stop()
                self._retiring.append(worker)
            self.workers.clear()
            if self._leading:
                self._reconcile_checks()

    def restart_leader_parts(self, timeout: float = 30.0) -> None:
        """Replace the leader-only parts (reapers) with new ones built from the current config."""
        with self._lock:
            old, self._parts = self._parts, []
            for part in old:
                part.stop()
            for part in old:
                part.join(timeout)
            if self._leading:
                self._parts = self._leader_parts_factory()
                for part in self._parts:
                    part.supervised_by(self.services.deaths)
                    part.start()

    # --- the loop ------------------------------------------------------------------------------------

    def _run(self) -> None:
        dirty = False
        while True:
            timeout = None
            if dirty:
                timeout = max(0.0, self._last_reconcile + self.services.config.check_change_debounce - self._clock())
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
                elif event.startswith(RUN_NOW_EVENT):
                    self._run_now(event[len(RUN_NOW_EVENT):])
                elif event.startswith(PAUSE_EVENT):
                    self._pause_changed(event[len(PAUSE_EVENT):])
                elif event == "jobs":
                    with self._lock:
                        if self._leading:
                            self._reconcile_jobs()
                due = self._last_reconcile + self.services.config.check_change_debounce
                if dirty and self._clock() >= due:
                    dirty = False
                    with self._lock:
                        if self._leading:
                            self._reconcile_checks()
            except Exception:  # keep controlling; the next event retries
                logger.exception("Controller loop error")

    def _reconcile_checks(self, continuity: bool = False) -> None:
        """Start new checks, stop deleted ones, restart changed ones.

        With `continuity` (leadership just began) each check keeps its cadence: next due at its
        khstate's LastRun + runInterval. Otherwise, and for checks that never ran or are overdue, the
        first run is now, spread over a short window so a thousand checks are not a thousand pods in
        the same second.
        """
        self._last_reconcile = self._clock()
        self.reconciles += 1
        desired = {key_of(o): self._spec(o) for o in self.services.khchecks.list()}
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
        new = [spec for key, spec in desired.items() if key not in self.workers]
        dues = self._first_dues(new, continuity)
        for spec in new:
            worker = CheckWorker(self.services, spec, self._runner, self._clock, first_due=dues[spec.key],
                                 wall=self._wall)
            self._check_pause_value(spec)
            if runnow.requested(self.services.khchecks.get(spec.namespace, spec.name)) is not None:
                worker.run_now()  # asked for while nobody led, or with the check (no second Event)
            self.workers[spec.key] = worker
            worker.start()
            logger.info("Check %s started (every %.0fs, timeout %.0fs, first run in %.1fs)", spec.key,
                        spec.run_interval, spec.timeout, max(0.0, dues[spec.key] - self._clock()))

    def _run_now(self, key: str) -> None:
        """The run-now annotation was newly set on this khcheck: run it at once on its worker."""
        with self._lock:
            worker = self.workers.get(key) if self._leading else None
        if worker is None:
            return  # not leading (the next leader finds it), or a new check (its reconcile runs it)
        ns, name = worker.spec.namespace, worker.spec.name
        value = runnow.requested(self.services.khchecks.get(ns, name))
        if value is None:
            return  # removed since: the run it asked for has started
        if not runnow.by_api(value):
            self.services.events.run_requested(ObjectRef(KIND_CHECK, ns, name, worker.spec.uid), "annotation")
        if not worker.run_now():
            logger.info("Check %s: a run was requested while one is in flight; dropped", key)
            runnow.clear(self.services.resources, ns, name, current=self.services.khchecks.get(ns, name))

    def _pause_changed(self, key: str) -> None:
        """The pause annotations of this khcheck changed: its worker looks again at once."""
        with self._lock:
            worker = self.workers.get(key) if self._leading else None
            if worker is None:
                return  # not leading (the next leader reads it), or a new check (its reconcile does)
            self._check_pause_value(worker.spec)
        worker.nudge()

    def _check_pause_value(self, spec: CheckSpec) -> None:
        """Log and raise PauseIgnored for an unparsable paused-until value, once per value."""
        bad = pause.unparsable(self.services.khchecks.get(spec.namespace, spec.name))
        if bad is None:
            self._pause_warned.pop(spec.key, None)
            return
        if self._pause_warned.get(spec.key) == bad:
            return
        self._pause_warned[spec.key] = bad
        logger.warning("Check %s: ignoring %s=%r: not an RFC 3339 time with an offset (e.g. "
                       "2026-12-02T06:00:00Z); the check is not paused", spec.key, pause.PAUSED_UNTIL, bad)
        self.services.events.pause_ignored(ObjectRef(KIND_CHECK, spec.namespace, spec.name, spec.uid),
                                           pause.PAUSED_UNTIL, bad)

    def _first_dues(self, specs: list[CheckSpec], continuity: bool) -> dict[str, float]:
        now, wall = self._clock(), self._wall()
        dues: dict[str, float] = {}
        overdue: list[CheckSpec] = []
        for spec in specs:
            last = None
            if continuity:
                state = self.services.khstates.get(spec.namespace, spec.name)
                last = parse_time(khstate.Spec.of(state).last_run) if state is not None else None
            if last is not None and last + spec.run_interval > wall:
                dues[spec.key] = now + min(spec.run_interval, last + spec.run_interval - wall)
            else:
                overdue.append(spec)
        dues.update(spread(overdue, now))
        return dues

    def _recover_jobs(self) -> None:
        """khjobs left Running by a previous leader: finished (its run reported) or reset to run again."""
        for job in self.services.khjobs.list():
            if str((job.get("spec") or {}).get("phase") or "") != "Running" or key_of(job) in self.jobs:
                continue
            meta = job.get("metadata") or {}
            ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
            state = self.services.khstates.get(ns, name)
            done = state is not None and bool(khstate.reported_uuid(state)) and \
                khstate.reported_uuid(state) == khstate.Spec.of(state).uuid
            phase = "Completed" if done else ""
            try:
                self.services.resources.merge_patch(KHJOBS, ns, name, {"spec": {"phase": phase}})
                logger.info("Job %s/%s was left Running by a previous leader: %s", ns, name,
                            "its run had reported; marked Completed" if done else "reset to run again")
            except ApiError as e:
                logger.warning("Job %s/%s was left Running; cannot recover it yet: %s", ns, name, e)

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
        for job in self.services.khjobs.list():
            key = key_of(job)
            if key in self.jobs or str((job.get("spec") or {}).get("phase") or ""):
                continue
            worker = JobWorker(self.services, job, self._runner, self._clock)
            self.jobs[key] = worker
            worker.start()
            logger.info("Job %s started", key)
