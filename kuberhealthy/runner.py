"""One check run: the checker pod's lifecycle as an explicit state machine.

    CLAIM → VALIDATE → CLEAR → CREATE → START → REPORT → EXIT → RECORD → DONE

Every wait is one Notifier.wait_for() on the watch caches, racing one monotonic deadline for the
whole run (start + timeout) and the check's stop event: no fixed sleeps, no polling. A run that
fails records `Check execution error: <ns>/<name>: <reason>` with v2's reasons. A checker pod
deleted by someone else before it reported skips the run quietly. On a timeout or a stop the run's
live pods are evicted (delete as fallback). This module knows nothing about HTTP or scheduling.
"""
from __future__ import annotations

import enum
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kuberhealthy import khstate
from kuberhealthy.checkpod import RUN_ID_LABEL, build_pod, pod_name
from kuberhealthy.checks import CheckSpec, validate_pod_spec
from kuberhealthy.durations import format_duration
from kuberhealthy.errors import ApiError, Conflict, NotFound
from kuberhealthy.kube import KHSTATES, PODS, Obj

logger = logging.getLogger(__name__)

POD_START_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")
FINISHED = ("Succeeded", "Failed")

# v2's reasons, kept word for word: alerts and dashboards match on them.
ERR_CLEANUP = "failed to see pod cleanup within timeout"
ERR_RUNNING = "failed to see pod running within timeout"
ERR_REPORT = "timed out waiting for checker pod to report in"
ERR_EXIT = "timed out waiting for pod to exit"
ERR_START = "error when waiting for pod to start: "


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
    SKIPPED = "skipped"  # the pod was removed by someone else before reporting
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


class _Stopped(Exception):
    pass


class _Failed(Exception):
    pass


class _Skipped(Exception):
    pass


def _live(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") not in FINISHED


def _start_failure(pod: Obj) -> str | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        if reason in POD_START_FAILURES:
            return str(reason)
    return None


class Runner:
    """Runs one check once. Construct per run; call run() on the check's thread."""

    def __init__(self, services: Any, check: CheckSpec, stop: threading.Event,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.s = services
        self.check = check
        self.stop = stop
        self.clock = clock
        self.wall = wall
        self.run_uuid = str(uuid.uuid4())
        self._phase = Phase.CLAIM
        self._phase_started = clock()
        self.phase_seconds: dict[str, float] = {}
        self.pod: Obj | None = None
        self._wall_start = wall()
        self._last_run: str | None = None  # the khstate's LastRun when the run claimed it
        self._written: Obj | None = None  # the khstate as this run last wrote it
        self.log = logging.LoggerAdapter(logger, {"check": check.key, "run": self.run_uuid})

    @property
    def phase(self) -> Phase:
        return self._phase

    @phase.setter
    def phase(self, value: Phase) -> None:
        now = self.clock()
        self.phase_seconds[self._phase.value] = self.phase_seconds.get(self._phase.value, 0.0) + (
            now - self._phase_started)
        self._phase, self._phase_started = value, now

    # --- helpers ---------------------------------------------------------------------------------

    def _pods_of_run(self) -> list[Obj]:
        return self.s.pods.by_index("uuid", self.run_uuid)

    def _my_pod(self) -> Obj | None:
        pods = self._pods_of_run()
        return pods[0] if pods else None

    def _wait(self, predicate: Callable[[], Any], deadline: float) -> Any:
        value = self.s.notifier.wait_for(predicate, deadline, self.stop, self.clock)
        if self.stop.is_set():
            raise _Stopped()
        return value

    def _is_report(self, obj: Obj | None) -> bool:
        """The khstate shows this run's report: our handler's stamp, or (any writer) LastRun advanced
        while the khstate still names this run."""
        if obj is None:
            return False
        if khstate.reported_uuid(obj) == self.run_uuid:
            return True
        spec = khstate.Spec.of(obj)
        return spec.uuid == self.run_uuid and spec.last_run is not None and spec.last_run > (self._last_run or "")

    def _reported(self) -> bool:
        return self._is_report(self.s.khstates.get(self.check.namespace, self.check.name))

    def _reported_confirmed(self) -> bool:
        """The khstate cache may lag: confirm with one read before deciding the pod never reported."""
        if self._reported():
            return True
        try:
            return self._is_report(self.s.resources.get(KHSTATES, self.check.namespace, self.check.name))
        except ApiError:
            return False

    def _evict_run_pods(self) -> None:
        """Remove this run's live pods: those in the cache, and the one we created (the cache may not
        have seen it yet). An API error here is logged; the reaper or the next run's CLEAR retries."""
        names = {p["metadata"]["name"] for p in self._pods_of_run() if _live(p)}
        if self.pod is not None and _live(self.pod):
            names.add(str(self.pod["metadata"]["name"]))
        for name in sorted(names):
            try:
                how = self.s.resources.evict_pod(self.check.namespace, name)
                self.log.info("Removed checker pod %s (%s)", name, how)
            except ApiError as e:
                self.log.warning("Could not remove checker pod %s: %s", name, e)

    # --- the run -----------------------------------------------------------------------------------

    def run(self) -> RunResult:
        start = self.clock()
        self._wall_start = self.wall()
        deadline = start + self.check.timeout
        try:
            self._run(deadline)
            outcome, errors = Outcome.REPORTED, list[str]()
        except _Stopped:
            outcome, errors = Outcome.STOPPED, []
            self.log.info("Run stopped in phase %s", self.phase.value)
            self._evict_run_pods()
        except _Skipped:
            outcome, errors = Outcome.SKIPPED, []
            self.log.info("Checker pod was removed before it reported; skipping this run")
        except _Failed as e:
            outcome, errors = Outcome.FAILED, [f"Check execution error: {self.check.key}: {e}"]
            self.log.warning("Run failed in phase %s: %s", self.phase.value, e)
            self._evict_run_pods()
        duration = self.clock() - start
        node = str(((self.pod or {}).get("spec") or {}).get("nodeName") or "")
        if outcome is Outcome.FAILED:
            self._written = khstate.record_error(
                self.s.resources, self.check.namespace, self.check.name, errors, self.s.config.pod_name,
                format_duration(duration), node, self.check.workload)
        result = RunResult(outcome, self.run_uuid, self.phase, errors, duration,
                           str(((self.pod or {}).get("metadata") or {}).get("name") or ""), node,
                           dict(self.phase_seconds))
        self.log.debug("Phase times: %s", ", ".join(f"{k}={v:.3f}s" for k, v in self.phase_seconds.items()))
        if outcome in (Outcome.REPORTED, Outcome.FAILED):
            self._forward(result)
        return result

    def _run(self, deadline: float) -> None:
        ns, name = self.check.namespace, self.check.name
        # CLAIM: only this run's UUID may report from now on.
        self.phase = Phase.CLAIM
        claimed = khstate.claim_run(self.s.resources, ns, name, self.run_uuid, self.s.config.pod_name,
                                    self.check.workload, hint=self.s.khstates.get(ns, name))
        self._last_run = khstate.Spec.of(claimed).last_run
        self.log.info("Run started (timeout %s)", format_duration(self.check.timeout))

        self.phase = Phase.VALIDATE
        problem = validate_pod_spec(self.check.pod_spec)
        if problem:
            raise _Failed(problem)

        # CLEAR: earlier checker pods of this check must be gone before a new one starts.
        self.phase = Phase.CLEAR
        key = self.check.key

        def earlier_live() -> list[Obj]:
            return [p for p in self.s.pods.by_index("check", key)
                    if _live(p) and (p["metadata"].get("labels") or {}).get(RUN_ID_LABEL) != self.run_uuid]
        stale = earlier_live()
        for pod in stale:
            self.log.info("Removing earlier checker pod %s", pod["metadata"]["name"])
            try:
                self.s.resources.evict_pod(ns, pod["metadata"]["name"])
            except ApiError as e:  # the wait below decides; it fails the run if the pod stays
                self.log.warning("Could not remove earlier checker pod %s: %s", pod["metadata"]["name"], e)
        if stale and not self._wait(lambda: not earlier_live(), deadline):
            raise _Failed(ERR_CLEANUP)

        # CREATE: the name has one-second resolution; never reuse a name that still exists.
        self.phase = Phase.CREATE
        while self.s.pods.get(ns, pod_name(name, int(self.wall()))) is not None:
            if self.stop.wait(max(0.01, 1.0 - (self.wall() % 1.0))):
                raise _Stopped()
        body = build_pod(self.check, self.run_uuid, self.wall(), self.s.config.external_check_reporting_url,
                         self.s.owner_reference(ns), deadline_unix=self._wall_start + self.check.timeout)
        try:
            self.pod = self.s.resources.create(PODS, ns, body)
        except Conflict as e:
            raise _Failed(f"failed to create checker pod {body['metadata']['name']}: {e}") from None
        except ApiError as e:
            raise _Failed(f"failed to create checker pod: {e}") from None
        self.log.info("Created checker pod %s", body["metadata"]["name"])

        # START: past Pending, or an image pull failure.
        self.phase = Phase.START

        def started() -> tuple[str, Obj | None] | None:
            pod = self._my_pod()
            if pod is None:
                return ("gone", None) if self.s.pods.get(ns, body["metadata"]["name"]) is None else None
            failure = _start_failure(pod)
            if failure:
                return ("pull", pod)
            if (pod.get("status") or {}).get("phase") not in (None, "", "Pending"):
                return ("started", pod)
            return None
        got = self._wait_pod_seen(started, deadline)
        if got is None:
            raise _Failed(ERR_RUNNING)
        state, pod = got
        if pod is not None:
            self.pod = pod
        if state == "gone":
            raise _Skipped()
        if state == "pull":
            raise _Failed(ERR_START + str(_start_failure(self.pod or {})))

        # REPORT: the report handler stamps our UUID on the khstate.
        self.phase = Phase.REPORT

        def reported_or_ended() -> str | None:
            if self._reported():
                return "reported"
            pod = self._my_pod()
            if pod is None:
                return "gone"
            self.pod = pod
            return "ended" if not _live(pod) else None
        state2 = self._wait(reported_or_ended, deadline)
        if state2 != "reported" and not self._reported_confirmed():
            if state2 == "gone":
                raise _Skipped()
            if state2 == "ended":
                # Fail now rather than at the deadline, with v2's reason (alerts match on it).
                status = (self.pod or {}).get("status") or {}
                self.log.warning("Checker pod %s ended (%s) without reporting in",
                                 (self.pod or {}).get("metadata", {}).get("name"), status.get("phase"))
            raise _Failed(ERR_REPORT)
        self.log.info("Checker pod reported")

        # EXIT: the pod finishes (or is gone).
        self.phase = Phase.EXIT

        def exited() -> bool:
            pod = self._my_pod()
            if pod is None:
                return True
            self.pod = pod
            return not _live(pod)
        if not self._wait(exited, deadline):
            raise _Failed(ERR_EXIT)

        # RECORD: RunDuration is the real wall time of the run; Node is where the pod ran.
        self.phase = Phase.RECORD
        node = str(((self.pod or {}).get("spec") or {}).get("nodeName") or "")
        duration = format_duration(self.clock() - (deadline - self.check.timeout))
        self._written = khstate.record_result(self.s.resources, ns, name, self.run_uuid, duration, node,
                                              self.s.config.pod_name, hint=self.s.khstates.get(ns, name))
        self.phase = Phase.DONE
        self.log.info("Run done in %s on node %s", duration, node or "?")

    def _wait_pod_seen(self, predicate: Callable[[], Any], deadline: float) -> Any:
        """Like _wait, but a pod the cache has not seen yet is not yet 'gone'."""
        seen = self._wait(lambda: self._my_pod() is not None or None, deadline)
        if seen is None:
            # Never seen by the deadline: deleted by someone before the watch caught it (skip the run),
            # or the watch is behind (a start timeout). One read tells which.
            try:
                self.s.resources.get(PODS, self.check.namespace, str((self.pod or {})["metadata"]["name"]))
            except NotFound:
                return ("gone", None)
            except ApiError:
                pass
            return None
        return self._wait(predicate, deadline)

    def _forward(self, result: RunResult) -> None:
        influx = getattr(self.s, "influx", None)
        if influx is None:
            return
        spec = khstate.Spec.of(self._written or {})  # what this run wrote, not a possibly lagging cache
        ok = spec.ok if result.outcome is Outcome.REPORTED else False
        errors = list(spec.errors) if result.outcome is Outcome.REPORTED else result.errors
        influx.push(self.check.namespace, self.check.name, ok, errors, result.duration)
