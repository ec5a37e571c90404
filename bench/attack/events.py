"""`make attack` scenario "events": ReportRejected Event spam against a real daemon process
(docs/interface.md#under-hostile-clients: at most one ReportRejected Event per check and reason a minute).

A check runs once (the simulated kubelet) and its run's uuid is read from `/`, as anyone can. Then:
  strangers  that uuid (and a made-up one, and no header) posted ROUNDS times from each of 20 loopback
             addresses that are no checker pod's: target, no ReportRejected Event at all;
  look-alike a pod carrying the check's labels and annotation (so, to the daemon, one of the check's
             checker pods) sends a report it may not make every 2 s for HOLD seconds, from its own
             address: target, its Events damped to at most one API request per check and reason per
             minute (the audit log), and no Event message carrying a caller's address.
"""
from __future__ import annotations

import math
import time
import uuid
from pathlib import Path
from typing import Any

import requests

from bench.attack.bed import daemon_bed, daemon_requests
from bench.attack.table import Row
from kuberhealthy.kube import KHCHECKS
from testbed.clients.rawhttp import post_report
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khcheck
from testbed.cluster.objects import create_checker_pod
from testbed.daemons.process import DaemonProcess
from testbed.wait import wait_for

CHECK = "target"
STRANGERS = [f"127.0.0.{i}" for i in range(101, 121)]
ROUNDS = 3
LOOK_ALIKE_IP = "127.0.0.150"
HOLD = 62.0  # seconds: past one minute, so the damping's second window opens once
EVERY = 2.0  # seconds between the look-alike's reports
OK = {"OK": True, "Errors": []}


def rejected_events(cluster: TestCluster, ns: str) -> list[dict[str, Any]]:
    got = cluster.request("GET", f"/api/v1/namespaces/{ns}/events")
    return [e for e in got.get("items") or [] if e.get("reason") == "ReportRejected"]


def run(cluster: TestCluster, workdir: Path) -> list[Row]:
    with daemon_bed(cluster, workdir, "events", nodes=1) as (ns, _, daemon):
        cluster.request("POST", KHCHECKS.path(ns), khcheck(CHECK, "kh-sim/ok", "1h", timeout="30s"))
        daemon.start().wait_serving()

        def last_uuid() -> str:
            details = requests.get(daemon.url + "/", timeout=5).json().get("CheckDetails") or {}
            return str((details.get(f"{ns}/{CHECK}") or {}).get("uuid") or "")
        finished = wait_for(last_uuid, 60, what="a finished run's uuid on /")
        rows = [_strangers(cluster, daemon, ns, finished), _look_alike(cluster, daemon, ns)]
        for r in rows:
            print(f"   {r.tried}: {r.answered}; {'PASS' if r.ok else 'MISS'}", flush=True)
            for n in r.notes:
                print(f"      {n}", flush=True)
        return rows


def _strangers(cluster: TestCluster, daemon: DaemonProcess, ns: str, finished: str) -> Row:
    statuses: dict[int, int] = {}
    for _ in range(ROUNDS):
        for source in STRANGERS:
            for header in (finished, str(uuid.uuid4()), None):
                status = post_report(daemon.port, OK, run_uuid=header, source_ip=source).status
                statuses[status] = statuses.get(status, 0) + 1
    time.sleep(3.0)  # the recorder sends within moments: give it the chance
    events = rejected_events(cluster, ns)
    sent = sum(statuses.values())
    answered = ", ".join(f"{s} x{n}" for s, n in sorted(statuses.items()))
    return Row("events", f"last finished uuid, a made-up one, no header: {sent} posts from {len(STRANGERS)} "
               "non-checker addresses", answered, None, "-", "0 ReportRejected Events",
               not events and set(statuses) <= {400, 503},
               [f"strangers: {len(events)} ReportRejected Events: {[e.get('message') for e in events][:3]}"])


def _look_alike(cluster: TestCluster, daemon: DaemonProcess, ns: str) -> Row:
    # One of the check's checker pods, to the daemon's pod cache: its labels, annotation and a Running status
    # with an address of ours; it carries a run uuid that is not the check's current one (a stale report).
    pod = f"{CHECK}-look-alike"
    create_checker_pod(cluster, ns, pod, check=CHECK, run_uuid=str(uuid.uuid4()), ip=LOOK_ALIKE_IP)
    wait_for(lambda: post_report(daemon.port, OK, source_ip=LOOK_ALIKE_IP).status == 400, 30,
             what="the look-alike in the daemon's pod cache")
    offset = cluster.audit_offset()
    began = time.monotonic()
    sent, statuses = 1, {400: 1}
    while time.monotonic() - began < HOLD:
        status = post_report(daemon.port, OK, source_ip=LOOK_ALIKE_IP).status
        statuses[status] = statuses.get(status, 0) + 1
        sent += 1
        time.sleep(EVERY)
    lasted = time.monotonic() - began
    time.sleep(3.0)
    calls = [e for e in daemon_requests(cluster, offset, ns) if (e.get("objectRef") or {}).get("resource") == "events"]
    events = rejected_events(cluster, ns)
    allowed = math.ceil(lasted / 60.0)
    leaked = [e.get("message") for e in events
              if any(ip in str(e.get("message")) for ip in [LOOK_ALIKE_IP, *STRANGERS])]
    counts = [int(e.get("count") or 0) for e in events]
    ok = 1 <= len(calls) <= allowed and len(events) >= 1 and not leaked
    answered = ", ".join(f"{s} x{n}" for s, n in sorted(statuses.items()))
    notes = [f"look-alike: {sent} rejected reports in {lasted:.0f} s -> {len(calls)} Event API requests "
             f"({', '.join(str(e.get('verb')) for e in calls)}), {len(events)} Event(s) with count {counts}; "
             f"message: {events[0].get('message') if events else '-'}; messages with an address: {leaked or 'none'}"]
    return Row("events", f"a checker pod's address: a stale report every {EVERY:g} s for {HOLD:.0f} s", answered,
               None, "-", f"<= 1 Event request per check+reason per minute ({allowed}); no address in it", ok, notes)
