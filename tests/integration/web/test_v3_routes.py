"""v3's routes over real services (API server + caches), a real HTTP server and, for logs, the simulated
kubelet behind the API server: `/json` from the caches in v3's shape, `/api/run` setting the run-now
annotation as the JSON API's run now does, `/api/events` finding that request's Event with the API
server's own field selectors, and `/api/logs` (`/stream`) reading a real checker's log through the API
server, only for a pod of the named check."""
from __future__ import annotations

import dataclasses
import json
import time
import uuid
from typing import Any

from kuberhealthy.base.times import format_time
from kuberhealthy.daemon.services import Services
from kuberhealthy.records import khstate
from kuberhealthy.records.runnow import RUN_NOW_ANNOTATION
from testbed.clients.rawhttp import Answer, assert_one_line_plain_text, request
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khc, khcheck
from testbed.cluster.objects import create_checker_pod
from testbed.daemons.inprocess import POD_NAME, PodMaker, WebServer, wait_cached
from testbed.sim.kubelet import SimKubelet
from testbed.sim.receiver import ReportReceiver
from testbed.wait import wait_for


def add_check(cluster: TestCluster, services: Services, ns: str, name: str, **kw: Any) -> None:
    cluster.request("POST", khc(ns), khcheck(name, **kw))
    wait_for(lambda: services.khchecks.get(ns, name) is not None, 15, what=f"khcheck {name} in the cache")


def get(server: WebServer, path: str) -> Answer:
    return request(server, "GET", path)


def test_json_shows_each_check_in_v3_s_shape_from_the_caches(
        cluster: TestCluster, server: WebServer, maker: PodMaker, services: Services) -> None:
    ns = maker.namespace
    add_check(cluster, services, ns, "dns", interval="5m", timeout="45s")
    add_check(cluster, services, ns, "web")
    last = int(time.time()) - 30
    maker.khstate("dns", "run-1", OK=False, Errors=["nxdomain <example>"], RunDuration="2.25s",
                  LastRun=format_time(last))
    wait_cached(services, ns, "dns")
    answer = get(server, f"/json?namespace={ns}")
    assert answer.status == 200 and answer.headers["content-type"] == "application/json; charset=utf-8"
    assert answer.text.startswith('{\n  "OK": false,\n  "Errors": [\n    "nxdomain \\u003cexample\\u003e"\n  ],')
    doc = json.loads(answer.text)
    assert doc["Errors"] == ["nxdomain <example>"] and doc["CurrentMaster"] == POD_NAME and doc["Metadata"] == {}
    assert doc["CheckDetails"]["dns"] == {
        "ok": False, "errors": ["nxdomain <example>"], "runDuration": 2_250_000_000, "namespace": ns,
        "currentUUID": "", "lastRunUnix": last, "nextRunUnix": last + 300, "timeoutSeconds": 45,
        "runIntervalSeconds": 300}
    assert doc["CheckDetails"]["web"] == {"ok": False, "namespace": ns, "currentUUID": "", "timeoutSeconds": 30,
                                          "runIntervalSeconds": 3600}

    run_uuid, pod = str(uuid.uuid4()), f"dns-{uuid.uuid4().hex[:6]}"
    khstate.claim_run(khstate.RunWrite(services.resources, ns, "dns", run_uuid, POD_NAME), run_pod=pod,
                      run_key_sha256="x")
    maker.pod("dns", run_uuid, name=pod)
    wait_cached(services, ns, "dns", lambda o: khstate.RunClaim.of(o).pod == pod)
    dns = json.loads(get(server, "/json").text)["CheckDetails"]["dns"]
    assert dns["podName"] == pod and "nextRunUnix" not in dns and dns["currentUUID"] == ""
    assert run_uuid not in get(server, "/json").text


def test_api_run_sets_the_annotation_raises_the_event_and_api_events_lists_it(
        cluster: TestCluster, server: WebServer, maker: PodMaker, services: Services) -> None:
    ns = maker.namespace
    add_check(cluster, services, ns, "dns")
    add_check(cluster, services, ns, "web")
    answer = request(server, "POST", f"/api/run?namespace={ns}&healthcheck=dns")
    assert answer.status == 202, answer
    assert json.loads(answer.text)["annotation"] == RUN_NOW_ANNOTATION
    meta = cluster.request("GET", khc(ns, "dns"))["metadata"]
    assert RUN_NOW_ANNOTATION in meta["annotations"]
    wait_for(lambda: RUN_NOW_ANNOTATION in ((services.khchecks.get(ns, "dns") or {}).get("metadata", {})
                                            .get("annotations") or {}), 15, what="the annotation in the cache")
    again = request(server, "POST", f"/api/checks/{ns}/dns/run")  # v2's route: the same sequence
    assert again.status == 409 and "already requested" in again.text
    while services.events.step():  # the recorder's thread is not running here: send what is queued
        pass

    listed = get(server, f"/api/events?namespace={ns}&healthcheck=dns")
    assert listed.status == 200, listed
    (event,) = json.loads(listed.text)
    assert event["reason"] == "CheckRunRequested" and event["type"] == "Normal"
    assert abs(event["lastTimestamp"] - time.time()) < 60 and event["message"]
    assert json.loads(get(server, f"/api/events?namespace={ns}&healthcheck=web").text) == []
    for path, status in ((f"/api/events?namespace={ns}", 400), (f"/api/events?namespace={ns}&healthcheck=nope", 404),
                         (f"/api/run?namespace={ns}&healthcheck=nope", 404)):
        refused = request(server, "POST" if path.startswith("/api/run") else "GET", path)
        assert refused.status == status, refused
        assert_one_line_plain_text(refused)


def test_a_checker_s_log_is_read_and_streamed_through_the_api_server_only_for_its_own_check(
        cluster: TestCluster, server: WebServer, maker: PodMaker, services: Services, kubelet: SimKubelet,
        receiver: ReportReceiver) -> None:
    ns = maker.namespace
    add_check(cluster, services, ns, "dns")
    add_check(cluster, services, ns, "web")
    script = "resolving example.com\nerror: <nxdomain>"
    for check, pod in (("dns", "dns-run"), ("web", "web-run")):
        create_checker_pod(cluster, ns, pod, check=check, run_uuid=str(uuid.uuid4()), phase=None, node_name=None,
                           image="kh-sim/fail", env={"KH_REPORTING_URL": receiver.url, "SIM_LOG": script})
    for pod in ("dns-run", "web-run"):
        wait_for(lambda p=pod: ((services.pods.get(ns, p) or {}).get("status") or {}).get("phase") == "Succeeded",
                 30, what=f"{pod} done, in the cache")
    query = f"namespace={ns}&healthcheck=dns&pod=dns-run"
    refused = get(server, f"/api/logs?{query}&format=text")
    assert refused.status == 403 and "exposeLogs" in refused.text  # off by default
    services.config = dataclasses.replace(services.config, expose_logs=True)

    text = get(server, f"/api/logs?{query}&format=text")
    assert text.status == 200 and text.text == script + "\n"
    assert text.headers["content-type"] == "text/plain; charset=utf-8"
    body = json.loads(get(server, f"/api/logs?{query}").text)
    assert body["log"] == script + "\n" and body["pod"] == "dns-run" and body["phase"] == "Succeeded"
    streamed = get(server, f"/api/logs/stream?{query}")
    assert streamed.status == 200 and streamed.text == script + "\n"

    for path in (f"/api/logs?namespace={ns}&healthcheck=dns&pod=web-run",
                 f"/api/logs/stream?namespace={ns}&healthcheck=dns&pod=web-run"):
        other = get(server, path)
        assert other.status == 403, other
        assert_one_line_plain_text(other)
    asked = {r.pod for r in kubelet.log_requests}
    assert asked == {f"{ns}/dns-run"}  # the other check's pod was never read
