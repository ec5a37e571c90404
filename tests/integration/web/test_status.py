"""GET /, /metrics, /healthz, /readyz over real services (API server + caches) and a real HTTP server."""
from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask

from kuberhealthy.daemon.services import Services
from kuberhealthy.web import create_app
from testbed.clients.formats import promtool_check
from testbed.clients.rawhttp import post_report, request
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khj, khjob
from testbed.cluster.objects import create_namespace
from testbed.daemons.inprocess import PodMaker, WebServer, make_services, serve, wait_cached
from testbed.wait import wait_for

# What Go's json.MarshalIndent writes for these khstates (see tests/unit/test_state.py for its origin).
GOLDEN_TEMPLATE = (
    '{\n'
    '  "OK": false,\n'
    '  "Errors": [\n'
    '    "dns \\u003cbroken\\u003e \\u0026 \\"slow\\"",\n'
    '    "line\\nbreak \\u2028 é"\n'
    '  ],\n'
    '  "CheckDetails": {\n'
    '    "NS/a-fine": {\n'
    '      "OK": true,\n'
    '      "Errors": [],\n'
    '      "RunDuration": "1.5s",\n'
    '      "Namespace": "NS",\n'
    '      "Node": "node-1",\n'
    '      "LastRun": "2022-03-22T07:22:56Z",\n'
    '      "AuthoritativePod": "kh-1",\n'
    '      "uuid": "u-1"\n'
    '    },\n'
    '    "NS/b-broken": {\n'
    '      "OK": false,\n'
    '      "Errors": [\n'
    '        "dns \\u003cbroken\\u003e \\u0026 \\"slow\\"",\n'
    '        "line\\nbreak \\u2028 é"\n'
    '      ],\n'
    '      "RunDuration": "2m3s",\n'
    '      "Namespace": "NS",\n'
    '      "Node": "",\n'
    '      "AuthoritativePod": "kh-0",\n'
    '      "uuid": "u-2"\n'
    '    }\n'
    '  },\n'
    '  "JobDetails": {},\n'
    '  "CurrentMaster": "kh-test-0"\n'
    '}'
)


def page_when(server: WebServer, pred: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
    """The status page document, once pred(doc) holds."""
    def check() -> dict[str, Any] | None:
        doc: dict[str, Any] = json.loads(request(server, "GET", "/").text)
        return doc if pred(doc) else None
    return wait_for(check, what=what)  # type: ignore[arg-type]


def test_the_status_page_bytes_match_v2s_layout(server: WebServer, maker: PodMaker, services: Services) -> None:
    ns = maker.namespace
    maker.khstate("b-broken", "u-2", OK=False, Errors=['dns <broken> & "slow"', "line\nbreak \u2028 é"],
                  RunDuration="2m3s", AuthoritativePod="kh-0")
    maker.khstate("a-fine", "u-1", OK=True, Errors=[], RunDuration="1.5s", Node="node-1",
                  LastRun="2022-03-22T09:22:56+02:00", AuthoritativePod="kh-1")
    maker.khstate("c-never-ran", "u-3", AuthoritativePod="")
    wait_cached(services, ns, "a-fine")
    wait_cached(services, ns, "b-broken")
    wait_cached(services, ns, "c-never-ran")
    answer = request(server, "GET", "/")
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.text == GOLDEN_TEMPLATE.replace("NS", ns)


def test_the_page_follows_khstate_changes(server: WebServer, maker: PodMaker, services: Services) -> None:
    created = maker.khstate("flip", "u-1", OK=True, Errors=[])
    wait_cached(services, maker.namespace, "flip")
    assert json.loads(request(server, "GET", "/").text)["OK"] is True
    created["spec"]["OK"], created["spec"]["Errors"] = False, ["now broken"]
    maker.cluster.request("PUT", f"/apis/comcast.github.io/v1/namespaces/{maker.namespace}/khstates/flip", created)
    doc = page_when(server, lambda d: d["OK"] is False, "the page to show the failure")
    assert doc["Errors"] == ["now broken"]
    maker.cluster.request("DELETE", f"/apis/comcast.github.io/v1/namespaces/{maker.namespace}/khstates/flip")
    doc = page_when(server, lambda d: d["OK"] is True, "the page to drop the deleted khstate")
    assert doc["CheckDetails"] == {}


def test_an_unhealthy_cluster_still_answers_200(server: WebServer, maker: PodMaker, services: Services) -> None:
    maker.khstate("bad", "u", OK=False, Errors=["it broke"])
    wait_cached(services, maker.namespace, "bad")
    answer = request(server, "GET", "/")
    assert answer.status == 200
    doc = json.loads(answer.text)
    assert doc["OK"] is False and doc["Errors"] == ["it broke"]


def test_never_run_checks_are_hidden(server: WebServer, maker: PodMaker, services: Services) -> None:
    maker.khstate("ran", "u1")
    maker.khstate("never", "u2", OK=False, Errors=["not shown"], AuthoritativePod="")
    wait_cached(services, maker.namespace, "never")
    wait_cached(services, maker.namespace, "ran")
    doc = json.loads(request(server, "GET", "/").text)
    assert list(doc["CheckDetails"]) == [f"{maker.namespace}/ran"]
    assert doc["OK"] is True and doc["Errors"] == []


def test_a_khstate_of_a_khjob_is_listed_under_job_details(server: WebServer, maker: PodMaker,
                                                          services: Services) -> None:
    ns = maker.namespace
    maker.cluster.request("POST", khj(ns), khjob("once", timeout="1m", phase="Completed"))
    maker.khstate("once", "u1", OK=False, Errors=["job failed"])
    maker.khstate("check", "u2")
    wait_for(lambda: services.khjobs.get(ns, "once"), what="the khjob in the cache")
    wait_cached(services, ns, "once")
    wait_cached(services, ns, "check")
    doc = json.loads(request(server, "GET", "/").text)
    assert list(doc["JobDetails"]) == [f"{ns}/once"] and list(doc["CheckDetails"]) == [f"{ns}/check"]
    assert doc["OK"] is False and doc["Errors"] == ["job failed"]


@pytest.fixture
def all_namespaces(cluster: TestCluster) -> Iterator[tuple[Services, WebServer, list[str]]]:
    """Services watching every namespace, a server, and three fresh namespaces."""
    names = [create_namespace(cluster) for _ in range(3)]
    services = make_services(cluster, "")
    services.start_caches()
    srv = None
    try:
        assert services.wait_synced(10)
        srv = serve(create_app(services))
        yield services, srv, names
    finally:
        if srv is not None:
            srv.stop()
        services.stop(10)
        services.kube.close()


def test_the_namespace_filter_shows_only_those_namespaces(cluster: TestCluster,
                                                          all_namespaces: tuple[Services, WebServer, list[str]]
                                                          ) -> None:
    services, srv, (a, b, c) = all_namespaces
    for ns, ok in ((a, True), (b, False), (c, False)):
        PodMaker(cluster, ns, None).khstate("chk", "u", OK=ok, Errors=[] if ok else [f"broken in {ns}"])
        wait_cached(services, ns, "chk")

    def page(query: str) -> dict:
        answer = request(srv, "GET", "/" + query)
        assert answer.status == 200
        return dict(json.loads(answer.text))

    doc = page(f"?namespace={a}")
    assert list(doc["CheckDetails"]) == [f"{a}/chk"] and doc["OK"] is True and doc["Errors"] == []
    doc = page(f"?namespace={a},{b}")
    assert sorted(doc["CheckDetails"]) == sorted([f"{a}/chk", f"{b}/chk"])
    assert doc["OK"] is False and doc["Errors"] == [f"broken in {b}"]
    doc = page(f"?namespace=,{c},")
    assert list(doc["CheckDetails"]) == [f"{c}/chk"]
    doc = page("?namespace=does-not-exist")
    assert doc["CheckDetails"] == {} and doc["OK"] is True
    everything = page("?namespace=,")
    assert {f"{a}/chk", f"{b}/chk", f"{c}/chk"} <= set(everything["CheckDetails"])
    assert everything == page("")


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_status_request_with_a_body_is_refused(server: WebServer, method: str) -> None:
    answer = request(server, method, "/", b'{"OK": true, "Errors": []}', headers={"Content-Type": "application/json"})
    assert answer.status == 400
    assert "Verify check is reporting to the right status url" in answer.text
    assert len(answer.text.strip().splitlines()) == 1
    chunked = request(server, method, "/", b"x", chunked=True)
    assert chunked.status == 400


def test_a_status_request_with_an_empty_body_is_served(server: WebServer) -> None:
    answer = request(server, "POST", "/", b"", headers={"Content-Length": "0"})
    assert answer.status == 200
    assert json.loads(answer.text)["CurrentMaster"] == "kh-test-0"


def test_metrics_pass_promtool_with_failures_quotes_and_newlines(server: WebServer, maker: PodMaker,
                                                                 services: Services) -> None:
    ns = maker.namespace
    maker.khstate("quotes", "u1", OK=False, Errors=['said "no"', "two\nlines", "back\\slash"], RunDuration="1.5s")
    maker.khstate("fine", "u2", OK=True, Errors=[], RunDuration="250ms")
    maker.khstate("weird-duration", "u3", OK=False, Errors=["x"], RunDuration="later")
    for name in ("quotes", "fine", "weird-duration"):
        wait_cached(services, ns, name)
    answer = request(server, "GET", "/metrics")
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("text/plain")
    text = answer.text
    assert 'kuberhealthy_running{current_master="kh-test-0"} 1.0' in text
    assert "kuberhealthy_cluster_state 0.0" in text
    assert f'check="{ns}/quotes",error="said \'no\'|two\\nlines|back\\\\slash",namespace="{ns}",status="0"' in text
    assert f'kuberhealthy_check_duration_seconds{{check="{ns}/fine",namespace="{ns}"}} 0.25' in text
    result = promtool_check(text)
    assert result.returncode == 0, result.stdout + result.stderr


def test_health_and_readiness_probes(server: WebServer) -> None:
    assert (request(server, "GET", "/healthz").status, request(server, "GET", "/healthz").text) == (200, "ok")
    assert request(server, "GET", "/readyz").status == 200


def test_readiness_fails_until_the_caches_have_synced(cluster: TestCluster, namespace: str) -> None:
    services = make_services(cluster, namespace)
    try:
        client = create_app(services).test_client()
        assert client.get("/readyz").status_code == 503
        assert client.get("/healthz").status_code == 200
        services.start_caches()
        assert services.wait_synced(10)
        assert client.get("/readyz").status_code == 200
    finally:
        services.stop(10)
        services.kube.close()


def test_unknown_paths_and_methods_get_one_line_of_plain_text(app: Flask) -> None:
    client = app.test_client()
    for resp in (client.get("/nope"), client.get("/externalCheckStatus"), client.post("/metrics")):
        assert resp.status_code in (404, 405)
        assert resp.content_type.startswith("text/plain")
        assert len(resp.get_data(as_text=True).strip().splitlines()) == 1


def test_a_report_then_the_page_shows_it(server: WebServer, maker: PodMaker, services: Services) -> None:
    run = str(uuid.uuid4())
    maker.khstate("e2e", run)
    pod = maker.pod("e2e", run)
    assert post_report(server, {"OK": False, "Errors": ["seen on the page"]}, source_ip=pod.ip).status == 200
    doc = page_when(server, lambda d: d["OK"] is False, "the report on the page")
    assert doc["CheckDetails"][f"{maker.namespace}/e2e"]["Errors"] == ["seen on the page"]
