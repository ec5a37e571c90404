"""v3's routes over the in-memory fakes (web/v3/, web/checkkinds.py, web/runrequest.py): `/json` in v3's
shape, units and keys, from the caches only; `/api/run` as the JSON API's run now, one sequence for
both routes; `/api/events` in v3's shape, one bounded read; `/api/logs` and `/api/logs/stream` only for
a pod of the named check, behind exposeLogs, streams bounded in bytes, time and number."""
from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from kuberhealthy.base.errors import BadRequest, Forbidden, Unreachable
from kuberhealthy.base.times import format_time
from kuberhealthy.kube import EVENTS, KHCHECKS, KHJOBS, KHSTATES, PODS, Obj
from kuberhealthy.kube.resources import PodLogFollow, Resources
from kuberhealthy.records import khstate, pause, runnow
from kuberhealthy.records.checkpod import APP_LABEL, APP_LABEL_VALUE, CHECK_NAME_LABEL, RUN_ID_LABEL
from kuberhealthy.web import create_app
from kuberhealthy.web.checkkinds import CheckKinds, Wanted, check_kinds
from kuberhealthy.web.parts import part
from kuberhealthy.web.v3 import events, logs
from kuberhealthy.web.v3.summary import Summary
from testbed.fakes import NS, POD_NAME, FakeServices, fake_config, khcheck, khjob, khstate_of

HOUR = 3600.0


class FakeFollow:
    """A followed log that gives its lines, then waits (a quiet pod) until released or closed."""

    def __init__(self, lines: list[bytes], hold: bool) -> None:
        self.lines = lines
        self.closed = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()

    def __iter__(self) -> Iterator[bytes]:
        yield from self.lines
        self.release.wait(5)

    def close(self) -> None:
        self.closed.set()


class V3Services(FakeServices):
    """FakeServices with the two reads the v3 routes add (services.read_check_events, .follow_pod_log)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.follows: list[tuple[tuple[str, str, str | None, int, float], FakeFollow]] = []
        self.hold = False  # streams wait after their lines until released

    def read_check_events(self, namespace: str, kind: str, name: str, limit: int, timeout: float) -> list[Obj]:
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        items, _ = self.api.list(EVENTS, namespace, field_selector=selector)
        return items[:limit]

    def follow_pod_log(self, namespace: str, pod: str, container: str | None, limit_bytes: int,
                       seconds: float) -> FakeFollow:
        self.api.get(PODS, namespace, pod)  # the fake API's faults and 404s
        text = self.api.logs.get((namespace, pod), "")
        follow = FakeFollow([line.encode() for line in text.splitlines(keepends=True)], self.hold)
        self.follows.append(((namespace, pod, container, limit_bytes, seconds), follow))
        return follow


@pytest.fixture
def services() -> V3Services:
    return V3Services(config=fake_config(expose_logs=True))


@pytest.fixture
def v3app(services: V3Services) -> Flask:
    return create_app(services, caller_wait=0.0)


@pytest.fixture
def web(v3app: Flask) -> FlaskClient:
    return v3app.test_client()


def ran(services: FakeServices, name: str, ok: bool, namespace: str = NS, ago: float = 60, **spec: Any) -> None:
    """A khcheck that ran `ago` seconds ago, OK or failing with "<name> is broken"."""
    services.api.put(KHCHECKS, khcheck(name, namespace, run_interval="10m", timeout="90s", **spec))
    services.api.put(KHSTATES, khstate_of(name, namespace, OK=ok, Errors=[] if ok else [f"{name} is broken"],
                                          LastRun=format_time(time.time() - ago), RunDuration="1.5s",
                                          AuthoritativePod=POD_NAME))


def checker(services: FakeServices, check: str, name: str, phase: str = "Running", namespace: str = NS,
            log: str = "") -> Obj:
    pod: Obj = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace,
                             "labels": {APP_LABEL: APP_LABEL_VALUE, CHECK_NAME_LABEL: check,
                                        RUN_ID_LABEL: str(uuid.uuid4())}},
                "spec": {"containers": [{"name": "main"}, {"name": "sidecar"}]},
                "status": {"phase": phase}}
    services.api.put(PODS, pod)
    services.api.logs[(namespace, name)] = log
    return pod


def summary(web: FlaskClient, query: str = "") -> dict[str, Any]:
    resp = web.get("/json" + query)
    assert resp.status_code == 200 and resp.content_type == "application/json; charset=utf-8"
    doc: dict[str, Any] = json.loads(resp.data)
    return doc


def api_reads(services: FakeServices) -> list[str]:
    return [c.method for c in services.api.made()]


# --- /json ---------------------------------------------------------------------------------------------

def test_json_is_v3_s_summary_indented_with_v3_s_names_units_and_omitted_zero_values(
        services: V3Services, web: FlaskClient) -> None:
    ran(services, "dns", ok=False)
    services.api.put(KHCHECKS, khcheck("fresh", run_interval="2m", timeout="1m30.9s"))  # never ran
    text = web.get("/json").get_data(as_text=True)
    doc = json.loads(text)
    assert list(doc) == ["OK", "Errors", "CheckDetails", "CurrentMaster", "Metadata"]
    assert text.startswith('{\n  "OK": false,\n  "Errors": [\n    "dns is broken"\n  ],\n') and not text.endswith("\n")
    dns = doc["CheckDetails"]["dns"]
    assert list(dns) == ["ok", "errors", "runDuration", "namespace", "currentUUID", "lastRunUnix", "nextRunUnix",
                         "timeoutSeconds", "runIntervalSeconds"]
    assert dns["runDuration"] == 1_500_000_000  # Go's time.Duration: integer nanoseconds
    assert dns["currentUUID"] == "" and dns["timeoutSeconds"] == 90 and dns["runIntervalSeconds"] == 600
    assert dns["nextRunUnix"] - dns["lastRunUnix"] == 600 and abs(dns["lastRunUnix"] - (time.time() - 60)) < 5
    assert doc["CheckDetails"]["fresh"] == {"ok": False, "namespace": NS, "currentUUID": "", "timeoutSeconds": 90,
                                            "runIntervalSeconds": 120}
    assert doc["CurrentMaster"] == POD_NAME and doc["Metadata"] == {}


def test_json_keys_a_name_two_checks_share_by_namespace_and_a_filtered_set_by_name_again(
        services: V3Services, web: FlaskClient) -> None:
    ran(services, "web", ok=True)
    ran(services, "web", ok=True, namespace="other")
    ran(services, "dns", ok=True)
    assert sorted(summary(web)["CheckDetails"]) == ["dns", f"{NS}/web", "other/web"]
    assert sorted(summary(web, "?namespace=other")["CheckDetails"]) == ["web"]
    assert sorted(summary(web, f"?namespace=,{NS},")["CheckDetails"]) == ["dns", "web"]
    assert summary(web, "?namespace=nowhere")["CheckDetails"] == {}


def test_a_paused_failing_check_and_a_check_that_never_ran_do_not_fail_the_top_level(
        services: V3Services, web: FlaskClient) -> None:
    ran(services, "web", ok=True)
    ran(services, "dns", ok=False)
    services.api.edit(KHCHECKS, NS, "dns", lambda o: o["metadata"].__setitem__(
        "annotations", {pause.PAUSED_UNTIL: format_time(time.time() + HOUR)}))
    services.api.put(KHCHECKS, khcheck("fresh"))
    doc = summary(web)
    assert doc["OK"] is True and doc["Errors"] == []
    assert doc["CheckDetails"]["dns"]["ok"] is False and doc["CheckDetails"]["fresh"]["ok"] is False


def test_a_khjob_is_not_in_json(services: V3Services, web: FlaskClient) -> None:
    services.api.put(KHJOBS, khjob("once"))
    assert summary(web)["CheckDetails"] == {}


def test_a_run_in_flight_shows_its_pod_and_start_and_no_next_run(services: V3Services, web: FlaskClient) -> None:
    ran(services, "dns", ok=True, ago=600)
    khstate.claim_run(khstate.RunWrite(services.resources, NS, "dns", "run-2", POD_NAME), run_pod="dns-2",
                      run_key_sha256="x")
    pod = checker(services, "dns", "dns-2")
    started = int(time.time()) - 5
    services.api.edit(PODS, NS, "dns-2", lambda p: p["metadata"].__setitem__("creationTimestamp", format_time(started)))
    dns = summary(web)["CheckDetails"]["dns"]
    assert dns["podName"] == pod["metadata"]["name"] and dns["lastRunUnix"] == started
    assert "nextRunUnix" not in dns and dns["currentUUID"] == ""


def test_json_reads_only_the_caches_and_renders_a_check_again_only_when_it_changed(
        services: V3Services, v3app: Flask, web: FlaskClient) -> None:
    for i in range(5):
        ran(services, f"check-{i}", ok=True)
    summary(web)
    rendered = part(Summary, v3app).rendered
    for _ in range(3):
        summary(web)
    assert part(Summary, v3app).rendered == rendered == 5
    ran(services, "check-3", ok=False)
    assert summary(web)["CheckDetails"]["check-3"]["ok"] is False
    assert part(Summary, v3app).rendered == 6
    services.master = "kh-test-1"  # the Lease changed hands: the kept page is not served again
    assert summary(web)["CurrentMaster"] == "kh-test-1"
    services.api.remove(KHCHECKS, NS, "check-0")
    assert "check-0" not in summary(web)["CheckDetails"]
    assert services.api.made() == []


def test_json_refuses_a_request_with_a_body(web: FlaskClient) -> None:
    resp = web.get("/json", data=b'{"OK": true}')
    assert resp.status_code == 400 and resp.mimetype == "text/plain"


# --- /api/run --------------------------------------------------------------------------------------------

def annotation(services: FakeServices, name: str, kind: Any = KHCHECKS) -> str | None:
    return runnow.requested(services.api.peek(kind, NS, name))


def test_api_run_sets_the_run_now_annotation_and_a_second_request_on_either_route_is_409(
        services: V3Services, web: FlaskClient) -> None:
    ran(services, "dns", ok=True)
    resp = web.post(f"/api/run?namespace={NS}&healthcheck=dns")
    assert resp.status_code == 202 and resp.get_json()["kind"] == "check"
    assert annotation(services, "dns") is not None
    assert services.events.recorded == [("CheckRunRequested", f"{NS}/dns", "api")]
    again = web.post(f"/api/checks/{NS}/dns/run")
    assert again.status_code == 409 and "already requested" in again.get_data(as_text=True)
    assert web.post(f"/api/run?namespace={NS}&healthcheck=dns").status_code == 409


@pytest.mark.parametrize(("query", "status"), [
    ("namespace=" + NS, 400), ("healthcheck=dns", 400), ("namespace=%20&healthcheck=%20", 400),
    (f"namespace={NS}&healthcheck=nothing", 404), (f"namespace={NS}&healthcheck=once", 409),
    (f"namespace=other&healthcheck={NS}/dns", 400),
])
def test_api_run_refuses_what_v2_s_run_route_refuses_and_v3_s_missing_parameters(
        services: V3Services, web: FlaskClient, query: str, status: int) -> None:
    ran(services, "dns", ok=True)
    services.api.put(KHJOBS, khjob("once"))
    resp = web.post(f"/api/run?{query}")
    assert resp.status_code == status and resp.mimetype == "text/plain"
    assert annotation(services, "dns") is None and services.events.recorded == []


def test_api_run_takes_json_s_key_for_a_name_two_namespaces_share(services: V3Services, web: FlaskClient) -> None:
    ran(services, "web", ok=True)
    ran(services, "web", ok=True, namespace="other")
    assert web.post("/api/run?healthcheck=other/web").status_code == 202
    assert runnow.requested(services.api.peek(KHCHECKS, "other", "web")) is not None
    assert annotation(services, "web") is None


def test_api_run_is_refused_cross_site_off_without_enable_run_api_and_rate_limited(services: V3Services) -> None:
    ran(services, "dns", ok=True)
    web = create_app(services, caller_wait=0.0).test_client()
    resp = web.post(f"/api/run?namespace={NS}&healthcheck=dns",
                    headers={"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"})
    assert resp.status_code == 403
    assert web.post(f"/api/run?namespace={NS}&healthcheck=dns", data="x",
                    content_type="text/plain").status_code == 403
    off = V3Services(config=fake_config(enable_run_api=False))
    ran(off, "dns", ok=True)
    off_web = create_app(off, caller_wait=0.0).test_client()
    assert off_web.post(f"/api/run?namespace={NS}&healthcheck=dns").status_code == 404
    slow = V3Services(config=fake_config(report_rate_limit=0.01, report_rate_burst=1))
    ran(slow, "a", ok=True)
    ran(slow, "b", ok=True)
    client = create_app(slow, caller_wait=0.0).test_client()
    assert client.post(f"/api/run?namespace={NS}&healthcheck=a").status_code == 202
    limited = client.post(f"/api/run?namespace={NS}&healthcheck=b")
    assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
    assert annotation(services, "dns") is None and annotation(slow, "b") is None


def test_api_run_is_409_while_a_run_is_in_flight(services: V3Services, web: FlaskClient) -> None:
    ran(services, "dns", ok=True)
    khstate.claim_run(khstate.RunWrite(services.resources, NS, "dns", "run-2", POD_NAME), run_pod="dns-2",
                      run_key_sha256="x")
    checker(services, "dns", "dns-2")
    resp = web.post(f"/api/run?namespace={NS}&healthcheck=dns")
    assert resp.status_code == 409 and "in flight" in resp.get_data(as_text=True)


# --- /api/events ---------------------------------------------------------------------------------------

def event(name: str, involved: str, reason: str, last: float | None, kind: str = "KuberhealthyCheck",
          message: str = "m") -> Obj:
    body: Obj = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": NS},
                 "involvedObject": {"kind": kind, "name": involved, "namespace": NS},
                 "reason": reason, "message": message, "type": "Warning"}
    if last is not None:
        body["lastTimestamp"] = format_time(last)
    return body


def test_api_events_lists_the_check_s_events_in_v3_s_shape_oldest_first(
        services: V3Services, web: FlaskClient) -> None:
    ran(services, "dns", ok=False)
    now = int(time.time())
    services.api.put(EVENTS, event("dns.b", "dns", "CheckFailed", now - 10, message="a <b>"))
    services.api.put(EVENTS, event("dns.a", "dns", "CheckRunRequested", now - 100))
    written = event("dns.c", "dns", "ThroughEventsV1", None)  # events.k8s.io: eventTime, no lastTimestamp
    written["eventTime"] = format_time(now - 50).replace("Z", ".123456Z")
    services.api.put(EVENTS, written)
    services.api.put(EVENTS, event("web.a", "web", "CheckFailed", now))
    services.api.put(EVENTS, event("dns.j", "dns", "CheckFailed", now, kind="KuberhealthyJob"))
    resp = web.get(f"/api/events?namespace={NS}&healthcheck=dns")
    assert resp.status_code == 200 and resp.content_type == "application/json; charset=utf-8"
    assert resp.data.endswith(b"]\n") and b"\\u003cb\\u003e" in resp.data  # Go's Encoder
    assert json.loads(resp.data) == [
        {"message": "m", "reason": "CheckRunRequested", "type": "Warning", "lastTimestamp": now - 100},
        {"message": "m", "reason": "ThroughEventsV1", "type": "Warning", "lastTimestamp": now - 50},
        {"message": "a <b>", "reason": "CheckFailed", "type": "Warning", "lastTimestamp": now - 10}]


def test_an_event_with_no_time_at_all_has_no_last_timestamp_and_only_the_newest_are_answered() -> None:
    timeless: Obj = {"reason": "Odd", "message": "m", "type": "Normal"}
    timed = [{"reason": f"R{i}", "message": "", "type": "Normal", "lastTimestamp": format_time(1000 + i)}
             for i in range(5)]
    assert json.loads(events.render([timed[3], timeless, *timed[:3], timed[4]], shown=3)) == [
        {"message": "", "reason": f"R{i}", "type": "Normal", "lastTimestamp": 1000 + i} for i in (2, 3, 4)]
    assert json.loads(events.render([timeless])) == [{"message": "m", "reason": "Odd", "type": "Normal"}]


def test_api_events_answers_400_404_503_and_500_and_is_rate_limited(services: V3Services, web: FlaskClient) -> None:
    ran(services, "dns", ok=True)
    assert web.get(f"/api/events?namespace={NS}").status_code == 400
    assert web.get(f"/api/events?namespace={NS}&healthcheck=nothing").status_code == 404
    services.api.fail("list", EVENTS, Unreachable("connection refused"))
    away = web.get(f"/api/events?namespace={NS}&healthcheck=dns")
    assert away.status_code == 503 and away.headers["Retry-After"]
    services.api.fail("list", EVENTS, Forbidden("events is forbidden"))
    assert web.get(f"/api/events?namespace={NS}&healthcheck=dns").status_code == 500
    slow = V3Services(config=fake_config(report_rate_limit=0.01, report_rate_burst=1))
    ran(slow, "dns", ok=True)
    client = create_app(slow, caller_wait=0.0).test_client()
    assert client.get(f"/api/events?namespace={NS}&healthcheck=dns").status_code == 200
    assert client.get(f"/api/events?namespace={NS}&healthcheck=dns").status_code == 429


# --- /api/logs and /api/logs/stream -------------------------------------------------------------------------

def logs_url(check: str, pod: str, extra: str = "", stream: bool = False) -> str:
    return f"/api/logs{'/stream' if stream else ''}?namespace={NS}&healthcheck={check}&pod={pod}{extra}"


def test_api_logs_gives_a_pod_of_the_check_as_json_or_text(services: V3Services, web: FlaskClient) -> None:
    ran(services, "dns", ok=False)
    checker(services, "dns", "dns-1", phase="Failed", log="looking up\nerror: <nxdomain>\n")
    body = web.get(logs_url("dns", "dns-1")).get_json()
    assert body == {"namespace": NS, "healthcheck": "dns", "kind": "check", "pod": "dns-1", "container": "main",
                    "phase": "Failed", "log": "looking up\nerror: <nxdomain>\n"}
    text = web.get(logs_url("dns", "dns-1", "&format=text"))
    assert text.status_code == 200 and text.content_type == "text/plain; charset=utf-8"
    assert text.headers["X-Content-Type-Options"] == "nosniff" and text.data == b"looking up\nerror: <nxdomain>\n"
    assert web.get(logs_url("dns", "dns-1", "&format=html")).status_code == 406
    assert web.get(logs_url("dns", "dns-1", "&container=sidecar")).get_json()["container"] == "sidecar"


@pytest.mark.parametrize(("check", "pod", "extra", "status"), [
    ("dns", "web-1", "", 403),  # a pod of another check: its name proves nothing
    ("dns", "stranger", "", 403),  # a checker pod no check of that name labels
    ("dns", "gone", "", 404),
    ("nothing", "dns-1", "", 404),
    ("dns", "dns-1", "&container=other", 404),
    ("dns", "dns-pending", "", 409),
    ("dns", "", "", 400),
])
def test_api_logs_reads_no_pod_but_a_started_one_of_the_named_check(
        services: V3Services, web: FlaskClient, check: str, pod: str, extra: str, status: int) -> None:
    ran(services, "dns", ok=True)
    ran(services, "web", ok=True)
    checker(services, "dns", "dns-1", log="mine\n")
    checker(services, "dns", "dns-pending", phase="Pending")
    checker(services, "web", "web-1", log="secret of web\n")
    checker(services, "other-check", "stranger", log="secret\n")
    for stream in (False, True):
        resp = web.get(logs_url(check, pod, extra, stream=stream))
        assert resp.status_code == status and resp.mimetype == "text/plain", resp.data
    assert "pod_log" not in api_reads(services) and services.follows == []


def test_logs_are_403_without_expose_logs(services: V3Services) -> None:
    shy = V3Services()
    ran(shy, "dns", ok=True)
    checker(shy, "dns", "dns-1", log="x\n")
    web = create_app(shy, caller_wait=0.0).test_client()
    for stream in (False, True):
        resp = web.get(logs_url("dns", "dns-1", stream=stream))
        assert resp.status_code == 403 and "exposeLogs" in resp.get_data(as_text=True)
    assert "pod_log" not in api_reads(shy) and shy.follows == []


def test_a_log_the_api_cannot_give_is_409_for_a_waiting_container_and_503_when_away(
        services: V3Services, web: FlaskClient) -> None:
    ran(services, "dns", ok=True)
    checker(services, "dns", "dns-1", log="x\n")
    services.api.fail("pod_log", PODS, BadRequest('container "main" in pod "dns-1" is waiting to start'))
    assert web.get(logs_url("dns", "dns-1")).status_code == 409
    services.api.fail("pod_log", PODS, Unreachable("connection refused"))
    assert web.get(logs_url("dns", "dns-1")).status_code == 503


def test_a_stream_passes_the_log_on_and_is_bounded_by_the_check_s_timeout_and_bytes(
        services: V3Services, web: FlaskClient) -> None:
    ran(services, "dns", ok=True)  # timeout 90s
    checker(services, "dns", "dns-1", log="one\ntwo\n")
    resp = web.get(logs_url("dns", "dns-1", stream=True))
    assert resp.status_code == 200 and resp.content_type == "text/plain; charset=utf-8"
    assert resp.data == b"one\ntwo\n"
    (args, follow), = services.follows
    assert args == (NS, "dns-1", "main", logs.FOLLOW_BYTES, 90 + logs.FOLLOW_MARGIN)
    assert follow.closed.is_set()
    assert logs.follow_seconds(10 * HOUR) == logs.FOLLOW_MAX and logs.follow_seconds(None) == 60 + logs.FOLLOW_MARGIN


def test_a_head_request_for_a_stream_opens_none(services: V3Services, web: FlaskClient) -> None:
    ran(services, "dns", ok=True)
    checker(services, "dns", "dns-1", log="one\n")
    resp = web.head(logs_url("dns", "dns-1", stream=True))
    assert resp.status_code == 200 and resp.data == b"" and services.follows == []


def test_a_stream_stops_at_its_byte_cap() -> None:
    follow = FakeFollow([b"x" * 10 + b"\n"] * 10, hold=False)
    slots = threading.BoundedSemaphore(1)
    slots.acquire()
    body = logs.Streamed(follow, 25, slots)
    assert b"".join(body) == (b"x" * 10 + b"\n") * 2 + b"xxx"
    assert follow.closed.is_set() and slots.acquire(blocking=False)  # the slot came back


def test_at_most_two_streams_are_open_at_once_and_a_closed_one_frees_its_slot(
        services: V3Services, web: FlaskClient) -> None:
    ran(services, "dns", ok=True)
    checker(services, "dns", "dns-1", log="line\n")
    services.hold = True
    open_ = [web.get(logs_url("dns", "dns-1", stream=True), buffered=False) for _ in range(logs.FOLLOWS)]
    assert all(r.status_code == 200 for r in open_)
    third = web.get(logs_url("dns", "dns-1", stream=True))
    assert third.status_code == 503 and third.headers["Retry-After"]
    open_[0].close()  # the client went away before reading: the server closes the body
    assert services.follows[0][1].closed.is_set()
    fourth = web.get(logs_url("dns", "dns-1", stream=True), buffered=False)
    assert fourth.status_code == 200
    for resp in (*open_[1:], fourth):
        resp.close()
    for _, follow in services.follows:
        follow.release.set()
        assert follow.closed.is_set()


# --- the parts --------------------------------------------------------------------------------------------

def test_a_healthcheck_parameter_may_be_a_name_or_a_json_key(services: V3Services) -> None:
    kinds = check_kinds(services)
    prefixed = dataclasses.replace(kinds.kinds[0], name="healthcheck", entry_kind="healthcheck", prefix="hc:")
    both = CheckKinds([*kinds.kinds, prefixed])
    order = ("healthcheck", "khcheck", "khjob")
    assert both.wanted("ns", "dns", order) == Wanted("ns", "dns", order)
    assert both.wanted("", "ns/dns", order) == Wanted("ns", "dns", ("khcheck", "khjob", "healthcheck"))
    assert both.wanted("ns", "ns/hc:dns", order) == Wanted("ns", "dns", ("healthcheck",))
    assert both.wanted("other", "ns/dns", order) == "healthcheck ns/dns is not in namespace other"
    assert both.wanted("ns", " ", order) == "both namespace and healthcheck are required"


class FakeKube:
    """Kube's request (pages of a list) and stream surface, for Resources."""

    def __init__(self, pages: list[tuple[list[Obj], str]] | None = None, lines: list[bytes] | None = None,
                 quiet: threading.Event | None = None) -> None:
        self.pages = pages or []
        self.asked: list[dict[str, Any]] = []
        self.lines = lines or []
        self.quiet = quiet
        self.shut = threading.Event()

    def request(self, method: str, path: str, *, query: dict[str, Any], timeout: float) -> Obj:
        self.asked.append(dict(query))
        items, token = self.pages[len(self.asked) - 1]
        return {"items": items, "metadata": {"continue": token}}

    def open_stream(self, path: str, query: dict[str, Any], read_timeout: float) -> FakeKube:
        self.asked.append({"path": path, **query, "read_timeout": read_timeout})
        return self

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        yield from self.lines

    def shutdown(self) -> None:
        self.shut.set()


def test_a_bounded_list_stops_at_its_limit_and_says_whether_it_saw_everything() -> None:
    pages = [([{"n": i} for i in range(500)], "next"), ([{"n": i} for i in range(500, 1000)], "more")]
    kube = FakeKube(pages)
    items, complete = Resources(kube).list_bounded(EVENTS, NS, field_selector="x=y", max_items=700)  # type: ignore[arg-type]
    assert len(items) == 700 and not complete
    assert [q["limit"] for q in kube.asked] == [500, 200] and kube.asked[1]["continue"] == "next"
    kube = FakeKube([([{"n": 1}], "")])
    assert Resources(kube).list_bounded(EVENTS, NS, max_items=700) == ([{"n": 1}], True)  # type: ignore[arg-type]


def test_a_followed_log_ends_at_its_deadline_and_is_shut_when_it_ends() -> None:
    kube = FakeKube(lines=[b"a\nb\n", b"c\n"])
    follow = Resources(kube).follow_pod_log(NS, "dns-1", "main", 1000, 30.0)  # type: ignore[arg-type]
    assert kube.asked[0] == {"path": f"/api/v1/namespaces/{NS}/pods/dns-1/log", "follow": "true",
                             "limitBytes": 1000, "container": "main", "read_timeout": 30.0}
    assert list(follow) == [b"a\n", b"b\n", b"c\n"] and kube.shut.is_set()
    now = [0.0]
    late = PodLogFollow(FakeKube(lines=[b"a\nb\nc\n"]), deadline=1.5, clock=lambda: now[0])
    got = []
    for line in late:
        got.append(line)
        now[0] += 1.0
    assert got == [b"a\n", b"b\n"]
