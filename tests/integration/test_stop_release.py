"""`kuberhealthy stop-release` (daemon/stoprelease.py, the chart's pre-delete hook) against the real API
server: it scales the daemon's Deployment to 0 and returns only once the daemon pods are gone. There is
no controller here, so the test plays the ReplicaSet: it deletes the pods itself once the scale-down is
seen, as the Deployment's controller would."""
from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from kuberhealthy.daemon.stoprelease import stop_release
from kuberhealthy.kube import Kube, Resources
from testbed.cluster.apiserver import TestCluster
from testbed.wait import wait_for

LABELS = {"app": "kh-under-test"}


def _deployment(name: str, replicas: int = 2) -> dict[str, object]:
    template = {"metadata": {"labels": LABELS},
                "spec": {"containers": [{"name": "kuberhealthy", "image": "kuberhealthy-python:test"}]}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": LABELS}, "template": template}}


def _pod(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": LABELS},
            "spec": {"containers": [{"name": "kuberhealthy", "image": "kuberhealthy-python:test"}]}}


@pytest.fixture
def res(cluster: TestCluster) -> Iterator[Resources]:
    kube = Kube.connect(str(cluster.kubeconfig))
    yield Resources(kube)
    kube.close()


def _replicas(cluster: TestCluster, namespace: str, name: str) -> int:
    return int(cluster.request("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")["spec"]["replicas"])


def test_stop_release_scales_the_deployment_to_zero_and_returns_once_its_pods_are_gone(
        cluster: TestCluster, namespace: str, res: Resources) -> None:
    cluster.request("POST", f"/apis/apps/v1/namespaces/{namespace}/deployments", _deployment("kuberhealthy"))
    for name in ("kh-a", "kh-b"):
        cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", _pod(name))
    outcome: list[str] = []
    worker = threading.Thread(target=lambda: outcome.append(stop_release(res, namespace, "kuberhealthy", 60)),
                              name="kh-test-stop-release")
    worker.start()
    try:
        wait_for(lambda: _replicas(cluster, namespace, "kuberhealthy") == 0, 30, what="the scale-down to 0")
        assert outcome == []  # still waiting: the daemon pods are there
        cluster.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/kh-a")
        assert outcome == []
        cluster.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/kh-b")
    finally:
        worker.join(60)
    assert outcome == ["stopped"]


def test_stop_release_gives_up_at_its_timeout_and_says_so(cluster: TestCluster, namespace: str,
                                                          res: Resources) -> None:
    cluster.request("POST", f"/apis/apps/v1/namespaces/{namespace}/deployments", _deployment("kuberhealthy"))
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", _pod("kh-stuck"))
    assert stop_release(res, namespace, "kuberhealthy", 2) == "timed out"
    assert _replicas(cluster, namespace, "kuberhealthy") == 0


def test_the_stop_release_command_exits_0_when_there_is_nothing_to_stop(cluster: TestCluster, namespace: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "kuberhealthy.cli", "stop-release", "--namespace", namespace,
                           "--deployment", "no-such-deployment", "--kubeconfig", str(cluster.kubeconfig)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"kuberhealthy stop-release: {namespace}/no-such-deployment: absent"


def test_the_stop_release_command_refuses_missing_arguments_with_exit_2() -> None:
    proc = subprocess.run([sys.executable, "-m", "kuberhealthy.cli", "stop-release", "--namespace", "x"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "--deployment" in proc.stderr
