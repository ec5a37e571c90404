"""Black-box contract tests: derived only from /work/shared/CONTRACT.md, run against the real product.

This package holds the helpers the contract test modules share. Nothing here imports `kuberhealthy`:
the product is driven as users drive it (the CLI, its HTTP endpoints, the Kubernetes API).
"""
from __future__ import annotations

import http.client
import itertools
import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

from tests.harness.cluster import TestCluster
from tests.harness.daemon import DaemonProcess
from tests.harness.wait import wait_for

GROUP = "comcast.github.io"
CHECK_NAME_ANNOTATION = "comcast.github.io/check-name"
VENV_BIN = Path(sys.executable).parent
NODE_ELSEWHERE = "contract-node-nobody-drives"  # pods bound here are left alone by the simulated kubelet


# --- API paths -----------------------------------------------------------------------------------

def cr_path(plural: str, ns: str, name: str | None = None) -> str:
    base = f"/apis/{GROUP}/v1/namespaces/{ns}/{plural}"
    return f"{base}/{name}" if name else base


def khc(ns: str, name: str | None = None) -> str:
    return cr_path("khchecks", ns, name)


def khs(ns: str, name: str | None = None) -> str:
    return cr_path("khstates", ns, name)


def khj(ns: str, name: str | None = None) -> str:
    return cr_path("khjobs", ns, name)


def pods_path(ns: str, name: str | None = None) -> str:
    return f"/api/v1/namespaces/{ns}/pods" + (f"/{name}" if name else "")


def lease_path(ns: str, name: str | None = None) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases" + (f"/{name}" if name else "")


def get_or_none(cluster: TestCluster, path: str) -> Any:
    try:
        return cluster.request("GET", path)
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise


def new_namespace(cluster: TestCluster, prefix: str = "c") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    try:
        cluster.request("POST", "/api/v1/namespaces",
                        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except urllib.error.HTTPError as e:
        if e.code != 409:
            raise
    return name


def ensure_namespace(cluster: TestCluster, name: str) -> str:
    try:
        cluster.request("POST", "/api/v1/namespaces",
                        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except urllib.error.HTTPError as e:
        if e.code != 409:
            raise
    return name


# --- resources -----------------------------------------------------------------------------------

def container(image: str, name: str = "main", env: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "image": image, "env": [{"name": k, "value": v} for k, v in (env or {}).items()]}


def khcheck(name: str, image: str = "kh-sim/ok", interval: str | None = "1h", timeout: str | None = "30s",
            env: dict[str, str] | None = None, containers: list[dict[str, Any]] | None = None,
            **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"podSpec": {"containers": containers or [container(image, env=env)]}}
    if interval is not None:
        s["runInterval"] = interval
    if timeout is not None:
        s["timeout"] = timeout
    s.update(spec)
    return {"apiVersion": f"{GROUP}/v1", "kind": "KuberhealthyCheck", "metadata": {"name": name}, "spec": s}


def khjob(name: str, image: str = "kh-sim/ok", timeout: str = "30s", phase: str = "",
          env: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "KuberhealthyJob", "metadata": {"name": name},
            "spec": {"phase": phase, "timeout": timeout, "podSpec": {"containers": [container(image, env=env)]}}}


def khstate(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "KuberhealthyState", "metadata": {"name": name}, "spec": spec}


def micro_now(offset: float = 0.0) -> str:
    return datetime.fromtimestamp(time.time() + offset, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def create_lease(cluster: TestCluster, ns: str, name: str, holder: str, seconds: int) -> None:
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": seconds,
                     "acquireTime": micro_now(), "renewTime": micro_now(), "leaseTransitions": 0}}
    cluster.request("POST", lease_path(ns), body)


def lease_holder(cluster: TestCluster, ns: str, name: str) -> str | None:
    """The holderIdentity ('' when released), or None when the Lease does not exist."""
    lease = get_or_none(cluster, lease_path(ns, name))
    if lease is None:
        return None
    return str(lease.get("spec", {}).get("holderIdentity") or "")


_ip_counter = itertools.count(1)


def fresh_pod_ip(block: int) -> str:
    """A loopback address unique within this test process (the simulated kubelet uses 127.10-19.x.x)."""
    n = next(_ip_counter)
    return f"127.{block}.{n // 250}.{n % 250 + 1}"


def fake_checker_pod(cluster: TestCluster, ns: str, name: str, ip: str, *, check: str | None,
                     run_uuid: str | None, env_uuid: str | None = "same", phase: str = "Running",
                     labels: dict[str, str] | None = None, finalizers: list[str] | None = None) -> dict[str, Any]:
    """A pod that looks like a checker pod (bound to a node nobody drives), with the status we choose."""
    meta_labels = {"app": "kuberhealthy-check"}
    if run_uuid:
        meta_labels["kuberhealthy-run-id"] = run_uuid
    if check:
        meta_labels["kuberhealthy-check-name"] = check
    meta_labels.update(labels or {})
    env = []
    value = run_uuid if env_uuid == "same" else env_uuid
    if value:
        env.append({"name": "KH_RUN_UUID", "value": value})
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": meta_labels,
                     "annotations": {CHECK_NAME_ANNOTATION: check} if check else {}},
        "spec": {"nodeName": NODE_ELSEWHERE, "restartPolicy": "Never",
                 "containers": [{"name": "main", "image": "example.invalid/checker:1", "env": env}]},
    }
    if finalizers:
        body["metadata"]["finalizers"] = finalizers
    pod = cluster.request("POST", pods_path(ns), body)
    if phase:
        set_pod_status(cluster, ns, name, phase, ip)
    return pod


def set_pod_status(cluster: TestCluster, ns: str, name: str, phase: str, ip: str) -> None:
    cluster.request("PATCH", pods_path(ns, name) + "/status",
                    {"status": {"phase": phase, "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "127.0.0.1"}},
                    content_type="application/merge-patch+json")


# --- finished checker pods made by hand ---------------------------------------------------------------

def rfc3339(hours_ago: float) -> str:
    return datetime.fromtimestamp(time.time() - hours_ago * 3600, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def finished_pod(cluster: TestCluster, ns: str, name: str, check: str, phase: str, hours_ago: float) -> None:
    run = str(uuid.uuid4())
    cluster.request("POST", pods_path(ns), {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"kuberhealthy-check-name": check, "kuberhealthy-run-id": run,
                                              "app": "kuberhealthy-check"},
                     "annotations": {"comcast.github.io/check-name": check}},
        "spec": {"nodeName": NODE_ELSEWHERE, "restartPolicy": "Never",
                 "containers": [{"name": "main", "image": "example.invalid/checker:1",
                                 "env": [{"name": "KH_RUN_UUID", "value": run}]}]}})
    if phase == "Running":
        state: dict[str, Any] = {"running": {"startedAt": rfc3339(hours_ago)}}
    else:
        state = {"terminated": {"exitCode": 0 if phase == "Succeeded" else 1,
                                "reason": "Completed" if phase == "Succeeded" else "Error",
                                "startedAt": rfc3339(hours_ago + 0.01), "finishedAt": rfc3339(hours_ago)}}
    cluster.request("PATCH", pods_path(ns, name) + "/status", {"status": {
        "phase": phase, "podIP": "127.0.99.1", "startTime": rfc3339(hours_ago + 0.02),
        "containerStatuses": [{"name": "main", "image": "example.invalid/checker:1", "imageID": "",
                               "ready": phase == "Running", "restartCount": 0, "state": state}]}},
        content_type="application/merge-patch+json")


# --- HTTP ------------------------------------------------------------------------------------------

class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def __repr__(self) -> str:
        return f"<Answer {self.status} {self.headers.get('content-type')!r} {self.text[:300]!r}>"


def raw_request(port: int, method: str, path: str, body: bytes | None = None, *,
                headers: dict[str, str] | None = None, source_ip: str = "127.0.0.1",
                chunked: bool = False) -> Answer:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source_ip, 0))
    try:
        hdrs = dict(headers or {})
        if chunked:
            conn.putrequest(method, path)
            for k, v in hdrs.items():
                conn.putheader(k, v)
            conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            data = body or b""
            step = 64 * 1024
            try:
                for i in range(0, len(data), step):
                    piece = data[i:i + step]
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


def report(port: int, body: Any, *, run_uuid: str | None = None, source_ip: str = "127.0.0.1",
           content_type: str = "application/json", chunked: bool = False) -> Answer:
    raw = body if isinstance(body, bytes) else (body.encode() if isinstance(body, str) else json.dumps(body).encode())
    headers = {"Content-Type": content_type}
    if run_uuid is not None:
        headers["kh-run-uuid"] = run_uuid
    return raw_request(port, "POST", "/externalCheckStatus", raw, headers=headers, source_ip=source_ip,
                       chunked=chunked)


def assert_one_line_plain_text(ans: Answer) -> None:
    ctype = ans.headers.get("content-type", "")
    assert ctype.startswith("text/plain"), f"4xx answer is not plain text: {ans!r}"
    text = ans.text.strip()
    assert text, f"4xx answer has no reason: {ans!r}"
    assert "\n" not in text, f"4xx reason is not one line: {ans!r}"


def get_json(url: str, path: str = "/", **kw: Any) -> Any:
    r = requests.get(url + path, timeout=30, **kw)
    assert r.status_code == 200, (r.status_code, r.text[:500])
    return r.json()


# --- the daemon ------------------------------------------------------------------------------------

def start_daemon(cluster: TestCluster, workdir: Path, name: str, pod_namespace: str, settings: dict[str, Any],
                 *, reporting_url: str | None = "self", env: dict[str, str] | None = None,
                 drop_env: tuple[str, ...] = ()) -> DaemonProcess:
    """Start the product (`python -m kuberhealthy.cli --config FILE`); wait for /readyz."""
    d = DaemonProcess(cluster, workdir, name, pod_namespace, settings)
    if reporting_url == "self":
        d.set_reporting_url(d.url + "/externalCheckStatus")
    elif reporting_url is not None:
        d.set_reporting_url(reporting_url)
    d.env.update({k: v.format(url=d.url) for k, v in (env or {}).items()})
    for k in drop_env:
        d.env.pop(k, None)
    d.start()
    return d


def wait_ready(d: DaemonProcess, timeout: float = 60) -> None:
    def ready() -> bool:
        assert d.proc is not None
        if d.proc.poll() is not None:
            raise RuntimeError(f"daemon {d.name} exited with {d.proc.returncode}:\n{d.log()[-4000:]}")
        try:
            return requests.get(d.url + "/readyz", timeout=5).status_code == 200
        except requests.RequestException:
            return False
    wait_for(ready, timeout, interval=0.1, what=f"{d.name} /readyz")


# --- Prometheus text ---------------------------------------------------------------------------------

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    samples = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"unparseable metrics line: {line!r}"
        labels: dict[str, str] = {}
        rest = m.group(2) or ""
        pos = 0
        while pos < len(rest):
            lm = _LABEL.match(rest, pos)
            assert lm, f"unparseable labels in {line!r}"
            labels[lm.group(1)] = lm.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
            pos = lm.end()
        samples.append((m.group(1), labels, float(m.group(3))))
    return samples


def promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/usr/bin/promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                          timeout=60, check=False)


# --- Go durations ------------------------------------------------------------------------------------

_GO_DUR = re.compile(r"^(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(s: str) -> float:
    assert isinstance(s, str) and s, f"not a Go duration: {s!r}"
    if s == "0s":
        return 0.0
    rest, total = s, 0.0
    while rest:
        m = _GO_DUR.match(rest)
        assert m, f"not a Go duration: {s!r}"
        total += float(m.group(1)) * _UNITS[m.group(2)]
        rest = rest[m.end():]
    return total


def parse_rfc3339(s: str) -> datetime:
    assert isinstance(s, str) and re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$", s), \
        f"not RFC3339: {s!r}"
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


# --- a fake InfluxDB 1.x -------------------------------------------------------------------------------

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
                    import gzip
                    data = gzip.decompress(data)
                return data

            def do_POST(self) -> None:
                from urllib.parse import parse_qs, urlparse
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
        self.thread = threading.Thread(target=self.server.serve_forever, name="contract-influx", daemon=True)

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


def split_line_protocol(line: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """measurement, tags, fields of one line (handles backslash escapes)."""
    parts: list[str] = []
    cur, esc, in_quotes = "", False, False
    for ch in line:
        if esc:
            cur += "\\" + ch
            esc = False
        elif ch == "\\":
            esc = True
        elif ch == '"':
            in_quotes = not in_quotes
            cur += ch
        elif ch == " " and not in_quotes:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    key, fields_s = parts[0], parts[1]

    def split_unescaped(s: str, sep: str) -> list[str]:
        out, buf, e = [], "", False
        for ch in s:
            if e:
                buf += ch
                e = False
            elif ch == "\\":
                e = True
            elif ch == sep:
                out.append(buf)
                buf = ""
            else:
                buf += ch
        out.append(buf)
        return out

    # unescape only after splitting on unescaped separators
    def raw_split(s: str, sep: str) -> list[str]:
        out, buf, e = [], "", False
        for ch in s:
            if e:
                buf += "\\" + ch
                e = False
            elif ch == "\\":
                e = True
            elif ch == sep:
                out.append(buf)
                buf = ""
            else:
                buf += ch
        out.append(buf)
        return out

    def unescape(s: str) -> str:
        return "".join(split_unescaped(s, "\0"))

    key_parts = raw_split(key, ",")
    measurement = unescape(key_parts[0])
    tags = {}
    for kv in key_parts[1:]:
        k, v = raw_split(kv, "=")[0], "=".join(raw_split(kv, "=")[1:])
        tags[unescape(k)] = unescape(v)
    fields = {}
    for kv in raw_split(fields_s, ","):
        k, _, v = kv.partition("=")
        fields[unescape(k)] = v
    return measurement, tags, fields


def free_tcp_port_closed() -> int:
    """A loopback port with nothing listening (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

