"""A check that once reported with its ServiceAccount token is bound to tokens until its khcheck's spec
changes (docs/interface.md#report-authenticity), and held reports never overwrite a run
that is over (item 8). Real API server (TokenReview for real), simulated kubelet, the daemon in this
process, every report over real HTTP from a chosen loopback address."""
from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from kuberhealthy.base.errors import Unreachable
from kuberhealthy.kube import Resources
from kuberhealthy.outputs.heldreports import FINISHED, Held, HeldReports
from kuberhealthy.outputs.schemacheck import SchemaCheck
from kuberhealthy.records import khstate
from kuberhealthy.records.checkpod import TOKEN_PATH
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.run.runner import Outcome, Runner
from kuberhealthy.web.parts import part
from kuberhealthy.web.report.admission import Admission
from kuberhealthy.web.report.routes import ReportDesk
from kuberhealthy.web.report.tokens import TokenVerifier
from testbed.clients.rawhttp import Answer, request
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khc, khcheck, khj, khjob, khs
from testbed.cluster.crds import load_crds
from testbed.cluster.loopback import outside_ip
from testbed.daemons.inprocess import InProcessDaemon
from testbed.sim.kubelet import SimKubelet
from testbed.sim.records import PodRecord
from testbed.wait import wait_for

OK_BODY = b'{"OK": true, "Errors": []}'
BOUND = "is bound to ServiceAccount tokens"
TOKEN_ENV = {"SIM_TOKEN": "file", "SIM_EXIT_DELAY": "8"}  # reports at once with its token, then lingers
KEY = khstate.TOKEN_BOUND_GENERATION
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
KHSTATE_CRD = "khstates.comcast.github.io"
KEY_SCHEMA = f"/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/{KEY}"


def post(d: InProcessDaemon, source: str, *, run_uuid: str | None = None, token: str | None = None) -> Answer:
    headers = {"Content-Type": "application/json"}
    if run_uuid is not None:
        headers["kh-run-uuid"] = run_uuid
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return request(d.port, "POST", "/externalCheckStatus", OK_BODY, headers=headers, source_ip=source, timeout=10)


def web(d: InProcessDaemon) -> Admission:
    return part(ReportDesk, d.app).admission


def state(cluster: TestCluster, namespace: str, name: str = "probe") -> dict[str, Any]:
    got: dict[str, Any] = cluster.request("GET", khs(namespace, name))
    return got


def generation(cluster: TestCluster, namespace: str, name: str = "probe") -> int:
    return int(cluster.request("GET", khc(namespace, name))["metadata"]["generation"])


def reported_run(d: InProcessDaemon, kubelet: SimKubelet, namespace: str, *, not_uuid: str = "",
                 name: str = "probe", lingering: bool = True) -> tuple[str, PodRecord]:
    """A run of the check that has reported and (with `lingering`) whose pod still runs (SIM_EXIT_DELAY), once
    the daemon's caches have its stored report. Without `lingering` a pod that has exited since counts too: on
    a loaded machine the caches can learn of the report after the pod's linger is over."""
    def found() -> tuple[str, PodRecord] | None:
        obj = d.services.khstates.get(namespace, name)
        run = khstate.Spec.of(obj).uuid if obj else ""
        if not run or run == not_uuid or khstate.reported_uuid(obj) != run:
            return None
        for pod in d.services.pods.by_index("uuid", run):
            record = kubelet.record(namespace, pod["metadata"]["name"])
            if record is not None and record.reported is not None and (record.exited is None or not lingering):
                return run, record
        return None
    got = wait_for(found, 60, what=f"a reported, lingering run of {name}")  # a loaded machine: pod up, report, caches
    assert got is not None
    return got


def token_of(record: PodRecord) -> str:
    with open(record.token_files[TOKEN_PATH], encoding="utf-8") as f:
        return f.read().strip()


class Unavailable:
    """TokenReviews while the API server is away."""

    def create(self, *args: Any, **kwargs: Any) -> Any:
        raise Unreachable("POST tokenreviews: connection refused")


@pytest.fixture
def daemons(cluster: TestCluster, namespace: str) -> Iterator[list[InProcessDaemon]]:
    """In-process daemons a test starts one after the other (a restart); all stopped after it."""
    made: list[InProcessDaemon] = []
    try:
        yield made
    finally:
        for d in made:
            d.stop()


def restart(cluster: TestCluster, namespace: str, made: list[InProcessDaemon]) -> InProcessDaemon:
    if made:
        made.pop().stop()
    d = InProcessDaemon(cluster, namespace).start()
    made.append(d)
    return d


# --- the binding -----------------------------------------------------------------------------------------

def test_a_check_that_reported_with_its_token_refuses_tokenless_reports_until_its_spec_changes(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, daemons: list[InProcessDaemon]) -> None:
    d = restart(cluster, namespace, daemons)
    cluster.request("POST", khc(namespace), khcheck("probe", env=TOKEN_ENV))
    first, record = reported_run(d, kubelet, namespace)
    assert record.report is not None and record.report.bearer and record.report.status == 200
    assert state(cluster, namespace)["spec"][KEY] == generation(cluster, namespace) == 1  # not pruned

    by_header = post(d, record.pod_ip, run_uuid=first)
    by_address = post(d, record.pod_ip)
    from_anywhere = post(d, outside_ip(11), run_uuid=first)  # anyone who can read the pod's uuid
    for answer in (by_header, by_address, from_anywhere):
        assert answer.status == 401, answer
        assert BOUND in answer.text and "change the khcheck's spec" in answer.text and "\n" not in answer.text.strip()
        assert answer.headers["www-authenticate"].startswith("Bearer")
    assert post(d, outside_ip(11), run_uuid=first, token=token_of(record)).status == 200  # the token still works

    # The binding is in the khstate: a restarted daemon keeps it.
    d = restart(cluster, namespace, daemons)
    assert requests.post(f"{d.url}/api/checks/{namespace}/probe/run", timeout=10).status_code == 202
    second, record = reported_run(d, kubelet, namespace, not_uuid=first)
    answer = post(d, record.pod_ip, run_uuid=second)
    assert answer.status == 401 and BOUND in answer.text, answer

    # A change of the khcheck's spec (here: a v2 image that never sends a token) ends it.
    before = state(cluster, namespace)["metadata"]["resourceVersion"]
    body = cluster.request("GET", khc(namespace, "probe"))
    body["spec"]["podSpec"]["containers"][0]["env"] = [{"name": "SIM_EXIT_DELAY", "value": "8"}]
    cluster.request("PUT", khc(namespace, "probe"), body)
    _, record = reported_run(d, kubelet, namespace, not_uuid=second)
    assert record.report is not None and not record.report.bearer and record.report.status == 200
    assert generation(cluster, namespace) == 2
    spec = state(cluster, namespace)["spec"]
    assert KEY not in spec and spec["OK"] is True and state(cluster, namespace)["metadata"]["resourceVersion"] != before
    assert post(d, outside_ip(12)).status == 400  # and the uuid rules are back: no pod at that address


def test_a_bound_check_whose_token_cannot_be_reviewed_gets_503_never_401_nor_the_uuid_rules(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, daemons: list[InProcessDaemon]) -> None:
    d = restart(cluster, namespace, daemons)
    cluster.request("POST", khc(namespace), khcheck("probe", env=TOKEN_ENV))
    run, record = reported_run(d, kubelet, namespace)
    token = token_of(record)
    verifier = web(d).tokens
    web(d).tokens = TokenVerifier(Unavailable())  # type: ignore[arg-type]
    try:
        answer = post(d, record.pod_ip, run_uuid=run, token=token)
        assert answer.status == 503 and int(answer.headers["retry-after"]) >= 1, answer
        assert "cannot verify the token" in answer.text
        assert post(d, record.pod_ip, run_uuid=run).status == 401  # without a token: still bound
    finally:
        web(d).tokens = verifier
    assert post(d, record.pod_ip, run_uuid=run, token=token).status == 200


def test_checks_that_never_send_a_token_keep_reporting_by_uuid_and_by_address(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, daemons: list[InProcessDaemon]) -> None:
    d = restart(cluster, namespace, daemons)
    cluster.request("POST", khc(namespace), khcheck("by-header", env={"SIM_EXIT_DELAY": "8"}))
    cluster.request("POST", khc(namespace), khcheck("by-address", env={"SIM_NO_UUID_HEADER": "1",
                                                                        "SIM_EXIT_DELAY": "8"}))
    runs = {}
    for name in ("by-header", "by-address"):
        runs[name], record = reported_run(d, kubelet, namespace, name=name)
        assert record.report is not None and record.report.status == 200 and not record.report.bearer
        assert KEY not in state(cluster, namespace, name)["spec"]
        assert post(d, record.pod_ip, run_uuid=runs[name]).status == 200  # and again: nothing binds it
    wait_for(lambda: requests.post(f"{d.url}/api/checks/{namespace}/by-address/run", timeout=10).status_code == 202,
             30, what="a second run once the first is over")
    _, record = reported_run(d, kubelet, namespace, not_uuid=runs["by-address"], name="by-address", lingering=False)
    assert record.report is not None and record.report.status == 200


def test_a_khjob_is_bound_for_the_rest_of_its_run_by_the_same_rule(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, daemons: list[InProcessDaemon]) -> None:
    d = restart(cluster, namespace, daemons)
    cluster.request("POST", khj(namespace), khjob("once", env=TOKEN_ENV))
    run, record = reported_run(d, kubelet, namespace, name="once")
    job = cluster.request("GET", khj(namespace, "once"))
    assert job["spec"]["phase"] == "Running"
    assert state(cluster, namespace, "once")["spec"][KEY] == job["metadata"]["generation"]
    answer = post(d, record.pod_ip, run_uuid=run)
    assert answer.status == 401 and "change the khjob's spec" in answer.text, answer


# --- enforce and the node's address ---------------------------------------------------------------------

@pytest.mark.parametrize("daemon_settings", [{"reportSourceCheck": "enforce"}], ids=["enforce"])
def test_with_enforce_a_checker_on_its_nodes_address_must_send_the_header_or_the_token(
        namespace: str, daemon: InProcessDaemon, kubelet: SimKubelet) -> None:
    cases = {"address-only": {"SIM_NO_UUID_HEADER": "1"}, "header": {},
             "token-only": {"SIM_NO_UUID_HEADER": "1", "SIM_TOKEN": "file"}}
    answers: dict[str, tuple[int | None, str]] = {}
    for name, env in cases.items():  # one at a time: hostNetwork pods on one node share its address
        body = khcheck(name, interval="1h", timeout="20s", env=env)
        body["metadata"]["namespace"] = namespace
        body["spec"]["podSpec"]["hostNetwork"] = True
        result = Runner(daemon.services, CheckSpec.of(body), threading.Event()).run()
        rec = kubelet.reported_record(namespace, result.pod)
        assert rec.report is not None and rec.host_network
        answers[name] = (rec.report.status, rec.report.response_body)
        assert result.outcome is (Outcome.FAILED if name == "address-only" else Outcome.REPORTED), result
    assert {n: a[0] for n, a in answers.items()} == {"address-only": 400, "header": 200, "token-only": 200}
    assert "node's address" in answers["address-only"][1] and "reportSourceCheck: enforce" in answers["address-only"][1]


# --- the khstate CRD --------------------------------------------------------------------------------------

class NoEvents:
    def record(self, *args: Any, **kwargs: Any) -> bool:
        return True


def patch_crd(cluster: TestCluster, op: dict[str, Any]) -> None:
    """One JSON Patch operation on the installed khstate CRD's `spec` property of the binding."""
    cluster.request("PATCH", f"{CRDS}/{KHSTATE_CRD}", [{**op, "path": KEY_SCHEMA}],
                    content_type="application/json-patch+json")


def test_the_outdated_crd_check_warns_about_a_khstate_crd_that_would_prune_the_binding(
        cluster: TestCluster, namespace: str, res: Resources, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="kuberhealthy.outputs.schemacheck")
    (crd,) = [c for c in load_crds() if c["metadata"]["name"] == KHSTATE_CRD]
    shipped = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][KEY]
    check = SchemaCheck(res, NoEvents(), namespace, namespace, "no-such-pod")  # type: ignore[arg-type]
    patch_crd(cluster, {"op": "remove"})
    try:
        wait_for(lambda: check.check_once() == [KEY], 30, what="the old CRD in effect")
        check.start()
        check.join(30)
        assert check.missing == [KEY]
        [warning] = [r.getMessage() for r in caplog.records if "khstate CRD is older" in r.getMessage()]
        assert KEY in warning and "no check is bound to report tokens" in warning and "history" not in warning
    finally:
        patch_crd(cluster, {"op": "add", "value": shipped})
        wait_for(lambda: check.check_once() == [], 30, what="the chart's CRD back in effect")


# --- held reports ---------------------------------------------------------------------------------------------

def test_a_held_report_for_a_run_finished_meanwhile_is_dropped_and_counted_never_written(
        cluster: TestCluster, namespace: str, res: Resources) -> None:
    cluster.request("POST", khs(namespace), {
        "apiVersion": "comcast.github.io/v1", "kind": "KuberhealthyState",
        "metadata": {"name": "probe", "annotations": {khstate.FINISHED_UUID: "run-1"}},
        "spec": {"OK": False, "Errors": ["Check execution error: timed out"], "RunDuration": "20s",
                 "Namespace": namespace, "Node": "n", "AuthoritativePod": "kh-0", "uuid": "run-1"}})
    before = state(cluster, namespace)
    reports = HeldReports(res, lambda: "kh-0")
    received = dt.datetime.now(dt.timezone.utc)
    assert reports.add(Held(namespace, "probe", "run-1", True, (), received, 2e9))
    assert reports.flush_once() is True
    assert (reports.written, reports.dropped, reports.dropped_by[FINISHED]) == (0, 1, 1)
    assert state(cluster, namespace) == before  # the run's error stands

    cluster.request("POST", khs(namespace), {  # the same report for a run still current is written
        "apiVersion": "comcast.github.io/v1", "kind": "KuberhealthyState", "metadata": {"name": "live"},
        "spec": {"OK": False, "Errors": ["old"], "RunDuration": "", "Namespace": namespace, "Node": "",
                 "AuthoritativePod": "kh-0", "uuid": "run-2"}})
    assert reports.add(Held(namespace, "live", "run-2", True, (), received, 2e9))
    assert reports.flush_once() is True and reports.written == 1
    assert state(cluster, namespace, "live")["spec"]["OK"] is True
