"""A fake InfluxDB 1.x on 127.0.0.1: answers 204 to /write and /ping (200 to anything else) and keeps
every batch of line protocol written, with its query string and Authorization header, for assertions.

It checks nothing (no auth, no database); testbed/tools/influxd.py runs the real one.
"""
from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


class FakeInflux:
    """Answers 204 to /write (and /ping, /query), keeps every line-protocol line written."""

    def __init__(self) -> None:
        self.lines: list[tuple[dict[str, list[str]], str]] = []
        self.batches: list[tuple[dict[str, list[str]], list[str]]] = []
        self.requests: list[tuple[str, str]] = []
        self.auth: list[str | None] = []  # the Authorization header of each /write
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _body(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(n) if n else b""
                if self.headers.get("Content-Encoding") == "gzip":
                    data = gzip.decompress(data)
                return data

            def do_POST(self) -> None:
                data = self._body()
                u = urlparse(self.path)
                outer.requests.append(("POST", self.path))
                if u.path == "/write":
                    outer.auth.append(self.headers.get("Authorization"))
                    q = parse_qs(u.query)
                    batch = [ln for ln in data.decode("utf-8", errors="replace").splitlines() if ln.strip()]
                    outer.batches.append((q, batch))
                    for line in batch:
                        outer.lines.append((q, line))
                    self.send_response(204)
                    self.end_headers()
                else:
                    self._json()

            def do_GET(self) -> None:
                outer.requests.append(("GET", self.path))
                if self.path.startswith("/ping"):
                    self.send_response(204)
                    self.send_header("X-Influxdb-Version", "1.8.10")
                    self.end_headers()
                else:
                    self._json()

            def _json(self) -> None:
                body = b'{"results":[{"statement_id":0}]}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="fake-influx", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeInflux:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)
