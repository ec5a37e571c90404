"""`python -m bench.saturate`: saturate the test bed on purpose and see whether the daemon's work per run
stays flat while the backlog of Pending checker pods grows.

One test bed (kube-apiserver + etcd), the simulated kubelet in its own process with a start gate
(testbed/sim/startgate.py: at most R pods per second go from ContainerCreating to Running, first come
first served, a pod deleted while it waits leaves the queue), N khchecks (`kh-sim/ok`, SIM_DELAY, short
runInterval and timeout) and ONE daemon (a real process, as bench.scale starts it, default settings).
The due rate is N / interval pods per second; the steps set R to --factors x the due rate (default 2,
1, 0.5, 0.25), from least to most saturated, without restarting anything (the kubelet re-reads its rate
file). The first step is measured after --warmup (default 5 intervals: by then the reaper keeps its 4
Succeeded pods per check and deletes one per run, so the pod cache is full), each later one after
--settle seconds; each is measured for --window seconds (keep it whole intervals: the daemon spreads a
batch of checks created together over half an interval, so runs come due in that half of every interval;
--stagger creates the checks over one interval instead, for runs due evenly over all of it). --soak adds
one more step at the last factor.

  runs          from the daemon's log: runs started; runs ended OK ("Run done"), failed on a timeout
                (v2's "... within timeout" / "timed out ..." reasons), failed otherwise, skipped (by
                reason), stopped; failures by phase; how long past its deadline a failed run ended;
                every log line by kind (numbers and names taken out), per run.
  backlog       Pending (not Terminating) checker pods, from this harness's own pod watch every 2 s:
                mean and peak; pods by phase at the window's end; the kubelet's wait for a start turn
                (seen -> Running, p50/p99, from its stats file).
  API per run   audit-log requests with a `kuberhealthy/` user agent (watches excluded) by verb and
                resource, per run started; pod creates, eviction requests (and those accepted) and
                deletes per run apart, and every answer outside 2xx (a 409 create is a retried create;
                a 500 "context canceled" is a request the daemon gave up waiting for).
  CPU per run   utime+stime of the daemon's process tree (children reaped included) over the window,
                per run started.
  memory        peak and end-of-window PSS of the daemon's tree (every 2 s) with its slope (MB/min), PSS
                by kind of mapping (heap, anonymous, thread stacks, files), threads, its connections to
                the API server, and what the caches hold as the API server serialises it (khstates, pods).
  watch events  pod and khstate events this harness's watches saw (the daemon's watches see the same
                objects), per run started.
  `/`           GET / at --poll-rate (0: off) during the window: p50/p99 seconds.
At the end: the ratio of the most saturated step to the least for CPU/run, API/run, peak PSS and watch
events/run ("flat": within +-15 %), the answers outside 2xx per run (retried or repeated work), and API
requests and CPU per run by outcome: what an OK run and a failed run cost (fitted over the steps; a failed
run reads and evicts its pod) and how far each step is from that (with 3 steps or more: the cost of a run
must not grow with the backlog). Logs, the rows (rows.json), the last khstates (khstates.json),
saturate.md and, with --keep-audit, the audit log stay under --results.

Usage: python -m bench.saturate [--checks 200] [--interval 30] [--timeout 20] [--delay 2]
                                [--factors 2,1,0.5,0.25] [--warmup 150] [--settle 30] [--window 60]
                                [--soak 0] [--stagger] [--history-length N] [--daemon-env NAME=VALUE]
                                [--keep-audit]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import re
import shutil
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.scale import SimProcess, create_checks, http_ok, product_state, scale_check, wait_until
from bench.scaleprobe import (
    ApiWatch,
    Poller,
    TreeSampler,
    audit_answers,
    audit_mark,
    audit_since,
    count_audit,
    histogram_delta,
    process_tree,
    scrape_histogram,
)
from testbed.cluster.apiserver import ADMIN_TOKEN, TestCluster, start_cluster
from testbed.cluster.builders import khc, khs, pods_path
from testbed.cluster.crds import install_crds
from testbed.cluster.objects import create_namespace
from testbed.daemons.process import DaemonProcess
from testbed.stats import cpu_seconds, summary

HOST = "127.0.0.1"
DAEMON_AGENT = "kuberhealthy/"
SIM_AGENT = "kh-sim-kubelet"
LAG_FAMILY = "kuberhealthy_schedule_lag_seconds"
MB = 1024  # kB per MB
FLAT = 0.15  # "flat": the most saturated step within +-15 % of the least
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) (\w+) ([\w.]+): (.*)$")
RUN_END = re.compile(r"^Run (done|failed|skipped|stopped)(?: in phase (\w+))?(?: \(([\w-]+)\))?:?\s*(.*)$")
TIMEOUT_WORDS = ("within timeout", "timed out")
RUN_ID = re.compile(r"run=([0-9a-f-]{36})\]$")

logger = logging.getLogger("bench.saturate")


# --- the pieces --------------------------------------------------------------------------------------

class SlowSim(SimProcess):
    """bench.scale's kubelet process, with a start gate whose rate the harness sets through a file."""

    def __init__(self, cluster: TestCluster, ns: str, nodes: int, outdir: Path, rate: float) -> None:
        super().__init__(cluster, ns, nodes, outdir)
        self.rate_file = outdir / "sim-start-rate"
        self.set_rate(rate)
        self.argv += ["--start-rate-file", str(self.rate_file)]

    def set_rate(self, rate: float) -> None:
        tmp = self.rate_file.with_name(self.rate_file.name + ".tmp")
        tmp.write_text(f"{rate:.6g}\n")
        tmp.replace(self.rate_file)


class PodTracker:
    """The harness's pod watch: events by kind, and which checker pods are Pending now (the backlog)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: Counter[str] = Counter()
        self._phase: dict[str, str] = {}  # uid -> phase, or "Terminating"

    def on_event(self, kind: str, pod: dict[str, Any], now: float) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        phase = str((pod.get("status") or {}).get("phase") or "Pending")
        with self._lock:
            self.events[kind] += 1
            if kind == "DELETED":
                self._phase.pop(uid, None)
            else:
                self._phase[uid] = "Terminating" if meta.get("deletionTimestamp") else phase

    def backlog(self) -> int:
        """Checker pods Pending and not Terminating now."""
        with self._lock:
            return sum(1 for p in self._phase.values() if p == "Pending")

    def census(self) -> dict[str, int]:
        """Pods by phase (Terminating apart) now."""
        with self._lock:
            return dict(Counter(self._phase.values()))


class EventCount:
    """Events by kind of a watch whose objects the harness does not keep."""

    def __init__(self) -> None:
        self.events: Counter[str] = Counter()

    def on_event(self, kind: str, obj: dict[str, Any], now: float) -> None:
        self.events[kind] += 1


def tree_pss_kb(root: int) -> int:
    """The summed PSS of a process tree now (kB)."""
    total = 0
    for pid in process_tree(root):
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
                    break
        except (OSError, ValueError, IndexError):
            continue
    return total


class BacklogSampler(threading.Thread):
    """Every `every` seconds until stop(): the backlog (PodTracker.backlog()) and the daemon tree's PSS."""

    def __init__(self, pods: PodTracker, root: int, every: float = 2.0) -> None:
        super().__init__(name="backlog-sampler", daemon=True)
        self.pods, self.root, self.every = pods, root, every
        self.samples: list[int] = []
        self.pss: list[tuple[float, int]] = []  # (monotonic, kB)
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.every):
            self.samples.append(self.pods.backlog())
            self.pss.append((time.monotonic(), tree_pss_kb(self.root)))

    def pss_slope(self) -> float | None:
        """MB per minute, least squares over the samples (None with fewer than 3)."""
        if len(self.pss) < 3:
            return None
        n = len(self.pss)
        mt, mv = sum(t for t, _ in self.pss) / n, sum(v for _, v in self.pss) / n
        var = sum((t - mt) ** 2 for t, _ in self.pss)
        return 60 * sum((t - mt) * (v - mv) for t, v in self.pss) / var / MB if var else None

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)


def log_time(stamp: str, millis: str) -> float:
    """A logging timestamp (local time, as logging writes it) as unix seconds."""
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000


def template(message: str) -> str:
    """A log message with its run context, names and numbers taken out: lines that say the same thing."""
    message = re.sub(r" \[[^\]]*run=[^\]]*\]$", "", message)
    return re.sub(r"[\w./-]*\d[\w./-]*", "N", message)[:110]


def read_runs(log: Path, t0: float, t1: float, timeout: float) -> dict[str, Any]:
    """Runs started and ended in [t0, t1] (unix s) from the daemon's log: outcomes, failures by phase, skips
    by reason, how long past its deadline each failed run ended, and every line's template (per level)."""
    started, ended, failed_by, skipped_by = 0, Counter[str](), Counter[str](), Counter[str]()
    lines: Counter[str] = Counter()
    begun: dict[str, float] = {}  # run uuid -> when its "Run started" was logged
    late: list[float] = []  # failed runs: seconds between the deadline and the "Run failed" line
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LOG_LINE.match(line.rstrip("\n"))
            if not m:
                continue
            at, level, message = log_time(m[1], m[2]), m[3], m[5]
            run = RUN_ID.search(message)
            if message.startswith("Run started") and run:
                begun[run[1]] = at
            if not t0 <= at <= t1:
                continue
            lines[f"{level} {template(message)}"] += 1
            if message.startswith("Run started"):
                started += 1
                continue
            end = RUN_END.match(re.sub(r" \[[^\]]*run=[^\]]*\]$", "", message))
            if end is None:
                continue
            how, phase, reason, rest = end[1], end[2] or "?", end[3] or "", end[4]
            if how == "failed":
                how = "timed_out" if any(w in rest for w in TIMEOUT_WORDS) else "failed_other"
                failed_by[f"{phase}: {template(rest)[:60]}"] += 1
                if run and run[1] in begun:
                    late.append(at - begun[run[1]] - timeout)
            elif how == "skipped":
                skipped_by[f"{phase} {reason}"] += 1
            ended["ok" if how == "done" else how] += 1
    return {"started": started, "ended": dict(ended), "failed_by": dict(failed_by), "skipped_by": dict(skipped_by),
            "failed_past_deadline_s": summary(late), "lines": dict(lines.most_common(15))}


def smaps_mb(root: int) -> dict[str, float]:
    """The daemon tree's PSS by kind of mapping (MB): the main heap, 8 MB anonymous mappings (thread stacks),
    other anonymous ones (malloc arenas, Python's arenas, big buffers) and file-backed ones."""
    kb: Counter[str] = Counter()
    for pid in process_tree(root):
        try:
            text = Path(f"/proc/{pid}/smaps").read_text()
        except OSError:
            continue
        kind, size = "file", 0
        for line in text.splitlines():
            head = line.split()
            if len(head) >= 5 and "-" in head[0] and ":" in head[3]:  # a mapping's first line
                name = head[5] if len(head) > 5 else ""
                kind = "heap" if name == "[heap]" else ("anon" if not name or name.startswith("[anon") else
                                                        "stack" if name == "[stack]" else "file")
            elif head and head[0] == "Size:":
                size = int(head[1])
                if kind == "anon" and size in (8192, 8196):
                    kind = "thread_stacks"
            elif head and head[0] == "Pss:":
                kb[kind] += int(head[1])
    return {k: round(v / MB, 1) for k, v in sorted(kb.items())}


def api_connections(root: int, port: int) -> int:
    """TCP connections of the daemon's tree established to the API server's port now (each one a TLS
    session with its buffers: the client keeps up to its pool's size)."""
    inodes: set[str] = set()
    for pid in process_tree(root):
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "01" and int(f[2].rsplit(":", 1)[1], 16) == port and f[9] in inodes:
                count += 1
    return count


def per(n: float, runs: int, digits: int = 2) -> float | None:
    return round(n / runs, digits) if runs else None


# --- the steps ---------------------------------------------------------------------------------------

class Bench:
    """One test bed, one kubelet, one daemon; measure() runs every step and returns the rows."""

    def __init__(self, args: argparse.Namespace, outdir: Path) -> None:
        self.args, self.outdir = args, outdir
        self.due_rate = args.checks / args.interval
        self.pods, self.states = PodTracker(), EventCount()
        self.rows: list[dict[str, Any]] = []
        self.ns = ""

    def say(self, msg: str) -> None:
        print(f"  {msg}", flush=True)

    def measure(self) -> list[dict[str, Any]]:
        a = self.args
        cluster = start_cluster(workdir=self.outdir / "testbed")
        sim: SlowSim | None = None
        daemon: DaemonProcess | None = None
        watches: list[ApiWatch] = []
        try:
            install_crds(cluster)
            ns = self.ns = create_namespace(cluster, "saturate")
            factors = [float(f) for f in a.factors.split(",") if f.strip()]
            slow = sim = SlowSim(cluster, ns, max(3, a.checks // 100), self.outdir, factors[0] * self.due_rate)
            slow.start()
            watches = [ApiWatch(cluster.server, ADMIN_TOKEN, pods_path(ns), self.pods.on_event, "watch-pods").start(),
                       ApiWatch(cluster.server, ADMIN_TOKEN, khs(ns), self.states.on_event, "watch-khstates").start()]
            if not all(w.synced.wait(30) for w in watches):
                raise RuntimeError("harness watches did not sync within 30s")
            a.n = a.checks  # what bench.scale's create_checks reads
            if not a.stagger:
                create_checks(cluster, ns, a)
            settings: dict[str, Any] = {"enableForceMaster": True, "targetNamespace": ns, "logLevel": a.log_level}
            if a.history_length is not None:
                settings["historyLength"] = a.history_length
            daemon = DaemonProcess(cluster, self.outdir, "kuberhealthy-saturate-0", ns, settings)
            daemon.env.update(dict(e.split("=", 1) for e in a.daemon_env))
            daemon.start()
            assert daemon.proc is not None
            d = daemon

            def dead() -> str | None:
                if d.proc is not None and d.proc.poll() is not None:
                    return f"daemon exited with {d.proc.returncode} (log: {d.log_path})"
                return slow.dead()
            if not wait_until(lambda: http_ok(d.port, "/healthz"), 120, dead):
                raise RuntimeError(f"daemon not answering /healthz after 120s (log: {daemon.log_path})")
            if a.stagger:  # one check every interval/N seconds: their runs come due evenly, not in a batch
                t0 = time.monotonic()
                for i in range(a.checks):
                    time.sleep(max(0.0, t0 + i * a.interval / a.checks - time.monotonic()))
                    cluster.request("POST", khc(ns), scale_check(i, a))
            self.say(f"{a.checks} checks every {a.interval:g}s (due rate {self.due_rate:.2f} pods/s), timeout "
                     f"{a.timeout:g}s, SIM_DELAY {a.delay:g}s; daemon pid {daemon.proc.pid}, kubelet pid {slow.pid}")
            plan = [(f, a.settle if i else a.warmup, a.window) for i, f in enumerate(factors)]
            plan += [(factors[-1], 0.0, a.soak)] if a.soak > 0 else []
            for i, (factor, settle, window) in enumerate(plan):
                slow.set_rate(factor * self.due_rate)
                self.say(f"step {i + 1}/{len(plan)}: start rate {factor:g} x due = {factor * self.due_rate:.2f} "
                         f"pods/s; settling {settle:g}s, measuring {window:g}s")
                wait_until(lambda: False, settle, dead, every=1.0)
                self.rows.append(self.step(cluster, daemon, factor, window, dead))
            self.rows[-1]["khstates"] = cluster.request("GET", khs(ns)).get("items") or []
            daemon.stop()
            self.add_kubelet_figures(slow.stop())
            sim = None
            return self.rows
        finally:
            for w in watches:
                w.stop()
            if daemon is not None:
                daemon.stop()  # idempotent
            if sim is not None:
                sim.stop()
            cluster.stop()
            shutil.rmtree(cluster.workdir / "etcd", ignore_errors=True)
            if not a.keep_audit:
                cluster.audit_log.unlink(missing_ok=True)
            if self.rows and "khstates" in self.rows[-1]:  # the last step's khstates, apart (they are big)
                (self.outdir / "khstates.json").write_text(json.dumps(self.rows[-1].pop("khstates")))
            (self.outdir / "rows.json").write_text(json.dumps(self.rows, indent=1, default=str))

    def step(self, cluster: TestCluster, daemon: DaemonProcess, factor: float, window: float,
             dead: Callable[[], str | None]) -> dict[str, Any]:
        a = self.args
        assert daemon.proc is not None
        tree = process_tree(daemon.proc.pid)
        sampler = TreeSampler(daemon.proc.pid).start()
        backlog = BacklogSampler(self.pods, daemon.proc.pid)
        backlog.start()
        poller = Poller(HOST, daemon.port, rate=a.poll_rate, timeout=15.0).start() if a.poll_rate > 0 else None
        hist0 = scrape_histogram(HOST, daemon.port, LAG_FAMILY)
        pod_events0, state_events0 = Counter(self.pods.events), Counter(self.states.events)
        audit0, w0, wall0 = audit_mark(cluster.audit_log), time.monotonic(), time.time()
        cpu0 = cpu_seconds(tree, reaped_children=True)
        wait_until(lambda: False, window, dead, every=1.0)  # raises when the daemon or the kubelet died
        cpu1 = cpu_seconds(process_tree(daemon.proc.pid) or tree, reaped_children=True)
        w1, wall1 = time.monotonic(), time.time()
        sampler.sample()
        sampler.stop()
        backlog.stop()
        hist1 = scrape_histogram(HOST, daemon.port, LAG_FAMILY)
        if poller is not None:
            poller.stop()
        pod_events = Counter(self.pods.events)
        pod_events.subtract(pod_events0)
        state_events = Counter(self.states.events)
        state_events.subtract(state_events0)
        time.sleep(1.0)  # the audit log is written asynchronously to the answers
        runs = read_runs(daemon.log_path, wall0, wall1, a.timeout)
        started = runs["started"]
        calls = audit_since(count_audit, cluster.audit_log, audit0, wall0, wall1, DAEMON_AGENT)
        sim_calls = audit_since(count_audit, cluster.audit_log, audit0, wall0, wall1, SIM_AGENT)
        answers = audit_since(audit_answers, cluster.audit_log, audit0, wall0, wall1, DAEMON_AGENT)
        polls = [p.seconds for p in poller.polls if p.outcome == "ok"] if poller else []
        hist = histogram_delta(hist0, hist1)
        row = {"factor": factor, "start_rate": round(factor * self.due_rate, 3), "window": [w0, w1],
               "wall": [wall0, wall1], "seconds": round(w1 - w0, 1), "runs": runs,
               "pods_at_end": self.pods.census(),
               "backlog": {"mean": round(sum(backlog.samples) / max(1, len(backlog.samples)), 1),
                           "peak": max(backlog.samples, default=0)},
               "api": {"requests": sum(calls.values()), "per_run": per(sum(calls.values()), started),
                       "by_kind_per_run": {k: per(v, started) for k, v in calls.most_common()},
                       "not_2xx": dict(answers.most_common()),
                       "troubled_per_run": per(sum(v for k, v in answers.items() if not k.endswith(" 404")), started),
                       "creates_per_run": per(calls["create pods"], started),
                       "evictions_per_run": per(calls["create pods/eviction"], started),
                       "evictions_accepted_per_run": per(calls["create pods/eviction"] - sum(
                           v for k, v in answers.items() if k.startswith("create pods/eviction ")), started),
                       "deletes_per_run": per(calls["delete pods"], started),
                       "kubelet_per_run": per(sum(sim_calls.values()), started),
                       "kubelet_deletes_per_run": per(sim_calls["delete pods"], started)},
               "cpu": {"seconds": round(cpu1 - cpu0, 2), "ms_per_run": per((cpu1 - cpu0) * 1000, started, 1),
                       "cores": round((cpu1 - cpu0) / (w1 - w0), 3)},
               "mem": {"peak_pss_mb": round(sampler.peak_pss_kb / MB, 1), "peak_threads": sampler.peak_threads,
                       "end_pss_mb": None, "pss_mb_per_min": round(backlog.pss_slope() or 0.0, 2)},
               "watch_events": {"pods": dict(+pod_events), "khstates": dict(+state_events),
                                "per_run": per(sum((+pod_events).values()) + sum((+state_events).values()),
                                               started, 1)},
               "status_page": {**summary(polls), "polls": len(poller.polls) if poller else 0},
               "schedule_lag": {"count": hist.get("count"), "mean": hist.get("mean"), "p99_le": hist.get("p99_le")}}
        end = TreeSampler(daemon.proc.pid)
        end.sample()
        row["mem"]["end_pss_mb"] = round(end.peak_pss_kb / MB, 1)
        row["mem"]["end_pss_by_kind_mb"] = smaps_mb(daemon.proc.pid)
        row["mem"]["api_connections"] = api_connections(daemon.proc.pid, cluster.api_port)
        row["objects"] = self.object_sizes(cluster)
        self.print_step(row)
        return row

    def object_sizes(self, cluster: TestCluster) -> dict[str, Any]:
        """What the daemon's caches hold, as the API server serialises it: khstates and checker pods."""
        out: dict[str, Any] = {}
        for name, path in (("khstates", khs(self.ns)), ("pods", pods_path(self.ns))):
            try:
                items = cluster.request("GET", path).get("items") or []
            except (OSError, ValueError) as e:
                out[name] = f"list failed: {e}"
                continue
            size = sum(len(json.dumps(i)) for i in items)
            out[name] = {"count": len(items), "kb": round(size / 1024), "mean_bytes": size // max(1, len(items))}
        return out

    def add_kubelet_figures(self, stats: dict[str, Any] | None) -> None:
        """Per step, from the kubelet's final stats: how long pods seen in the window waited for their turn."""
        if not stats:
            return
        for row in self.rows:
            w0, w1 = row["window"]
            seen = [p for p in stats.get("pods") or [] if p.get("seen") is not None and w0 <= p["seen"] <= w1]
            waits = [p["running"] - p["seen"] for p in seen if p.get("running") is not None]
            row["kubelet"] = {"pods_seen": len(seen), "ran": len(waits),
                              "never_ran": len(seen) - len(waits), "start_wait_s": summary(waits)}
        for row in self.rows:
            row["start_gate_final"] = stats.get("start_gate")

    def print_step(self, r: dict[str, Any]) -> None:
        runs, api = r["runs"], r["api"]
        self.say(f"  {r['factor']:g}x: runs started {runs['started']}, ended {runs['ended']}; backlog mean "
                 f"{r['backlog']['mean']} peak {r['backlog']['peak']}; API/run {api['per_run']} (creates "
                 f"{api['creates_per_run']}, evictions {api['evictions_per_run']}, deletes {api['deletes_per_run']}); "
                 f"CPU {r['cpu']['ms_per_run']} ms/run ({r['cpu']['cores']} cores); PSS peak {r['mem']['peak_pss_mb']}"
                 f" MB; watch events/run {r['watch_events']['per_run']}")


# --- the report ---------------------------------------------------------------------------------------

def fmt(v: Any) -> str:
    return "-" if v is None else (f"{v:g}" if isinstance(v, float) else str(v))


def ratio_line(name: str, rows: list[dict[str, Any]], get: Callable[[dict[str, Any]], Any]) -> str:
    first, last = get(rows[0]), get(rows[-1])
    if not first or last is None:
        return f"- {name}: - (no figure)"
    ratio = last / first
    verdict = "flat" if abs(ratio - 1) <= FLAT else ("GROWS" if ratio > 1 else "falls")
    return f"- {name}: {fmt(first)} -> {fmt(last)}, ratio {ratio:.2f} ({verdict}, flat = within +-{FLAT:.0%})"


def by_outcome(name: str, rows: list[dict[str, Any]], get: Callable[[dict[str, Any]], Any]) -> str:
    """A per-run figure as an OK run's cost and a failed run's (least squares over the steps' mixes of OK and
    not OK runs), and each step's departure from that: a failed run may cost more than an OK one (its pod
    is read and evicted), but neither cost may grow with the backlog. Needs 3 steps or more."""
    points = []
    for r in rows:
        ended, value = sum(r["runs"]["ended"].values()), get(r)
        if ended and value is not None:
            points.append((r["runs"]["ended"].get("ok", 0) / ended, float(value), r["factor"]))
    if len(points) < 3:
        return f"- {name} by outcome: - (needs 3 steps with runs)"
    # value = ok_cost * f + failed_cost * (1 - f): two unknowns, the normal equations
    s_ff = sum(f * f for f, _, _ in points)
    s_gg = sum((1 - f) ** 2 for f, _, _ in points)
    s_fg = sum(f * (1 - f) for f, _, _ in points)
    s_fv = sum(f * v for f, v, _ in points)
    s_gv = sum((1 - f) * v for f, v, _ in points)
    det = s_ff * s_gg - s_fg * s_fg
    if abs(det) < 1e-9:
        return f"- {name} by outcome: - (the steps' outcome mixes are too alike to tell the costs apart)"
    ok_cost, failed_cost = (s_fv * s_gg - s_gv * s_fg) / det, (s_gv * s_ff - s_fv * s_fg) / det
    off = [(factor, v / (ok_cost * f + failed_cost * (1 - f)) - 1) for f, v, factor in points]
    steps = ", ".join(f"{factor:g}x {d:+.0%}" for factor, d in off)
    verdict = "flat" if max(abs(d) for _, d in off) <= FLAT else "NOT flat"
    return (f"- {name} by outcome: an OK run {ok_cost:.2f}, a failed one {failed_cost:.2f}; each step against that: "
            f"{steps} ({verdict}; flat = every step within +-{FLAT:.0%})")


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    head = ("| start rate (x due) | backlog mean / peak | runs started | OK / timed out / other fail / skipped | "
            "creates / evictions (accepted) / deletes per run | API per run | CPU ms per run | "
            "PSS peak / end MB (MB/min) | threads | watch events per run | start wait p50 / p99 s | `/` p50 / p99 s |")
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        e, api, k = r["runs"]["ended"], r["api"], r.get("kubelet") or {}
        wait, sp = k.get("start_wait_s") or {}, r["status_page"]
        lines.append(
            f"| {r['start_rate']:.2f}/s ({r['factor']:g}x) | {r['backlog']['mean']} / {r['backlog']['peak']} | "
            f"{r['runs']['started']} | {e.get('ok', 0)} / {e.get('timed_out', 0)} / {e.get('failed_other', 0)} / "
            f"{e.get('skipped', 0)} | {fmt(api['creates_per_run'])} / {fmt(api['evictions_per_run'])} "
            f"({fmt(api['evictions_accepted_per_run'])}) / "
            f"{fmt(api['deletes_per_run'])} | {fmt(api['per_run'])} | {fmt(r['cpu']['ms_per_run'])} | "
            f"{r['mem']['peak_pss_mb']} / {r['mem']['end_pss_mb']} ({r['mem']['pss_mb_per_min']:+}) | "
            f"{r['mem']['peak_threads']} | "
            f"{fmt(r['watch_events']['per_run'])} | {fmt(wait.get('p50') and round(wait['p50'], 2))} / "
            f"{fmt(wait.get('p99') and round(wait['p99'], 2))} | {fmt(sp.get('p50') and round(sp['p50'], 3))} / "
            f"{fmt(sp.get('p99') and round(sp['p99'], 3))} |")
    kinds = sorted({k for r in rows for k in r["api"]["by_kind_per_run"]},
                   key=lambda k: -max(r["api"]["by_kind_per_run"].get(k) or 0 for r in rows))
    lines += ["", "API requests per run started, by verb and resource:", "",
              "| request | " + " | ".join(f"{r['factor']:g}x" for r in rows) + " |", "|" + "---|" * (len(rows) + 1)]
    lines += [f"| {k} | " + " | ".join(fmt(r["api"]["by_kind_per_run"].get(k)) for r in rows) + " |" for k in kinds]
    lines += ["", "Answers outside 2xx, failures by phase, skips by reason, the daemon's log lines by kind (per step):"]
    for r in rows:
        lines.append(f"- {r['factor']:g}x: not 2xx {r['api']['not_2xx']}; failed {r['runs']['failed_by']}; "
                     f"skipped {r['runs']['skipped_by']}; kubelet {r.get('kubelet', {})}")
        lines.append(f"    - failed runs ended past their deadline by (s): {r['runs']['failed_past_deadline_s']}; "
                     f"pods at the window's end: {r['pods_at_end']}; objects (serialised): {r['objects']}; "
                     f"PSS by kind (MB): {r['mem'].get('end_pss_by_kind_mb')}; connections to the API server: "
                     f"{r['mem'].get('api_connections')}")
        lines += [f"    - {per(n, r['runs']['started'])}/run ({n}) {w}" for w, n in r["runs"]["lines"].items()]
    if len(rows) >= 2:
        lines += ["", f"Most saturated ({rows[-1]['factor']:g}x) against least ({rows[0]['factor']:g}x):",
                  ratio_line("daemon CPU ms per run started", rows, lambda r: r["cpu"]["ms_per_run"]),
                  ratio_line("API requests per run started", rows, lambda r: r["api"]["per_run"]),
                  "- answers outside 2xx, 404s apart (conflicts, timeouts, 5xx: retried or repeated work) per run "
                  f"started: {fmt(rows[0]['api'].get('troubled_per_run'))} -> "
                  f"{fmt(rows[-1]['api'].get('troubled_per_run'))}",
                  ratio_line("peak PSS MB", rows, lambda r: r["mem"]["peak_pss_mb"]),
                  ratio_line("watch events per run started", rows, lambda r: r["watch_events"]["per_run"]),
                  by_outcome("API requests per run", rows, lambda r: r["api"]["per_run"]),
                  by_outcome("daemon CPU ms per run", rows, lambda r: r["cpu"]["ms_per_run"])]
        history = 24 if args.history_length is None else args.history_length
        if args.warmup < history * args.interval:
            lines.append(f"- note: the khstates' history ({history} runs) was still filling at the first step "
                         f"(warm-up {args.warmup:g}s < {history} intervals): part of any PSS growth is that, "
                         "saturated or not (--history-length 4 fills it during the warm-up)")
    return "\n".join(lines)


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--checks", type=int, default=200, help="khchecks (default 200)")
    ap.add_argument("--interval", type=float, default=30.0, help="runInterval of every check, seconds")
    ap.add_argument("--timeout", type=float, default=20.0, help="timeout of every check, seconds")
    ap.add_argument("--delay", type=float, default=2.0, help="SIM_DELAY: seconds Running before reporting OK")
    ap.add_argument("--image", default="kh-sim/ok")
    ap.add_argument("--factors", default="2,1,0.5,0.25",
                    help="start rates as multiples of the due rate, least saturated first (default 2,1,0.5,0.25)")
    ap.add_argument("--settle", type=float, default=30.0, help="seconds after each rate change before measuring")
    ap.add_argument("--window", type=float, default=60.0, help="seconds measured per step (whole intervals)")
    ap.add_argument("--warmup", type=float, default=0.0,
                    help="seconds before the first step is measured (default: 5 intervals, until the reaper keeps "
                         "its 4 Succeeded pods per check and deletes one per run)")
    ap.add_argument("--soak", type=float, default=0.0,
                    help="seconds of one more step at the last factor, measured at once (memory bounded?)")
    ap.add_argument("--poll-rate", type=float, default=0.5, help="GET / per second during the windows (0: off)")
    ap.add_argument("--stagger", action="store_true",
                    help="create the checks one by one over an interval (runs due evenly) instead of at once "
                         "(the daemon then spreads them over half an interval, every interval)")
    ap.add_argument("--history-length", type=int, default=None,
                    help="the daemon's historyLength (default: its own, 24 runs: the khstates keep growing until "
                         "24 intervals have passed, which PSS shows apart from any saturation; 4 fills in the warm-up)")
    ap.add_argument("--daemon-env", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for the daemon (repeatable), e.g. MALLOC_ARENA_MAX=2")
    ap.add_argument("--log-level", default="info", help="the daemon's logLevel")
    ap.add_argument("--results", default="", help="where logs go (default /tmp/kh-saturate-<time>)")
    ap.add_argument("--keep-audit", action="store_true", help="keep the test bed's audit log")
    args = ap.parse_args(argv)
    args.warmup = args.warmup or 5 * args.interval
    signal.signal(signal.SIGTERM, _exit_on_signal)  # so every `finally` stops what this run started
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    results = Path(args.results or f"/tmp/kh-saturate-{dt.datetime.now():%Y%m%d-%H%M%S}")
    results.mkdir(parents=True, exist_ok=True)
    print(f"saturate: product {product_state()}; logs under {results}", flush=True)
    t = time.monotonic()
    rows = Bench(args, results).measure()
    text = (f"Saturation, {args.checks} checks every {args.interval:g}s, timeout {args.timeout:g}s, {args.image} "
            f"SIM_DELAY={args.delay:g}, {args.window:g}s per step after {args.settle:g}s settling "
            f"({time.monotonic() - t:.0f}s in all)\n\n" + report(rows, args))
    (results / "saturate.md").write_text(text + "\n")
    print("\n" + text, flush=True)
    return 0 if rows else 2


if __name__ == "__main__":
    sys.exit(main())
