"""Slow and excess clients against the daemon as users run it (docs/interface.md#under-hostile-clients): a
connection reaches a server thread only once its whole request is in, within its deadlines, and the
connection caps close the oldest waiting connection, never the new one.

One daemon process for the module (gunicorn with the product's worker), with a check whose simulated
checker reports to it. Bounds are generous hang guards; latency targets live in `make attack`.
"""
from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from kuberhealthy.kube import KHCHECKS
from testbed.clients.rawhttp import request
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khcheck
from testbed.cluster.objects import create_namespace, state_spec
from testbed.daemons.process import DaemonProcess
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

CHECK = "pulse"
HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"  # a head that never ends
BODY_HEAD = (b"POST /externalCheckStatus HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Content-Length: 100\r\n\r\n{")  # a body that never ends


@pytest.fixture(scope="module")
def served(cluster: TestCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """A leading daemon process running CHECK every 2 s, its checker pods reporting to it."""
    ns = create_namespace(cluster, "slow")
    sim = SimKubelet(str(cluster.kubeconfig), nodes=1, namespace=ns, signing_key=cluster.sa_key)
    sim.start()
    workdir: Path = tmp_path_factory.mktemp("slow-clients")
    d = DaemonProcess(cluster, workdir, "kh-slow", ns, {"targetNamespace": ns, "enableForceMaster": True})
    try:
        cluster.request("POST", KHCHECKS.path(ns), khcheck(CHECK, "kh-sim/ok", "2s"))
        d.start().wait_serving()
        yield d
    finally:
        d.stop()
        sim.stop()


def connect(d: DaemonProcess, source: str = "127.0.0.1", timeout: float = 30) -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.connect((d.host, d.port))
    s.settimeout(timeout)
    return s


def stall(d: DaemonProcess, first: bytes, sources: list[str], per_source: int) -> list[socket.socket]:
    """Connections that send `first` and then nothing."""
    held = []
    for source in sources:
        for _ in range(per_source):
            s = connect(d, source)
            s.sendall(first)
            held.append(s)
    return held


def read_all(s: socket.socket) -> bytes:
    """Everything until the server closes (or the socket's timeout, a hang guard, fails the read)."""
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def exchange(d: DaemonProcess, data: bytes) -> bytes:
    """Send `data` on a fresh connection; everything answered until the server closes."""
    with connect(d) as s:
        s.sendall(data)
        return read_all(s)


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


def is_closed_by_server(s: socket.socket, within: float) -> bool:
    s.settimeout(within)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def healthz(d: DaemonProcess) -> int:
    return request(d.port, "GET", "/healthz", timeout=10).status


def test_connections_stalled_in_their_headers_do_not_stop_healthz(served: DaemonProcess) -> None:
    held = stall(served, HEAD, [f"127.0.1.{i}" for i in range(1, 4)], 20)
    try:
        for _ in range(5):
            assert healthz(served) == 200
    finally:
        close_all(held)


def test_connections_stalled_in_their_bodies_do_not_stop_a_genuine_report(served: DaemonProcess,
                                                                         cluster: TestCluster) -> None:
    ns = served.settings["targetNamespace"]
    held = stall(served, BODY_HEAD, ["127.0.2.1", "127.0.2.2"], 20)  # more than the 24 report slots
    try:
        before = state_spec(cluster, ns, CHECK).get("uuid")
        wait_for(lambda: (spec := state_spec(cluster, ns, CHECK)).get("uuid") != before and spec.get("OK")
                 and spec.get("RunDuration"), 60, what="a run reported in and recorded OK meanwhile")
        assert healthz(served) == 200
    finally:
        close_all(held)


def closed_total(served: DaemonProcess, reason: str) -> float:
    text = requests.get(f"{served.url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "kuberhealthy_http_connections_closed_total" and sample.labels == {"reason": reason}:
                return float(sample.value)
    raise AssertionError(f"no kuberhealthy_http_connections_closed_total{{reason={reason!r}}} on /metrics")


def test_a_connection_whose_headers_are_not_in_within_5_s_is_closed_and_counted_on_metrics(
        served: DaemonProcess) -> None:
    before = closed_total(served, "head-deadline")
    assert exchange(served, HEAD) == b""  # closed quietly: no answer at all
    assert closed_total(served, "head-deadline") >= before + 1


def test_a_connection_whose_body_is_not_in_within_10_s_is_closed(served: DaemonProcess) -> None:
    assert exchange(served, BODY_HEAD) == b""


def test_a_client_sending_a_byte_every_4_s_is_still_closed_at_the_deadline(served: DaemonProcess) -> None:
    whole = HEAD + b"\r\n"
    s = connect(served)
    with s:
        sent = 0
        for byte in whole:
            try:
                s.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += 1
            if is_closed_by_server(s, 4):
                break
        assert sent < len(whole), "the server waited for the whole request"


def test_a_kept_alive_connection_serves_several_requests_and_is_closed_when_idle(served: DaemonProcess) -> None:
    c = http.client.HTTPConnection(served.host, served.port, timeout=30)
    try:
        for path in ("/healthz", "/readyz", "/", "/healthz"):
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            assert r.status == 200, path
            if path == "/healthz" and c.sock is not None:
                first = c.sock.getsockname()
        assert c.sock is not None and c.sock.getsockname() == first, "the connection was not reused"
        assert is_closed_by_server(c.sock, 30), "an idle kept-alive connection stayed open"
    finally:
        c.close()


def test_the_33rd_connection_from_one_source_closes_that_sources_oldest_waiting_one(served: DaemonProcess) -> None:
    source = "127.0.3.1"
    held = stall(served, HEAD, [source], 32)
    try:
        s = connect(served, source)
        with s:
            s.sendall(HEAD + b"Connection: close\r\n\r\n")
            assert read_all(s).startswith(b"HTTP/1.1 200")
        assert is_closed_by_server(held[0], 3), "the oldest stalled connection is still open"
        assert not is_closed_by_server(held[-1], 0.2), "a newer stalled connection was closed too"
    finally:
        close_all(held)


def test_pipelined_requests_are_answered_in_order(served: DaemonProcess) -> None:
    answers = exchange(served, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                               b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answers.count(b"HTTP/1.1 200 OK") == 2, answers


@pytest.mark.parametrize("head", [b"GET /healthz HTTP/1.1\nHost: x\n\n", b"NOT HTTP\r\n\r\n",
                                  b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"],
                         ids=["bare-lf", "garbage", "two-lengths"])
def test_a_malformed_request_gets_gunicorns_400_not_a_hang(served: DaemonProcess, head: bytes) -> None:
    assert exchange(served, head).startswith(b"HTTP/1.1 400 ")


def test_a_body_announced_over_1_mib_gets_413_at_once(served: DaemonProcess) -> None:
    answer = exchange(served, b"POST /externalCheckStatus HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: 2000000\r\n\r\n{")
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b"request body is larger than 1048576 bytes" in answer


def test_a_chunked_body_over_1_mib_gets_413(served: DaemonProcess) -> None:
    answer = request(served.port, "POST", "/externalCheckStatus", b" " * (2 * 1024 * 1024),
                     headers={"Content-Type": "application/json"}, chunked=True)
    assert answer.status == 413, answer


def test_a_chunked_report_reaches_the_app_whole(served: DaemonProcess) -> None:
    answer = request(served.port, "POST", "/externalCheckStatus", b'{"OK": true, "Errors": []}',
                     headers={"Content-Type": "application/json"}, chunked=True)
    assert answer.status in (400, 503), answer  # no checker pod has this address
    assert "unmarshal" not in answer.text, answer  # the body was read whole
