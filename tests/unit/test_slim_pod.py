"""The pod cache's transform keeps everything the daemon decides on: each decision is the same on the
whole pod and on what the cache keeps."""
from __future__ import annotations

import copy
from typing import Any

import pytest

from kuberhealthy.control.reaper import Limits, pod_finished_at, pods_to_reap
from kuberhealthy.records.checkpod import pod_check_index, pod_ip_index, pod_uuid_index, slim_pod
from kuberhealthy.run.podstate import live, pending, start_failure, terminating, why_ended
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


@pytest.mark.parametrize("full", VARIANTS)
def test_every_decision_is_the_same_on_the_slim_pod(full: dict[str, Any]) -> None:
    slim = slim_pod(copy.deepcopy(full))
    for decide in (live, pending, start_failure, terminating, why_ended, pod_finished_at,
                   pod_ip_index, pod_uuid_index, pod_check_index):
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
