"""The pod cache's transform keeps everything the daemon decides on: each decision is the same on the
whole pod and on what the cache keeps."""
from __future__ import annotations

import copy
from typing import Any

import pytest

from kuberhealthy.control.reaper import Limits, pod_finished_at, pods_to_reap
from kuberhealthy.records.checkpod import pod_check_index, pod_ip_index, pod_uuid_index, slim_pod
from kuberhealthy.run.podstate import (
    checkers_done,
    disruption,
    live,
    pending,
    sidecars_of,
    sidecars_running,
    start_failure,
    terminating,
    why_ended,
)
from kuberhealthy.web.report.finder import CallerFinder, UnknownCaller


def pod(phase: str = "Succeeded", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "dns-1796114000", "namespace": "kuberhealthy", "uid": "u-1", "resourceVersion": "42",
            "creationTimestamp": "2026-12-01T08:00:00Z",
            "labels": {"app": "kuberhealthy-check", "kuberhealthy-check-name": "dns", "kuberhealthy-run-id": "r-1",
                       "team": "sre"},
            "annotations": {"comcast.github.io/check-name": "dns", "note": "x" * 500},
            "managedFields": [{"manager": "kuberhealthy", "fieldsV1": {"f:spec": {}}}],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "kh-0", "uid": "o-1"}],
        },
        "spec": {"nodeName": "node-a", "restartPolicy": "Never", "containers": [
            {"name": "main", "image": "dns-check:1", "env": [
                {"name": "HOSTNAME", "value": "kubernetes.default"},
                {"name": "KH_RUN_UUID", "value": "r-1"}, {"name": "KH_CHECK_RUN_DEADLINE", "value": "1796114300"},
                {"name": "KH_REPORTING_URL", "value": "http://kuberhealthy/externalCheckStatus"}],
             "resources": {"requests": {"cpu": "10m"}}}]},
        "status": {"phase": phase, "podIP": "10.0.0.7", "podIPs": [{"ip": "10.0.0.7"}, {"ip": "fd00::7"}],
                   "hostIP": "192.168.1.2", "startTime": "2026-12-01T08:00:01Z",
                   "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "2026-12-01T08:00:09Z"},
                                  {"type": "Initialized", "status": "True",
                                   "lastTransitionTime": "2026-12-01T08:00:01Z"}],
                   "containerStatuses": [{"name": "main", "image": "dns-check:1", "ready": False,
                                          "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                                                   "startedAt": "2026-12-01T08:00:02Z",
                                                                   "finishedAt": "2026-12-01T08:00:08Z"}}}],
                   **status},
    }


VARIANTS = [
    pod(),
    pod("Failed"),
    pod("Running", containerStatuses=[{"name": "main", "state": {"running": {"startedAt": "x"}}}]),
    pod("Pending", containerStatuses=[{"name": "main", "state": {"waiting": {"reason": "ErrImagePull"}}}]),
    pod("Succeeded", containerStatuses=[{"name": "main", "state": {"waiting": {"reason": "x"}}}]),
    pod("Failed", containerStatuses=[{"name": "main", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                                                             "finishedAt": "2026-12-01T08:00:08Z"}}}]),
    pod("Failed", initContainerStatuses=[{"name": "setup",
                                          "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}],
        containerStatuses=[{"name": "main", "state": {"waiting": {"reason": "PodInitializing"}}}]),
    pod("Failed", reason="Evicted", message="The node was low on resource: memory. " + "x" * 500),
]
PREEMPTED = pod("Running", conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                                        "message": "default-scheduler preempting " + "x" * 500,
                                        "lastTransitionTime": "2026-12-01T08:00:10Z"}])
NOT_DISRUPTED = pod("Running", conditions=[{"type": "DisruptionTarget", "status": "False", "reason": "Nothing"}])


def meshed(annotation: str = "", native: bool = False) -> dict[str, Any]:
    """A pod whose checker is over while its sidecars run: a proxy container, maybe an annotated agent, a
    native sidecar (restartPolicy Always: a 1.29 server keeps it on the pod)."""
    full = pod("Running", containerStatuses=[
        {"name": "main", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
        {"name": "istio-proxy", "state": {"running": {"startedAt": "x"}}},
        {"name": "vault-agent", "state": {"running": {"startedAt": "x"}}}])
    full["spec"]["containers"] += [{"name": "istio-proxy", "image": "proxy"}, {"name": "vault-agent", "image": "v"}]
    if annotation:
        full["metadata"]["annotations"]["kuberhealthy.github.io/sidecars"] = annotation
    if native:
        full["spec"]["initContainers"] = [{"name": "agent", "image": "a", "restartPolicy": "Always"},
                                          {"name": "setup", "image": "s"}]
    return full


VARIANTS += [PREEMPTED, NOT_DISRUPTED, meshed(), meshed("vault-agent"), meshed(" vault-agent ,x", native=True)]


def checkers_over(p: dict[str, Any]) -> bool:
    return checkers_done(p, sidecars_of(p))


def sidecars_left(p: dict[str, Any]) -> list[str]:
    return sidecars_running(p, sidecars_of(p))


@pytest.mark.parametrize("full", VARIANTS)
def test_every_decision_is_the_same_on_the_slim_pod(full: dict[str, Any]) -> None:
    slim = slim_pod(copy.deepcopy(full))
    for decide in (live, pending, start_failure, terminating, why_ended, pod_finished_at,
                   pod_ip_index, pod_uuid_index, pod_check_index, sidecars_of, disruption, checkers_over,
                   sidecars_left):
        assert decide(slim) == decide(full), decide.__name__
    assert CallerFinder.validate(slim, "s") == CallerFinder.validate(full, "s")
    limits = Limits(max_completed_pods=0, max_error_pods=0, max_pod_age=10.0, max_khjob_age=900.0)
    assert pods_to_reap([slim], 2e9, limits) == pods_to_reap([full], 2e9, limits)


def test_the_slim_pod_drops_what_nobody_reads() -> None:
    slim = slim_pod(pod())
    assert "managedFields" not in slim["metadata"] and "ownerReferences" not in slim["metadata"]
    assert slim["metadata"]["annotations"] == {"comcast.github.io/check-name": "dns"}
    assert [e["name"] for e in slim["spec"]["containers"][0]["env"]] == ["KH_RUN_UUID", "KH_CHECK_RUN_DEADLINE"]
    assert len(repr(slim)) < len(repr(pod())) / 2


def test_a_pod_without_the_uuid_env_is_still_refused_after_the_transform() -> None:
    full = pod()
    full["spec"]["containers"][0]["env"] = [{"name": "OTHER", "value": "1"}]
    with pytest.raises(UnknownCaller):
        CallerFinder.validate(slim_pod(full), "s")


def test_sidecars_are_the_mesh_proxies_the_annotated_the_configured_and_the_native_ones() -> None:
    assert sidecars_of(meshed()) >= {"istio-proxy", "linkerd-proxy", "cilium-envoy"}
    assert "vault-agent" not in sidecars_of(meshed()) and "vault-agent" in sidecars_of(meshed("vault-agent"))
    assert {"vault-agent", "x", "agent"} <= sidecars_of(meshed(" vault-agent ,x", native=True))
    assert "setup" not in sidecars_of(meshed(native=True))  # an init container that runs to its end
    assert "shipper" in sidecars_of(pod(), ("shipper",))
    assert not checkers_over(meshed()) and sidecars_left(meshed()) == []  # vault-agent is a checker here
    assert checkers_over(meshed("vault-agent")) and sidecars_left(meshed("vault-agent")) == ["istio-proxy",
                                                                                             "vault-agent"]


def test_a_pod_of_sidecars_only_never_counts_as_a_checker_that_is_over() -> None:
    only = pod("Running", containerStatuses=[{"name": "istio-proxy", "state": {"terminated": {"exitCode": 0}}}])
    only["spec"]["containers"] = [{"name": "istio-proxy", "image": "proxy"}]
    assert not checkers_over(only)


def test_a_disruption_is_the_true_disruption_target_or_a_kubelets_eviction_or_shutdown() -> None:
    assert disruption(PREEMPTED).startswith("PreemptionByScheduler: default-scheduler preempting")
    assert disruption(NOT_DISRUPTED) == ""  # status False
    assert disruption(pod("Failed", reason="Evicted", message="low on memory")) == "Evicted: low on memory"
    assert disruption(pod("Failed", reason="Terminated")) == "Terminated"
    assert disruption(pod("Failed", reason="DeadlineExceeded")) == ""
    assert disruption(pod("Running", reason="Evicted")) == ""  # not over: not the kubelet's eviction
