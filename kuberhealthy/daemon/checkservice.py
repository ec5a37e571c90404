"""`kuberhealthy check-service`: the chart's `helm test`. Asks a release's Service for `/readyz` and `/`
until both answer as the daemon does, or a deadline passes.

It runs in a pod from the daemon's own image, which has Python but no shell and no curl, and it needs no
cluster DNS: the address comes from the Service's environment variables, which the kubelet injects into
every pod created after the Service in its namespace (`<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT`; the
chart passes their names), or from `--url`. Standard library only; it never talks to the Kubernetes API.
What counts as passing: `/readyz` answers 200 and `/` answers 200 with a JSON object holding a boolean
`OK` (the daemon's status page; its value is reported, not judged: failing checks are not a broken
install).
"""
from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass

DEFAULT_TIMEOUT = 60.0  # seconds for the whole test: pods may still be becoming Ready after an install
REQUEST_TIMEOUT = 5.0  # seconds per request
RETRY_INTERVAL = 2.0  # seconds between attempts


class UsageError(Exception):
    """The address cannot be worked out (a missing or malformed environment variable or URL)."""


@dataclass(frozen=True)
class Outcome:
    ok: bool
    line: str  # one line for the pod's log


def base_url(url: str | None, host_env: str | None, port_env: str | None,
             environ: Mapping[str, str] | None = None) -> str:
    """`--url`, else http://$host_env:$port_env (an IPv6 ClusterIP in brackets). Raises UsageError."""
    env = os.environ if environ is None else environ
    if url:
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--url must be an http(s) URL, got {url!r}")
        return url.rstrip("/")
    if not host_env or not port_env:
        raise UsageError("give --url, or both --host-env and --port-env")
    host, port = env.get(host_env, "").strip(), env.get(port_env, "").strip()
    if not host:
        raise UsageError(f"${host_env} is not set: the Service did not exist when this pod was created, "
                         "or its name differs")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"${port_env} is not a port number: {port!r}")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def _get(opener: urllib.request.OpenerDirector, url: str, timeout: float) -> tuple[int, bytes]:
    try:
        with opener.open(url, timeout=timeout) as resp:
            return int(resp.status), resp.read(1 << 20)
    except urllib.error.HTTPError as e:
        return e.code, b""


def probe_once(base: str, timeout: float = REQUEST_TIMEOUT) -> tuple[bool, str]:
    """One attempt: (passed, what was seen). Never raises for network errors."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the Service, never a proxy
    try:
        status, _ = _get(opener, base + "/readyz", timeout)
        if status != 200:
            return False, f"/readyz answered {status}"
        status, body = _get(opener, base + "/", timeout)
    except (OSError, ValueError) as e:  # refused, reset, timed out, unreachable; a malformed answer
        return False, f"no answer ({e.__class__.__name__}: {e})"
    if status != 200:
        return False, f"/ answered {status}"
    try:
        page = json.loads(body)
    except ValueError:
        return False, "/ answered 200 but not with JSON"
    if not isinstance(page, dict) or not isinstance(page.get("OK"), bool):
        return False, "/ answered JSON without a boolean OK"
    checks = page.get("CheckDetails")
    count = f", {len(checks)} checks" if isinstance(checks, dict) else ""
    return True, f"/readyz 200, / OK={str(page['OK']).lower()}{count}"


def check_service(base: str, deadline: float = DEFAULT_TIMEOUT, interval: float = RETRY_INTERVAL,
                  request_timeout: float = REQUEST_TIMEOUT, stop: threading.Event | None = None,
                  clock: Callable[[], float] = time.monotonic) -> Outcome:
    """Attempts every `interval` seconds until one passes or `deadline` seconds have gone."""
    stop = stop or threading.Event()
    started = clock()
    attempts = 0
    while True:
        attempts += 1
        left = deadline - (clock() - started)
        passed, seen = probe_once(base, max(0.1, min(request_timeout, left)))
        if passed:
            return Outcome(True, f"kuberhealthy check-service: {base} passed: {seen} (attempt {attempts})")
        left = deadline - (clock() - started)
        if left <= 0 or stop.wait(min(interval, left)) or clock() - started >= deadline:
            return Outcome(False, f"kuberhealthy check-service: {base} failed: {seen} "
                                  f"(after {attempts} attempts in {clock() - started:.0f} s)")
