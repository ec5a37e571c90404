"""wire.py against a real socket server on 127.0.0.1 (plain TCP; TLS with a certificate made by openssl), and
Kube on top of it: error statuses, the credential refresh hook, watch streams.

The server runs each accepted connection in a thread of its own with a handler the test writes; it counts
connections and records every request's bytes as they arrived. Nothing here sleeps: the tests wait on
Events, and a server that is to say nothing waits on its stop Event (bounded) instead.
"""
from __future__ import annotations

import json
import select
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes.client import ApiClient, Configuration

from kuberhealthy.base.errors import Conflict, Gone, NotFound, Unauthorized, Unreachable
from kuberhealthy.kube import client as kube_client
from kuberhealthy.kube.client import Kube
from kuberhealthy.kube.wire import Wire, WireError

T = (2.0, 2.0)  # (connect, read) seconds: ample on a busy machine, and a failure ends the test quickly
HOLD = 10.0  # seconds a handler that is to stay silent waits for the end of the test, at most


class Peer:
    """One accepted connection, as the server's handler sees it."""

    def __init__(self, sock: socket.socket, server: Server) -> None:
        self.sock = sock
        self.rfile = sock.makefile("rb")
        self.server = server

    def request(self) -> bytes | None:
        """The next request's bytes (head and Content-Length body), recorded; None when the client closed."""
        head = b""
        while True:
            line = self.rfile.readline(65536)
            if not line:
                return None
            head += line
            if line == b"\r\n":
                break
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        data = head + (self.rfile.read(length) if length else b"")
        self.server.record(data)
        return data

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def hold(self) -> None:
        """Say nothing until the test ends (bounded)."""
        self.server.stopped.wait(HOLD)


Handler = Callable[[Peer], None]


class Server:
    """A TCP (or TLS) server on 127.0.0.1 that serves each connection with `handler` in a thread of its own."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self._handler = handler
        self._tls = tls
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self.connections = 0
        self.requests: list[bytes] = []
        self._socks: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, name="wire-test-accept", daemon=True)]
        self._threads[0].start()

    def record(self, data: bytes) -> None:
        with self._lock:
            self.requests.append(data)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:  # the listener was shut down: the test is over
                return
            t = threading.Thread(target=self._serve, args=(sock,), name="wire-test-peer", daemon=True)
            with self._lock:
                self.connections += 1
                self._socks.append(sock)
                self._threads.append(t)
            t.start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            peer_sock = self._tls.wrap_socket(sock, server_side=True) if self._tls is not None else sock
            self._handler(Peer(peer_sock, self))
        except OSError:
            pass  # the client went away (or the test ended): nothing to serve
        finally:
            sock.close()

    def close(self) -> None:
        self.stopped.set()
        for s in [self._listener, *self._socks]:
            try:
                s.shutdown(socket.SHUT_RDWR)  # wakes a blocked accept() or recv() (close() alone does not)
            except OSError:
                pass
        self._listener.close()
        for t in list(self._threads):
            t.join(5)


def answer(body: bytes = b"{}", status: str = "200 OK", headers: str = "") -> bytes:
    """An answer with a Content-Length body; `headers` are extra lines ending in CRLF."""
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{headers}\r\n"
            .encode() + body)


def chunk(data: bytes, ext: str = "") -> bytes:
    return f"{len(data):x}{ext}\r\n".encode() + data + b"\r\n"


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
LAST_CHUNK = b"0\r\n\r\n"


def keep_alive(respond: Callable[[bytes], bytes]) -> Handler:
    """Answer every request on the connection with respond(request), until the client closes."""
    def handle(peer: Peer) -> None:
        while (req := peer.request()) is not None:
            peer.send(respond(req))
    return handle


def in_turn(*answers: bytes) -> Callable[[bytes], bytes]:
    """The n-th request to the server (on any connection) gets the n-th answer; later ones the last."""
    lock = threading.Lock()
    left = list(answers)

    def respond(_req: bytes) -> bytes:
        with lock:
            return left.pop(0) if len(left) > 1 else left[0]
    return respond


def header(req: bytes, name: str) -> str | None:
    for line in req.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name.lower().encode():
            return value.strip().decode()
    return None


class Bed:
    """Servers and the clients pointed at them, all closed when the test ends."""

    def __init__(self) -> None:
        self.servers: list[Server] = []
        self.closers: list[Callable[[], None]] = []

    def serve(self, handler: Handler, tls: ssl.SSLContext | None = None) -> Server:
        server = Server(handler, tls)
        self.servers.append(server)
        return server

    @staticmethod
    def config(server: Server, scheme: str = "http", path: str = "") -> Configuration:
        cfg = Configuration()
        cfg.host = f"{scheme}://127.0.0.1:{server.port}{path}"
        return cfg

    def wire(self, server: Server, scheme: str = "http", path: str = "",
             settings: dict[str, object] | None = None) -> Wire:
        cfg = self.config(server, scheme, path)
        for name, value in (settings or {}).items():
            setattr(cfg, name, value)
        wire = Wire(cfg)
        self.closers.append(wire.close)
        return wire

    def kube(self, cfg: Configuration, clock: Callable[[], float] = time.monotonic) -> Kube:
        kube = Kube(ApiClient(cfg), clock=clock)
        self.closers.append(kube.close)
        return kube

    def close(self) -> None:
        for close in self.closers:
            close()
        for server in self.servers:
            server.close()


@pytest.fixture
def bed() -> Iterator[Bed]:
    b = Bed()
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (and its key), made by the openssl command."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl command to make a certificate with")
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=30)
    return cert, key


def server_tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(certificate[0]), str(certificate[1]))
    return ctx


# --- answers ----------------------------------------------------------------------------------------------


def test_an_answer_with_content_length_is_read_whole_with_lower_case_header_names(bed: Bed) -> None:
    server = bed.serve(keep_alive(in_turn(answer(b'{"kind":"Pod"}', headers="X-Thing: One\r\n"))))
    got = bed.wire(server).request("GET", "/api/v1/pods", {}, None, T)
    assert (got.status, got.body) == (200, b'{"kind":"Pod"}')
    assert got.headers["x-thing"] == "One" and got.headers["content-length"] == "14"


def test_a_chunked_answer_with_extensions_and_trailers_is_joined_and_the_connection_stays_usable(bed: Bed) -> None:
    body = (CHUNKED_HEAD + chunk(b'{"items":', ";name=value") + chunk(b'[1,2,', ';q="x"') + chunk(b"3]}")
            + b"0;last\r\nX-Checksum: abc\r\nX-More: 1\r\n\r\n")
    server = bed.serve(keep_alive(in_turn(body, answer(b"second"))))
    wire = bed.wire(server)
    got = wire.request("GET", "/a", {}, None, T)
    assert (got.status, got.body) == (200, b'{"items":[1,2,3]}')
    # the trailers were read to their end: the next answer on the same connection parses cleanly
    assert wire.request("GET", "/b", {}, None, T).body == b"second"
    assert server.connections == 1


def test_a_watch_stream_yields_its_json_lines_as_they_arrive_even_when_split_across_chunks(bed: Bed) -> None:
    first_read, go_on = threading.Event(), threading.Event()

    def handle(peer: Peer) -> None:
        peer.request()
        peer.send(CHUNKED_HEAD + chunk(b'{"type":"ADDED",') + chunk(b'"n":1}\n{"type":"MOD'))
        go_on.wait(HOLD)  # the first line must come out before the rest is even sent
        peer.send(chunk(b'IFIED","n":2}\n\n{"type":') + chunk(b'"DELETED","n":3}') + LAST_CHUNK)
        peer.hold()

    server = bed.serve(handle)
    stream = bed.wire(server).request("GET", "/w?watch=true", {}, None, T, stream=True)
    assert stream.status == 200 and stream.body == b""
    seen: list[dict[str, object]] = []
    for line in stream.lines():
        seen.append(json.loads(line))
        if not first_read.is_set():
            first_read.set()
            go_on.set()
    stream.close()
    assert seen == [{"type": "ADDED", "n": 1}, {"type": "MODIFIED", "n": 2}, {"type": "DELETED", "n": 3}]


def test_an_answer_without_a_length_is_read_until_the_server_closes_and_its_connection_is_not_kept(
        bed: Bed) -> None:
    def handle(peer: Peer) -> None:
        peer.request()
        peer.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nline one\nline two\n")

    server = bed.serve(handle)
    wire = bed.wire(server)
    assert wire.request("GET", "/log", {}, None, T).body == b"line one\nline two\n"
    assert wire.request("GET", "/log", {}, None, T).body == b"line one\nline two\n"
    assert server.connections == 2


# --- kept connections -------------------------------------------------------------------------------------


def test_a_keep_alive_answers_connection_is_reused_for_the_next_requests(bed: Bed) -> None:
    server = bed.serve(keep_alive(lambda req: answer(req.split(b" ")[1])))
    wire = bed.wire(server)
    assert [wire.request("GET", f"/r{i}", {}, None, T).body for i in range(3)] == [b"/r0", b"/r1", b"/r2"]
    assert server.connections == 1 and len(server.requests) == 3


def test_a_connection_close_answer_is_not_kept_even_when_the_server_leaves_it_open(bed: Bed) -> None:
    def handle(peer: Peer) -> None:
        peer.request()
        peer.send(answer(b"bye", headers="Connection: close\r\n"))
        peer.hold()  # a client that sent a second request here would wait for its read timeout

    server = bed.serve(handle)
    wire = bed.wire(server)
    assert wire.request("GET", "/a", {}, None, T).body == b"bye"
    assert wire.request("GET", "/b", {}, None, T).body == b"bye"
    assert server.connections == 2


def test_a_connection_the_server_closed_while_idle_is_not_reused_and_the_next_request_succeeds(bed: Bed) -> None:
    def handle(peer: Peer) -> None:
        peer.request()
        peer.send(answer(b"once"))  # kept alive by the answer's headers, then closed (an idle timeout)
        peer.sock.shutdown(socket.SHUT_RDWR)

    server = bed.serve(handle)
    wire = bed.wire(server)
    assert wire.request("GET", "/a", {}, None, T).body == b"once"
    poller = select.poll()
    poller.register(wire._idle[0].sock, select.POLLIN | select.POLLHUP)  # kept: the answer said nothing of closing
    assert poller.poll(5000), "the server's close never reached the client"
    assert wire.request("GET", "/b", {}, None, T).body == b"once"  # not a WireError from the dead one
    assert server.connections == 2


def test_a_server_that_never_answers_raises_the_read_timeout_and_the_connection_is_dropped(bed: Bed) -> None:
    def handle(peer: Peer) -> None:
        if peer.server.connections == 1:
            peer.request()
            peer.hold()
        else:
            keep_alive(in_turn(answer(b"late")))(peer)

    server = bed.serve(handle)
    wire = bed.wire(server)
    started = time.monotonic()
    with pytest.raises(OSError):  # socket.timeout (TimeoutError) is an OSError
        wire.request("GET", "/silent", {}, None, (2.0, 0.3))
    waited = time.monotonic() - started
    assert 0.25 <= waited < HOLD / 2  # the read timeout ended it, not the server giving up after HOLD
    assert wire.request("GET", "/again", {}, None, T).body == b"late"
    assert server.connections == 2


def test_a_garbage_status_line_raises_wire_error(bed: Bed) -> None:
    def handle(peer: Peer) -> None:
        peer.request()
        peer.send(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        peer.hold()

    server = bed.serve(handle)
    with pytest.raises(WireError, match="status line"):
        bed.wire(server).request("GET", "/", {}, None, T)


def test_a_204_answer_without_a_length_has_no_body_and_keeps_its_connection(bed: Bed) -> None:
    server = bed.serve(keep_alive(in_turn(b"HTTP/1.1 204 No Content\r\nAudit-Id: 1\r\n\r\n", answer(b"next"))))
    wire = bed.wire(server)
    got = wire.request("DELETE", "/x", {}, None, (2.0, 0.5))  # today: blocks for the read timeout, then raises
    assert (got.status, got.body) == (204, b"")
    assert wire.request("GET", "/y", {}, None, T).body == b"next"
    assert server.connections == 1


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_shutdown_from_another_thread_unblocks_a_reader_blocked_in_lines(bed: Bed, scheme: str,
                                                                          request: pytest.FixtureRequest) -> None:
    def handle(peer: Peer) -> None:
        peer.request()
        peer.send(CHUNKED_HEAD + chunk(b'{"type":"ADDED"}\n'))
        peer.hold()  # then silence: the reader blocks

    tls = server_tls(request.getfixturevalue("certificate")) if scheme == "https" else None
    server = bed.serve(handle, tls=tls)
    wire = bed.wire(server, scheme, settings={"verify_ssl": False})
    stream = wire.request("GET", "/w", {}, None, (2.0, HOLD), stream=True)
    got_one, ended = threading.Event(), threading.Event()
    outcome: list[object] = []

    def read() -> None:
        try:
            for line in stream.lines():
                outcome.append(line)
                got_one.set()
        except OSError as e:  # WireError: the connection ended inside the chunked body
            outcome.append(e)
        ended.set()

    reader = threading.Thread(target=read, name="wire-test-reader", daemon=True)
    reader.start()
    assert got_one.wait(5)
    stream.shutdown()
    assert ended.wait(HOLD / 2), "the reader stayed blocked after shutdown()"
    reader.join(1)
    stream.close()
    assert outcome[0] == b'{"type":"ADDED"}' and len(outcome) == 2 and isinstance(outcome[1], OSError)


# --- the request on the wire ------------------------------------------------------------------------------


def test_the_request_carries_its_line_host_headers_and_a_content_length_for_bodies(bed: Bed) -> None:
    server = bed.serve(keep_alive(in_turn(answer())))
    wire = bed.wire(server, path="/prefix/")
    hdrs = {"Accept": "application/json", "Authorization": "Bearer abc", "Content-Type": "application/json"}
    wire.request("GET", "/api/v1/pods?limit=5", {"Accept": "application/json"}, None, T)
    wire.request("POST", "/api/v1/namespaces/ns/pods", hdrs, b'{"a":1}', T)
    wire.request("PUT", "/x", hdrs, None, T)
    wire.request("PATCH", "/x", hdrs, b"", T)
    wire.request("DELETE", "/x", hdrs, b"{}", T)
    get, post, put, patch, delete = server.requests
    assert get.startswith(b"GET /prefix/api/v1/pods?limit=5 HTTP/1.1\r\n")
    assert header(get, "Host") == f"127.0.0.1:{server.port}"
    assert header(get, "Accept") == "application/json" and header(get, "Content-Length") is None
    assert post.startswith(b"POST /prefix/api/v1/namespaces/ns/pods HTTP/1.1\r\n")
    assert post.endswith(b"\r\n\r\n" + b'{"a":1}') and header(post, "Content-Length") == "7"
    assert header(post, "Authorization") == "Bearer abc" and header(post, "Content-Type") == "application/json"
    assert header(put, "Content-Length") == "0"  # an empty-bodied PUT still says so: servers ask otherwise
    assert header(patch, "Content-Length") == "0"
    assert header(delete, "Content-Length") == "2" and delete.endswith(b"{}")
    assert all(header(r, "Host") == f"127.0.0.1:{server.port}" for r in server.requests)


# --- when wire.py stands aside --------------------------------------------------------------------------------


@pytest.mark.parametrize(("settings", "usable"), [
    ({}, True),
    ({"verify_ssl": False}, True),
    ({"assert_hostname": True}, True),
    ({"proxy": "http://proxy.example:3128"}, False),
    ({"assert_hostname": "apiserver.internal"}, False),
    ({"socket_options": [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]}, False),
])
def test_wire_is_usable_only_for_a_configuration_it_fully_serves(bed: Bed, settings: dict[str, object],
                                                                 usable: bool) -> None:
    server = bed.serve(keep_alive(in_turn(answer())))
    assert bed.wire(server, settings=settings).usable is usable


def test_a_kube_whose_configuration_has_a_proxy_stays_on_urllib3(bed: Bed) -> None:
    server = bed.serve(keep_alive(in_turn(answer())))
    cfg = bed.config(server)
    cfg.proxy = "http://proxy.example:3128"
    assert bed.kube(cfg)._wire is None


# --- TLS --------------------------------------------------------------------------------------------------


def test_requests_over_tls_share_one_kept_connection(bed: Bed, certificate: tuple[Path, Path]) -> None:
    server = bed.serve(keep_alive(lambda req: answer(req.split(b" ")[1])), tls=server_tls(certificate))
    wire = bed.wire(server, "https", settings={"verify_ssl": False})
    assert [wire.request("GET", f"/t{i}", {}, None, T).body for i in range(3)] == [b"/t0", b"/t1", b"/t2"]
    assert server.connections == 1


def test_tls_verifies_the_server_against_the_configured_ca(bed: Bed, certificate: tuple[Path, Path]) -> None:
    server = bed.serve(keep_alive(in_turn(answer(b"trusted"))), tls=server_tls(certificate))
    trusting = bed.wire(server, "https", settings={"ssl_ca_cert": str(certificate[0])})
    assert trusting.request("GET", "/", {}, None, T).body == b"trusted"
    stranger = bed.wire(server, "https")  # the system's CAs do not know this certificate
    with pytest.raises(ssl.SSLError):
        stranger.request("GET", "/", {}, None, T)


# --- Kube over the wire -----------------------------------------------------------------------------------


def status(code: int, reason: str, message: str) -> bytes:
    doc = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason,
           "code": code}
    return answer(json.dumps(doc).encode(), status=f"{code} {reason}")


def test_error_statuses_become_our_error_types_with_the_servers_message(bed: Bed) -> None:
    server = bed.serve(keep_alive(in_turn(
        status(404, "NotFound", 'khstates.comcast.github.io "c" not found'),
        status(409, "AlreadyExists", 'khstates.comcast.github.io "c" already exists'))))
    kube = bed.kube(bed.config(server))
    assert kube._wire is not None  # these requests went over wire.py
    with pytest.raises(NotFound, match='"c" not found') as missing:
        kube.request("GET", "/apis/comcast.github.io/v1/namespaces/ns/khstates/c")
    assert missing.value.reason == "NotFound"
    with pytest.raises(Conflict, match='"c" already exists') as taken:
        kube.request("POST", "/apis/comcast.github.io/v1/namespaces/ns/khstates", body={"metadata": {}})
    assert taken.value.already_exists


def test_a_watch_that_opens_with_an_error_status_raises_it_and_a_broken_one_raises_unreachable(bed: Bed) -> None:
    def handle(peer: Peer) -> None:
        peer.request()
        if peer.server.connections == 1:
            peer.send(status(410, "Expired", "too old resource version: 1 (5)"))
        else:
            peer.send(CHUNKED_HEAD + chunk(b'{"type":"ADDED","object":{}}\n'))
            peer.hold()
        peer.hold()

    server = bed.serve(handle)
    kube = bed.kube(bed.config(server))
    with pytest.raises(Gone, match="too old"):
        kube.open_stream("/api/v1/pods", {"watch": "true"}, 5.0)
    raw = kube.open_stream("/api/v1/pods", {"watch": "true"}, HOLD)
    got_one = threading.Event()
    outcome: list[object] = []

    def read() -> None:
        try:
            for line in kube.iter_lines(raw):
                outcome.append(json.loads(line))
                got_one.set()
        except Unreachable as e:
            outcome.append(e)

    reader = threading.Thread(target=read, name="wire-test-watch", daemon=True)
    reader.start()
    assert got_one.wait(5)
    Kube.shutdown_stream(raw)  # what Reflector.stop() does
    reader.join(HOLD / 2)
    assert not reader.is_alive()
    assert outcome[0] == {"type": "ADDED", "object": {}} and isinstance(outcome[1], Unreachable)


def test_a_refused_connection_is_unreachable(bed: Bed) -> None:
    server = bed.serve(keep_alive(in_turn(answer())))
    cfg = bed.config(server)
    server.close()  # nobody listens on that port now
    with pytest.raises(Unreachable):
        bed.kube(cfg).request("GET", "/api", timeout=2.0)


class Hook:
    """A credential refresh hook that counts its calls and hands out a new token each time."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, cfg: Configuration) -> None:
        self.calls += 1
        cfg.api_key["authorization"] = f"t{self.calls}"


def token_config(cfg: Configuration) -> Hook:
    hook = Hook()
    cfg.api_key = {"authorization": "t"}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    cfg.refresh_api_key_hook = hook  # type: ignore[assignment]  # typed None in the client
    return hook


def test_a_401_makes_the_next_request_call_the_refresh_hook_again(bed: Bed) -> None:
    server = bed.serve(keep_alive(in_turn(answer(), status(401, "Unauthorized", "Unauthorized"), answer())))
    cfg = bed.config(server)
    hook = token_config(cfg)
    kube = bed.kube(cfg, clock=lambda: 100.0)  # time stands still: only the 401 can bring the hook back
    kube.request("GET", "/a")
    with pytest.raises(Unauthorized):
        kube.request("GET", "/b")
    assert hook.calls == 1
    kube.request("GET", "/c")
    assert hook.calls == 2
    assert [header(r, "Authorization") for r in server.requests] == ["Bearer t1", "Bearer t1", "Bearer t2"]


def test_the_refresh_hook_runs_at_most_once_per_auth_refresh_seconds(bed: Bed) -> None:
    server = bed.serve(keep_alive(in_turn(answer())))
    cfg = bed.config(server)
    hook = token_config(cfg)
    now = [50.0]
    kube = bed.kube(cfg, clock=lambda: now[0])
    calls = []
    for at in (0.0, 0.0, kube_client.AUTH_REFRESH * 0.9, kube_client.AUTH_REFRESH, kube_client.AUTH_REFRESH * 1.5,
               kube_client.AUTH_REFRESH * 2.1):
        now[0] = 50.0 + at
        kube.request("GET", "/a")
        calls.append(hook.calls)
    assert calls == [1, 1, 1, 2, 2, 3]
    assert header(server.requests[-1], "Authorization") == "Bearer t3"


def test_a_request_body_is_sent_as_compact_json_with_its_content_type(bed: Bed) -> None:
    server = bed.serve(keep_alive(in_turn(answer(b'{"ok":true}'))))
    kube = bed.kube(bed.config(server))
    got = kube.request("PATCH", "/x", body={"spec": {"a": 1}}, content_type="application/merge-patch+json")
    assert got == {"ok": True}
    req = server.requests[0]
    assert req.endswith(b'\r\n\r\n{"spec":{"a":1}}') and header(req, "Content-Length") == "16"
    assert header(req, "Content-Type") == "application/merge-patch+json"
    assert header(req, "Accept") == "application/json"
