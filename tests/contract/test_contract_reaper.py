"""docs/interface.md#clean-up: maxCompletedPodCount, maxErrorPodCount and the default maxCheckPodAge (72h).

One leader (enableForceMaster) with maxCompletedPodCount 2, maxErrorPodCount 1 and no checkReaperRunInterval
in its file: CHECK_REAPER_RUN_INTERVAL=1s in its environment sets the period instead. The finished checker
pods are made by the test (no kubelet here), with container finish times hours in the past, so the reaper
has old pods to work on without the suite having to wait for them to age.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khc, khcheck, pods_path
from testbed.cluster.objects import checker_pods, create_finished_pod, create_namespace, get_or_none
from testbed.daemons.process import DaemonProcess
from testbed.wait import wait_for


@dataclass
class Reap:
    cluster: TestCluster
    ns: str
    daemon: DaemonProcess


@pytest.fixture(scope="module")
def reap(cluster: TestCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reap]:
    ns = create_namespace(cluster, "creap")
    # checks whose own runs never make a pod (no containers): every pod here is the test's
    for name in ("countc", "agec"):
        body = khcheck(name, interval="1h")
        body["spec"]["podSpec"] = {"containers": []}
        cluster.request("POST", khc(ns), body)
    for i in range(4):
        create_finished_pod(cluster, ns, f"countc-s{i}", "countc", "Succeeded", 1 + i * 0.1)
    for i in range(3):
        create_finished_pod(cluster, ns, f"countc-f{i}", "countc", "Failed", 1 + i * 0.1)
    create_finished_pod(cluster, ns, "countc-live", "countc", "Running", 2)
    create_finished_pod(cluster, ns, "agec-old", "agec", "Succeeded", 100)
    create_finished_pod(cluster, ns, "agec-young", "agec", "Succeeded", 60)
    daemon = DaemonProcess(cluster, tmp_path_factory.mktemp("reap"), "kh-reap", ns, {
        "targetNamespace": ns, "enableForceMaster": True, "maxCompletedPodCount": 2, "maxErrorPodCount": 1,
        "stateReaperInterval": "1h"})
    daemon.env["CHECK_REAPER_RUN_INTERVAL"] = "1s"
    try:
        daemon.start().wait_serving()
        yield Reap(cluster, ns, daemon)
    finally:
        daemon.stop()


def phases(r: Reap, check: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in checker_pods(r.cluster, r.ns, check):
        if "deletionTimestamp" not in p["metadata"]:
            out.setdefault(p["status"].get("phase", ""), []).append(p["metadata"]["name"])
    return out


def test_finished_checker_pods_beyond_the_per_check_counts_are_deleted(reap: Reap) -> None:
    def trimmed() -> dict[str, list[str]]:
        ph = phases(reap, "countc")
        assert len(ph.get("Succeeded", [])) <= 2 and len(ph.get("Failed", [])) <= 1, ph
        return ph
    ph = wait_for(trimmed, 60, what="countc trimmed to 2 Succeeded and 1 Failed pods")
    assert len(ph.get("Succeeded", [])) == 2, f"maxCompletedPodCount 2 keeps 2: {ph}"
    assert len(ph.get("Failed", [])) == 1, f"maxErrorPodCount 1 keeps 1: {ph}"
    assert ph.get("Running") == ["countc-live"], "a running checker pod was touched"


def test_finished_checker_pods_older_than_the_default_72h_are_deleted(reap: Reap) -> None:
    wait_for(lambda: get_or_none(reap.cluster, pods_path(reap.ns, "agec-old")) is None, 60,
             what="the pod that finished 100h ago deleted")
    test_finished_checker_pods_beyond_the_per_check_counts_are_deleted(reap)  # the reaper has run since
    assert get_or_none(reap.cluster, pods_path(reap.ns, "agec-young")) is not None, \
        "a pod that finished 60h ago (within maxCheckPodAge 72h and the count) was deleted"
