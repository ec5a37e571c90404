"""Cross-site run-now and odd query strings against a real daemon process (docs/interface.md#run-now,
#under-hostile-clients).

A leading daemon (`enableForceMaster`, `trustedOrigins: [https://portal.example.com]`) over one khcheck
run by the simulated kubelet. Tried, as a hostile web page could make a browser send it:
`POST /api/checks/<ns>/<name>/run` with `Sec-Fetch-Site: cross-site` / `same-site`, with only a foreign
`Origin`, with `Origin: null`, and with `text/plain`, form and multipart bodies: every one must get 403,
and afterwards the khcheck carries no run-now annotation and no CheckRunRequested Event exists. Then
what must still work: the dashboard's own same-origin request, an old browser on the same origin,
curl (no browser headers) and the trusted origin: 202 each, one run each. Last, odd `since` tokens
and odd query strings on every GET endpoint of /openapi.json (and a broken OpenMetrics Accept on
/metrics): 4xx or a normal answer, never 5xx, and no traceback in the daemon's log.
"""
from __future__ import annotations

import collections
import json
import time
from pathlib import Path
from typing import Any

from bench.attack import target
from bench.attack.table import Row
from bench.attack.target import check_path, create_check
from kuberhealthy.outputs.events import COUNT_EVERY
from testbed.clients.rawhttp import Answer, request
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.crds import install_crds
from testbed.cluster.objects import create_namespace
from testbed.daemons.process import DaemonProcess
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

SCENARIO = "crosssite"
CHECK = "target"
ANNOTATION = "comcast.github.io/run-now"
TRUSTED = "https://portal.example.com"
EVIL = "http://evil.example"
HOSTILE: list[tuple[str, dict[str, str], bytes | None]] = [
    ("Sec-Fetch-Site: cross-site, Origin evil", {"Sec-Fetch-Site": "cross-site", "Origin": EVIL}, None),
    ("Sec-Fetch-Site: same-site, Origin evil", {"Sec-Fetch-Site": "same-site", "Origin": EVIL}, None),
    ("Sec-Fetch-Site: cross-site, Origin = Host", {"Sec-Fetch-Site": "cross-site"}, None),  # Origin filled in below
    ("Origin evil, no Sec-Fetch-Site (old browser)", {"Origin": EVIL}, None),
    ("Origin: null (sandboxed frame)", {"Origin": "null"}, None),
    ("text/plain body, no browser headers", {"Content-Type": "text/plain"}, b'{"run": true}'),
    ("form body (urlencoded)", {"Content-Type": "application/x-www-form-urlencoded"}, b"run=1"),
    ("multipart form body", {"Content-Type": "multipart/form-data; boundary=x"}, b"--x--\r\n"),
    ("text/plain body, Sec-Fetch-Site: same-origin", {"Content-Type": "text/plain", "Sec-Fetch-Site": "same-origin"},
     b"x"),
]
ODD_SINCE = ["x.%C2%B2.y", ".%C2%B2.", "a.%E2%91%A0.b", "a.%D9%A3.b", "a.1_0.b", "a.-1.b", "a.%2B1.b", "a.%201.b",
             "a." + "9" * 1000 + ".b", "%00", "a..b", "a.1.b.c", "a" * 300 + ".1.b"]
ODD_QUERIES = ["since=x.%C2%B2.y", "namespace=%C2%B2", "namespace=%ff%fe", "namespace=" + "%2C" * 500,
               "q=%00&ns=%ff&state=%C2%B2", "format=%00", "v=%ff", "%ff=%ff", "since", "&&=&", "x=" + "9" * 5000]


def _name() -> str:
    """The scenario's name in the table (with the kind of its check when it is not khchecks)."""
    return target.label(SCENARIO)


def _events(cluster: TestCluster, ns: str) -> int:
    items = cluster.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    return sum(int(e.get("count") or 1) for e in items if e["reason"] == "CheckRunRequested")


def _annotated(cluster: TestCluster, ns: str) -> bool:
    return ANNOTATION in (cluster.request("GET", check_path(ns, CHECK))["metadata"].get("annotations") or {})


def _finished(daemon: DaemonProcess, ns: str) -> int:
    """Runs of the check finished so far; -1 while one is in flight (or the API says nothing)."""
    answer = request(daemon, "GET", f"/api/checks/{ns}/{CHECK}", timeout=10)
    if answer.status != 200:
        return -1
    kind = "check" if target.kind() == target.KHCHECK else target.HEALTHCHECK  # /api/checks' name of the kind
    (entry,) = [e for e in json.loads(answer.text)["checks"] if e["kind"] == kind]
    return -1 if entry["currentRun"] is not None else int(entry["successCount"]) + int(entry["failureCount"])


def _run(daemon: DaemonProcess, ns: str, headers: dict[str, str], body: bytes | None = None) -> Answer:
    return request(daemon, "POST", f"/api/checks/{ns}/{CHECK}/run", body, headers=headers, timeout=10)


def _hostile(cluster: TestCluster, daemon: DaemonProcess, ns: str, own: str) -> list[Row]:
    rows = []
    for label, headers, body in HOSTILE:
        sent = dict(headers)
        if "Origin = Host" in label:
            sent["Origin"] = own
        answer = _run(daemon, ns, sent, body)
        rows.append(Row(_name(), f"run-now: {label}", f"{answer.status} {answer.text.strip()[:60]}", None, "-",
                        "403", answer.status == 403))
    time.sleep(1.0)  # the Event recorder sends in the background: give a wrongly raised Event time to land
    annotated, events = _annotated(cluster, ns), _events(cluster, ns)
    rows.append(Row(_name(), f"after {len(HOSTILE)} hostile run requests",
                    f"annotation {'set' if annotated else 'absent'}, {events} CheckRunRequested Event(s)", None, "-",
                    "no annotation, no Event", not annotated and events == 0))
    return rows


def _ran(cluster: TestCluster, daemon: DaemonProcess, ns: str, before: int) -> bool:
    """The leader took the request up: the annotation went and one more run finished (within 60 s)."""
    try:
        wait_for(lambda: not _annotated(cluster, ns) and _finished(daemon, ns) > before, 60, interval=0.2,
                 what="the requested run")
    except AssertionError:  # timed out
        return False
    return True


def _genuine(cluster: TestCluster, daemon: DaemonProcess, ns: str, own: str) -> list[Row]:
    rows = []
    cases = [("dashboard button (same-origin fetch)", {"Sec-Fetch-Site": "same-origin", "Origin": own,
                                                       "Accept": "application/json"}),
             ("old browser, Origin = Host", {"Origin": own}),
             ("curl -X POST (no browser headers)", {}),
             ("trusted origin, Sec-Fetch-Site: cross-site", {"Sec-Fetch-Site": "cross-site", "Origin": TRUSTED})]
    for label, headers in cases:
        before = _finished(daemon, ns)
        answer = _run(daemon, ns, headers)
        ran = answer.status == 202 and _ran(cluster, daemon, ns, before)
        rows.append(Row(_name(), f"run-now: {label}", f"{answer.status}{', ran' if ran else ''}", None, "-",
                        "202 and a run", answer.status == 202 and ran))
    try:  # repeats of one Event are counted onto it at most once every COUNT_EVERY seconds
        wait_for(lambda: _events(cluster, ns) >= len(cases), COUNT_EVERY + 30, interval=1.0,
                 what="the CheckRunRequested counts")
    except AssertionError:  # timed out: the row says how many there were
        pass
    events = _events(cluster, ns)
    rows.append(Row(_name(), "CheckRunRequested Events after the genuine requests", str(events), None, "-",
                    str(len(cases)), events == len(cases)))
    return rows


def _gets(daemon: DaemonProcess) -> list[str]:
    doc: dict[str, Any] = json.loads(request(daemon, "GET", "/openapi.json").text)
    return [p for p, ops in doc["paths"].items() if "get" in ops]


def _odd(daemon: DaemonProcess, ns: str) -> list[Row]:
    rows = []
    codes: collections.Counter[int] = collections.Counter()
    for token in ODD_SINCE:
        codes[request(daemon, "GET", f"/dashboard/live?since={token}", timeout=10).status] += 1
    rows.append(Row(_name(), f"/dashboard/live with {len(ODD_SINCE)} malformed since tokens",
                    ", ".join(f"{n}x{c}" for c, n in sorted(codes.items())), None, "-", "400 each",
                    set(codes) == {400}))
    codes.clear()
    paths = [p.replace("{namespace}", ns).replace("{name}", CHECK).replace("{file}", "dashboard.js")
             for p in _gets(daemon)]
    for path in paths:
        for query in ODD_QUERIES:
            codes[request(daemon, "GET", f"{path}?{query}", timeout=10).status] += 1
    codes[request(daemon, "GET", "/metrics", headers={"Accept": "application/openmetrics-text; version=x"}).status] += 1
    codes[request(daemon, "GET", "/metrics", headers={"Accept": "application/openmetrics-text;version=\u00b2"}
                  ).status] += 1
    total = sum(codes.values())
    rows.append(Row(_name(), f"{len(paths)} GET endpoints x {len(ODD_QUERIES)} odd query strings (+2 odd Accept)",
                    f"{total} answers: " + ", ".join(f"{n}x{c}" for c, n in sorted(codes.items())), None, "-",
                    "never 5xx", all(c < 500 for c in codes)))
    tracebacks = daemon.log().count("Traceback")
    rows.append(Row(_name(), "the daemon's log after all of it", f"{tracebacks} traceback(s)", None, "-",
                    "no traceback", tracebacks == 0))
    return rows


def run(cluster: TestCluster, workdir: Path) -> list[Row]:
    workdir.mkdir(parents=True, exist_ok=True)
    install_crds(cluster)
    ns = create_namespace(cluster, "attack-xs")
    create_check(cluster, ns, CHECK, interval="1h", timeout="30s")
    kubelet = SimKubelet(str(cluster.kubeconfig), nodes=1, namespace=ns).start()
    daemon = DaemonProcess(cluster, workdir, "kh-attack-xs", ns, {
        "targetNamespace": ns, "enableForceMaster": True, "trustedOrigins": [TRUSTED],
        "reportRateLimit": 1000, "reportRateBurst": 10000})
    try:
        daemon.start().wait_serving()
        wait_for(lambda: _finished(daemon, ns) >= 1, 60, interval=0.2, what="the check's first run")
        own = f"http://{daemon.host}:{daemon.port}"
        return [*_hostile(cluster, daemon, ns, own), *_genuine(cluster, daemon, ns, own), *_odd(daemon, ns)]
    finally:
        daemon.stop()
        kubelet.stop()
