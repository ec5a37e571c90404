"""A loopback TCP proxy that can go silent: a frozen network path or a half-dead load balancer.

The daemon's kubeconfig points at the proxy; the proxy forwards bytes to the API server (TLS passes
through untouched). `stall()` stops forwarding in both directions on existing and new connections
while keeping every socket open: clients see a silent stream, never a reset or an EOF, which is the
failure a client-side read timeout must catch. `resume()` forwards again: whatever was held back
flows on, as after a healed partition, or, with `blackhole_old=True`, only connections opened after
the resume flow and the older ones stay open and silent for good (a load balancer that lost its flow
table), so a client that never times out a silent stream never recovers. `stop()` closes everything
and joins every thread.

With several targets it is a crude Service: each new connection goes to the next target that accepts
it (round robin, skipping the ones that refuse). No TLS termination, no latency or bandwidth shaping.
"""
from __future__ import annotations

import logging
import select
import socket
import threading
import time
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

POLL = 0.2  # seconds: how often a pump re-checks the stop/stall flags
CHUNK = 65536
MAX_CONNECTIONS = 256  # connections beyond this are closed at once (a bound, not a feature)
JOIN_TIMEOUT = 5.0


@dataclass
class _Conn:
    client: socket.socket
    upstream: socket.socket | None = None
    blackholed: bool = False
    threads: list[threading.Thread] = field(default_factory=list)
    closed: threading.Event = field(default_factory=threading.Event)

    def close(self) -> None:
        self.closed.set()
        for s in (self.client, self.upstream):
            if s is None:
                continue
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


class TcpProxy:
    """127.0.0.1:<free port> -> targets, (host, port) pairs. start() once, stop() (idempotent) once."""

    def __init__(self, *targets: tuple[str, int], listen_host: str = "127.0.0.1") -> None:
        if not targets:
            raise ValueError("a proxy needs at least one target")
        self.targets = list(targets)
        self._next_target = 0
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((listen_host, 0))
        self._listener.listen(64)
        self.host, self.port = self._listener.getsockname()[:2]
        self._stop = threading.Event()
        self._flowing = threading.Event()  # set = forwarding; clear = stalled
        self._flowing.set()
        self._lock = threading.Lock()
        self._conns: list[_Conn] = []
        self.accepted = 0
        self.accept_times: list[float] = []  # time.time() of every accepted connection
        self._accept_thread = threading.Thread(target=self._accept_loop, name="tcpproxy-accept", daemon=True)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def stalled(self) -> bool:
        return not self._flowing.is_set()

    def start(self) -> TcpProxy:
        self._accept_thread.start()
        return self

    def stall(self) -> None:
        """Forward nothing more, in either direction, on any connection (new ones are accepted and held)."""
        self._flowing.clear()
        logger.info("proxy %s stalled", self.address)

    def resume(self, blackhole_old: bool = False) -> None:
        """Forward again; with blackhole_old, every connection opened so far stays silent for good."""
        if blackhole_old:
            with self._lock:
                for c in self._conns:
                    c.blackholed = True
        self._flowing.set()
        logger.info("proxy %s resumed%s", self.address, " (old connections black-holed)" if blackhole_old else "")

    def accepted_since(self, t: float) -> list[float]:
        """Accept times (time.time()) at or after t."""
        with self._lock:
            return [a for a in self.accept_times if a >= t]

    def drop_all(self) -> None:
        """Close every proxied connection now (a reset path, unlike stall())."""
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            c.close()

    def stop(self) -> None:
        self._stop.set()
        self._flowing.set()  # let stalled pumps see the stop flag
        try:
            self._listener.close()
        except OSError:
            pass
        if self._accept_thread.ident is not None:
            self._accept_thread.join(JOIN_TIMEOUT)
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            c.close()
        for c in conns:
            for t in c.threads:
                t.join(JOIN_TIMEOUT)
                if t.is_alive():
                    logger.error("proxy thread %s did not stop", t.name)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- threads -------------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        self._listener.settimeout(POLL)
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                self._stop.wait(POLL)
                continue
            with self._lock:
                self._conns = [c for c in self._conns if not c.closed.is_set()]
                if len(self._conns) >= MAX_CONNECTIONS:
                    client.close()
                    logger.warning("proxy %s: too many connections; closing a new one", self.address)
                    continue
                conn = _Conn(client)
                self._conns.append(conn)
                self.accepted += 1
                self.accept_times.append(time.time())
                n = self.accepted
            t = threading.Thread(target=self._serve, args=(conn,), name=f"tcpproxy-{n}", daemon=True)
            conn.threads.append(t)
            t.start()

    def _may_flow(self, conn: _Conn) -> bool:
        return self._flowing.is_set() and not conn.blackholed

    def _wait_flowing(self, conn: _Conn) -> bool:
        """Block while this connection may not forward; False once the proxy or it is closing."""
        while True:
            if self._stop.is_set() or conn.closed.is_set():
                return False
            if self._may_flow(conn):
                return True
            if conn.blackholed:
                conn.closed.wait(POLL)
            else:
                self._flowing.wait(POLL)

    def _connect_upstream(self) -> socket.socket | None:
        with self._lock:
            start = self._next_target
            self._next_target = (self._next_target + 1) % len(self.targets)
        for i in range(len(self.targets)):
            target = self.targets[(start + i) % len(self.targets)]
            try:
                return socket.create_connection(target, timeout=5)
            except OSError as e:
                logger.debug("proxy %s: connect to %s failed: %s", self.address, target, e)
        return None

    def _serve(self, conn: _Conn) -> None:
        """Connect upstream (only while flowing: a stalled path does not even reach the server),
        then pump client->upstream in this thread and upstream->client in a second one."""
        try:
            if not self._wait_flowing(conn):
                return
            conn.upstream = self._connect_upstream()
            if conn.upstream is None:
                return
            conn.upstream.settimeout(None)
            back = threading.Thread(target=self._pump, args=(conn, conn.upstream, conn.client),
                                    name=f"{threading.current_thread().name}-back", daemon=True)
            conn.threads.append(back)
            back.start()
            self._pump(conn, conn.client, conn.upstream)
            back.join(JOIN_TIMEOUT)
        finally:
            conn.close()

    def _pump(self, conn: _Conn, src: socket.socket, dst: socket.socket) -> None:
        while True:
            if not self._wait_flowing(conn):
                return
            try:
                readable, _, _ = select.select([src], [], [], POLL)
            except (OSError, ValueError):
                return
            if not readable:
                continue
            if not self._may_flow(conn):
                continue  # stalled between select and recv: hold the bytes in the kernel
            try:
                data = src.recv(CHUNK)
            except OSError:
                data = b""
            if not data:
                conn.close()  # one side ended: end both, as a real TCP proxy would
                return
            try:
                dst.sendall(data)
            except OSError:
                conn.close()
                return
