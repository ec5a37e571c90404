"""Run overhead and API requests per check run, on the real test bed, for each kind of check. Prints
figures; asserts nothing.

  overhead = the run's wall time (Runner.run) - the checker's own runtime (Running → exited, as the
             simulated kubelet recorded it). v2 spends >= 11 s per run by construction (fixed sleeps
             and 5 s polls); the target here is <= 0.3 s.
  API requests per run = audit-log entries made with the daemon's User-Agent during the runs,
             divided by the number of runs (watch streams excluded: they are per process, not per run).

Kinds (--kind, default both, one after the other on one test bed and daemon): a khcheck run (its state a
khstate) and a HealthCheck run (Kuberhealthy v3's kind, its state its status, written through the status
subresource; the HealthCheck exists in the API with runInterval 1h, its first run the daemon's own, and
the counted runs come after it). The target: a HealthCheck run costs no more API requests than a khcheck run.

Usage: python -m bench.run_bench [--runs N] [--delay SECONDS] [--kind khcheck|healthcheck|both]
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kuberhealthy.kube import HEALTHCHECKS
from kuberhealthy.kube.client import USER_AGENT
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.records.kinds import KIND_HEALTHCHECK, KIND_KHCHECK
from kuberhealthy.run.runner import Outcome, Runner
from testbed.cluster.apiserver import TestCluster, cleanup, start_cluster
from testbed.cluster.builders import khcheck
from testbed.cluster.crds import install_crds
from testbed.cluster.objects import create_namespace
from testbed.daemons.inprocess import InProcessDaemon, check_spec
from testbed.sim.kubelet import SimKubelet
from testbed.stats import percentile
from testbed.wait import wait_for

KINDS = (KIND_KHCHECK, KIND_HEALTHCHECK)


@dataclass
class Figures:
    """What the runs of one kind measured."""

    kind: str
    runs: int
    walls: list[float] = field(default_factory=list)
    overheads: list[float] = field(default_factory=list)
    phases: dict[str, list[float]] = field(default_factory=dict)
    requests: Counter[str] = field(default_factory=Counter)
    lease_reads_per_s: float = 0.0

    @property
    def per_run(self) -> float:
        return sum(self.requests.values()) / self.runs


def healthcheck_spec(cluster: TestCluster, daemon: InProcessDaemon, ns: str, delay: float) -> CheckSpec:
    """A HealthCheck in the API (the khcheck's pod spec under podSpec.spec), its first run (the daemon's own,
    at creation) over, and its CheckSpec as the daemon parses it; its next scheduled run is an hour away."""
    pod_spec = khcheck("bench-hc", "kh-sim/slow", env={"SIM_DELAY": str(delay)})["spec"]["podSpec"]
    body = {"apiVersion": HEALTHCHECKS.api_version, "kind": "HealthCheck", "metadata": {"name": "bench-hc"},
            "spec": {"runInterval": "1h", "timeout": "30s", "podSpec": {"spec": pod_spec}}}
    obj = cluster.request("POST", HEALTHCHECKS.path(ns), body)

    def first_run_over() -> dict[str, Any] | None:
        status = cluster.request("GET", HEALTHCHECKS.path(ns, "bench-hc")).get("status") or {}
        done = int(status.get("successCount") or 0) + int(status.get("failureCount") or 0)
        return status if done and not status.get("currentUUID") else None
    wait_for(first_run_over, 60, what="the HealthCheck's first run")
    kind = daemon.services.kinds.named(KIND_HEALTHCHECK)
    assert kind is not None
    obj["metadata"]["namespace"] = ns
    return kind.parse(obj)


def run_kind(cluster: TestCluster, daemon: InProcessDaemon, kubelet: SimKubelet, ns: str, kind: str,
             args: argparse.Namespace) -> Figures:
    """args.runs runs of one check of `kind`, after an uncounted one; their times and API requests."""
    if kind == KIND_HEALTHCHECK:
        check = healthcheck_spec(cluster, daemon, ns, args.delay)
    else:
        check = check_spec(ns, "kh-sim/slow", timeout="30s", env={"SIM_DELAY": str(args.delay)}, name="bench")
        Runner(daemon.services, check, threading.Event()).run()  # warm-up: creates the khstate, fills pools
    out = Figures(kind, args.runs)
    offset = cluster.audit_offset()
    t_start = time.monotonic()
    for _ in range(args.runs):
            # Pods are named <check>-<unix second>: a run waits for a free name, so back-to-back runs
            # would measure that wait. Real schedules are seconds apart; start each run in a new second.
        time.sleep(1.02 - time.time() % 1.0)
        result = Runner(daemon.services, check, threading.Event()).run()
        assert result.outcome is Outcome.REPORTED, result
        rec = kubelet.record(ns, result.pod)
        assert rec is not None and rec.running is not None and rec.exited is not None
        out.walls.append(result.duration)
        for k, v in result.phase_seconds.items():
            out.phases.setdefault(k, []).append(v)
        out.overheads.append(result.duration - (rec.exited - rec.running))
    elapsed = time.monotonic() - t_start
    time.sleep(1.0)  # let the audit log flush
    events = [e for e in cluster.audit_events_since(offset)
              if str(e.get("userAgent", "")).startswith(USER_AGENT.split("/")[0] + "/")
              and e.get("verb") != "watch" and e.get("stage") == "ResponseComplete"]
    # Lease reads are time-based (the forced master observes the Lease every retryPeriod), not per run.
    out.lease_reads_per_s = sum(1 for e in events if e["objectRef"].get("resource") == "leases") / elapsed
    out.requests = Counter(_request(e) for e in events if e["objectRef"].get("resource") != "leases")
    return out


def _request(e: dict[str, Any]) -> str:
    ref = e["objectRef"]
    return f"{e['verb']} {ref.get('resource')}" + (f"/{ref['subresource']}" if ref.get("subresource") else "")


def report(f: Figures, delay: float) -> list[str]:
    lines = [f"-- {f.kind}: {f.runs} runs (checker runtime {delay:.2f}s each)",
             f"run wall time: median {statistics.median(f.walls):.3f}s  p95 {percentile(f.walls, 95):.3f}s",
             f"run overhead:  median {statistics.median(f.overheads):.3f}s  p95 {percentile(f.overheads, 95):.3f}s"
             f"  (target <= 0.3s; v2 >= 11s)",
             "median time per phase: " + ", ".join(f"{k} {statistics.median(v) * 1000:.0f}ms"
                                                   for k, v in f.phases.items()),
             f"API requests per run: {f.per_run:.1f}  (target <= 10)"]
    lines += [f"    {k:<28} {v / f.runs:.1f}/run" for k, v in sorted(f.requests.items())]
    lines.append(f"plus, independent of runs: {f.lease_reads_per_s:.2f} Lease reads/s (CurrentMaster)")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=25)
    ap.add_argument("--delay", type=float, default=0.2, help="simulated checker runtime (seconds)")
    ap.add_argument("--kind", choices=[*KINDS, "both"], default="both", help="the kind of check run (default both)")
    args = ap.parse_args()
    kinds = KINDS if args.kind == "both" else (args.kind,)
    cluster = start_cluster()
    measured: list[Figures] = []
    try:
        install_crds(cluster)
        ns = create_namespace(cluster, "bench")
        kubelet = SimKubelet(str(cluster.kubeconfig), nodes=3, namespace=ns).start()
        daemon = InProcessDaemon(cluster, ns).start()
        try:
            for kind in kinds:
                measured.append(run_kind(cluster, daemon, kubelet, ns, kind, args))
        finally:
            daemon.stop()
            kubelet.stop()
    finally:
        cleanup(cluster)
    for f in measured:
        print("\n".join(report(f, args.delay)))
    if len(measured) == 2:
        kh, hc = measured
        verdict = "no more" if hc.per_run <= kh.per_run + 1e-9 else "MORE"
        print(f"API requests per run, HealthCheck / khcheck: {hc.per_run:.2f} / {kh.per_run:.2f} = "
              f"{hc.per_run / kh.per_run:.2f}x ({verdict} than a khcheck run; target: no more)")


if __name__ == "__main__":
    main()
