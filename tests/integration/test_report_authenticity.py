"""Reports only from the pod the run created (docs/interface.md#report-authenticity), tried the way an
attacker inside the cluster would: real API server, simulated kubelet (pod IPs, projected tokens minted through
the TokenRequest API), the daemon in this process, every request over real HTTP from a chosen address."""
from __future__ import annotations

import copy
import http.client
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from kuberhealthy.base.errors import Forbidden
from kuberhealthy.kube.client import USER_AGENT
from kuberhealthy.records.checkpod import TOKEN_PATH
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.run.runner import Outcome, Runner, RunResult
from kuberhealthy.web.parts import part
from kuberhealthy.web.report.routes import ReportDesk
from kuberhealthy.web.report.tokens import TokenVerifier
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khc, khcheck, khs, pods_path
from testbed.cluster.loopback import outside_ip
from testbed.daemons.inprocess import InProcessDaemon
from testbed.sim.kubelet import SimKubelet
from testbed.sim.records import PodRecord
from testbed.wait import wait_for

OK_BODY = b'{"OK": true, "Errors": []}'
ENFORCE = {"reportSourceCheck": "enforce"}


@dataclass(frozen=True)
class Reply:
    status: int
    text: str
    headers: dict[str, str]


def post(d: InProcessDaemon, source: str, *, run_uuid: str | None = None, token: str | None = None,
         body: bytes = OK_BODY, path: str = "/externalCheckStatus") -> Reply:
    """One report to the daemon, sent from `source` (any loopback address), as an attacker would."""
    headers = {"Content-Type": "application/json"}
    if run_uuid is not None:
        headers["kh-run-uuid"] = run_uuid
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=10, source_address=(source, 0))
    try:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        return Reply(resp.status, resp.read().decode(), {k.lower(): v for k, v in resp.getheaders()})
    finally:
        conn.close()


def spec(namespace: str, name: str, env: dict[str, str] | None = None, image: str = "kh-sim/ok",
         host_network: bool = False) -> CheckSpec:
    body = khcheck(name, image, interval="1h", timeout="20s", env=env)
    body["metadata"]["namespace"] = namespace
    if host_network:
        body["spec"]["podSpec"]["hostNetwork"] = True
    return CheckSpec.of(body)


@pytest.fixture
def runs() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=6, thread_name_prefix="test-run") as pool:
        yield pool


def start(pool: ThreadPoolExecutor, d: InProcessDaemon, check: CheckSpec) -> Future[RunResult]:
    return pool.submit(Runner(d.services, check, threading.Event()).run)


def report_of(kubelet: SimKubelet, namespace: str, result: RunResult) -> tuple[int | None, str]:
    """What the run's simulated checker was answered."""
    record = kubelet.reported_record(namespace, result.pod)
    assert record.report is not None, result
    return record.report.status, record.report.response_body


def live_run(d: InProcessDaemon, kubelet: SimKubelet, namespace: str, check: str) -> tuple[str, PodRecord]:
    """The uuid of the check's run in flight and its pod, once the pod is Running."""
    def running() -> tuple[str, PodRecord] | None:
        state = d.services.khstates.get(namespace, check)
        run = str(((state or {}).get("spec") or {}).get("uuid") or "")
        for pod in d.services.pods.by_index("uuid", run) if run else []:
            record = kubelet.record(namespace, pod["metadata"]["name"])
            if record is not None and record.running is not None and record.reported is None:
                return run, record
        return None
    found: tuple[str, PodRecord] = wait_for(running, 20, what=f"a live run of {check}")
    return found


def khstate_rv(cluster: TestCluster, namespace: str, check: str) -> str:
    return str(cluster.request("GET", khs(namespace, check))["metadata"]["resourceVersion"])


def counter(d: InProcessDaemon, family: str, **labels: str) -> float:
    text = requests.get(d.url + "/metrics", timeout=5).text
    for metric in text_string_to_metric_families(text):
        for sample in metric.samples:
            if sample.name == family and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    raise AssertionError(f"no {family}{labels} in /metrics")


def web(d: InProcessDaemon) -> ReportDesk:
    return part(ReportDesk, d.app)


def node_ip(kubelet: SimKubelet, record: PodRecord) -> str:
    return dict(kubelet.nodes)[record.node]


# --- the status surfaces --------------------------------------------------------------------------------

def test_no_open_surface_shows_the_uuid_of_a_run_that_can_still_report(
        cluster: TestCluster, namespace: str, daemon: InProcessDaemon, kubelet: SimKubelet) -> None:
    cluster.request("POST", khc(namespace), khcheck("probe", env={"SIM_DELAY": "3"}))
    surfaces = ["/", "/metrics", "/api/checks", f"/api/checks/{namespace}/probe", "/dashboard",
                f"/dashboard/{namespace}/probe"]

    def bodies() -> dict[str, str]:
        return {s: requests.get(daemon.url + s, timeout=5).text for s in surfaces}
    first, _ = live_run(daemon, kubelet, namespace, "probe")
    assert not [s for s, text in bodies().items() if first in text]
    wait_for(lambda: json.loads(bodies()["/"])["CheckDetails"].get(f"{namespace}/probe", {}).get("uuid") == first,
             20, what="the finished run's uuid on /")
    reply = requests.post(f"{daemon.url}/api/checks/{namespace}/probe/run", timeout=5)
    assert reply.status_code == 202, reply.text
    second, _ = wait_for(lambda: (r := live_run(daemon, kubelet, namespace, "probe"))[0] != first and r, 20,
                         what="the second run")
    seen = bodies()
    assert not [s for s, text in seen.items() if second in text]
    assert json.loads(seen["/"])["CheckDetails"][f"{namespace}/probe"]["uuid"] == first  # over: useless to a spoofer


# --- the header path's source check ---------------------------------------------------------------------

@pytest.mark.parametrize("daemon_settings", [ENFORCE], ids=["enforce"])
def test_with_enforce_a_valid_uuid_from_a_foreign_address_is_refused_and_from_the_pod_or_its_node_accepted(
        namespace: str, daemon: InProcessDaemon, kubelet: SimKubelet, runs: ThreadPoolExecutor) -> None:
    cases = {"foreign": {"SIM_REPORT_FROM": outside_ip(1)}, "pod": {}, "node": {"SIM_REPORT_FROM": "node"},
             "by-address": {"SIM_NO_UUID_HEADER": "1"}}
    futures = {name: start(runs, daemon, spec(namespace, name, env)) for name, env in cases.items()}
    futures["host-network"] = start(runs, daemon, spec(namespace, "host-network", host_network=True))
    results = {name: f.result(60) for name, f in futures.items()}
    answers = {name: report_of(kubelet, namespace, r) for name, r in results.items()}
    assert {name: a[0] for name, a in answers.items()} == {"foreign": 400, "pod": 200, "node": 200, "by-address": 200,
                                                           "host-network": 200}, answers
    assert "reportSourceCheck: enforce" in answers["foreign"][1] and outside_ip(1) in answers["foreign"][1]
    assert results["foreign"].outcome is Outcome.FAILED
    assert all(results[n].outcome is Outcome.REPORTED for n in ("pod", "node", "by-address", "host-network"))
    assert counter(daemon, "kuberhealthy_report_source_mismatch_total", action="refused") == 1


def test_by_default_a_report_from_a_foreign_address_is_accepted_logged_and_counted_and_v2_clients_work(
        namespace: str, daemon: InProcessDaemon, kubelet: SimKubelet, runs: ThreadPoolExecutor,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="kuberhealthy.web.report.caller")
    cases = {"foreign": {"SIM_REPORT_FROM": outside_ip(2)}, "uuid-header": {},
             "by-address": {"SIM_NO_UUID_HEADER": "1"}}
    futures = {name: start(runs, daemon, spec(namespace, name, env)) for name, env in cases.items()}
    results = {name: f.result(60) for name, f in futures.items()}
    assert {n: report_of(kubelet, namespace, r)[0] for n, r in results.items()} == dict.fromkeys(cases, 200)
    assert all(r.outcome is Outcome.REPORTED for r in results.values())
    assert counter(daemon, "kuberhealthy_report_source_mismatch_total", action="accepted") == 1
    warned = [r.getMessage() for r in caplog.records if "reportSourceCheck: warn" in r.getMessage()]
    assert len(warned) == 1 and outside_ip(2) in warned[0]


# --- look-alikes and late reports -----------------------------------------------------------------------

def look_alike(cluster: TestCluster, namespace: str, of: str, name: str, env: dict[str, str]) -> None:
    """A pod anyone allowed to create pods could make: the run pod's labels, annotations (its secret
    too: whoever can read the pod can copy it), ServiceAccount and env, under another name."""
    pod = cluster.request("GET", pods_path(namespace, of))
    spec_ = copy.deepcopy(pod["spec"])
    spec_.pop("nodeName", None)
    first = spec_["containers"][0]
    first["env"] = [e for e in first["env"] if not e["name"].startswith("SIM_")] + [
        {"name": k, "value": v} for k, v in env.items()]
    meta = {"name": name, "namespace": namespace, "labels": pod["metadata"]["labels"],
            "annotations": pod["metadata"]["annotations"]}
    cluster.request("POST", pods_path(namespace), {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                                                   "spec": spec_})


def test_look_alike_pods_cannot_report_for_the_run_nor_stop_its_pod_from_reporting(
        cluster: TestCluster, namespace: str, daemon: InProcessDaemon, kubelet: SimKubelet,
        runs: ThreadPoolExecutor) -> None:
    future = start(runs, daemon, spec(namespace, "probe", {"SIM_DELAY": "5"}))
    run_uuid, real = live_run(daemon, kubelet, namespace, "probe")
    twins = {"by-header": {}, "by-address": {"SIM_NO_UUID_HEADER": "1"}, "own-token": {"SIM_TOKEN": "file"},
             "own-token-no-header": {"SIM_TOKEN": "file", "SIM_NO_UUID_HEADER": "1"}}
    for name, env in twins.items():
        look_alike(cluster, namespace, real.name, name, env)
    answers = wait_for(lambda: all((r := kubelet.record(namespace, n)) and r.report for n in twins)
                       and {n: kubelet.report_results[f"{namespace}/{n}"] for n in twins}, 30,
                       what="every look-alike's report")
    assert {n: a.status for n, a in answers.items()} == dict.fromkeys(twins, 400)
    assert "the address of another pod" in answers["by-header"].response_body
    assert f"is not the pod run {run_uuid} of check probe created" in answers["by-address"].response_body
    assert "token of pod" in answers["own-token"].response_body
    result = future.result(60)
    assert result.outcome is Outcome.REPORTED and result.pod == real.name
    assert report_of(kubelet, namespace, result)[0] == 200
    assert not [a for a in answers.values() if "two or more" in a.response_body]
    state = cluster.request("GET", khs(namespace, "probe"))["spec"]
    assert (state["OK"], state["Errors"]) == (True, [])
    stats = web(daemon).stats
    assert stats.count(stats.rejected, "not-run-pod") == 2 and stats.count(stats.rejected, "token-other-pod") == 2


@pytest.mark.parametrize(("path", "over"), [("/externalCheckStatus", 400), ("/check", 410)], ids=["v2", "v3"])
def test_a_report_after_the_runs_pod_finished_or_for_the_previous_run_is_refused_and_changes_nothing(
        cluster: TestCluster, namespace: str, daemon: InProcessDaemon, kubelet: SimKubelet, path: str,
        over: int) -> None:
    """v2's endpoint answers 400 to all; v3's answers 410 where the run's own pod reports a run that is over."""
    check = spec(namespace, "probe", {"SIM_TOKEN": "file"})
    first = Runner(daemon.services, check, threading.Event()).run()
    time.sleep(1.02 - time.time() % 1.0)  # pods are named <check>-<unix second>; start the next run in a new one
    second = Runner(daemon.services, check, threading.Event()).run()
    assert first.outcome is second.outcome is Outcome.REPORTED
    # a run is over once its report is stored; its pod exits a moment later: wait for the kubelet to say so
    # and for the daemon's pod cache to have seen it (what a "finished pod" is to the report handler)
    def finished() -> PodRecord | None:
        found = kubelet.record(namespace, second.pod)
        return found if found is not None and found.phase == "Succeeded" else None
    record = wait_for(finished, what="the second run's pod Succeeded")
    wait_for(lambda: ((daemon.services.pods.get(namespace, second.pod) or {}).get("status") or {}).get("phase")
             == "Succeeded", what="the daemon's pod cache seeing the pod Succeeded")
    token = open(record.token_files[TOKEN_PATH], encoding="utf-8").read()
    before = khstate_rv(cluster, namespace, "probe")
    tries = {
        "finished pod, header": post(daemon, record.pod_ip, run_uuid=second.run_uuid, path=path),
        "finished pod, address": post(daemon, record.pod_ip, path=path),
        "finished pod, token": post(daemon, outside_ip(3), token=token, path=path),
        "previous run": post(daemon, record.pod_ip, run_uuid=first.run_uuid, path=path),
        "previous run, from the node": post(daemon, node_ip(kubelet, record), run_uuid=first.run_uuid, path=path),
    }
    # by address only a Running pod is found (unknown caller); from another pod's address the earlier run's
    # uuid is a look-alike's; from the node it is that run's own pod reporting a run that is over
    expected = {"finished pod, header": over, "finished pod, address": 400, "finished pod, token": over,
                "previous run": 400, "previous run, from the node": over}
    assert {k: r.status for k, r in tries.items()} == expected, tries
    assert f"run {second.run_uuid} of check {namespace}/probe is over" in tries["finished pod, header"].text
    assert "is over" in tries["finished pod, token"].text
    assert khstate_rv(cluster, namespace, "probe") == before


# --- the token path -------------------------------------------------------------------------------------

@pytest.mark.parametrize("daemon_settings", [ENFORCE], ids=["enforce"])
def test_a_valid_token_is_accepted_from_any_address_and_bad_tokens_get_401_each_with_its_reason(
        namespace: str, daemon: InProcessDaemon, kubelet: SimKubelet, runs: ThreadPoolExecutor) -> None:
    cases = {"stranger": {"SIM_TOKEN": "file", "SIM_REPORT_FROM": outside_ip(4)},
             "token-only": {"SIM_TOKEN": "file", "SIM_NO_UUID_HEADER": "1", "SIM_REPORT_FROM": outside_ip(4)},
             "expired": {"SIM_TOKEN": "expired"}, "wrong-audience": {"SIM_TOKEN": "wrong-audience"},
             "garbage": {"SIM_TOKEN": "garbage"}}
    futures = {name: start(runs, daemon, spec(namespace, name, env)) for name, env in cases.items()}
    results = {name: f.result(60) for name, f in futures.items()}
    answers = {name: report_of(kubelet, namespace, r) for name, r in results.items()}
    assert {n: a[0] for n, a in answers.items()} == {"stranger": 200, "token-only": 200, "expired": 401,
                                                     "wrong-audience": 401, "garbage": 401}
    assert "expired" in answers["expired"][1].lower()
    assert "audience" in answers["wrong-audience"][1]
    assert answers["garbage"][1].startswith("the token is not valid")
    assert results["stranger"].outcome is results["token-only"].outcome is Outcome.REPORTED
    assert counter(daemon, "kuberhealthy_report_rejected_total", reason="token-invalid") == 3


class NoReviews:
    """The daemon's API as TokenReviews see it when its RBAC lacks them (an upgrade with hand-made RBAC)."""

    def create(self, *args: Any, **kwargs: Any) -> Any:
        raise Forbidden("tokenreviews.authentication.k8s.io is forbidden")


def test_a_token_the_api_server_cannot_review_does_not_cost_the_report_its_uuid_would_get(
        namespace: str, daemon: InProcessDaemon, kubelet: SimKubelet) -> None:
    web(daemon).admission.tokens = TokenVerifier(NoReviews())  # type: ignore[arg-type]
    result = Runner(daemon.services, spec(namespace, "probe", {"SIM_TOKEN": "file"}), threading.Event()).run()
    assert result.outcome is Outcome.REPORTED and report_of(kubelet, namespace, result)[0] == 200


@pytest.mark.parametrize("daemon_settings", [{"reportAuth": "token"}], ids=["token"])
def test_report_auth_token_refuses_reports_without_a_token_and_takes_those_with_one(
        namespace: str, daemon: InProcessDaemon, kubelet: SimKubelet, runs: ThreadPoolExecutor) -> None:
    cases = {"uuid-header": {}, "by-address": {"SIM_NO_UUID_HEADER": "1"}, "token": {"SIM_TOKEN": "file"}}
    futures = {name: start(runs, daemon, spec(namespace, name, env)) for name, env in cases.items()}
    answers = {name: report_of(kubelet, namespace, f.result(60)) for name, f in futures.items()}
    assert {n: a[0] for n, a in answers.items()} == {"uuid-header": 401, "by-address": 401, "token": 200}
    assert "a ServiceAccount token is required" in answers["uuid-header"][1]


def test_a_run_reporting_with_its_token_costs_one_token_review_and_at_most_five_api_requests(
        cluster: TestCluster, namespace: str, daemon: InProcessDaemon, kubelet: SimKubelet) -> None:
    check = spec(namespace, "probe", {"SIM_TOKEN": "file"})
    Runner(daemon.services, check, threading.Event()).run()  # warm-up: creates the khstate
    reviews = web(daemon).admission.tokens.reviews
    offset, n = cluster.audit_offset(), 3
    for _ in range(n):
        time.sleep(1.02 - time.time() % 1.0)  # pods are named <check>-<unix second>
        result = Runner(daemon.services, check, threading.Event()).run()
        assert result.outcome is Outcome.REPORTED and report_of(kubelet, namespace, result)[0] == 200
    agent = USER_AGENT.split("/")[0] + "/"

    def ours() -> list[dict[str, Any]]:
        return [e for e in cluster.audit_events_since(offset) if str(e.get("userAgent", "")).startswith(agent)
                and e.get("verb") != "watch" and e.get("stage") == "ResponseComplete"
                and (e.get("objectRef") or {}).get("resource") != "leases"]
    events = wait_for(lambda: (got := ours()) and sum(e["objectRef"].get("resource") == "tokenreviews"
                                                     for e in got) == n and got, 10, what="the audit log")
    assert web(daemon).admission.tokens.reviews - reviews == n
    kinds = sorted(f"{e['verb']} {e['objectRef'].get('resource')}" for e in events)
    assert len(events) <= 5 * n, kinds  # today: the pod, the TokenReview, claim + report + result


# --- rate limits ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("daemon_settings", [{"reportRateLimit": 2, "reportRateBurst": 4}], ids=["2/s burst 4"])
def test_a_flood_from_one_address_gets_429_while_genuine_reports_from_the_pod_and_its_node_get_200(
        namespace: str, daemon: InProcessDaemon, kubelet: SimKubelet, runs: ThreadPoolExecutor) -> None:
    stop = threading.Event()
    flood: list[Reply] = []

    def attack() -> None:  # as fast as the server answers (a uuid no pod can carry is refused at once)
        while not stop.is_set():
            flood.append(post(daemon, outside_ip(5), run_uuid=f"spoof!{uuid.uuid4().hex}"))
    began = time.monotonic()
    attacker = runs.submit(attack)
    wait_for(lambda: len(flood) > 100, 20, what="the flood to start")
    futures = {name: start(runs, daemon, spec(namespace, name, env))
               for name, env in {"pod": {}, "node": {"SIM_REPORT_FROM": "node"}}.items()}
    try:
        answers = {name: report_of(kubelet, namespace, f.result(60)) for name, f in futures.items()}
    finally:
        stop.set()
        attacker.result(30)
        lasted = time.monotonic() - began
    assert {n: a[0] for n, a in answers.items()} == {"pod": 200, "node": 200}
    limited = [r for r in flood if r.status == 429]
    assert len(limited) >= 0.9 * len(flood), sorted({r.status for r in flood})
    assert len(flood) - len(limited) <= 4 + 2 * lasted + 1  # the burst, then the rate: nothing more got in
    assert all(int(r.headers["retry-after"]) >= 1 for r in limited)
