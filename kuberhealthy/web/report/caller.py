"""Who is reporting: find the checker pod behind a report and say whether it may report, as a verdict.

The route hands the request over once (`CallerRules.judge`) and gets back Accepted (the caller),
Refused (a 4xx: status, counter reason, one-line text, the check for its ReportRejected Event) or
NotYet (503 with Retry-After). No HTTP here, no storing, no Events: the route does those.

A projected ServiceAccount token (`Authorization: Bearer`, verified by tokens.py) names its pod, from
any address; reportAuth `token` requires one. Otherwise the `kh-run-uuid` header names the run (pod
found by label `kuberhealthy-run-id`), or else the source address does (the one Running pod with
that pod IP; hostNetwork pods share the node's IP, so they need the header). As in v2, the pod must
carry the check-name annotation and a `KH_RUN_UUID` env var. A header-path report must come from the
pod's or its node's address (reportSourceCheck); another checker pod's address is always refused.
Whether the UUID is still the khstate's current one is decided when the report is stored.

Bound to the run's pod (docs/interface.md#report-authenticity). The run's khstate claim names the pod the run created
and the hash of a secret on it (khstate.RunClaim): of the pods found, only that one may report.
Other pods with the same label, env or address (a look-alike) are ignored, never counted as
duplicates; a report for a run that is over, or whose pod has finished, is refused. A claim without a
pod name (written by an older daemon during an upgrade) binds to the earliest-created candidate.

Looking up never lists the cluster per report: the pod cache answers, after waiting briefly for a
pod created a moment ago; only a cache miss costs one bounded read by label (or by pod IP). When
neither can say yet — the read failed, or the cache is not current — the verdict is NotYet, never a
refusal: a genuine checker must not lose its report to a lagging or absent control plane.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from kuberhealthy.base.errors import ApiError
from kuberhealthy.base.notify import Notifier
from kuberhealthy.checkclient import ENV_DEADLINE as KH_CHECK_RUN_DEADLINE
from kuberhealthy.checkclient import ENV_RUN_UUID as KH_RUN_UUID
from kuberhealthy.kube import Cache, Obj
from kuberhealthy.records.checkpod import CHECK_NAME_ANNOTATION, RUN_ID_LABEL, pod_ip_index, pod_run_key, run_key_sha256
from kuberhealthy.records.khstate import RunClaim
from kuberhealthy.seams import WebNeeds
from kuberhealthy.web.report import stats
from kuberhealthy.web.report.stats import ReportStats
from kuberhealthy.web.report.tokens import InvalidToken, TokenNotYetVerified, TokenVerifier

logger = logging.getLogger(__name__)

_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")

READ_RESERVE = 0.8  # seconds of a request's budget kept for the fallback read after the cache wait

# (run uuid or None, pod IP or None, timeout seconds) -> pods the API server has for that caller
FallbackRead = Callable[[str | None, str | None, float], list[Obj]]
# (namespace, name, timeout seconds) -> the khstate as the API server has it (None: there is none)
StateRead = Callable[[str, str, float], Obj | None]
FINISHED = ("Succeeded", "Failed")


class UnknownCaller(ValueError):
    """No pod may report for this request; str(e) is the one-line reason for the 400."""


class NotTheRunsPod(UnknownCaller):
    """None of the pods found is the one the run created (a look-alike); `claimed_elsewhere`: the
    run's pod was not among those looked at (it may exist, unseen yet)."""

    def __init__(self, reason: str, claimed_elsewhere: bool = False, check: tuple[str, str] | None = None) -> None:
        super().__init__(reason)
        self.claimed_elsewhere = claimed_elsewhere
        self.check = check  # (namespace, name) of the check the report was for


class RunIsOver(UnknownCaller):
    """The run's pod has finished, or the run was recorded as over: no report is taken for it."""

    def __init__(self, reason: str, check: tuple[str, str] | None = None) -> None:
        super().__init__(reason)
        self.check = check


class CallerNotYetKnown(Exception):
    """The caller cannot be confirmed or refused right now (control plane away or lagging): 503."""


@dataclass(frozen=True)
class Caller:
    namespace: str
    pod_name: str
    check: str  # the check (or job) name from the pod's annotation
    run_uuid: str  # the pod's KH_RUN_UUID
    selector: str  # how it was found, for logs and reasons
    deadline: float | None = None  # the pod's KH_CHECK_RUN_DEADLINE (unix seconds), when readable
    pod_uid: str = ""
    pod_ips: tuple[str, ...] = ()
    host_ip: str = ""  # the node's address: where a hostNetwork or SNATed pod's requests come from
    state: Obj | None = None  # the khstate the run was bound against (a hint for the write)


@dataclass(frozen=True)
class Accepted:
    """The caller may report: its run's own pod."""
    caller: Caller


@dataclass(frozen=True)
class Refused:
    """The caller may not report: a 4xx (401: the token). `reason` labels the rejected counter
    (stats.REASONS), `text` is the one-line answer, `check` the check the report was for when known
    (its ReportRejected Event)."""
    code: int
    reason: str
    text: str
    check: tuple[str, str] | None = None


@dataclass(frozen=True)
class NotYet:
    """The caller can be neither confirmed nor refused right now (control plane away or lagging): 503."""
    text: str


Verdict: TypeAlias = Accepted | Refused | NotYet


def normalize_ip(remote_addr: str) -> str | None:
    """The peer address as pod status writes it: no brackets or zone; IPv4-mapped IPv6 as IPv4."""
    text = remote_addr.strip()
    if text.startswith("[") and "]" in text:
        text = text[1:text.index("]")]
    text = text.split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return ip.compressed


def _running(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


SOURCE_OK, SOURCE_OTHER_POD, SOURCE_FOREIGN = "ok", "other-pod", "foreign"


def source_verdict(caller: Caller, remote_addr: str, pods: Cache) -> str:
    """Where a header-path report came from, against the run's pod: SOURCE_OK (the pod's address or
    its node's: hostNetwork, SNAT), SOURCE_OTHER_POD (the address of another checker pod: a look-alike
    sending the run's uuid — refused whatever reportSourceCheck says), or SOURCE_FOREIGN (anything
    else: a sidecar proxy, an ingress, or a stranger — reportSourceCheck decides)."""
    source = normalize_ip(remote_addr)
    if source is not None and (source in caller.pod_ips or source == caller.host_ip):
        return SOURCE_OK
    if source is not None and any((p.get("metadata") or {}).get("name") != caller.pod_name
                                  or (p.get("metadata") or {}).get("namespace") != caller.namespace
                                  for p in pods.by_index("ip", source)):
        return SOURCE_OTHER_POD
    return SOURCE_FOREIGN


def _created(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("creationTimestamp") or "")


def _short(value: str, limit: int = 100) -> str:
    return value if len(value) <= limit else value[:limit] + "..."


class CallerFinder:
    """Looks callers up in the checker-pod cache (indexes "uuid" and "ip"), then with one bounded read."""

    def __init__(self, pods: Cache, notifier: Notifier, wait: float, fallback: FallbackRead | None = None,
                 clock: Callable[[], float] = time.monotonic, khstates: Cache | None = None,
                 read_state: StateRead | None = None) -> None:
        self._pods = pods
        self._notifier = notifier
        self._wait = wait
        self._fallback = fallback
        self._clock = clock
        self._khstates = khstates  # None: no binding (v2's rules only)
        self._read_state = read_state

    def _lookup(self, find: Callable[[], list[Obj]], topic: tuple[str, str, str], deadline: float) -> list[Obj]:
        found = find()
        if found or self._wait <= 0:
            return found
        with self._notifier.waiter(topic) as waiter:
            return waiter.wait_for(find, min(deadline, self._clock() + self._wait), clock=self._clock) or []

    def find(self, run_uuid: str | None, remote_addr: str, deadline: float | None = None) -> Caller:
        """The validated caller; UnknownCaller (400) or CallerNotYetKnown (503). `deadline` is monotonic."""
        end = deadline if deadline is not None else self._clock() + self._wait + READ_RESERVE
        ip: str | None = None
        if run_uuid:
            selector = f"{RUN_ID_LABEL}={_short(run_uuid)}"
            if not _LABEL_VALUE.match(run_uuid):  # no pod can carry this label: refuse at once
                raise UnknownCaller(f"failed to find a pod with selector {selector}")

            def by_uuid() -> list[Obj]:
                return self._pods.by_index("uuid", run_uuid)
            pods = self._lookup(by_uuid, self._pods.topic("uuid", run_uuid), end - READ_RESERVE)
        else:
            ip = normalize_ip(remote_addr)
            if ip is None:
                raise UnknownCaller(f"failed to parse the caller's address {_short(remote_addr)!r}")
            selector = f"status.podIP=={ip},status.phase==Running"
            address = ip

            def by_ip() -> list[Obj]:
                return [p for p in self._pods.by_index("ip", address) if _running(p)]
            pods = self._lookup(by_ip, self._pods.topic("ip", ip), end - READ_RESERVE)
        read = False
        if not pods:
            pods, read = self._read(run_uuid, ip, end, selector), True
        if self._khstates is None:
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
                                "created; its report is ignored", claimed_elsewhere and not last,
                                (c.namespace, c.check))
        if len(bound) > 1:
            # Several runs' pods (hostNetwork pods sharing the node's address): which one is calling
            # cannot be told. Several pods of one run happen only with a claim of an older daemon,
            # which named no pod: the earliest-created is the run's (a look-alike comes later).
            if len({(c.namespace, c.check, c.run_uuid) for _, c in bound}) > 1 or \
                    any(RunClaim.of(c.state).pod for _, c in bound):
                raise UnknownCaller(f"failed to fetch pod with selector {selector} - found two or more with same "
                                    "label")
            bound = sorted(bound, key=lambda pc: _created(pc[0]))[:1]
        pod, caller = bound[0]
        if RunClaim.of(caller.state).finished or (pod.get("status") or {}).get("phase") in FINISHED:
            raise RunIsOver(f"run {caller.run_uuid} of check {caller.namespace}/{caller.check} is over: its pod "
                            f"{caller.pod_name} has finished", (caller.namespace, caller.check))
        return caller

    def _state(self, caller: Caller, end: float) -> Obj | None:
        """The caller's khstate: the cache's when it names the caller's run (waiting briefly for a
        claim the cache has not seen yet), else one bounded read; None when there is none."""
        assert self._khstates is not None
        khstates = self._khstates

        def naming_run() -> Obj | None:
            state = khstates.get(caller.namespace, caller.check)
            return state if state is not None and RunClaim.of(state).uuid == caller.run_uuid else None
        state = self._lookup(lambda: [s] if (s := naming_run()) is not None else [],
                             khstates.topic("key", f"{caller.namespace}/{caller.check}"), end - READ_RESERVE)
        if state:
            return state[0]
        left = end - self._clock()
        if self._read_state is None or left < 0.1:
            return khstates.get(caller.namespace, caller.check)  # stale or not: the write decides
        try:
            return self._read_state(caller.namespace, caller.check, left)
        except ApiError as e:
            raise CallerNotYetKnown(f"cannot read the check's state right now: {e}") from e

    def _read(self, run_uuid: str | None, ip: str | None, end: float, selector: str) -> list[Obj]:
        """The fallback: one bounded read, for a pod the cache has not seen (yet)."""
        current = self._pods.is_current()
        left = end - self._clock()
        if self._fallback is None or left < 0.1:
            if current:
                raise UnknownCaller(f"failed to find a pod with selector {selector}")
            raise CallerNotYetKnown("the pod cache is not current; try again shortly")
        try:
            pods = self._fallback(run_uuid, ip, left)
        except ApiError as e:
            raise CallerNotYetKnown(f"cannot look up the calling pod right now: {e}") from e
        if ip is not None:
            pods = [p for p in pods if _running(p)]
        if not pods:
            raise UnknownCaller(f"failed to find a pod with selector {selector}")
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
        return Caller(namespace=namespace, pod_name=str(meta.get("name") or ""), check=check,
                      run_uuid=run_uuid, selector=selector, deadline=deadline, pod_uid=str(meta.get("uid") or ""),
                      pod_ips=tuple(pod_ip_index(pod)), host_ip=str((pod.get("status") or {}).get("hostIP") or ""))


class CallerRules:
    """The caller rules for one report, over the web app's caches: build one per request, call judge()."""

    def __init__(self, services: WebNeeds, tokens: TokenVerifier, wait: float, report_stats: ReportStats) -> None:
        self._services = services
        self._tokens = tokens
        self._report_stats = report_stats
        self._finder = CallerFinder(services.pods, services.notifier, wait, services.read_checker_pods,
                                    khstates=services.khstates, read_state=services.read_khstate)

    def judge(self, run_uuid: str, token: str | None, remote: str, end: float) -> Verdict:
        """Who sent the report: by the token (any address) or the uuid header / source address (the
        run's pod only). `run_uuid` is the header's value ("" without it), `token` the bearer token
        (None without one), `remote` the peer address, `end` the request's monotonic deadline."""
        try:
            return self._judge(run_uuid, token, remote, end)
        except CallerNotYetKnown as e:
            return NotYet(str(e))

    def _judge(self, run_uuid: str, token: str | None, remote: str, end: float) -> Verdict:
        config = self._services.config
        unverified: CallerNotYetKnown | None = None
        if token is not None:
            try:
                return self._by_token(token, run_uuid, end)
            except CallerNotYetKnown as e:
                # The API server cannot review the token now (away, or RBAC without tokenreviews).
                # With token-or-uuid the uuid rules would take this report without the token: let them
                # decide, so our checkclient (always sending it) fares no worse than a v2 client.
                if config.report_auth == "token":
                    raise
                unverified = e
        elif config.report_auth == "token":
            return Refused(401, stats.TOKEN_REQUIRED, "a ServiceAccount token is required: send the file named by "
                           "KH_REPORT_TOKEN_FILE as Authorization: Bearer <token> (reportAuth: token)")
        verdict = self._by_uuid(run_uuid, remote, end)
        if unverified is not None:
            if isinstance(verdict, Refused):  # the token may still prove it once it can be reviewed: not final
                raise unverified
            logger.warning("token not reviewed (%s); the report's uuid rules identified pod %s/%s", unverified,
                           verdict.caller.namespace, verdict.caller.pod_name)
        return verdict

    def _by_uuid(self, run_uuid: str, remote: str, end: float) -> Accepted | Refused:
        """The uuid header / source address path: the run's pod only, then the header path's source check."""
        try:
            caller = self._finder.find(run_uuid or None, remote, end)
        except RunIsOver as e:
            return Refused(400, stats.RUN_OVER, str(e), check=e.check)
        except NotTheRunsPod as e:
            return Refused(400, stats.NOT_RUN_POD, str(e), check=e.check)
        except UnknownCaller as e:
            return Refused(400, stats.UNKNOWN_CALLER, str(e))
        refused = self._check_source(caller, remote) if run_uuid else None
        return refused or Accepted(caller)

    def _by_token(self, token: str, run_uuid: str, end: float) -> Accepted | Refused:
        """The token path: the token's pod (cache, else one read), which must be its run's pod."""
        try:
            who = self._tokens.verify(token, end - time.monotonic())
        except InvalidToken as e:
            return Refused(401, stats.TOKEN_INVALID, str(e))
        except TokenNotYetVerified as e:
            raise CallerNotYetKnown(str(e)) from e
        services = self._services
        pod = services.pods.get(who.namespace, who.name)
        if pod is None or (pod.get("metadata") or {}).get("uid") != who.uid:
            try:
                pod = services.read_checker_pod(who.namespace, who.name, max(0.1, end - time.monotonic()))
            except ApiError as e:
                raise CallerNotYetKnown(f"cannot look up the token's pod right now: {e}") from e
        if pod is None or (pod.get("metadata") or {}).get("uid") != who.uid:
            return Refused(400, stats.TOKEN_OTHER_POD, f"the token's pod {who.namespace}/{who.name} is not a checker "
                           "pod that may report")
        try:
            caller = self._finder.find_pod(pod, end)
        except (NotTheRunsPod, RunIsOver) as e:
            reason = stats.RUN_OVER if isinstance(e, RunIsOver) else stats.TOKEN_OTHER_POD
            return Refused(400, reason, f"token of pod {who.namespace}/{who.name}: {e}", check=e.check)
        if run_uuid and run_uuid != caller.run_uuid:
            return Refused(400, stats.TOKEN_OTHER_POD, f"the token's pod {who.namespace}/{who.name} runs "
                           f"{caller.run_uuid}, not {run_uuid[:80]}")
        return Accepted(caller)

    def _check_source(self, caller: Caller, remote: str) -> Refused | None:
        """Header path: the request should come from the pod's IP or its node's (hostNetwork, SNAT)."""
        services = self._services
        mode = services.config.report_source_check
        verdict = source_verdict(caller, remote, services.pods)
        if verdict == SOURCE_OK:
            return None
        source = normalize_ip(remote) or remote
        check = (caller.namespace, caller.check)
        if verdict == SOURCE_OTHER_POD:  # a pod we know, not the run's: a look-alike using the run's uuid
            return Refused(400, stats.NOT_RUN_POD, f"report with the uuid of run {caller.run_uuid} came from "
                           f"{source}, the address of another pod, not of {caller.namespace}/{caller.pod_name}",
                           check=check)
        if mode == "off":
            return None
        text = (f"report for pod {caller.namespace}/{caller.pod_name} came from {source!r}, neither the pod's "
                f"address ({', '.join(caller.pod_ips) or 'none yet'}) nor its node's ({caller.host_ip or 'unknown'})")
        if mode == "enforce":
            self._report_stats.source_mismatch.labels("refused").inc()
            return Refused(400, stats.SOURCE, text + " (reportSourceCheck: enforce)", check=check)
        self._report_stats.source_mismatch.labels("accepted").inc()
        logger.warning("%s; accepted (reportSourceCheck: warn)", text)
        return None
