"""Writing one run's result: what leaves a run once it is decided.

A run that reported gets RunDuration and Node in its khstate (khstate.record_result); a run that failed
gets its execution error (khstate.record_error). Either write carries the run's history entry (with
the checker's log tail when it failed and captureLogs is on), and is conditional on this run's uuid:
a stopped or late run never overwrites the result of the run that followed it. After the write: the
Event (a check failed, or recovered), the InfluxDB point, and the skip counter for a run not judged.
Writes are retried through the run's Guard for a grace period past the deadline.

This module does not decide how a run ended (runner.py) nor when evidence is trusted (guard.py).
"""
from __future__ import annotations

from collections.abc import Callable

from kuberhealthy.base.durations import format_duration
from kuberhealthy.base.errors import ApiError
from kuberhealthy.kube import Obj
from kuberhealthy.outputs.events import ObjectRef
from kuberhealthy.records import khstate
from kuberhealthy.records.history import RunFacts, RunRecord
from kuberhealthy.run.context import RunContext
from kuberhealthy.run.guard import Guard, Skipped
from kuberhealthy.run.podstate import RunPod, node_of, read_log_tail
from kuberhealthy.run.result import Outcome, RunResult

GRACE = 10.0  # seconds past the deadline still spent writing a verdict (RECORD, an error)
LOG_TIMEOUT = 3.0  # seconds for reading a failed checker's log tail


class Recorder:
    """Writes one run's result and remembers the khstate as this run last wrote it."""

    def __init__(self, ctx: RunContext, guard: Guard) -> None:
        self.ctx = ctx
        self.services = ctx.services
        self.check = ctx.check
        self.run_uuid = ctx.run_uuid
        self.guard = guard
        self.clock = ctx.clock
        self.log = ctx.log
        self.written: Obj | None = None  # the khstate as this run last wrote it

    def logs(self, pod: RunPod, deadline: float) -> str | None:
        """The tail of the checker's log, for a failed run's history entry (captureLogs)."""
        if not self.services.config.capture_logs or not pod.name:
            return None
        return read_log_tail(self.services.resources, self.check.namespace, pod.name, pod.last,
                             max(0.5, min(LOG_TIMEOUT, deadline + GRACE - self.clock())), pod.sidecars_in(pod.last))

    def result(self, seconds: float, pod: RunPod, deadline: float, keep_logs: bool, logs: str | None = None) -> None:
        """The pod reported and exited: RunDuration (the real wall time of the run, `seconds`), Node and the
        history entry; `keep_logs`: the checker reported a failure, so keep what it printed (`logs`, when
        read already). Raises Stopped."""
        node, duration = node_of(pod.last), format_duration(seconds)
        until = max(deadline, self.clock() + GRACE)
        if keep_logs and logs is None:
            logs = self.logs(pod, until)
        elif not keep_logs:
            logs = None
        ran = RunFacts(self.run_uuid, self.ctx.wall_start, seconds, node, pod.name)
        history = self._history(lambda spec: RunRecord.reported(ran, spec, logs))

        def record(timeout: float) -> Obj | None:
            return khstate.record_result(self.ctx.state_write(timeout, until), duration, node,
                                         hint=self.ctx.cached_state(), history=history)
        try:
            self.written = self.guard.call("record the run", record, until)
        except (Skipped, ApiError) as e:
            # The report itself is stored; only RunDuration/Node (and this run's history entry) are missing.
            # Not a failure of the check.
            self.log.warning("Could not record the run's duration and node: %s", e)
            self.written = self.ctx.cached_state()
        else:
            self._carried(history)
            spec = khstate.Spec.of(self.written or {})
            if self.written is not None and not spec.ok:
                self.services.events.check_failed(self._ref(), spec.errors[0] if spec.errors else "reported OK: false")
            elif self.written is not None and history.previous_failures > 0:
                self.services.events.check_recovered(self._ref(), history.previous_failures)

    def failure(self, errors: list[str], reason: str, seconds: float, pod: RunPod, logs: str | None,
                deadline: float) -> None:
        """Write the execution error (only while the khstate still names this run). Raises Skipped when
        the API stayed away through the grace period, Stopped on a stop."""
        until = max(deadline, self.clock()) + GRACE
        node = node_of(pod.last)
        ran = RunFacts(self.run_uuid, self.ctx.wall_start, seconds, node, pod.name if pod.last is not None else "")
        record = RunRecord.failed(ran, reason, errors, logs)
        history = self._history(lambda _spec: record)

        def write(timeout: float) -> Obj | None:
            return khstate.record_error(self.ctx.state_write(timeout, until), errors, format_duration(seconds), node,
                                        history=history, hint=self.ctx.cached_state())
        try:
            self.written = self.guard.call("record the failure", write, until)
        except Skipped as e:
            self.log.warning("Could not record the failure: %s", e)
            raise
        except ApiError as e:
            self.log.error("Could not record the failure: %s", e)
        if self.written is None:
            self.log.info("A newer run has claimed the khstate; this run's failure is not recorded")
        else:
            self._carried(history)
            self.services.events.check_failed(self._ref(), errors[0])

    def disrupted(self, pod: RunPod, in_a_row: int) -> None:
        """The cluster disrupted the run's checker pod: an Event on the check says so."""
        self.services.events.pod_disrupted(self._ref(), pod.name, pod.disruption, in_a_row)

    def finished(self, result: RunResult) -> None:
        """After the run: count a run that was not judged; send the InfluxDB point of one that was."""
        if result.outcome is Outcome.SKIPPED:
            self.services.stats.skip(result.skip_reason)
            self.services.rollups.skipped(self._rollup_key(), self.ctx.wall())  # the next run's write counts it
        if result.outcome in (Outcome.REPORTED, Outcome.FAILED):
            self._forward(result)

    def _forward(self, result: RunResult) -> None:
        influx = self.services.influx
        if influx is None:
            return
        spec = khstate.Spec.of(self.written or {})  # what this run wrote, not a possibly lagging cache
        ok = spec.ok if result.outcome is Outcome.REPORTED else False
        errors = list(spec.errors) if result.outcome is Outcome.REPORTED else result.errors
        influx.push(self.check.namespace, self.check.name, ok, errors, result.duration)

    def _history(self, record: Callable[[Obj], RunRecord]) -> khstate.HistoryWrite:
        config, now = self.services.config, self.ctx.wall()
        rollup = self.services.rollups.write(self._rollup_key(), now,
                                             None if self.check.single_run_only else self.check.run_interval)
        return khstate.HistoryWrite(record, config.history_length, config.capture_logs, now, rollup=rollup)

    def _rollup_key(self) -> str:
        return self.ctx.kind.state_key(self.check.namespace, self.check.name)

    def _carried(self, history: khstate.HistoryWrite) -> None:
        """After a write that carried the run's history (and so its rollup): what was pending is done;
        a stored rollup that could not be read was started afresh: an Event says so."""
        rollup = history.rollup
        if rollup is None or self.written is None:
            return
        rollup.done()
        if rollup.warning is not None:
            self.log.warning("%s", rollup.warning)
            self.services.events.state_not_kept(self._ref(), rollup.warning)

    def _ref(self) -> ObjectRef:
        kind = self.ctx.kind
        return ObjectRef(kind.event_kind, self.check.namespace, self.check.name, self.check.uid,
                         kind.resource.api_version)
