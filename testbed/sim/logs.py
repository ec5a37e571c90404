"""Container logs for the simulated kubelet: what each checker "wrote", served the way a kubelet serves it.

The API server answers `GET /api/v1/namespaces/<ns>/pods/<pod>/log` by asking the pod's node: it takes
the Node's first address of a type in `--kubelet-preferred-address-types` (the test bed puts InternalIP
first: the nodes' Hostname addresses resolve nowhere) and `status.daemonEndpoints.kubeletEndpoint.Port`,
and calls `https://<address>:<port>/containerLogs/<ns>/<pod>/<container>?tailLines=..&limitBytes=..`
with no client certificate and without verifying ours (no `--kubelet-client-certificate`, no
`--kubelet-certificate-authority`). A 1.20 API server validates the container name itself and passes
any non-2xx answer on with its status and the start of its body.

`KubeletServer` is that endpoint: one HTTPS listener per node address (own port each, so a listener
never collides with anything else on lo), a self-signed certificate made with openssl when the server
starts (nothing downloaded), one thread accepting on every listener and one short-lived thread per
connection (TLS handshake, one request, close: HTTP/1.0, as plain as a kubelet answer gets). Nodes are
shared by every SimKubelet of the process, so the server is too: `acquire()` / `release()` count its
users and the last one closes it. Two processes simulating the same node names overwrite each other's
port: logs are served by the process that started a kubelet last.

`PodLog` is one pod's log (the checker container's, first in its `containers`; other containers have an
empty one), kept in its PodRecord so tests can read it after the pod is gone; the server serves it only
while the pod is live.
`Transcript` decides what a simulated checker prints (see README.md, "Logs").

Answers follow the kubelet: 404 for an unknown pod or container, 400 while the container has not
started and for `previous=true` (nothing here restarts), `tailLines`, `limitBytes` (the first N bytes
of the tail, which may cut its last line, as the kubelet's reader does), `timestamps`, `sinceSeconds`
and `sinceTime`. `follow=true` is answered with what is there now, not streamed.
"""
from __future__ import annotations

import collections
import datetime as dt
import http.server
import logging
import selectors
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

MAX_LOG_BYTES = 16 * 1024 * 1024  # per pod; beyond it the oldest lines go (a kubelet rotates its logs)
IO_TIMEOUT = 10.0  # seconds a connection may take for its handshake and its request
JOIN_TIMEOUT = 10.0
REQUESTS_KEPT = 1000  # LogRequest entries remembered for tests
FILLER_CHARS = 100  # characters of padding in each SIM_LOG_LINES line


# --- one pod's log ----------------------------------------------------------------------------------------

class PodLog:
    """The lines a pod's checker container (containers[0]) printed, with their wall-clock times. Thread-safe."""

    def __init__(self, containers: tuple[str, ...] = ()) -> None:
        self.containers = containers
        self._lock = threading.Lock()
        self._lines: collections.deque[tuple[float, str]] = collections.deque()
        self._bytes = 0
        self._started = False

    @property
    def started(self) -> bool:
        with self._lock:
            return self._started

    def start(self) -> None:
        """The container is running: from now on its log can be read (before, the kubelet says 400)."""
        with self._lock:
            self._started = True

    def write(self, *texts: str) -> None:
        """Append lines (a text with newlines is several lines)."""
        now = time.time()
        with self._lock:
            for text in texts:
                for line in text.split("\n"):
                    self._lines.append((now, line))
                    self._bytes += len(line.encode()) + 1
            while self._bytes > MAX_LOG_BYTES and self._lines:
                self._bytes -= len(self._lines.popleft()[1].encode()) + 1

    def lines(self) -> list[str]:
        with self._lock:
            return [line for _, line in self._lines]

    def text(self) -> str:
        """The whole log as the kubelet serves it (every line ends with a newline)."""
        return "".join(line + "\n" for line in self.lines())

    def select(self, tail_lines: int | None = None, limit_bytes: int | None = None, timestamps: bool = False,
               since: float | None = None) -> bytes:
        """What `/containerLogs/...?tailLines=&limitBytes=&timestamps=&sinceTime=` answers."""
        with self._lock:
            lines = [(t, line) for t, line in self._lines if since is None or t >= since]
        if tail_lines is not None:
            lines = lines[len(lines) - tail_lines:] if tail_lines > 0 else []
        out = b"".join((f"{_rfc3339_nano(t)} {line}\n" if timestamps else line + "\n").encode() for t, line in lines)
        return out[:limit_bytes] if limit_bytes is not None else out


def _rfc3339_nano(unix: float) -> str:
    when = dt.datetime.fromtimestamp(unix, dt.timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond:06d}000Z"


# --- what a checker prints ----------------------------------------------------------------------------------

def filler(count: int) -> list[str]:
    """SIM_LOG_LINES: `count` numbered lines of padding, for checkers that print a lot."""
    return [f"filler line {i + 1} of {count} " + "." * FILLER_CHARS for i in range(count)]


class Transcript:
    """What one simulated checker prints into its PodLog as it runs.

    SIM_LOG_LINES filler lines come first. Then, with SIM_LOG set, exactly its lines and nothing more;
    without it, a line per step: `kh-sim/<behaviour>: checking <ns>/<pod> on <node>` at the start, and
    later lines the driver `say()`s (errors, the report and its answer, a crash)."""

    def __init__(self, log: PodLog, scripted: bool) -> None:
        self.log = log
        self.scripted = scripted

    @classmethod
    def begin(cls, log: PodLog, behaviour: str, key: str, node: str, scripted: tuple[str, ...] | None,
              filler_lines: int, default: bool = True) -> Transcript:
        """The container started: write the first lines. `default` False: no start line (kh-sim/exec
        prints only what its command prints)."""
        log.start()
        if filler_lines:
            log.write(*filler(filler_lines))
        if scripted is not None:
            log.write(*scripted)
        elif default:
            log.write(f"kh-sim/{behaviour}: checking {key} on {node}")
        return cls(log, scripted is not None)

    def say(self, *lines: str) -> None:
        """A default line; nothing when SIM_LOG scripts the log."""
        if not self.scripted:
            self.log.write(*lines)


# --- the kubelet's HTTPS endpoint ----------------------------------------------------------------------------

@dataclass(frozen=True)
class LogRequest:
    """One request the endpoint answered (for tests: the API server really asked the node)."""

    node_ip: str  # the listener it came in on
    path: str
    query: dict[str, str]
    status: int
    at: float  # monotonic

    @property
    def pod(self) -> str:
        """`namespace/name` of a /containerLogs request, "" for any other path."""
        parts = self.path.split("/")
        return f"{parts[2]}/{parts[3]}" if len(parts) == 5 and parts[1] == "containerLogs" else ""


_tls_lock = threading.Lock()
_tls: ssl.SSLContext | None = None


def _tls_context() -> ssl.SSLContext:
    """A server context with a throw-away self-signed certificate (made once per process)."""
    global _tls
    with _tls_lock:
        if _tls is None:
            workdir = Path(tempfile.mkdtemp(prefix="kh-sim-tls-"))
            try:
                key, cert = workdir / "key.pem", workdir / "cert.pem"
                subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                                "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "30",
                                "-subj", "/CN=kh-sim-kubelet"], check=True, capture_output=True)
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                ctx.load_cert_chain(str(cert), str(key))
                ctx.set_alpn_protocols(["http/1.1"])
                _tls = ctx
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
        return _tls


def _query_int(query: dict[str, str], key: str, minimum: int) -> int | None:
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    value = int(raw)  # ValueError: answered 400
    if value < minimum:
        raise ValueError(f"{key} must be at least {minimum}")
    return value


class _Handler(http.server.BaseHTTPRequestHandler):
    server: KubeletServer  # type: ignore[assignment]  # ours, not a socketserver
    timeout = IO_TIMEOUT

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        status, body = self.server.answer(url.path, query)
        self.server.note(LogRequest(self.connection.getsockname()[0], url.path, query, status, time.monotonic()))
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("kubelet logs %s: " + format, self.client_address[0], *args)


class KubeletServer:
    """The nodes' kubelet endpoint (container logs only). Use acquire() / release(), not this directly."""

    def __init__(self) -> None:
        self._tls = _tls_context()
        self._lock = threading.Lock()
        self._listeners: dict[str, socket.socket] = {}  # node IP -> listening socket
        self._pods: dict[str, PodLog] = {}  # live pods by ns/name
        self._handlers: set[threading.Thread] = set()
        self._requests: collections.deque[LogRequest] = collections.deque(maxlen=REQUESTS_KEPT)
        self._stop = threading.Event()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._accept_loop, name="sim-kubelet-logs", daemon=True)
        self._thread.start()

    # --- what the kubelets use ----------------------------------------------------------------------

    def port(self, ip: str) -> int:
        """The port of the listener on node address `ip` (made on first use)."""
        with self._lock:
            sock = self._listeners.get(ip)
            if sock is None:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.bind((ip, 0))
                sock.listen(64)
                sock.setblocking(False)
                self._listeners[ip] = sock
                self._selector.register(sock, selectors.EVENT_READ)
                self._wake()
            return int(sock.getsockname()[1])

    def serve(self, key: str, log: PodLog) -> None:
        """Serve `log` for pod `namespace/name` (a pod re-created under the name replaces it)."""
        with self._lock:
            self._pods[key] = log

    def forget(self, key: str, log: PodLog) -> None:
        with self._lock:
            if self._pods.get(key) is log:
                del self._pods[key]

    @property
    def requests(self) -> list[LogRequest]:
        with self._lock:
            return list(self._requests)

    # --- requests ---------------------------------------------------------------------------------

    def note(self, request: LogRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def answer(self, path: str, query: dict[str, str]) -> tuple[int, bytes]:
        parts = path.split("/")
        if len(parts) != 5 or parts[1] != "containerLogs" or not all(parts[2:]):
            return 404, b"404 page not found\n"
        namespace, pod, container = (urllib.parse.unquote(p) for p in parts[2:])
        with self._lock:
            log = self._pods.get(f"{namespace}/{pod}")
        if log is None:
            return 404, f'pod "{pod}" does not exist\n'.encode()
        if container not in log.containers:
            return 404, f'container "{container}" not found in pod "{pod}"\n'.encode()
        if not log.started:
            return 400, f'container "{container}" in pod "{pod}" is waiting to start: ContainerCreating\n'.encode()
        if query.get("previous") == "true":
            return 400, f'previous terminated container "{container}" in pod "{pod}" not found\n'.encode()
        try:
            tail = _query_int(query, "tailLines", 0)
            limit = _query_int(query, "limitBytes", 1)
            since_seconds = _query_int(query, "sinceSeconds", 1)
            since = time.time() - since_seconds if since_seconds is not None else None
            if query.get("sinceTime"):
                since = dt.datetime.fromisoformat(query["sinceTime"].replace("Z", "+00:00")).timestamp()
        except ValueError as e:
            return 400, f"bad log options: {e}".encode()
        if container != log.containers[0]:
            return 200, b""  # sidecars print nothing here
        return 200, log.select(tail, limit, query.get("timestamps") == "true", since)

    # --- threads ------------------------------------------------------------------------------------

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                events = self._selector.select()
            except OSError:  # nothing closes a registered socket; log it rather than die silently
                logger.exception("kubelet logs: select failed; no more log requests are served")
                return
            for key, _ in events:
                sock = key.fileobj
                if sock is self._wake_r:
                    try:
                        self._wake_r.recv(4096)
                    except OSError:
                        pass
                    continue
                assert isinstance(sock, socket.socket)
                try:
                    conn, addr = sock.accept()
                except OSError:  # BlockingIOError (another wake-up took it) or closed
                    continue
                handler = threading.Thread(target=self._handle, args=(conn, addr), name="sim-kubelet-log-request",
                                           daemon=True)
                with self._lock:
                    self._handlers = {t for t in self._handlers if t.is_alive()} | {handler}
                handler.start()

    def _handle(self, conn: socket.socket, addr: Any) -> None:
        conn.setblocking(True)
        conn.settimeout(IO_TIMEOUT)
        try:
            tls = self._tls.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError) as e:
            logger.debug("kubelet logs: TLS handshake with %s failed: %s", addr, e)
            conn.close()
            return
        try:
            _Handler(tls, addr, self)  # type: ignore[arg-type]  # reads one request, answers, returns
        except OSError as e:
            logger.debug("kubelet logs: connection from %s broke: %s", addr, e)
        except Exception:  # top of a request thread: never kill the test process
            logger.exception("kubelet logs: request from %s failed", addr)
        finally:
            tls.close()

    def close(self) -> None:
        self._stop.set()
        self._wake()
        self._thread.join(JOIN_TIMEOUT)
        with self._lock:
            listeners, self._listeners = list(self._listeners.values()), {}
            handlers = list(self._handlers)
        for sock in listeners:
            self._selector.unregister(sock)
            sock.close()
        for t in handlers:
            t.join(JOIN_TIMEOUT)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()


_shared_lock = threading.Lock()
_shared: KubeletServer | None = None
_users = 0


def acquire() -> KubeletServer:
    """The process's kubelet endpoint, started on first use; every acquire() needs a release()."""
    global _shared, _users
    with _shared_lock:
        if _shared is None:
            _shared = KubeletServer()
        _users += 1
        return _shared


def release(server: KubeletServer) -> None:
    """One user fewer; the last one closes the endpoint (the nodes' ports then refuse connections)."""
    global _shared, _users
    with _shared_lock:
        if server is not _shared:
            return
        _users -= 1
        if _users > 0:
            return
        _shared = None
    server.close()
