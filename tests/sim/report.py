"""A checker's report, sent the way a real checker pod sends it: HTTP POST from the pod's own IP.

The connection is bound to the pod IP (Linux routes all of 127.0.0.0/8 on lo), so a receiver that
identifies callers by source address sees what it would see in a cluster. Only loopback targets are
allowed: the test bed must never send traffic off the machine.
"""
from __future__ import annotations

import http.client
import ipaddress
import logging
import socket
import threading
import time
import urllib.parse

from tests.sim.records import ReportResult

logger = logging.getLogger(__name__)

RETRY_WINDOW = 5.0  # seconds within which connection errors are retried
REQUEST_TIMEOUT = 10.0  # seconds for one attempt (connect + answer)
MAX_ANSWER = 1 << 20


class ReportRefused(Exception):
    """The URL cannot be used: not http, or not a loopback address."""


def _loopback_target(url: str) -> tuple[str, int, str, str]:
    """(ip, port, path?query, Host header) for an http:// URL that resolves to IPv4 loopback."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ReportRefused(f"only http:// URLs are supported, got {url!r}")
    port = parts.port or 80
    try:
        infos = socket.getaddrinfo(parts.hostname, port, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ReportRefused(f"cannot resolve {parts.hostname!r}: {e}") from e
    ip = str(infos[0][4][0])
    if not ipaddress.ip_address(ip).is_loopback:
        raise ReportRefused(f"{parts.hostname} resolves to {ip}, not a loopback address")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return ip, port, path, parts.netloc


def send_report(url: str, body: bytes, run_uuid: str | None, source_ip: str,
                cancel: threading.Event) -> ReportResult:
    """POST body to url from source_ip; retry connection errors briefly; never raises."""
    result = ReportResult(url=url, source_ip=source_ip, body=body, uuid_header=run_uuid)
    try:
        ip, port, path, host = _loopback_target(url)
    except ReportRefused as e:
        result.error = str(e)
        result.at = time.monotonic()
        logger.warning("report from %s not sent: %s", source_ip, e)
        return result
    headers = {"Content-Type": "application/json", "Host": host, "Connection": "close"}
    if run_uuid is not None:
        headers["kh-run-uuid"] = run_uuid
    deadline = time.monotonic() + RETRY_WINDOW
    backoff = 0.1
    while True:
        result.attempts += 1
        conn = http.client.HTTPConnection(ip, port, timeout=REQUEST_TIMEOUT, source_address=(source_ip, 0))
        try:
            conn.request("POST", path, body=body, headers=headers)
            resp = conn.getresponse()
            result.status = resp.status
            result.response_body = resp.read(MAX_ANSWER).decode("utf-8", errors="replace")
            result.error = None
            break
        except (OSError, http.client.HTTPException) as e:
            result.error = f"{type(e).__name__}: {e}"
            logger.debug("report attempt %d from %s to %s failed: %s", result.attempts, source_ip, url, e)
        finally:
            conn.close()
        if time.monotonic() + backoff > deadline or cancel.wait(backoff):
            logger.warning("giving up reporting from %s to %s after %d attempts: %s",
                           source_ip, url, result.attempts, result.error)
            break
        backoff = min(backoff * 2, 1.0)
    result.at = time.monotonic()
    return result
