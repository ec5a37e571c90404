"""The trust rules of one run: when it believes what it sees, and what it does when it cannot.

A cache can be old (a watch broke, the API server restarted or froze), and an API call can fail because
the control plane is away; neither says anything about the checked thing. So:
  * retry: API errors at CLAIM, CREATE and RECORD are retried (jittered backoff) within the run's
    deadline, RECORD's within a grace past it (Guard.call); a transient failure at the end is a skip.
    A run retries at most RETRIES times in all, whatever its timeout: a slow API server gets no more
    requests per run the longer it stays slow (each retry of a request it timed out is one more for
    it to serve). A request that never left because every connection of the client stayed busy
    (NoFreeConnection) is not retried at all: the run is skipped at once, shedding its load;
    A retried create that finds the name taken by its own earlier attempt takes that pod (its run
    key); a name any other pod holds stays that pod's (Conflict: the runner renames, never removes);
  * confirm: a verdict that would fail the run is confirmed by one bounded read first (the pod, the
    khstate, the check's pods by label); the cache alone never fails a run;
  * skip, not fail: a run that cannot be completed or judged because the API was away, or its caches
    were not current at some moment of the run (impaired), is SKIPPED
    (`kuberhealthy_runs_skipped_total{reason}`): the next due run tries again (Guard.fail decides).
    So is a run whose checker pod someone else deleted before it ended on its own (removed()): a
    deletionTimestamp the run did not cause skips the run, even when the pod then ends Failed (the
    SIGTERM's exit 143 on a real kubelet) while it is Terminating;
  * once: an earlier checker pod stuck Terminating fails one run, not every run after it.
The ways a run ends early are the exceptions here (Stopped, Failed, Skipped). This module does not
decide what a run waits for or in which order (runner.py), and writes no result (finish.py).
"""
from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from functools import partial
from itertools import count
from typing import TypeVar

from kuberhealthy.base.errors import ApiError, Conflict, NoFreeConnection, NotFound, is_transient
from kuberhealthy.kube import PODS, Obj
from kuberhealthy.outputs.runstats import SKIP_API, SKIP_POD_DELETED
from kuberhealthy.records import khstate
from kuberhealthy.records.checkpod import pod_check_index, pod_run_key
from kuberhealthy.run.context import RunContext
from kuberhealthy.run.podstate import ERR_CLEANUP, earlier, pod_name_of, pod_uid, terminating, uid_of

T = TypeVar("T")

CONFIRM_TIMEOUT = 5.0  # seconds for one confirming read
WRITE_TIMEOUT = 5.0  # seconds per request of a retried call
RETRY_FIRST = 0.5  # seconds before the first retry, doubled per retry (jittered: half to all of it)
RETRY_MAX = 10.0  # seconds: the longest wait between two tries
RETRIES = 5  # retries per run, all its calls together (0.5+1+2+4+8 s: an API server restart is ridden out)


class Stopped(Exception):
    """The check was stopped (shutdown, leadership lost, spec changed)."""


class Failed(Exception):
    """The run failed; the message is the reason (v2's, word for word: the run's first error). `detail`,
    when there is one, is the run's second error: why, in the pod's own words (podstate.why_ended)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.detail = detail


class Skipped(Exception):
    """The run is not judged; `reason` is the skip counter's label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def removed(before: str) -> Skipped:
    """The checker pod was deleted by someone else before it `before` ("started", "reported", "exited"):
    gone, or Terminating by a deletionTimestamp the run did not cause (kubectl delete, an eviction, a
    drain, a node shutdown), whatever phase it then ends in. Not the check's failure, and nothing to record."""
    return Skipped(SKIP_POD_DELETED, f"checker pod was removed before it {before}")


class Guard:
    """One run's trust rules, and what they remember: whether the API gave trouble during the run."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.services = ctx.services
        self.check = ctx.check
        self.run_uuid = ctx.run_uuid
        self.stop = ctx.stop
        self.since = ctx.started  # the run's start (monotonic): a cache impaired before it does not count
        self.clock = ctx.clock
        self.log = ctx.log
        self.api_trouble = False  # an API call of this run failed for a transient reason
        self.retries_left = RETRIES  # Guard.call's budget, shared by the run's calls
        self.last_run: str | None = None  # the khstate's LastRun when the run claimed it (set at CLAIM)

    def call(self, what: str, fn: Callable[[float], T], until: float) -> T:
        """Call fn(timeout) until it does not fail transiently, with backoff, until `until` (monotonic),
        within the run's retry budget (RETRIES for all its calls).

        A transient failure at the end is a skip: the control plane, not the check, failed. So is one
        whose request found no free connection (NoFreeConnection), without a retry.
        """
        delay = RETRY_FIRST
        while True:
            left = until - self.clock()
            try:
                return fn(max(0.5, min(WRITE_TIMEOUT, left)))
            except ApiError as e:
                if not is_transient(e):
                    raise
                self.api_trouble = True
                left = until - self.clock()
                if left <= 0 or isinstance(e, NoFreeConnection):
                    raise Skipped(SKIP_API, f"could not {what}: {e}") from e
                if self.retries_left <= 0:
                    raise Skipped(SKIP_API, f"could not {what}: {e} (the run's {RETRIES} retries are spent)") from e
                self.retries_left -= 1
                self.log.warning("Could not %s (%s); retrying", what, e)
                if self.stop.wait(min(left, delay * (0.5 + random.random() / 2))):
                    raise Stopped() from e
                delay = min(delay * 2, RETRY_MAX)

    def saw(self, e: ApiError) -> None:
        """An API error the run goes on past (a later wait decides): a transient one still impairs the run."""
        self.api_trouble |= is_transient(e)

    def read_pod(self, name: str, uid: str = "") -> Obj | None:
        """The pod as the API server has it now (None: gone; with `uid`, also when another pod holds the name
        now). Raises Skipped when it cannot be read."""
        try:
            pod = self.services.resources.get(PODS, self.check.namespace, name, timeout=CONFIRM_TIMEOUT)
        except NotFound:
            return None
        except ApiError as e:
            self.api_trouble = True
            raise Skipped(SKIP_API, f"could not read checker pod {name}: {e}") from e
        return None if uid and uid_of(pod) not in (uid, "") else pod

    def present(self, name: str, uid: str, before: str) -> Obj:
        """The pod as the API server has it now; gone, it was removed before it `before`: skipped."""
        pod = self.read_pod(name, uid)
        if pod is None:
            raise removed(before)
        return pod

    def read_state(self) -> Obj | None:
        """The check's khstate as the API server has it now (None: gone). Raises Skipped when it cannot be read."""
        try:
            return self.ctx.kind.store.read(self.services.resources, self.check.namespace, self.check.name,
                                            CONFIRM_TIMEOUT)
        except ApiError as e:
            self.api_trouble = True
            raise Skipped(SKIP_API, f"could not read the khstate: {e}") from e

    def shows_report(self, obj: Obj | None) -> bool:
        """The khstate shows this run's report: our handler's stamp, or (any writer) LastRun advanced
        while the khstate still names this run."""
        if obj is None:
            return False
        if khstate.reported_uuid(obj) == self.run_uuid:
            return True
        spec = khstate.Spec.of(obj)
        return spec.uuid == self.run_uuid and spec.last_run is not None and spec.last_run > (self.last_run or "")

    def reported(self) -> bool:
        """The khstate cache shows this run's report: enough to go on (only a verdict that fails needs a read)."""
        return self.shows_report(self.ctx.cached_state())

    def report_confirmed(self) -> bool:
        """The khstate as the API server has it now shows this run's report. Raises Skipped when it cannot be read."""
        return self.shows_report(self.read_state())

    def create_pod(self, body: Obj, name: str, run_key: str, until: float) -> Obj:
        """Create the checker pod `name`, retried like every call. A retry that finds the name taken
        looks whether the pod there carries this run's key: then an earlier attempt went through after
        all (only its answer was lost), and that pod is the run's."""
        return self.call("create the checker pod", partial(self._create_once, body, name, run_key, count(1)), until)

    def _create_once(self, body: Obj, name: str, run_key: str, attempts: Iterator[int], timeout: float) -> Obj:
        attempt = next(attempts)
        try:
            return self.services.resources.create(PODS, self.check.namespace, body, timeout=timeout)
        except Conflict as e:
            if attempt > 1 and e.already_exists:
                pod = self.services.resources.get(PODS, self.check.namespace, name, timeout=timeout)
                if pod_run_key(pod) == run_key:  # ours, not a look-alike that took the name
                    return pod
            raise

    def stuck(self) -> set[str]:
        """Uids of checker pods already reported stuck Terminating (shared by the daemon's runs)."""
        seen = self.services.stuck_terminating
        if len(seen) > 10000:
            seen.clear()
        return seen

    def confirm_cleared(self, stuck: set[str]) -> None:
        """CLEAR's wait ran out with earlier checker pods in the cache: list the check's pods (the cache
        may be behind). Earlier pods still there fail the run with v2's cleanup error (a skip when the
        run was impaired). A pod stuck Terminating (a lost node, a finalizer nobody removes) is waited
        for once, as v2 did: the run that fails on it adds it to `stuck`, so the operator hears of it
        once and later runs are not blocked forever by a pod that is already being deleted."""
        try:
            items, _ = self.services.resources.list(PODS, self.check.namespace,
                                                    f"{self.ctx.kind.pod_label}={self.check.name}",
                                                    timeout=CONFIRM_TIMEOUT)
            items = [p for p in items if self.check.ident in pod_check_index(p)]  # not a same-named other kind's
        except ApiError as e:
            self.api_trouble = True
            raise Skipped(SKIP_API, f"could not list the check's pods: {e}") from e
        left = earlier(items, self.run_uuid, stuck)
        if not left:
            self.log.info("Earlier checker pods are gone (confirmed by a read; the cache was behind)")
            return
        error = self.fail(ERR_CLEANUP)
        for pod in left:
            if terminating(pod) and isinstance(error, Failed):
                stuck.add(pod_uid(pod))
                self.log.warning("Earlier checker pod %s is stuck Terminating (since %s; a lost node or a "
                                 "finalizer?); reported once, later runs will not wait for it", pod_name_of(pod),
                                 (pod.get("metadata") or {}).get("deletionTimestamp"))
        raise error

    def held(self) -> bool:
        """A report for this run was accepted but waits (on this replica) for the API to store it."""
        return self.services.held.holds(self.run_uuid)

    def impaired(self) -> bool:
        """Whether the API was away or too slow, or the caches this run decides on were not current,
        during the run. A report accepted for this run but not stored yet (held) counts: the checker
        reported, the control plane could not take it in time."""
        return self.api_trouble or self.held() or any(
            c.impaired_since(self.since) for c in (self.services.pods, self.ctx.kind.states))

    def fail(self, reason: str, detail: str = "") -> Failed | Skipped:
        """The exception for a run that cannot succeed: a failure (v2's `reason`, then `detail` as a second
        error when there is one), unless the control plane was impaired."""
        if self.impaired():
            return Skipped(SKIP_API, f"the API server was unavailable during the run ({reason})")
        return Failed(reason, detail)
