"""The HTTPS listener: our worker's main loop (in a thread, over two loopback listeners, no test bed)
serving a small app on HTTP and HTTPS side by side, with every hostile-client rule on the TLS port:
the TLS handshake is done in the selector and counts against the head's deadline, a client that
opens TCP and never finishes its handshake is closed like a slow head, the per-source cap holds,
answers have their write deadline, a closing connection lingers. Then the certificate files: loaded
with a message naming the setting at fault, reloaded when they change. The daemon itself over HTTPS
(its app, reports, the slow-client rules): tests/integration/test_slow_clients.py.

Certificates are made with the openssl binary (the test bed needs it already). Deadlines are made short
here; bounds are generous hang guards, and nothing asserts how long anything took.
"""
from __future__ import annotations

import http.client
import os
import selectors
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gunicorn.config import Config as GunicornConfig
from gunicorn.glogging import Logger

from kuberhealthy.base.errors import ConfigError
from kuberhealthy.daemon import httpconn
from kuberhealthy.daemon.httptls import ServerTLS, TLSAnswerSocket, load_context
from kuberhealthy.daemon.httpworker import PER_SOURCE, PollingWorker
from testbed.clients.tlscert import is_closed_by_server, self_signed
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.loopback import free_port
from testbed.daemons.process import DaemonProcess
from testbed.wait import wait_for

HEAD_DEADLINE = 3.0  # seconds: the head's deadline under test (the product's is 5 s)
BIG = 16 * 1024 * 1024  # past what loopback's socket buffers hold



def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """Answers `<scheme> <path>` (and the body it was sent); `/big` is BIG bytes."""
    if environ["PATH_INFO"] == "/big":
        body = b"x" * BIG
    else:
        body = f"{environ['wsgi.url_scheme']} {environ['PATH_INFO']}\n".encode() + environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


@dataclass
class Served:
    worker: Any
    http_port: int
    https_port: int
    tls: ServerTLS
    cafile: Path

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cafile))

    def tcp(self, source: str = "127.0.0.1", timeout: float = 30) -> socket.socket:
        s = socket.socket()
        s.bind((source, 0))
        s.connect(("127.0.0.1", self.https_port))
        s.settimeout(timeout)
        return s

    def tls_socket(self, source: str = "127.0.0.1", timeout: float = 30) -> ssl.SSLSocket:
        return self.client_context().wrap_socket(self.tcp(source, timeout), server_hostname="localhost")

    def https(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("localhost", self.https_port, timeout=30, context=self.client_context())

    def closed(self, reason: str) -> float:
        return float(self.worker.metrics.closed.labels(reason)._value.get())


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """Our worker's loop in a thread, HTTP and HTTPS listeners on loopback, the head deadline short."""
    monkeypatch.setattr(httpconn, "HEAD_DEADLINE", HEAD_DEADLINE)
    cert, key = self_signed(tmp_path, "server", "server")
    plain, secure = (socket.create_server(("127.0.0.1", 0)) for _ in range(2))
    tls = ServerTLS(str(cert), str(key), secure.getsockname()[1], check_every=0.0)
    cfg = GunicornConfig()
    cfg.set("threads", 4)
    cfg.set("keepalive", 5)
    worker = PollingWorker.serving_tls(tls)(0, os.getppid(), [plain, secure], None, 30, cfg, Logger(cfg))
    worker.tpool = worker.get_thread_pool()
    worker.poller = selectors.DefaultSelector()
    worker.method_queue.init()
    worker.wsgi, worker.alive = app, True
    loop = threading.Thread(target=worker.run, name="test-worker-loop", daemon=True)
    loop.start()
    try:
        yield Served(worker, plain.getsockname()[1], secure.getsockname()[1], tls, cert)
    finally:
        worker.alive = False
        worker.method_queue.defer(lambda: None)
        loop.join(30)
        worker.tpool.shutdown(wait=True)
        worker.tmp.close()
        assert not loop.is_alive()


def read_all(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out



def test_https_and_http_are_served_side_by_side_by_one_worker(served: Served) -> None:
    c = served.https()
    try:
        for path in ("/a", "/b"):
            c.request("GET", path)
            r = c.getresponse()
            assert (r.status, r.read()) == (200, f"https {path}\n".encode())
        c.request("POST", "/report", body=b'{"OK": true}', headers={"Content-Type": "application/json"})
        assert c.getresponse().read() == b'https /report\n{"OK": true}'
        assert c.sock is not None and c.sock.version() in ("TLSv1.2", "TLSv1.3")
        assert c.sock.selected_alpn_protocol() in (None, "http/1.1")
    finally:
        c.close()
    p = http.client.HTTPConnection("127.0.0.1", served.http_port, timeout=30)
    try:
        p.request("GET", "/plain")
        assert p.getresponse().read() == b"http /plain\n"
    finally:
        p.close()


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_tls_below_1_2_is_refused(served: Served) -> None:
    ctx = served.client_context()
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    ctx.set_ciphers("ALL:@SECLEVEL=0")
    with pytest.raises((ssl.SSLError, ConnectionResetError)):
        ctx.wrap_socket(served.tcp(), server_hostname="localhost")


def test_a_client_that_opens_tcp_and_never_starts_its_handshake_is_closed_as_a_slow_head(served: Served) -> None:
    before = served.closed("head-deadline")
    with served.tcp() as s:
        assert read_all(s) == b""
    assert served.closed("head-deadline") == before + 1


def test_a_client_that_drips_its_client_hello_is_closed_before_the_handshake_ends(served: Served) -> None:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = served.client_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    with served.tcp() as s:
        sent = 0
        for byte in hello:
            try:
                s.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += 1
            if is_closed_by_server(s, 1.0):
                break
        assert sent < len(hello), "the server waited for the whole handshake"


def test_the_handshakes_time_counts_against_the_heads_deadline(served: Served) -> None:
    """A client that waits 2 s before its handshake and then sends half a head is closed at the deadline
    from accept (3 s), not one started when the handshake ended."""
    raw = served.tcp()
    assert not is_closed_by_server(raw, 2.0)
    raw.settimeout(30)
    with served.client_context().wrap_socket(raw, server_hostname="localhost") as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        assert is_closed_by_server(s, 2.5)


def test_plain_http_on_the_https_port_gets_a_400_and_is_counted(served: Served) -> None:
    before = served.closed("tls-handshake")
    with served.tcp() as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = read_all(s)
    assert answer.startswith(b"HTTP/1.0 400 Bad Request\r\n") and b"HTTP request to an HTTPS server" in answer
    assert served.closed("tls-handshake") == before + 1


def test_a_broken_handshake_is_closed_and_counted(served: Served) -> None:
    before = served.closed("tls-handshake")
    with served.tcp() as s:
        s.sendall(b"\x16\x03\x01\x00\x05hello")  # a handshake record that holds no ClientHello
        read_all(s)
    assert served.closed("tls-handshake") == before + 1


def test_the_33rd_connection_from_one_source_closes_that_sources_oldest_stalled_handshake(served: Served) -> None:
    source = "127.0.3.1"
    held = [served.tcp(source) for _ in range(PER_SOURCE)]
    try:
        with served.tls_socket(source) as s:
            s.sendall(b"GET /newest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert read_all(s).endswith(b"https /newest\n")
        assert is_closed_by_server(held[0], 3), "the oldest stalled connection is still open"
        assert not is_closed_by_server(held[-1], 0.2), "a newer stalled connection was closed too"
    finally:
        for h in held:
            h.close()


def test_an_answer_the_tls_client_does_not_read_is_given_up_after_the_write_timeout(
        served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TLSAnswerSocket, "write_timeout", 0.5)
    before = served.closed("write-timeout")
    raw = served.tcp()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    with served.client_context().wrap_socket(raw, server_hostname="localhost") as s:
        s.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_for(lambda: served.closed("write-timeout") == before + 1, 30, what="the write given up")


def test_a_tls_client_that_reads_gets_a_large_answer_whole_and_a_clean_close(served: Served) -> None:
    with served.tls_socket() as s:
        s.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        head, _, body = read_all(s).partition(b"\r\n\r\n")  # ends at the server's close_notify, not a reset
    assert head.startswith(b"HTTP/1.1 200 OK") and body == b"x" * BIG


def test_a_malformed_request_over_tls_gets_gunicorns_400(served: Served) -> None:
    with served.tls_socket() as s:
        s.sendall(b"NOT HTTP\r\n\r\n")
        assert read_all(s).startswith(b"HTTP/1.1 400 ")


def served_certificate(served: Served) -> bytes:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with ctx.wrap_socket(served.tcp()) as s:
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return der


def der_of(cert: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.read_text())


def test_a_changed_certificate_is_served_to_new_connections_and_a_broken_one_is_not(
        served: Served, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert served_certificate(served) == der_of(served.cafile)
    new_cert, new_key = self_signed(tmp_path, "renewed", "renewed")
    for src, dst in ((new_cert, served.tls.cert_file), (new_key, served.tls.key_file)):
        os.replace(src, dst)  # as a Secret's update swaps the files
    wait_for(lambda: served_certificate(served) == der_of(Path(served.tls.cert_file)), 30,
             what="the renewed certificate served")
    Path(served.tls.key_file).write_text("not a key\n")
    wait_for(lambda: "Keeping the current TLS certificate" in caplog.text, 30, what="the broken pair refused")
    assert served_certificate(served) == der_of(Path(served.tls.cert_file))


def test_files_that_cannot_be_used_are_refused_naming_the_setting_at_fault(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, "server", "server")
    other_cert, other_key = self_signed(tmp_path, "other", "other")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    cases = [(str(tmp_path / "missing.crt"), str(key), "KH_TLS_CERT_FILE"),
             (str(cert), str(tmp_path / "missing.key"), "KH_TLS_KEY_FILE"),
             (str(garbage), str(key), "KH_TLS_CERT_FILE"),
             (str(cert), str(garbage), "KH_TLS_KEY_FILE"),
             (str(cert), str(other_key), "KH_TLS_KEY_FILE")]
    for cert_file, key_file, named in cases:
        with pytest.raises(ConfigError) as e:
            load_context(cert_file, key_file)
        assert named in str(e.value), (cert_file, key_file, str(e.value))
    assert isinstance(load_context(str(other_cert), str(other_key)), ssl.SSLContext)


def test_the_daemon_does_not_start_with_a_key_that_is_not_the_certificates(cluster: TestCluster,
                                                                            tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path, "server", "server")
    _, other_key = self_signed(tmp_path, "other", "other")
    d = DaemonProcess(cluster, tmp_path, "kh-bad-tls", "default", {
        "tlsCertFile": str(cert), "tlsKeyFile": str(other_key), "listenAddressTLS": f"127.0.0.1:{free_port()}"})
    try:
        assert d.start().wait(60) != 0
        assert "tlsKeyFile (KH_TLS_KEY_FILE)" in d.log(), d.log()[-2000:]
    finally:
        d.stop()
