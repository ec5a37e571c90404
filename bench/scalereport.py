"""What `bench.scale` makes of its observations: the figures of one row, the Markdown table, the targets.

Pure functions over what the instruments recorded (bench/scaleprobe.py) and the simulated kubelet's
stats file; no I/O except reading a daemon log. See bench/scale.py for what each figure means.
"""
from __future__ import annotations

import itertools
import os
from collections import Counter
from pathlib import Path
from typing import Any

from bench.scaleprobe import PodLog, StateVersion
from testbed.stats import summary

TARGET_N = 1000

# --- analysis ------------------------------------------------------------------------------------------

def schedule_lags(by_check: dict[str, list[Any]], n: int, interval: float, w0: float, w1: float,
                  mono_to_unix: float) -> dict[str, Any]:
    """Lags of run starts in [w0, w1] (harness watch clock, and creationTimestamp clock)."""
    seen_lags: list[float] = []
    created_lags: list[float] = []
    overdue = 0
    for pods in by_check.values():
        starts = [p for p in pods if p.seen <= w1]
        for prev, cur in itertools.pairwise(starts):
            if cur.seen >= w0:
                seen_lags.append(cur.seen - (prev.seen + interval))
                if cur.created is not None and prev.created is not None:
                    created_lags.append(cur.created - (prev.created + interval))
        if starts and starts[-1].seen + interval < w1:  # the next run is due and has not started
            overdue += 1
            seen_lags.append(w1 - (starts[-1].seen + interval))
            created_lags.append(w1 + mono_to_unix - ((starts[-1].created or starts[-1].seen + mono_to_unix)
                                                     + interval))
    never = n - sum(1 for pods in by_check.values() if any(p.seen <= w1 for p in pods))
    return {**summary(seen_lags), "lags": len(seen_lags), "overdue_at_end": overdue, "never_ran": never,
            "created": summary(created_lags)}


def false_failures(versions: dict[str, list[StateVersion]], ns: str, w0: float, w1: float) -> dict[str, Any]:
    """New failed results (OK false with a new LastRun or new errors) up to w1, and in [w0, w1]."""
    failed: list[tuple[str, float, tuple[str, ...]]] = []
    for name, seq in versions.items():
        prev: StateVersion | None = None
        for v in seq:
            if v.seen > w1:
                break
            if not v.ok and (prev is None or prev.ok or prev.last_run != v.last_run or prev.errors != v.errors):
                failed.append((name, v.seen, v.errors))
            prev = v
    reasons: Counter[str] = Counter()
    for name, _, errors in failed:
        for e in errors or ("(no error text)",):
            reasons[e.replace(f"{ns}/{name}", "<check>")[:160]] += 1
    return {"results": len(failed), "in_window": sum(1 for _, t, _ in failed if t >= w0),
            "checks": len({name for name, _, _ in failed}), "reasons": reasons.most_common(5)}


def sim_figures(stats: dict[str, Any] | None, pods: PodLog, w0: float, w1: float,
                delay: float) -> dict[str, Any]:
    """The kubelet's own lags for pods it first saw in the window; refused reports (window and all)."""
    if stats is None:
        return {"state": "no stats file"}
    rows = list(stats.get("pods") or [])
    inside = [r for r in rows if r.get("seen") is not None and w0 <= r["seen"] <= w1]
    def gaps(rs: list[dict[str, Any]], a: str, b: str, minus: float = 0.0) -> dict[str, float | None]:
        return summary([r[b] - r[a] - minus for r in rs if r.get(a) is not None and r.get(b) is not None])
    harness_seen = {p.uid: p.seen for p in pods.pods.values()}
    watch_delay = [r["seen"] - harness_seen[r["uid"]] for r in inside if r.get("uid") in harness_seen]

    def refused(rs: list[dict[str, Any]]) -> Counter[str]:
        """Final answers other than 2xx. A report the simulator cut itself because its pod ended first
        (outcome "cancelled": the daemon stopped its run, or the bench stopped the daemon) is not one:
        its last error is the simulator's own shutdown of the socket."""
        c: Counter[str] = Counter()
        for r in rs:
            rep = r.get("report")
            if rep is None or rep.get("outcome") == "cancelled":
                continue
            if not (rep.get("status") is not None and 200 <= rep["status"] <= 299):
                c[str(rep.get("status") or f"no answer: {rep.get('error')}")[:80]] += 1
        return c
    cut = sum(1 for r in rows if (r.get("report") or {}).get("outcome") == "cancelled")
    retried_5xx = sum(1 for r in rows for s in (r.get("report") or {}).get("statuses") or [] if 500 <= s <= 599)

    def of_class(c: Counter[str], first: str) -> int:
        return sum(v for k, v in c.items() if k[:1] == first and k[:3].isdigit())
    refused_all, refused_window = refused(rows), refused(inside)
    unanswered = sum(v for k, v in refused_all.items() if k.startswith("no answer"))
    return {"state": "final" if stats.get("final") else "partial", "pods": len(rows), "pods_in_window": len(inside),
            "seen_to_bound": gaps(inside, "seen", "bound"), "seen_to_running": gaps(inside, "seen", "running"),
            "report_answer": gaps(inside, "running", "reported", delay),
            "watch_delay_vs_harness": summary(watch_delay),
            "refused_total": of_class(refused_all, "4"), "refused_in_window": of_class(refused_window, "4"),
            "answered_5xx": of_class(refused_all, "5"), "unanswered": unanswered,
            "cut_by_pod_end": cut, "retried_after_5xx": retried_5xx,
            "refused_examples": [f"{r['key']}: {r['report']['status']} {r['report']['response_body'][:160]}"
                                 for r in rows if r.get("report") and str(r["report"].get("status"))[:1] == "4"][:3],
            "refused_statuses": dict(refused_all), "simulator_errors": sum(len(r.get("errors") or []) for r in rows),
            "peak_threads": stats.get("peak_threads"), "cpu_seconds": stats.get("cpu_seconds"),
            "connections_discarded": stats.get("connections_discarded"),
            "pods_never_running": sum(1 for r in inside if r.get("running") is None and r.get("terminating") is None)}


def log_problems(path: Path) -> dict[str, int]:
    c = {"ERROR": 0, "CRITICAL": 0, "Traceback": 0}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                for k in c:
                    if k in line:
                        c[k] += 1
    except OSError:
        pass
    return c


# --- report --------------------------------------------------------------------------------------------

def fmt_s(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 1000:.0f} ms" if abs(v) < 1 else f"{v:.1f} s"


def targets(row: dict[str, Any]) -> list[tuple[str, bool, str, str]]:
    """(target, met, measured, goal) for one row."""
    ff, sim = row["false_failures"], row["sim"]
    refused = int(sim.get("refused_total") or 0)
    lag_p99 = row["lag"]["p99"]
    sp = row["status_page"]
    per_run = row["api"]["per_run"]
    return [
        ("false failures", ff["results"] == 0 and refused == 0,
         f"{ff['results']} failed results on {ff['checks']} checks, {refused} reports refused (4xx); "
         f"{sim.get('answered_5xx', 0)} answered 5xx, {sim.get('unanswered', 0)} unanswered; "
         f"{sim.get('retried_after_5xx', 0)} attempts answered 5xx and retried, "
         f"{sim.get('cut_by_pod_end', 0)} cut by their pod's end", "0"),
        ("schedule lag p99", lag_p99 is not None and lag_p99 < 1.0, fmt_s(lag_p99), "< 1 s"),
        ("daemon CPU", row["cpu"]["daemon"] < 0.4, f"{row['cpu']['daemon']:.2f} core", "< 0.4 core"),
        ("peak PSS", row["mem"]["peak_pss_mb"] < 250, f"{row['mem']['peak_pss_mb']:.0f} MB", "< 250 MB"),
        ("`/` p99", sp["p99"] is not None and sp["p99"] < 0.5 and sp["failed"] == 0,
         f"{fmt_s(sp['p99'])} ({sp['failed']} of {sp['polls']} polls failed)", "< 0.5 s, no failed poll"),
        ("API requests per run", per_run is not None and per_run <= 5, f"{per_run}", "<= 5"),
    ]


HEADER = ("| checks | false failures | schedule lag p50 / p99 / max | daemon CPU (per check) | peak PSS / RSS "
          "| threads | `/` p50 / p99 | API req/s (per run) | kubelet seen→Running p99, report answer p99 |")


def markdown_row(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"| {row['n']:,} | harness error: {row['error']} | | | | | | | |"
    ff, lag, cpu, mem, sp, api, sim = (row[k] for k in ("false_failures", "lag", "cpu", "mem", "status_page",
                                                        "api", "sim"))
    failures = f"{ff['results']:,} on {ff['checks']:,} of {row['n']:,} checks" if ff["results"] else "0"
    if sim.get("refused_total"):
        failures += f"; {sim['refused_total']} reports refused (4xx)"
    if sim.get("answered_5xx") or sim.get("unanswered"):
        failures += f"; {sim.get('answered_5xx', 0)} answered 5xx, {sim.get('unanswered', 0)} unanswered"
    lag_txt = f"{fmt_s(lag['p50'])} / {fmt_s(lag['p99'])} / {fmt_s(lag['max'])}"
    if lag["overdue_at_end"]:
        lag_txt += f" ({lag['overdue_at_end']} overdue)"
    hist = row["histogram"]
    if hist.get("state") == "present":
        lag_txt += f"; histogram n={hist['count']:.0f} mean {fmt_s(hist['mean'])} p99 <= {fmt_s(hist['p99_le'])}"
    polls = f"{fmt_s(sp['p50'])} / {fmt_s(sp['p99'])}"
    if sp["failed"]:
        polls += f" ({sp['failed']} of {sp['polls']} polls failed)"
    kubelet = "no stats"
    if sim.get("state") != "no stats file":
        kubelet = f"{fmt_s(sim['seen_to_running']['p99'])}, {fmt_s(sim['report_answer']['p99'])}"
        if sim["simulator_errors"]:
            kubelet += f" ({sim['simulator_errors']} simulator errors)"
    checks = f"{row['n']:,}" + (" (half HealthChecks)" if row.get("mix") else "")
    return (f"| {checks} | {failures} | {lag_txt} "
            f"| {cpu['daemon']:.2f} core ({cpu['daemon_millicores_per_check']:.2f} m) "
            f"| {mem['peak_pss_mb']:.0f} / {mem['peak_rss_mb']:.0f} MB | {mem['peak_threads']:,} | {polls} "
            f"| {api['per_s']:.1f} ({api['per_run']}) | {kubelet} |")


def print_details(row: dict[str, Any]) -> None:
    if "error" in row:
        print(f"  [{row['n']}] could not be measured: {row['error']}")
        return
    lag, sim, cpu, api = row["lag"], row["sim"], row["cpu"], row["api"]
    print(f"  [{row['n']}] product {row['product']}")
    print(f"  [{row['n']}] window {row['window_s']}s, runs {row['runs']} (expected ~{row['runs_expected']}), "
          f"warm-up {row['warmup']}")
    print(f"      lag (watch clock) {lag['lags']} lags, overdue at end {lag['overdue_at_end']}, never ran "
          f"{lag['never_ran']}; creationTimestamp clock p50/p99/max {fmt_s(lag['created']['p50'])} / "
          f"{fmt_s(lag['created']['p99'])} / {fmt_s(lag['created']['max'])}; daemon histogram {row['histogram']}")
    hcs = (f", HealthChecks not OK {row['final_hc_not_ok']} of {row['final_healthchecks']}"
           if "final_healthchecks" in row else "")
    print(f"      false failures {row['false_failures']}; final khstates not OK {row.get('final_not_ok')} of "
          f"{row.get('final_khstates')}{hcs}")
    print(f"      daemon CPU per run {cpu.get('daemon_ms_per_run')} ms")
    if cpu.get("daemon_ms_per_run_by_thread"):
        print("      ... by thread (ms per run): " + ", ".join(
            f"{group} {ms}" for group, ms in cpu["daemon_ms_per_run_by_thread"].items()))
    if cpu.get("daemon_slices_per_run_by_thread"):
        slices = cpu["daemon_slices_per_run_by_thread"]
        print(f"      ... time slices per run (wake-ups and preemptions): {round(sum(slices.values()), 1)}; "
              + ", ".join(f"{group} {n}" for group, n in slices.items()))
    print(f"      CPU cores: daemon {cpu['daemon']} (warm-up {cpu['daemon_warmup']}), API server+etcd {cpu['api']}, "
          f"kubelet {cpu['sim']}, harness {cpu['harness']}, machine {cpu['machine']} of {os.cpu_count()}")
    print(f"      memory {row['mem']}")
    print(f"      API {api['requests']} requests; per run by kind {api['by_kind_per_run']}; "
          f"kubelet {api['sim_per_run']}/run")
    print(f"      `/` polls {row['status_page']['outcomes']} skipped {row['status_page']['skipped']}")
    if sim.get("state") == "no stats file":
        print("      simulated kubelet: no stats file")
    else:
        print(f"      kubelet ({sim['state']} stats, {sim['pods_in_window']} pods in window): seen→bound "
              f"{_p(sim['seen_to_bound'])}, seen→Running {_p(sim['seen_to_running'])}, report answer "
              f"{_p(sim['report_answer'])}, its watch behind ours {_p(sim['watch_delay_vs_harness'])}; refused "
              f"{sim['refused_statuses']}; simulator errors {sim['simulator_errors']}; peak threads "
              f"{sim['peak_threads']}; never Running {sim['pods_never_running']}; connections discarded "
              f"{sim['connections_discarded']}")
        for example in sim["refused_examples"]:
            print(f"      refused: {example}")
    print(f"      daemon exit {row.get('daemon_exit')}, log {row['daemon_log']}; "
          f"watch restarts {row['watch_restarts']}")
    for note in row["notes"]:
        print(f"      note: {note}")


def _p(d: dict[str, float | None]) -> str:
    return f"p50 {fmt_s(d['p50'])} p99 {fmt_s(d['p99'])} max {fmt_s(d['max'])}"
