"""The threads that run one check on its schedule (CheckWorker) or a run-once check once (JobWorker).

Workers are kind-blind: where a check's object and state live is its Kind's (records/kinds.py). A
check whose spec says it runs only once (`single_run_only`) is a CheckWorker that ends after its first
judged run.

The controller (controller.py) decides which workers exist; a worker decides when its check runs
and hands each run to a Runner (runner.py), which knows how. Stopping a worker also ends its current
run at once. A CheckWorker can be asked for a run now (runnow.py): the wait for the next due time
ends early, the run removes the run-now annotation as it starts, and the schedule continues from it.
A paused CheckWorker (pause.py) starts no run until its pause ends, then runs at once.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kuberhealthy.base.errors import ApiError, is_transient
from kuberhealthy.base.threads import BackgroundThread
from kuberhealthy.needs import ControlNeeds
from kuberhealthy.outputs.runstats import SKIP_API
from kuberhealthy.records import khstate, pause, runnow
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.run.runner import Outcome, Runner, RunResult

logger = logging.getLogger(__name__)

RunnerFactory = Callable[[ControlNeeds, CheckSpec, threading.Event], Runner]
JUDGED = (Outcome.REPORTED, Outcome.FAILED)  # runs that count as the check having run
PAUSE_WAIT_MAX = 86400.0  # seconds one wait of a pause lasts at most (9999-12-31 is past threading.TIMEOUT_MAX)


class _Worker(BackgroundThread):
    """A thread that runs one check's (or job's) runs; stopping it also ends the current run at once."""

    def __init__(self, services: ControlNeeds, spec: CheckSpec, runner: RunnerFactory, name: str) -> None:
        super().__init__(name)
        self.services = services
        self.supervised_by(services.deaths)
        self.spec = spec
        self.kind = services.kinds.of(spec)
        self._runner = runner
        self._current: Runner | None = None  # the run in progress, to wake on stop

    def stop(self) -> None:
        super().stop()
        current = self._current
        if current is not None:
            current.wake()  # its waits subscribe to its own topics only: wake it to see the stop

    def _run_once(self) -> RunResult | None:
        runner = self._runner(self.services, self.spec, self._stop)
        self._current = runner
        try:
            if self._stop.is_set():
                return None
            return runner.run()
        finally:
            self._current = None


class CheckWorker(_Worker):
    """One check's thread: the first run at `first_due`, then every runInterval from each due time.

    Due times follow the schedule, not the previous run's end: a slow run does not push every later
    run back, and a run that overran a whole interval starts at once without a burst of catch-ups.
    Lag (start - due) goes to kuberhealthy_schedule_lag_seconds. run_now() ends the wait early: that
    run removes the run-now annotation as it starts, and the next is due one interval after it.

    Pause (pause.py): while the khcheck's paused-until time (wall clock) is ahead, no run starts, not
    even a requested one (it waits for the pause's end); the wait ends at that time, or earlier when
    the controller says the annotation changed (nudge()). When the pause ends the check runs at once
    and the schedule continues from that run. A run in flight when a pause begins is not stopped.
    """

    DUE, REQUESTED, RESUMED = "due", "requested", "resumed"  # why a run starts

    def __init__(self, services: ControlNeeds, spec: CheckSpec, runner: RunnerFactory = Runner,
                 clock: Callable[[], float] = time.monotonic, first_due: float | None = None,
                 wall: Callable[[], float] = time.time) -> None:
        super().__init__(services, spec, runner, f"kh-check-{spec.namespace}/{spec.name}")
        self._clock = clock
        self._wall = wall  # paused-until is a wall-clock time
        self.first_due = clock() if first_due is None else first_due
        self.runs = 0
        self.requested_runs = 0  # runs started by run_now()
        self.resumed_runs = 0  # runs started because a pause ended
        self._wake = threading.Event()  # set by stop(), run_now() and nudge(): the wait looks again
        self._lock = threading.Lock()
        self._requested = False  # a run-now waits to start (under _lock)
        self._running = False  # a run is in flight (under _lock)
        self.paused_until: float | None = None  # the pause this worker is waiting out (wall seconds)
        self._paused_since = 0.0  # when this worker first saw the pause (wall seconds)
        self.finite = spec.single_run_only  # its end after the one run is no death

    def stop(self) -> None:
        super().stop()
        self._wake.set()

    def run_now(self) -> bool:
        """Start a run at once (while paused: when the pause ends); False (nothing changes) while a run
        is in flight or the worker stops."""
        with self._lock:
            if self._running or self._stop.is_set():
                return False
            self._requested = True
            self._wake.set()
        return True

    def nudge(self) -> None:
        """Look again at what the wait is for (the pause annotation changed; a test moved the clock)."""
        self._wake.set()

    def _pause(self) -> pause.Pause | None:
        return pause.active(self.kind.checks.get(self.spec.namespace, self.spec.name), self._wall())

    def _next(self, due: float) -> str | None:
        """Wait until a run is due, requested or resumed (which of them), or the stop (None).

        Every wake re-reads the state, so a wake that changed nothing only waits again; a wait for
        the due time that runs out is the due time."""
        while not self._stop.is_set():
            paused = self._pause()
            if paused is not None:
                if self.paused_until != paused.until:
                    logger.info("Check %s: paused until %s%s: no runs until then", self.spec.key,
                                paused.view()["until"], f" ({paused.reason})" if paused.reason else "")
                    if self.paused_until is None:
                        self._paused_since = self._wall()
                self.paused_until = paused.until
                wait = min(PAUSE_WAIT_MAX, paused.until - self._wall())
            elif self.paused_until is not None:
                self.paused_until = None
                # the paused hours ride on the next run's write (records/uptime.py)
                self.services.rollups.paused(self.kind.state_key(self.spec.namespace, self.spec.name),
                                             self._paused_since, self._wall())
                logger.info("Check %s: the pause has ended: running now", self.spec.key)
                return self.RESUMED
            else:
                with self._lock:
                    if self._requested:
                        return self.REQUESTED
                wait = due - self._clock()
                if wait <= 0:
                    return self.DUE
            woken = self._wake.wait(max(0.0, wait))
            self._wake.clear()  # before looking again: whatever set it is seen by the next look
            if not woken and paused is None and not self._stop.is_set():
                return self.DUE  # the wait for the due time ran out (whatever the injected clock says)
        return None

    def _run(self) -> None:
        due = self.first_due
        while True:
            why = self._next(due)
            if why is None:
                return
            with self._lock:
                requested, self._requested = self._requested, False
                self._wake.clear()
                self._running = True
            started = self._clock()
            if why == self.RESUMED:
                self.resumed_runs += 1
            if requested:
                self.requested_runs += 1
                logger.info("Check %s: running now, as requested", self.spec.key)
                current = self.kind.checks.get(self.spec.namespace, self.spec.name)
                if runnow.requested(current) is not None:
                    runnow.clear(self.services.resources, self.spec.namespace, self.spec.name, current=current,
                                 resource=self.kind.resource)
            elif why == self.DUE:
                self.services.stats.schedule_lag.observe(max(0.0, started - due))
            result: RunResult | None = None
            try:
                result = self._run_once()
            except Exception as e:  # the run could not even record its failure: log, keep the schedule
                logger.exception("Check %s: run crashed", self.spec.key)
                if not self._stop.is_set():
                    self._record_crash(e)
            with self._lock:
                self._running = False
            self.runs += 1
            if self.spec.single_run_only and result is not None and result.outcome in JUDGED:
                logger.info("Check %s ran once, as its spec says: no more runs", self.spec.key)
                return
            due = (due if why == self.DUE and not requested else started) + self.spec.run_interval
            now = self._clock()
            if due < now - self.spec.run_interval:  # a whole interval behind: start over from now
                due = now

    def _record_crash(self, e: Exception) -> None:
        try:
            write = khstate.RunWrite(self.services.resources, self.spec.namespace, self.spec.name, "",
                                     self.services.config.pod_name, self.spec.workload, store=self.kind.store)
            khstate.record_error(write, [f"Check execution error: {self.spec.key}: {e}"])
        except Exception:  # this worker must outlive whatever went wrong; the next run tries again
            logger.exception("Check %s: could not record the crash in its khstate", self.spec.key)


class JobWorker(_Worker):
    """A check of a run-once kind (a khjob) runs once: its `spec.phase` "" → Running → (the run) → Completed."""

    PHASE_RETRY = 30.0  # seconds spent retrying a phase write while the API is away
    finite = True

    def __init__(self, services: ControlNeeds, spec: CheckSpec, runner: RunnerFactory = Runner,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(services, spec, runner, f"kh-job-{spec.key}")
        self._clock = clock

    def _set_phase(self, phase: str) -> None:
        deadline = self._clock() + self.PHASE_RETRY
        delay = 0.2
        while True:
            try:
                self.services.resources.merge_patch(self.kind.resource, self.spec.namespace, self.spec.name,
                                                    {"spec": {"phase": phase}})
                return
            except ApiError as e:
                if not is_transient(e) or self._clock() + delay > deadline:
                    raise
                logger.warning("Job %s: cannot set phase %s yet (%s); retrying", self.spec.key, phase, e)
                if self._stop.wait(delay):
                    raise
                delay = min(delay * 2, 2.0)

    def _run(self) -> None:
        try:
            self._set_phase("Running")
            result = self._run_once()
            if result is None or self._stop.is_set():
                return  # stopped: the next leader finishes or resets it (Controller.recover_jobs)
            if result.outcome is Outcome.SKIPPED and result.skip_reason == SKIP_API:
                self._set_phase("")  # not judged: run it again
                return
            self._set_phase("Completed")
        except ApiError as e:
            logger.warning("Job %s: %s", self.spec.key, e)
        except Exception:  # top of this thread's only loop
            logger.exception("Job %s crashed", self.spec.key)
