"""Answers written on real loopback sockets: the worker's sockets stay blocking and the kernel completes
each send, yet a client that does not read, or reads a trickle, still costs a pool thread at most
the write timeout (docs/interface.md#under-hostile-clients); a client that reads gets every byte.

No test bed: a listener on 127.0.0.1, the worker without its loop. Timeouts here are short; nothing
asserts how long anything took.
"""
from __future__ import annotations

import io
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gunicorn.config import Config
from gunicorn.glogging import Logger

from kuberhealthy.daemon.httpconn import AnswerSocket, Conn
from kuberhealthy.daemon.httpworker import WRITE_LATE, PollingWorker

BIG = 16 * 1024 * 1024  # past what loopback's socket buffers hold
SHORT = 0.3  # seconds: the write timeout under test


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(the server's accepted socket, the client's), the client's receive buffer small."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(listener.getsockname())
        server, _ = listener.accept()
    try:
        yield server, client
    finally:
        server.close()
        client.close()


def reader(sock: socket.socket, take: int | None = None, pause: float = 0.0) -> tuple[threading.Thread, bytearray,
                                                                                       threading.Event]:
    """A thread reading `sock` (all of it, or `take` bytes at a time with `pause` between) until the
    peer closes or the returned event is set."""
    got = bytearray()
    stop = threading.Event()

    def run() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                chunk = sock.recv(take or 1 << 20)
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk:
                return
            got.extend(chunk)
            if pause:
                stop.wait(pause)
    t = threading.Thread(target=run, name="test-reader", daemon=True)
    t.start()
    return t, got, stop


def test_an_answer_the_client_does_not_read_is_given_up_after_the_write_timeout(
        pair: tuple[socket.socket, socket.socket]) -> None:
    answer = AnswerSocket.adopt(pair[0], write_timeout=SHORT)
    assert answer.gettimeout() is None  # blocking: the kernel completes each send
    with pytest.raises(TimeoutError):
        answer.sendall(b"x" * BIG)


def test_a_client_that_reads_a_trickle_is_given_up_after_the_write_timeout_in_all(
        pair: tuple[socket.socket, socket.socket]) -> None:
    answer = AnswerSocket.adopt(pair[0], write_timeout=SHORT)
    thread, got, stop = reader(pair[1], take=2048, pause=0.01)
    try:
        with pytest.raises(TimeoutError):
            answer.sendall(b"x" * BIG)  # each send() makes progress; the whole has one deadline
        assert got, "the trickle was read"
    finally:
        stop.set()
        thread.join(5)


@pytest.mark.parametrize("how", ["sendall", "sendfile"])
def test_a_client_that_reads_gets_the_whole_answer(pair: tuple[socket.socket, socket.socket], how: str) -> None:
    answer = AnswerSocket.adopt(pair[0], write_timeout=10)
    body = bytes(range(256)) * (BIG // 256)
    thread, got, stop = reader(pair[1])
    try:
        if how == "sendall":
            answer.sendall(body)
        else:
            assert answer.sendfile(io.BytesIO(b"skip" + body), offset=4) == len(body)
        answer.shutdown(socket.SHUT_WR)
        thread.join(30)
        assert got == body
    finally:
        stop.set()
        thread.join(5)


def test_a_file_answer_the_client_does_not_read_is_given_up_too(pair: tuple[socket.socket, socket.socket]) -> None:
    answer = AnswerSocket.adopt(pair[0], write_timeout=SHORT)
    with pytest.raises(TimeoutError):
        answer.sendfile(io.BytesIO(b"x" * BIG))


def test_made_non_blocking_it_writes_what_fits_and_stops(pair: tuple[socket.socket, socket.socket]) -> None:
    """gunicorn writes its error pages that way: never waiting on the client."""
    answer = AnswerSocket.adopt(pair[0], write_timeout=10)
    answer.setblocking(False)
    with pytest.raises(BlockingIOError):
        answer.sendall(b"x" * BIG)


@pytest.fixture
def worker() -> Iterator[Any]:
    w = PollingWorker(0, 0, [], None, 30, Config(), Logger(Config()))
    yield w
    w.tmp.close()


class Listener:
    """A listening socket the worker accepts from (poller-less: the test calls accept itself)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.setblocking(False)

    def connect(self) -> socket.socket:
        return socket.create_connection(self.sock.getsockname())


class NoPoller:
    def register(self, sock: Any, events: int, data: Any) -> None:
        pass

    def unregister(self, sock: Any) -> None:
        pass


def test_the_worker_takes_each_connection_as_a_blocking_answer_socket(worker: Any) -> None:
    worker.poller = NoPoller()
    listener = Listener()
    client = listener.connect()
    try:
        worker.accept(listener.sock)
        (conn,) = worker.conns
        assert isinstance(conn.sock, AnswerSocket) and conn.sock.gettimeout() is None
        assert conn.sock.write_timeout == 10.0
    finally:
        for c in worker.conns:
            c.close()
        client.close()
        listener.sock.close()


def big_app(size: int) -> Callable[[dict[str, Any], Any], list[bytes]]:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(size))])
        return [b"x" * size]
    return app


def test_the_worker_gives_up_an_answer_its_client_does_not_read_and_counts_it(
        worker: Any, pair: tuple[socket.socket, socket.socket]) -> None:
    worker.wsgi = big_app(BIG)
    answer = AnswerSocket.adopt(pair[0], write_timeout=SHORT)
    conn = Conn(answer, ("127.0.0.1", 1), ("127.0.0.1", 2), 0.0)
    conn.data += b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    assert conn.ready(worker.cfg, 0.0)
    counted = worker.metrics.closed.labels(WRITE_LATE)._value.get()
    assert worker.handle(conn) is False  # not kept alive: the connection is closed
    assert worker.metrics.closed.labels(WRITE_LATE)._value.get() == counted + 1


def test_the_worker_answers_a_reading_client_in_full_and_keeps_the_connection(
        worker: Any, pair: tuple[socket.socket, socket.socket]) -> None:
    worker.wsgi = big_app(BIG)
    answer = AnswerSocket.adopt(pair[0], write_timeout=10)
    conn = Conn(answer, ("127.0.0.1", 1), ("127.0.0.1", 2), 0.0)
    conn.data += b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    assert conn.ready(worker.cfg, 0.0)
    thread, got, stop = reader(pair[1])
    try:
        assert worker.handle(conn) is True
        answer.shutdown(socket.SHUT_WR)
        thread.join(30)
        head, _, body = bytes(got).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK") and body == b"x" * BIG
    finally:
        stop.set()
        thread.join(5)
