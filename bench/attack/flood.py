"""`make attack` scenario "flood": fake reports against a real daemon process (docs/interface.md#under-hostile-clients:
reports naming no run the caches know are refused at once, with no API request).

Genuine checks run all along (the simulated kubelet, every 2 s: two report with the `kh-run-uuid` header,
two by their address only). First BASELINE seconds without an attacker count the daemon's own API
requests (audit log); then THREADS threads from each of three loopback addresses send fake reports as
fast as they are answered for HOLD seconds, half with a made-up `kh-run-uuid`, half with no header at
all. Targets: every genuine report answered 200 (the first attempt's answer, within 2 s at p99: the
time from the pod's Running status to the answer, the simulated checker reports at once); no genuine
run recorded as failed; the daemon's API requests during the flood, minus the baseline's rate, fewer
than one per ten fake reports the rate limit let through.

Then two more genuine checks report with their real tokens (TOKEN_CHECKS; a baseline of TOKEN_BASELINE
seconds again), and the same three addresses send forged bearer tokens for TOKEN_HOLD seconds
(testbed/clients/forgery.py: JWT-shaped, audience kuberhealthy, a live expiry, a random signature), most naming
made-up pods and one in REAL_EVERY the name and UID of a live checker pod read from the API. Targets as
above: every genuine report 200 (p99 within 2 s), fewer than one API request a report can cause (a
TokenReview or a read: by_reports) per ten forged reports past the rate limit.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.attack.bed import daemon_bed, daemon_requests
from bench.attack.table import Row, ms
from bench.attack.target import create_check, label, report_path, state_spec
from kuberhealthy.checkclient import RUN_UUID_HEADER
from testbed.clients.forgery import forged_token
from testbed.clients.rawhttp import request
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import pods_path
from testbed.sim.kubelet import SimKubelet
from testbed.sim.records import Outcome
from testbed.stats import percentile
from testbed.wait import wait_for

SOURCES = ["127.0.0.21", "127.0.0.22", "127.0.0.23"]
THREADS = 10  # per source
HOLD = 40.0  # seconds of flood
BASELINE = 20.0  # seconds without an attacker
GENUINE_P99_MS = 2000.0
COST = 0.1  # API requests per fake report, at most (exclusive)
TOKEN_HOLD = 20.0  # seconds of forged tokens
REAL_EVERY = 20  # one forged token in REAL_EVERY names a live checker pod
CHECKS = {"hdr-a": {}, "hdr-b": {}, "addr-a": {"SIM_NO_UUID_HEADER": "1"}, "addr-b": {"SIM_NO_UUID_HEADER": "1"}}
TOKEN_CHECKS = {"tok-a": {"SIM_TOKEN": "file"}, "tok-b": {"SIM_TOKEN": "file", "SIM_NO_UUID_HEADER": "1"}}  # added
# for the forged tokens, with a baseline of their own (TOKEN_BASELINE s)
TOKEN_BASELINE = 10.0
BODY = json.dumps({"OK": True, "Errors": []}).encode()


def kinds(events: list[dict[str, Any]]) -> str:
    """The requests by verb and resource, most first, for the notes."""
    c = Counter(f"{e.get('verb')} {(e.get('objectRef') or {}).get('resource')}" for e in events)
    return ", ".join(f"{k} x{n}" for k, n in c.most_common(6)) or "none"


class Flood:
    """THREADS threads per source, each posting fake reports until stopped; answers counted by status."""

    def __init__(self, port: int, token: Callable[[], str] | None = None) -> None:
        self.port = port
        self.token = token  # None: made-up uuids / no header; else every report carries token()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.statuses: Counter[str] = Counter()
        self.slowest = 0.0
        self.threads = [threading.Thread(target=self._send, args=(src, i), name=f"flood-{src}-{i}", daemon=True)
                        for src in SOURCES for i in range(THREADS)]

    def _send(self, source: str, i: int) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                headers = {"Content-Type": "application/json"}
                if self.token is not None:
                    headers["Authorization"] = f"Bearer {self.token()}"
                elif i % 2:
                    headers[RUN_UUID_HEADER] = str(uuid.uuid4())
                status = str(request(self.port, "POST", report_path(), BODY, headers=headers, source_ip=source,
                                     timeout=10).status)
            except OSError as e:
                status = type(e).__name__
            with self.lock:
                self.statuses[status] += 1
                self.slowest = max(self.slowest, time.monotonic() - t0)

    def __enter__(self) -> Flood:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(15)


class Forger:
    """Forged tokens: one in REAL_EVERY names a live checker pod of `ns` (read from the API every second,
    as anyone who can `get pods` can), the rest made-up pods."""

    def __init__(self, cluster: TestCluster, ns: str) -> None:
        self.cluster = cluster
        self.ns = ns
        self.lock = threading.Lock()
        self.live: list[tuple[str, str]] = []
        self.made = 0
        self.real = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._read, name="flood-forger", daemon=True)

    def _read(self) -> None:
        while True:
            pods = self.cluster.request("GET", pods_path(self.ns)).get("items") or []
            live = [(p["metadata"]["name"], p["metadata"]["uid"]) for p in pods
                    if (p.get("status") or {}).get("phase") == "Running"]
            with self.lock:
                self.live = live or self.live
            if self.stop.wait(1.0):
                return

    def __call__(self) -> str:
        with self.lock:
            self.made += 1
            pod = self.live[self.made % len(self.live)] if self.live and self.made % REAL_EVERY == 0 else None
            self.real += pod is not None
        return forged_token(self.ns, *pod) if pod else forged_token(self.ns)

    def __enter__(self) -> Forger:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(5)


def _watch_failures(cluster: TestCluster, ns: str, stop: threading.Event, seen: dict[str, str]) -> None:
    """Polls every check's state: a recorded failure is a genuine run that false-failed."""
    while not stop.wait(0.5):
        for check in [*CHECKS, *TOKEN_CHECKS]:
            spec = state_spec(cluster, ns, check)
            if spec.get("OK") is False:
                seen.setdefault(f"{check} {spec.get('uuid')}", "; ".join(spec.get("Errors") or []))


def run(cluster: TestCluster, workdir: Path) -> list[Row]:
    with daemon_bed(cluster, workdir, "flood") as (ns, sim, daemon):
        for name, env in CHECKS.items():
            create_check(cluster, ns, name, "kh-sim/ok", "2s", timeout="30s", env=env)
        daemon.start().wait_serving()
        wait_for(lambda: all(state_spec(cluster, ns, c).get("OK") is True for c in CHECKS), 60,
                 what="a first good run of every check")
        failed: dict[str, str] = {}
        stop = threading.Event()
        watcher = threading.Thread(target=_watch_failures, args=(cluster, ns, stop, failed), daemon=True)
        watcher.start()
        offset = cluster.audit_offset()
        time.sleep(BASELINE)
        baseline = daemon_requests(cluster, offset, ns)
        offset, before = cluster.audit_offset(), set(sim.report_results)
        began = time.monotonic()
        with Flood(daemon.port) as flood:
            time.sleep(HOLD)
        lasted = time.monotonic() - began
        during = daemon_requests(cluster, offset, ns)
        time.sleep(3.0)  # reports under way finish
        rows = [_genuine(sim, before, began, lasted, flood, failed, FAKES),
                _cost(baseline, during, lasted, flood, "API requests caused by the flood (audit log - baseline)")]
        for name, env in TOKEN_CHECKS.items():
            create_check(cluster, ns, name, "kh-sim/ok", "2s", timeout="30s", env=env)
        wait_for(lambda: all(state_spec(cluster, ns, c).get("OK") is True for c in TOKEN_CHECKS), 60,
                 what="a first good run of every token check")
        offset = cluster.audit_offset()
        time.sleep(TOKEN_BASELINE)
        baseline = daemon_requests(cluster, offset, ns)
        offset, before = cluster.audit_offset(), set(sim.report_results)
        began = time.monotonic()
        with Forger(cluster, ns) as forger, Flood(daemon.port, forger) as forged:
            time.sleep(TOKEN_HOLD)
        lasted = time.monotonic() - began
        during = daemon_requests(cluster, offset, ns)
        time.sleep(3.0)
        stop.set()
        watcher.join(5)
        rows.append(_genuine(sim, before, began, lasted, forged, failed,
                             f"forged bearer tokens, {TOKEN_HOLD:.0f} s (1 in {REAL_EVERY} naming a live checker pod)"))
        rows.append(_cost(baseline, during, lasted, forged, "TokenReviews and reads caused by forged tokens (audit "
                          "log - baseline)", TOKEN_BASELINE, by_reports))
        rows[-1].notes.append(f"forged: {forger.made} made, {forger.real} of them naming a live checker pod (those "
                              "past the rate limit cost a TokenReview each: their pod is real)")
        tracebacks = daemon.log().count("Traceback")
        if tracebacks:
            rows[-1].notes.append(f"{tracebacks} tracebacks in the daemon's log ({daemon.log_path})")
            rows[-1].ok = False
        for r in rows:
            print(f"   {r.tried}: {r.answered}; genuine {r.genuine}; {'PASS' if r.ok else 'MISS'}", flush=True)
            for n in r.notes:
                print(f"      {n}", flush=True)
        return rows


def _answered(flood: Flood) -> str:
    return ", ".join(f"{s} x{n}" for s, n in sorted(flood.statuses.items()))


FAKES = f"made-up uuids / no header, {HOLD:.0f} s"


def _genuine(sim: SimKubelet, before: set[str], began: float, lasted: float, flood: Flood,
             failed: dict[str, str], fakes: str) -> Row:
    """Rows 1 and 3: the genuine reports sent while the flood lasted."""
    pods = [p for k, p in sim.records.items() if k not in before and p.report is not None and p.running is not None
            and began <= p.running <= began + lasted]
    reports = [p.report for p in pods if p.report is not None and p.report.outcome is not Outcome.CANCELLED]
    first = [p for p in pods if p.report is not None and p.report.statuses[:1] == [200]]
    latencies = [(p.reported - p.running) * 1000 for p in first if p.reported is not None and p.running is not None]
    accepted = [r for r in reports if r.outcome is Outcome.ACCEPTED]
    worst = percentile(latencies, 99)
    ok = (bool(reports) and len(first) == len(reports) == len(accepted) and worst is not None
          and worst <= GENUINE_P99_MS and not failed)
    notes = [f"genuine: {len(first)}/{len(reports)} answered 200 at the first attempt, "
             f"{len(accepted)}/{len(reports)} accepted in the end; p99 {ms(worst)} ms, max "
             f"{max(latencies, default=0):.0f} ms; false-failed runs: {failed or 'none'}; slowest fake answer "
             f"{flood.slowest:.2f} s"]
    return Row(label("flood"), f"{len(SOURCES)} addresses x {THREADS} threads, {fakes}",
               _answered(flood), None, f"{len(first)}/{len(reports)} 200 first try, p99 {ms(worst)} ms",
               f"every genuine 200, p99 <= {GENUINE_P99_MS:.0f} ms; no false fail", ok, notes)


def by_reports(event: dict[str, Any]) -> bool:
    """A request a report can cause: a TokenReview or a read (pod creates and deletes, khstate writes come
    from runs and the reaper, whose bursts a short baseline may miss)."""
    return event.get("verb") in ("get", "list") or (event.get("objectRef") or {}).get("resource") == "tokenreviews"


def _cost(baseline: list[dict[str, Any]], during: list[dict[str, Any]], lasted: float, flood: Flood,
          tried: str, baseline_seconds: float = BASELINE, counted: Callable[[dict[str, Any]], bool] | None = None
          ) -> Row:
    """Rows 2 and 4: the API requests the flood cost (all, or those `counted`), against the baseline's rate."""
    sent = sum(flood.statuses.values())
    through = sent - flood.statuses["429"]
    pick = counted or (lambda _e: True)
    extra = sum(map(pick, during)) - sum(map(pick, baseline)) * lasted / baseline_seconds
    ok = through > 0 and extra < COST * through
    notes = [f"cost: baseline {len(baseline)} requests in {baseline_seconds:.0f} s ({kinds(baseline)}); during the "
             f"flood {len(during)} in {lasted:.0f} s ({kinds(during)}); {sent} fakes sent, {through} past the rate "
             "limit"]
    return Row(label("flood"), tried,
               f"{extra:.1f} extra for {through} fakes ({extra / max(1, through):.4f} each)", None, "-",
               f"< {COST:g} API request per fake", ok, notes)
