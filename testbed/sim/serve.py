"""Run the simulated kubelet in a process of its own, for benchmarks that must not share a GIL with it.

    python -m testbed.sim.serve --kubeconfig K --namespace NS --nodes N --stats-file F [--ready-file R]
                              [--pool-size P] [--start-rate R] [--start-rate-file F] [--start-delay S]

Starts a SimKubelet for NS, touches the ready file once the first pod list is done, and runs until
SIGTERM or SIGINT. The signal handler only sets a flag; the main thread then writes the stats file,
stops the kubelet (joining every pod thread) and writes the file again with the final records.

The stats file (JSON, written atomically) is what a benchmark needs to tell a slow kubelet from a slow
daemon: a summary of the kubelet's own lags over all pods (seen → bound, seen → Running, Running →
report answered, report answered → exit written; p50/p99/max seconds), report answers by last HTTP
status and by outcome, reports that needed more than one attempt, retried API calls, the process's CPU
seconds, peak thread count and
connections discarded because its pool was full, and one row per pod with its raw monotonic timestamps
(CLOCK_MONOTONIC is system-wide, so another process on this machine can compare them with its own
`time.monotonic()` and filter to a measured window).

Pods that start slowly, for benchmarks that saturate on purpose (none of these by default):
`--start-rate R` lets at most R pods per second go from ContainerCreating to Running, in arrival order
(testbed/sim/startgate.py; the stats file then has a `start_gate` section: rate, turns given, pods
dropped from the queue because they were deleted while waiting, waiting now, peak); `--start-rate-file F`
sets that rate from a file holding one number, re-read whenever the file changes (so a benchmark can
change it while pods wait; a gate open until then when --start-rate is not given); `--start-delay S` adds
S seconds to every pod's Pending → Running (SimKubelet's timings.running_after).
What it does not do: it measures nothing about the daemon.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import urllib3

from testbed.sim.kubelet import SimKubelet
from testbed.sim.rawapi import DEFAULT_POOL_SIZE
from testbed.sim.records import Outcome, PodRecord
from testbed.sim.timings import FAST, Timings
from testbed.stats import summary

logger = logging.getLogger("testbed.sim.serve")

SAMPLE_EVERY = 1.0  # seconds between thread-count samples
POLL = 0.2  # seconds between looks at the signal flag
RECORD_FIELDS = ("seen", "bound", "running", "reported", "exited", "terminating", "deleted")


def _gap(rec: PodRecord, a: str, b: str) -> float | None:
    start, end = getattr(rec, a), getattr(rec, b)
    return None if start is None or end is None else end - start


def pod_row(rec: PodRecord) -> dict[str, Any]:
    """One pod, flat: its timestamps, its report's answer and the simulator's own problems."""
    row: dict[str, Any] = {"key": rec.key, "uid": rec.uid, "behaviour": rec.behaviour, "node": rec.node,
                           "phase": rec.phase, "exit_code": rec.exit_code, "errors": list(rec.errors),
                           "api_retries": rec.api_retries}
    row.update({f: getattr(rec, f) for f in RECORD_FIELDS})
    rep = rec.report
    row["report"] = None if rep is None else {
        "status": rep.status, "error": rep.error, "attempts": rep.attempts, "at": rep.at,
        "response_body": rep.response_body[:300], "statuses": list(rep.statuses),
        "outcome": rep.outcome.value if rep.outcome is not None else None}
    return row


def summarise(records: list[PodRecord]) -> dict[str, Any]:
    """The kubelet's lags over every pod it drove, and how its reports were answered."""
    gaps: dict[str, list[float]] = {"seen_to_bound": [], "seen_to_running": [], "running_to_reported": [],
                                    "reported_to_exited": [], "terminating_to_deleted": []}
    pairs = {"seen_to_bound": ("seen", "bound"), "seen_to_running": ("seen", "running"),
             "running_to_reported": ("running", "reported"), "reported_to_exited": ("reported", "exited"),
             "terminating_to_deleted": ("terminating", "deleted")}
    statuses: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    errors = retried_reports = api_retries = 0
    for rec in records:
        for name, (a, b) in pairs.items():
            g = _gap(rec, a, b)
            if g is not None:
                gaps[name].append(g)
        if rec.report is not None:
            if rec.report.status is not None:
                statuses[str(rec.report.status)] += 1
            else:  # a cancelled attempt's error is the simulator's own cut of its socket, not the server's
                statuses["cut (pod ended)" if rec.report.outcome is Outcome.CANCELLED else "no answer"] += 1
            outcomes[rec.report.outcome.value if rec.report.outcome is not None else "under way"] += 1
            retried_reports += rec.report.attempts > 1
        errors += len(rec.errors)
        api_retries += rec.api_retries
    return {"pods": len(records), "lags": {k: summary(v) for k, v in gaps.items()},
            "report_statuses": dict(statuses), "report_outcomes": dict(outcomes),
            "reports_retried": retried_reports, "api_retries": api_retries, "simulator_errors": errors}


class PoolFullCounter(logging.Filter):
    """Counts (and drops) urllib3's "Connection pool is full" warnings: under a burst of pods the kubelet
    opens more connections than its pool keeps, and thousands of log lines would cost CPU of their own."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Connection pool is full"):
            self.count += 1
            return False
        return True


class Serve:
    """The process: a SimKubelet, a thread-count sampler, and the stats file."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.signalled = False  # set by the signal handler; polled by the main thread
        self.stop_requested = threading.Event()
        start_rate = args.start_rate if args.start_rate is not None else (0.0 if args.start_rate_file else None)
        timings = FAST if args.start_delay <= 0 and start_rate is None else Timings(
            running_after=max(0.0, args.start_delay), start_rate=start_rate)
        self.sim = SimKubelet(args.kubeconfig, nodes=args.nodes, namespace=args.namespace or None,
                              node_prefix=args.node_prefix, pool_size=args.pool_size, timings=timings)
        self._rate_seen: tuple[float, int] | None = None  # (mtime, size) of the rate file last read
        self.peak_threads = 0
        self.pool_full = PoolFullCounter()
        logging.getLogger("urllib3.connectionpool").addFilter(self.pool_full)
        self.started_mono = time.monotonic()
        self._sampler = threading.Thread(target=self._sample, name="sim-serve-sampler", daemon=True)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signalled = True  # only a flag (no locks in a handler): the main thread does the work

    def _sample(self) -> None:
        while not self.stop_requested.wait(SAMPLE_EVERY):
            self.peak_threads = max(self.peak_threads, threading.active_count())

    def write_stats(self, final: bool) -> None:
        records = list(self.sim.records.values())
        usage = resource.getrusage(resource.RUSAGE_SELF)
        stats = {"final": final, "pid": os.getpid(), "namespace": self.args.namespace, "nodes": self.args.nodes,
                 "started_monotonic": self.started_mono, "written_monotonic": time.monotonic(),
                 "cpu_seconds": usage.ru_utime + usage.ru_stime, "max_rss_kb": usage.ru_maxrss,
                 "peak_threads": max(self.peak_threads, threading.active_count()),
                 "connections_discarded": self.pool_full.count,
                 "summary": summarise(records), "pods": [pod_row(r) for r in records]}
        if self.sim.start_gate is not None:
            stats["start_gate"] = self.sim.start_gate.stats()
        path = Path(self.args.stats_file)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(stats))
        tmp.replace(path)

    def read_rate_file(self) -> None:
        """Set the start gate's rate from --start-rate-file when the file changed (a missing or unreadable
        file changes nothing)."""
        gate, path = self.sim.start_gate, self.args.start_rate_file
        if gate is None or not path:
            return
        try:
            st = os.stat(path)
            if self._rate_seen == (st.st_mtime, st.st_size):
                return
            self._rate_seen = (st.st_mtime, st.st_size)
            gate.set_rate(float(Path(path).read_text().strip()))
        except (OSError, ValueError) as e:
            logger.warning("start rate file %s not used: %s", path, e)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.sim.start(timeout=self.args.start_timeout)
        self._sampler.start()
        try:
            if self.args.ready_file:
                Path(self.args.ready_file).write_text(str(os.getpid()))
            logger.info("serving namespace %s with %d nodes (pid %d)", self.args.namespace or "*",
                        self.args.nodes, os.getpid())
            next_write = time.monotonic() + self.args.stats_every
            while not self.signalled:
                self.read_rate_file()
                time.sleep(POLL)
                if self.args.stats_every and time.monotonic() >= next_write:
                    self.write_stats(final=False)
                    next_write = time.monotonic() + self.args.stats_every
            logger.info("stopping")
            self.write_stats(final=False)  # in case stop() takes long and the caller gives up waiting
        finally:
            self.stop_requested.set()
            self.sim.stop()
            self._sampler.join(5)
            self.write_stats(final=True)
        return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.sim.serve", description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", default="", help="the namespace to drive ('' = all)")
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--node-prefix", default="sim-node")
    p.add_argument("--pool-size", type=int, default=DEFAULT_POOL_SIZE,
                   help="API connections kept for reuse (about the number of pods driven at once)")
    p.add_argument("--stats-file", required=True)
    p.add_argument("--ready-file", default="", help="written (with our pid) once the first pod list is done")
    p.add_argument("--stats-every", type=float, default=0.0,
                   help="also write the stats file every this many seconds (0 = only when stopping)")
    p.add_argument("--start-timeout", type=float, default=60.0)
    p.add_argument("--start-rate", type=float, default=None,
                   help="pods per second that may go from ContainerCreating to Running (default: no limit)")
    p.add_argument("--start-rate-file", default="",
                   help="a file holding the start rate (pods/s, 0 = no limit), re-read when it changes")
    p.add_argument("--start-delay", type=float, default=0.0,
                   help="seconds added to every pod's Pending -> Running (default 0)")
    p.add_argument("--log-level", default="WARNING")
    args = p.parse_args(argv)
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)  # the test bed's self-signed cert
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s")
    return Serve(args).run()


if __name__ == "__main__":
    raise SystemExit(main())
