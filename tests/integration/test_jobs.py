"""khjobs run once: phase "" → Running → Completed, result in the khstate of the same name."""
from __future__ import annotations

from typing import Any

import requests

from kuberhealthy.kube import KHJOBS, KHSTATES
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khjob
from testbed.daemons.inprocess import InProcessDaemon
from testbed.wait import wait_for


def test_a_new_khjob_runs_once_and_is_marked_completed(cluster: TestCluster, namespace: str,
                                                       daemon: InProcessDaemon, kubelet: Any) -> None:
    cluster.request("POST", KHJOBS.path(namespace), khjob("once", "kh-sim/ok"))
    wait_for(lambda: cluster.request("GET", KHJOBS.path(namespace, "once"))["spec"].get("phase") == "Completed",
             60, what="job completed")
    state = cluster.request("GET", KHSTATES.path(namespace, "once"))["spec"]
    assert state["OK"] is True and state["RunDuration"] and state["khWorkload"] == "KHJob"
    pods = [r for r in kubelet.records.values() if r.namespace == namespace]
    assert len(pods) == 1
    page = wait_for(lambda: (p := requests.get(daemon.url + "/", timeout=5).json())
                    and f"{namespace}/once" in p["JobDetails"] and p, what="job on the status page")
    assert f"{namespace}/once" not in page["CheckDetails"]


def test_a_khjob_without_a_phase_field_also_runs(cluster: TestCluster, namespace: str,
                                                 daemon: InProcessDaemon) -> None:
    cluster.request("POST", KHJOBS.path(namespace), khjob("nophase", "kh-sim/fail", phase=None))
    wait_for(lambda: cluster.request("GET", KHJOBS.path(namespace, "nophase"))["spec"].get("phase") == "Completed",
             60, what="job completed")
    assert cluster.request("GET", KHSTATES.path(namespace, "nophase"))["spec"]["OK"] is False


def test_a_completed_khjob_is_not_run_again(cluster: TestCluster, namespace: str, daemon: InProcessDaemon,
                                            kubelet: Any) -> None:
    cluster.request("POST", KHJOBS.path(namespace), khjob("done", "kh-sim/ok", phase="Completed"))
    cluster.request("POST", KHJOBS.path(namespace), khjob("marker", "kh-sim/ok"))
    wait_for(lambda: cluster.request("GET", KHJOBS.path(namespace, "marker"))["spec"].get("phase") == "Completed",
             60, what="marker job completed")
    assert not any(r.name.startswith("done-") for r in kubelet.records.values())
