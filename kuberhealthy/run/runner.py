"""One check run: the checker pod's lifecycle as an explicit state machine.

    CLAIM → VALIDATE → CLEAR → CREATE → START → REPORT → EXIT → RECORD → DONE

Every wait is one Waiter.wait_for() on the watch caches, subscribed to this run's topics only (its
check's pods, its run uuid, its khstate), racing one monotonic deadline for the whole run
(start + timeout) and the check's stop event: no fixed sleeps, no polling. A run that fails
records `Check execution error: <ns>/<name>: <reason>` with v2's reasons. A checker pod deleted by
someone else before it reported skips the run. On a timeout or a stop the run's live pods are
evicted (delete as fallback).

Trust under faults. A cache can be old (a watch broke, the API server restarted or froze), and an
API call can fail because the control plane is away; neither says anything about the checked thing.
So:
  * a verdict that would fail the run is confirmed by one bounded read first (the pod, the khstate,
    the check's pods by label); the cache alone never fails a run;
  * API errors at CLAIM, CREATE and RECORD are retried (jittered backoff) within the run's deadline;
  * a run that cannot be completed or judged because the API was away, or its caches were not
    current at some moment of the run, is SKIPPED (`kuberhealthy_runs_skipped_total{reason}`), not
    failed: the next due run tries again;
  * every write is conditional on this run's uuid, so a stopped or late run never overwrites the
    result of the run that followed it.
This module knows nothing about HTTP or scheduling.
"""
from __future__ import annotations

import enum
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from kuberhealthy.base.durations import format_duration
from kuberhealthy.base.errors import ApiError, Conflict, NotFound, is_transient
from kuberhealthy.kube import KHSTATES, PODS, Obj
from kuberhealthy.outputs.events import KIND_CHECK, KIND_JOB, ObjectRef
from kuberhealthy.outputs.runstats import SKIP_API, SKIP_POD_DELETED
from kuberhealthy.records import khstate
from kuberhealthy.records.checkpod import (
    CHECK_NAME_LABEL,
    RUN_ID_LABEL,
    build_pod,
    new_run_key,
    pod_name,
    pod_run_key,
    run_key_sha256,
)
from kuberhealthy.records.checkspec import CheckSpec, validate_pod_spec
from kuberhealthy.records.history import RunRecord
from kuberhealthy.run.podstate import (
    ERR_CLEANUP,
    ERR_EXIT,
    ERR_REPORT,
    ERR_RUNNING,
    ERR_START,
    live,
    pending,
    pod_name_of,
    pod_uid,
    read_log_tail,
    start_failure,
    terminating,
)
from kuberhealthy.seams import RunNeeds

logger = logging.getLogger(__name__)

T = TypeVar("T")

CONFIRM_TIMEOUT = 5.0  # seconds for one confirming read
WRITE_TIMEOUT = 5.0  # seconds per khstate request
GRACE = 10.0  # seconds past the deadline still spent writing a verdict (RECORD, an error)
RETRY_FIRST = 0.2  # seconds
RETRY_MAX = 2.0  # seconds
LOG_TIMEOUT = 3.0  # seconds for reading a failed checker's log tail


class Phase(enum.Enum):
    CLAIM = "claim"
    VALIDATE = "validate"
    CLEAR = "clear"
    CREATE = "create"
    START = "start"
    REPORT = "report"
    EXIT = "exit"
    RECORD = "record"
    DONE = "done"


class Outcome(enum.Enum):
    REPORTED = "reported"  # the pod reported (OK or not) and the run was recorded
    FAILED = "failed"  # the run itself failed; an execution error was recorded
    SKIPPED = "skipped"  # not judged: the pod was removed by someone else, or the API was away
    STOPPED = "stopped"  # the check was stopped (shutdown, leadership lost, spec changed)


@dataclass
class RunResult:
    outcome: Outcome
    run_uuid: str
    phase: Phase
    errors: list[str] = field(default_factory=list)
    duration: float = 0.0  # seconds
    pod: str = ""
    node: str = ""
    phase_seconds: dict[str, float] = field(default_factory=dict)  # time spent in each phase
    skip_reason: str = ""


class _Stopped(Exception):
    pass


class _Failed(Exception):
    pass


class _Skipped(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class Runner:
    """Runs one check once. Construct per run; call run() on the check's thread; wake() from a stopper."""

    def __init__(self, services: RunNeeds, check: CheckSpec, stop: threading.Event,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.s = services
        self.check = check
        self.stop = stop
        self.clock = clock
        self.wall = wall
        self.run_uuid = str(uuid.uuid4())
        self._phase = Phase.CLAIM
        self._phase_started = clock()
        self._started = clock()
        self.phase_seconds: dict[str, float] = {}
        self.pod: Obj | None = None
        self._created_name = ""  # the pod this run claims, then creates
        self._run_key = ""  # the run's secret: on its pod only; the claim holds its hash
        self._wall_start = wall()
        self._last_run: str | None = None  # the khstate's LastRun when the run claimed it
        self._written: Obj | None = None  # the khstate as this run last wrote it
        self._api_trouble = False  # an API call of this run failed for a transient reason
        self.log = logging.LoggerAdapter(logger, {"check": check.key, "run": self.run_uuid})
        self._waiter = services.notifier.waiter(
            services.pods.topic("check", check.key), services.pods.topic("uuid", self.run_uuid),
            services.khstates.topic("key", check.key))

    @property
    def phase(self) -> Phase:
        return self._phase

    @phase.setter
    def phase(self, value: Phase) -> None:
        now = self.clock()
        self.phase_seconds[self._phase.value] = self.phase_seconds.get(self._phase.value, 0.0) + (
            now - self._phase_started)
        self._phase, self._phase_started = value, now

    def wake(self) -> None:
        """Make a wait look at the stop event now."""
        self._waiter.wake()

    # --- helpers ---------------------------------------------------------------------------------

    def _pods_of_run(self) -> list[Obj]:
        return list(self.s.pods.by_index("uuid", self.run_uuid))

    def _my_pod(self) -> Obj | None:
        for pod in self._pods_of_run():  # only the pod this run created counts, not a look-alike
            if not self._created_name or pod_name_of(pod) == self._created_name:
                return pod
        return None

    def _wait(self, predicate: Callable[[], T], deadline: float) -> T | None:
        value = self._waiter.wait_for(predicate, deadline, self.stop, self.clock)
        if self.stop.is_set():
            raise _Stopped()
        return value

    def _impaired(self) -> bool:
        """Whether the API was away or too slow, or the caches this run decides on were not current,
        during the run. A report accepted for this run but not stored yet (held) counts: the checker
        reported, the control plane could not take it in time."""
        return self._api_trouble or self._held() or any(
            c.impaired_since(self._started) for c in (self.s.pods, self.s.khstates))

    def _fail(self, reason: str) -> _Failed | _Skipped:
        """The exception for a run that cannot succeed: a failure, unless the control plane was impaired."""
        if self._impaired():
            return _Skipped(SKIP_API, f"the API server was unavailable during the run ({reason})")
        return _Failed(reason)

    def _call(self, what: str, fn: Callable[[float], T], until: float) -> T:
        """Call fn(timeout) until it does not fail transiently, with backoff, until `until` (monotonic).

        A transient failure at the end is a skip: the control plane, not the check, failed.
        """
        delay = RETRY_FIRST
        while True:
            left = until - self.clock()
            try:
                return fn(max(0.5, min(WRITE_TIMEOUT, left)))
            except ApiError as e:
                if not is_transient(e):
                    raise
                self._api_trouble = True
                left = until - self.clock()
                if left <= 0:
                    raise _Skipped(SKIP_API, f"could not {what}: {e}") from e
                self.log.warning("Could not %s (%s); retrying", what, e)
                if self.stop.wait(min(left, delay * (0.5 + random.random() / 2))):
                    raise _Stopped() from e
                delay = min(delay * 2, RETRY_MAX)

    def _read_pod(self, name: str) -> Obj | None:
        """The pod as the API server has it now (None: gone). Raises _Skipped when it cannot be read."""
        try:
            return self.s.resources.get(PODS, self.check.namespace, name, timeout=CONFIRM_TIMEOUT)
        except NotFound:
            return None
        except ApiError as e:
            self._api_trouble = True
            raise _Skipped(SKIP_API, f"could not read checker pod {name}: {e}") from e

    def _read_state(self) -> Obj | None:
        try:
            return self.s.resources.get(KHSTATES, self.check.namespace, self.check.name, timeout=CONFIRM_TIMEOUT)
        except NotFound:
            return None
        except ApiError as e:
            self._api_trouble = True
            raise _Skipped(SKIP_API, f"could not read the khstate: {e}") from e

    def _is_report(self, obj: Obj | None) -> bool:
        """The khstate shows this run's report: our handler's stamp, or (any writer) LastRun advanced
        while the khstate still names this run."""
        if obj is None:
            return False
        if khstate.reported_uuid(obj) == self.run_uuid:
            return True
        spec = khstate.Spec.of(obj)
        return spec.uuid == self.run_uuid and spec.last_run is not None and spec.last_run > (self._last_run or "")

    def _held(self) -> bool:
        """A report for this run was accepted but waits (on this replica) for the API to store it."""
        return self.s.held.holds(self.run_uuid)

    def _reported(self) -> bool:
        return self._is_report(self.s.khstates.get(self.check.namespace, self.check.name))

    def _evict_run_pods(self) -> None:
        """Remove this run's live pods: those in the cache, and the one we created (the cache may not
        have seen it yet). An API error here is logged; the reaper or the next run's CLEAR retries."""
        names = {pod_name_of(p) for p in self._pods_of_run() if live(p) and not terminating(p)}
        if self._created_name and (self.pod is None or (live(self.pod) and not terminating(self.pod))):
            names.add(self._created_name)
        for name in sorted(names):
            try:
                how = self.s.resources.evict_pod(self.check.namespace, name, timeout=CONFIRM_TIMEOUT)
                self.log.info("Removed checker pod %s (%s)", name, how)
            except ApiError as e:
                self.log.warning("Could not remove checker pod %s: %s", name, e)
                if is_transient(e):
                    break  # the API is away; the next run's CLEAR removes what is left

    # --- the run -----------------------------------------------------------------------------------

    def run(self) -> RunResult:
        start = self._started = self.clock()
        self._wall_start = self.wall()
        deadline = start + self.check.timeout
        skip_reason, reason, logs = "", "", None
        try:
            self._run(deadline)
            outcome, errors = Outcome.REPORTED, list[str]()
        except _Stopped:
            outcome, errors = Outcome.STOPPED, []
            self.log.info("Run stopped in phase %s", self.phase.value)
            self._evict_run_pods()
        except _Skipped as e:
            outcome, errors, skip_reason = Outcome.SKIPPED, [], e.reason
            self.log.warning("Run skipped in phase %s (%s): %s", self.phase.value, e.reason, e)
            if e.reason != SKIP_POD_DELETED:
                self._evict_run_pods()
        except _Failed as e:
            outcome, errors = Outcome.FAILED, [f"Check execution error: {self.check.key}: {e}"]
            reason = str(e)
            self.log.warning("Run failed in phase %s: %s", self.phase.value, e)
            logs = self._read_logs(deadline) if self._created_name and self.pod is not None else None
            self._evict_run_pods()
        finally:
            self._waiter.close()
        duration = self.clock() - start
        node = str(((self.pod or {}).get("spec") or {}).get("nodeName") or "")
        if outcome is Outcome.FAILED:
            record = RunRecord.failed(self.run_uuid, self._wall_start, duration, node,
                                      self._created_name if self.pod is not None else "", reason, errors, logs)
            outcome, skip_reason = self._record_failure(errors, duration, node, deadline, record)
        result = RunResult(outcome, self.run_uuid, self.phase, errors, duration, self._created_name, node,
                           dict(self.phase_seconds), skip_reason)
        self.log.debug("Phase times: %s", ", ".join(f"{k}={v:.3f}s" for k, v in self.phase_seconds.items()))
        if outcome is Outcome.SKIPPED:
            self.s.stats.skip(skip_reason)
        if outcome in (Outcome.REPORTED, Outcome.FAILED):
            self._forward(result)
        return result

    def _history(self, record: Callable[[Obj], RunRecord]) -> khstate.HistoryWrite:
        config = self.s.config
        return khstate.HistoryWrite(record, config.history_length, config.capture_logs, self.wall())

    def _ref(self) -> ObjectRef:
        kind = KIND_JOB if self.check.workload == khstate.WORKLOAD_JOB else KIND_CHECK
        return ObjectRef(kind, self.check.namespace, self.check.name, self.check.uid)

    def _read_logs(self, deadline: float) -> str | None:
        """The tail of the checker's log, for a failed run's history entry (captureLogs)."""
        if not self.s.config.capture_logs or not self._created_name:
            return None
        return read_log_tail(self.s.resources, self.check.namespace, self._created_name, self.pod,
                             max(0.5, min(LOG_TIMEOUT, deadline + GRACE - self.clock())))

    def _record_failure(self, errors: list[str], duration: float, node: str, deadline: float,
                        record: RunRecord) -> tuple[Outcome, str]:
        """Write the execution error (only while the khstate still names this run)."""
        until = max(deadline, self.clock()) + GRACE
        history = self._history(lambda _spec: record)

        def write(timeout: float) -> Obj | None:
            return khstate.record_error(
                self.s.resources, self.check.namespace, self.check.name, errors, self.s.config.pod_name,
                format_duration(duration), node, self.check.workload, run_uuid=self.run_uuid,
                timeout=timeout, deadline=until, history=history, clock=self.clock)
        try:
            self._written = self._call("record the failure", write, until)
        except _Skipped as e:
            self.log.warning("Could not record the failure: %s", e)
            return Outcome.SKIPPED, SKIP_API
        except _Stopped:
            return Outcome.STOPPED, ""
        except ApiError as e:
            self.log.error("Could not record the failure: %s", e)
        if self._written is None:
            self.log.info("A newer run has claimed the khstate; this run's failure is not recorded")
        else:
            self.s.events.check_failed(self._ref(), errors[0])
        return Outcome.FAILED, ""

    def _run(self, deadline: float) -> None:
        ns, name = self.check.namespace, self.check.name
        # CLAIM: only this run's UUID may report from now on.
        self.phase = Phase.CLAIM

        # The claim names the pod this run will create and the hash of its secret: every replica then
        # takes reports from that pod only, whatever else carries the same labels and env.
        self._created_name = self._fresh_pod_name()
        self._run_key = new_run_key()

        def claim(timeout: float) -> Obj:
            return khstate.claim_run(self.s.resources, ns, name, self.run_uuid, self.s.config.pod_name,
                                     self.check.workload, hint=self.s.khstates.get(ns, name), timeout=timeout,
                                     deadline=deadline, run_pod=self._created_name,
                                     run_key_sha256=run_key_sha256(self._run_key), clock=self.clock)
        try:
            claimed = self._call("claim the run", claim, deadline)
        except ApiError as e:
            raise _Failed(f"failed to claim the run in its khstate: {e}") from e
        self._last_run = khstate.Spec.of(claimed).last_run
        self.log.info("Run started (timeout %s)", format_duration(self.check.timeout))

        self.phase = Phase.VALIDATE
        problem = validate_pod_spec(self.check.pod_spec)
        if problem:
            raise _Failed(problem)

        self.phase = Phase.CLEAR
        self._clear(deadline)

        self.phase = Phase.CREATE
        self._create(deadline)

        # START: past Pending, or an image pull failure.
        self.phase = Phase.START

        seen = False

        def started() -> str | None:
            nonlocal seen
            pod = self._my_pod()
            if pod is None:
                return "gone" if seen else None  # not seen yet: the watch may simply be behind
            seen = True
            self.pod = pod
            if start_failure(pod):
                return "pull"
            return None if pending(pod) else "started"
        state = self._wait(started, deadline)
        if state is None:
            self._settle(deadline)  # the deadline passed: decide on what the API server says
            return
        if state == "gone":
            if self._read_pod(self._created_name) is None:
                raise _Skipped(SKIP_POD_DELETED, "checker pod was removed before it started")
            self._settle(deadline)
            return
        if state == "pull":
            pod = self._read_pod(self._created_name)  # confirm: never fail on the cache alone
            failure = start_failure(pod or {})
            if pod is None:
                raise _Skipped(SKIP_POD_DELETED, "checker pod was removed before it started")
            if failure:
                self.pod = pod
                raise _Failed(ERR_START + failure)

        # REPORT: the report handler stamps our UUID on the khstate.
        self.phase = Phase.REPORT

        def reported_or_ended() -> str | None:
            if self._reported():
                return "reported"
            pod = self._my_pod()
            if pod is None:
                return "gone"
            self.pod = pod
            return "ended" if not live(pod) else None
        outcome = self._wait(reported_or_ended, deadline)
        if outcome != "reported":
            if outcome is None or self._impaired() or self._held():
                self._settle(deadline)  # a lagging cache may be all that stands between us and a report
                return
            if self._is_report(self._read_state()):
                self.log.info("Checker pod reported (confirmed by a read; the cache was behind)")
            elif outcome == "gone":
                if self._read_pod(self._created_name) is None:
                    raise _Skipped(SKIP_POD_DELETED, "checker pod was removed before it reported")
                self._settle(deadline)
                return
            else:
                # Ended without reporting: fail now rather than at the deadline, with v2's reason.
                status = (self.pod or {}).get("status") or {}
                self.log.warning("Checker pod %s ended (%s) without reporting in", self._created_name,
                                 status.get("phase"))
                raise self._fail(ERR_REPORT)
        self.log.info("Checker pod reported")

        # EXIT: the pod finishes (or is gone).
        self.phase = Phase.EXIT

        def exited() -> bool:
            pod = self._my_pod()
            if pod is None:
                return True
            self.pod = pod
            return not live(pod)
        if not self._wait(exited, deadline):
            pod = self._read_pod(self._created_name)
            if pod is not None and live(pod):
                raise self._fail(ERR_EXIT)
            self.pod = pod or self.pod
        self._record(deadline)

    def _clear(self, deadline: float) -> None:
        """Earlier checker pods of this check must be gone before a new one starts.

        A pod stuck Terminating (a lost node, a finalizer nobody removes) is waited for once, as v2
        did: the run that meets it fails with v2's cleanup error, so the operator hears of it. From
        then on that pod is known stuck and later runs do not wait for it; they are not blocked
        forever by a pod that is already being deleted (and is not live in the contract's sense).
        """
        ns, key = self.check.namespace, self.check.key
        stuck = self._stuck_pods()

        def earlier(pods: list[Obj]) -> list[Obj]:
            return [p for p in pods if live(p) and pod_uid(p) not in stuck
                    and (p["metadata"].get("labels") or {}).get(RUN_ID_LABEL) != self.run_uuid]
        stale = earlier(self.s.pods.by_index("check", key))
        for pod in stale:
            if terminating(pod):
                continue  # already told to go
            self.log.info("Removing earlier checker pod %s", pod_name_of(pod))
            try:
                self.s.resources.evict_pod(ns, pod_name_of(pod), timeout=CONFIRM_TIMEOUT)
            except ApiError as e:  # the wait below decides; it fails the run if the pod stays
                self.log.warning("Could not remove earlier checker pod %s: %s", pod_name_of(pod), e)
                self._api_trouble |= is_transient(e)
        if not stale or self._wait(lambda: not earlier(self.s.pods.by_index("check", key)), deadline):
            return
        try:  # confirm with the API server before failing: the cache may be behind
            items, _ = self.s.resources.list(PODS, ns, f"{CHECK_NAME_LABEL}={self.check.name}",
                                             timeout=CONFIRM_TIMEOUT)
        except ApiError as e:
            self._api_trouble = True
            raise _Skipped(SKIP_API, f"could not list the check's pods: {e}") from e
        left = earlier(items)
        if not left:
            self.log.info("Earlier checker pods are gone (confirmed by a read; the cache was behind)")
            return
        error = self._fail(ERR_CLEANUP)
        for pod in left:
            if terminating(pod) and isinstance(error, _Failed):
                stuck.add(pod_uid(pod))
                self.log.warning("Earlier checker pod %s is stuck Terminating (since %s; a lost node or a "
                                 "finalizer?); reported once, later runs will not wait for it", pod_name_of(pod),
                                 (pod.get("metadata") or {}).get("deletionTimestamp"))
        raise error

    def _stuck_pods(self) -> set[str]:
        """Uids of checker pods already reported stuck Terminating (shared by the daemon's runs)."""
        seen = self.s.stuck_terminating
        if len(seen) > 10000:
            seen.clear()
        return seen

    def _fresh_pod_name(self) -> str:
        """`<check>-<unix seconds>`; the name has one-second resolution: never reuse one that still exists."""
        while self.s.pods.get(self.check.namespace, name := pod_name(self.check.name, int(self.wall()))) is not None:
            if self.stop.wait(max(0.01, 1.0 - (self.wall() % 1.0))):
                raise _Stopped()
        return name

    def _create(self, deadline: float) -> None:
        ns = self.check.namespace
        body = build_pod(self.check, self.run_uuid, self.wall(), self.s.config.external_check_reporting_url,
                         self.s.owner_reference(ns), deadline_unix=self._wall_start + self.check.timeout,
                         name=self._created_name, run_key=self._run_key)
        attempts = 0

        def create(timeout: float) -> Obj:
            nonlocal attempts
            attempts += 1
            try:
                return self.s.resources.create(PODS, ns, body, timeout=timeout)
            except Conflict as e:
                if attempts > 1 and e.already_exists:  # our earlier attempt went through after all
                    pod = self.s.resources.get(PODS, ns, self._created_name, timeout=timeout)
                    if pod_run_key(pod) == self._run_key:  # ours, not a look-alike that took the name
                        return pod
                raise
        try:
            self.pod = self._call("create the checker pod", create, deadline)
        except Conflict as e:
            raise _Failed(f"failed to create checker pod {self._created_name}: {e}") from e
        except ApiError as e:
            raise _Failed(f"failed to create checker pod: {e}") from e
        self.log.info("Created checker pod %s", self._created_name)

    def _settle(self, deadline: float) -> None:
        """The deadline passed (or the caches were not to be trusted): decide on fresh reads.

        Reported and exited → record the result as usual; otherwise v2's reason for where the pod is
        (a failure, or a skip if the control plane was impaired during the run).
        """
        remaining = deadline - self.clock()
        if remaining > 0:  # not at the deadline yet: wait for the caches to say more first
            if self._wait(lambda: self._reported() and (p := self._my_pod()) is not None and not live(p), deadline):
                self.pod = self._my_pod() or self.pod
                self._record(deadline)
                return
        reported = self._reported() or self._is_report(self._read_state())
        pod = self._read_pod(self._created_name)
        if pod is None and not reported:
            raise _Skipped(SKIP_POD_DELETED, "checker pod was removed before it reported")
        if pod is not None:
            self.pod = pod
        if reported:
            if pod is not None and live(pod):
                self.phase = Phase.EXIT
                raise self._fail(ERR_EXIT)
            self.log.info("Checker pod reported and exited (confirmed by reads)")
            self._record(deadline)
            return
        assert pod is not None
        if pending(pod):
            self.phase = Phase.START
            failure = start_failure(pod)
            raise self._fail(ERR_START + failure if failure else ERR_RUNNING)
        self.phase = Phase.REPORT
        raise self._fail(ERR_REPORT)

    def _record(self, deadline: float) -> None:
        """RECORD: RunDuration is the real wall time of the run; Node is where the pod ran."""
        self.phase = Phase.RECORD
        ns, name = self.check.namespace, self.check.name
        node = str(((self.pod or {}).get("spec") or {}).get("nodeName") or "")
        seconds = self.clock() - self._started
        duration = format_duration(seconds)
        until = max(deadline, self.clock() + GRACE)
        reported = self.s.khstates.get(ns, name)
        logs = None
        if self._is_report(reported) and not khstate.Spec.of(reported or {}).ok:
            logs = self._read_logs(until)  # the checker reported a failure: keep what it printed
        history = self._history(lambda spec: RunRecord.reported(self.run_uuid, self._wall_start, seconds, node,
                                                                self._created_name, spec, logs))

        def record(timeout: float) -> Obj | None:
            return khstate.record_result(self.s.resources, ns, name, self.run_uuid, duration, node,
                                         self.s.config.pod_name, hint=self.s.khstates.get(ns, name),
                                         timeout=timeout, deadline=until, history=history, clock=self.clock)
        try:
            self._written = self._call("record the run", record, until)
        except (_Skipped, ApiError) as e:
            # The report itself is stored; only RunDuration/Node (and this run's history entry) are missing.
            # Not a failure of the check.
            self.log.warning("Could not record the run's duration and node: %s", e)
            self._written = self.s.khstates.get(ns, name)
        else:
            spec = khstate.Spec.of(self._written or {})
            if self._written is not None and not spec.ok:
                self.s.events.check_failed(self._ref(), spec.errors[0] if spec.errors else "reported OK: false")
            elif self._written is not None and history.previous_failures > 0:
                self.s.events.check_recovered(self._ref(), history.previous_failures)
        self.phase = Phase.DONE
        self.log.info("Run done in %s on node %s", duration, node or "?")

    def _forward(self, result: RunResult) -> None:
        influx = self.s.influx
        if influx is None:
            return
        spec = khstate.Spec.of(self._written or {})  # what this run wrote, not a possibly lagging cache
        ok = spec.ok if result.outcome is Outcome.REPORTED else False
        errors = list(spec.errors) if result.outcome is Outcome.REPORTED else result.errors
        influx.push(self.check.namespace, self.check.name, ok, errors, result.duration)
