"""Fake reports against the real API server and the real caches (kuberhealthy/web/report/triage.py): they cost
no API request while the caches are current, at most one rescue read a second while a new pod has no IP yet,
and never keep a genuine report from being stored. Wall-clock targets are bench/attack/flood.py's, not these."""
from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

from bench.attack.bed import daemon_requests
from kuberhealthy.daemon.services import Services
from testbed.clients.rawhttp import Answer, post_report
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.loopback import outside_ip
from testbed.daemons.inprocess import PodMaker, WebServer
from testbed.wait import wait_for

OK = {"OK": True, "Errors": []}


def fakes(server: WebServer, n: int) -> list[Answer]:
    """`n` fake reports from three addresses: made-up uuids and no header at all."""
    def one(i: int) -> Answer:
        return post_report(server, OK, run_uuid=str(uuid.uuid4()) if i % 2 else None, source_ip=outside_ip(20 + i % 3))
    with ThreadPoolExecutor(30) as pool:
        return list(pool.map(one, range(n)))


def test_a_fake_report_costs_no_api_request_while_the_caches_are_current(
        cluster: TestCluster, server: WebServer, maker: PodMaker) -> None:
    maker.pod("real", str(uuid.uuid4()))  # a checker pod with its IP: nothing is behind
    offset = cluster.audit_offset()
    answers = fakes(server, 60)
    assert {a.status for a in answers} == {400}
    assert all("failed to find a pod" in a.text for a in answers)
    assert daemon_requests(cluster, offset, maker.namespace) == []


def test_under_many_concurrent_fakes_a_genuine_report_is_stored_and_rescue_reads_stay_at_one_a_second(
        cluster: TestCluster, server: WebServer, maker: PodMaker, services: Services) -> None:
    maker.pod("young", str(uuid.uuid4()), running=False)  # no IP yet: the caches may be behind (30 s)
    run = str(uuid.uuid4())
    maker.khstate("genuine", run)
    pod = maker.pod("genuine", run)
    offset = cluster.audit_offset()
    stop = threading.Event()
    flood: list[Answer] = []

    def attack(i: int) -> None:
        while not stop.is_set():
            flood.append(post_report(server, OK, run_uuid=str(uuid.uuid4()) if i % 2 else None,
                                     source_ip=outside_ip(20 + i % 3)))
    with ThreadPoolExecutor(30) as pool:
        attackers = [pool.submit(attack, i) for i in range(30)]
        try:
            wait_for(lambda: len(flood) > 200, 30, what="the flood to start")
            began = services.clock()
            genuine = [post_report(server, OK, run_uuid=run if i % 2 else None, source_ip=pod.ip) for i in range(6)]
        finally:
            stop.set()
            for a in attackers:
                a.result(30)
        lasted = services.clock() - began
    assert [g.status for g in genuine] == [200] * 6, [(g.status, g.text) for g in genuine]
    assert {a.status for a in flood} <= {400, 503}
    assert all(a.headers.get("retry-after") == "1" for a in flood if a.status == 503)
    reads = [e for e in daemon_requests(cluster, offset, maker.namespace)
             if e.get("verb") == "list" and (e.get("objectRef") or {}).get("resource") == "pods"]
    # one rescue read a second at most, for the flood's whole length (and the genuine reports read nothing)
    assert len(reads) <= lasted + 10, len(reads)
    assert len(reads) * 10 < len(flood), (len(reads), len(flood))
