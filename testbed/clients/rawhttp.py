"""Raw HTTP to a daemon (or any server on loopback): one request over a real socket, from a chosen source
address, optionally chunked, and the checker report a pod would post.

http.client rather than requests, so a test controls the bytes (no body for GET unless asked, chunked
transfer, Content-Length) and binds the client socket to a pod's IP. Nothing here imports `kuberhealthy`.
"""
from __future__ import annotations

import http.client
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

import requests

if TYPE_CHECKING:
    from typing_extensions import Unpack

REPORT_PATH = "/externalCheckStatus"
V3_REPORT_PATH = "/check"
REPORT_PATHS = (REPORT_PATH, V3_REPORT_PATH)  # v2's and v3's report endpoints: both take a run of either kind
RUN_UUID_HEADER = "kh-run-uuid"
CHUNK = 64 * 1024


class Listener(Protocol):
    """Anything with a host and a port: a DaemonProcess, an in-process web server."""

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


class Sending(TypedDict, total=False):
    """How a request leaves: from which source address (default: the kernel's choice), chunked or not
    (default: with a Content-Length), and how long each socket operation may wait (default: 30 s)."""

    source_ip: str | None
    chunked: bool
    timeout: float


@dataclass
class Answer:
    status: int
    headers: dict[str, str] = field(default_factory=dict)  # lower-cased names
    body: bytes = b""

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def __repr__(self) -> str:
        return f"<Answer {self.status} {self.headers.get('content-type')!r} {self.text[:300]!r}>"


def request(to: Listener | int, method: str, path: str, body: bytes | None = None, *,
            headers: dict[str, str] | None = None, **how: Unpack[Sending]) -> Answer:
    """One request to `to` (a listener, or a port on 127.0.0.1), sent as `how` says."""
    source_ip, chunked, timeout = how.get("source_ip"), how.get("chunked", False), how.get("timeout", 30.0)
    host, port = ("127.0.0.1", to) if isinstance(to, int) else (to.host, to.port)
    conn = http.client.HTTPConnection(host, port, timeout=timeout,
                                      source_address=(source_ip, 0) if source_ip else None)
    try:
        hdrs = dict(headers or {})
        if chunked:
            conn.putrequest(method, path)
            for k, v in hdrs.items():
                conn.putheader(k, v)
            conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            data = body or b""
            try:
                for i in range(0, len(data), CHUNK):
                    piece = data[i:i + CHUNK]
                    conn.send(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                conn.send(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server may answer before reading everything
        else:
            conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        data = resp.read()
        return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
    finally:
        conn.close()


def post_report(to: Listener | int, body: Any, *, run_uuid: str | None = None,
                content_type: str = "application/json", path: str = REPORT_PATH, **how: Unpack[Sending]) -> Answer:
    """A checker's report: `body` as bytes, str or JSON, with the kh-run-uuid header when `run_uuid`, to v2's
    endpoint or (`path`) another."""
    raw = body if isinstance(body, bytes) else (body.encode() if isinstance(body, str) else json.dumps(body).encode())
    headers = {"Content-Type": content_type}
    if run_uuid is not None:
        headers[RUN_UUID_HEADER] = run_uuid
    return request(to, "POST", path, raw, headers=headers, **how)


def get_json(url: str, path: str = "/", **kw: Any) -> Any:
    """GET url+path, asserting a 200; the decoded JSON."""
    r = requests.get(url + path, timeout=30, **kw)
    assert r.status_code == 200, (r.status_code, r.text[:500])
    return r.json()


def assert_one_line_plain_text(ans: Answer) -> None:
    """A 4xx answer as docs/interface.md#report-endpoint wants it: text/plain, one non-empty line."""
    ctype = ans.headers.get("content-type", "")
    assert ctype.startswith("text/plain"), f"4xx answer is not plain text: {ans!r}"
    text = ans.text.strip()
    assert text, f"4xx answer has no reason: {ans!r}"
    assert "\n" not in text, f"4xx reason is not one line: {ans!r}"
