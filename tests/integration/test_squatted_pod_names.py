"""Squatted checker pod names (docs/interface.md#checker-pods, #under-hostile-clients), on the test bed: real API
server, simulated kubelet, reports over real HTTP. Plain pods (no checker labels) under every `<check>-<unix seconds>`
of the next seconds make the run take `<check>-<unix seconds>-<5 random>`, and the squatters are never touched."""
from __future__ import annotations

import re
import threading
import time

from kuberhealthy.kube import KHSTATES, PODS, Obj, Resources
from kuberhealthy.kube.resources import FOREIGN
from kuberhealthy.records.checkpod import pod_name
from kuberhealthy.records.khstate import RunClaim
from kuberhealthy.run.runner import Outcome, Runner
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.objects import create_lease
from testbed.daemons.inprocess import InProcessDaemon, check_spec, state_of
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

SQUAT_SECONDS = 8  # predicted names squatted ahead: the run's name is taken whenever in them it starts


def plain_pod(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"}}


def squat_next_names(res: Resources, namespace: str, check: str, seconds: int = SQUAT_SECONDS) -> list[Obj]:
    """A plain pod under each `<check>-<unix seconds>` from now on, as anyone with pod create rights makes them."""
    now = int(time.time())
    return [res.create(PODS, namespace, plain_pod(pod_name(check, now + i)), timeout=10) for i in range(seconds)]


def untouched(res: Resources, namespace: str, squatters: list[Obj]) -> list[str]:
    """Names of squatters that were deleted, replaced or marked for deletion ([] when all are as created)."""
    hurt = []
    for pod in squatters:
        name = pod["metadata"]["name"]
        items, _ = res.list(PODS, namespace, field_selector=f"metadata.name={name}", timeout=10)
        if not items or items[0]["metadata"]["uid"] != pod["metadata"]["uid"] or \
                items[0]["metadata"].get("deletionTimestamp"):
            hurt.append(name)
    return hurt


def fallback(check: str = "probe") -> re.Pattern[str]:
    return re.compile(rf"{check}-\d+-[a-z0-9]{{5}}")


def test_a_run_whose_predicted_name_is_squatted_reports_under_a_fallback_name_and_leaves_the_squatter_alone(
        daemon: InProcessDaemon, namespace: str, kubelet: SimKubelet) -> None:
    res = daemon.services.resources
    squatters = squat_next_names(res, namespace, "probe")
    result = Runner(daemon.services, check_spec(namespace, "kh-sim/ok"), threading.Event()).run()
    assert result.outcome is Outcome.REPORTED and fallback().fullmatch(result.pod), result
    assert result.pod[:-6] in {p["metadata"]["name"] for p in squatters}  # <the squatted name>-<suffix>
    claim = RunClaim.of(res.get(KHSTATES, namespace, "probe"))
    assert claim.uuid == result.run_uuid and claim.pod == result.pod and claim.finished
    s = state_of(daemon, namespace)
    assert s.ok is True and s.errors == () and s.uuid == result.run_uuid
    sent = kubelet.report_results[f"{namespace}/{result.pod}"]
    assert sent.status == 200  # the report from the fallback-named pod was accepted
    assert untouched(res, namespace, squatters) == []


def test_a_run_that_times_out_under_a_fallback_name_evicts_its_own_pod_only(
        daemon: InProcessDaemon, namespace: str, kubelet: SimKubelet) -> None:
    res = daemon.services.resources
    squatters = squat_next_names(res, namespace, "probe")
    result = Runner(daemon.services, check_spec(namespace, "kh-sim/hang-silent", timeout="3s"),
                    threading.Event()).run()
    assert result.outcome is Outcome.FAILED and fallback().fullmatch(result.pod)
    assert state_of(daemon, namespace).errors == (
        f"Check execution error: {namespace}/probe: timed out waiting for checker pod to report in",)
    wait_for(lambda: not res.list(PODS, namespace, f"kuberhealthy-run-id={result.run_uuid}", timeout=10)[0],
             what="the run's own pod evicted")
    assert untouched(res, namespace, squatters) == []


def test_another_replica_accepts_the_report_of_a_pod_under_a_fallback_name(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet) -> None:
    """The checker reports to a standby (its own caches, not the runner's): the claim it binds to names the new pod."""
    create_lease(cluster, namespace, "kuberhealthy", "someone-else", 3600)
    standby = InProcessDaemon(cluster, namespace, {"enableForceMaster": False}, pod_name="kh-standby").start()
    try:
        leader = InProcessDaemon(cluster, namespace,
                                 {"externalCheckReportingURL": f"{standby.url}/externalCheckStatus"}).start()
        try:
            res = leader.services.resources
            squatters = squat_next_names(res, namespace, "probe")
            result = Runner(leader.services, check_spec(namespace, "kh-sim/ok"), threading.Event()).run()
            assert not standby.services.is_leader()
            assert result.outcome is Outcome.REPORTED and fallback().fullmatch(result.pod), result
            sent = kubelet.report_results[f"{namespace}/{result.pod}"]
            assert sent.status == 200 and sent.url.startswith(standby.url)
            assert untouched(res, namespace, squatters) == []
        finally:
            leader.stop()
    finally:
        standby.stop()


def test_an_eviction_or_delete_carrying_another_pods_uid_leaves_that_pod_alone(
        res: Resources, namespace: str, kubelet: SimKubelet) -> None:
    """The real API server honours the uid precondition on the eviction (policy/v1beta1 on 1.20) and the delete.
    (1.20 retries a Pending pod's failed precondition for 10 s before its 409; a Running pod's is at once.)"""
    body = plain_pod("same-name")
    body["spec"]["containers"][0]["image"] = "kh-sim/hang-silent"
    pod = res.create(PODS, namespace, body, timeout=10)
    wait_for(lambda: res.get(PODS, namespace, "same-name", timeout=10)["status"].get("phase") == "Running",
             what="the pod Running")
    other_uid = "00000000-0000-0000-0000-000000000000"
    assert res.evict_pod(namespace, "same-name", uid=other_uid, timeout=30) == FOREIGN
    assert res.delete(PODS, namespace, "same-name", uid=other_uid, timeout=30) is False
    assert untouched(res, namespace, [pod]) == []
    assert res.evict_pod(namespace, "same-name", uid=pod["metadata"]["uid"], timeout=30) in ("evicted", "deleted")
    wait_for(lambda: not res.list(PODS, namespace, field_selector="metadata.name=same-name", timeout=10)[0],
             what="the pod with the right uid removed")
