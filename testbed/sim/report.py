"""A checker's report, sent the way a real checker pod sends it: HTTP POST from the pod's own IP, retried
the way kuberhealthy/checkclient.py retries it.

The connection is bound to the pod IP (Linux routes all of 127.0.0.0/8 on lo), so a receiver that
identifies callers by source address sees what it would see in a cluster. Only loopback targets are
allowed: the test bed must never send traffic off the machine.

Retries: connection errors, timeouts, 429 and 5xx answers are retried with exponential backoff and
jitter, honouring `Retry-After`, until the run's deadline (KH_CHECK_RUN_DEADLINE, unix seconds, or
DEFAULT_RETRY_WINDOW without one); the last attempt is made at the deadline. A 2xx is accepted; any other
answer (a 4xx other than 429, a 3xx) is final. Cancelling (the pod is deleted, the kubelet stops) ends
the report at once: the wait between attempts wakes up, and `InFlight.cut()` shuts down the socket of
an attempt that waits for its answer. It does not follow redirects or speak https.
"""
from __future__ import annotations

import http.client
import ipaddress
import logging
import math
import socket
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from testbed.sim.records import Outcome, ReportResult
from testbed.sim.retry import backoff, honour_retry_after, retry_after_seconds

logger = logging.getLogger(__name__)

ENV_DEADLINE = "KH_CHECK_RUN_DEADLINE"
DEFAULT_RETRY_WINDOW = 60.0  # seconds of retrying when the pod has no KH_CHECK_RUN_DEADLINE
REQUEST_TIMEOUT = 10.0  # seconds for one attempt's socket operations (connect, send, each read)
MIN_ATTEMPT_TIMEOUT = 1.0  # seconds: even the attempt at the deadline gets this long
BACKOFF_BASE = 0.5  # seconds: the first retry waits about this long (as checkclient.py)
BACKOFF_MAX = 10.0  # seconds: no wait between attempts is longer, unless Retry-After asks for it
MAX_ANSWER = 1 << 20


@dataclass(frozen=True)
class Report:
    """What a checker sends: its JSON body to `url`, with the kh-run-uuid header when `run_uuid` and
    `Authorization: Bearer <token>` when `token`."""

    url: str
    body: bytes
    run_uuid: str | None = None
    token: str | None = None


class ReportRefused(Exception):
    """The URL cannot be used: not http, or not a loopback address."""


class InFlight:
    """The socket of the attempt under way, so that another thread (the one cancelling the pod) can cut
    an attempt that is connecting or waiting for its answer. Once cut, no new socket is accepted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._cut = False

    def attach(self, sock: socket.socket) -> bool:
        """Register the attempt's socket; False when already cut (then do not use it)."""
        with self._lock:
            if self._cut:
                return False
            self._sock = sock
            return True

    def detach(self) -> None:
        """Forget the socket; call before closing it, so cut() never touches a closed descriptor."""
        with self._lock:
            self._sock = None

    def cut(self) -> None:
        """Shut the current socket down (a blocked connect or read returns at once); refuse new ones."""
        with self._lock:
            self._cut = True
            if self._sock is not None:
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:  # not connected yet on some kernels, or already shut down
                    pass


def run_deadline(env: Mapping[str, str]) -> float | None:
    """KH_CHECK_RUN_DEADLINE from a pod env, in unix seconds; None when absent or unreadable."""
    raw = env.get(ENV_DEADLINE, "").strip()
    if not raw:
        return None
    try:
        deadline = float(raw)
    except ValueError:
        deadline = math.nan
    if not math.isfinite(deadline):
        logger.warning("ignoring %s=%r: not unix seconds", ENV_DEADLINE, raw)
        return None
    return deadline


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


def _post(target: tuple[str, int, str], headers: dict[str, str], body: bytes, source_ip: str,
          timeout: float, inflight: InFlight) -> tuple[int, str, float | None]:
    """One attempt: (status, answer body, Retry-After seconds); raises OSError/HTTPException."""
    ip, port, path = target
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    conn: http.client.HTTPConnection | None = None
    try:
        if not inflight.attach(sock):
            raise ConnectionAbortedError("report cancelled")
        sock.settimeout(timeout)
        sock.bind((source_ip, 0))
        sock.connect((ip, port))
        conn = http.client.HTTPConnection(ip, port, timeout=timeout)
        conn.sock = sock  # already connected from the pod IP; http.client uses it as it is
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        text = resp.read(MAX_ANSWER).decode("utf-8", errors="replace")
        return resp.status, text, retry_after_seconds(resp.getheader("Retry-After"))
    finally:
        inflight.detach()
        if conn is not None:
            conn.close()
        sock.close()


def send_report(report: Report, source_ip: str, cancel: threading.Event, *, deadline: float | None = None,
                inflight: InFlight | None = None) -> ReportResult:
    """POST the report from source_ip, retrying transient failures until `deadline` (unix seconds;
    None: DEFAULT_RETRY_WINDOW seconds from now) or until `cancel` is set. Never raises.

    At least one attempt is made unless `cancel` is already set. `inflight` lets the caller cut an
    attempt under way when it sets `cancel`."""
    url, body, run_uuid, token = report.url, report.body, report.run_uuid, report.token
    result = ReportResult(url=url, source_ip=source_ip, body=body, uuid_header=run_uuid, bearer=token is not None)
    try:
        ip, port, path, host = _loopback_target(url)
    except ReportRefused as e:
        result.error, result.outcome, result.at = str(e), Outcome.REFUSED, time.monotonic()
        logger.warning("report from %s not sent: %s", source_ip, e)
        return result
    headers = {"Content-Type": "application/json", "Host": host, "Connection": "close"}
    if run_uuid is not None:
        headers["kh-run-uuid"] = run_uuid
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    inflight = inflight or InFlight()
    window = DEFAULT_RETRY_WINDOW if deadline is None else deadline - time.time()
    give_up_at = time.monotonic() + window  # the deadline on the monotonic clock: immune to clock steps
    while not cancel.is_set():
        result.attempts += 1
        timeout = min(REQUEST_TIMEOUT, max(give_up_at - time.monotonic(), MIN_ATTEMPT_TIMEOUT))
        retry_after: float | None = None
        try:
            status, text, retry_after = _post((ip, port, path), headers, body, source_ip, timeout, inflight)
        except (OSError, http.client.HTTPException) as e:
            result.error = f"{type(e).__name__}: {e}"
            if cancel.is_set():
                break
            logger.debug("report attempt %d from %s to %s failed: %s", result.attempts, source_ip, url, e)
        else:
            result.status, result.response_body, result.error = status, text, None
            result.statuses.append(status)
            if 200 <= status <= 299:
                result.outcome = Outcome.ACCEPTED
                break
            if status != 429 and status < 500:
                result.outcome = Outcome.REJECTED
                break
            logger.debug("report attempt %d from %s to %s answered %d (Retry-After %s)", result.attempts,
                         source_ip, url, status, retry_after)
        remaining = give_up_at - time.monotonic()
        if remaining <= 0:
            result.outcome = Outcome.DEADLINE
            logger.warning("giving up reporting from %s to %s at the run's deadline after %d attempts: %s",
                           source_ip, url, result.attempts,
                           result.error or f"HTTP {result.status} {result.response_body.strip()[:200]!r}")
            break
        delay = honour_retry_after(retry_after) if retry_after is not None else backoff(
            result.attempts, BACKOFF_BASE, BACKOFF_MAX)
        if cancel.wait(min(delay, remaining)):
            break
    if result.outcome is None:
        result.outcome = Outcome.CANCELLED
        logger.debug("report from %s to %s cancelled after %d attempts", source_ip, url, result.attempts)
    result.at = time.monotonic()
    return result
