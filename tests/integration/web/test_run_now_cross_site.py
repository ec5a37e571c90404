"""Run now refuses cross-site browser requests (web/origin.py) over real services and a real HTTP server:
what a hostile page can make a browser send gets a one-line 403 and leaves the khcheck without the
run-now annotation and without a CheckRunRequested Event; the same request from the server's own page, an
origin listed in trustedOrigins, or curl (no browser headers) is taken (202). Raw sockets, so the Host
header is the real `127.0.0.1:<port>` a browser would send."""
from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kuberhealthy.daemon.services import Services
from kuberhealthy.records.runnow import RUN_NOW_ANNOTATION
from testbed.clients.rawhttp import Answer, assert_one_line_plain_text, request
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khc, khcheck
from testbed.daemons.inprocess import PodMaker, WebServer
from testbed.wait import wait_for

EVIL = "http://evil.example"
HOSTILE = {
    "a cross-site fetch": ({"Sec-Fetch-Site": "cross-site", "Origin": EVIL}, None),
    "a same-site fetch": ({"Sec-Fetch-Site": "same-site", "Origin": EVIL}, None),
    "an old browser's cross-origin post": ({"Origin": EVIL}, None),
    "a sandboxed frame (Origin null)": ({"Origin": "null"}, None),
    "a text/plain body": ({"Content-Type": "text/plain"}, b'{"run": true}'),
    "a form post": ({"Content-Type": "application/x-www-form-urlencoded"}, b"run=1"),
    "a multipart form post": ({"Content-Type": "multipart/form-data; boundary=x"}, b"--x--\r\n"),
}


def add_check(cluster: TestCluster, services: Services, ns: str, name: str) -> None:
    cluster.request("POST", khc(ns), khcheck(name))
    wait_for(lambda: services.khchecks.get(ns, name) is not None, 15, what=f"khcheck {name} in the cache")


def annotation(cluster: TestCluster, ns: str, name: str) -> str | None:
    meta = cluster.request("GET", khc(ns, name))["metadata"]
    return (meta.get("annotations") or {}).get(RUN_NOW_ANNOTATION)


def requested_events(cluster: TestCluster, services: Services, ns: str) -> list[dict[str, Any]]:
    while services.events.step():  # the recorder's thread is not running here: send what is queued
        pass
    items: list[dict[str, Any]] = cluster.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    return [e for e in items if e["reason"] == "CheckRunRequested"]


def post_run(server: WebServer, ns: str, name: str, headers: dict[str, str], body: bytes | None = None) -> Answer:
    return request(server, "POST", f"/api/checks/{ns}/{name}/run", body, headers=headers)


def clear(cluster: TestCluster, services: Services, ns: str, name: str) -> None:
    """Remove the annotation, as the leader does when it takes the request up."""
    cluster.request("PATCH", khc(ns, name), {"metadata": {"annotations": {RUN_NOW_ANNOTATION: None}}},
                    content_type="application/merge-patch+json")
    wait_for(lambda: RUN_NOW_ANNOTATION not in ((services.khchecks.get(ns, name) or {}).get("metadata", {})
                                                .get("annotations") or {}), 15, what="the annotation gone")


@pytest.mark.parametrize(("headers", "body"), HOSTILE.values(), ids=HOSTILE.keys())
def test_what_a_hostile_page_can_send_gets_403_and_sets_nothing(
        cluster: TestCluster, server: WebServer, maker: PodMaker, services: Services,
        headers: dict[str, str], body: bytes | None) -> None:
    ns = maker.namespace
    add_check(cluster, services, ns, "target")
    answer = post_run(server, ns, "target", headers, body)
    assert answer.status == 403, answer
    assert_one_line_plain_text(answer)
    assert annotation(cluster, ns, "target") is None
    assert requested_events(cluster, services, ns) == []


def test_the_servers_own_page_a_trusted_origin_and_curl_are_taken(
        cluster: TestCluster, server: WebServer, maker: PodMaker, services: Services) -> None:
    ns = maker.namespace
    add_check(cluster, services, ns, "target")
    own = f"http://{server.host}:{server.port}"
    for headers in ({"Sec-Fetch-Site": "same-origin", "Origin": own, "Accept": "application/json"},  # dashboard.js
                    {"Origin": own},  # an old browser on the same page
                    {}):  # curl -X POST
        answer = post_run(server, ns, "target", headers)
        assert answer.status == 202, (headers, answer)
        clear(cluster, services, ns, "target")

    portal = {"Sec-Fetch-Site": "cross-site", "Origin": "https://portal.example.com"}
    assert post_run(server, ns, "target", portal).status == 403
    services.config = dataclasses.replace(services.config, trusted_origins=frozenset({"https://portal.example.com"}))
    answer = post_run(server, ns, "target", portal)
    assert answer.status == 202, answer
    assert annotation(cluster, ns, "target") is not None
    assert len(requested_events(cluster, services, ns)) == 1  # four requests, one Event (counted in place)
