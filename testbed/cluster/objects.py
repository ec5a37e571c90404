"""Objects made and read through the test bed's API server as the admin, with raw requests.

The bodies come from testbed/cluster/builders.py; every call goes through `TestCluster.request`, independent
of the product's client code (nothing here imports `kuberhealthy`). Pods made here are bound to a node
or carry a status set by hand, so the simulated kubelet leaves them alone unless a test wants it.
"""
from __future__ import annotations

import urllib.error
import uuid
from typing import TYPE_CHECKING, Any

from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import (
    CHECK_LABEL,
    MERGE_PATCH,
    NAMESPACES,
    PodShape,
    checker_pod,
    finished_status,
    khs,
    lease,
    lease_path,
    pod_status,
    pods_path,
)
from testbed.cluster.loopback import pod_ip

if TYPE_CHECKING:
    from typing_extensions import Unpack


NODE_ELSEWHERE = "testbed-node-nobody-drives"  # pods bound here are left alone by the simulated kubelet


def create_namespace(cluster: TestCluster, prefix: str = "t", name: str | None = None) -> str:
    """A namespace named `name`, or `<prefix>-<random>`; one that exists already is fine (left behind
    after the test: the test bed runs no namespace controller)."""
    name = name or f"{prefix}-{uuid.uuid4().hex[:10]}"
    try:
        cluster.request("POST", NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except urllib.error.HTTPError as e:
        if e.code != 409:
            raise
    return name


def get_or_none(cluster: TestCluster, path: str) -> Any:
    """The object at `path`, or None when it does not exist."""
    try:
        return cluster.request("GET", path)
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise


def delete_quietly(cluster: TestCluster, *paths: str) -> None:
    """Delete each object; one that is gone already is fine."""
    for path in paths:
        try:
            cluster.request("DELETE", path)
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise


def state_spec(cluster: TestCluster, ns: str, name: str) -> dict[str, Any]:
    """The khstate's spec, or {} when there is none."""
    obj = get_or_none(cluster, khs(ns, name))
    return dict(obj.get("spec") or {}) if obj else {}


def checker_pods(cluster: TestCluster, ns: str, check: str | None = None) -> list[dict[str, Any]]:
    """The namespace's pods (of one check, by its label), oldest first."""
    path = pods_path(ns) + (f"?labelSelector={CHECK_LABEL}%3D{check}" if check else "")
    return sorted(cluster.request("GET", path)["items"], key=lambda p: p["metadata"]["creationTimestamp"])


def set_pod_status(cluster: TestCluster, ns: str, name: str, phase: str = "Running", ip: str | None = None,
                   **extra: Any) -> None:
    """Write a pod's status by hand, as a kubelet would (`ip`: its pod IP, host IP 127.0.0.1)."""
    cluster.request("PATCH", pods_path(ns, name) + "/status", pod_status(phase, ip, **extra),
                    content_type=MERGE_PATCH)


def create_checker_pod(cluster: TestCluster, ns: str, name: str, *, check: str | None, run_uuid: str | None,
                       phase: str | None = "Running", ip: str | None = None,
                       **shape: Unpack[PodShape]) -> tuple[dict[str, Any], str]:
    """A checker pod (testbed.cluster.builders.checker_pod, `shape` its keywords) with the status `phase`
    written by hand (None: no status) and pod IP `ip` (a fresh one by default). Bound to a node nobody
    drives unless `node_name` says otherwise (None: unbound, for the simulated kubelet). Returns (pod, ip)."""
    ip = ip or pod_ip()
    shape.setdefault("node_name", NODE_ELSEWHERE)
    pod = cluster.request("POST", pods_path(ns), checker_pod(name, check, run_uuid, **shape))
    if phase:
        set_pod_status(cluster, ns, name, phase, ip)
    return pod, ip


def create_finished_pod(cluster: TestCluster, ns: str, name: str, check: str, phase: str, hours_ago: float, *,
                        run_uuid: str | None = None, **shape: Unpack[PodShape]) -> None:
    """A checker pod of a past run of `check` whose container ended (Succeeded, Failed) or started
    (Running) `hours_ago`; Pending: no status at all. Bound to a node nobody drives and of a made-up
    image unless `shape` (checker_pod's keywords) says otherwise."""
    shape.setdefault("node_name", NODE_ELSEWHERE)
    shape.setdefault("image", "example.invalid/checker:1")
    cluster.request("POST", pods_path(ns), checker_pod(name, check, run_uuid or str(uuid.uuid4()), **shape))
    if phase != "Pending":
        cluster.request("PATCH", pods_path(ns, name) + "/status", finished_status(phase, hours_ago, pod_ip()),
                        content_type=MERGE_PATCH)


def create_lease(cluster: TestCluster, ns: str, name: str, holder: str, seconds: int) -> None:
    cluster.request("POST", lease_path(ns), lease(name, holder, seconds))


def lease_holder(cluster: TestCluster, ns: str, name: str) -> str | None:
    """The holderIdentity ('' when released), or None when the Lease does not exist."""
    obj = get_or_none(cluster, lease_path(ns, name))
    if obj is None:
        return None
    return str(obj.get("spec", {}).get("holderIdentity") or "")
