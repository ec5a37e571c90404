"""The JSON API (/api/checks) and run requests over real services (API server + caches) and a real HTTP
server: shapes and types, the filter, 404s, the run-now annotation a request sets, its refusals, and the
per-check metric families."""
from __future__ import annotations

import dataclasses
import json
import time
import uuid
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from kuberhealthy.base.times import format_datetime, parse_time, utcnow
from kuberhealthy.daemon.services import Services
from kuberhealthy.records import khstate
from kuberhealthy.records.runnow import RUN_NOW_ANNOTATION
from testbed.clients.formats import promtool_check
from testbed.clients.rawhttp import Answer, assert_one_line_plain_text, request
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khc, khcheck, khj, khjob
from testbed.daemons.inprocess import POD_NAME, PodMaker, WebServer, history_keys, wait_cached
from testbed.wait import wait_for


def add_check(cluster: TestCluster, services: Services, ns: str, name: str, **kw: Any) -> dict[str, Any]:
    created: dict[str, Any] = cluster.request("POST", khc(ns), khcheck(name, **kw))
    wait_for(lambda: services.khchecks.get(ns, name) is not None, 15, what=f"khcheck {name} in the cache")
    return created


def get(server: WebServer, path: str) -> tuple[Answer, Any]:
    answer = request(server, "GET", path)
    return answer, (json.loads(answer.text) if answer.status == 200 else None)


def post_run(server: WebServer, ns: str, name: str) -> Answer:
    return request(server, "POST", f"/api/checks/{ns}/{name}/run")


def start_a_run(maker: PodMaker, services: Services, name: str) -> tuple[str, str]:
    """A run of the check in flight, as the runner leaves it: claimed in the khstate, its pod Running.
    Returns (run uuid, pod name)."""
    run_uuid, pod = str(uuid.uuid4()), f"{name}-{uuid.uuid4().hex[:6]}"
    khstate.claim_run(khstate.RunWrite(services.resources, maker.namespace, name, run_uuid, POD_NAME), run_pod=pod,
                      run_key_sha256="x")
    maker.pod(name, run_uuid, name=pod)
    wait_cached(services, maker.namespace, name, lambda o: khstate.RunClaim.of(o).pod == pod)
    return run_uuid, pod


def annotation(cluster: TestCluster, ns: str, name: str) -> str | None:
    meta = cluster.request("GET", khc(ns, name))["metadata"]
    return (meta.get("annotations") or {}).get(RUN_NOW_ANNOTATION)


# --- reading -------------------------------------------------------------------------------------------

def test_every_check_and_job_is_listed_with_numbers_rfc3339_times_counters_and_history(
        cluster: TestCluster, server: WebServer, maker: PodMaker, services: Services) -> None:
    ns = maker.namespace
    now = time.time()
    add_check(cluster, services, ns, "alpha", interval="2m", timeout="30s")
    add_check(cluster, services, ns, "fresh", interval="1h", timeout="1m")
    cluster.request("POST", khj(ns), khjob("alpha", timeout="45s"))
    last_run = format_datetime(utcnow())
    maker.khstate("alpha", "u-finished", OK=False, Errors=["broken 2"], RunDuration="2.5s", Node="node-1",
                  LastRun=last_run, **history_keys("oof", now))
    wait_cached(services, ns, "alpha")
    wait_for(lambda: services.khjobs.get(ns, "alpha") is not None, 15, what="the khjob in the cache")

    answer, doc = get(server, "/api/checks")
    assert answer.status == 200 and answer.headers["content-type"] == "application/json"
    entries = doc["checks"]
    assert [(e["name"], e["kind"]) for e in entries] == [("alpha", "check"), ("alpha", "job"), ("fresh", "check")]
    alpha, alpha_job, fresh = entries
    assert alpha["namespace"] == ns and alpha["state"] == "failing"
    assert (alpha["interval"], alpha["timeout"], alpha["runDuration"]) == (120, 30, 2.5)
    for key in ("interval", "timeout", "runDuration", "durationP50", "durationP95", "uptime"):
        assert isinstance(alpha[key], (int, float)) and not isinstance(alpha[key], bool), key
    assert alpha["lastRun"] == last_run and parse_time(alpha["nextRun"]) == parse_time(last_run) + 120
    assert (alpha["consecutiveFailures"], alpha["successCount"], alpha["failureCount"]) == (1, 2, 1)
    assert parse_time(alpha["lastOK"]) is not None and parse_time(alpha["lastFailure"]) is not None
    assert alpha["uptime"] == 2 / 3 and alpha["uptime24h"] is None  # three minutes of history, not 24 h
    assert alpha["errors"] == ["broken 2"] and alpha["currentRun"] is None
    assert [h["OK"] for h in alpha["history"]] == [False, True, True]
    assert all(parse_time(h["start"]) is not None for h in alpha["history"])
    assert "logs" not in alpha["history"][0]  # exposeLogs is off by default
    assert alpha_job["interval"] is None and alpha_job["timeout"] == 45 and alpha_job["state"] == "failing"
    assert fresh["state"] == "never-run" and fresh["lastRun"] is None and fresh["nextRun"] is None
    assert (fresh["consecutiveFailures"], fresh["successCount"], fresh["history"]) == (0, 0, [])
    assert fresh["uptime24h"] is None and fresh["currentRun"] is None
    assert "u-finished" not in answer.text


def test_the_namespace_filter_and_one_check_by_name(cluster: TestCluster, server: WebServer, maker: PodMaker,
                                                    services: Services) -> None:
    ns = maker.namespace
    add_check(cluster, services, ns, "solo")
    assert [e["name"] for e in get(server, f"/api/checks?namespace={ns}")[1]["checks"]] == ["solo"]
    assert [e["name"] for e in get(server, f"/api/checks?namespace=,{ns},elsewhere")[1]["checks"]] == ["solo"]
    assert get(server, "/api/checks?namespace=elsewhere")[1] == {"checks": []}
    answer, doc = get(server, f"/api/checks/{ns}/solo")
    assert answer.status == 200 and [(e["name"], e["kind"]) for e in doc["checks"]] == [("solo", "check")]

    missing = request(server, "GET", f"/api/checks/{ns}/nothing-here")
    assert missing.status == 404 and f"{ns}/nothing-here" in missing.text
    assert_one_line_plain_text(missing)


def test_the_run_in_flight_is_shown_with_its_phase_pod_and_start_but_never_its_uuid(
        cluster: TestCluster, server: WebServer, maker: PodMaker, services: Services) -> None:
    ns = maker.namespace
    add_check(cluster, services, ns, "busy")
    run_uuid, pod = start_a_run(maker, services, "busy")

    def current() -> dict[str, Any] | None:
        run: dict[str, Any] | None = get(server, f"/api/checks/{ns}/busy")[1]["checks"][0]["currentRun"]
        return run if run and run["phase"] == "Running" else None
    run = wait_for(current, 15, what="the run in flight on the API")
    assert set(run) == {"phase", "pod", "started"} and run["pod"] == pod and parse_time(run["started"])
    assert run_uuid not in request(server, "GET", "/api/checks").text


# --- run requests --------------------------------------------------------------------------------------

def test_a_run_request_sets_the_annotation_raises_an_event_and_a_second_one_is_refused(
        cluster: TestCluster, server: WebServer, maker: PodMaker, services: Services) -> None:
    ns = maker.namespace
    created = add_check(cluster, services, ns, "wanted")
    answer = post_run(server, ns, "wanted")
    assert answer.status == 202, answer
    body = json.loads(answer.text)
    assert (body["namespace"], body["name"], body["kind"], body["run"]) == (ns, "wanted", "check", "requested")
    assert parse_time(body["requestedAt"]) is not None
    value = annotation(cluster, ns, "wanted")
    assert value is not None and value.startswith(body["requestedAt"])

    again = post_run(server, ns, "wanted")
    assert again.status == 409 and "already requested" in again.text
    assert_one_line_plain_text(again)

    assert services.events.step()  # the recorder's thread is not running here: send the queued Event
    events = cluster.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    (event,) = [e for e in events if e["reason"] == "CheckRunRequested"]
    assert event["involvedObject"]["name"] == "wanted" and event["involvedObject"]["uid"] == created["metadata"]["uid"]
    assert "(api)" in event["message"] and event["count"] == 1


def test_a_run_request_while_a_run_is_in_flight_is_refused_and_sets_nothing(
        cluster: TestCluster, server: WebServer, maker: PodMaker, services: Services) -> None:
    ns = maker.namespace
    add_check(cluster, services, ns, "running")
    run_uuid, _ = start_a_run(maker, services, "running")
    answer = post_run(server, ns, "running")
    assert answer.status == 409 and "in flight" in answer.text and run_uuid not in answer.text
    assert annotation(cluster, ns, "running") is None


def test_a_run_request_for_an_unknown_check_is_404_and_for_a_khjob_409(
        cluster: TestCluster, server: WebServer, maker: PodMaker, services: Services) -> None:
    ns = maker.namespace
    unknown = post_run(server, ns, "nobody")
    assert unknown.status == 404 and f"{ns}/nobody" in unknown.text
    assert_one_line_plain_text(unknown)
    cluster.request("POST", khj(ns), khjob("once"))
    wait_for(lambda: services.khjobs.get(ns, "once") is not None, 15, what="the khjob in the cache")
    job = post_run(server, ns, "once")
    assert job.status == 409 and "khjob" in job.text
    assert_one_line_plain_text(job)


def test_with_enable_run_api_off_the_route_is_404_and_nothing_is_set(
        cluster: TestCluster, server: WebServer, maker: PodMaker, services: Services) -> None:
    ns = maker.namespace
    add_check(cluster, services, ns, "closed")
    services.config = dataclasses.replace(services.config, enable_run_api=False)  # as a config reload does
    answer = post_run(server, ns, "closed")
    assert answer.status == 404 and answer.text == request(server, "POST", "/no/such/path").text
    assert annotation(cluster, ns, "closed") is None
    assert get(server, "/api/checks")[0].status == 200  # reading stays on


def test_run_requests_are_rate_limited_per_source_with_retry_after(
        server: WebServer, maker: PodMaker, services: Services) -> None:
    services.config = dataclasses.replace(services.config, report_rate_limit=0.01, report_rate_burst=1)
    assert post_run(server, maker.namespace, "nobody").status == 404  # the one token of the burst
    limited = post_run(server, maker.namespace, "nobody")
    assert limited.status == 429 and int(limited.headers["retry-after"]) >= 1
    assert_one_line_plain_text(limited)


# --- metrics --------------------------------------------------------------------------------------------

def test_the_per_check_metric_families_come_from_the_persisted_counters_and_pass_promtool(
        cluster: TestCluster, server: WebServer, maker: PodMaker, services: Services) -> None:
    ns = maker.namespace
    now = time.time()
    add_check(cluster, services, ns, "counted", interval="90s")
    add_check(cluster, services, ns, "never", interval="5m")
    keys = history_keys("ooff", now)
    maker.khstate("counted", "u", OK=False, Errors=["broken 3"], RunDuration="2.5s",
                  LastRun=format_datetime(utcnow()), **keys)
    wait_cached(services, ns, "counted")
    text = request(server, "GET", "/metrics").text
    samples = {(x.name, tuple(sorted(x.labels.items()))): x.value
               for family in text_string_to_metric_families(text) for x in family.samples}

    def value(name: str, check: str, **extra: str) -> float | None:
        return samples.get((name, tuple(sorted({"check": f"{ns}/{check}", "namespace": ns, **extra}.items()))))
    assert value("kuberhealthy_check_consecutive_failures", "counted") == 2
    assert value("kuberhealthy_check_interval_seconds", "counted") == 90
    assert value("kuberhealthy_check_runs_total", "counted", result="ok") == 2
    assert value("kuberhealthy_check_runs_total", "counted", result="failed") == 2
    assert value("kuberhealthy_check_last_success_timestamp_seconds", "counted") == parse_time(keys["lastOK"])
    assert value("kuberhealthy_check_consecutive_failures", "never") == 0
    assert value("kuberhealthy_check_last_success_timestamp_seconds", "never") is None  # absent until an OK run
    assert samples[("kuberhealthy_influx_points_dropped_total", ())] == 0
    lint = promtool_check(text)
    assert lint.returncode == 0, lint.stdout + lint.stderr
