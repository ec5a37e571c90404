"""A tiny HTTP server on 127.0.0.1 that stands in for Kuberhealthy's /externalCheckStatus in tests.

It records every request (source address, path, headers, body) and answers with a fixed status, so
tests can check what a simulated checker sent and from which address. Not used by the kubelet itself.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Received:
    client_ip: str
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes


class ReportReceiver:
    """Start it, point KH_REPORTING_URL at `.url`, read `.received`, stop it."""

    def __init__(self, status: int = 200, answer: bytes = b"ok\n") -> None:
        self.status = status
        self.answer = answer
        self._lock = threading.Lock()
        self._received: list[Received] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                receiver._add(Received(client_ip=self.client_address[0], method="POST", path=self.path,
                                       headers={k.lower(): v for k, v in self.headers.items()}, body=body))
                self.send_response(receiver.status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(receiver.answer)))
                self.end_headers()
                self.wfile.write(receiver.answer)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="sim-receiver", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/externalCheckStatus"

    def _add(self, item: Received) -> None:
        with self._lock:
            self._received.append(item)

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
        if self._thread.ident is not None:
            self._server.shutdown()
            self._thread.join(10)
        self._server.server_close()
