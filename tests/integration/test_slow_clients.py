"""Slow and excess clients against the daemon as users run it (docs/interface.md#under-hostile-clients): a
connection reaches a server thread only once its whole request is in, within its deadlines, and the
connection caps close the oldest waiting connection, never the new one. Each rule is tried on both
listeners, HTTP and HTTPS (its TLS handshake counts against the head's deadline); the daemon's app is
the same on both, a genuine report over HTTPS included.

One daemon process for the module (gunicorn with the product's worker, a self-signed certificate made
with the openssl binary), with a check whose simulated checker reports to it over HTTP. Bounds are
generous hang guards; latency targets live in `make attack` (`--tls` for the HTTPS listener).
"""
from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kuberhealthy.kube import KHCHECKS
from testbed.clients.rawhttp import request
from testbed.clients.tlscert import is_closed_by_server, self_signed
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import RUN_UUID_ENV, khcheck
from testbed.cluster.loopback import free_port
from testbed.cluster.objects import checker_pods, create_namespace, state_spec
from testbed.daemons.process import DaemonProcess
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

CHECK = "pulse"
BY_HAND = "by-hand"  # a check whose checker never reports: the test reports for it, over HTTPS
HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"  # a head that never ends
BODY_HEAD = (b"POST /externalCheckStatus HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Content-Length: 100\r\n\r\n{")  # a body that never ends



@dataclass(frozen=True)
class Listener:
    """One of the daemon's listeners as a client sees it: plain HTTP, or HTTPS trusting `cafile`."""

    scheme: str
    port: int
    cafile: Path | None = None

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cafile))

    def tcp(self, source: str = "127.0.0.1", timeout: float = 30) -> socket.socket:
        s = socket.socket()
        s.bind((source, 0))
        s.connect(("127.0.0.1", self.port))
        s.settimeout(timeout)
        return s

    def connect(self, source: str = "127.0.0.1", timeout: float = 30) -> socket.socket:
        """A connection ready for HTTP bytes (its TLS handshake done on HTTPS)."""
        s = self.tcp(source, timeout)
        return s if self.cafile is None else self.context().wrap_socket(s, server_hostname="localhost")

    def http(self, source: str | None = None, timeout: float = 30) -> http.client.HTTPConnection:
        src = (source, 0) if source else None
        if self.cafile is None:
            return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout, source_address=src)
        return http.client.HTTPSConnection("localhost", self.port, timeout=timeout, source_address=src,
                                           context=self.context())

    def get(self, path: str, timeout: float = 10) -> tuple[int, bytes]:
        c = self.http(timeout=timeout)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def served(cluster: TestCluster, tmp_path_factory: pytest.TempPathFactory,
           cert: tuple[Path, Path]) -> Iterator[DaemonProcess]:
    """A leading daemon process serving HTTP and HTTPS, running CHECK every 2 s (its checker pods
    report to it over HTTP) and BY_HAND once (its pod never reports)."""
    ns = create_namespace(cluster, "slow")
    sim = SimKubelet(str(cluster.kubeconfig), nodes=1, namespace=ns, signing_key=cluster.sa_key)
    sim.start()
    workdir: Path = tmp_path_factory.mktemp("slow-clients")
    d = DaemonProcess(cluster, workdir, "kh-slow", ns, {
        "targetNamespace": ns, "enableForceMaster": True, "tlsCertFile": str(cert[0]), "tlsKeyFile": str(cert[1]),
        "listenAddressTLS": f"127.0.0.1:{free_port()}"})
    try:
        cluster.request("POST", KHCHECKS.path(ns), khcheck(CHECK, "kh-sim/ok", "2s"))
        cluster.request("POST", KHCHECKS.path(ns), khcheck(BY_HAND, "kh-sim/hang-silent", "1h", timeout="5m"))
        d.start().wait_serving()
        yield d
    finally:
        d.stop()
        sim.stop()


@pytest.fixture(scope="module")
def https(served: DaemonProcess, cert: tuple[Path, Path]) -> Listener:
    return Listener("https", int(served.settings["listenAddressTLS"].rpartition(":")[2]), cert[0])


@pytest.fixture(params=["http", "https"])
def listener(request: pytest.FixtureRequest, served: DaemonProcess, https: Listener) -> Listener:
    return https if request.param == "https" else Listener("http", served.port)


def stall(to: Listener, first: bytes, sources: list[str], per_source: int) -> list[socket.socket]:
    """Connections that send `first` and then nothing."""
    held = []
    for source in sources:
        for _ in range(per_source):
            s = to.connect(source)
            s.sendall(first)
            held.append(s)
    return held


def read_all(s: socket.socket) -> bytes:
    """Everything until the server closes (or the socket's timeout, a hang guard, fails the read)."""
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def exchange(to: Listener, data: bytes) -> bytes:
    """Send `data` on a fresh connection; everything answered until the server closes."""
    with to.connect() as s:
        s.sendall(data)
        return read_all(s)


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()



def healthz(to: Listener) -> int:
    return to.get("/healthz")[0]


def test_connections_stalled_in_their_headers_do_not_stop_healthz(served: DaemonProcess, listener: Listener) -> None:
    held = stall(listener, HEAD, [f"127.0.1.{i}" for i in range(1, 4)], 20)
    try:
        for _ in range(5):
            assert healthz(listener) == 200
        assert healthz(Listener("http", served.port)) == 200
    finally:
        close_all(held)


def test_connections_stalled_in_their_bodies_do_not_stop_a_genuine_report(served: DaemonProcess, listener: Listener,
                                                                         cluster: TestCluster) -> None:
    ns = served.settings["targetNamespace"]
    held = stall(listener, BODY_HEAD, ["127.0.2.1", "127.0.2.2"], 20)  # more than the 24 report slots
    try:
        before = state_spec(cluster, ns, CHECK).get("uuid")
        wait_for(lambda: (spec := state_spec(cluster, ns, CHECK)).get("uuid") != before and spec.get("OK")
                 and spec.get("RunDuration"), 60, what="a run reported in and recorded OK meanwhile")
        assert healthz(listener) == 200
    finally:
        close_all(held)


def closed_total(to: Listener, reason: str) -> float:
    status, text = to.get("/metrics")
    assert status == 200
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            if sample.name == "kuberhealthy_http_connections_closed_total" and sample.labels == {"reason": reason}:
                return float(sample.value)
    raise AssertionError(f"no kuberhealthy_http_connections_closed_total{{reason={reason!r}}} on /metrics")


def test_a_connection_whose_headers_are_not_in_within_5_s_is_closed_and_counted_on_metrics(
        listener: Listener) -> None:
    before = closed_total(listener, "head-deadline")
    assert exchange(listener, HEAD) == b""  # closed quietly: no answer at all
    assert closed_total(listener, "head-deadline") >= before + 1


def test_a_connection_that_never_starts_its_tls_handshake_is_closed_as_a_slow_head(https: Listener) -> None:
    before = closed_total(https, "head-deadline")
    with https.tcp() as s:
        assert read_all(s) == b""
    assert closed_total(https, "head-deadline") >= before + 1


def test_a_connection_whose_body_is_not_in_within_10_s_is_closed(listener: Listener) -> None:
    assert exchange(listener, BODY_HEAD) == b""


def test_a_client_sending_a_byte_every_4_s_is_still_closed_at_the_deadline(listener: Listener) -> None:
    whole = HEAD + b"\r\n"
    s = listener.connect()
    with s:
        sent = 0
        for byte in whole:
            try:
                s.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                break
            sent += 1
            if is_closed_by_server(s, 4):
                break
        assert sent < len(whole), "the server waited for the whole request"


def test_a_kept_alive_connection_serves_several_requests_and_is_closed_when_idle(listener: Listener) -> None:
    c = listener.http()
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


def test_the_33rd_connection_from_one_source_closes_that_sources_oldest_waiting_one(listener: Listener) -> None:
    source = "127.0.3.1"
    held = stall(listener, HEAD, [source], 32)
    try:
        s = listener.connect(source)
        with s:
            s.sendall(HEAD + b"Connection: close\r\n\r\n")
            assert read_all(s).startswith(b"HTTP/1.1 200")
        assert is_closed_by_server(held[0], 3), "the oldest stalled connection is still open"
        assert not is_closed_by_server(held[-1], 0.2), "a newer stalled connection was closed too"
    finally:
        close_all(held)


def test_connections_stalled_in_their_tls_handshake_count_against_the_per_source_cap(https: Listener) -> None:
    source = "127.0.3.2"
    held = [https.tcp(source) for _ in range(32)]
    try:
        with https.connect(source) as s:
            s.sendall(HEAD + b"Connection: close\r\n\r\n")
            assert read_all(s).startswith(b"HTTP/1.1 200")
        assert is_closed_by_server(held[0], 3), "the oldest stalled handshake is still open"
    finally:
        close_all(held)


def test_pipelined_requests_are_answered_in_order(listener: Listener) -> None:
    answers = exchange(listener, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                                 b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answers.count(b"HTTP/1.1 200 OK") == 2, answers


@pytest.mark.parametrize("head", [b"GET /healthz HTTP/1.1\nHost: x\n\n", b"NOT HTTP\r\n\r\n",
                                  b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"],
                         ids=["bare-lf", "garbage", "two-lengths"])
def test_a_malformed_request_gets_gunicorns_400_not_a_hang(listener: Listener, head: bytes) -> None:
    assert exchange(listener, head).startswith(b"HTTP/1.1 400 ")


def test_a_body_announced_over_1_mib_gets_413_at_once(listener: Listener) -> None:
    answer = exchange(listener, b"POST /externalCheckStatus HTTP/1.1\r\nHost: x\r\n"
                                b"Content-Type: application/json\r\nContent-Length: 2000000\r\n\r\n{")
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


def test_plain_http_on_the_https_port_gets_a_400_saying_so(https: Listener) -> None:
    with https.tcp() as s:
        s.sendall(HEAD + b"\r\n")
        assert b"HTTP request to an HTTPS server" in read_all(s)


def test_the_app_over_https_is_the_app_over_http(served: DaemonProcess, https: Listener) -> None:
    plain = Listener("http", served.port)
    for path in ("/healthz", "/readyz", "/metrics", "/"):
        assert https.get(path)[0] == plain.get(path)[0] == 200, path
    page = json.loads(https.get("/")[1])
    assert {"OK", "Errors", "CheckDetails", "CurrentMaster"} <= set(page)
    assert f"{served.settings['targetNamespace']}/{CHECK}" in page["CheckDetails"]
    assert b"kuberhealthy_http_connections_closed_total" in https.get("/metrics")[1]


def running_pod(cluster: TestCluster, ns: str, check: str) -> dict[str, Any] | None:
    pods = [p for p in checker_pods(cluster, ns, check)
            if p.get("status", {}).get("phase") == "Running" and p["status"].get("podIP")]
    return pods[-1] if pods else None


def test_a_genuine_report_over_https_is_stored(served: DaemonProcess, https: Listener, cluster: TestCluster) -> None:
    ns = served.settings["targetNamespace"]
    pod = wait_for(lambda: running_pod(cluster, ns, BY_HAND), 60, what="the by-hand check's running pod")
    assert pod is not None
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
    run_uuid, ip = env[RUN_UUID_ENV], pod["status"]["podIP"]

    def post() -> int | None:
        c = https.http(source=ip)
        try:
            c.request("POST", "/externalCheckStatus", body=b'{"OK": true, "Errors": []}',
                      headers={"Content-Type": "application/json", "kh-run-uuid": run_uuid})
            r = c.getresponse()
            r.read()
            return r.status if r.status != 503 else None  # 503: the caches may not have the pod yet
        finally:
            c.close()
    assert wait_for(post, 30, what="an answer to the report") == 200
    wait_for(lambda: (s := state_spec(cluster, ns, BY_HAND)).get("uuid") == run_uuid and s.get("OK") is True, 30,
             what="the report stored in the khstate")
