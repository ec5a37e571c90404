"""`make scale --mix` and `--versus-mix`: HealthChecks (Kuberhealthy v3's kind) beside khchecks in one daemon.

A mixed size runs half its checks as khchecks and half as HealthChecks (apiVersion kuberhealthy.github.io/v2,
kind HealthCheck, spec {runInterval, timeout, podSpec: {spec: <the same pod spec>}}), in the same namespace,
with the same interval, timeout and simulated checker. A HealthCheck's result is its `.status` (ok, errors,
lastRunUnix, runDuration, successCount/failureCount), read by a watch of its own; it has no khstate.
HealthChecks are named with HC_PREFIX, so their pods and Events can be told apart in the audit log.

Figures split per kind (kind_figures): runs, false failures, schedule lag and API requests per run (the
requests on khstates and khchecks are a khcheck's, on healthchecks and healthchecks/status a HealthCheck's,
on pods and Events by name; the rest, shared, is shown apart and spread over all runs in the row's total).
CPU, memory and `/` latency belong to the one daemon and are shown for the run only.

`--versus-mix` measures khchecks alone and then the mix, at each size, one after the other in one invocation,
and prints the mix over khchecks alone (compare_lines): false failures of each (the target: the mix has as
few), schedule lag p99, CPU per run (target within +-10 %) and API requests per run. One pair on a busy
machine is noisy; the ratios mean something only when both sides ran under the same load.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from bench.scaleprobe import KIND_HEALTHCHECK, KIND_KHCHECK
from bench.scalereport import fmt_s

HC_PREFIX = "scale-hc-"
HC_GROUP_VERSION = "kuberhealthy.github.io/v2"
KINDS = (KIND_KHCHECK, KIND_HEALTHCHECK)
CPU_TOLERANCE = 0.10  # the mix's CPU per run within +-10 % of khchecks alone


def hcs_path(ns: str, name: str | None = None) -> str:
    base = f"/apis/{HC_GROUP_VERSION}/namespaces/{ns}/healthchecks"
    return f"{base}/{name}" if name else base


def healthcheck(name: str, pod_spec: dict[str, Any], interval: str, timeout: str) -> dict[str, Any]:
    """A HealthCheck as v3 documents it, around a khcheck's pod spec."""
    return {"apiVersion": HC_GROUP_VERSION, "kind": "HealthCheck", "metadata": {"name": name},
            "spec": {"runInterval": interval, "timeout": timeout, "podSpec": {"spec": pod_spec}}}


def split(n: int, mix: bool) -> dict[str, int]:
    """How many checks of each kind a size of n runs: all khchecks, or half of each (khchecks take the odd one)."""
    hcs = n // 2 if mix else 0
    return {KIND_KHCHECK: n - hcs, KIND_HEALTHCHECK: hcs}


def api_by_owner(calls: Counter[str]) -> tuple[Counter[str], dict[str, Counter[str]]]:
    """`<owner> <verb resource>` counts as (counts by `<verb resource>`, {owner: counts by `<verb resource>`})."""
    total: Counter[str] = Counter()
    owners: dict[str, Counter[str]] = {}
    for key, v in calls.items():
        owner, _, kind = key.partition(" ")
        total[kind] += v
        owners.setdefault(owner, Counter())[kind] += v
    return total, owners


def kind_figures(n: dict[str, int], runs: dict[str, int], owners: dict[str, Counter[str]],
                 false_failures: dict[str, dict[str, Any]], lags: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The row's figures per kind (only the kinds it ran), and the shared requests per run of all runs."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        if not n.get(kind):
            continue
        mine = owners.get(kind, Counter())
        r = runs.get(kind, 0)
        out[kind] = {"n": n[kind], "runs": r, "false_failures": false_failures[kind], "lag": lags[kind],
                     "api_requests": sum(mine.values()),
                     "api_per_run": round(sum(mine.values()) / r, 2) if r else None,
                     "api_by_kind_per_run": {k: round(v / max(1, r), 2) for k, v in mine.most_common(8)}}
    shared = owners.get("shared", Counter())
    all_runs = sum(runs.values())
    out["shared"] = {"api_requests": sum(shared.values()),
                     "api_per_run": round(sum(shared.values()) / all_runs, 2) if all_runs else None,
                     "api_by_kind_per_run": {k: round(v / max(1, all_runs), 2) for k, v in shared.most_common(8)}}
    return out


def kind_lines(row: dict[str, Any]) -> list[str]:
    """One line per kind of a row that ran more than one kind (none otherwise)."""
    kinds = row.get("by_kind") or {}
    if sum(1 for k in KINDS if k in kinds) < 2:
        return []
    lines = []
    for kind in KINDS:
        f = kinds[kind]
        ff, lag = f["false_failures"], f["lag"]
        lines.append(f"  - {kind}: {f['n']:,} checks, {f['runs']:,} runs; false failures {ff['results']} "
                     f"({ff['checks']} checks); lag p50 / p99 {fmt_s(lag['p50'])} / {fmt_s(lag['p99'])}"
                     f"{' (' + str(lag['overdue_at_end']) + ' overdue)' if lag['overdue_at_end'] else ''}; "
                     f"API requests per run {f['api_per_run']} {f['api_by_kind_per_run']}")
    shared = kinds.get("shared") or {}
    lines.append(f"  - shared (lists, Leases, ...): {shared.get('api_per_run')} per run of either kind "
                 f"{shared.get('api_by_kind_per_run')}")
    return lines


# --- khchecks alone against the mix ----------------------------------------------------------------------

def _cpu_per_run_ms(row: dict[str, Any]) -> float | None:
    runs = int(row.get("runs") or 0)
    cpu = row.get("cpu") or {}
    if not runs or "daemon_seconds" not in cpu:
        return None
    return float(cpu["daemon_seconds"]) * 1000 / runs


def _ratio(mix: float | None, alone: float | None) -> float | None:
    if mix is None or alone is None or not alone:
        return None
    return mix / alone


def _failures(row: dict[str, Any]) -> int:
    return int(row["false_failures"]["results"]) + int((row.get("sim") or {}).get("refused_total") or 0)


def compare(alone: dict[str, Any], mix: dict[str, Any]) -> dict[str, Any]:
    """The mix against khchecks alone at one size: each side's figures and the mix/alone ratios; the verdicts
    of the targets (false failures no more than alone's, lag p99 no worse than alone's within its 1 s target,
    CPU per run within CPU_TOLERANCE)."""
    if "error" in alone or "error" in mix:
        return {"error": alone.get("error") or mix.get("error")}
    cpu = {"alone": _cpu_per_run_ms(alone), "mix": _cpu_per_run_ms(mix)}
    lag = {"alone": alone["lag"]["p99"], "mix": mix["lag"]["p99"]}
    api = {"alone": alone["api"]["per_run"], "mix": mix["api"]["per_run"]}
    pss = {"alone": alone["mem"]["peak_pss_mb"], "mix": mix["mem"]["peak_pss_mb"]}
    root = {"alone": alone["status_page"]["p99"], "mix": mix["status_page"]["p99"]}
    ff = {"alone": _failures(alone), "mix": _failures(mix)}
    cpu_ratio = _ratio(cpu["mix"], cpu["alone"])
    lag_ok = lag["mix"] is not None and lag["alone"] is not None and (lag["mix"] <= max(lag["alone"], 1.0))
    return {"cpu_per_run_ms": cpu, "cpu_ratio": cpu_ratio, "lag_p99": lag,
            "lag_ratio": _ratio(lag["mix"], lag["alone"]),
            "api_per_run": api, "api_ratio": _ratio(api["mix"], api["alone"]), "pss": pss,
            "pss_ratio": _ratio(pss["mix"], pss["alone"]), "root_p99": root,
            "root_ratio": _ratio(root["mix"], root["alone"]), "false_failures": ff,
            "met": {"false failures": ff["mix"] <= ff["alone"], "schedule lag": lag_ok,
                    "CPU per run": cpu_ratio is not None and abs(cpu_ratio - 1.0) <= CPU_TOLERANCE}}


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} ms"


def compare_lines(n: int, c: dict[str, Any], mix_row: dict[str, Any]) -> list[str]:
    """The Markdown table of one size's comparison, and the per-kind figures of the mix."""
    if "error" in c:
        return [f"{n:,} checks: not compared: {c['error']}"]
    ff, lag, cpu, api, pss, root = (c[k] for k in ("false_failures", "lag_p99", "cpu_per_run_ms", "api_per_run",
                                                    "pss", "root_p99"))
    lines = [f"{n:,} checks: khchecks alone, then half khchecks + half HealthCheck (same run)", "",
             "| figure | khchecks alone | mix | mix / alone |", "|---|---|---|---|",
             f"| false failures (+ refused reports) | {ff['alone']} | {ff['mix']} | - |",
             f"| schedule lag p99 | {fmt_s(lag['alone'])} | {fmt_s(lag['mix'])} | {_x(c['lag_ratio'])} |",
             f"| daemon CPU per run | {_ms(cpu['alone'])} | {_ms(cpu['mix'])} | {_x(c['cpu_ratio'])} |",
             f"| API requests per run | {api['alone']} | {api['mix']} | {_x(c['api_ratio'])} |",
             f"| peak PSS | {pss['alone']:.0f} MB | {pss['mix']:.0f} MB | {_x(c['pss_ratio'])} |",
             f"| `/` p99 | {fmt_s(root['alone'])} | {fmt_s(root['mix'])} | {_x(c['root_ratio'])} |", "",
             "The mix per kind:", *kind_lines(mix_row), ""]
    goals = {"false failures": "no more than khchecks alone",
             "schedule lag": "p99 no worse than khchecks alone (or under 1 s)",
             "CPU per run": f"within +-{CPU_TOLERANCE:.0%} of khchecks alone"}
    lines += [f"- {'PASS' if met else 'MISS'} {name}: {goals[name]}" for name, met in c["met"].items()]
    return lines
