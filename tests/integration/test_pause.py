"""Pause against the real API server and simulated kubelet (records/pause.py, docs/interface.md#pausing-a-check): the
annotations set as `kubectl annotate` sets them; no checker pod while paused; `/api/checks` shows the
pause, `kuberhealthy_check_paused` is 1, the top-level OK ignores the paused failing check (its
CheckDetails entry stays); the pause's time passing, or the annotation's removal, runs the check at once;
an unparsable value raises a PauseIgnored Event and changes nothing. The daemon never writes the
annotations."""
from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from kuberhealthy.base.times import parse_time
from kuberhealthy.control.workers import CheckWorker
from kuberhealthy.records.pause import PAUSED_REASON, PAUSED_UNTIL
from testbed.clients.formats import promtool_check
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khc, khcheck
from testbed.daemons.inprocess import InProcessDaemon
from testbed.wait import wait_for

PAUSE = 10.0  # seconds a timed pause lasts: more than three intervals of the check below
CHECKER_PODS = "app=kuberhealthy-check"


def annotate(cluster: TestCluster, ns: str, name: str, annotations: dict[str, str | None]) -> None:
    """What `kubectl annotate khcheck NAME KEY=VALUE ... --overwrite` (and `KEY-`, a null) sends."""
    cluster.request("PATCH", khc(ns, name), {"metadata": {"annotations": annotations}},
                    content_type="application/merge-patch+json")


def rfc3339(unix: float) -> str:
    """With microseconds, so a short pause ends when it says (RFC 3339 allows the fraction)."""
    return dt.datetime.fromtimestamp(unix, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def entry(daemon: InProcessDaemon, ns: str, name: str) -> dict[str, Any]:
    answer = requests.get(f"{daemon.url}/api/checks/{ns}/{name}", timeout=10)
    assert answer.status_code == 200, answer.text
    (found,) = answer.json()["checks"]
    return dict(found)


def status(daemon: InProcessDaemon, ns: str) -> dict[str, Any]:
    return dict(json.loads(requests.get(f"{daemon.url}/?namespace={ns}", timeout=10).content))


def scrape(daemon: InProcessDaemon) -> tuple[str, dict[str, dict[tuple[tuple[str, str], ...], float]]]:
    text = requests.get(f"{daemon.url}/metrics", timeout=10).text
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return text, out


def paused_metric(daemon: InProcessDaemon, ns: str, name: str) -> float | None:
    _, got = scrape(daemon)
    return got.get("kuberhealthy_check_paused", {}).get((("check", f"{ns}/{name}"), ("namespace", ns)))


def worker_of(daemon: InProcessDaemon, key: str) -> CheckWorker:
    controller = daemon.services.controller
    assert controller is not None
    return wait_for(lambda: controller.workers.get(key), 30, what=f"a worker for {key}")


def run_starts(daemon: InProcessDaemon, ns: str, name: str) -> list[float]:
    """When each kept run of this check started (unix seconds, whole), from its khstate's history."""
    starts = [parse_time(e.get("start")) for e in entry(daemon, ns, name)["history"]]
    return sorted(s for s in starts if s is not None)


def checker_pods(cluster: TestCluster, ns: str, name: str) -> list[str]:
    items = cluster.request("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={CHECKER_PODS}")["items"]
    return [p["metadata"]["name"] for p in items if p["metadata"]["name"].startswith(f"{name}-")]


def test_a_paused_failing_check_creates_no_pod_is_shown_paused_is_left_out_of_ok_and_runs_when_its_time_passes(
        cluster: TestCluster, namespace: str, daemon: InProcessDaemon) -> None:
    ns, name = namespace, "flaky"
    cluster.request("POST", khc(ns), khcheck(name, "kh-sim/fail", interval="3s"))
    worker = worker_of(daemon, f"{ns}/{name}")
    wait_for(lambda: entry(daemon, ns, name)["state"] == "failing", 30, what="the first failed run")
    assert status(daemon, ns)["OK"] is False

    until = time.time() + PAUSE
    annotate(cluster, ns, name, {PAUSED_UNTIL: rfc3339(until), PAUSED_REASON: "known upstream outage"})
    wait_for(lambda: worker.paused_until is not None, 10, what="the worker sees the pause")
    seen = time.time()
    shown = wait_for(lambda: entry(daemon, ns, name)["paused"], 10, what="the API shows the pause")
    assert shown["reason"] == "known upstream outage" and parse_time(shown["until"]) == int(until)
    assert entry(daemon, ns, name)["state"] == "failing"  # the last result is kept
    page = status(daemon, ns)
    assert page["OK"] is True and page["Errors"] == []
    assert page["CheckDetails"][f"{ns}/{name}"]["OK"] is False  # its entry stays
    assert paused_metric(daemon, ns, name) == 1.0
    text, _ = scrape(daemon)
    lint = promtool_check(text)
    assert lint.returncode == 0, lint.stdout + lint.stderr

    wait_for(lambda: worker.resumed_runs == 1, PAUSE + 30, what="the run when the pause's time passed")
    # No run (so no pod) between the pause being seen (a run in flight then started a moment before) and
    # its end: without the pause, a 3 s check would have run three times or so.
    wait_for(lambda: [s for s in run_starts(daemon, ns, name) if s >= int(until)], 30,
             what="the run once the pause ended, recorded")
    assert [s for s in run_starts(daemon, ns, name) if seen + 1 < s < until - 1] == []
    assert entry(daemon, ns, name)["paused"] is None
    assert paused_metric(daemon, ns, name) == 0.0 and status(daemon, ns)["OK"] is False
    annotations = cluster.request("GET", khc(ns, name))["metadata"]["annotations"]
    assert annotations[PAUSED_UNTIL] == rfc3339(until)  # the daemon never writes it


def test_removing_the_annotation_runs_a_paused_check_at_once_and_no_http_route_can_run_it_meanwhile(
        cluster: TestCluster, namespace: str, daemon: InProcessDaemon) -> None:
    ns, name = namespace, "held"
    cluster.request("POST", khc(ns), khcheck(name, "kh-sim/ok", interval="1h"))
    worker = worker_of(daemon, f"{ns}/{name}")
    wait_for(lambda: worker.runs == 1 and entry(daemon, ns, name)["currentRun"] is None, 30, what="the first run")
    annotate(cluster, ns, name, {PAUSED_UNTIL: rfc3339(time.time() + 3600), PAUSED_REASON: "maintenance"})
    wait_for(lambda: worker.paused_until is not None, 10, what="the worker sees the pause")
    refused = requests.post(f"{daemon.url}/api/checks/{ns}/{name}/run", timeout=10)
    assert refused.status_code == 409 and PAUSED_UNTIL in refused.text
    assert worker.runs == 1 and len(checker_pods(cluster, ns, name)) <= 1  # none new (the first may be gone)

    annotate(cluster, ns, name, {PAUSED_UNTIL: None, PAUSED_REASON: None})  # kubectl annotate ... KEY-
    wait_for(lambda: worker.resumed_runs == 1, 10, what="a run at once")  # not in an hour (a reconcile runs none)
    wait_for(lambda: worker.runs == 2, 30, what="that run finished")
    assert entry(daemon, ns, name)["paused"] is None and entry(daemon, ns, name)["successCount"] == 2
    assert daemon.services.controller.workers[f"{ns}/{name}"] is worker  # never restarted


def test_an_unparsable_value_raises_a_pause_ignored_event_and_the_check_runs_as_usual(
        cluster: TestCluster, namespace: str, daemon: InProcessDaemon) -> None:
    ns, name = namespace, "typo"
    cluster.request("POST", khc(ns), khcheck(name, "kh-sim/ok", interval="1h"))
    worker = worker_of(daemon, f"{ns}/{name}")
    wait_for(lambda: worker.runs == 1, 30, what="the first run")
    annotate(cluster, ns, name, {PAUSED_UNTIL: "until friday"})

    def ignored() -> list[dict[str, Any]]:
        items = cluster.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
        return [e for e in items if e["reason"] == "PauseIgnored" and e["involvedObject"]["name"] == name]
    (event,) = wait_for(ignored, 30, what="the PauseIgnored Event")
    assert event["type"] == "Warning" and "until friday" in event["message"]
    assert event["involvedObject"]["kind"] == "KuberhealthyCheck"
    assert worker.paused_until is None and entry(daemon, ns, name)["paused"] is None
    assert paused_metric(daemon, ns, name) == 0.0
