"""POST /externalCheckStatus and POST /check over a real socket, against the real API server and the real caches."""
from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator

import pytest
from flask import Flask

from kuberhealthy.base.errors import Forbidden, Unreachable
from kuberhealthy.daemon.services import Services
from kuberhealthy.web.report.body import MAX_BODY
from testbed.clients.rawhttp import REPORT_PATHS, V3_REPORT_PATH, post_report, request
from testbed.cluster.loopback import pod_ip
from testbed.cluster.objects import set_pod_status
from testbed.daemons.inprocess import PodMaker, WebServer, rv, serve
from testbed.wait import wait_for

OK = {"OK": True, "Errors": []}


@pytest.fixture(params=REPORT_PATHS, ids=["v2", "v3"])
def endpoint(request: pytest.FixtureRequest) -> str:
    """v2's /externalCheckStatus and v3's /check: a report is judged by the same rules at either."""
    return str(request.param)
FAIL = {"OK": False, "Errors": ["disk full", "dns <broken> & slow"]}


def new_uuid() -> str:
    return str(uuid.uuid4())


def one_line(text: str) -> bool:
    return bool(text.strip()) and len(text.rstrip("\n").splitlines()) == 1


def assert_refused(answer_status: int, text: str, status: int = 400) -> None:
    assert answer_status == status, text
    assert one_line(text), repr(text)


def test_a_report_identified_by_its_uuid_header_is_stored(server: WebServer, maker: PodMaker,
                                                         endpoint: str) -> None:
    run = new_uuid()
    before = maker.khstate("dns", run)
    pod = maker.pod("dns", run)
    answer = post_report(server, FAIL, run_uuid=run, source_ip=pod.ip, path=endpoint)
    assert answer.status == 200, answer.text
    after = maker.get_khstate("dns")
    assert rv(after) != rv(before)
    assert after["spec"]["OK"] is False and after["spec"]["Errors"] == FAIL["Errors"]
    assert after["spec"]["AuthoritativePod"] == "kh-test-0" and after["spec"]["uuid"] == run
    assert after["spec"]["LastRun"]


def test_a_report_identified_by_its_source_ip_is_stored(server: WebServer, maker: PodMaker,
                                                        endpoint: str) -> None:
    run = new_uuid()
    maker.khstate("ping", run, OK=False, Errors=["old failure"])
    pod = maker.pod("ping", run)
    answer = post_report(server, OK, source_ip=pod.ip, path=endpoint)
    assert answer.status == 200, answer.text
    spec = maker.get_khstate("ping")["spec"]
    assert spec["OK"] is True and spec["Errors"] == [] and spec["LastRun"]


def test_keys_match_case_insensitively_like_gos_decoder(server: WebServer, maker: PodMaker,
                                                        endpoint: str) -> None:
    run = new_uuid()
    maker.khstate("case", run)
    pod = maker.pod("case", run)
    answer = post_report(server, b'{"ok": false, "errors": ["lower case keys"], "extra": 1}', source_ip=pod.ip,
                         path=endpoint)
    assert answer.status == 200, answer.text
    assert maker.get_khstate("case")["spec"]["Errors"] == ["lower case keys"]


def test_a_host_network_pod_whose_ip_matches_several_pods_reports_by_header(server: WebServer,
                                                                            maker: PodMaker) -> None:
    node_ip = pod_ip()
    runs = {name: new_uuid() for name in ("hn-a", "hn-b", "hn-c")}
    for name, run in runs.items():
        maker.khstate(name, run)
        maker.pod(name, run, ip=node_ip)
    answer = post_report(server, {"OK": False, "Errors": ["from b"]}, run_uuid=runs["hn-b"], source_ip=node_ip)
    assert answer.status == 200, answer.text
    assert maker.get_khstate("hn-b")["spec"]["Errors"] == ["from b"]
    assert maker.get_khstate("hn-a")["spec"]["Errors"] == []


def test_a_report_by_ip_is_refused_when_several_running_pods_share_that_ip(server: WebServer,
                                                                          maker: PodMaker) -> None:
    node_ip = pod_ip()
    runs = {name: new_uuid() for name in ("sh-a", "sh-b")}
    before = {name: maker.khstate(name, run) for name, run in runs.items()}
    for name, run in runs.items():
        maker.pod(name, run, ip=node_ip)
    answer = post_report(server, OK, source_ip=node_ip)
    assert_refused(answer.status, answer.text)
    assert "two or more" in answer.text
    for name in runs:
        assert rv(maker.get_khstate(name)) == rv(before[name])


def test_a_report_with_a_stale_uuid_is_rejected_and_changes_nothing(server: WebServer, maker: PodMaker,
                                                                    endpoint: str) -> None:
    old, current = new_uuid(), new_uuid()
    before = maker.khstate("stale", current)
    pod = maker.pod("stale", old)  # a pod of the previous run, still around
    for run_header in (old, None):
        answer = post_report(server, OK, run_uuid=run_header, source_ip=pod.ip, path=endpoint)
        assert_refused(answer.status, answer.text)  # a run the khstate never knew of: 400 on both endpoints
        assert "not properly whitelisted" in answer.text and old in answer.text
    assert rv(maker.get_khstate("stale")) == rv(before)


def test_a_report_of_an_earlier_run_of_the_check_is_over_410_on_v3s_endpoint_and_400_on_v2s(
        server: WebServer, maker: PodMaker, endpoint: str) -> None:
    old, current = new_uuid(), new_uuid()
    earlier = {"uuid": old, "start": "2026-01-01T00:00:00Z", "duration": "2s", "OK": True, "errors": [],
               "node": "", "pod": "kh-test-0", "outcome": "reported"}
    before = maker.khstate("earlier", current, history=[earlier])
    pod = maker.pod("earlier", old)  # the earlier run's pod, still around
    answer = post_report(server, OK, run_uuid=old, source_ip=pod.ip, path=endpoint)
    assert_refused(answer.status, answer.text, 410 if endpoint == V3_REPORT_PATH else 400)
    assert "not properly whitelisted" in answer.text
    assert rv(maker.get_khstate("earlier")) == rv(before)


def test_a_report_with_the_uuid_of_another_check_is_rejected_and_changes_nothing(
        server: WebServer, maker: PodMaker, endpoint: str) -> None:
    run_a, run_b = new_uuid(), new_uuid()
    before_a = maker.khstate("check-a", run_a)
    before_b = maker.khstate("check-b", run_b)
    # a pod annotated as check-a but carrying check-b's current run UUID
    pod = maker.pod("check-a", run_b, env_uuid=run_b)
    answer = post_report(server, OK, run_uuid=run_b, source_ip=pod.ip, path=endpoint)
    assert_refused(answer.status, answer.text)
    assert rv(maker.get_khstate("check-a")) == rv(before_a)
    assert rv(maker.get_khstate("check-b")) == rv(before_b)


def test_a_report_from_an_unknown_ip_is_rejected_and_changes_nothing(server: WebServer, maker: PodMaker,
                                                                     app: object, endpoint: str) -> None:
    run = new_uuid()
    before = maker.khstate("lonely", run)
    maker.pod("lonely", run)
    answer = post_report(server, OK, source_ip=pod_ip(), path=endpoint)
    assert_refused(answer.status, answer.text)
    assert "failed to find a pod" in answer.text
    assert rv(maker.get_khstate("lonely")) == rv(before)


def test_a_report_with_an_unknown_uuid_header_is_rejected_even_from_a_known_pod_ip(
        server: WebServer, maker: PodMaker, endpoint: str) -> None:
    run = new_uuid()
    before = maker.khstate("hdr", run)
    pod = maker.pod("hdr", run)
    answer = post_report(server, OK, run_uuid=new_uuid(), source_ip=pod.ip, path=endpoint)
    assert_refused(answer.status, answer.text)
    assert rv(maker.get_khstate("hdr")) == rv(before)


def test_a_pending_pod_cannot_report_by_ip(server: WebServer, maker: PodMaker, services: Services) -> None:
    run = new_uuid()
    before = maker.khstate("pending", run)
    pod = maker.pod("pending", run, running=False)
    set_pod_status(maker.cluster, maker.namespace, pod.name, "Pending", pod.ip)  # an IP, not yet Running
    wait_for(lambda: (p := services.pods.get(maker.namespace, pod.name)) is not None
             and (p.get("status") or {}).get("podIP") == pod.ip, what="the pod's IP in the cache")
    answer = post_report(server, OK, source_ip=pod.ip)
    assert_refused(answer.status, answer.text)
    assert rv(maker.get_khstate("pending")) == rv(before)


def test_a_pod_without_the_check_name_annotation_is_refused(server: WebServer, maker: PodMaker,
                                                            endpoint: str) -> None:
    run = new_uuid()
    before = maker.khstate("noanno", run)
    pod = maker.pod("noanno", run, annotate=False)
    answer = post_report(server, OK, run_uuid=run, source_ip=pod.ip, path=endpoint)
    assert_refused(answer.status, answer.text)
    assert "check name annotation" in answer.text
    assert rv(maker.get_khstate("noanno")) == rv(before)


def test_a_pod_without_a_run_uuid_env_var_is_refused(server: WebServer, maker: PodMaker,
                                                     endpoint: str) -> None:
    run = new_uuid()
    before = maker.khstate("noenv", run)
    pod = maker.pod("noenv", run, env_uuid=None)
    answer = post_report(server, OK, run_uuid=run, source_ip=pod.ip, path=endpoint)
    assert_refused(answer.status, answer.text)
    assert "KH_RUN_UUID" in answer.text
    assert rv(maker.get_khstate("noenv")) == rv(before)


@pytest.mark.parametrize(("body", "reason"), [
    (b'{"OK": true, "Errors": [', "Failed to unmarshal state json"),
    (b"not json at all", "Failed to unmarshal state json"),
    (b'{"OK": "yes"}', "Failed to unmarshal state json"),
    (b'["OK", true]', "Failed to unmarshal state json"),
    (b'{"OK": false}', "without any error strings"),
    (b'{"OK": false, "Errors": []}', "without any error strings"),
    (b"", "Failed to unmarshal state json"),
    (b'{"OK": false, "Errors": ["real", ""]}', "blank error string"),
    (b'{"OK": false, "Errors": ["  \\t "]}', "blank error string"),
    (b'{"OK": true, "Errors": ["but it failed"]}', "OK true with error strings"),
], ids=["bad-json", "not-json", "ok-not-bool", "array", "ok-false-no-errors", "ok-false-empty-errors",
        "empty-body", "blank-error", "whitespace-error", "ok-true-with-errors"])
def test_a_bad_body_from_a_valid_pod_is_rejected_and_changes_nothing(server: WebServer, maker: PodMaker,
                                                                     body: bytes, reason: str, endpoint: str) -> None:
    run = new_uuid()
    check = "body-" + uuid.uuid4().hex[:6]
    before = maker.khstate(check, run)
    pod = maker.pod(check, run)
    answer = post_report(server, body, run_uuid=run, source_ip=pod.ip, path=endpoint)
    assert_refused(answer.status, answer.text)
    assert reason in answer.text
    assert rv(maker.get_khstate(check)) == rv(before)


def test_a_body_over_one_mebibyte_is_refused_with_413_and_changes_nothing(server: WebServer,
                                                                          maker: PodMaker, endpoint: str) -> None:
    run = new_uuid()
    before = maker.khstate("big", run)
    pod = maker.pod("big", run)
    padding = "x" * MAX_BODY
    body = ('{"OK": false, "Errors": ["' + padding + '"]}').encode()
    answer = post_report(server, body, run_uuid=run, source_ip=pod.ip, path=endpoint)
    assert_refused(answer.status, answer.text, 413)
    chunked = request(server, "POST", endpoint, body, headers={"kh-run-uuid": run, "Content-Type": "application/json"},
                      source_ip=pod.ip, chunked=True)
    assert_refused(chunked.status, chunked.text, 413)
    assert rv(maker.get_khstate("big")) == rv(before)


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""],
                         ids=["text", "form", "none"])
def test_v3s_endpoint_refuses_a_report_not_sent_as_json_with_415_and_v2s_takes_it(
        server: WebServer, maker: PodMaker, content_type: str) -> None:
    run = new_uuid()
    before = maker.khstate("ctype", run)
    pod = maker.pod("ctype", run)
    answer = post_report(server, OK, run_uuid=run, source_ip=pod.ip, content_type=content_type, path=V3_REPORT_PATH)
    assert_refused(answer.status, answer.text, 415)
    assert "application/json" in answer.text
    assert rv(maker.get_khstate("ctype")) == rv(before)
    answer = post_report(server, OK, run_uuid=run, source_ip=pod.ip, content_type=content_type)
    assert answer.status == 200, answer.text  # v2 never looked at the header


def test_v3s_endpoint_takes_json_with_a_charset(server: WebServer, maker: PodMaker) -> None:
    run = new_uuid()
    maker.khstate("charset", run)
    pod = maker.pod("charset", run)
    answer = post_report(server, OK, run_uuid=run, source_ip=pod.ip, content_type="application/json; charset=utf-8",
                         path=V3_REPORT_PATH)
    assert answer.status == 200, answer.text


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_a_report_endpoint_answers_any_method_but_post_with_405_in_one_line(server: WebServer, endpoint: str,
                                                                             method: str) -> None:
    answer = request(server, method, endpoint, b"")
    assert_refused(answer.status, answer.text, 405)


def test_a_body_of_exactly_one_mebibyte_is_accepted(server: WebServer, maker: PodMaker) -> None:
    run = new_uuid()
    maker.khstate("edge", run)
    pod = maker.pod("edge", run)
    prefix, suffix = b'{"OK": true, "Errors": [], "pad": "', b'"}'
    body = prefix + b"x" * (MAX_BODY - len(prefix) - len(suffix)) + suffix
    assert len(body) == MAX_BODY
    answer = post_report(server, body, run_uuid=run, source_ip=pod.ip)
    assert answer.status == 200, answer.text


def test_a_report_waits_briefly_for_a_pod_the_cache_has_not_seen_yet(server: WebServer, maker: PodMaker,
                                                                     services: Services) -> None:
    run = new_uuid()
    maker.khstate("late", run)
    name = "late-" + uuid.uuid4().hex[:6]
    result: dict[str, object] = {}

    def report() -> None:
        a = post_report(server, OK, run_uuid=run, source_ip="127.0.0.1")
        result["status"], result["text"] = a.status, a.text

    t = threading.Thread(target=report)
    t.start()
    wait_for(lambda: services.pods.get(maker.namespace, name) is None, what="nothing yet")
    maker.pod("late", run, name=name, wait=False)
    t.join(30)
    assert result.get("status") == 200, result


def test_when_storing_fails_for_a_lasting_reason_the_answer_is_500(server: WebServer, maker: PodMaker,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    run = new_uuid()
    maker.khstate("broken", run)
    pod = maker.pod("broken", run)

    def fail(*_a: object, **_k: object) -> None:
        raise Forbidden("PUT khstates: forbidden")

    monkeypatch.setattr("kuberhealthy.web.report.routes.record_report", fail)
    answer = post_report(server, OK, run_uuid=run, source_ip=pod.ip)
    assert answer.status == 500
    assert "failed to store check state for broken" in answer.text


def test_a_report_the_api_cannot_store_now_is_accepted_held_and_written_when_it_answers(
        server: WebServer, maker: PodMaker, services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    run = new_uuid()
    before = maker.khstate("later", run)
    pod = maker.pod("later", run)

    def away(*_a: object, **_k: object) -> None:
        raise Unreachable("PUT khstates: connection refused")

    monkeypatch.setattr("kuberhealthy.web.report.routes.record_report", away)
    answer = post_report(server, {"OK": False, "Errors": ["disk full"]}, run_uuid=run, source_ip=pod.ip)
    assert answer.status == 200  # the checker must not spend its deadline retrying
    assert services.held.holds(run)
    assert rv(maker.get_khstate("later")) == rv(before)  # nothing written yet
    assert services.held.flush_once()  # the API answers again: the held report is written
    spec = maker.get_khstate("later")["spec"]
    assert spec["OK"] is False and spec["Errors"] == ["disk full"] and spec["LastRun"]
    assert not services.held.holds(run)


def test_a_pod_the_cache_never_saw_is_found_by_one_read(server: WebServer, maker: PodMaker,
                                                         services: Services) -> None:
    services.pods.stop()  # the cache stops following: only the fallback read can find the pod
    services.pods.join(10)
    run = new_uuid()
    maker.khstate("unseen", run)
    pod = maker.pod("unseen", run, wait=False)
    assert services.pods.get(maker.namespace, pod.name) is None
    answer = post_report(server, OK, run_uuid=run, source_ip=pod.ip)
    assert answer.status == 200, answer.text
    assert maker.get_khstate("unseen")["spec"].get("LastRun")


def test_when_the_caller_cannot_be_looked_up_the_answer_is_503_with_retry_after(
        server: WebServer, maker: PodMaker, services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    run = new_uuid()
    before = maker.khstate("dark", run)
    # the claim in the daemon's cache (it names the run): only the pod lookup is left to fail
    wait_for(lambda: services.khstates.get(before["metadata"]["namespace"], "dark"), 30, what="the khstate cached")

    def away(*_a: object, **_k: object) -> list[object]:
        raise Unreachable("GET pods: connection refused")

    monkeypatch.setattr(services, "read_checker_pods", away)
    answer = post_report(server, OK, run_uuid=run, source_ip=pod_ip())
    assert answer.status == 503 and answer.headers.get("retry-after")
    assert one_line(answer.text)
    assert rv(maker.get_khstate("dark")) == rv(before)


def test_each_report_logs_one_info_line_with_a_request_id_and_no_body(server: WebServer, maker: PodMaker,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    run = new_uuid()
    maker.khstate("logged", run)
    pod = maker.pod("logged", run)
    secret = "do-not-log-this-body"
    with caplog.at_level(logging.INFO, logger="kuberhealthy.web.report.routes"):
        ok = post_report(server, {"OK": False, "Errors": [secret]}, run_uuid=run, source_ip=pod.ip)
        bad = post_report(server, {"OK": False}, run_uuid=run, source_ip=pod.ip)
    assert ok.status == 200 and bad.status == 400
    lines = [r for r in caplog.records if r.name == "kuberhealthy.web.report.routes" and r.levelno >= logging.INFO]
    assert len(lines) == 2
    for record, answer in zip(lines, (ok, bad), strict=True):
        message = record.getMessage()
        assert answer.headers["x-request-id"] in message
        assert secret not in message
    assert pod.name in lines[0].getMessage() and "stored" in lines[0].getMessage()
    assert "refused" in lines[1].getMessage()


@pytest.fixture
def ipv6_server(app: Flask) -> Iterator[WebServer]:
    try:
        s = serve(app, host="::1")
    except OSError as e:  # no IPv6 loopback on this machine
        pytest.skip(f"no IPv6 loopback: {e}")
    try:
        yield s
    finally:
        s.stop()


def test_a_report_from_an_ipv6_pod_address_is_identified(ipv6_server: WebServer, maker: PodMaker) -> None:
    run = new_uuid()
    maker.khstate("six", run)
    maker.pod("six", run, ip="::1")
    answer = post_report(ipv6_server, {"OK": False, "Errors": ["over v6"]}, source_ip="::1")
    assert answer.status == 200, answer.text
    assert maker.get_khstate("six")["spec"]["Errors"] == ["over v6"]


def test_an_ipv4_caller_seen_through_a_dual_stack_socket_is_identified(app: Flask, maker: PodMaker) -> None:
    try:
        srv = serve(app, host="::")
    except OSError as e:
        pytest.skip(f"no dual-stack socket: {e}")
    try:
        run = new_uuid()
        maker.khstate("dual", run)
        pod = maker.pod("dual", run)
        answer = post_report(srv.port, OK, source_ip=pod.ip)  # to 127.0.0.1
        assert answer.status == 200, answer.text
    finally:
        srv.stop()
