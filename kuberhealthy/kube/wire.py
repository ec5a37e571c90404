"""HTTP/1.1 to the API server on kept TLS connections, with as little Python per request as it takes.

A check run makes four API requests, and through urllib3 + http.client each cost about as much CPU as
the rest of the run's own work: retry and timeout objects, URL re-parsing, header validation by
regular expression and header parsing through the email package. The API server speaks plain
HTTP/1.1 with JSON bodies, so this module writes the request line and headers itself and reads the
status line, the few headers it needs (Content-Length, Transfer-Encoding, Connection) and the body.

What it keeps from a client library: a pool of kept connections (a connection is reused only when its
answer was read to the end and the server did not close it, and never when it has become readable while
idle: the server closed it, so a request on it would fail half-way), connect and read timeouts on every
request, chunked bodies (watch streams), TLS as the client's configuration says (CA file or data, client
certificate, no verification when the kubeconfig says so), TCP keepalive (client-go's 30 s), and SNI.
Where the configuration asks for what it does not do (an HTTP proxy, a pinned hostname other than the
server's, custom socket options), `Wire.usable` is False and the caller stays on urllib3.
"""
from __future__ import annotations

import select
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

MAX_IDLE = 64  # kept connections
MAX_LINE = 65536  # bytes in a status or header line
MAX_HEADERS = 100
KEEPALIVE_IDLE = 30  # seconds, as client-go dials the API server
KEEPALIVE_INTERVAL = 15
KEEPALIVE_COUNT = 9


class WireError(OSError):
    """The connection failed or the server spoke something that is not HTTP/1.1."""


@dataclass
class Answer:
    """One answer: its status, the headers it was read with (lower-case names), and its body (for a
    streamed answer, read with lines())."""

    status: int
    headers: dict[str, str]
    body: bytes
    _conn: _Conn | None = None

    def lines(self) -> Iterator[bytes]:
        """The body's non-empty lines as they arrive (a watch stream: one JSON event per line)."""
        conn = self._conn
        if conn is None:
            return
        pending = b""
        for chunk in conn.body_chunks(self.headers):
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                if line.strip():
                    yield line
        if pending.strip():
            yield pending

    def shutdown(self) -> None:
        """Unblock a reader of lines() from another thread; the connection is not reused."""
        if self._conn is not None:
            self._conn.shutdown()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = sock.makefile("rb")
        self.closed = False

    def dropped(self) -> bool:
        """An idle kept connection that became readable was closed by the server (or holds junk)."""
        if self.closed:
            return True
        try:
            poller = select.poll()  # not select(): descriptors past 1024 are common with many threads
            poller.register(self.sock, select.POLLIN | select.POLLERR | select.POLLHUP)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True

    def send(self, data: bytes, timeout: float) -> None:
        self.sock.settimeout(timeout)
        self.sock.sendall(data)

    def read_head(self, timeout: float) -> tuple[int, dict[str, str]]:
        self.sock.settimeout(timeout)
        line = self.reader.readline(MAX_LINE + 1)
        if not line:
            raise WireError("the server closed the connection before answering")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise WireError(f"not an HTTP/1.1 status line: {line[:80]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            h = self.reader.readline(MAX_LINE + 1)
            if h in (b"\r\n", b"\n"):
                return status, headers
            if not h or len(h) > MAX_LINE:
                raise WireError("the answer's headers ended early or were too long")
            name, sep, value = h.partition(b":")
            if sep:
                key = name.strip().lower().decode("latin-1")
                text = value.strip().decode("latin-1")
                headers[key] = f"{headers[key]}, {text}" if key in headers else text
        raise WireError("too many headers in the answer")

    def body_chunks(self, headers: Mapping[str, str]) -> Iterator[bytes]:
        """The body as it arrives; at its end the connection is positioned after it."""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = self.reader.readline(MAX_LINE + 1)
                if not size_line:
                    raise WireError("the connection closed inside a chunked body")
                try:
                    size = int(size_line.split(b";", 1)[0].strip(), 16)
                except ValueError as e:
                    raise WireError(f"bad chunk size {size_line[:40]!r}") from e
                if size == 0:
                    while self.reader.readline(MAX_LINE + 1) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return
                data = self.reader.read(size + 2)
                if len(data) < size + 2:
                    raise WireError("the connection closed inside a chunk")
                yield data[:size]
        elif "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError as e:
                raise WireError(f"bad Content-Length {headers['content-length']!r}") from e
            data = self.reader.read(length) if length > 0 else b""
            if len(data) < length:
                raise WireError("the connection closed inside the body")
            yield data
        else:  # the body ends when the server closes the connection
            while chunk := self.reader.read1(65536):
                yield chunk

    def shutdown(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for thing in (self.reader, self.sock):
                try:
                    thing.close()
                except OSError:
                    pass


def _tls_context(cfg: Any) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if cfg.verify_ssl:
        if cfg.ssl_ca_cert or getattr(cfg, "ca_cert_data", None):
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.check_hostname = True
            if cfg.ssl_ca_cert:
                ctx.load_verify_locations(cafile=cfg.ssl_ca_cert)
            data = getattr(cfg, "ca_cert_data", None)
            if data:
                ctx.load_verify_locations(cadata=data.decode() if isinstance(data, bytes) else data)
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file or None)
    return ctx


class Wire:
    """Requests to one API server (its URL from the client configuration) on kept connections."""

    def __init__(self, cfg: Any, max_idle: int = MAX_IDLE) -> None:
        url = urlsplit(str(cfg.host))
        self.usable = (url.scheme in ("http", "https") and bool(url.hostname) and not getattr(cfg, "proxy", None)
                       and getattr(cfg, "assert_hostname", None) in (None, True)
                       and getattr(cfg, "socket_options", None) is None)
        self.host = url.hostname or ""
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.prefix = url.path.rstrip("/")
        self.host_header = url.netloc.encode("latin-1", "replace")
        self._server_name = getattr(cfg, "tls_server_name", None) or self.host
        self._tls = _tls_context(cfg) if url.scheme == "https" and self.usable else None
        self._idle: list[_Conn] = []
        self._lock = threading.Lock()
        self._max_idle = max_idle

    def _connect(self, timeout: float) -> _Conn:
        sock = socket.create_connection((self.host, self.port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            for opt, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
                               ("TCP_KEEPCNT", KEEPALIVE_COUNT)):
                if hasattr(socket, opt):
                    sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_hostname=self._server_name)
        except BaseException:
            sock.close()
            raise
        return _Conn(sock)

    def _take(self, timeout: float) -> _Conn:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect(timeout)
            if not conn.dropped():
                return conn
            conn.close()

    def _give_back(self, conn: _Conn) -> None:
        with self._lock:
            if len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def request(self, method: str, target: str, headers: Mapping[str, str], body: bytes | None,
                timeout: tuple[float, float], stream: bool = False) -> Answer:
        """One request (`target`: path and query). Raises WireError or OSError (timeouts included)."""
        head = [f"{method} {self.prefix}{target} HTTP/1.1".encode("latin-1"), b"Host: " + self.host_header]
        head += [f"{k}: {v}".encode("latin-1") for k, v in headers.items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            head.append(b"Content-Length: %d" % len(body or b""))
        data = b"\r\n".join(head) + b"\r\n\r\n" + (body or b"")
        conn = self._take(timeout[0])
        try:
            conn.send(data, timeout[1])
            status, answer_headers = conn.read_head(timeout[1])
            bodiless = method == "HEAD" or status in (204, 304) or 100 <= status < 200  # no body, whatever it says
            if stream and not bodiless:
                return Answer(status, answer_headers, b"", conn)
            payload = b"" if bodiless else b"".join(conn.body_chunks(answer_headers))
        except BaseException:
            conn.close()
            raise
        if "close" in answer_headers.get("connection", "").lower() or not (
                bodiless or "content-length" in answer_headers
                or "chunked" in answer_headers.get("transfer-encoding", "").lower()):
            conn.close()
        else:
            self._give_back(conn)
        return Answer(status, answer_headers, payload)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
