"""The daemon's API versions on the oldest Kubernetes it runs on: the test bed's 1.20.

Every resource kube/ defines is served there as it is by the newest Kubernetes (tests/unit/test_api_versions.py
judges those), except the Eviction body: policy/v1 came in 1.22, so kube/ falls back to policy/v1beta1 on this
server, and only because this server answers policy/v1 with a 400 (it cannot read that version); a server that
refuses the eviction itself (a PodDisruptionBudget) is not asked again in another version.
"""
from __future__ import annotations

import urllib.error
from collections.abc import Iterator
from typing import Any

import pytest

from kuberhealthy.base.errors import NotFound
from kuberhealthy.kube import Kube, Resources
from kuberhealthy.kube import resources as kube_resources
from kuberhealthy.kube.resources import EVICTION, PODS, Resource
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import checker_pod

RESOURCES = {name: r for name, r in vars(kube_resources).items() if isinstance(r, Resource)}


class Recording:
    """A Kube that notes each request (method and, for an eviction, its body's version) and passes it on."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.asked: list[str] = []

    def request(self, method: str, path: str, **kw: Any) -> Any:
        body = kw.get("body") or {}
        self.asked.append(body["apiVersion"] if path.endswith("/eviction") else method)
        return self.kube.request(method, path, **kw)


@pytest.fixture
def recording(cluster: TestCluster) -> Iterator[Recording]:
    kube = Kube.connect(str(cluster.kubeconfig))
    try:
        yield Recording(kube)
    finally:
        kube.close()


def _discovered(cluster: TestCluster, res: Resource) -> dict[str, Any] | None:
    doc = cluster.request("GET", f"/apis/{res.api_version}" if res.group else f"/api/{res.version}")
    return next((r for r in doc["resources"] if r["name"] == res.plural), None)


def _pod(cluster: TestCluster, namespace: str, name: str, labels: dict[str, str] | None = None) -> None:
    cluster.request("POST", PODS.path(namespace), checker_pod(name, None, None, image="x", labels=labels or {}))


def _eviction(namespace: str, name: str, version: str) -> dict[str, Any]:
    return {"apiVersion": version, "kind": EVICTION.kind, "metadata": {"name": name, "namespace": namespace}}


@pytest.mark.parametrize("name", sorted(RESOURCES))
def test_every_resource_the_daemon_uses_is_served_by_the_test_beds_kubernetes_in_the_same_version(
        cluster: TestCluster, name: str) -> None:
    res = RESOURCES[name]
    assert _discovered(cluster, res) is not None, f"{res.plural} not in {res.api_version}"


def test_the_test_bed_cannot_read_the_preferred_eviction_version_and_says_so_with_a_400(
        cluster: TestCluster, namespace: str) -> None:
    _pod(cluster, namespace, "probe")
    with pytest.raises(urllib.error.HTTPError) as refused:
        cluster.request("POST", PODS.path(namespace, "probe", "eviction"), _eviction(namespace, "probe", "policy/v1"))
    assert refused.value.code == 400
    # Discovery agrees: pods/eviction takes the older version here.
    evictions = next(r for r in cluster.request("GET", "/api/v1")["resources"] if r["name"] == "pods/eviction")
    assert f"{evictions['group']}/{evictions['version']}" in EVICTION.fallbacks


def test_evictions_fall_back_to_the_version_the_server_reads_and_ask_it_first_from_then_on(
        cluster: TestCluster, namespace: str, recording: Recording) -> None:
    res = Resources(recording)  # type: ignore[arg-type]
    for name in ("a", "b"):
        _pod(cluster, namespace, name)
    assert res.evict_pod(namespace, "a") == "evicted"
    assert res.evict_pod(namespace, "b") == "evicted"
    assert recording.asked == ["policy/v1", "policy/v1beta1", "policy/v1beta1"]
    for name in ("a", "b"):
        with pytest.raises(NotFound):
            res.get(PODS, namespace, name)


def test_an_eviction_a_disruption_budget_refuses_becomes_a_delete_without_asking_another_version(
        cluster: TestCluster, namespace: str, recording: Recording) -> None:
    res = Resources(recording)  # type: ignore[arg-type]
    _pod(cluster, namespace, "warm-up")
    res.evict_pod(namespace, "warm-up")  # learns that this server reads policy/v1beta1
    recording.asked.clear()

    cluster.request("POST", f"/apis/policy/v1beta1/namespaces/{namespace}/poddisruptionbudgets", {
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"keep": "yes"}}}})
    _pod(cluster, namespace, "kept", {"keep": "yes"})
    # A running pod (a pending one may be evicted whatever the budget says); no disruption controller
    # runs here, so the budget allows no disruption at all.
    pod = cluster.request("GET", PODS.path(namespace, "kept"))
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    cluster.request("PUT", PODS.path(namespace, "kept", "status"), pod)
    with pytest.raises(urllib.error.HTTPError) as refused:
        cluster.request("POST", PODS.path(namespace, "kept", "eviction"),
                        _eviction(namespace, "kept", "policy/v1beta1"))
    assert refused.value.code == 429

    assert res.evict_pod(namespace, "kept") == "deleted"
    assert recording.asked == ["policy/v1beta1", "DELETE"]
