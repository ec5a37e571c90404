"""What the `make attack` scenarios share: a daemon process with the simulated kubelet in a namespace of
its own, and the daemon's API requests read from the test bed's audit log."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kuberhealthy.kube.client import USER_AGENT
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import pods_path
from testbed.cluster.objects import create_namespace
from testbed.daemons.process import DaemonProcess
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

AGENT = USER_AGENT.split("/")[0] + "/"  # the daemon's requests (the test bed's own and the kubelet's differ)


@contextmanager
def daemon_bed(cluster: TestCluster, workdir: Path, name: str, nodes: int = 3,
               settings: dict[str, Any] | None = None) -> Iterator[tuple[str, SimKubelet, DaemonProcess]]:
    """(namespace, simulated kubelet, daemon process not yet started) for scenario `name`; all stopped after."""
    workdir.mkdir(parents=True, exist_ok=True)
    ns = create_namespace(cluster, f"atk-{name}")
    sim = SimKubelet(str(cluster.kubeconfig), nodes=nodes, namespace=ns, signing_key=cluster.sa_key)
    sim.start()
    daemon = DaemonProcess(cluster, workdir, f"kh-{name}", ns,
                           {"targetNamespace": ns, "enableForceMaster": True, "logLevel": "info", **(settings or {})})
    try:
        yield ns, sim, daemon
    finally:
        daemon.stop()
        sim.stop()


def daemon_requests(cluster: TestCluster, offset: int, ns: str) -> list[dict[str, Any]]:
    """The daemon's API requests since audit-log `offset` (watches and Lease renewals aside), read once a
    marker request made after them is in the audit log (so none is still on its way there)."""
    marker = uuid.uuid4().hex
    cluster.request("GET", f"{pods_path(ns)}?labelSelector=marker%3D{marker}")

    def flushed() -> tuple[list[dict[str, Any]]] | None:
        events = cluster.audit_events_since(offset)
        if not any(marker in str(e.get("requestURI", "")) and e.get("stage") == "ResponseComplete" for e in events):
            return None
        return ([e for e in events if str(e.get("userAgent", "")).startswith(AGENT) and e.get("verb") != "watch"
                 and e.get("stage") == "ResponseComplete" and (e.get("objectRef") or {}).get("resource") != "leases"],)
    found = wait_for(flushed, 30, what="the marker in the audit log")
    assert found is not None
    return found[0]
