"""One check run: the checker pod's lifecycle as an explicit state machine.

    CLAIM → VALIDATE → CLEAR → CREATE → START → REPORT → EXIT → RECORD → DONE

Runner._run calls one method per phase, in this order. START and REPORT may instead settle the run on
fresh reads (_settle): a pod that reported and exited goes on to RECORD; anything else ends the run.
Every wait is one Waiter.wait_for() on the watch caches, subscribed to this run's topics only (its
check's pods, its run uuid, its khstate), racing one monotonic deadline for the whole run
(start + timeout) and the check's stop event: no fixed sleeps, no polling. A run that fails
records `Check execution error: <ns>/<name>: <reason>` with v2's reasons; a pod that ended without
reporting adds a second error, why (podstate.why_ended: an OOMKill, a failed init container).
A checker pod deleted by someone else (gone, or a deletionTimestamp this run did not cause) before it
ended on its own skips the run in START, REPORT or EXIT, whatever phase it then shows (guard.removed);
one the cluster disrupted (the DisruptionTarget condition, a kubelet's eviction) before it reported is
skipped as disrupted, and the DISRUPTIONS_TO_FAIL-th such run of the check in a row fails. The pod has
exited, for EXIT and REPORT, once every container that is not a sidecar has terminated (podstate.over):
a mesh's proxy that never exits neither holds nor judges a run, and the run ends such a pod itself.
On a timeout or a stop the run's pod is evicted (delete as fallback). A run removes only pods by their uid: its
own (from its create's answer) and, in CLEAR, earlier checker pods as the cache shows them; a pod it
did not create under its predicted name is left alone, and the run takes a fallback name (CREATE).

This module holds the phases: what each does and waits for, and their order. The run's fixed facts
(check, uuid, deadline, clocks, logger) are one RunContext (context.py), built here and handed to the
Guard and the Recorder. When a run believes what it sees (retry, confirm, skip rather than fail) is
guard.py's; settling a run on fresh reads and removing its pod is ending.py's; writing the result
(khstate, history, Events, Influx, the skip counter) is finish.py's; what the pod shows is
podstate.py's; the values a run ends with are result.py's. It knows nothing about HTTP or scheduling.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from kuberhealthy.base.durations import format_duration
from kuberhealthy.base.errors import ApiError, Conflict
from kuberhealthy.kube import Obj
from kuberhealthy.needs import RunNeeds
from kuberhealthy.outputs.runstats import SKIP_POD_DELETED, SKIP_POD_DISRUPTED
from kuberhealthy.records import checkpod, khstate
from kuberhealthy.records.checkspec import CheckSpec, validate_pod_spec
from kuberhealthy.run.context import RunContext
from kuberhealthy.run.ending import end_sidecar_pod, evict_run_pods, report_state, reported_and_exited, settled
from kuberhealthy.run.finish import Recorder
from kuberhealthy.run.guard import CONFIRM_TIMEOUT, Failed, Guard, Skipped, Stopped, removed
from kuberhealthy.run.podstate import (
    ERR_EXIT,
    ERR_REPORT,
    ERR_RUNNING,
    ERR_START,
    RunPod,
    earlier,
    node_of,
    pod_name_of,
    sidecars_of,
    start_failure,
    terminating,
    uid_of,
    why_ended,
)
from kuberhealthy.run.result import Outcome, Phase, RunResult

# What the workers and the tests take from here; the values themselves are in result.py.
__all__ = ["ERR_REPORT", "ERR_RUNNING", "Outcome", "Phase", "RunResult", "Runner"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

RENAMES = 5  # fallback names a run tries when its pod's name is taken by a pod it did not create
DISRUPTIONS_TO_FAIL = 3  # runs in a row whose checker pod the cluster disrupted: the last of them fails


class Runner:
    """Runs one check once. Construct per run, right before run() on the check's thread (the run's clock
    starts at construction); wake() from a stopper."""

    def __init__(self, services: RunNeeds, check: CheckSpec, stop: threading.Event,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.services, self.check, self.stop, self.clock, self.wall = services, check, stop, clock, wall
        self.run_uuid = str(uuid.uuid4())
        self._phase = Phase.CLAIM
        self._started = self._phase_started = clock()  # the run's one start; its deadline is start + timeout
        self.ctx = RunContext(services, check, self.run_uuid, stop, self._started, wall(), clock, wall,
                              logging.LoggerAdapter(logger, {"check": check.key, "run": self.run_uuid}))
        self._wall_start, self._deadline, self.log = self.ctx.wall_start, self.ctx.deadline, self.ctx.log
        self.phase_seconds: dict[str, float] = {}
        self.pod = RunPod(services.pods, self.run_uuid)
        self._run_key = ""  # the run's secret: on its pod only; the claim holds its hash
        self._logs: str | None = None  # the checker's log tail, read before the run ended its pod itself
        self._v2_name = ""  # `<check>-<unix seconds>`, the pod's name unless a pod we did not create holds it
        self.guard = Guard(self.ctx)
        self.recorder = Recorder(self.ctx, self.guard)
        self._waiter = services.notifier.waiter(
            services.pods.topic("check", check.ident), services.pods.topic("uuid", self.run_uuid),
            self.ctx.kind.states.topic("key", check.key))

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

    def run(self) -> RunResult:
        skip_reason, reason, logs = "", "", None
        try:
            try:
                self._run()
            except Skipped as e:
                if e.reason == SKIP_POD_DELETED and self.pod.disruption:
                    raise self._disrupted() from e
                raise
            outcome, errors = Outcome.REPORTED, list[str]()
        except Stopped:
            outcome, errors = Outcome.STOPPED, []
            self.log.info("Run stopped in phase %s", self.phase.value)
            evict_run_pods(self.ctx, self.pod)
        except Skipped as e:
            outcome, errors, skip_reason = Outcome.SKIPPED, [], e.reason
            self.log.warning("Run skipped in phase %s (%s): %s", self.phase.value, e.reason, e)
            if e.reason != SKIP_POD_DELETED:
                evict_run_pods(self.ctx, self.pod)
        except Failed as e:
            outcome, errors = Outcome.FAILED, [f"Check execution error: {self.check.key}: {e}"]
            if e.detail:  # v2's reason stays the first error (alerts match on it); why is the second
                errors.append(e.detail)
            reason = str(e)
            self.log.warning("Run failed in phase %s: %s", self.phase.value, e)
            if self.pod.last is not None:
                logs = self._logs if self._logs is not None else self.recorder.logs(self.pod, self._deadline)
            evict_run_pods(self.ctx, self.pod)
        finally:
            self._waiter.close()
        duration, node = self.clock() - self._started, node_of(self.pod.last)
        if outcome is Outcome.FAILED:
            try:
                self.recorder.failure(errors, reason, duration, self.pod, logs, self._deadline)
            except Skipped as e:
                outcome, skip_reason = Outcome.SKIPPED, e.reason
            except Stopped:
                outcome = Outcome.STOPPED
        if outcome in (Outcome.REPORTED, Outcome.FAILED):
            self.services.disrupted_in_a_row.pop(self.check.ident, None)  # judged: the streak is broken
        result = RunResult(outcome, self.run_uuid, self.phase, errors, duration, self.pod.name, node,
                           dict(self.phase_seconds), skip_reason)
        self.log.debug("Phase times: %s", ", ".join(f"{k}={v:.3f}s" for k, v in self.phase_seconds.items()))
        self.recorder.finished(result)
        return result

    def _disrupted(self) -> Failed | Skipped:
        """The cluster disrupted the run's checker pod before it reported (podstate.disruption): skipped,
        told by an Event; the DISRUPTIONS_TO_FAIL-th such run of the check in a row fails instead, so a
        checker evicted for its own limits still alerts."""
        streak = self.services.disrupted_in_a_row.get(self.check.ident, 0) + 1
        self.services.disrupted_in_a_row[self.check.ident] = streak
        self.recorder.disrupted(self.pod, streak)
        if streak >= DISRUPTIONS_TO_FAIL:
            return Failed(f"checker pod disrupted {streak} times in a row: {self.pod.disruption}")
        return Skipped(SKIP_POD_DISRUPTED, f"checker pod {self.pod.name} was disrupted: {self.pod.disruption}")

    def _run(self) -> None:
        self._claim()
        self._validate()
        self._clear()
        self._create()
        if self._start() and self._report():  # False: settled on fresh reads, straight on to RECORD
            self._exit()
        duration, node = self._record()
        self.phase = Phase.DONE
        self.log.info("Run done in %s: pod %s on node %s", duration, self.pod.name, node or "?")

    # --- the phases, in order ----------------------------------------------------------------------

    def _claim(self) -> None:
        """CLAIM: only this run's UUID may report from now on.

        The claim names the pod this run will create and the hash of its secret: every replica then
        takes reports from that pod only, whatever else carries the same labels and env.
        """
        self.phase = Phase.CLAIM
        self.pod.name = self._v2_name = self._fresh_pod_name()
        self._run_key = checkpod.new_run_key()
        try:
            claimed = self.guard.call("claim the run", self._claim_once, self._deadline)
        except ApiError as e:
            raise Failed(f"failed to claim the run in its khstate: {e}") from e
        self.guard.last_run = khstate.Spec.of(claimed).last_run
        self.log.info("Run started (timeout %s)", format_duration(self.check.timeout))

    def _validate(self) -> None:
        self.phase = Phase.VALIDATE
        problem = validate_pod_spec(self.check.pod_spec)
        if problem:
            raise Failed(problem)

    def _clear(self) -> None:
        """CLEAR: earlier checker pods of this check must be gone before a new one starts (but for those
        already reported stuck Terminating: guard.confirm_cleared)."""
        self.phase = Phase.CLEAR
        stuck = self.guard.stuck()
        stale = earlier(self.services.pods.by_index("check", self.check.ident), self.run_uuid, stuck)
        for pod in stale:
            if terminating(pod):
                continue  # already told to go
            self.log.info("Removing earlier checker pod %s", pod_name_of(pod))
            self.pod.told_to_go.add(pod_name_of(pod))
            try:  # that pod, by its uid: not whatever holds its name by now
                self.services.resources.evict_pod(self.check.namespace, pod_name_of(pod), uid=uid_of(pod) or None,
                                                  timeout=CONFIRM_TIMEOUT)
            except ApiError as e:  # the wait below decides; it fails the run if the pod stays
                self.log.warning("Could not remove earlier checker pod %s: %s", pod_name_of(pod), e)
                self.guard.saw(e)
        if stale and not self._wait(self._earlier_gone):
            self.guard.confirm_cleared(stuck)

    def _create(self) -> None:
        """CREATE: the checker pod, under the name the claim gave it. A pod the run did not create holding
        that name (a squatter: no run key of ours) is left alone: the run claims a fallback name
        (`<check>-<unix seconds>-<5 random>`, what generateName would give) and creates under it, within
        its deadline. The claim names the new pod before it exists, so its report is never refused."""
        self.phase = Phase.CREATE
        for renames in range(RENAMES + 1):
            body = checkpod.build_pod(
                self.check, self.run_uuid, self.wall(), self.ctx.kind.reporting_url(),
                self.services.owner_reference(self.check.namespace), self._wall_start + self.check.timeout,
                checkpod.Claimed(self.pod.name, self._run_key))
            self.pod.sidecars = sidecars_of(body, self.services.config.sidecar_containers)
            try:
                self.pod.created(self.guard.create_pod(body, self.pod.name, self._run_key, self._deadline))
                break
            except Conflict as e:
                if not e.already_exists or renames == RENAMES or self._deadline - self.clock() <= 0:
                    raise Failed(f"failed to create checker pod {self.pod.name}: {e}") from e
                self._rename(e)
            except ApiError as e:
                raise Failed(f"failed to create checker pod: {e}") from e
        self.log.debug("Created checker pod %s", self.pod.name)

    def _rename(self, taken: Conflict) -> None:
        """CREATE found the run's pod name taken by a pod it did not create: claim a fallback name."""
        old, self.pod.name = self.pod.name, checkpod.fallback_pod_name(self._v2_name)
        self.log.warning("Checker pod name %s is taken by a pod this run did not create (%s); leaving it alone "
                         "and creating %s", old, taken, self.pod.name)
        try:
            bound = self.guard.call("claim the run's new pod name", self._rebind_once, self._deadline)
        except ApiError as e:
            raise Failed(f"failed to claim the run in its khstate: {e}") from e
        if bound is None:
            raise Failed("failed to claim the run in its khstate: it names another run now")

    def _start(self) -> bool:
        """START: past Pending, or an image pull failure. False: the run was settled on fresh reads."""
        self.phase = Phase.START
        state = self._wait(self.pod.start_state)
        if state == "deleted":
            raise removed("started")
        if state is None or state == "gone":  # the deadline passed, or the pod left the cache
            if state == "gone":
                self.guard.present(self.pod.name, self.pod.uid, "started")
            self._settle()  # decide on what the API server says
            return False
        if state == "pull":
            pod = self.pod.see(self.guard.present(self.pod.name, self.pod.uid, "started"))  # confirm: not the cache
            if self.pod.deleted(pod):
                raise removed("started")
            failure = start_failure(pod)
            if failure:
                raise Failed(ERR_START + failure)
        return True

    def _report(self) -> bool:
        """REPORT: the report handler stamps our UUID on the khstate. False: the run was settled on fresh reads."""
        self.phase = Phase.REPORT
        outcome = self._wait(partial(report_state, self.guard, self.pod))
        if outcome == "reported":
            pass
        elif outcome == "deleted":
            raise removed("reported")
        elif outcome is None or self.guard.impaired() or self.guard.held():
            self._settle()  # a lagging cache may be all that stands between us and a report
            return False
        elif self.guard.report_confirmed():
            self.log.info("Checker pod reported (confirmed by a read; the cache was behind)")
        elif outcome == "gone":
            self.guard.present(self.pod.name, self.pod.uid, "reported")
            self._settle()
            return False
        else:  # ended without reporting: fail now rather than at the deadline, with v2's reason
            status = (self.pod.last or {}).get("status") or {}
            self.log.warning("Checker pod %s ended (%s) without reporting in", self.pod.name, status.get("phase"))
            raise self.guard.fail(ERR_REPORT, why_ended(self.pod.last, self.pod.sidecars_in(self.pod.last)))
        self.log.debug("Checker pod reported")
        return True

    def _exit(self) -> None:
        """EXIT: the checker is over: the pod finished (or is gone after it did), or only its sidecars
        run, and the run ends the pod (after reading the log tail a reported failure keeps). Deleted by
        someone else first: skipped; disrupted by the cluster after the report: the report stands."""
        self.phase = Phase.EXIT
        state = self._wait(self.pod.exit_state)
        if state is None:
            pod = self.guard.read_pod(self.pod.name, self.pod.uid)
            if pod is not None:
                self.pod.see(pod)
            if self.pod.deleted(pod):
                state = "deleted"
            elif pod is not None and not self.pod.over(pod):
                raise self.guard.fail(ERR_EXIT)
        if state == "deleted" and self.pod.disruption:
            self.log.info("Checker pod reported, then the cluster disrupted it (%s): the report stands",
                          self.pod.disruption)
        elif state == "deleted":
            raise removed("exited")
        elif self.pod.only_sidecars():
            if self._reported_failure():
                self._logs = self.recorder.logs(self.pod, self._deadline)
            end_sidecar_pod(self.ctx, self.pod)

    def _record(self) -> tuple[str, str]:
        """RECORD: the result (finish.py); returns the run's duration as written and its node."""
        self.phase = Phase.RECORD
        node, seconds = node_of(self.pod.last), self.clock() - self._started
        self.recorder.result(seconds, self.pod, self._deadline, keep_logs=self._reported_failure(), logs=self._logs)
        return format_duration(seconds), node

    def _reported_failure(self) -> bool:
        """The checker reported OK false: its run keeps what it printed."""
        state = self.ctx.cached_state()
        return self.guard.shows_report(state) and not khstate.Spec.of(state or {}).ok

    def _settle(self) -> None:
        """The deadline passed (or the caches were not to be trusted): decide on fresh reads (ending.py).

        Returns when the pod reported and exited (the run goes on to RECORD); otherwise raises v2's
        reason for where the pod is (a failure, or a skip if the control plane was impaired during the run).
        """
        if self._deadline - self.clock() > 0 and self._wait(partial(reported_and_exited, self.guard, self.pod)):
            return  # not at the deadline yet, and the caches said more
        ending = settled(self.guard, self.pod)
        if ending is not None:
            if ending.phase is not None:
                self.phase = ending.phase
            raise ending.error

    # --- what the phases wait for, and their API calls ---------------------------------------------

    def _wait(self, predicate: Callable[[], T]) -> T | None:
        value = self._waiter.wait_for(predicate, self._deadline, self.stop, self.clock)
        if self.stop.is_set():
            raise Stopped()
        return value

    def _earlier_gone(self) -> bool:
        return not earlier(self.services.pods.by_index("check", self.check.ident), self.run_uuid,
                           self.services.stuck_terminating)

    def _fresh_pod_name(self) -> str:
        """`<check>-<unix seconds>`; the name has one-second resolution: never reuse one that still exists."""
        while self.services.pods.get(self.check.namespace,
                                     name := checkpod.pod_name(self.check.name, int(self.wall()))) is not None:
            if self.stop.wait(max(0.01, 1.0 - (self.wall() % 1.0))):
                raise Stopped()
        return name

    def _rebind_once(self, timeout: float) -> Obj | None:
        return khstate.rebind_run_pod(self.ctx.state_write(timeout, self._deadline), self.pod.name,
                                      hint=self.ctx.cached_state())

    def _claim_once(self, timeout: float) -> Obj:
        return khstate.claim_run(self.ctx.state_write(timeout, self._deadline), hint=self.ctx.cached_state(),
                                 run_pod=self.pod.name, run_key_sha256=checkpod.run_key_sha256(self._run_key))
