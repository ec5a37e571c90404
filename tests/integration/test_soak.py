"""Soak: many checks on short intervals for a minute (make test-slow; not in the default run)."""
from __future__ import annotations

import time

import pytest

from kuberhealthy.kube import KHCHECKS
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khcheck
from testbed.cluster.podmonitor import LivePodMonitor
from testbed.daemons.inprocess import InProcessDaemon
from testbed.sim.kubelet import SimKubelet

CHECKS = 20
SECONDS = 60


@pytest.mark.slow
def test_twenty_checks_every_two_seconds_for_a_minute_run_cleanly(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet) -> None:
    for i in range(CHECKS):
        cluster.request("POST", KHCHECKS.path(namespace),
                        khcheck(f"soak-{i}", "kh-sim/slow", interval="2s", env={"SIM_DELAY": "0.3"}))
    monitor = LivePodMonitor(str(cluster.kubeconfig), namespace).start()
    daemon = InProcessDaemon(cluster, namespace, {"checkReaperRunInterval": "5s",
                                                  "maxCompletedPodCount": 2}).start()
    try:
        time.sleep(SECONDS)  # the soak itself: let the schedule run
        workers = dict(daemon.services.controller.workers)
    finally:
        daemon.stop()
        monitor.stop()
    assert len(workers) == CHECKS
    runs = {k: w.runs for k, w in workers.items()}
    print(f"\nsoak: {CHECKS} checks x {SECONDS}s: runs per check min {min(runs.values())} "
          f"max {max(runs.values())} (a run every 2s would be {SECONDS // 2})")
    # every check kept its 2 s schedule (allowing for start-up and a loaded machine)
    assert min(runs.values()) >= SECONDS / 2 / 3, runs
    states = {s["metadata"]["name"]: s["spec"] for s in daemon.services.khstates.list()}
    failing = {k: v.get("Errors") for k, v in states.items() if not v.get("OK")}
    assert not failing, failing
    assert max(monitor.max_live.values()) == 1, dict(monitor.max_live)
