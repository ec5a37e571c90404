"""The simulated kubelet's start gate (Timings.start_rate): pods start slowly on purpose, and a pod deleted
while it waits gives its turn away."""
from __future__ import annotations

import itertools

from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import container, pods_path
from testbed.sim.kubelet import SimKubelet
from testbed.sim.timings import Timings
from testbed.wait import wait_for


def _pod(cluster: TestCluster, namespace: str, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"restartPolicy": "Never", "containers": [container("kh-sim/hang-silent")]}}
    cluster.request("POST", pods_path(namespace), body)


def test_pods_start_no_faster_than_the_start_rate(cluster: TestCluster, namespace: str) -> None:
    with SimKubelet(str(cluster.kubeconfig), nodes=1, namespace=namespace, timings=Timings(start_rate=5.0)) as sim:
        for i in range(6):
            _pod(cluster, namespace, f"p{i}")
        wait_for(lambda: all(sim.record(namespace, f"p{i}") and sim.record(namespace, f"p{i}").running
                             for i in range(6)), 30, what="every pod Running")
        assert sim.start_gate is not None
        turns = list(sim.start_gate.granted_at)
        assert len(turns) == 6
        assert min(b - a for a, b in itertools.pairwise(turns)) >= 0.2  # 5 per second at most


def test_a_pod_deleted_while_it_waits_to_start_leaves_the_queue_and_takes_no_turn(
        cluster: TestCluster, namespace: str) -> None:
    with SimKubelet(str(cluster.kubeconfig), nodes=1, namespace=namespace, timings=Timings(start_rate=0.01)) as sim:
        gate = sim.start_gate
        assert gate is not None
        names = ["q0", "q1", "q2"]
        for name in names:
            _pod(cluster, namespace, name)

        def running() -> list[str]:
            return [n for n in names if (r := sim.record(namespace, n)) is not None and r.running is not None]
        wait_for(lambda: gate.stats()["waiting"] == 2 and len(running()) == 1, 30,
                 what="one pod started (the first turn), two waiting (the next turn is 100 s away)")
        deleted, left = [n for n in names if n not in running()]
        cluster.request("DELETE", pods_path(namespace, deleted))
        wait_for(lambda: gate.stats()["waiting"] == 1, 30, what="the deleted pod out of the queue")
        gate.set_rate(0)  # open: the one left starts at once
        wait_for(lambda: left in running(), 30, what=f"{left} Running")
        rec = sim.record(namespace, deleted)
        assert rec is not None and rec.running is None
        assert gate.stats()["granted"] == 2


def test_without_a_start_rate_there_is_no_gate(cluster: TestCluster, namespace: str) -> None:
    with SimKubelet(str(cluster.kubeconfig), nodes=1, namespace=namespace) as sim:
        assert sim.start_gate is None
        _pod(cluster, namespace, "r0")
        wait_for(lambda: sim.record(namespace, "r0") and sim.record(namespace, "r0").running, 30, what="r0 Running")
