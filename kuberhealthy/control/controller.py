"""The control loop: which checks run, not how.

Events arrive on a queue: check changes (from each kind's cache), run-once check changes, leadership,
stop. The controller is kind-blind: every kind of check (records/kinds.py: khchecks, khjobs,
HealthCheck) comes with its caches and rules as data. A kind's gate can hold all its checks back (v3's
own controller holds its Lease); a check being deleted, migrated to another kind (`superseded`), or run
once already (`singleRunOnly`) gets no worker; a spec that cannot run is logged and raised as a
SpecInvalid Event once per version, and not run.
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
from kuberhealthy.kube import Obj
from kuberhealthy.needs import ControlNeeds, Part
from kuberhealthy.outputs.events import ObjectRef
from kuberhealthy.records import khstate, pause, runnow
from kuberhealthy.records.checkspec import CheckSpec, SpecProblem
from kuberhealthy.records.kinds import Kind, control_view, switch_marks
from kuberhealthy.run.runner import Runner

logger = logging.getLogger(__name__)

MAX_SPREAD = 30.0  # seconds: the window a batch of overdue checks is spread over (never over half an interval)...
START_RATE = 20.0  # ...unless that would start more than this many a second: then as wide as that needs (<= interval)
MAX_GAP = 0.25  # seconds: the widest gap between two first runs of such a batch (a small batch starts at once)
GATE_RECHECK = 5.0  # seconds between looks at a closed gate (a Lease that stops being renewed says nothing)
SWITCH_EVENT = "switch"  # a check's marks of a move between kinds changed (records/kinds.switch_marks)
RUN_NOW_EVENT = "run-now:"  # + a check's ident: its run-now annotation was newly set
PAUSE_EVENT = "pause:"  # + a check's ident: its pause annotations changed


def spread(overdue: list[CheckSpec], now: float) -> dict[str, float]:
    """First due times for checks that are overdue or never ran, started together: evenly over a window
    of min(MAX_SPREAD, half the interval), at most MAX_GAP apart (a small batch starts at once). A batch
    so large that this window would start more than START_RATE a second (over 600 checks of a minute or
    longer, fewer of shorter intervals) is spread wider, at START_RATE a second, but never over one
    interval.

    Evenly, not as fast as possible: a check keeps the phase of its first run, so a batch started within
    a few seconds would come due within a few seconds every interval after, for good (a burst of pods
    each time, a backlog where the cluster starts pods slowly). And not faster than a cluster takes
    them: a thousand first runs in 30 s are twice the steady rate of a thousand 1-minute checks, each
    run several writes, and measured on the test bed they pushed the API server past its timeouts and
    the first runs into false failures."""
    # A stable, name-independent order, so the same checks are not always the last of a batch.
    order = sorted(overdue, key=lambda sp: zlib.crc32(sp.ident.encode()))
    n = len(order)
    return {spec.ident: now + i * _gap(spec.run_interval, n) for i, spec in enumerate(order)}


def _gap(interval: float, n: int) -> float:
    """Seconds between two first runs of a batch of n checks, for a check of this interval."""
    return min(MAX_GAP, interval / n, max(min(MAX_SPREAD, interval / 2) / n, 1 / START_RATE))


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
        # ident -> (resourceVersion, parsed spec or the problem that keeps it from running)
        self._specs: dict[str, tuple[str, CheckSpec | SpecProblem]] = {}
        self.reconciles = 0
        self._pause_warned: dict[str, str] = {}  # ident -> the unparsable paused-until value warned about
        self._gated: dict[str, str] = {}  # kind name -> why none of its checks runs (as last said)
        self._seen: set[str] = set()  # idents of the checks the last reconcile looked at
        for kind in services.kinds:
            if kind.runs_once:
                kind.checks.add_listener(lambda *_: self._events.put("jobs"))
            else:
                kind.checks.add_listener(self._listener(kind))

    def kinds_changed(self) -> None:
        """Something a kind's gate or a check's pairing depends on changed: reconcile."""
        self._events.put("checks")

    def _listener(self, kind: Kind) -> Callable[[str, Obj, Obj | None], None]:
        def changed(etype: str, obj: Obj, prev: Obj | None) -> None:
            self._check_changed(kind, etype, obj, prev)
        return changed

    def stop(self) -> None:
        super().stop()
        self._events.put("stop")
        self.lost_leadership()

    def _check_changed(self, kind: Kind, etype: str, obj: Obj, prev: Obj | None) -> None:
        """A check cache's listener (its watch thread): queue, never act here. A change of the status
        alone (a check keeping its state in itself writes it every run) changes nothing here."""
        if etype == "MODIFIED" and prev is not None and control_view(obj) == control_view(prev):
            return
        self._events.put(SWITCH_EVENT if switch_marks(obj) != switch_marks(prev) else "checks")
        if etype != "DELETED" and runnow.newly_requested(obj, prev) is not None:
            self._events.put(RUN_NOW_EVENT + kind.ident_of(obj))
        if etype != "DELETED" and pause.changed(obj, prev):
            self._events.put(PAUSE_EVENT + kind.ident_of(obj))

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
            gated = any(self._gated.values()) and self._leading
            if gated:  # a gate's holder may just stop renewing: no event says so
                timeout = GATE_RECHECK if timeout is None else min(timeout, GATE_RECHECK)
            try:
                event = self._events.get(timeout=timeout)
            except queue.Empty:
                event = ""
                dirty = dirty or gated
            try:
                if event == "stop":
                    return
                if event == "lead":
                    self._start_leading()
                elif event == "checks":
                    dirty = True
                elif event == SWITCH_EVENT:  # a check moves between kinds: at once, not after the debounce
                    with self._lock:
                        if self._leading:
                            self._reconcile_checks()
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

        A check keeps its cadence: next due at its state's LastRun + runInterval, when leadership just
        began (`continuity`) and for a check new to this controller whose state has run (a check moved
        to another kind by a migration, or back, carries its state: no run doubled, none missed). A
        check whose spec changed runs at once, as do checks that never ran or are overdue, spread over
        a short window so a thousand checks are not a thousand pods in the same second.
        """
        self._last_reconcile = self._clock()
        self.reconciles += 1
        desired = self._desired()
        self._specs = {k: v for k, v in self._specs.items() if k in self._seen}
        # Stopped workers are not joined here (a step-down must never wait behind a slow pod removal):
        # a restarted check's new run waits in CLEAR for the old run's pod to go anyway.
        self._retiring = [w for w in self._retiring if w.is_alive()]
        restarted: set[str] = set()  # changed checks: they run at once, as a new check does
        for ident, worker in list(self.workers.items()):
            if desired.get(ident) != worker.spec:
                if ident in desired:
                    restarted.add(ident)
                if ident in desired or worker.is_alive() or not worker.spec.single_run_only:
                    logger.info("Check %s %s", worker.spec.key,
                                "changed: restarting" if ident in desired else "removed: stopping")
                worker.stop()
                self._retiring.append(worker)
                del self.workers[ident]
        new = [spec for ident, spec in desired.items() if ident not in self.workers]
        dues = self._first_dues(new, continuity, restarted)
        for spec in new:
            kind = self.services.kinds.of(spec)
            worker = CheckWorker(self.services, spec, self._runner, self._clock, first_due=dues[spec.ident],
                                 wall=self._wall)
            self._check_pause_value(spec)
            if runnow.requested(kind.checks.get(spec.namespace, spec.name)) is not None:
                worker.run_now()  # asked for while nobody led, or with the check (no second Event)
            self.workers[spec.ident] = worker
            worker.start()
            logger.info("Check %s started (every %.0fs, timeout %.0fs, first run in %.1fs)", spec.key,
                        spec.run_interval, spec.timeout, max(0.0, dues[spec.ident] - self._clock()))

    def _desired(self) -> dict[str, CheckSpec]:
        """The checks that should have a worker: of every kind whose gate is open, those not being
        deleted, superseded (migrated to another kind) or already run once, whose spec can run."""
        desired: dict[str, CheckSpec] = {}
        self._seen = set()
        for kind in self.services.kinds:
            if kind.runs_once:
                continue
            closed = kind.gate()
            if closed != self._gated.get(kind.name, ""):
                if closed:
                    logger.warning("No %s runs here now: %s", kind.name, closed)
                else:
                    logger.info("%s checks may run again", kind.name)
                self._gated[kind.name] = closed
            if closed:
                continue
            for obj in kind.checks.list():
                meta = obj.get("metadata") or {}
                if meta.get("deletionTimestamp") or kind.superseded(obj):
                    continue
                self._seen.add(kind.ident_of(obj))
                spec = self._spec(kind, obj)
                if spec is None:
                    continue
                running = self.workers.get(spec.ident)
                if spec.single_run_only and (running is None or not running.is_alive()) and self._ran(kind, spec):
                    continue
                desired[spec.ident] = spec
        return desired

    @staticmethod
    def _ran(kind: Kind, spec: CheckSpec) -> bool:
        """A run-once check already ran: its state holds a run that is over (ours: finished; v3's: a
        last run and no run in flight). A run cut short (claimed, never finished) runs again."""
        state = kind.states.get(spec.namespace, spec.name)
        if state is None:
            return False
        result = khstate.Spec.of(state)
        return bool(khstate.finished_uuid(state)) or (result.last_run is not None and not result.uuid)

    def _run_now(self, ident: str) -> None:
        """The run-now annotation was newly set on this check: run it at once on its worker."""
        with self._lock:
            worker = self.workers.get(ident) if self._leading else None
        if worker is None:
            return  # not leading (the next leader finds it), or a new check (its reconcile runs it)
        kind, spec = worker.kind, worker.spec
        value = runnow.requested(kind.checks.get(spec.namespace, spec.name))
        if value is None:
            return  # removed since: the run it asked for has started
        if not runnow.by_api(value):
            self.services.events.run_requested(_ref(kind, spec), "annotation")
        if not worker.run_now():
            logger.info("Check %s: a run was requested while one is in flight; dropped", spec.key)
            runnow.clear(self.services.resources, spec.namespace, spec.name,
                         current=kind.checks.get(spec.namespace, spec.name), resource=kind.resource)

    def _pause_changed(self, ident: str) -> None:
        """The pause annotations of this check changed: its worker looks again at once."""
        with self._lock:
            worker = self.workers.get(ident) if self._leading else None
            if worker is None:
                return  # not leading (the next leader reads it), or a new check (its reconcile does)
            self._check_pause_value(worker.spec)
        worker.nudge()

    def _check_pause_value(self, spec: CheckSpec) -> None:
        """Log and raise PauseIgnored for an unparsable paused-until value, once per value."""
        kind = self.services.kinds.of(spec)
        bad = pause.unparsable(kind.checks.get(spec.namespace, spec.name))
        if bad is None:
            self._pause_warned.pop(spec.ident, None)
            return
        if self._pause_warned.get(spec.ident) == bad:
            return
        self._pause_warned[spec.ident] = bad
        logger.warning("Check %s: ignoring %s=%r: not an RFC 3339 time with an offset (e.g. "
                       "2026-12-02T06:00:00Z); the check is not paused", spec.key, pause.PAUSED_UNTIL, bad)
        self.services.events.pause_ignored(_ref(kind, spec), pause.PAUSED_UNTIL, bad)

    def _first_dues(self, specs: list[CheckSpec], continuity: bool, restarted: set[str]) -> dict[str, float]:
        now, wall = self._clock(), self._wall()
        dues: dict[str, float] = {}
        overdue: list[CheckSpec] = []
        for spec in specs:
            last = None
            if continuity or spec.ident not in restarted:
                state = self.services.kinds.of(spec).states.get(spec.namespace, spec.name)
                last = parse_time(khstate.Spec.of(state).last_run) if state is not None else None
            if last is not None and last + spec.run_interval > wall:
                dues[spec.ident] = now + min(spec.run_interval, last + spec.run_interval - wall)
            else:
                overdue.append(spec)
        dues.update(spread(overdue, now))
        return dues

    def _recover_jobs(self) -> None:
        """Run-once checks (khjobs) left Running by a previous leader: finished (its run reported) or
        reset to run again."""
        for kind in self.services.kinds:
            if kind.runs_once:
                for job in kind.checks.list():
                    if str((job.get("spec") or {}).get("phase") or "") == "Running" and \
                            kind.ident_of(job) not in self.jobs:
                        self._recover_job(kind, job)

    def _recover_job(self, kind: Kind, job: Obj) -> None:
        meta = job.get("metadata") or {}
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        state = kind.states.get(ns, name)
        done = state is not None and bool(khstate.reported_uuid(state)) and \
            khstate.reported_uuid(state) == khstate.Spec.of(state).uuid
        phase = "Completed" if done else ""
        try:
            self.services.resources.merge_patch(kind.resource, ns, name, {"spec": {"phase": phase}})
            logger.info("Job %s/%s was left Running by a previous leader: %s", ns, name,
                        "its run had reported; marked Completed" if done else "reset to run again")
        except ApiError as e:
            logger.warning("Job %s/%s was left Running; cannot recover it yet: %s", ns, name, e)

    def _spec(self, kind: Kind, obj: Obj) -> CheckSpec | None:
        """Parse a check once per version: a bad runInterval is logged once, not per reconcile; a spec
        that cannot run (SpecProblem) is logged and raised as an Event once per version, and not run."""
        meta = obj.get("metadata") or {}
        # the spec's version: its generation where the API server keeps one (a status write leaves it)
        generation = meta.get("generation")
        rv = (f"{meta.get('uid')}/{generation}" if isinstance(generation, int)
              else str(meta.get("resourceVersion") or ""))
        ident = kind.ident_of(obj)
        cached = self._specs.get(ident)
        if cached is None or cached[0] != rv or not rv:
            try:
                cached = (rv, kind.parse(obj))
            except SpecProblem as e:
                cached = (rv, e)
                meta = obj.get("metadata") or {}
                logger.error("Check %s/%s is not run: %s", meta.get("namespace"), meta.get("name"), e)
                self.services.events.spec_invalid(ObjectRef(kind.event_kind, str(meta.get("namespace") or ""),
                                                            str(meta.get("name") or ""), str(meta.get("uid") or ""),
                                                            kind.resource.api_version), str(e))
            self._specs[ident] = cached
        return cached[1] if isinstance(cached[1], CheckSpec) else None

    def _reconcile_jobs(self) -> None:
        for ident, worker in list(self.jobs.items()):
            if not worker.is_alive():
                del self.jobs[ident]
        for kind in self.services.kinds:
            if not kind.runs_once:
                continue
            for job in kind.checks.list():
                ident = kind.ident_of(job)
                if ident in self.jobs or str((job.get("spec") or {}).get("phase") or ""):
                    continue
                try:
                    spec = kind.parse(job)
                except SpecProblem as e:
                    logger.error("Job %s is not run: %s", ident, e)
                    continue
                worker = JobWorker(self.services, spec, self._runner, self._clock)
                self.jobs[ident] = worker
                worker.start()
                logger.info("Job %s started", spec.key)


def _ref(kind: Kind, spec: CheckSpec) -> ObjectRef:
    return ObjectRef(kind.event_kind, spec.namespace, spec.name, spec.uid, kind.resource.api_version)
