"""A tiny HTTP server on 127.0.0.1 that stands in for Kuberhealthy's /externalCheckStatus in tests.

It records every request (source address, path, headers, body, arrival time) and answers with a fixed
status, or first with a script of answers (503 twice with Retry-After, then the fixed 200; an answer that
keeps the caller waiting), so tests can check what a simulated checker sent, from which address, and
how it retried. Not used by the kubelet itself.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Received:
    client_ip: str
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes
    at: float = 0.0  # monotonic time the request was read


@dataclass(frozen=True)
class Answer:
    """One scripted answer: status, body, extra headers, and how long to hold the caller first."""

    status: int
    body: bytes = b"ok\n"
    headers: dict[str, str] = field(default_factory=dict)  # e.g. {"Retry-After": "1"}
    delay: float = 0.0  # seconds to wait before answering (cut short when the receiver stops)


class ReportReceiver:
    """Start it, point KH_REPORTING_URL at `.url`, read `.received`, stop it.

    `script`: answers given to the first requests, in order (an int is just a status); once it is used
    up every request gets `status` and `answer`."""

    def __init__(self, status: int = 200, answer: bytes = b"ok\n", script: Iterable[Answer | int] = ()) -> None:
        self.status = status
        self.answer = answer
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._script = deque(a if isinstance(a, Answer) else Answer(a) for a in script)
        self._closing = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                reply = receiver._add(Received(
                    client_ip=self.client_address[0], method="POST", path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()}, body=body, at=time.monotonic()))
                if reply.delay and receiver._closing.wait(reply.delay):
                    return
                self.send_response(reply.status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(reply.body)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(reply.body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="sim-receiver", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/externalCheckStatus"

    def _add(self, item: Received) -> Answer:
        """Record a request; the answer it gets."""
        with self._lock:
            self._received.append(item)
            if self._script:
                return self._script.popleft()
        return Answer(self.status, self.answer)

    @property
    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def from_ip(self, ip: str) -> list[Received]:
        return [r for r in self.received if r.client_ip == ip]

    def start(self) -> ReportReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()
        if self._thread.ident is not None:
            self._server.shutdown()
            self._thread.join(10)
        self._server.server_close()
