"""Run overhead and API requests per check run, on the real test bed. Prints figures; asserts nothing.

  overhead = the run's wall time (Runner.run) - the checker's own runtime (Running → exited, as the
             simulated kubelet recorded it). v2 spends >= 11 s per run by construction (fixed sleeps
             and 5 s polls); the target here is <= 0.3 s.
  API requests per run = audit-log entries made with the daemon's User-Agent during the runs,
             divided by the number of runs (watch streams excluded: they are per process, not per run).

Usage: python -m bench.run_bench [--runs N] [--delay SECONDS]
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections import Counter

from kuberhealthy.kube.client import USER_AGENT
from kuberhealthy.run.runner import Outcome, Runner
from testbed.cluster.apiserver import cleanup, start_cluster
from testbed.cluster.crds import install_crds
from testbed.cluster.objects import create_namespace
from testbed.daemons.inprocess import InProcessDaemon, check_spec
from testbed.sim.kubelet import SimKubelet
from testbed.stats import percentile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=25)
    ap.add_argument("--delay", type=float, default=0.2, help="simulated checker runtime (seconds)")
    args = ap.parse_args()
    cluster = start_cluster()
    try:
        install_crds(cluster)
        ns = create_namespace(cluster, "bench")
        kubelet = SimKubelet(str(cluster.kubeconfig), nodes=3, namespace=ns).start()
        daemon = InProcessDaemon(cluster, ns).start()
        check = check_spec(ns, "kh-sim/slow", timeout="30s", env={"SIM_DELAY": str(args.delay)}, name="bench")
        Runner(daemon.services, check, threading.Event()).run()  # warm-up: creates the khstate, fills pools
        offset = cluster.audit_offset()
        t_start = time.monotonic()
        overheads, walls = [], []
        phases: dict[str, list[float]] = {}
        for _ in range(args.runs):
            # Pods are named <check>-<unix second>: a run waits for a free name, so back-to-back runs
            # would measure that wait. Real schedules are seconds apart; start each run in a new second.
            time.sleep(1.02 - time.time() % 1.0)
            result = Runner(daemon.services, check, threading.Event()).run()
            assert result.outcome is Outcome.REPORTED, result
            rec = kubelet.record(ns, result.pod)
            assert rec is not None and rec.running is not None and rec.exited is not None
            walls.append(result.duration)
            for k, v in result.phase_seconds.items():
                phases.setdefault(k, []).append(v)
            overheads.append(result.duration - (rec.exited - rec.running))
        elapsed = time.monotonic() - t_start
        time.sleep(1.0)  # let the audit log flush
        events = [e for e in cluster.audit_events_since(offset)
                  if str(e.get("userAgent", "")).startswith(USER_AGENT.split("/")[0] + "/")
                  and e.get("verb") != "watch" and e.get("stage") == "ResponseComplete"]
        # Lease reads are time-based (the forced master observes the Lease every retryPeriod), not per run.
        lease_reads = [e for e in events if e["objectRef"].get("resource") == "leases"]
        events = [e for e in events if e["objectRef"].get("resource") != "leases"]
        verbs = Counter(f"{e['verb']} {e['objectRef'].get('resource')}" for e in events)
        daemon.stop()
        kubelet.stop()
    finally:
        cleanup(cluster)
    print(f"runs: {args.runs} (checker runtime {args.delay:.2f}s each)")
    print(f"run wall time: median {statistics.median(walls):.3f}s  p95 {percentile(walls, 95):.3f}s")
    print(f"run overhead:  median {statistics.median(overheads):.3f}s  p95 {percentile(overheads, 95):.3f}s"
          f"  (target <= 0.3s; v2 >= 11s)")
    print("median time per phase: " + ", ".join(f"{k} {statistics.median(v) * 1000:.0f}ms"
                                                for k, v in phases.items()))
    print(f"API requests per run: {len(events) / args.runs:.1f}  (target <= 10)")
    for k, v in sorted(verbs.items()):
        print(f"    {k:<28} {v / args.runs:.1f}/run")
    print(f"plus, independent of runs: {len(lease_reads) / elapsed:.2f} Lease reads/s (CurrentMaster)")


if __name__ == "__main__":
    main()
