"""Run now against the real API server and simulated kubelet: `POST /api/checks/<ns>/<name>/run` on a
standby starts a run on the leader, the same annotation set as `kubectl annotate` does it too, the
annotation is cleared, the check is never restarted by it, and the JSON API and metrics answer on
every replica."""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from kuberhealthy.control.workers import CheckWorker
from kuberhealthy.outputs.events import COUNT_EVERY
from kuberhealthy.records.runnow import RUN_NOW_ANNOTATION
from testbed.clients.formats import promtool_check
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khc, khcheck
from testbed.daemons.inprocess import InProcessDaemon
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

ELECTION = {"leaseName": "kh-run-now", "leaseDuration": "6s", "renewDeadline": "4s", "retryPeriod": "1s"}
SLOW = {"SIM_DELAY": "4"}  # seconds a run of the check lasts: long enough to ask again while it runs
NEW_FAMILIES = ("kuberhealthy_check_consecutive_failures", "kuberhealthy_check_last_success_timestamp_seconds",
                "kuberhealthy_check_interval_seconds", "kuberhealthy_check_runs_total",
                "kuberhealthy_influx_points_dropped_total", "kuberhealthy_schedule_lag_seconds_count",
                "kuberhealthy_report_requests_total")


def annotate(cluster: TestCluster, ns: str, name: str, value: str | None) -> None:
    """What `kubectl annotate khcheck NAME comcast.github.io/run-now=VALUE --overwrite` sends."""
    cluster.request("PATCH", khc(ns, name), {"metadata": {"annotations": {RUN_NOW_ANNOTATION: value}}},
                    content_type="application/merge-patch+json")


def annotation(cluster: TestCluster, ns: str, name: str) -> str | None:
    return (cluster.request("GET", khc(ns, name))["metadata"].get("annotations") or {}).get(RUN_NOW_ANNOTATION)


def entry(daemon: InProcessDaemon, ns: str, name: str) -> dict[str, Any]:
    answer = requests.get(f"{daemon.url}/api/checks/{ns}/{name}", timeout=10)
    assert answer.status_code == 200, answer.text
    (found,) = [e for e in answer.json()["checks"] if e["kind"] == "check"]
    return dict(found)


def post_run(daemon: InProcessDaemon, ns: str, name: str) -> requests.Response:
    return requests.post(f"{daemon.url}/api/checks/{ns}/{name}/run", timeout=10)


def worker_of(daemon: InProcessDaemon, key: str) -> CheckWorker:
    controller = daemon.services.controller
    assert controller is not None
    return wait_for(lambda: controller.workers.get(key), 30, what=f"a worker for {key}")


def idle_after_runs(daemon: InProcessDaemon, worker: CheckWorker, ns: str, name: str, runs: int) -> None:
    wait_for(lambda: worker.runs >= runs and entry(daemon, ns, name)["currentRun"] is None, 60,
             what=f"{runs} finished run(s) of {name}")


@pytest.fixture
def pair(cluster: TestCluster, namespace: str,
         kubelet: SimKubelet) -> Iterator[tuple[InProcessDaemon, InProcessDaemon]]:
    """Two replicas electing a leader: (leader, standby)."""
    settings = {"enableForceMaster": False, "leaderElection": ELECTION}
    made: list[InProcessDaemon] = []
    try:
        leader = InProcessDaemon(cluster, namespace, settings, pod_name="kh-a")
        made.append(leader.start())
        wait_for(leader.services.is_leader, 30, what="kh-a leads")
        standby = InProcessDaemon(cluster, namespace, settings, pod_name="kh-b")
        made.append(standby.start())
        yield leader, standby
    finally:
        for d in reversed(made):
            d.stop()


def test_a_run_requested_on_a_standby_runs_at_once_on_the_leader_and_a_second_request_meanwhile_is_refused(
        cluster: TestCluster, namespace: str, pair: tuple[InProcessDaemon, InProcessDaemon]) -> None:
    leader, standby = pair
    ns, key = namespace, f"{namespace}/ondemand"
    cluster.request("POST", khc(ns), khcheck("ondemand", "kh-sim/slow", interval="1h", env=SLOW))
    worker = worker_of(leader, key)
    idle_after_runs(standby, worker, ns, "ondemand", 1)  # the first run, due at once; the next in an hour
    assert not standby.services.is_leader() and standby.services.controller.workers == {}

    answer = post_run(standby, ns, "ondemand")
    assert answer.status_code == 202, answer.text
    assert answer.json()["name"] == "ondemand"
    wait_for(lambda: worker.requested_runs == 1, 30, what="the leader starts the requested run")
    live = wait_for(lambda: entry(standby, ns, "ondemand")["currentRun"], 30, what="the standby sees the run")
    assert live["phase"] in ("Starting", "Pending", "Running") and "uuid" not in live
    again = post_run(standby, ns, "ondemand")
    assert again.status_code == 409, again.text
    assert again.headers["content-type"].startswith("text/plain")
    wait_for(lambda: annotation(cluster, ns, "ondemand") is None, 30, what="the annotation cleared")

    idle_after_runs(standby, worker, ns, "ondemand", 2)
    assert leader.services.controller.workers[key] is worker and worker.is_alive()  # never restarted
    assert worker.requested_runs == 1 and worker.runs == 2
    shown = entry(standby, ns, "ondemand")
    assert shown["successCount"] == 2 and len(shown["history"]) == 2 and shown["currentRun"] is None

    for d in pair:  # every replica serves the new families, and promtool accepts them
        text = requests.get(f"{d.url}/metrics", timeout=10).text
        names = {s.name for family in text_string_to_metric_families(text) for s in family.samples}
        assert set(NEW_FAMILIES) <= names, sorted(set(NEW_FAMILIES) - names)
        lint = promtool_check(text)
        assert lint.returncode == 0, lint.stdout + lint.stderr


@pytest.fixture
def daemon_settings() -> dict[str, Any]:
    return {"enableRunAPI": False, "checkChangeDebounce": "30s"}  # the route off; the annotation still works


def test_the_annotation_runs_the_check_at_once_is_cleared_and_while_a_run_is_in_flight_is_dropped(
        cluster: TestCluster, namespace: str, daemon: InProcessDaemon) -> None:
    ns, key = namespace, f"{namespace}/annotated"
    cluster.request("POST", khc(ns), khcheck("annotated", "kh-sim/slow", interval="1h", env=SLOW))
    worker = worker_of(daemon, key)
    idle_after_runs(daemon, worker, ns, "annotated", 1)
    refused = post_run(daemon, ns, "annotated")
    assert refused.status_code == 404  # enableRunAPI: false

    annotate(cluster, ns, "annotated", "please")  # noticed at once, though reconciles are 30 s apart
    wait_for(lambda: worker.requested_runs == 1, 30, what="a run on the annotation")
    wait_for(lambda: annotation(cluster, ns, "annotated") is None, 30, what="the annotation cleared")
    wait_for(lambda: entry(daemon, ns, "annotated")["currentRun"], 30, what="the requested run in flight")
    annotate(cluster, ns, "annotated", "again")  # while it runs: dropped, and removed
    wait_for(lambda: annotation(cluster, ns, "annotated") is None, 30, what="the second annotation removed")
    idle_after_runs(daemon, worker, ns, "annotated", 2)
    assert worker.requested_runs == 1 and daemon.services.controller.workers[key] is worker

    def requested_events() -> list[dict[str, Any]]:
        items = cluster.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
        return [e for e in items if e["reason"] == "CheckRunRequested"]
    events = wait_for(lambda: (found := requested_events()) and sum(e.get("count", 1) for e in found) >= 2 and found,
                      COUNT_EVERY + 30, what="CheckRunRequested Events")  # a repeat counted within COUNT_EVERY
    assert all("(annotation)" in e["message"] and e["involvedObject"]["name"] == "annotated" for e in events)
    assert json.dumps(events).count("(api)") == 0
