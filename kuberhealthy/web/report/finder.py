"""Finding the checker pod behind a report: the pod cache first, a short wait for a pod created a moment
ago, then at most one bounded read; and binding what was found to the run's claim.

A caller names its run with the `kh-run-uuid` header (pods by label `kuberhealthy-run-id`) or, without
it, by its source address (the Running pod with that pod IP). As in v2, the pod must carry the
check-name annotation and a `KH_RUN_UUID` env var. The run's khstate claim names the pod the run
created and the hash of a secret on it (khstate.RunClaim): of the pods found, only that one may report;
look-alikes are ignored, never counted as duplicates, and a run that is over is refused. A claim
without a pod name (written by an older daemon during an upgrade) binds to the earliest-created
candidate.

Looking up never lists the cluster per report: the pod cache answers; only a cache miss costs one
bounded read by label (or by pod IP), and only for a run the caches know (triage.py sorts out the
others before, and hands in what its rescue read found as `found`). When neither can say yet,
CallerNotYetKnown (503), never a refusal. The rules that turn this into a verdict (tokens, the source
check) are caller.py's, this module's only user; how a report names its run (naming.py) is shared
with triage.py. This module knows nothing of HTTP.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from kuberhealthy.base.errors import ApiError
from kuberhealthy.base.notify import Notifier
from kuberhealthy.checkclient import ENV_DEADLINE as KH_CHECK_RUN_DEADLINE
from kuberhealthy.checkclient import ENV_RUN_UUID as KH_RUN_UUID
from kuberhealthy.kube import Cache, Obj
from kuberhealthy.records.checkpod import (
    CHECK_NAME_ANNOTATION,
    RUN_ID_LABEL,
    pod_check,
    pod_ip_index,
    pod_run_key,
    run_key_sha256,
)
from kuberhealthy.records.khstate import RunClaim
from kuberhealthy.records.kinds import ident
from kuberhealthy.web.report.naming import FINISHED, FallbackRead, UnknownCaller, named_by, not_found

READ_RESERVE = 0.8  # seconds of a request's budget kept for the fallback read after the cache wait


# (check ident, timeout seconds) -> the check's state as the API server has it (None: there is none)
StateRead = Callable[[str, float], Obj | None]
# check ident -> the cache of its kind's states (records/kinds.py)
StateCaches = Callable[[str], Cache]


class NotTheRunsPod(UnknownCaller):
    """None of the pods found is the one the run created (a look-alike); `claimed_elsewhere`: the
    run's pod was not among those looked at (it may exist, unseen yet)."""

    def __init__(self, reason: str, claimed_elsewhere: bool = False, check: str | None = None) -> None:
        super().__init__(reason)
        self.claimed_elsewhere = claimed_elsewhere
        self.check = check  # the ident of the check the report was for


class RunIsOver(UnknownCaller):
    """The run's pod has finished, or the run was recorded as over: no report is taken for it."""

    def __init__(self, reason: str, check: str | None = None) -> None:
        super().__init__(reason)
        self.check = check  # the ident of the check the report was for


class CallerNotYetKnown(Exception):
    """The caller cannot be confirmed or refused right now (control plane away or lagging): 503."""


@dataclass(frozen=True)
class Caller:
    namespace: str
    pod_name: str
    check: str  # the check (or job) name from the pod's annotation
    run_uuid: str  # the pod's KH_RUN_UUID
    ident: str  # the check's identity (records/kinds.py): which kind, so where its state is
    selector: str  # how it was found, for logs and reasons
    deadline: float | None = None  # the pod's KH_CHECK_RUN_DEADLINE (unix seconds), when readable
    pod_uid: str = ""
    pod_ips: tuple[str, ...] = ()
    host_ip: str = ""  # the node's address: where a hostNetwork or SNATed pod's requests come from
    state: Obj | None = None  # the khstate the run was bound against (a hint for the write)


def _running(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


def _created(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("creationTimestamp") or "")


class CallerFinder:
    """Looks callers up in the checker-pod cache (indexes "uuid" and "ip"), then with one bounded read."""

    def __init__(self, pods: Cache, notifier: Notifier, wait: float, fallback: FallbackRead | None = None,
                 clock: Callable[[], float] = time.monotonic, states: StateCaches | None = None,
                 read_state: StateRead | None = None) -> None:
        self._pods = pods
        self._notifier = notifier
        self._wait = wait
        self._fallback = fallback
        self._clock = clock
        self._states = states  # None: no binding (v2's rules only)
        self._read_state = read_state

    def _lookup(self, find: Callable[[], list[Obj]], topic: tuple[str, str, str], deadline: float) -> list[Obj]:
        found = find()
        if found or self._wait <= 0:
            return found
        with self._notifier.waiter(topic) as waiter:
            return waiter.wait_for(find, min(deadline, self._clock() + self._wait), clock=self._clock) or []

    def find(self, run_uuid: str | None, remote_addr: str, deadline: float | None = None,
             found: list[Obj] | None = None) -> Caller:
        """The validated caller; UnknownCaller (400) or CallerNotYetKnown (503). `deadline` is monotonic;
        `found`: the pods a read made for this request already returned (triage.py's rescue read)."""
        end = deadline if deadline is not None else self._clock() + self._wait + READ_RESERVE
        ip, selector = named_by(run_uuid, remote_addr)
        read = found is not None
        if found is not None:
            pods = found if ip is None else [p for p in found if _running(p)]
        elif run_uuid:
            uuid_ = run_uuid

            def by_uuid() -> list[Obj]:
                return self._pods.by_index("uuid", uuid_)
            pods = self._lookup(by_uuid, self._pods.topic("uuid", run_uuid), end - READ_RESERVE)
        else:
            assert ip is not None
            address = ip

            def by_ip() -> list[Obj]:
                return [p for p in self._pods.by_index("ip", address) if _running(p)]
            pods = self._lookup(by_ip, self._pods.topic("ip", ip), end - READ_RESERVE)
        if not pods:
            if read:
                raise UnknownCaller(not_found(selector))
            pods, read = self._read(run_uuid, ip, end, selector), True
        if self._states is None:
            if len(pods) > 1:
                raise UnknownCaller(f"failed to fetch pod with selector {selector} - found two or more with same label")
            return self.validate(pods[0], selector)
        try:
            return self._bound(pods, selector, end)
        except NotTheRunsPod as e:
            if read or not e.claimed_elsewhere or not run_uuid:
                raise
            # The run's pod is not among those the cache has: one read, for a pod created a moment ago.
            try:
                again = self._read(run_uuid, ip, end, selector)
            except UnknownCaller:
                raise e from None
            return self._bound(again, selector, end, last=True)

    def find_pod(self, pod: Obj, end: float) -> Caller:
        """The caller behind an identified pod (a verified token): it must be its run's pod."""
        return self._bound([pod], "token", end, last=True)

    def _bound(self, pods: list[Obj], selector: str, end: float, last: bool = False) -> Caller:
        """The one candidate its run's claim names (module docstring); NotTheRunsPod when there is none."""
        found: list[tuple[Obj, Caller]] = []
        first_error: UnknownCaller | None = None
        for pod in pods:
            try:
                found.append((pod, self.validate(pod, selector)))
            except UnknownCaller as e:
                first_error = first_error or e
        if not found:
            assert first_error is not None
            raise first_error
        names = {caller.pod_name for _, caller in found}
        bound: list[tuple[Obj, Caller]] = []
        stale: list[Caller] = []
        strangers: list[Caller] = []
        claimed_elsewhere = False
        for pod, caller in found:
            state = self._state(caller, end)
            claim = RunClaim.of(state)
            if claim.uuid != caller.run_uuid:
                stale.append(caller)  # refused when stored, with v2's reason (khstate.record_report)
                continue
            if claim.pod and (caller.pod_name != claim.pod or run_key_sha256(pod_run_key(pod)) != claim.key_sha256):
                strangers.append(caller)
                claimed_elsewhere = claimed_elsewhere or claim.pod not in names
                continue
            bound.append((pod, dataclasses.replace(caller, state=state)))
        if not bound:
            if stale:
                return stale[0]
            c = strangers[0]
            raise NotTheRunsPod(f"pod {c.namespace}/{c.pod_name} is not the pod run {c.run_uuid} of check {c.check} "
                                "created; its report is ignored", claimed_elsewhere and not last, c.ident)
        if len(bound) > 1:
            # Several runs' pods (hostNetwork pods sharing the node's address): which one is calling
            # cannot be told. Several pods of one run happen only with a claim of an older daemon,
            # which named no pod: the earliest-created is the run's (a look-alike comes later).
            if len({(c.ident, c.run_uuid) for _, c in bound}) > 1 or \
                    any(RunClaim.of(c.state).pod for _, c in bound):
                raise UnknownCaller(f"failed to fetch pod with selector {selector} - found two or more with same "
                                    "label")
            bound = sorted(bound, key=lambda pc: _created(pc[0]))[:1]
        pod, caller = bound[0]
        if RunClaim.of(caller.state).finished or (pod.get("status") or {}).get("phase") in FINISHED:
            raise RunIsOver(f"run {caller.run_uuid} of check {caller.namespace}/{caller.check} is over: its pod "
                            f"{caller.pod_name} has finished", caller.ident)
        return caller

    def _state(self, caller: Caller, end: float) -> Obj | None:
        """The caller's check state: the cache's when it names the caller's run (waiting briefly for a
        claim the cache has not seen yet), else one bounded read; None when there is none."""
        assert self._states is not None
        states = self._states(caller.ident)

        def naming_run() -> Obj | None:
            state = states.get(caller.namespace, caller.check)
            claim = RunClaim.of(state)
            if state is None or claim.uuid != caller.run_uuid:
                return None
            # A claim naming another pod, not one the pod cache shows as the run's: maybe older than the run's
            # re-claim of a fallback name (its first name was squatted: runner._create); wait, then read.
            if claim.pod and claim.pod != caller.pod_name:
                labels = ((self._pods.get(caller.namespace, claim.pod) or {}).get("metadata") or {}).get("labels")
                if (labels or {}).get(RUN_ID_LABEL) != caller.run_uuid:
                    return None
            return state
        state = self._lookup(lambda: [s] if (s := naming_run()) is not None else [],
                             states.topic("key", f"{caller.namespace}/{caller.check}"), end - READ_RESERVE)
        if state:
            return state[0]
        left = end - self._clock()
        if self._read_state is None or left < 0.1:
            return states.get(caller.namespace, caller.check)  # stale or not: the write decides
        try:
            return self._read_state(caller.ident, left)
        except ApiError as e:
            raise CallerNotYetKnown(f"cannot read the check's state right now: {e}") from e

    def _read(self, run_uuid: str | None, ip: str | None, end: float, selector: str) -> list[Obj]:
        """The fallback: one bounded read, for a pod the cache has not seen (yet)."""
        current = self._pods.is_current()
        left = end - self._clock()
        if self._fallback is None or left < 0.1:
            if current:
                raise UnknownCaller(not_found(selector))
            raise CallerNotYetKnown("the pod cache is not current; try again shortly")
        try:
            pods = self._fallback(run_uuid, ip, left)
        except ApiError as e:
            raise CallerNotYetKnown(f"cannot look up the calling pod right now: {e}") from e
        if ip is not None:
            pods = [p for p in pods if _running(p)]
        if not pods:
            raise UnknownCaller(not_found(selector))
        return pods

    @staticmethod
    def validate(pod: Obj, selector: str) -> Caller:
        """v2's checks on the calling pod: annotation, containers, KH_RUN_UUID (last one wins)."""
        meta = pod.get("metadata") or {}
        check = str((meta.get("annotations") or {}).get(CHECK_NAME_ANNOTATION) or "")
        if not check:
            raise UnknownCaller(f"error finding check name annotation on calling pod with selector: {selector}")
        containers = (pod.get("spec") or {}).get("containers") or []
        if not containers:
            raise UnknownCaller(f"failed to fetch environment variables from pod with selector {selector} "
                                "- pod had no containers")
        run_uuid: str | None = None
        deadline: float | None = None
        for container in containers:
            for env in container.get("env") or []:
                if env.get("name") == KH_RUN_UUID:
                    run_uuid = str(env.get("value") or "")
                elif env.get("name") == KH_CHECK_RUN_DEADLINE:
                    try:
                        deadline = float(env.get("value") or "")
                    except ValueError:
                        deadline = None
        if run_uuid is None:
            raise UnknownCaller(f"error finding environment variable on remote pod: {KH_RUN_UUID}")
        namespace = str(meta.get("namespace") or "")
        if not namespace:
            raise UnknownCaller("pod check namespace was invalid or unset")
        if not run_uuid:
            raise UnknownCaller("pod uuid was invalid or unset")
        found = pod_check(pod)
        prefix = found[2] if found is not None and found[1] == check else ""
        return Caller(namespace=namespace, pod_name=str(meta.get("name") or ""), check=check,
                      run_uuid=run_uuid, ident=ident(namespace, check, prefix), selector=selector, deadline=deadline,
                      pod_uid=str(meta.get("uid") or ""),
                      pod_ips=tuple(pod_ip_index(pod)), host_ip=str((pod.get("status") or {}).get("hostIP") or ""))
