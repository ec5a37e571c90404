"""Check history, counters, log tails, Events and the CRD's shape against the real API server and the
simulated kubelet (docs/interface.md#history-and-counters): what a khstate holds after runs of every outcome, across a
restart and a leader change, within historyLength and 64 KiB; log tails read through pods/log from the
sim; what the JSON API shows of them; Events on the khcheck; the warning for an old khstate CRD; and
the printer columns `kubectl get` shows."""
from __future__ import annotations

import copy
import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from kuberhealthy.kube import Kube, Resources
from kuberhealthy.outputs.events import COUNT_EVERY, EventRecorder
from kuberhealthy.outputs.schemacheck import REASON as OUTDATED_CRD
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.records.history import ADDED_KEYS
from kuberhealthy.records.runnow import RUN_NOW_ANNOTATION
from kuberhealthy.run.runner import ERR_REPORT, ERR_RUNNING, Outcome, Runner, RunResult
from testbed.clients.formats import parse_go_duration, parse_rfc3339
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import container, khc, khcheck, khs, khstate, pods_path, rfc3339
from testbed.cluster.crds import load_crds
from testbed.cluster.objects import create_lease
from testbed.daemons.inprocess import POD_NAME, InProcessDaemon, check_spec
from testbed.faults.tcpproxy import TcpProxy
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

ELECTION = {"leaseName": "kh-history", "leaseDuration": "6s", "renewDeadline": "4s", "retryPeriod": "1s"}
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
KHSTATE_CRD = "khstates.comcast.github.io"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
BUDGET = 64 * 1024


# --- helpers ------------------------------------------------------------------------------------------------

def run(d: InProcessDaemon, check: CheckSpec) -> tuple[RunResult, float, float]:
    """One run on the daemon's services, with the wall clock before and after it."""
    before = time.time()
    result = Runner(d.services, check, threading.Event()).run()
    return result, before, time.time()


def spec_of(cluster: TestCluster, ns: str, name: str) -> dict[str, Any]:
    return dict(cluster.request("GET", khs(ns, name))["spec"])


def unix(text: str) -> float:
    return parse_rfc3339(text).timestamp()


def within(stamp: str, before: float, after: float) -> bool:
    """An RFC3339 time of whole seconds taken between `before` and `after` (unix seconds)."""
    return int(before) <= unix(stamp) <= after


def log_pods(kubelet: SimKubelet) -> set[str]:
    """Pods whose log the API server asked the simulated kubelet for."""
    return {r.pod for r in kubelet.log_requests if r.status == 200}


def events_of(cluster: TestCluster, ns: str, uid: str) -> dict[str, dict[str, Any]]:
    """The Events `kubectl describe` shows for the object with this uid, by reason."""
    selector = urllib.parse.quote(f"involvedObject.uid={uid}")
    items = cluster.request("GET", f"/api/v1/namespaces/{ns}/events?fieldSelector={selector}")["items"]
    return {e["reason"]: e for e in items}


def annotate_run_now(cluster: TestCluster, ns: str, name: str, value: str) -> None:
    cluster.request("PATCH", khc(ns, name), {"metadata": {"annotations": {RUN_NOW_ANNOTATION: value}}},
                    content_type="application/merge-patch+json")


def go_json(value: Any) -> bytes:
    """`value` as the API server (Go's encoding/json) writes it, for ASCII text: sorted keys, compact,
    and <, >, & escaped as \\u003c, \\u003e, \\u0026."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


class Replicas:
    """Daemons in this process for the test's namespace; every one still running is stopped after the test."""

    def __init__(self, cluster: TestCluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.live: list[InProcessDaemon] = []

    def start(self, settings: dict[str, Any] | None = None, pod_name: str = POD_NAME) -> InProcessDaemon:
        d = InProcessDaemon(self.cluster, self.namespace, settings, pod_name=pod_name).start()
        self.live.append(d)
        return d

    def stop(self, d: InProcessDaemon) -> None:
        self.live.remove(d)
        d.stop()


@pytest.fixture
def replicas(cluster: TestCluster, namespace: str, kubelet: SimKubelet) -> Iterator[Replicas]:
    """Replicas whose checker pods `kubelet` drives."""
    made = Replicas(cluster, namespace)
    try:
        yield made
    finally:
        for d in reversed(made.live):
            d.stop()


# --- history and counters -------------------------------------------------------------------------------------

def test_after_runs_of_every_outcome_the_khstate_holds_their_history_newest_first_with_counters_and_times(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, replicas: Replicas) -> None:
    d = replicas.start()
    ns = namespace
    crash_log = "opening connection\npanic: nil pointer"
    plan = [
        ("ok", check_spec(ns, "kh-sim/ok", name="mixed")),
        ("fail", check_spec(ns, "kh-sim/fail", name="mixed", env={"SIM_ERRORS": "disk full|dns down",
                                                                    "SIM_LOG": "checking disk\nerror: disk full"})),
        ("crash", check_spec(ns, "kh-sim/crash", name="mixed", env={"SIM_LOG": crash_log})),
        ("timeout", check_spec(ns, "kh-sim/hang-silent", name="mixed", timeout="3s")),
    ]
    done: dict[str, tuple[RunResult, float, float]] = {}
    for label, check in plan:
        done[label] = run(d, check)
    assert [done[k][0].outcome for k in ("ok", "fail", "crash", "timeout")] == [
        Outcome.REPORTED, Outcome.REPORTED, Outcome.FAILED, Outcome.FAILED]
    failing = spec_of(cluster, ns, "mixed")
    assert (failing["consecutiveFailures"], failing["successCount"], failing["failureCount"]) == (3, 1, 3)

    # A run whose pod someone else deleted says nothing about the check: no entry, no counter.
    box: dict[str, Any] = {}
    t = threading.Thread(target=lambda: box.update(r=run(d, check_spec(ns, "kh-sim/hang-silent", name="mixed",
                                                                       timeout="60s"))))
    t.start()
    victim = wait_for(lambda: next((r for r in kubelet.records.values() if r.behaviour == "hang-silent"
                                    and r.name != done["timeout"][0].pod and r.running), None),
                      30, what="the second hang-silent pod running")
    cluster.request("DELETE", pods_path(ns, victim.name))
    t.join(60)
    assert box["r"][0].outcome is Outcome.SKIPPED
    assert {k: v for k, v in spec_of(cluster, ns, "mixed").items() if k in ADDED_KEYS} == {
        k: v for k, v in failing.items() if k in ADDED_KEYS}
    done["ok2"] = run(d, check_spec(ns, "kh-sim/ok", name="mixed"))

    spec = spec_of(cluster, ns, "mixed")
    assert spec["OK"] is True and spec["Errors"] == []
    assert (spec["consecutiveFailures"], spec["successCount"], spec["failureCount"]) == (0, 2, 3)
    assert within(spec["lastOK"], *done["ok2"][1:]) and within(spec["lastFailure"], *done["timeout"][1:])
    order = ["ok2", "timeout", "crash", "fail", "ok"]
    history = spec["history"]
    assert [h["uuid"] for h in history] == [done[k][0].run_uuid for k in order]
    for entry, label in zip(history, order, strict=True):
        result, before, after = done[label]
        assert entry["pod"] == result.pod and entry["node"] == result.node and entry["node"].startswith("sim-node-")
        assert within(entry["start"], before, after)
        assert 0 < parse_go_duration(entry["duration"]) <= after - before + 0.01
    expected = {
        "ok2": (True, "reported", [], None),
        "timeout": (False, f"failed: {ERR_REPORT}", [f"Check execution error: {ns}/mixed: {ERR_REPORT}"],
                    f"kh-sim/hang-silent: checking {ns}/{done['timeout'][0].pod} on {done['timeout'][0].node}"),
        "crash": (False, f"failed: {ERR_REPORT}", [f"Check execution error: {ns}/mixed: {ERR_REPORT}",
                                                   f"checker pod {done['crash'][0].pod} container main exited 1"],
                  crash_log),
        "fail": (False, "reported", ["disk full", "dns down"], "checking disk\nerror: disk full"),
        "ok": (True, "reported", [], None),
    }
    got = {label: (e["OK"], e["outcome"], e["errors"], e.get("logs")) for e, label in zip(history, order, strict=True)}
    assert got == expected
    assert log_pods(kubelet) >= {f"{ns}/{done[k][0].pod}" for k in ("fail", "crash", "timeout")}


def test_history_and_counters_survive_a_leader_change_and_a_restart_of_the_daemon(
        cluster: TestCluster, namespace: str, replicas: Replicas) -> None:
    ns, settings = namespace, {"enableForceMaster": False, "leaderElection": ELECTION}
    cluster.request("POST", khc(ns), khcheck("kept", "kh-sim/fail", interval="1h",
                                             env={"SIM_ERRORS": "still broken"}))
    seen: list[list[dict[str, Any]]] = []

    def runs_to(count: int) -> None:
        spec = wait_for(lambda: (s := spec_of(cluster, ns, "kept")).get("failureCount") == count and s, 60,
                        what=f"failure {count} recorded")
        assert spec["consecutiveFailures"] == count and spec["successCount"] == 0
        assert [h["errors"] for h in spec["history"]] == [["still broken"]] * count
        assert ["logs" in h for h in spec["history"]] == [i < 3 for i in range(count)]  # the newest 3 failures
        if seen:  # older entries are kept as they were, but for the log tail of the 4th failure back
            assert spec["history"][1:] == [{k: v for k, v in h.items() if k != "logs" or i < 2}
                                           for i, h in enumerate(seen[-1])]
        seen.append(spec["history"])

    a = replicas.start(settings, pod_name="kh-a")
    wait_for(a.services.is_leader, 30, what="kh-a leads")
    runs_to(1)  # the first run, at once
    annotate_run_now(cluster, ns, "kept", "a")
    runs_to(2)
    b = replicas.start(settings, pod_name="kh-b")
    replicas.stop(a)  # releases the Lease: kh-b takes over
    wait_for(b.services.is_leader, 30, what="kh-b leads")
    annotate_run_now(cluster, ns, "kept", "b")
    runs_to(3)
    a2 = replicas.start(settings, pod_name="kh-a")  # kh-a again, a fresh process as after a restart
    replicas.stop(b)
    wait_for(a2.services.is_leader, 30, what="the restarted kh-a leads")
    annotate_run_now(cluster, ns, "kept", "a2")
    runs_to(4)
    history = seen[-1]
    assert len({h["uuid"] for h in history}) == 4
    assert [unix(h["start"]) for h in history] == sorted((unix(h["start"]) for h in history), reverse=True)


def test_history_length_caps_the_history_while_the_counters_keep_counting(
        cluster: TestCluster, namespace: str, replicas: Replicas) -> None:
    d = replicas.start({"historyLength": 3})
    uuids = [run(d, check_spec(namespace, "kh-sim/ok", name="capped"))[0].run_uuid for _ in range(5)]
    spec = spec_of(cluster, namespace, "capped")
    assert [h["uuid"] for h in spec["history"]] == uuids[::-1][:3]
    assert (spec["successCount"], spec["failureCount"], spec["consecutiveFailures"]) == (5, 0, 0)


def test_the_history_adds_under_64_kib_with_maximal_errors_and_logs_and_the_result_stays_as_reported(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, replicas: Replicas) -> None:
    d = replicas.start()
    # Every character of these costs 6 bytes in the API server's JSON: the worst case for the budget.
    errors = [f"error {i} " + "<&>" * 300 for i in range(12)]
    last_words = [f"last words {i} " + "&<>" * 100 for i in range(60)]
    env = {"SIM_ERRORS": "|".join(errors), "SIM_LOG": "\n".join(last_words), "SIM_LOG_LINES": "3000"}
    check = check_spec(namespace, "kh-sim/fail", name="huge", env=env)
    for n in range(1, 5):
        result = run(d, check)[0]
        assert result.outcome is Outcome.REPORTED
        status, raw = cluster.get_raw(khs(namespace, "huge"))
        obj = json.loads(raw)
        assert status == 200 and go_json(obj) == raw.rstrip(b"\n")  # go_json() measures what the server stores
        spec = obj["spec"]
        added = go_json({k: spec[k] for k in ADDED_KEYS if k in spec})
        assert len(added) <= BUDGET, f"run {n}: the history adds {len(added)} bytes"
        assert spec["Errors"] == errors  # the current result itself is never cut
        newest = spec["history"][0]
        assert newest["uuid"] == result.run_uuid and len(newest["errors"]) == 6  # 5 capped, and a note
        assert newest["errors"][-1] == "... and 7 more errors" and all(len(e) <= 512 for e in newest["errors"])
        assert newest["logs"].endswith(last_words[-1]) and len(newest["logs"].encode()) <= 4096
        assert newest["logs"].split("\n") == last_words[-len(newest["logs"].split("\n")):]
        assert spec["failureCount"] == n
    # Unbounded, four such entries would add about 130 KB: the older ones were cut down to fit.
    assert len(spec["history"]) == 4 and all(len(h["errors"]) == 1 and len(h["errors"][0]) <= 128
                                             for h in spec["history"][1:])


# --- log tails -----------------------------------------------------------------------------------------------

def test_a_failing_checker_s_log_tail_is_read_through_the_api_server_into_its_history_entry(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, replicas: Replicas) -> None:
    d = replicas.start()
    lines = [f"step {i}: " + "x" * 900 for i in range(50)] + ["error: the final word"]
    result = run(d, check_spec(namespace, "kh-sim/fail", name="tail", env={"SIM_LOG": "\n".join(lines)}))[0]
    entry = spec_of(cluster, namespace, "tail")["history"][0]
    kept = entry["logs"].split("\n")
    assert kept[-1] == "error: the final word"  # the end of the log, however long its lines
    assert kept == lines[-len(kept):] and len(entry["logs"].encode()) <= 4096
    asked = [r for r in kubelet.log_requests if r.pod == f"{namespace}/{result.pod}"]
    assert asked and asked[0].node_ip == dict(kubelet.nodes)[result.node]  # the node's endpoint, via the API server
    assert asked[0].query["tailLines"] == "40"

    # A pod none of whose containers started has no log: recorded as such, not asked for (the kubelet
    # would answer 400), and the run is not held up.
    stuck = run(d, check_spec(namespace, "kh-sim/ok", name="tail", timeout="2s", env={"SIM_PENDING_DELAY": "30"}))[0]
    assert stuck.outcome is Outcome.FAILED
    entry = spec_of(cluster, namespace, "tail")["history"][0]
    assert entry["outcome"] == f"failed: {ERR_RUNNING}"
    assert entry["logs"] == "(log not available: no container of the checker pod has started)"
    assert not [r for r in kubelet.log_requests if r.pod == f"{namespace}/{stuck.pod}"]


def test_with_capture_logs_off_no_log_is_read_or_kept(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, replicas: Replicas) -> None:
    d = replicas.start({"captureLogs": False})
    result = run(d, check_spec(namespace, "kh-sim/fail", name="private", env={"SIM_LOG": "password=hunter2"}))[0]
    entry = spec_of(cluster, namespace, "private")["history"][0]
    assert entry["OK"] is False and entry["errors"] == ["simulated check failure"] and "logs" not in entry
    assert f"{namespace}/{result.pod}" not in {r.pod for r in kubelet.log_requests}


def test_log_tails_are_in_the_khstate_but_on_the_json_api_only_with_expose_logs(
        cluster: TestCluster, namespace: str, replicas: Replicas) -> None:
    create_lease(cluster, namespace, "kuberhealthy", "someone-else", 3600)  # the second replica stays standby
    d = replicas.start()  # enableForceMaster: runs the check at once
    cluster.request("POST", khc(namespace), khcheck("exposed", "kh-sim/fail", env={"SIM_LOG": "token=s3cret"}))
    spec = wait_for(lambda: (s := spec_of(cluster, namespace, "exposed")).get("history") and s, 60,
                    what="the first run recorded")
    assert spec["history"][0]["logs"] == "token=s3cret"  # behind RBAC, always

    def shown(daemon: InProcessDaemon) -> list[dict[str, Any]]:
        def entry() -> dict[str, Any] | None:
            answer = requests.get(f"{daemon.url}/api/checks/{namespace}/exposed", timeout=10)
            found = answer.json()["checks"][0] if answer.status_code == 200 else None
            return found if found and found["history"] else None
        return list(wait_for(entry, 30, what="the check on /api/checks")["history"])
    assert [h["uuid"] for h in shown(d)] == [spec["history"][0]["uuid"]]
    assert "logs" not in shown(d)[0]
    listing = requests.get(f"{d.url}/api/checks?namespace={namespace}", timeout=10).json()["checks"]
    assert "s3cret" not in json.dumps(listing) and listing[0]["history"]
    exposing = replicas.start({"exposeLogs": True, "enableForceMaster": False}, pod_name="kh-exposer")
    assert not exposing.services.is_leader()
    assert shown(exposing)[0]["logs"] == "token=s3cret"


# --- Events -----------------------------------------------------------------------------------------------------

def test_events_on_the_khcheck_count_repeated_failures_and_tell_of_the_recovery(
        cluster: TestCluster, namespace: str, replicas: Replicas) -> None:
    ns, key = namespace, f"{namespace}/evented"
    d = replicas.start()
    created = cluster.request("POST", khc(ns), khcheck("evented", "kh-sim/fail", env={"SIM_ERRORS": "disk full|dns"}))
    uid = created["metadata"]["uid"]
    controller = d.services.controller
    assert controller is not None
    worker = wait_for(lambda: controller.workers.get(key), 30, what="a worker")
    wait_for(lambda: spec_of(cluster, ns, "evented").get("failureCount") == 1, 60, what="the first failure")
    failed = wait_for(lambda: events_of(cluster, ns, uid).get("CheckFailed"), 30, what="CheckFailed")
    assert (failed["type"], failed["message"], failed["count"]) == ("Warning", "disk full", 1)
    assert failed["involvedObject"]["kind"] == "KuberhealthyCheck" and failed["involvedObject"]["name"] == "evented"

    annotate_run_now(cluster, ns, "evented", "again")  # the same failure again: the same Event, counted
    wait_for(lambda: spec_of(cluster, ns, "evented").get("failureCount") == 2, 60, what="the second failure")
    # a repeat's count goes out within COUNT_EVERY of the Event's last update
    wait_for(lambda: events_of(cluster, ns, uid)["CheckFailed"]["count"] == 2, COUNT_EVERY + 30,
             what="CheckFailed counted")

    cluster.request("PATCH", khc(ns, "evented"), {"spec": {"podSpec": {"containers": [container("kh-sim/ok")]}}},
                    content_type="application/merge-patch+json")
    wait_for(lambda: controller.workers.get(key) not in (None, worker), 30, what="the check restarted")
    if spec_of(cluster, ns, "evented").get("successCount", 0) == 0:
        annotate_run_now(cluster, ns, "evented", "fixed")  # unless the new worker ran at once
    wait_for(lambda: spec_of(cluster, ns, "evented").get("successCount", 0) >= 1, 60, what="an OK run")
    recovered = wait_for(lambda: events_of(cluster, ns, uid).get("CheckRecovered"), 30, what="CheckRecovered")
    assert recovered["type"] == "Normal" and recovered["count"] == 1
    assert recovered["message"] == f"Check {ns}/evented is OK again after 2 failed runs"
    events = events_of(cluster, ns, uid)
    assert events["CheckFailed"]["count"] == 2 and events["CheckRunRequested"]["count"] >= 1


class _Watched:
    """Events API calls through a path that never answers, with flags for the test."""

    def __init__(self, inner: Resources) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.returned = threading.Event()

    def create_event(self, namespace: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.entered.set()
        try:
            return self.inner.create_event(namespace, body, timeout)
        finally:
            self.returned.set()

    def patch_event(self, namespace: str, name: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        return self.inner.patch_event(namespace, name, body, timeout)


def test_an_events_api_that_never_answers_does_not_hold_up_a_run(
        cluster: TestCluster, namespace: str, replicas: Replicas, monkeypatch: pytest.MonkeyPatch) -> None:
    d = replicas.start()
    recorder: EventRecorder = d.services.events
    with TcpProxy(("127.0.0.1", cluster.api_port)) as proxy:
        proxy.stall()
        kubeconfig = cluster.workdir / f"kubeconfig-blackhole-{namespace}"
        kubeconfig.write_text(cluster.kubeconfig.read_text().replace(cluster.server, f"https://{proxy.address}"))
        kube = Kube.connect(str(kubeconfig))
        watched = _Watched(Resources(kube))
        monkeypatch.setattr(recorder, "_api", watched)
        monkeypatch.setattr(recorder, "timeout", 300.0)  # the request hangs until the proxy closes it
        try:
            first = run(d, check_spec(namespace, "kh-sim/fail", name="muted", env={"SIM_ERRORS": "first"}))[0]
            wait_for(watched.entered.is_set, 30, what="the CheckFailed Event sent into the silent path")
            second = run(d, check_spec(namespace, "kh-sim/fail", name="muted", env={"SIM_ERRORS": "second"}))[0]
            assert not watched.returned.is_set()  # the first Event is still unanswered ...
            assert recorder.created == 0 and recorder.queued() >= 1  # ... and the second waits behind it
            assert first.outcome is second.outcome is Outcome.REPORTED  # ... yet both runs were recorded
            spec = spec_of(cluster, namespace, "muted")
            assert [h["uuid"] for h in spec["history"]] == [second.run_uuid, first.run_uuid]
            assert spec["Errors"] == ["second"] and spec["failureCount"] == 2
        finally:
            proxy.stop()  # the stuck request fails at once, so the daemon stops promptly
            kube.close()


# --- the CRDs --------------------------------------------------------------------------------------------------

def khstate_crd() -> dict[str, Any]:
    (crd,) = [c for c in load_crds() if c["metadata"]["name"] == KHSTATE_CRD]
    return crd


def replace_crd(cluster: TestCluster, body: dict[str, Any]) -> None:
    body = copy.deepcopy(body)
    body["metadata"]["resourceVersion"] = cluster.request("GET", f"{CRDS}/{KHSTATE_CRD}")["metadata"]["resourceVersion"]
    cluster.request("PUT", f"{CRDS}/{KHSTATE_CRD}", body)


def keeps_history_fields(cluster: TestCluster, ns: str) -> bool:
    """A dry-run create: does the API server keep the added fields, or prune them?"""
    probe = khstate("crd-probe", OK=True, Errors=[], RunDuration="", Namespace=ns, Node="", AuthoritativePod="",
                    uuid="", consecutiveFailures=1, history=[{"uuid": "u", "OK": True}])
    answer = cluster.request("POST", khs(ns) + "?dryRun=All", probe)
    return "consecutiveFailures" in answer["spec"] and "history" in answer["spec"]


def test_an_old_khstate_crd_that_would_prune_the_history_is_warned_about_at_start(
        cluster: TestCluster, namespace: str, replicas: Replicas, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="kuberhealthy.outputs.schemacheck")
    pod = cluster.request("POST", pods_path(namespace), {  # the daemon's own pod, for the Event
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kh-old-crd"},
        "spec": {"nodeName": "not-simulated", "containers": [{"name": "kuberhealthy", "image": "kuberhealthy"}]}})
    new = khstate_crd()
    old = copy.deepcopy(new)
    version = old["spec"]["versions"][0]
    props = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    for key in ADDED_KEYS:
        del props[key]
    version["additionalPrinterColumns"] = [c for c in version["additionalPrinterColumns"] if c["name"] != "Failures"]
    replace_crd(cluster, old)
    try:
        wait_for(lambda: not keeps_history_fields(cluster, namespace), 30, what="the old CRD in effect")
        replicas.start(pod_name="kh-old-crd")
        warning = wait_for(lambda: next((r for r in caplog.records if "khstate CRD is older" in r.getMessage()), None),
                           30, what="the warning in the log")
        assert "history" in warning.getMessage() and "kubectl apply --server-side" in warning.getMessage()
        event = wait_for(lambda: events_of(cluster, namespace, pod["metadata"]["uid"]).get(OUTDATED_CRD), 30,
                         what="the Event on the daemon's pod")
        assert event["type"] == "Warning" and "consecutiveFailures" in event["message"]
    finally:
        replace_crd(cluster, new)
        wait_for(lambda: keeps_history_fields(cluster, namespace), 30, what="the chart's CRD back in effect")


def table(cluster: TestCluster, path: str) -> tuple[list[str], dict[str, list[Any]]]:
    """What `kubectl get` is sent: column names, and each row's cells by object name."""
    status, raw = cluster.get_raw(path, accept=TABLE)
    assert status == 200, raw
    answer = json.loads(raw)
    assert answer["kind"] == "Table"
    return ([c["name"] for c in answer["columnDefinitions"]],
            {r["object"]["metadata"]["name"]: r["cells"] for r in answer["rows"]})


def test_kubectl_get_shows_the_printer_columns_of_khstates_and_khchecks(cluster: TestCluster, namespace: str) -> None:
    cluster.request("POST", khc(namespace), khcheck("columns", "kh-sim/ok", interval="90s", timeout="45s"))
    cluster.request("POST", khs(namespace), khstate(
        "columns", OK=False, Errors=["disk full", "dns down"], RunDuration="1.2s", Namespace=namespace, Node="n",
        AuthoritativePod="kh-0", uuid="u", LastRun=rfc3339(hours_ago=3), consecutiveFailures=3))
    names, rows = table(cluster, khc(namespace))
    assert names == ["Name", "Interval", "Timeout", "Age"]
    assert rows["columns"][:3] == ["columns", "90s", "45s"] and rows["columns"][3]
    names, rows = table(cluster, khs(namespace))
    # The columns' order: OK, Failures (consecutive), LastRun, Error (the first), Age.
    assert names == ["Name", "OK", "Failures", "LastRun", "Error", "Age"]
    name, ok, failures, last_run, error, age = rows["columns"]
    assert (name, ok, failures, last_run, error) == ("columns", "false", 3, "3h", "disk full")  # dates as ages
    assert age.endswith("s")  # created seconds ago
