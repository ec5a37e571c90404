"""Uptime rollups written by real runs on the real API server (the simulated kubelet plays the node), for
khchecks and HealthChecks alike: each judged run counted once in its hour, in the run's own write, kept in the
state object (the khstate's spec.rollups, the HealthCheck's status.rollups) across a restart of the daemon;
a value edited into nonsense is started afresh with a warning Event."""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kuberhealthy.kube import EVENTS, HEALTHCHECKS, KHCHECKS, KHSTATES, Resources
from kuberhealthy.records import rollcodec, rollups
from kuberhealthy.records.checkspec import KIND_HEALTHCHECK, KIND_KHCHECK
from kuberhealthy.records.uptime import FIELD
from kuberhealthy.run.runner import Outcome, Runner
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.objects import create_lease
from testbed.daemons.inprocess import InProcessDaemon
from testbed.wait import wait_for

KINDS = ("khcheck", "healthcheck")
# A standby daemon (another holder keeps the Lease): it schedules nothing, so every run is the test's own,
# while its caches and report endpoint serve the runs as a leader's would.
STANDBY = {"enableForceMaster": False,
           "leaderElection": {"leaseName": "kh-uptime", "leaseDuration": "6s", "renewDeadline": "4s",
                              "retryPeriod": "1s"}}


def create(res: Resources, kind: str, ns: str, name: str, image: str) -> None:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": image}]}
    if kind == "healthcheck":
        res.create(HEALTHCHECKS, ns, {"apiVersion": HEALTHCHECKS.api_version, "kind": "HealthCheck",
                                      "metadata": {"name": name},
                                      "spec": {"runInterval": "1h", "timeout": "30s",
                                               "podSpec": {"spec": {**spec, "restartPolicy": "Never"}}}})
    else:
        res.create(KHCHECKS, ns, {"apiVersion": KHCHECKS.api_version, "kind": "KuberhealthyCheck",
                                  "metadata": {"name": name},
                                  "spec": {"runInterval": "1h", "timeout": "30s", "podSpec": spec}})


def run_once(d: InProcessDaemon, res: Resources, kind: str, ns: str, name: str, image: str) -> Outcome:
    """One run of the check with its checker image set to `image` first."""
    k = d.services.kinds.named(KIND_HEALTHCHECK if kind == "healthcheck" else KIND_KHCHECK)
    assert k is not None
    obj = res.get(k.resource, ns, name)
    containers = (obj["spec"]["podSpec"]["spec"] if kind == "healthcheck" else obj["spec"]["podSpec"])["containers"]
    containers[0]["image"] = image
    obj = res.replace(k.resource, ns, name, obj)
    return Runner(d.services, k.parse(obj), threading.Event()).run().outcome


def stored(res: Resources, kind: str, ns: str, name: str) -> Any:
    if kind == "healthcheck":
        return (res.get(HEALTHCHECKS, ns, name).get("status") or {}).get(FIELD)
    return (res.get(KHSTATES, ns, name).get("spec") or {}).get(FIELD)


def rollup_of(res: Resources, kind: str, ns: str, name: str) -> rollups.Rollup:
    rollup, warning = rollcodec.parse(stored(res, kind, ns, name))
    assert warning is None
    return rollup


def totals(rollup: rollups.Rollup) -> tuple[int, int, int]:
    return (sum(h.ok for h in rollup.hours), sum(h.failed for h in rollup.hours),
            sum(h.skipped for h in rollup.hours))


@pytest.mark.parametrize("kind", KINDS)
def test_runs_that_fail_every_third_time_show_two_thirds_uptime_across_a_restart_of_the_daemon(
        cluster: TestCluster, namespace: str, res: Resources, kubelet: Any, kind: str) -> None:
    create_lease(cluster, namespace, "kh-uptime", "someone-else", 3600)
    create(res, kind, namespace, "thirds", "kh-sim/ok")
    images = ["kh-sim/ok", "kh-sim/ok", "kh-sim/fail"] * 2
    d = InProcessDaemon(cluster, namespace, STANDBY).start()
    try:
        assert [run_once(d, res, kind, namespace, "thirds", i) for i in images[:3]] == [Outcome.REPORTED] * 3
        assert totals(rollup_of(res, kind, namespace, "thirds")) == (2, 1, 0)
    finally:
        d.stop()
    d = InProcessDaemon(cluster, namespace, STANDBY).start()  # a fresh process continues from the stored value
    try:
        assert [run_once(d, res, kind, namespace, "thirds", i) for i in images[3:]] == [Outcome.REPORTED] * 3
    finally:
        d.stop()
    rollup = rollup_of(res, kind, namespace, "thirds")
    assert totals(rollup) == (4, 2, 0)
    windows = rollups.windows(rollup, time.time())
    assert windows["1h"]["uptime"] == pytest.approx(4 / 6, abs=0.01)  # runs that straddle an hour weigh a little less
    assert windows["24h"]["durationP50"] is not None


@pytest.mark.parametrize("kind", KINDS)
def test_a_rollup_edited_into_nonsense_is_started_afresh_and_an_event_says_so(
        cluster: TestCluster, namespace: str, res: Resources, kubelet: Any, kind: str) -> None:
    create_lease(cluster, namespace, "kh-uptime", "someone-else", 3600)
    create(res, kind, namespace, "edited", "kh-sim/ok")
    d = InProcessDaemon(cluster, namespace, STANDBY).start()
    try:
        assert run_once(d, res, kind, namespace, "edited", "kh-sim/ok") is Outcome.REPORTED
        junk = {"v": 1, "hours": "!!not base64!!"}
        if kind == "healthcheck":
            hc = res.get(HEALTHCHECKS, namespace, "edited")
            hc["status"][FIELD] = junk
            res.replace(HEALTHCHECKS.status(), namespace, "edited", hc)
        else:
            state = res.get(KHSTATES, namespace, "edited")
            state["spec"][FIELD] = junk
            res.replace(KHSTATES, namespace, "edited", state)
        assert run_once(d, res, kind, namespace, "edited", "kh-sim/ok") is Outcome.REPORTED
        assert totals(rollup_of(res, kind, namespace, "edited")) == (1, 0, 0)

        def said() -> list[dict[str, Any]]:
            events, _ = res.list(EVENTS, namespace, field_selector="reason=StateNotKept")
            return [e for e in events if e["involvedObject"]["name"] == "edited"]
        event = wait_for(said, 30, what="the StateNotKept Event")[0]
        assert "uptime rollup could not be read" in event["message"]
    finally:
        d.stop()
