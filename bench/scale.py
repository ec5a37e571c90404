"""`make scale`: one daemon running N checks for several intervals; a table, and targets at 1,000 checks.

For each N (default 250, 1000, 2000), on a fresh test bed (real kube-apiserver + etcd): the simulated
kubelet in its own process (testbed/sim/serve.py, max(3, N/100) nodes), N khchecks whose checker reports
OK after SIM_DELAY s (`kh-sim/ok`; runInterval = --interval, timeout 30 s), and ONE daemon as a real
process (gunicorn, enableForceMaster, targetNamespace, reporting to its own /externalCheckStatus,
logLevel info). The first interval is warm-up: the measured window starts half an interval after every
check has finished its first run (or one interval after the first checker pod appeared), so runs started
in a bunch are measured whole, and lasts --intervals x --interval seconds. Measured, from outside the daemon:

  schedule lag   per check, lag_n = start_n - (start_{n-1} + interval) for every run start_n in the
                 window; a start is the monotonic time this harness's own pod watch first saw the pod.
                 A run still overdue at the window's end counts with the lower bound (end - due).
                 Cross-checked with pod creationTimestamps (1 s resolution). The daemon's histogram
                 `kuberhealthy_schedule_lag_seconds` is scraped at both ends of the window when present.
  false failures every checker reports OK, so every khstate version that turns OK false (a new failed
                 result: OK false with a new LastRun or new errors) is false; from a khstate watch,
                 counted from daemon start to window end, plus the final state. Reports the simulated
                 kubelet got refused with a 4xx (from its records) are genuine reports refused; 5xx
                 answers and reports never answered are counted apart (the simulated checker does not
                 retry them, so they usually end as failed results too).
  daemon CPU     utime+stime (+ reaped children) of the daemon's process tree (gunicorn arbiter and
                 worker) over the window, in cores, and per check; per run, split by thread group
                 (checks, watches, HTTP pool, main loop), with each group's time slices per run: how
                 often the scheduler put its threads on a CPU (each a wake-up or a resumed preemption;
                 testbed/stats.py, from /proc/PID/task/TID/schedstat).
  memory         peaks, sampled every 2 s from daemon start to window end, of the tree's summed PSS
                 (/proc/PID/smaps_rollup, so the forked worker's shared pages are not counted twice),
                 summed RSS, and summed thread count.
  API requests   audit-log entries in the window with a `kuberhealthy/` user agent, watches excluded;
                 per second and per run (runs = checker pods first seen in the window).
  `/` latency    GET / at 2 req/s (open loop, 15 s client timeout) during the window: p50/p99 of the
                 answered requests; timeouts, errors and non-200s counted as failed polls.
  scrapes        GET /metrics every --scrape-every seconds (15) from the daemon's start, as a Prometheus
                 server would: the readers' first reads after a start (uptime windows decode each check's
                 whole rollup once) fall in the warm-up, and the window pays what scrapes cost at steady state.
  kubelet lag    from the simulated kubelet's stats file (pods first seen in the window): seen → bound,
                 seen → Running, Running → report answered (minus SIM_DELAY), and its watch delay
                 behind this harness's watch, so a slow kubelet is told apart from a slow daemon.
Also shown: CPU of the API server + etcd, the kubelet process, this harness and the whole machine.

With --mix, half of each size's checks are HealthChecks (Kuberhealthy v3's kind; their result is their
status): the figures are shown for the run and, where they split, per kind (bench/scalemix.py). With
--versus-mix, each size runs twice, khchecks alone and then the mix, and the mix's figures are printed over
khchecks alone's (targets: as few false failures, lag as good, CPU per run within +-10 %).

Targets at 1,000 checks (exit status 1 when one is missed and N=1000 was run; 2 when a size could not
be measured): 0 false failures and 0 reports refused with a 4xx; schedule lag p99 < 1 s; daemon CPU < 0.4 core;
peak PSS < 250 MB; `/` p99 < 0.5 s; API requests per run <= 5. Other sizes are reported only.
Logs and raw observations are kept under --results (default /tmp/kh-scale-<time>/n<N>/).

Usage: python -m bench.scale [--checks 250,1000,2000] [--interval 60] [--intervals 3] [--mix | --versus-mix]
"""
from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import scalemix
from bench.scaleprobe import (
    KIND_HEALTHCHECK,
    KIND_KHCHECK,
    ApiWatch,
    PodLog,
    Poller,
    Scraper,
    StateLog,
    TreeSampler,
    audit_mark,
    audit_since,
    count_audit,
    healthcheck_version,
    histogram_delta,
    machine_busy_seconds,
    owner_counter,
    process_tree,
    scrape_histogram,
)
from bench.scalereport import (
    HEADER,
    TARGET_N,
    false_failures,
    log_problems,
    markdown_row,
    print_details,
    schedule_lags,
    sim_figures,
    targets,
)
from kuberhealthy.records import uptime
from testbed.clients.rawhttp import request
from testbed.cluster.apiserver import ADMIN_TOKEN, TestCluster, start_cluster
from testbed.cluster.builders import khc, khcheck, khs, pods_path
from testbed.cluster.crds import install_crds
from testbed.cluster.objects import create_namespace
from testbed.daemons.process import DaemonProcess
from testbed.fakes.world import khstate_of, month_of_runs
from testbed.paths import REPO
from testbed.procs import end_group
from testbed.stats import cpu_by_thread_group, cpu_seconds, slices_by_thread_group, summary, thread_cpu

HOST = "127.0.0.1"
DAEMON_AGENT = "kuberhealthy/"
SIM_AGENT = "kh-sim-kubelet"
LAG_FAMILY = "kuberhealthy_schedule_lag_seconds"
MB = 1024  # kB per MB (the /proc figures are kB)

logger = logging.getLogger("bench.scale")


# --- set-up --------------------------------------------------------------------------------------------

def scale_check(i: int, args: argparse.Namespace) -> dict[str, Any]:
    return khcheck(f"scale-{i:04d}", args.image, interval=f"{args.interval:g}s", timeout=f"{args.timeout:g}s",
                   env={"SIM_DELAY": f"{args.delay:g}"})


def scale_healthcheck(i: int, args: argparse.Namespace) -> dict[str, Any]:
    """The HealthCheck twin of scale_check: the same pod spec, interval and timeout."""
    twin = scale_check(i, args)["spec"]
    return scalemix.healthcheck(f"{scalemix.HC_PREFIX}{i:04d}", twin["podSpec"], twin["runInterval"],
                                twin["timeout"])


def create_checks(cluster: TestCluster, ns: str, args: argparse.Namespace,
                  counts: dict[str, int] | None = None) -> None:
    """counts[khcheck] khchecks and counts[healthcheck] HealthChecks, interleaved (default: args.n khchecks)."""
    counts = counts or scalemix.split(args.n, mix=False)
    bodies = [(khc(ns), scale_check(i, args)) for i in range(counts[KIND_KHCHECK])]
    hcs = [(scalemix.hcs_path(ns), scale_healthcheck(i, args)) for i in range(counts[KIND_HEALTHCHECK])]
    order = [b for pair in zip(bodies, hcs, strict=False) for b in pair] + bodies[len(hcs):] + hcs[len(bodies):]
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="create") as pool:
        for f in [pool.submit(cluster.request, "POST", path, body) for path, body in order]:
            f.result()


def seed_rollups(cluster: TestCluster, ns: str, khchecks: int) -> int:
    """A khstate for each of the first `khchecks` scale checks whose rollups hold 30 days of 1-minute runs
    (testbed/fakes/world.py month_of_runs): the value's size in bytes."""
    value = month_of_runs(time.time())
    bodies = [khstate_of(f"scale-{i:04d}", ns, **{uptime.FIELD: value}) for i in range(khchecks)]
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="seed") as pool:
        for f in [pool.submit(cluster.request, "POST", khs(ns), body) for body in bodies]:
            f.result()
    return len(json.dumps(value, separators=(",", ":")))


def object_sizes(items: list[dict[str, Any]]) -> dict[str, float]:
    """Mean and largest size (compact JSON, bytes) of these objects."""
    sizes = [len(json.dumps(i, separators=(",", ":"))) for i in items]
    return {"mean": round(sum(sizes) / len(sizes), 1) if sizes else 0.0, "max": max(sizes, default=0)}


def http_ok(port: int, path: str, timeout: float = 5.0) -> bool:
    try:
        return request(port, "GET", path, timeout=timeout).status == 200
    except (OSError, http.client.HTTPException):
        return False


def wait_until(fn: Callable[[], bool], timeout: float, alive: Callable[[], str | None] = lambda: None,
               every: float = 0.5) -> bool:
    """Poll fn until true (True), the deadline (False), or `alive` names a dead process (raises)."""
    deadline = time.monotonic() + timeout
    while True:
        if fn():
            return True
        dead = alive()
        if dead:
            raise RuntimeError(dead)
        if time.monotonic() >= deadline:
            return False
        time.sleep(every)


def settle_s(interval: float) -> float:
    """Seconds between the warm-up's end and the window's start: half an interval (see measure())."""
    return interval / 2


class SimProcess:
    """`python -m testbed.sim.serve` as a child process; its stats file is read after SIGTERM."""

    def __init__(self, cluster: TestCluster, ns: str, nodes: int, outdir: Path) -> None:
        self.stats_file = outdir / "sim-stats.json"
        self.ready_file = outdir / "sim.ready"
        self.log_path = outdir / "sim.log"
        self.argv = [sys.executable, "-m", "testbed.sim.serve", "--kubeconfig", str(cluster.kubeconfig),
                     "--namespace", ns, "--nodes", str(nodes), "--stats-file", str(self.stats_file),
                     "--ready-file", str(self.ready_file)]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 90.0) -> SimProcess:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        if not wait_until(self.ready_file.exists, timeout, self.dead):
            raise RuntimeError(f"simulated kubelet not ready after {timeout}s (log: {self.log_path})")
        return self

    def dead(self) -> str | None:
        if self.proc is not None and self.proc.poll() is not None:
            return f"simulated kubelet exited with {self.proc.returncode} (log: {self.log_path})"
        return None

    def stop(self, timeout: float = 90.0) -> dict[str, Any] | None:
        """SIGTERM, wait (bounded), SIGKILL if need be; the stats it wrote (final or not), or None."""
        if self.proc is not None:
            end_group(self.proc, grace=timeout)
        try:
            return dict(json.loads(self.stats_file.read_text()))
        except (OSError, ValueError):
            return None


def product_state() -> str:
    """The commit, whether kuberhealthy/ has uncommitted changes, and a digest of its sources (the code
    a daemon started now runs; the tree may change between sizes while someone works on it)."""
    def git(*a: str) -> str:
        r = subprocess.run(["git", "-C", str(REPO), *a], capture_output=True, text=True, check=False)
        return r.stdout.strip()
    dirty = [line for line in git("status", "--porcelain", "--", "kuberhealthy").splitlines() if line]
    digest = hashlib.sha256()
    for path in sorted((REPO / "kuberhealthy").rglob("*.py")):
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return (git("rev-parse", "--short", "HEAD")
            + (f" + {len(dirty)} uncommitted file(s) in kuberhealthy/" if dirty else " (kuberhealthy/ clean)")
            + f", sources sha256 {digest.hexdigest()[:12]}")


# --- one size ------------------------------------------------------------------------------------------

def measure(args: argparse.Namespace, outdir: Path) -> dict[str, Any]:
    """One size on a fresh test bed; the row (a dict). Everything it starts is stopped before it returns.
    An optional `args.source` (a directory holding another version's kuberhealthy/) runs that daemon instead
    of this tree's (bench/versus.py compares the two)."""
    n, interval = args.n, args.interval
    source: Path | None = getattr(args, "source", None)
    counts = scalemix.split(n, bool(getattr(args, "mix", False)))
    outdir.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    row: dict[str, Any] = {"n": n, "interval": interval, "intervals": args.intervals, "notes": notes,
                           "logs": str(outdir), "checks_by_kind": counts}

    def say(msg: str) -> None:
        print(f"  [{n}] {msg}", flush=True)
    cluster = start_cluster(workdir=outdir / "testbed")
    sim: SimProcess | None = None
    daemon: DaemonProcess | None = None
    watches: list[ApiWatch] = []
    sampler: TreeSampler | None = None
    poller: Poller | None = None
    scraper: Scraper | None = None
    stats: dict[str, Any] | None = None
    pods, states, hc_states = PodLog(), StateLog(), StateLog(healthcheck_version)
    try:
        install_crds(cluster)
        ns = create_namespace(cluster, "scale")
        nodes = max(3, n // 100)
        sim = SimProcess(cluster, ns, nodes, outdir).start()
        say(f"test bed up; simulated kubelet pid {sim.pid} with {nodes} nodes")
        watches = [ApiWatch(cluster.server, ADMIN_TOKEN, pods_path(ns), pods.on_event, "watch-pods").start(),
                   ApiWatch(cluster.server, ADMIN_TOKEN, khs(ns), states.on_event, "watch-khstates").start()]
        if counts[KIND_HEALTHCHECK]:
            watches.append(ApiWatch(cluster.server, ADMIN_TOKEN, scalemix.hcs_path(ns), hc_states.on_event,
                                    "watch-healthchecks").start())
        if not all(w.synced.wait(30) for w in watches):
            raise RuntimeError("harness watches did not sync within 30s")
        t = time.monotonic()
        create_checks(cluster, ns, args, counts)
        say(f"{counts[KIND_KHCHECK]} khchecks and {counts[KIND_HEALTHCHECK]} HealthChecks created in "
            f"{time.monotonic() - t:.1f}s")
        if getattr(args, "seed_rollups", False):
            t = time.monotonic()
            seeded = seed_rollups(cluster, ns, counts[KIND_KHCHECK])
            row["seeded_rollup_bytes"] = seeded
            say(f"{counts[KIND_KHCHECK]} khstates seeded with 30 days of rollups ({seeded} bytes each) in "
                f"{time.monotonic() - t:.1f}s")
        daemon = DaemonProcess(cluster, outdir, "kuberhealthy-scale-0", ns, {
            "enableForceMaster": True, "targetNamespace": ns, "logLevel": args.log_level}, source=source)
        d = daemon

        def dead() -> str | None:
            if d.proc is not None and d.proc.poll() is not None:
                return f"daemon exited with {d.proc.returncode} (log: {d.log_path})"
            return sim.dead() if sim is not None else None

        row["product"] = product_state() if source is None else f"kuberhealthy/ from {source}"
        t_daemon = time.monotonic()
        daemon.start()
        assert daemon.proc is not None
        sampler = TreeSampler(daemon.proc.pid).start()
        if not wait_until(lambda: http_ok(d.port, "/healthz"), 120, dead):
            raise RuntimeError(f"daemon not answering /healthz after 120s (log: {daemon.log_path})")
        scraper = Scraper(HOST, daemon.port, period=args.scrape_every).start()
        say(f"daemon up in {time.monotonic() - t_daemon:.1f}s; warm-up")
        # Warm-up: every check has finished its first run, or one interval after the first pod appeared.
        if not wait_until(lambda: bool(pods.pods), max(60.0, interval), dead):
            notes.append("no checker pod appeared during warm-up")
        first_pod = min((p.seen for p in pods.pods.values()), default=time.monotonic())
        def first_runs() -> int:
            return states.completed_first_run() + hc_states.completed_first_run()
        done = wait_until(lambda: first_runs() >= n, max(0.0, first_pod + interval - time.monotonic()), dead)
        row["warmup"] = {"seconds": round(time.monotonic() - t_daemon, 1), "all_first_runs_done": done,
                         "first_runs_done": first_runs(),
                         "first_pod_after_daemon_start_s": round(first_pod - t_daemon, 2),
                         "settle_s": settle_s(interval)}
        say(f"warm-up over after {row['warmup']['seconds']}s ({row['warmup']['first_runs_done']} of {n} first runs "
            f"finished); measuring {args.intervals} x {interval:g}s after {settle_s(interval):g}s")
        # A daemon that starts its runs in a bunch would otherwise have the window open just after one bunch's
        # work and close just after a later bunch's pods appeared, before their reports and writes: runs
        # counted, their work not (fewer API requests per run is the tell). Half an interval later, every
        # bunch is inside the window or outside it whole; an even schedule is measured the same either way.
        wait_until(lambda: False, settle_s(interval), dead, every=1.0)

        # --- the window
        tree = process_tree(daemon.proc.pid)
        api_pids = [p.pid for p in cluster.procs.values()]
        w0, wall0 = time.monotonic(), time.time()
        mono_to_unix = wall0 - w0
        audit0 = audit_mark(cluster.audit_log)
        usage0 = resource.getrusage(resource.RUSAGE_SELF)
        cpu0 = {"daemon": cpu_seconds(tree, reaped_children=True), "api": cpu_seconds(api_pids, reaped_children=True),
                "sim": cpu_seconds([sim.pid], reaped_children=True),
                "machine": machine_busy_seconds()}
        threads0 = thread_cpu(tree)
        cpu_daemon_warmup = cpu0["daemon"]  # the daemon's CPU since it started
        hist0 = scrape_histogram(HOST, daemon.port, LAG_FAMILY)
        poller = Poller(HOST, daemon.port, rate=args.poll_rate, timeout=15.0).start()
        window = args.intervals * interval
        ended_early = None
        while time.monotonic() < w0 + window:
            ended_early = dead()
            if ended_early:
                notes.append(f"window cut short: {ended_early}")
                break
            time.sleep(min(1.0, max(0.0, w0 + window - time.monotonic())))
        w1, wall1 = time.monotonic(), time.time()
        tree = process_tree(daemon.proc.pid) or tree
        cpu1 = {"daemon": cpu_seconds(tree, reaped_children=True), "api": cpu_seconds(api_pids, reaped_children=True),
                "sim": cpu_seconds([sim.pid], reaped_children=True),
                "machine": machine_busy_seconds()}
        threads1 = thread_cpu(tree)
        usage1 = resource.getrusage(resource.RUSAGE_SELF)
        sampler.sample()
        sampler.stop()
        hist1 = scrape_histogram(HOST, daemon.port, LAG_FAMILY)
        poller.stop()
        say("window over; stopping the daemon and the simulated kubelet")
        elapsed = w1 - w0

        # --- figures that need the daemon still running
        try:
            final = cluster.request("GET", khs(ns)).get("items") or []
            row["final_not_ok"] = sum(1 for s in final if not (s.get("spec") or {}).get("OK", False))
            row["final_khstates"] = len(final)
            row["khstate_bytes"] = object_sizes(final)
            if counts[KIND_HEALTHCHECK]:
                hcs = cluster.request("GET", scalemix.hcs_path(ns)).get("items") or []
                row["final_hc_not_ok"] = sum(1 for h in hcs if not healthcheck_version(h, 0.0).ok)
                row["final_healthchecks"] = len(hcs)
        except (urllib.error.URLError, OSError, ValueError) as e:
            notes.append(f"final state list failed: {e}")
        daemon.stop()
        row["daemon_exit"] = daemon.proc.returncode
        stats = sim.stop()
        for w in watches:
            w.stop()

        # --- analysis
        by_check = pods.by_check()
        runs = sum(1 for p in pods.pods.values() if w0 <= p.seen <= w1)
        row["window_s"] = round(elapsed, 1)
        row["runs"] = runs
        row["runs_expected"] = round(n * elapsed / interval)
        row["lag"] = schedule_lags(by_check, n, interval, w0, w1, mono_to_unix)
        row["histogram"] = histogram_delta(hist0, hist1)
        ff = {KIND_KHCHECK: false_failures(states.snapshot(), ns, w0, w1),
              KIND_HEALTHCHECK: false_failures(hc_states.snapshot(), ns, w0, w1)}
        row["false_failures"] = _merged_failures(ff)
        row["sim"] = sim_figures(stats, pods, w0, w1, args.delay)
        cores = {k: max(0.0, cpu1[k] - cpu0[k]) / elapsed for k in cpu0}
        cores["harness"] = ((usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)) / elapsed
        row["cpu"] = {**{k: round(v, 3) for k, v in cores.items()},
                      "daemon_seconds": round(max(0.0, cpu1["daemon"] - cpu0["daemon"]), 2),
                      "daemon_warmup": round(cpu_daemon_warmup / max(1e-9, w0 - t_daemon), 3),
                      "daemon_millicores_per_check": round(cores["daemon"] * 1000 / n, 3),
                      "daemon_ms_per_run": (round(max(0.0, cpu1["daemon"] - cpu0["daemon"]) * 1000 / runs, 2)
                                            if runs else None),
                      # the simulated kubelet's work per run is the same whatever the daemon: its CPU is a
                      # yardstick of the machine's speed in this window (bench.versus normalises by it)
                      "sim_seconds": round(max(0.0, cpu1["sim"] - cpu0["sim"]), 3),
                      # the daemon's threads by name (base/osnames.py): checks, watches, HTTP pool, main loop
                      "daemon_ms_per_run_by_thread": ({
                          group: round(seconds * 1000 / runs, 2) for group, seconds in sorted(
                              cpu_by_thread_group(threads0, threads1, cpu1["daemon"] - cpu0["daemon"]).items(),
                              key=lambda kv: -kv[1])} if runs else None),
                      # how often its threads were put on a CPU (woken, or preempted and resumed), per run
                      "daemon_slices_per_run_by_thread": ({
                          group: round(slices / runs, 1) for group, slices in sorted(
                              slices_by_thread_group(threads0, threads1).items(), key=lambda kv: -kv[1])
                          if slices} if runs else None)}
        row["mem"] = {"peak_pss_mb": round(sampler.peak_pss_kb / MB, 1),
                      "peak_rss_mb": round(sampler.peak_rss_kb / MB, 1),
                      "peak_threads": sampler.peak_threads, "peak_processes": sampler.peak_processes,
                      "samples": sampler.samples}
        time.sleep(1.0)  # the audit log is written asynchronously to the answers
        owned = audit_since(owner_counter(scalemix.HC_PREFIX), cluster.audit_log, audit0, wall0, wall1, DAEMON_AGENT)
        daemon_calls, owners = scalemix.api_by_owner(owned)
        sim_calls = audit_since(count_audit, cluster.audit_log, audit0, wall0, wall1, SIM_AGENT)
        total = sum(daemon_calls.values())
        row["api"] = {"requests": total, "per_s": round(total / elapsed, 2),
                      "per_run": round(total / runs, 2) if runs else None,
                      "by_kind_per_run": {k: round(v / max(1, runs), 2) for k, v in daemon_calls.most_common(12)},
                      "sim_per_run": round(sum(sim_calls.values()) / runs, 2) if runs else None}
        kind_runs = {k: sum(1 for p in pods.pods.values() if p.kind == k and w0 <= p.seen <= w1) for k in counts}
        lags = {k: schedule_lags(pods.by_check(k), counts[k], interval, w0, w1, mono_to_unix) for k in counts}
        row["by_kind"] = scalemix.kind_figures(counts, kind_runs, owners, ff, lags)
        polls = poller.polls
        answered = [p.seconds for p in polls if p.outcome == "ok"]
        row["status_page"] = {**summary(answered), "polls": len(polls),
                              "failed": sum(1 for p in polls if p.outcome != "ok"), "skipped": poller.skipped,
                              "outcomes": dict(Counter(p.outcome for p in polls))}
        row["metrics_scrapes"] = {"every_s": args.scrape_every, "answered": len(scraper.seconds),
                                  "failed": scraper.failed, **summary(scraper.seconds)}
        row["watch_restarts"] = {"pods": watches[0].restarts, "khstates": watches[1].restarts,
                                 **({"healthchecks": watches[2].restarts} if len(watches) > 2 else {})}
        row["daemon_log"] = {"path": str(daemon.log_path), **log_problems(daemon.log_path)}
        (outdir / "observed.json").write_text(json.dumps({
            "pods": [asdict(p) for p in pods.pods.values()],
            "khstates": {k: [asdict(v) for v in seq] for k, seq in states.snapshot().items()},
            "healthchecks": {k: [asdict(v) for v in seq] for k, seq in hc_states.snapshot().items()},
            "polls": [asdict(p) for p in polls], "window": [w0, w1], "wall": [wall0, wall1]}))
        return row
    finally:
        for thing in (poller, sampler, scraper):
            if thing is not None:
                try:
                    thing.stop()
                except Exception:  # clean-up must go on
                    logger.exception("stopping %s failed", type(thing).__name__)
        if daemon is not None:
            daemon.stop()
        if sim is not None and stats is None:
            sim.stop()
        for w in watches:
            w.stop()
        cluster.stop()
        shutil.rmtree(cluster.workdir / "etcd", ignore_errors=True)
        if not args.keep_audit:
            cluster.audit_log.unlink(missing_ok=True)
        (outdir / "row.json").write_text(json.dumps(row, indent=1, default=str))


def _measure_one(args: argparse.Namespace, outdir: Path) -> dict[str, Any]:
    """measure() at args.n (a mix when args.mix), its details printed; a row with "error" if it failed."""
    t = time.monotonic()
    try:
        row = measure(args, outdir)
    except Exception as e:  # one size failing must not lose the others
        logger.exception("size %d could not be measured", args.n)
        row = {"n": args.n, "error": f"{type(e).__name__}: {e}"}
    row["mix"] = bool(args.mix)
    print(f"  [{args.n}] measured in {time.monotonic() - t:.0f}s{' (mix)' if args.mix else ''}", flush=True)
    print_details(row)
    for line in scalemix.kind_lines(row):
        print(f"    {line}")
    return row


def _kind_block(row: dict[str, Any]) -> list[str]:
    """Below the table: a mixed row's figures per kind."""
    per_kind = scalemix.kind_lines(row)
    return [f"- {row['n']:,} checks, half HealthChecks, per kind:", *per_kind, ""] if per_kind else []


def _merged_failures(by_kind: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The false failures of both kinds as one figure (false_failures' shape)."""
    reasons: Counter[str] = Counter()
    for f in by_kind.values():
        reasons.update(dict(f["reasons"]))
    return {"results": sum(f["results"] for f in by_kind.values()),
            "in_window": sum(f["in_window"] for f in by_kind.values()),
            "checks": sum(f["checks"] for f in by_kind.values()), "reasons": reasons.most_common(5)}


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def harness_args(ap: argparse.ArgumentParser, results: str) -> None:
    """The options of one measure(), shared with bench.versus (`results`: the default results directory)."""
    ap.add_argument("--interval", type=float, default=60.0, help="runInterval of every check, seconds")
    ap.add_argument("--intervals", type=int, default=3, help="intervals measured after the warm-up")
    ap.add_argument("--delay", type=float, default=2.0, help="SIM_DELAY: seconds Running before reporting OK")
    ap.add_argument("--timeout", type=float, default=30.0, help="timeout of every check, seconds")
    ap.add_argument("--image", default="kh-sim/ok")
    ap.add_argument("--poll-rate", type=float, default=2.0, help="GET / per second during the window")
    ap.add_argument("--scrape-every", type=float, default=15.0,
                    help="GET /metrics every this many seconds from the daemon's start, as Prometheus would (0: never)")
    ap.add_argument("--log-level", default="info", help="the daemon's logLevel")
    ap.add_argument("--results", default="", help=f"where logs go (default {results})")
    ap.add_argument("--keep-audit", action="store_true", help="keep each test bed's audit log")
    ap.add_argument("--seed-rollups", action="store_true",
                    help="start every khcheck's khstate with 30 days of 1-minute runs in its uptime rollups (the "
                         "steady state of a long-lived check: full size, parsed once, then written every run)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--checks", default="250,1000,2000", help="comma-separated sizes (default 250,1000,2000)")
    harness_args(ap, "/tmp/kh-scale-<time>")
    kinds = ap.add_mutually_exclusive_group()
    kinds.add_argument("--mix", action="store_true", help="half of each size's checks are HealthChecks")
    kinds.add_argument("--versus-mix", action="store_true",
                       help="each size twice, khchecks alone then the mix; print the mix over khchecks alone")
    args = ap.parse_args(argv)
    # A tool, not the daemon: SIGTERM becomes SystemExit so every `finally` stops what this run started.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sizes = [int(s) for s in args.checks.split(",") if s.strip()]
    results = Path(args.results or f"/tmp/kh-scale-{time.strftime('%Y%m%d-%H%M%S')}")
    results.mkdir(parents=True, exist_ok=True)
    tree = product_state()
    what = ("khchecks alone, then half HealthChecks" if args.versus_mix
            else "half khchecks, half HealthChecks" if args.mix else "khchecks")
    print(f"make scale: sizes {sizes} ({what}), interval {args.interval:g}s, {args.intervals} measured intervals, "
          f"checker {args.image} SIM_DELAY={args.delay:g}; product {tree}; logs under {results}", flush=True)
    rows: list[dict[str, Any]] = []
    compared: list[str] = []
    for n in sizes:
        args.n = n
        sides = [(False, f"n{n}-alone"), (True, f"n{n}-mix")] if args.versus_mix else [(args.mix, f"n{n}")]
        pair: list[dict[str, Any]] = []
        for mix, sub in sides:
            args.mix = mix
            pair.append(_measure_one(args, results / sub))
        rows.extend(pair)
        if args.versus_mix:
            compared += [*scalemix.compare_lines(n, scalemix.compare(pair[0], pair[1]), pair[1]), ""]
    lines = [f"Scale, interval {args.interval:g}s, {args.intervals} intervals measured, checker {args.image} "
             f"SIM_DELAY={args.delay:g}, {os.cpu_count()} cores", "", HEADER, "|" + "---|" * 9,
             *[markdown_row(r) for r in rows], "",
             *[line for r in rows for line in _kind_block(r)], *compared,
             *[f"- {r['n']:,} checks: product {r.get('product', tree)}; machine busy "
               f"{r.get('cpu', {}).get('machine', '-')} cores, API server + etcd {r.get('cpu', {}).get('api', '-')}, "
               f"simulated kubelet {r.get('cpu', {}).get('sim', '-')}" for r in rows]]
    status = 0
    for row in rows:
        if row["n"] != TARGET_N or args.versus_mix:  # a comparison reports; it does not judge one side
            continue
        if "error" in row:
            status = 2
            continue
        lines += ["", f"Targets at {TARGET_N:,} checks:"]
        for name, met, value, goal in targets(row):
            lines.append(f"- {'PASS' if met else 'FAIL'} {name}: {value} (target {goal})")
            if not met:
                status = max(status, 1)
    if any("error" in r for r in rows):
        status = 2
    lines += ["", f"Logs and raw observations: {results}/n<N>[-alone|-mix]/ (daemon log, sim.log, sim-stats.json, "
              "observed.json, row.json, testbed/*.log)"]
    text = "\n".join(lines)
    (results / "scale.md").write_text(text + "\n")
    print("\n" + text, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
