"""Who may report: the rules that turn a report's credentials into a verdict.

The admission (admission.py) asks once (`CallerRules.judge`), with the token already reviewed and a
report slot held, and gets back Accepted (the caller), Refused (a 4xx: status, counter reason,
one-line text, the check the report was for) or NotYet (503 with Retry-After). No HTTP here, no
storing, no Events, no token reviews; this is finder.py's only user.

A projected ServiceAccount token (`Authorization: Bearer`, reviewed by tokens.py) names its pod, from
any address; reportAuth `token` requires one. Otherwise the `kh-run-uuid` header or the source
address names the run, and finder.py finds the run's own pod (docs/interface.md#report-authenticity).
A header-path report must come from the pod's or its node's address (reportSourceCheck); another
checker pod's address is always refused. Whether the UUID is still the khstate's current one is
decided when the report is stored. When the control plane cannot say yet, the verdict is NotYet,
never a refusal: a genuine checker must not lose its report to a lagging or absent control plane.

Token binding: a check that once reported with a verified token is bound to tokens while its khstate's
tokenBoundGeneration equals its khcheck's (or khjob's) `metadata.generation` (records/khstate.py);
then the uuid and address rules only name the check, and a report they identify is refused (401), or
NotYet when it carried a token that cannot be reviewed right now. A pod whose IP is its node's
(hostNetwork, SNAT) cannot be told from any other process on the node by address: with
reportSourceCheck enforce it must send the header or the token.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import TypeAlias

from kuberhealthy.base.errors import ApiError
from kuberhealthy.kube import Cache, Obj
from kuberhealthy.needs import WebNeeds
from kuberhealthy.records.checkpod import pod_ip_index
from kuberhealthy.records.khstate import TokenBinding, bound_reason, token_bound_generation
from kuberhealthy.web.addresses import normalize_ip
from kuberhealthy.web.report import stats
from kuberhealthy.web.report.finder import (
    READ_RESERVE,
    Caller,
    CallerFinder,
    CallerNotYetKnown,
    NotTheRunsPod,
    RunIsOver,
)
from kuberhealthy.web.report.naming import UnknownCaller
from kuberhealthy.web.report.stats import ReportStats
from kuberhealthy.web.report.tokens import PodIdentity, TokenNotYetVerified, not_a_checker_pod

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Accepted:
    """The caller may report: its run's own pod. `binding` goes with the khstate write (None: the
    workload's generation is unknown, e.g. no khcheck in the cache)."""
    caller: Caller
    binding: TokenBinding | None = None
    informs: bool = False  # a refusal when it is stored deserves a ReportRejected Event (admission.py)


@dataclass(frozen=True)
class Refused:
    """The caller may not report: a 4xx (401: the token). `reason` labels the rejected counter
    (stats.REASONS), `text` is the one-line answer, `check` the check the report was for when known
    (its ReportRejected Event)."""
    code: int
    reason: str
    text: str
    check: str | None = None  # the ident of the check the refusal is about (its Event goes there)


@dataclass(frozen=True)
class NotYet:
    """The caller can be neither confirmed nor refused right now (control plane away or lagging): 503
    with `retry_after` (seconds); the answer's log line at `level` (None: no line)."""
    text: str
    retry_after: str = "2"
    level: int | None = logging.WARNING


Verdict: TypeAlias = Accepted | Refused | NotYet
Reviewed: TypeAlias = PodIdentity | TokenNotYetVerified | None  # a token's review (admission.py); None: no token


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


def generation(obj: Obj | None) -> int | None:
    """An object's `metadata.generation`; None when absent or not an integer."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    value = meta.get("generation") if isinstance(meta, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class CallerRules:
    """The caller rules over the web app's caches, one per app (admission.py asks them, a report slot held)."""

    def __init__(self, services: WebNeeds, wait: float, report_stats: ReportStats) -> None:
        self._services = services
        self._report_stats = report_stats
        kinds = services.kinds

        def read_state(check: str, timeout: float) -> Obj | None:
            _, namespace, name = kinds.split(check)
            return kinds.store_of(check).read(services.resources, namespace, name, timeout)
        self._finder = CallerFinder(services.pods, services.notifier, wait, services.read_checker_pods,
                                    states=kinds.state_cache, read_state=read_state)

    def judge(self, run_uuid: str, remote: str, end: float, *, reviewed: Reviewed = None,
              found: list[Obj] | None = None) -> Verdict:
        """Who sent the report: by its token (any address) or the uuid header / source address (the
        run's pod only). `run_uuid` is the header's value ("" without it), `remote` the peer address,
        `end` the request's monotonic deadline, `reviewed` what the review of its bearer token said
        (None: it carried none), `found` the pods a rescue read returned for it (triage.py)."""
        try:
            return self._judge(run_uuid, remote, end, reviewed, found)
        except CallerNotYetKnown as e:
            return NotYet(str(e))

    def _judge(self, run_uuid: str, remote: str, end: float, reviewed: Reviewed,
               found: list[Obj] | None) -> Verdict:
        config = self._services.config
        if isinstance(reviewed, PodIdentity):
            return self._by_token(reviewed, run_uuid, end)
        if reviewed is None and config.report_auth == "token":
            return Refused(401, stats.TOKEN_REQUIRED, "a ServiceAccount token is required: send the file named by "
                           "KH_REPORT_TOKEN_FILE as Authorization: Bearer <token> (reportAuth: token)")
        if reviewed is not None and config.report_auth == "token":
            raise CallerNotYetKnown(str(reviewed)) from reviewed
        # The API server cannot review the token now (away, or RBAC without tokenreviews). With
        # token-or-uuid the uuid rules would take this report without the token: let them decide, so our
        # checkclient (always sending it) fares no worse than a v2 client.
        verdict = self._by_uuid(run_uuid, remote, end, found)
        if reviewed is not None:
            if isinstance(verdict, Refused):  # the token may still prove it once it can be reviewed: not final
                raise CallerNotYetKnown(str(reviewed)) from reviewed
            logger.warning("token not reviewed (%s); the report's uuid rules identified pod %s/%s", reviewed,
                           verdict.caller.namespace, verdict.caller.pod_name)
        return verdict

    def _by_uuid(self, run_uuid: str, remote: str, end: float, found: list[Obj] | None = None) -> Accepted | Refused:
        """The uuid header / source address path: the run's pod only, then the header path's source check."""
        try:
            caller = self._finder.find(run_uuid or None, remote, end, found)
        except RunIsOver as e:
            return Refused(400, stats.RUN_OVER, str(e), check=e.check)
        except NotTheRunsPod as e:
            return Refused(400, stats.NOT_RUN_POD, str(e), check=e.check)
        except UnknownCaller as e:
            return Refused(400, stats.UNKNOWN_CALLER, str(e))
        if run_uuid and self._services.config.report_source_check != "off":
            caller = self._with_address(caller, remote, end)
        refused = self._check_source(caller, remote) if run_uuid else self._check_node_address(caller)
        if refused is not None:
            return refused
        state = caller.state or self._services.kinds.state_cache(caller.ident).get(caller.namespace, caller.check)
        workload, current = self._workload(caller, state)
        if current is None:
            return Accepted(caller)
        if token_bound_generation(state) == current:
            return Refused(401, stats.TOKEN_REQUIRED, bound_reason(caller.namespace, caller.check, workload),
                           check=caller.ident)
        return Accepted(caller, TokenBinding(current, by_token=False))

    def _workload(self, caller: Caller, state: Obj | None) -> tuple[str, int | None]:
        """The caller's workload (its state's khWorkload) and its check's current generation, from the cache."""
        workload = str(((state or {}).get("spec") or {}).get("khWorkload") or "")
        found = self._services.kinds.of_ident(caller.ident, workload)
        return workload, generation(found[0].checks.get(found[1], found[2]) if found is not None else None)

    def _by_token(self, who: PodIdentity, run_uuid: str, end: float) -> Accepted | Refused:
        """The token path: the reviewed token's pod (cache, else one read), which must be its run's pod."""
        services = self._services
        pod = services.pods.get(who.namespace, who.name)
        if pod is None or (pod.get("metadata") or {}).get("uid") != who.uid:
            try:
                pod = services.read_checker_pod(who.namespace, who.name, max(0.1, end - time.monotonic()))
            except ApiError as e:
                raise CallerNotYetKnown(f"cannot look up the token's pod right now: {e}") from e
        if pod is None or (pod.get("metadata") or {}).get("uid") != who.uid:
            return Refused(400, stats.TOKEN_OTHER_POD, not_a_checker_pod(who.namespace, who.name))
        try:
            caller = self._finder.find_pod(pod, end)
        except (NotTheRunsPod, RunIsOver) as e:
            reason = stats.RUN_OVER if isinstance(e, RunIsOver) else stats.TOKEN_OTHER_POD
            return Refused(400, reason, f"token of pod {who.namespace}/{who.name}: {e}", check=e.check)
        if run_uuid and run_uuid != caller.run_uuid:
            return Refused(400, stats.TOKEN_OTHER_POD, f"the token's pod {who.namespace}/{who.name} runs "
                           f"{caller.run_uuid}, not {run_uuid[:80]}")
        _, current = self._workload(caller, caller.state)
        return Accepted(caller, None if current is None else TokenBinding(current, by_token=True))

    def _check_node_address(self, caller: Caller) -> Refused | None:
        """Address path: a pod whose IP is its node's (hostNetwork, SNAT) is any process on that node, by
        address; with reportSourceCheck enforce it must name its run (header) or prove itself (token)."""
        if self._services.config.report_source_check != "enforce" or not caller.host_ip \
                or caller.host_ip not in caller.pod_ips:
            return None
        return Refused(400, stats.SOURCE, f"report for pod {caller.namespace}/{caller.pod_name} came from its "
                       f"node's address {caller.host_ip} (hostNetwork or SNAT), which any process on the node can "
                       "use: send the kh-run-uuid header or the pod's token (reportSourceCheck: enforce)",
                       check=caller.ident)

    def _with_address(self, caller: Caller, remote: str, end: float) -> Caller:
        """The caller with its pod's addresses, for the header path's source check. A kubelet writes the
        pod IP in a status update of its own, and a fast checker can report before this replica's pod
        cache has it (then every source looks foreign). So when the cache shows no pod IP yet and the
        source is not already the pod's or its node's: wait for the pod's next change (to READ_RESERVE
        before `end`). With enforce, then one read of the pod, and still without an IP CallerNotYetKnown
        (503), never a refusal (a genuine report must not be lost because its pod is newer than the
        cache). With warn, where a foreign source is accepted anyway, no read: the caller as it is."""
        if caller.pod_ips or source_verdict(caller, remote, self._services.pods) == SOURCE_OK:
            return caller
        pods = self._services.pods
        enforce = self._services.config.report_source_check == "enforce"

        def addressed() -> Obj | None:
            pod = pods.get(caller.namespace, caller.pod_name)
            if pod is None or (pod.get("metadata") or {}).get("uid") != caller.pod_uid:
                return None
            return pod if pod_ip_index(pod) else None
        with self._services.notifier.waiter(pods.topic("key", f"{caller.namespace}/{caller.pod_name}")) as waiter:
            pod = waiter.wait_for(addressed, end - READ_RESERVE)
        if pod is None and not enforce:
            return caller
        if pod is None:
            left = end - time.monotonic()
            if left < 0.1:
                raise CallerNotYetKnown(f"the address of pod {caller.namespace}/{caller.pod_name} is not known yet; "
                                        "try again shortly")
            try:
                pod = self._services.read_checker_pod(caller.namespace, caller.pod_name, left)
            except ApiError as e:
                raise CallerNotYetKnown(f"cannot look up the calling pod right now: {e}") from e
            if pod is None or (pod.get("metadata") or {}).get("uid") != caller.pod_uid or not pod_ip_index(pod):
                raise CallerNotYetKnown(f"the address of pod {caller.namespace}/{caller.pod_name} is not known yet; "
                                        "try again shortly")
        status = pod.get("status") or {}
        return dataclasses.replace(caller, pod_ips=tuple(pod_ip_index(pod)),
                                   host_ip=str(status.get("hostIP") or caller.host_ip))

    def _check_source(self, caller: Caller, remote: str) -> Refused | None:
        """Header path: the request should come from the pod's IP or its node's (hostNetwork, SNAT)."""
        services = self._services
        mode = services.config.report_source_check
        verdict = source_verdict(caller, remote, services.pods)
        if verdict == SOURCE_OK:
            return None
        source = normalize_ip(remote) or remote
        check = caller.ident
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
