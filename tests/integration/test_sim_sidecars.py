"""The simulated kubelet's sidecars and disruptions on the real (1.20) test API server: the status shapes
a 1.29 kubelet writes for `kh-sim/sidecar` containers and native sidecars, and those of a 1.26+ cluster
for SIM_DISRUPT (the DisruptionTarget condition, a kubelet's eviction), proven on the stored pods."""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import container, pods_path
from testbed.cluster.objects import get_or_none
from testbed.sim.behaviours import DISRUPT_AFTER
from testbed.sim.kubelet import SimKubelet
from testbed.sim.receiver import ReportReceiver
from testbed.sim.timings import SIDECAR_STOP_AFTER, Timings
from testbed.wait import wait_for

DEADLINE = 30.0
SIDECAR = "kh-sim/sidecar"
# graceful deletion on short timings: the stopped containers are seen before the object goes
GRACEFUL = Timings(graceful=True, stop_after=0.3, remove_after=2.0, remove_finished_after=0.5)


@pytest.fixture
def graceful(cluster: TestCluster, namespace: str) -> Iterator[SimKubelet]:
    with SimKubelet(str(cluster.kubeconfig), nodes=1, namespace=namespace, timings=GRACEFUL) as sim:
        yield sim


def make_pod(cluster: TestCluster, namespace: str, name: str, containers: list[dict[str, Any]],
             init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": containers}
    if init:
        spec["initContainers"] = init
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    return dict(cluster.request("POST", pods_path(namespace), body))


def checker(image: str, receiver: ReportReceiver | None = None, name: str = "main", **env: str) -> dict[str, Any]:
    report = {"KH_REPORTING_URL": receiver.url, "KH_RUN_UUID": name} if receiver else {}
    return container(image, name, {**report, **env})


def get_pod(cluster: TestCluster, namespace: str, name: str) -> dict[str, Any] | None:
    pod: dict[str, Any] | None = get_or_none(cluster, pods_path(namespace, name))
    return pod


def states(pod: dict[str, Any], key: str = "containerStatuses") -> dict[str, dict[str, Any]]:
    """Container name → its state."""
    return {cs["name"]: cs["state"] for cs in pod["status"].get(key) or []}


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == kind), None)


def wait_pod(cluster: TestCluster, namespace: str, name: str, test: Any, what: str) -> dict[str, Any]:
    """The pod once `test(pod)` holds."""
    def check() -> dict[str, Any] | None:
        pod = get_pod(cluster, namespace, name)
        return pod if pod is not None and test(pod) else None
    pod = wait_for(check, DEADLINE, what=what)
    assert pod is not None
    return pod


def terminated(pod: dict[str, Any], container_name: str, key: str = "containerStatuses") -> dict[str, Any] | None:
    term: dict[str, Any] | None = states(pod, key).get(container_name, {}).get("terminated")
    return term


def history(cluster: TestCluster, namespace: str, name: str, since: str) -> list[dict[str, Any]]:
    """Every version of the pod stored after resourceVersion `since`, in order (a watch replays them)."""
    status, raw = cluster.get_raw(f"{pods_path(namespace)}?watch=true&resourceVersion={since}"
                                  f"&fieldSelector=metadata.name%3D{name}&timeoutSeconds=1")
    assert status == 200, raw
    return [json.loads(line)["object"] for line in raw.splitlines() if line.strip()]


def disrupt_threads_of(key: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"sim-disrupt-{key}" and t.is_alive()]


# --- sidecars --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("order", "sidecar_exit", "phase"), [
    ("checker-first", None, "Failed"),  # the sidecar dies of the SIGTERM: 143 makes the pod Failed
    ("sidecar-first", "0", "Succeeded"),  # it handles SIGTERM and exits 0: every container exited 0
])
def test_a_sidecar_container_keeps_the_pod_running_after_the_checker_exits_and_ends_when_the_pod_is_deleted(
        cluster: TestCluster, namespace: str, graceful: SimKubelet, receiver: ReportReceiver,
        order: str, sidecar_exit: str | None, phase: str) -> None:
    mesh = container(SIDECAR, "mesh", {"SIM_SIDECAR_EXIT": sidecar_exit} if sidecar_exit else None)
    main = checker("kh-sim/ok", receiver)
    make_pod(cluster, namespace, "meshed", [main, mesh] if order == "checker-first" else [mesh, main])
    pod = wait_pod(cluster, namespace, "meshed", lambda p: terminated(p, "main"), "the checker exited")
    end = terminated(pod, "main")
    assert end is not None and (end["exitCode"], end["reason"]) == (0, "Completed")
    assert pod["status"]["phase"] == "Running" and "running" in states(pod)["mesh"]
    assert {cs["name"]: cs["ready"] for cs in pod["status"]["containerStatuses"]} == {"main": False, "mesh": True}
    ready = condition(pod, "Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", "ContainersNotReady")
    assert len(receiver.received) == 1  # the checker container chose the behaviour, wherever the sidecar is
    record = graceful.record(namespace, "meshed")
    assert record is not None and record.behaviour == "ok"
    wait_for(lambda: record.checkers_exited, DEADLINE, what="the record notes the checker's exit")
    assert record.exit_code == 0 and record.exited is None and record.phase == "Running"

    cluster.request("DELETE", pods_path(namespace, "meshed"))
    pod = wait_pod(cluster, namespace, "meshed", lambda p: terminated(p, "mesh"), "the sidecar stopped")
    assert pod["metadata"].get("deletionTimestamp") and pod["status"]["phase"] == phase
    stopped = terminated(pod, "mesh")
    assert stopped is not None
    assert (stopped["exitCode"], stopped["reason"]) == ((0, "Completed") if sidecar_exit else (143, "Error"))
    assert (terminated(pod, "main") or {}).get("exitCode") == 0  # the checker's own exit stays
    wait_for(lambda: record.exited, DEADLINE, what="the record notes the stop")
    assert record.exit_code == 0 and record.phase == phase
    wait_for(lambda: get_pod(cluster, namespace, "meshed") is None, DEADLINE, what="pod gone")


@pytest.mark.parametrize(("image", "exit_code", "phase"), [("kh-sim/ok", 0, "Succeeded"),
                                                          ("kh-sim/crash", 1, "Failed")])
def test_a_native_sidecar_runs_beside_the_checker_and_the_kubelet_stops_it_after_the_checker_exits(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver,
        image: str, exit_code: int, phase: str) -> None:
    proxy = {**container(SIDECAR, "proxy"), "restartPolicy": "Always"}
    setup = container("registry.invalid/setup:1", "setup")
    created = make_pod(cluster, namespace, "native", [checker(image, receiver)], init=[setup, proxy])
    assert "restartPolicy" not in created["spec"]["initContainers"][1]  # 1.20 drops it: the image says "sidecar"
    final = wait_pod(cluster, namespace, "native", lambda p: p["status"].get("phase") == phase, phase)
    versions = history(cluster, namespace, "native", created["metadata"]["resourceVersion"])
    running = next(p for p in versions if "running" in states(p).get("main", {}))
    assert running["status"]["phase"] == "Running"
    assert (condition(running, "Initialized") or {}).get("status") == "True"
    assert states(running, "initContainerStatuses")["proxy"] == {"running": {"startedAt": states(running)["main"]
                                                                            ["running"]["startedAt"]}}
    inits = {cs["name"]: cs for cs in running["status"]["initContainerStatuses"]}
    assert inits["proxy"]["started"] is True and inits["proxy"]["ready"] is True
    assert inits["setup"]["ready"] is True and inits["setup"]["state"]["terminated"]["reason"] == "Completed"
    # the checker exited, the sidecar still runs: the pod is Running, not Ready
    (alone,) = [p for p in versions if terminated(p, "main") and not terminated(p, "proxy", "initContainerStatuses")]
    assert alone["status"]["phase"] == "Running" and (condition(alone, "Ready") or {}).get("status") == "False"
    assert "running" in states(alone, "initContainerStatuses")["proxy"]
    # then the kubelet stopped it; its 143 does not count: the phase is the checker's
    assert versions[-1]["status"]["phase"] == phase == final["status"]["phase"]
    assert (terminated(final, "main") or {}).get("exitCode") == exit_code
    proxy_end = terminated(final, "proxy", "initContainerStatuses")
    assert proxy_end is not None and (proxy_end["exitCode"], proxy_end["reason"]) == (143, "Error")
    record = kubelet.record(namespace, "native")
    assert record is not None
    wait_for(lambda: record.exited, DEADLINE, what="the record notes the end")
    assert record.checkers_exited is not None and record.exited is not None
    assert record.exited - record.checkers_exited >= SIDECAR_STOP_AFTER
    assert record.exit_code == exit_code and record.phase == phase


# --- disruptions -----------------------------------------------------------------------------------

# SIM_DISRUPT → the condition's reason and message, and the request that ends the pod (verb, subresource)
BY_THE_API = {
    "eviction": ("EvictionByEvictionAPI", "Eviction API: evicting", ("create", "eviction")),
    "preemption": ("PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod",
                   ("delete", "")),
    "taint": ("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint", ("delete", "")),
}


@pytest.mark.parametrize("mode", list(BY_THE_API))
def test_a_disruption_by_the_api_writes_its_condition_then_deletes_the_pod(
        cluster: TestCluster, namespace: str, graceful: SimKubelet, receiver: ReportReceiver, mode: str) -> None:
    reason, message, request = BY_THE_API[mode]
    offset = cluster.audit_offset()
    make_pod(cluster, namespace, "victim", [checker("kh-sim/hang", receiver, SIM_DISRUPT=mode,
                                                    SIM_DISRUPT_AFTER="0.3")])
    pod = wait_pod(cluster, namespace, "victim", lambda p: terminated(p, "main"), "the deleted checker stopped")
    assert pod["metadata"].get("deletionTimestamp") and pod["status"]["phase"] == "Failed"
    assert (terminated(pod, "main") or {}).get("exitCode") == 143
    target = condition(pod, "DisruptionTarget")  # kept by the kubelet's later status write
    assert target is not None
    assert (target["status"], target["reason"], target["message"]) == ("True", reason, message)
    assert target["lastTransitionTime"] and pod["status"].get("reason") is None
    record = graceful.record(namespace, "victim")
    assert record is not None and record.disruption == mode and record.disrupted is not None
    assert record.running is not None and record.disrupted - record.running >= 0.3
    assert record.terminating is not None and record.disrupted <= record.terminating
    wait_for(lambda: get_pod(cluster, namespace, "victim") is None, DEADLINE, what="pod gone")
    # how the pod was ended: the first delete or eviction the simulated kubelet sent (its grace-0 delete follows)
    sent = [(e.get("verb"), (e.get("objectRef") or {}).get("subresource", ""))
            for e in cluster.audit_events_since(offset)
            if e.get("stage") == "ResponseComplete" and (e.get("objectRef") or {}).get("name") == "victim"
            and str(e.get("userAgent", "")).startswith("kh-sim-kubelet")]
    assert next(r for r in sent if r in (("create", "eviction"), ("delete", ""))) == request


@pytest.mark.parametrize(("mode", "pod_reason", "message"), [
    ("pressure", "Evicted", "The node was low on resource: memory. Threshold quantity: 100Mi, available: 42Mi. "
                            "Container main was using 512Mi, request is 0, has larger consumption of memory. "),
    ("shutdown", "Terminated", "Pod was terminated in response to imminent node shutdown."),
])
def test_a_kubelet_disruption_fails_the_pod_and_leaves_it_for_someone_to_delete(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, mode: str, pod_reason: str, message: str) -> None:
    created = make_pod(cluster, namespace, "evicted", [checker("kh-sim/hang-silent", SIM_DISRUPT=mode)])
    pod = wait_pod(cluster, namespace, "evicted", lambda p: terminated(p, "main"), "the checker stopped")
    assert pod["status"]["phase"] == "Failed" and "deletionTimestamp" not in pod["metadata"]
    assert (pod["status"]["reason"], pod["status"]["message"]) == (pod_reason, message)
    target = condition(pod, "DisruptionTarget")
    assert target is not None
    assert (target["status"], target["reason"], target["message"]) == ("True", "TerminationByKubelet", message)
    end = terminated(pod, "main")
    assert end is not None and (end["exitCode"], end["reason"]) == (143, "Error")
    # the kubelet's first write failed the pod with its containers still running, the next one stopped them
    (first,) = [p for p in history(cluster, namespace, "evicted", created["metadata"]["resourceVersion"])
                if p["status"].get("reason") and not terminated(p, "main")]
    assert first["status"]["phase"] == "Failed" and condition(first, "DisruptionTarget")
    record = kubelet.record(namespace, "evicted")
    assert record is not None
    wait_for(lambda: record.exit_code == 143, DEADLINE, what="the record notes the stop")
    assert record.disruption == mode and record.exited is not None
    assert record.running is not None and record.disrupted is not None
    assert record.disrupted - record.running >= DISRUPT_AFTER
    assert record.phase == "Failed" and record.terminating is None
    assert get_pod(cluster, namespace, "evicted") is not None  # still there: nobody deleted it
    cluster.request("DELETE", pods_path(namespace, "evicted"))
    wait_for(lambda: get_pod(cluster, namespace, "evicted") is None, DEADLINE, what="pod gone once deleted")


def test_a_pod_whose_checker_exited_beside_a_running_sidecar_is_still_disrupted(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver) -> None:
    make_pod(cluster, namespace, "late", [checker("kh-sim/ok", receiver, SIM_DISRUPT="shutdown", SIM_DISRUPT_AFTER="1"),
                                          container(SIDECAR, "mesh")])
    pod = wait_pod(cluster, namespace, "late", lambda p: terminated(p, "mesh"), "the sidecar stopped")
    assert pod["status"]["phase"] == "Failed" and pod["status"]["reason"] == "Terminated"
    assert (terminated(pod, "main") or {}).get("exitCode") == 0 and (terminated(pod, "mesh") or {})["exitCode"] == 143
    assert len(receiver.received) == 1  # it had reported
    record = kubelet.record(namespace, "late")
    assert record is not None and record.checkers_exited is not None and record.disrupted is not None
    assert record.checkers_exited < record.disrupted and record.exit_code == 0


def test_a_pod_that_finished_before_its_disruption_is_left_alone(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver) -> None:
    make_pod(cluster, namespace, "quick",
             [checker("kh-sim/ok", receiver, SIM_DISRUPT="eviction", SIM_DISRUPT_AFTER="1")])
    wait_pod(cluster, namespace, "quick", lambda p: p["status"].get("phase") == "Succeeded", "Succeeded")
    key = f"{namespace}/quick"
    wait_for(lambda: not disrupt_threads_of(key), DEADLINE, what="the disruption's thread over")
    pod = get_pod(cluster, namespace, "quick")
    assert pod is not None and "deletionTimestamp" not in pod["metadata"]
    assert condition(pod, "DisruptionTarget") is None and pod["status"]["phase"] == "Succeeded"
    record = kubelet.record(namespace, "quick")
    assert record is not None and record.disrupted is None and record.disruption == "" and record.errors == []


def test_the_api_server_keeps_a_disruption_target_condition_written_to_a_pods_status(
        cluster: TestCluster, namespace: str) -> None:
    make_pod(cluster, namespace, "plain", [container("registry.invalid/none:1")])  # no kubelet: never bound
    written = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
               "message": "Eviction API: evicting", "lastTransitionTime": "2026-01-02T03:04:05Z"}
    cluster.request("PATCH", pods_path(namespace, "plain") + "/status", {"status": {"conditions": [written]}},
                    content_type="application/merge-patch+json")
    pod = get_pod(cluster, namespace, "plain")
    assert pod is not None and condition(pod, "DisruptionTarget") == {**written, "lastProbeTime": None}
