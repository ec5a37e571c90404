"""The daemon's gunicorn worker: gthread's pool and WSGI path, but a connection gets a pool thread
only once its whole request is in (docs/interface.md#under-hostile-clients).

gunicorn's gthread worker hands each accepted connection to a pool thread, which then blocks reading
the request with no deadline: a few dozen clients that send half a request and stop hold every
thread, and `/healthz` stops answering. Here the worker's main loop (a selector; its reads never
block) buffers the request line, the headers and the body (httpconn.py), with deadlines rather
than idle timeouts: the head within HEAD_DEADLINE of accept (or of a kept-alive request's first
byte), the body within BODY_DEADLINE of its head; a connection that misses one is closed quietly (a
DEBUG line and a count). Kept-alive connections wait in the selector, closed after `keepalive`
seconds idle. At most PER_SOURCE open connections per peer address and MAX_CONNS in all: at a cap
the oldest waiting (idle or stalled) connection of that source, or of the process, is closed; the
new one is always taken. Answers are written by the pool thread with a deadline too (WRITE_TIMEOUT
per write), and a closing connection lingers in the selector, not in a thread.

The main loop is every request's way in and out, and each system call it makes hands the GIL to the
busy pool threads and waits to get it back: under load that wait, not the call, is its cost. So the
loop makes as few as it can: a client socket stays blocking for its whole life (the loop reads it
with MSG_DONTWAIT; the pool thread writes it without switching modes), a head without a body is not
parsed here (httpconn.py), and the arbiter hears from the worker once a HEARTBEAT, not every turn.
gunicorn's own per-request reads of its settings go to FrozenSettings. `python -m bench.web_bench`
measures `/` on this worker against bare Flask on stock gthread.

HTTP/1 only, no HTTP/2. With `tls` set (serving_tls()), the listener on its port is the HTTPS one:
its connections do their handshake in the main loop, under the head's deadline, and are otherwise
served as the plain ones, under the same caps and deadlines (httptls.py); gunicorn's own TLS
settings, which would wrap every listener, stay off. Shutdown is gthread's: stop accepting, give
kept-alive connections STOP_KEEPALIVE_LINGER, wait for the rest up to the graceful timeout.
"""
from __future__ import annotations

import copy
import errno
import heapq
import itertools
import logging
import selectors
import socket
import time
from concurrent import futures
from functools import partial
from typing import Any

from gunicorn import http
from gunicorn.workers.gthread import STOP_KEEPALIVE_LINGER, ThreadWorker
from prometheus_client import Counter
from prometheus_client.registry import Collector

from kuberhealthy.base.osnames import name_this_thread
from kuberhealthy.daemon.httpconn import WRITE_TIMEOUT, AnswerSocket, Conn, State, unread_bytes
from kuberhealthy.daemon.httptls import ServerTLS, TLSConn

logger = logging.getLogger(__name__)

PER_SOURCE = 32  # open connections per peer address
MAX_CONNS = 1000  # open connections in all
LINGER = 2.0  # seconds a half-closed connection may keep sending before it is closed
LINGER_MAX = 64 * 1024  # bytes drained from it at most
ACCEPT_BATCH = 64  # connections taken per wake-up of the listener
ACCEPT_PAUSE = 0.5  # seconds accepting pauses when out of descriptors and every connection is busy
POOL_THREADS = "kh-http"  # the pool threads' name prefix
HEARTBEAT = 1.0  # seconds between the worker's notes to the arbiter (gunicorn's timeout is 60 s)

HEAD_LATE, BODY_LATE, EVICTED_SOURCE, EVICTED_TOTAL, WRITE_LATE, DROPPED, TLS_REFUSED = (
    "head-deadline", "body-deadline", "source-cap", "total-cap", "write-timeout", "framing", "tls-handshake")
REASONS = (HEAD_LATE, BODY_LATE, EVICTED_SOURCE, EVICTED_TOTAL, WRITE_LATE, DROPPED, TLS_REFUSED)


class ConnectionMetrics:
    """kuberhealthy_http_connections_closed_total{reason}: connections the worker closed on a client
    that broke a rule (a deadline, a cap, framing not worth buffering), not the ordinary closes."""

    def __init__(self) -> None:
        self.closed = Counter("kuberhealthy_http_connections_closed",
                              "HTTP connections closed by the server on a slow or excess client, by reason",
                              ["reason"], registry=None)
        for reason in REASONS:
            self.closed.labels(reason)

    def count(self, reason: str) -> None:
        self.closed.labels(reason).inc()

    def collectors(self) -> list[Collector]:
        return [self.closed]


class FrozenSettings:
    """gunicorn's Config read once, for a worker whose settings never change (a reload starts new
    workers): each setting, and is_ssl, a plain attribute. gunicorn reads a setting through
    Config.__getattr__, which runs only after a normal lookup failed (an AttributeError raised and
    caught), some twenty times a request: read here, the same values cost `/` about a tenth less CPU
    per request in bench.web_bench. Anything else (methods, `settings`) is the Config's."""

    def __init__(self, cfg: Any) -> None:
        self._cfg = cfg
        for name in (*cfg.settings, "is_ssl"):
            setattr(self, name, getattr(cfg, name))  # Config's property where it has one (sendfile, ...)
        self._forwarded_networks = cfg.forwarded_allow_networks()
        self._proxy_networks = cfg.proxy_allow_networks()

    def forwarded_allow_networks(self) -> Any:
        return self._forwarded_networks

    def proxy_allow_networks(self) -> Any:
        return self._proxy_networks

    def __getattr__(self, name: str) -> Any:
        if name == "_cfg":  # not set yet (a copy being made): no endless lookup
            raise AttributeError(name)
        return getattr(self._cfg, name)


class PollingWorker(ThreadWorker):  # type: ignore[misc]  # gunicorn ships no types
    """gthread with the request buffered by the main loop (see the module docstring)."""

    metrics = ConnectionMetrics()  # one worker per process; the web app exports it
    tls: ServerTLS | None = None  # the HTTPS listener's port and certificate (serving_tls())

    @classmethod
    def serving_tls(cls, tls: ServerTLS | None) -> type[PollingWorker]:
        """This worker class, with the listener on `tls.port` serving HTTPS (gunicorn takes a class)."""
        if tls is None:
            return cls
        return type(cls.__name__, (cls,), {"tls": tls, "__doc__": cls.__doc__})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tls_cfg: Any = None  # the settings TLS connections' requests are parsed with (https)
        self._tls_listeners: set[int] = set()  # descriptors of the HTTPS listener
        self.conns: dict[Conn, None] = {}  # every open connection, oldest waiting first
        self.by_source: dict[str, dict[Conn, None]] = {}
        self._deadlines: list[tuple[float, int, Conn]] = []  # a heap; stale entries are skipped
        self._seq = itertools.count()
        self._accept_again = 0.0  # out of descriptors with nothing to close: accepting pauses until then
        self._next_heartbeat = 0.0

    @classmethod
    def check_config(cls, cfg: Any, log: Any) -> None:
        if cfg.is_ssl or "h2" in getattr(cfg, "http_protocols", ["h1"]):
            raise RuntimeError("PollingWorker serves plain HTTP/1 only")

    def get_thread_pool(self) -> futures.ThreadPoolExecutor:
        """gthread's pool, its threads named kh-http_N, in Python and to the operating system."""
        return futures.ThreadPoolExecutor(max_workers=self.cfg.threads, thread_name_prefix=POOL_THREADS,
                                          initializer=name_this_thread)

    # -- the main loop ------------------------------------------------------------------------------

    def run(self) -> None:
        self.cfg: Any = FrozenSettings(self.cfg)  # from here on every request reads it
        self._serve_tls()
        self.poller.register(self.method_queue.fileno(), selectors.EVENT_READ, self.method_queue.run_callbacks)
        self.set_accept_enabled(True)
        while self.alive:
            self._heartbeat()
            self.wait_for_and_dispatch_events(timeout=self._timeout())
            if not self.is_parent_alive():
                break
            self._expire(time.monotonic())
            if not self._accepting and time.monotonic() >= self._accept_again:
                self.set_accept_enabled(True)
            if self.tls is not None:
                self.tls.refresh(time.monotonic())
        # gthread's graceful stop: no new connections, kept-alive ones get a short linger (a request
        # that arrives meanwhile is answered with "Connection: close"), the rest until the graceful timeout.
        self.set_accept_enabled(False)
        now = time.monotonic()
        for conn in self.conns:
            if conn.state is State.IDLE:
                self._set_deadline(conn, min(conn.deadline, now + STOP_KEEPALIVE_LINGER))
        graceful = now + self.cfg.graceful_timeout
        while self.conns and time.monotonic() < graceful:
            self._heartbeat()
            self.wait_for_and_dispatch_events(timeout=self._timeout())
            self._expire(time.monotonic())
        for conn in list(self.conns):
            self._drop(conn)
        self.tpool.shutdown(wait=False)
        self.poller.close()
        self.method_queue.close()
        for s in self.sockets:
            s.close()

    def _serve_tls(self) -> None:
        """Find the HTTPS listener, and the settings its requests are parsed with (scheme https)."""
        self.tls_cfg = copy.copy(self.cfg)
        self.tls_cfg.is_ssl = True
        if self.tls is None:
            return
        self._tls_listeners = {s.fileno() for s in self.sockets if s.getsockname()[1] == self.tls.port}
        if not self._tls_listeners:
            raise RuntimeError(f"no listener on port {self.tls.port} to serve HTTPS on")

    def _heartbeat(self) -> None:
        """Tell the arbiter this worker lives (a file's mtime): at most every HEARTBEAT seconds, not at
        every turn of the loop, whose every system call costs the main thread the GIL back."""
        now = time.monotonic()
        if now >= self._next_heartbeat:
            self.notify()
            self._next_heartbeat = now + HEARTBEAT

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        """gthread's, with each callback guarded: a bug met by one connection closes that connection,
        not the worker (and with it the daemon)."""
        try:
            events = self.poller.select(timeout)
        except InterruptedError:
            return
        for key, _ in events:
            try:
                key.data(key.fileobj)
            except Exception:  # the top of the loop, for one event
                conn = getattr(key.data, "args", (None,))[0]
                logger.exception("HTTP worker: handling an event of %s failed", getattr(conn, "source", "?"))
                if isinstance(conn, Conn):
                    self._drop(conn)

    def _timeout(self) -> float:
        if not self._deadlines:
            return 1.0
        return min(1.0, max(0.0, self._deadlines[0][0] - time.monotonic()))

    def _set_deadline(self, conn: Conn, deadline: float) -> None:
        conn.deadline = deadline
        heapq.heappush(self._deadlines, (deadline, next(self._seq), conn))

    def _expire(self, now: float) -> None:
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, _, conn = heapq.heappop(self._deadlines)
            if conn not in self.conns or conn.state is State.BUSY or conn.deadline != deadline:
                continue  # closed, in a thread, or given a new deadline since
            if conn.state is State.HEAD:
                self._quiet_close(conn, HEAD_LATE, "headers not in within the deadline")
            elif conn.state is State.HANDSHAKE:
                self._quiet_close(conn, HEAD_LATE, "TLS handshake not done within the head's deadline")
            elif conn.state is State.BODY:
                self._quiet_close(conn, BODY_LATE, "body not in within the deadline")
            else:
                self._drop(conn)  # idle past keep-alive, or done lingering: ordinary closes

    # -- accepting, and the caps ----------------------------------------------------------------------

    def accept(self, listener: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, client = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    logger.warning("Cannot accept a connection (%s): closing the oldest waiting one", e)
                    if not self._evict(self.conns, EVICTED_TOTAL):  # all busy: wait, do not spin
                        self._accept_again = time.monotonic() + ACCEPT_PAUSE
                        self.set_accept_enabled(False)
                elif e.errno != errno.ECONNABORTED:
                    raise
                return
            tls = self.tls if listener.fileno() in self._tls_listeners else None
            try:
                if tls is None:
                    conn = Conn(AnswerSocket.adopt(sock), client, listener.getsockname(), time.monotonic())
                else:
                    conn = TLSConn(tls.wrap(sock), client, listener.getsockname(), time.monotonic())
            except OSError as e:  # the connection is closed; the next one may fare better
                logger.debug("Dropping a connection from %s: %s", client, e)
                continue
            self._admit(conn)

    def _admit(self, conn: Conn) -> None:
        same = self.by_source.setdefault(conn.source, {})
        if len(same) >= PER_SOURCE:
            self._evict(same, EVICTED_SOURCE)
        if len(self.conns) >= MAX_CONNS:
            self._evict(self.conns, EVICTED_TOTAL)
        self.nr_conns += 1
        self._track(conn)
        self._set_deadline(conn, conn.deadline)
        self._watch(conn)

    def _evict(self, among: dict[Conn, None], reason: str) -> bool:
        """Close the oldest connection of `among` that is not in a thread; False when all are."""
        victim = next((c for c in among if c.state is not State.BUSY), None)
        if victim is not None:
            self._quiet_close(victim, reason, "a connection cap was reached; closing the oldest waiting one")
        return victim is not None

    def _track(self, conn: Conn) -> None:
        """(Re)place `conn` as the newest waiting connection, for the caps' "oldest" order."""
        for table in (self.conns, self.by_source.setdefault(conn.source, {})):
            table.pop(conn, None)
            table[conn] = None

    def _untrack(self, conn: Conn) -> bool:
        if conn not in self.conns:
            return False
        del self.conns[conn]
        same = self.by_source.get(conn.source, {})
        same.pop(conn, None)
        if not same:
            self.by_source.pop(conn.source, None)
        self.nr_conns -= 1
        return True

    # -- reading --------------------------------------------------------------------------------------

    def _watch(self, conn: Conn) -> None:
        self.poller.register(conn.sock, conn.events, partial(self._readable, conn))
        conn.watched = conn.events

    def _unwatch(self, conn: Conn) -> None:
        try:
            self.poller.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass  # not registered, or the socket is already closed

    def _readable(self, conn: Conn, _sock: Any) -> None:
        data = conn.recv()
        if conn.events != conn.watched:  # TLS must write before it can read on (or is done writing)
            self.poller.modify(conn.sock, conn.events, partial(self._readable, conn))
            conn.watched = conn.events
        if data is None:
            return
        if conn.state is State.LINGER:
            conn.drained += len(data)
            if not data or conn.drained >= LINGER_MAX:
                self._drop(conn)
            return
        if not data:
            if conn.refused is None:
                self._drop(conn)  # the client closed (or reset) the connection
                return
            logger.debug("Closing the connection from %s: %s", conn.source, conn.refused)
            self.metrics.count(TLS_REFUSED)
            self._unwatch(conn)
            self._linger(conn)  # what was answered (a TLS alert, a 400) reaches the client before the close
            return
        now = time.monotonic()
        if conn.state is State.IDLE:
            conn.start_request(now)
            self._set_deadline(conn, conn.deadline)
        conn.data += data
        self._advance(conn, now)

    def _advance(self, conn: Conn, now: float) -> None:
        """After new bytes: a whole request goes to the pool; else it waits on (the end of its head
        starts the body's deadline)."""
        deadline = conn.deadline
        ready = conn.ready(self.tls_cfg if conn.tls else self.cfg, now)
        if conn.drop is not None:
            self._quiet_close(conn, DROPPED, conn.drop)
        elif ready:
            self._unwatch(conn)
            conn.state = State.BUSY
            self.enqueue_req(conn)
        elif conn.deadline != deadline:
            self._set_deadline(conn, conn.deadline)

    # -- closing ----------------------------------------------------------------------------------------

    def _quiet_close(self, conn: Conn, reason: str, why: str) -> None:
        logger.debug("Closing the connection from %s (%s): %s", conn.source, conn.state.value, why)
        self.metrics.count(reason)
        self._drop(conn)

    def _drop(self, conn: Conn) -> None:
        if self._untrack(conn):
            self._unwatch(conn)
            conn.close()

    def _linger(self, conn: Conn) -> None:
        """Half-close, then drain in the selector for LINGER at most (RFC 9112 9.6, without a thread)."""
        if conn.fileno() < 0 or not conn.half_close():
            self._drop(conn)
            return
        conn.state = State.LINGER
        conn.events = selectors.EVENT_READ
        self._set_deadline(conn, time.monotonic() + LINGER)
        self._watch(conn)

    # -- the pool thread, and back --------------------------------------------------------------------

    def enqueue_req(self, conn: Conn) -> None:
        fs = self.tpool.submit(self.handle, conn)
        fs.add_done_callback(lambda fut: self.method_queue.defer(self.finish_request, conn, fut))

    def finish_request(self, conn: Conn, fs: futures.Future[bool]) -> None:
        """In the main loop, after the pool thread: keep the connection alive or close it."""
        try:
            self._finish(conn, fs)
        except Exception:  # as gthread: the connection is closed, the worker carries on
            logger.exception("HTTP worker: finishing a request from %s failed", conn.source)
            self._drop(conn)

    def _finish(self, conn: Conn, fs: futures.Future[bool]) -> None:
        if conn not in self.conns:
            return
        conn.resume()
        keepalive = not fs.cancelled() and fs.exception() is None and fs.result()
        if not keepalive or conn.fileno() < 0:
            self._linger(conn)
            return
        now = time.monotonic()
        self._track(conn)
        self._watch(conn)
        if conn.data:  # the next request, pipelined behind this one
            conn.start_request(now)
            self._set_deadline(conn, conn.deadline)
            self._advance(conn, now)
            return
        conn.state = State.IDLE
        idle = now + self.cfg.keepalive
        if not self.alive:
            idle = min(idle, now + STOP_KEEPALIVE_LINGER)
        self._set_deadline(conn, idle)

    def handle(self, conn: Conn) -> bool:
        """In a pool thread: parse the buffered request with gunicorn's parser and answer it."""
        req = None
        try:
            req = conn.request(self.tls_cfg if conn.tls else self.cfg)
            if conn.must_close:
                req.force_close()
            if conn.continued:
                req._expected_100_continue = False
            keepalive = bool(self.handle_request(req, conn)) and bool(conn.parser.finish_body())
            conn.give_back(unread_bytes(conn.parser))
            return keepalive
        except (StopIteration, http.errors.NoMoreData) as e:
            logger.debug("Closing the connection from %s: %s", conn.source, e or "no request")
        except TimeoutError:
            logger.debug("Closing the connection from %s: the answer could not be written in %.0f s",
                         conn.source, WRITE_TIMEOUT)
            self.metrics.count(WRITE_LATE)
        except OSError as e:
            logger.debug("Closing the connection from %s: %s", conn.source, e)
        except Exception as e:  # noqa: BLE001 - as gthread's handle(): gunicorn's error page for the request
            self.handle_error(req, conn.sock, conn.client, e)
        return False

