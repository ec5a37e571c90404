"""The HTTP worker's buffering, stepped by hand: a fake socket and an injected clock, no threads.

A connection is ready for a pool thread only once its head and body are in (or it is to be handed on
as it is: refused by gunicorn, or too large for the app's 413); the deadlines move with the request.
A request is parsed once: in the pool thread when its head frames no body, else in the poller, whose
parse the pool thread then takes. The poller's reads and writes never block. Writing answers under
their deadline on real sockets: tests/integration/test_answer_writes.py.
"""
from __future__ import annotations

import selectors
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from gunicorn import http as gunicorn_http
from gunicorn.config import Config

from kuberhealthy.daemon import httpworker
from kuberhealthy.daemon.httpconn import (
    BODY_DEADLINE,
    HEAD_DEADLINE,
    MAX_CHUNKED_RAW,
    MAX_HEAD,
    Conn,
    State,
    buffer_parser,
    unread_bytes,
)
from kuberhealthy.daemon.httpworker import MAX_CONNS, PER_SOURCE, PollingWorker
from kuberhealthy.web.report.body import MAX_BODY

CFG = Config()
NOW = 100.0
POST = b"POST /externalCheckStatus HTTP/1.1\r\nHost: x\r\n"


class FakeSocket:
    def __init__(self, incoming: list[bytes | type[OSError]] | None = None) -> None:
        self.sent = b""
        self.flags: list[int] = []  # of every send and recv
        self.incoming = incoming or []

    def send(self, data: bytes, flags: int = 0) -> int:
        self.flags.append(flags)
        self.sent += data
        return len(data)

    def recv(self, size: int, flags: int = 0) -> bytes:
        self.flags.append(flags)
        got = self.incoming.pop(0)
        if isinstance(got, bytes):
            return got
        raise got()


def conn() -> tuple[Conn, FakeSocket]:
    sock = FakeSocket()
    c = Conn(sock, ("127.0.0.9", 4321), ("127.0.0.1", 8080), NOW)  # type: ignore[arg-type]
    return c, sock


def feed(c: Conn, data: bytes, now: float = NOW) -> bool:
    c.data += data
    return c.ready(CFG, now)


def chunked(body: bytes, size: int) -> bytes:
    pieces = [body[i:i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def test_a_new_connection_has_the_head_deadline_from_accept() -> None:
    c, _ = conn()
    assert (c.state, c.deadline, c.source) == (State.HEAD, NOW + HEAD_DEADLINE, "127.0.0.9")


def test_a_request_whose_head_is_not_in_yet_waits() -> None:
    c, _ = conn()
    assert not feed(c, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    assert c.state is State.HEAD


def test_a_request_without_a_body_is_ready_once_its_head_is_in() -> None:
    c, _ = conn()
    assert not feed(c, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r")
    assert feed(c, b"\n")


def test_a_body_still_to_come_waits_under_the_body_deadline_from_the_end_of_the_head() -> None:
    c, _ = conn()
    assert not feed(c, POST + b"Content-Length: 5\r\n\r\n{}", now=NOW + 2)
    assert (c.state, c.deadline) == (State.BODY, NOW + 2 + BODY_DEADLINE)
    assert not feed(c, b"  ", now=NOW + 3)
    assert feed(c, b"\n", now=NOW + 4)
    assert not c.must_close and c.drop is None


def test_a_content_length_over_the_limit_is_handed_on_at_once_and_the_connection_closes_after() -> None:
    c, _ = conn()
    assert feed(c, POST + b"Content-Length: %d\r\n\r\n{" % (MAX_BODY + 1))
    assert c.must_close


def test_a_chunked_body_is_ready_once_its_last_chunk_and_trailers_are_in() -> None:
    c, _ = conn()
    body = chunked(b'{"OK": true, "Errors": []}', 5)
    assert not feed(c, POST + b"Transfer-Encoding: chunked\r\n\r\n" + body[:-2])
    assert c.state is State.BODY
    assert feed(c, body[-2:])
    assert not c.must_close


def test_a_chunked_body_past_the_limit_is_handed_on_and_the_connection_closes_after() -> None:
    c, _ = conn()
    head = POST + b"Transfer-Encoding: chunked\r\n\r\n"
    assert not feed(c, head + b"%x\r\n" % (2 * MAX_BODY) + b" " * MAX_BODY)
    assert feed(c, b" ")
    assert c.must_close


def test_chunk_framing_too_wasteful_to_buffer_is_dropped() -> None:
    c, _ = conn()
    assert feed(c, POST + b"Transfer-Encoding: chunked\r\n\r\n" + b"1\r\nx\r\n" * (MAX_CHUNKED_RAW // 6 + 1))
    assert c.drop is not None


@pytest.mark.parametrize("head", [b"GET / HTTP/1.1\nHost: x", b"NOT HTTP\r\n\r\n",
                                  POST + b"Content-Length: 1\r\nContent-Length: 2\r\n\r\n",
                                  POST + b"Transfer-Encoding: gzip\r\n\r\n"],
                         ids=["bare-lf", "garbage", "two-lengths", "not-chunked"])
def test_a_head_gunicorn_refuses_is_handed_on_at_once_for_its_error_page(head: bytes) -> None:
    c, _ = conn()
    assert feed(c, head)
    with pytest.raises(Exception) as refused:
        next(buffer_parser(CFG, c.take(), c.client))
    assert type(refused.value).__module__ == "gunicorn.http.errors"


def test_a_head_past_64_kib_is_handed_on_for_gunicorn_to_judge() -> None:
    c, _ = conn()
    assert not feed(c, b"GET / HTTP/1.1\r\n" + b"X-Pad: " + b"y" * (MAX_HEAD // 2))
    assert feed(c, b"y" * MAX_HEAD)


def test_a_client_that_expects_100_continue_gets_it_from_the_poller_once() -> None:
    c, sock = conn()
    assert not feed(c, POST + b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\n")
    assert sock.sent == b"HTTP/1.1 100 Continue\r\n\r\n" and c.continued
    assert sock.flags == [socket.MSG_DONTWAIT]  # the poller never waits on a client's window
    assert feed(c, b"{}")


def test_the_poller_reads_without_waiting_on_a_socket_that_stays_blocking() -> None:
    sock = FakeSocket([b"GET / HTTP/1.1\r\n", BlockingIOError, ConnectionResetError, b""])
    c = Conn(sock, ("127.0.0.9", 4321), ("127.0.0.1", 8080), NOW)  # type: ignore[arg-type]
    assert [c.recv(), c.recv(), c.recv(), c.recv()] == [b"GET / HTTP/1.1\r\n", None, b"", b""]
    assert sock.flags == [socket.MSG_DONTWAIT] * 4


def counting_parsers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many gunicorn parsers httpconn makes from here on."""
    made = [0]
    get_parser = gunicorn_http.get_parser

    def counted(*args: Any, **kwargs: Any) -> Any:
        made[0] += 1
        return get_parser(*args, **kwargs)
    monkeypatch.setattr(gunicorn_http, "get_parser", counted)  # the module httpconn calls it from
    return made


def test_a_request_whose_head_frames_no_body_is_handed_on_unparsed_and_parsed_once_in_the_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made = counting_parsers(monkeypatch)
    c, _ = conn()
    assert feed(c, b"GET /?x=1 HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n")
    assert made == [0] and c.parser is None
    req: Any = c.request(CFG)
    assert (req.method, req.path, req.query, req.body.read()) == ("GET", "/", "x=1", b"")
    assert made == [1] and unread_bytes(c.parser) == b""


@pytest.mark.parametrize("header", [b"content-length: 2", b"CONTENT_LENGTH: 2", b"Content-Length: 2",
                                   b"transfer-ENCODING: chunked", b"Transfer_Encoding: chunked"])
def test_a_head_naming_a_body_in_any_spelling_is_parsed_in_the_poller(monkeypatch: pytest.MonkeyPatch,
                                                                      header: bytes) -> None:
    made = counting_parsers(monkeypatch)
    c, _ = conn()
    feed(c, POST + header + b"\r\n\r\n")
    assert made == [1]


def test_a_body_that_comes_after_its_head_reaches_the_thread_through_the_pollers_one_parse(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made = counting_parsers(monkeypatch)
    c, _ = conn()
    second = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    assert not feed(c, POST + b"Content-Length: 12\r\n\r\n{\"OK\": ")
    assert not feed(c, b"tr")
    assert feed(c, b"ue}" + second)
    req: Any = c.request(CFG)
    assert (req.method, req.body.read()) == ("POST", b'{"OK": true}')
    assert c.parser.finish_body() and unread_bytes(c.parser) == second
    assert made == [1] and not c.data


def test_a_body_header_in_a_pipelined_request_does_not_hold_back_the_get_before_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made = counting_parsers(monkeypatch)
    c, _ = conn()
    assert feed(c, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + POST + b"Content-Length: 2\r\n\r\n{}")
    assert made == [0]
    req: Any = c.request(CFG)
    assert req.method == "GET" and c.parser.finish_body()
    c.give_back(unread_bytes(c.parser))
    c.start_request(NOW + 1)
    assert c.ready(CFG, NOW + 1) and made == [2]
    assert c.request(CFG).body.read() == b"{}"


def test_the_buffered_request_parses_with_gunicorns_parser_and_leaves_the_pipelined_one() -> None:
    c, _ = conn()
    second = b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
    assert feed(c, POST + b"Content-Length: 2\r\n\r\n{}" + second)
    parser = buffer_parser(CFG, c.take(), c.client)
    req: Any = next(parser)
    assert (req.method, req.path, req.body.read(), req.peer_addr) == ("POST", "/externalCheckStatus", b"{}",
                                                                     ("127.0.0.9", 4321))
    assert parser.finish_body()
    c.give_back(unread_bytes(parser))
    c.start_request(NOW + 7)
    assert c.deadline == NOW + 7 + HEAD_DEADLINE
    assert c.ready(CFG, NOW + 7)


def test_the_parser_never_waits_for_bytes_that_are_not_buffered() -> None:
    parser = buffer_parser(CFG, POST + b"Content-Length: 10\r\n\r\n{", ("127.0.0.9", 1))
    req: Any = next(parser)
    assert req.body.read() == b"{"  # the end of the buffer is the end of input, never a blocking read


class FakePoller:
    def __init__(self) -> None:
        self.watched: set[int] = set()

    def register(self, sock: Any, events: int, data: Any) -> None:
        self.watched.add(id(sock))

    def unregister(self, sock: Any) -> None:
        self.watched.discard(id(sock))


class ClosableSocket(FakeSocket):
    closed = False

    def close(self) -> None:
        self.closed = True

    def fileno(self) -> int:
        return -1 if self.closed else 99


@pytest.fixture
def worker() -> Iterator[Any]:
    """The worker before its loop runs: its connection tables over fake sockets and a fake selector."""
    w = PollingWorker(0, 0, [], None, 30, Config(), None)
    w.poller = FakePoller()
    yield w
    w.tmp.close()


def admit(w: Any, source: str) -> ClosableSocket:
    sock = ClosableSocket()
    w._admit(Conn(sock, (source, 1000), ("127.0.0.1", 8080), time.monotonic()))  # type: ignore[arg-type]
    return sock


def test_the_33rd_connection_from_a_source_closes_its_oldest_waiting_one_and_is_taken(worker: Any) -> None:
    first = [admit(worker, "127.0.0.9") for _ in range(PER_SOURCE)]
    next(iter(worker.conns)).state = State.BUSY  # the oldest is in a thread: it cannot be closed
    other = admit(worker, "127.0.0.8")
    newest = admit(worker, "127.0.0.9")
    assert [s.closed for s in first[:3]] == [False, True, False]
    assert not other.closed and not newest.closed
    assert len(worker.by_source["127.0.0.9"]) == PER_SOURCE and len(worker.conns) == PER_SOURCE + 1
    assert worker.metrics.closed.labels("source-cap")._value.get() >= 1


def test_at_the_global_cap_the_processs_oldest_waiting_connection_is_closed(worker: Any) -> None:
    socks = [admit(worker, f"127.1.{i // 200}.{i % 200}") for i in range(MAX_CONNS)]
    newest = admit(worker, "127.2.0.1")
    assert socks[0].closed and not socks[1].closed and not newest.closed
    assert len(worker.conns) == MAX_CONNS


def test_deadlines_close_stalled_connections_and_idle_ones(worker: Any) -> None:
    stalled, idle = admit(worker, "127.0.0.9"), admit(worker, "127.0.0.8")
    conns = list(worker.conns)
    conns[1].state = State.IDLE
    worker._expire(time.monotonic() + HEAD_DEADLINE + 0.1)
    assert stalled.closed and idle.closed and not worker.conns and not worker.by_source


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


def test_the_worker_tells_the_arbiter_it_lives_once_a_heartbeat_not_at_every_turn_of_its_loop(
        worker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(NOW)
    monkeypatch.setattr(httpworker, "time", clock)
    notes: list[float] = []
    monkeypatch.setattr(worker, "notify", lambda: notes.append(clock.now))
    for step in range(25):  # 2.4 s of turns of the loop
        clock.now = NOW + step * 0.1
        worker._heartbeat()
    assert notes == [NOW, NOW + 1.0, NOW + 2.0]


def test_the_frozen_settings_read_as_gunicorns_config_does() -> None:
    cfg = Config()
    cfg.set("threads", 32)
    cfg.set("keepalive", 7)
    frozen = httpworker.FrozenSettings(cfg)
    for name in cfg.settings:
        assert getattr(frozen, name) == getattr(cfg, name), name  # sendfile and reuse_port: Config's properties
    assert (frozen.threads, frozen.keepalive, frozen.is_ssl) == (32, 7, cfg.is_ssl)
    assert frozen.forwarded_allow_networks() == cfg.forwarded_allow_networks()
    assert frozen.proxy_allow_networks() == cfg.proxy_allow_networks()
    assert frozen.worker_class_str == cfg.worker_class_str  # what it does not hold is the Config's
    with pytest.raises(AttributeError):
        frozen.no_such_setting  # noqa: B018


def test_a_request_parsed_with_the_frozen_settings_is_the_one_parsed_with_the_config() -> None:
    head = b"GET /x?y=1 HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 10.0.0.1\r\nAccept: */*\r\n\r\n"
    a, b = (next(buffer_parser(cfg, head, ("127.0.0.1", 9))) for cfg in (CFG, httpworker.FrozenSettings(CFG)))
    assert (a.method, a.uri, a.headers, a.scheme, a.version) == (b.method, b.uri, b.headers, b.scheme, b.version)


class ScriptedConn(Conn):
    """A connection whose reads follow a script: each step is (bytes or None, readiness it asks for next,
    why the client is refused or None), as a TLS connection's reads go (httptls.TLSConn)."""

    tls = True

    def __init__(self, sock: ClosableSocket, steps: list[tuple[bytes | None, int, str | None]]) -> None:
        super().__init__(sock, ("127.0.0.7", 1000), ("127.0.0.1", 8443), time.monotonic())  # type: ignore[arg-type]
        self.state = State.HANDSHAKE
        self.steps = steps
        self.half_closed = False

    def recv(self, size: int = 65536) -> bytes | None:
        data, self.events, self.refused = self.steps.pop(0)
        if data is not None and self.state is State.HANDSHAKE:
            self.state = State.HEAD
        return data

    def half_close(self) -> bool:
        self.half_closed = True
        return True


class ModifyingPoller(FakePoller):
    def __init__(self) -> None:
        super().__init__()
        self.modified: list[int] = []

    def modify(self, sock: Any, events: int, data: Any) -> None:
        self.modified.append(events)


def test_a_tls_connection_that_must_write_to_read_on_is_watched_for_writing_then_for_reading(worker: Any) -> None:
    worker.poller = ModifyingPoller()
    worker.tls_cfg = CFG
    c = ScriptedConn(ClosableSocket(), [(None, selectors.EVENT_WRITE, None), (None, selectors.EVENT_READ, None),
                                        (b"GET / HTTP/1.1\r\nHost: x\r\n", selectors.EVENT_READ, None)])
    worker._admit(c)
    for _ in range(3):
        worker._readable(c, c.sock)
    assert worker.poller.modified == [selectors.EVENT_WRITE, selectors.EVENT_READ]
    assert (c.state, bytes(c.data)) == (State.HEAD, b"GET / HTTP/1.1\r\nHost: x\r\n")


def test_a_connection_still_in_its_tls_handshake_at_the_deadline_is_closed_as_a_slow_head(worker: Any) -> None:
    sock = ClosableSocket()
    worker._admit(ScriptedConn(sock, []))
    before = worker.metrics.closed.labels("head-deadline")._value.get()
    worker._expire(time.monotonic() + HEAD_DEADLINE + 0.1)
    assert sock.closed and not worker.conns
    assert worker.metrics.closed.labels("head-deadline")._value.get() == before + 1


def test_a_client_that_broke_tls_is_counted_and_lingers_so_the_alert_reaches_it(worker: Any) -> None:
    worker.poller = ModifyingPoller()
    sock = ClosableSocket()
    c = ScriptedConn(sock, [(b"", selectors.EVENT_WRITE, "TLS: WRONG_VERSION_NUMBER")])
    worker._admit(c)
    before = worker.metrics.closed.labels("tls-handshake")._value.get()
    worker._readable(c, sock)
    assert (c.state, c.events, c.half_closed, sock.closed) == (State.LINGER, selectors.EVENT_READ, True, False)
    assert worker.metrics.closed.labels("tls-handshake")._value.get() == before + 1


def test_a_client_that_closes_during_its_handshake_is_an_ordinary_close(worker: Any) -> None:
    sock = ClosableSocket()
    c = ScriptedConn(sock, [(b"", selectors.EVENT_READ, None)])
    worker._admit(c)
    before = worker.metrics.closed.labels("tls-handshake")._value.get()
    worker._readable(c, sock)
    assert sock.closed and not worker.conns
    assert worker.metrics.closed.labels("tls-handshake")._value.get() == before
