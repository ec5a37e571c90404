"""The HTTP API through Flask's test client over fake services: `/`, `/metrics`, probes and reports.

No API server and no sockets: the caches are FakeCaches, the khstate writes go to FakeApi. The same
behaviour over real services and a real socket is tested in tests/integration/web.
"""
from __future__ import annotations

import io
import json
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from kuberhealthy.base.errors import ServerError, Unreachable
from kuberhealthy.checkclient import RUN_UUID_HEADER
from kuberhealthy.kube import KHJOBS, KHSTATES, PODS, Obj
from kuberhealthy.records import khstate
from kuberhealthy.records.checkpod import build_pod
from kuberhealthy.run.runner import Outcome, Phase, Runner
from kuberhealthy.web import create_app
from kuberhealthy.web.report.body import MAX_BODY
from testbed.fakes import NS, POD_NAME, REPORTING_URL, FakeServices, FakeStop, check_spec, khjob, khstate_of

OK = {"OK": True, "Errors": []}
FAIL = {"OK": False, "Errors": ["disk full", "dns <slow>"]}


def checker_pod(services: FakeServices, check: str = "dns", run_uuid: str | None = None,
                claimed: bool = True) -> tuple[Obj, str]:
    """A Running checker pod of `check` (and, if `claimed`, the khstate naming its run)."""
    run = run_uuid or str(uuid.uuid4())
    if claimed:
        services.api.put(KHSTATES, khstate_of(check, uuid=run))
    body = build_pod(check_spec(check), run, services.clock.wall(), REPORTING_URL)
    pod = services.kubelet.run(services.api.put(PODS, body))
    return pod, run


def post(client: FlaskClient, body: Any, run_uuid: str | None = None, source: str = "192.0.2.99") -> Any:
    """POST /externalCheckStatus from `source` (by default an address no pod has)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {RUN_UUID_HEADER: run_uuid} if run_uuid is not None else {}
    return client.post("/externalCheckStatus", data=raw, headers=headers, content_type="application/json",
                       environ_base={"REMOTE_ADDR": source})


def address(pod: Obj) -> str:
    return str(pod["status"]["podIP"])


def spec(services: FakeServices, name: str = "dns") -> khstate.Spec:
    return khstate.Spec.of(services.api.peek(KHSTATES, NS, name) or {})


def one_line(text: str) -> bool:
    return bool(text.strip()) and len(text.rstrip("\n").splitlines()) == 1


# --- the status page ------------------------------------------------------------------------------------

def test_the_status_page_of_a_cluster_without_checks_is_ok_and_names_the_master(client: FlaskClient) -> None:
    answer = client.get("/")
    assert answer.status_code == 200 and answer.content_type == "application/json"
    assert answer.get_json() == {"OK": True, "Errors": [], "CheckDetails": {}, "JobDetails": {},
                                 "CurrentMaster": POD_NAME}


def test_the_status_page_shows_checks_and_jobs_in_v2s_shape_and_hides_checks_that_never_ran(
        fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(KHSTATES, khstate_of("fine", OK=True, RunDuration="1.5s", Node="node-1",
                                               LastRun="2024-03-22T07:22:56Z", uuid="u-1"))
    fake_services.api.put(KHSTATES, khstate_of("broken", OK=False, Errors=["disk full"], uuid="u-2"))
    fake_services.api.put(KHSTATES, khstate_of("never-ran", AuthoritativePod=""))
    fake_services.api.put(KHJOBS, khjob("once"))
    fake_services.api.put(KHSTATES, khstate_of("once", OK=True, uuid="u-3"))
    doc = client.get("/").get_json()
    assert doc["OK"] is False and doc["Errors"] == ["disk full"] and doc["CurrentMaster"] == POD_NAME
    assert sorted(doc["CheckDetails"]) == [f"{NS}/broken", f"{NS}/fine"]
    assert sorted(doc["JobDetails"]) == [f"{NS}/once"]
    fine = doc["CheckDetails"][f"{NS}/fine"]
    assert list(fine) == ["OK", "Errors", "RunDuration", "Namespace", "Node", "LastRun", "AuthoritativePod", "uuid"]
    assert {k: v for k, v in fine.items() if k != "uuid"} == {  # which run's uuid shows: tests/unit/test_state.py
        "OK": True, "Errors": [], "RunDuration": "1.5s", "Namespace": NS, "Node": "node-1",
        "LastRun": "2024-03-22T07:22:56Z", "AuthoritativePod": POD_NAME}


def test_the_status_page_follows_the_cache_and_the_master(fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(KHSTATES, khstate_of("dns", OK=True))
    assert client.get("/").get_json()["OK"] is True
    fake_services.api.put(KHSTATES, khstate_of("dns", OK=False, Errors=["down"]))
    fake_services.master = "kh-other-1"
    doc = client.get("/").get_json()
    assert doc["OK"] is False and doc["Errors"] == ["down"] and doc["CurrentMaster"] == "kh-other-1"


def test_the_status_page_filters_by_namespace(fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(KHSTATES, khstate_of("a", namespace="team-a", OK=False, Errors=["a broke"]))
    fake_services.api.put(KHSTATES, khstate_of("b", namespace="team-b"))
    doc = client.get("/?namespace=team-b").get_json()
    assert doc["OK"] is True and list(doc["CheckDetails"]) == ["team-b/b"]


def test_a_status_page_request_with_a_body_is_refused_as_a_misdirected_report(client: FlaskClient) -> None:
    answer = client.post("/", data=json.dumps(OK), content_type="application/json")
    assert answer.status_code == 400 and "reporting to the right status url" in answer.text
    assert one_line(answer.text)


def test_a_status_page_request_with_a_chunked_body_is_refused_too(client: FlaskClient) -> None:
    answer = client.post("/", input_stream=io.BytesIO(json.dumps(OK).encode()),
                         headers={"Transfer-Encoding": "chunked", "Content-Type": "application/json"},
                         environ_overrides={"wsgi.input_terminated": True})  # as gunicorn says of a chunked body
    assert answer.status_code == 400 and "reporting to the right status url" in answer.text


@pytest.mark.parametrize("how", ["no length", "length 0", "empty chunked"])
def test_a_status_page_request_without_a_body_is_served_however_it_says_so(client: FlaskClient, how: str) -> None:
    cases: dict[str, dict[str, Any]] = {  # the Flask test client's keyword arguments
        "no length": {},
        "length 0": {"headers": {"Content-Length": "0"}},
        "empty chunked": {"input_stream": io.BytesIO(b""), "headers": {"Transfer-Encoding": "chunked"},
                          "environ_overrides": {"wsgi.input_terminated": True}},
    }
    kwargs = cases[how]
    answer = client.get("/", **kwargs)
    assert answer.status_code == 200 and answer.get_json()["CurrentMaster"] == POD_NAME


@pytest.mark.parametrize("query", ["", "?", "?format=json", "?namespace=", "?namespace=,", "?other=1"])
def test_a_query_without_a_namespace_gets_the_whole_status_page(fake_services: FakeServices, client: FlaskClient,
                                                               query: str) -> None:
    fake_services.api.put(KHSTATES, khstate_of("a", namespace="team-a"))
    fake_services.api.put(KHSTATES, khstate_of("b", namespace="team-b"))
    answer = client.get("/" + query)
    assert answer.status_code == 200 and sorted(answer.get_json()["CheckDetails"]) == ["team-a/a", "team-b/b"]
    assert answer.data == client.get("/").data


# --- metrics and probes ----------------------------------------------------------------------------------

def test_metrics_expose_the_v2_families_beside_cache_freshness_and_skipped_runs(
        fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(KHSTATES, khstate_of("dns", OK=False, Errors=['said "no"'], RunDuration="2m3s"))
    fake_services.api.put(KHJOBS, khjob("once"))
    fake_services.api.put(KHSTATES, khstate_of("once", OK=True, RunDuration="1s"))
    fake_services.stats.skip("pod-deleted")
    fake_services.pods.set_current(False)
    fake_services.clock.advance(7)
    answer = client.get("/metrics")
    assert answer.status_code == 200 and answer.content_type.startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(answer.text) for s in family.samples}
    assert samples[("kuberhealthy_running", (("current_master", POD_NAME),))] == 1
    assert samples[("kuberhealthy_cluster_state", ())] == 0
    check = (("check", f"{NS}/dns"), ("error", "said 'no'"), ("namespace", NS), ("status", "0"))
    assert samples[("kuberhealthy_check", check)] == 0
    assert samples[("kuberhealthy_check_duration_seconds", (("check", f"{NS}/dns"), ("namespace", NS)))] == 123
    assert samples[("kuberhealthy_job_duration_seconds", (("check", f"{NS}/once"), ("namespace", NS)))] == 1
    assert samples[("kuberhealthy_cache_current", (("cache", "pods"),))] == 0
    assert samples[("kuberhealthy_cache_current", (("cache", "khstates"),))] == 1
    assert samples[("kuberhealthy_cache_stale_seconds", (("cache", "pods"),))] == 7
    assert samples[("kuberhealthy_runs_skipped_total", (("reason", "pod-deleted"),))] == 1


def test_readyz_answers_503_until_every_cache_has_synced_then_200() -> None:
    services = FakeServices(synced=False)
    client = create_app(services, caller_wait=0.0).test_client()
    before = client.get("/readyz")
    assert before.status_code == 503 and before.text == "caches not synced yet\n"
    services.sync()
    after = client.get("/readyz")
    assert after.status_code == 200
    assert after.text.splitlines() == ["ok", "khchecks: current", "khstates: current", "khjobs: current",
                                       "pods: current", "healthchecks: current"]


def test_readyz_stays_ready_through_an_api_outage_and_says_which_cache_is_behind(
        fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.khstates.set_current(False)
    fake_services.clock.advance(42)
    answer = client.get("/readyz")
    assert answer.status_code == 200 and "khstates: not current for 42s" in answer.text.splitlines()


def test_healthz_answers_ok_even_before_the_caches_synced() -> None:
    client = create_app(FakeServices(synced=False), caller_wait=0.0).test_client()
    answer = client.get("/healthz")
    assert answer.status_code == 200 and answer.text == "ok"


def test_an_unknown_path_is_a_one_line_plain_text_404(client: FlaskClient) -> None:
    answer = client.get("/nope")
    assert answer.status_code == 404 and answer.content_type.startswith("text/plain") and one_line(answer.text)


# --- reports ------------------------------------------------------------------------------------------------

def test_a_report_identified_by_its_uuid_header_is_stored_in_the_khstate(
        fake_services: FakeServices, client: FlaskClient) -> None:
    pod, run = checker_pod(fake_services)
    answer = post(client, FAIL, run_uuid=run, source=address(pod))
    assert answer.status_code == 200 and answer.text == "" and answer.headers["X-Request-Id"]
    s = spec(fake_services)
    assert s.ok is False and s.errors == ("disk full", "dns <slow>") and s.uuid == run and s.last_run
    assert khstate.reported_uuid(fake_services.api.peek(KHSTATES, NS, "dns")) == run


def test_a_report_identified_by_its_source_address_is_stored(
        fake_services: FakeServices, client: FlaskClient) -> None:
    pod, run = checker_pod(fake_services, claimed=False)
    fake_services.api.put(KHSTATES, khstate_of("dns", uuid=run, OK=False, Errors=["old failure"]))
    answer = post(client, OK, source=address(pod))
    assert answer.status_code == 200, answer.text
    s = spec(fake_services)
    assert s.ok is True and s.errors == () and s.last_run


def test_a_malformed_report_is_refused_with_a_one_line_reason_and_changes_nothing(
        fake_services: FakeServices, client: FlaskClient) -> None:
    pod, run = checker_pod(fake_services)
    before = fake_services.api.peek(KHSTATES, NS, "dns")
    answer = post(client, b'{"OK": tru', run_uuid=run, source=address(pod))
    assert answer.status_code == 400 and answer.text.startswith("Failed to unmarshal state json") and one_line(
        answer.text)
    assert fake_services.api.peek(KHSTATES, NS, "dns") == before


def test_a_failure_without_errors_is_refused_with_v2s_reason(
        fake_services: FakeServices, client: FlaskClient) -> None:
    pod, run = checker_pod(fake_services)
    answer = post(client, {"OK": False, "Errors": []}, run_uuid=run, source=address(pod))
    assert answer.status_code == 400
    assert answer.text == "Client attempted to report OK false without any error strings\n"


def test_a_report_for_an_unknown_run_uuid_is_refused(fake_services: FakeServices, client: FlaskClient) -> None:
    checker_pod(fake_services)
    stranger = str(uuid.uuid4())
    answer = post(client, OK, run_uuid=stranger)
    assert answer.status_code == 400
    assert answer.text == f"failed to find a pod with selector kuberhealthy-run-id={stranger}\n"
    assert not fake_services.api.made("list", PODS)  # the caches are current: no read for a stranger


def test_a_report_for_a_run_that_is_no_longer_current_is_refused_and_changes_nothing(
        fake_services: FakeServices, client: FlaskClient) -> None:
    pod, run = checker_pod(fake_services)
    fake_services.api.put(KHSTATES, khstate_of("dns", uuid="the-next-run"))
    before = fake_services.api.peek(KHSTATES, NS, "dns")
    answer = post(client, OK, run_uuid=run, source=address(pod))
    assert answer.status_code == 400
    assert answer.text == (f"pod was not properly whitelisted for reporting status of check dns with uuid {run} "
                           f"and namespace {NS}\n")
    assert fake_services.api.peek(KHSTATES, NS, "dns") == before


def test_a_report_the_api_server_cannot_store_now_is_accepted_and_held(
        fake_services: FakeServices, client: FlaskClient) -> None:
    pod, run = checker_pod(fake_services)
    before = fake_services.api.peek(KHSTATES, NS, "dns")
    fake_services.api.fail("replace", KHSTATES, ServerError("etcdserver: request timed out"))
    answer = post(client, OK, run_uuid=run, source=address(pod))
    assert answer.status_code == 200, answer.text
    assert fake_services.held.holds(run) and fake_services.api.peek(KHSTATES, NS, "dns") == before


def test_a_report_whose_caller_cannot_be_looked_up_while_the_api_is_away_is_told_to_retry(
        fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.fail("list", PODS, Unreachable("connection refused"))
    fake_services.pods.set_current(False)  # its watch failed too: the cache may be behind
    answer = post(client, OK, run_uuid=str(uuid.uuid4()))
    assert answer.status_code == 503 and int(answer.headers["Retry-After"]) >= 1 and one_line(answer.text)


def test_a_report_larger_than_the_limit_is_refused_with_413(client: FlaskClient) -> None:
    answer = post(client, b"{" + b" " * MAX_BODY + b"}", run_uuid=str(uuid.uuid4()))
    assert answer.status_code == 413 and one_line(answer.text)


def test_a_report_posted_to_the_app_ends_the_run_that_waits_for_it(
        fake_services: FakeServices, client: FlaskClient) -> None:
    check = check_spec("dns")
    runner = Runner(fake_services, check, FakeStop(fake_services.clock), clock=fake_services.clock,
                    wall=fake_services.clock.wall)

    def checker(pod: Obj) -> None:  # the checker pod starts, reports over HTTP and exits
        pod = fake_services.kubelet.run(pod)
        answer = post(client, FAIL, source=address(pod))
        assert answer.status_code == 200, answer.text
        fake_services.kubelet.finish(pod)
    fake_services.api.on_create(PODS, checker)
    result = runner.run()  # on the test's thread: every step happens inside the pod create
    assert result.outcome is Outcome.REPORTED and result.phase is Phase.DONE
    s = spec(fake_services)
    assert s.ok is False and s.errors == ("disk full", "dns <slow>") and s.uuid == result.run_uuid and s.run_duration
