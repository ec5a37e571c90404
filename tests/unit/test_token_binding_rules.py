"""The caller rules for a check bound to tokens, and for a checker on its node's address, over in-memory
services (testbed/fakes): what caller.py answers before anything is written."""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kuberhealthy.base.errors import Unreachable
from kuberhealthy.kube import KHCHECKS, KHJOBS, KHSTATES, PODS, Obj
from kuberhealthy.records import khstate
from kuberhealthy.records.checkpod import CHECK_NAME_ANNOTATION, CHECK_POD_SELECTOR, RUN_ID_LABEL
from kuberhealthy.records.khstate import TOKEN_BOUND_GENERATION, TokenBinding
from kuberhealthy.web.report.caller import Accepted, CallerRules, NotYet, Refused, Reviewed, Verdict
from kuberhealthy.web.report.finder import READ_RESERVE
from kuberhealthy.web.report.stats import SOURCE, TOKEN_REQUIRED, ReportStats
from kuberhealthy.web.report.tokens import TokenNotYetVerified, TokenVerifier
from testbed.fakes.world import NS, FakeServices, fake_config, khcheck, khjob, khstate_of

CHECK, RUN, POD, POD_IP, NODE_IP = "dns", "run-1", "dns-100", "10.0.0.7", "192.168.1.2"
APP_KEY, APP_VALUE = CHECK_POD_SELECTOR.split("=")


class Reviews:
    """TokenReviews: the answer naming POD, or an error."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    def create(self, *args: Any, **kwargs: Any) -> Obj:
        if self.error is not None:
            raise self.error
        return {"status": {"authenticated": True, "audiences": ["kuberhealthy"],
                           "user": {"username": f"system:serviceaccount:{NS}:default",
                                    "extra": {"authentication.kubernetes.io/pod-name": [POD],
                                              "authentication.kubernetes.io/pod-uid": ["uid-" + POD]}}}}


def world(bound: int | None = None, generation: int = 2, ip: str | None = POD_IP, job: bool = False,
          **config: Any) -> FakeServices:
    """One run of CHECK in flight (claimed by an older daemon: no pod name), its pod Running at `ip`."""
    services = FakeServices(config=fake_config(**config))
    workload = khjob(CHECK) if job else khcheck(CHECK)
    workload["metadata"]["generation"] = generation
    services.api.put(KHJOBS if job else KHCHECKS, workload)
    spec: dict[str, Any] = {"uuid": RUN, "khWorkload": khstate.WORKLOAD_JOB if job else khstate.WORKLOAD_CHECK}
    if bound is not None:
        spec[TOKEN_BOUND_GENERATION] = bound
    services.api.put(KHSTATES, khstate_of(CHECK, **spec))
    services.api.put(PODS, checker_pod(ip))
    return services


def checker_pod(ip: str | None, name: str = POD, run: str = RUN) -> Obj:
    """The run's pod; without `ip` as a kubelet's first status has it (no addresses yet)."""
    status: Obj = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": NODE_IP} if ip else \
        {"phase": "Pending"}
    return {"metadata": {"name": name, "namespace": NS, "uid": "uid-" + name,
                         "labels": {APP_KEY: APP_VALUE, RUN_ID_LABEL: run},
                         "annotations": {CHECK_NAME_ANNOTATION: CHECK}},
            "spec": {"nodeName": "node-a",
                     "containers": [{"name": "c", "env": [{"name": "KH_RUN_UUID", "value": run}]}]},
            "status": status}


def judge(services: FakeServices, run_uuid: str = "", token: str | None = None, remote: str = POD_IP,
          reviews: Reviews | None = None, stats: ReportStats | None = None, end: float | None = None) -> Verdict:
    reviewed: Reviewed = None
    if token is not None:  # reviewed first, as the admission does (admission.py)
        try:
            reviewed = TokenVerifier(reviews or Reviews()).verify(token, 5.0)  # type: ignore[arg-type]
        except TokenNotYetVerified as e:
            reviewed = e
    rules = CallerRules(services, 0.0, stats or ReportStats())  # type: ignore[arg-type]
    return rules.judge(run_uuid, remote, services.clock() + 5.0 if end is None else end, reviewed=reviewed)


def test_a_bound_checks_reports_by_uuid_or_address_get_401_saying_how_the_binding_ends() -> None:
    services = world(bound=2)
    for verdict in (judge(services, run_uuid=RUN), judge(services)):
        assert isinstance(verdict, Refused) and (verdict.code, verdict.reason) == (401, TOKEN_REQUIRED)
        assert "is bound to ServiceAccount tokens" in verdict.text and "change the khcheck's spec" in verdict.text
        assert verdict.check == f"{NS}/{CHECK}"


def test_a_bound_checks_token_report_is_accepted_and_binds_again() -> None:
    verdict = judge(world(bound=2), run_uuid=RUN, token="tok", remote="10.9.9.9")
    assert isinstance(verdict, Accepted) and verdict.binding == TokenBinding(2, by_token=True)


def test_after_a_spec_change_the_uuid_rules_take_the_report_and_its_write_will_clear_the_binding() -> None:
    verdict = judge(world(bound=2, generation=3), run_uuid=RUN)
    assert isinstance(verdict, Accepted) and verdict.binding == TokenBinding(3, by_token=False)


def test_a_bound_check_whose_token_cannot_be_reviewed_now_gets_not_yet_never_the_uuid_rules() -> None:
    down = Reviews(Unreachable("POST tokenreviews: connection refused"))
    assert isinstance(judge(world(bound=2), run_uuid=RUN, token="tok", reviews=down), NotYet)
    unbound = judge(world(), run_uuid=RUN, token="tok", reviews=down)  # as before: the uuid rules decide
    assert isinstance(unbound, Accepted) and unbound.binding == TokenBinding(2, by_token=False)


def test_a_khjob_is_bound_by_its_own_generation() -> None:
    verdict = judge(world(bound=4, generation=4, job=True), run_uuid=RUN)
    assert isinstance(verdict, Refused) and "change the khjob's spec" in verdict.text


def test_without_the_workload_in_the_cache_nothing_is_bound_or_written() -> None:
    services = world(bound=2)
    services.api.remove(KHCHECKS, NS, CHECK)
    verdict = judge(services, run_uuid=RUN)
    assert isinstance(verdict, Accepted) and verdict.binding is None


def test_with_enforce_an_address_only_report_from_a_pod_on_its_nodes_address_is_refused() -> None:
    services = world(ip=NODE_IP, report_source_check="enforce")
    verdict = judge(services, remote=NODE_IP)
    assert isinstance(verdict, Refused) and (verdict.code, verdict.reason) == (400, SOURCE)
    assert "node's address" in verdict.text and "kh-run-uuid header or the pod's token" in verdict.text
    assert isinstance(judge(services, run_uuid=RUN, remote=NODE_IP), Accepted)  # the header: accepted
    assert isinstance(judge(world(ip=NODE_IP), remote=NODE_IP), Accepted)  # warn: as before
    assert isinstance(judge(world(report_source_check="enforce")), Accepted)  # its own pod IP: as before


# --- a report that arrives before the pod cache has its pod's addresses ---------------------------------
# A kubelet writes the pod IP in a status update of its own; a fast checker can report before this
# replica's pod cache has it (found by CI: a hostNetwork checker's genuine report was refused by enforce).
# The rules wait for the pod's next change, then read the pod once; never a refusal for want of an address.

def soon() -> float:
    """A request deadline a little past the wait the rules keep before their read (READ_RESERVE)."""
    return time.monotonic() + READ_RESERVE + 0.3


def refused_count(stats: ReportStats) -> float:
    return stats.source_mismatch.labels("refused")._value.get()


@pytest.mark.parametrize("ip", [POD_IP, NODE_IP], ids=["pod-ip", "host-network"])
def test_with_enforce_a_report_from_the_pod_before_the_cache_has_its_address_is_accepted_once_it_arrives(
        ip: str) -> None:
    services, stats = world(ip=None, report_source_check="enforce"), ReportStats()
    if ip == NODE_IP:  # another hostNetwork checker on the node: its pod IP is the node's too
        services.api.put(PODS, checker_pod(NODE_IP, name="other-200", run="run-2"))
    timer = threading.Timer(0.1, services.api.put, [PODS, checker_pod(ip)])
    timer.start()
    try:
        verdict = judge(services, run_uuid=RUN, remote=ip, stats=stats, end=time.monotonic() + 5.0)
    finally:
        timer.join()
    assert isinstance(verdict, Accepted), verdict
    assert verdict.caller.pod_ips == (ip,) and refused_count(stats) == 0


def test_with_enforce_an_address_the_cache_has_not_delivered_yet_is_read_from_the_api_server() -> None:
    services = world(ip=None, report_source_check="enforce")
    services.pods.pause()  # the pod watch falls behind the kubelet's status write
    services.api.put(PODS, checker_pod(POD_IP))
    assert isinstance(judge(services, run_uuid=RUN, end=soon()), Accepted)
    services.pods.resume()


def test_a_pod_still_without_an_address_gets_not_yet_never_a_refusal_and_a_foreigner_no_pass() -> None:
    services, stats = world(ip=None, report_source_check="enforce"), ReportStats()
    assert isinstance(judge(services, run_uuid=RUN, stats=stats, end=soon()), NotYet)
    services.api.put(PODS, checker_pod(POD_IP))
    foreign = judge(services, run_uuid=RUN, remote="10.9.9.9", stats=stats, end=soon())
    assert isinstance(foreign, Refused) and foreign.reason == SOURCE and refused_count(stats) == 1


def test_with_warn_a_pod_still_without_an_address_is_accepted_as_before_without_a_read() -> None:
    services, stats = world(ip=None), ReportStats()
    services.pods.pause()
    services.api.put(PODS, checker_pod(POD_IP))  # only a read would see it
    verdict = judge(services, run_uuid=RUN, stats=stats, end=soon())
    assert isinstance(verdict, Accepted) and verdict.caller.pod_ips == ()
    assert stats.source_mismatch.labels("accepted")._value.get() == 1
    services.pods.resume()
