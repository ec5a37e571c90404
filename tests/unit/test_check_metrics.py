"""The per-check families (metrics.CheckStatsCollector) and the Influx drop counter, rendered by
prometheus-client from entries as the JSON API has them: khchecks only, lastOK absent until set."""
from __future__ import annotations

from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from kuberhealthy.web.status.metrics import CheckStatsCollector, InfluxCollector


def samples(entries: list[dict[str, Any]], dropped: int = 0) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CheckStatsCollector(lambda: entries))
    registry.register(InfluxCollector(lambda: dropped))
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def entry(name: str, kind: str = "check", **fields: Any) -> dict[str, Any]:
    base = {"namespace": "ns", "name": name, "kind": kind, "interval": 60.0, "consecutiveFailures": 0,
            "successCount": 0, "failureCount": 0, "lastOK": None}
    return {**base, **fields}


def labels(name: str, **extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"check": f"ns/{name}", "namespace": "ns", **extra}.items()))


def test_each_check_gets_its_streak_interval_last_success_and_run_counters() -> None:
    got = samples([entry("a", consecutiveFailures=3, successCount=7, failureCount=4, interval=90.0,
                         lastOK="2024-05-01T12:00:00Z")], dropped=5)
    assert got[("kuberhealthy_check_consecutive_failures", labels("a"))] == 3
    assert got[("kuberhealthy_check_interval_seconds", labels("a"))] == 90
    assert got[("kuberhealthy_check_last_success_timestamp_seconds", labels("a"))] == 1714564800
    assert got[("kuberhealthy_check_runs_total", labels("a", result="ok"))] == 7
    assert got[("kuberhealthy_check_runs_total", labels("a", result="failed"))] == 4
    assert got[("kuberhealthy_influx_points_dropped_total", ())] == 5


def test_jobs_are_left_out_and_a_check_that_never_ran_ok_has_no_last_success() -> None:
    got = samples([entry("a", kind="job", successCount=1), entry("b", lastOK="not a time", consecutiveFailures=True)])
    assert not [k for k in got if ("check", "ns/a") in k[1]]
    assert ("kuberhealthy_check_last_success_timestamp_seconds", labels("b")) not in got
    assert got[("kuberhealthy_check_consecutive_failures", labels("b"))] == 0  # not a number: 0
    assert got[("kuberhealthy_influx_points_dropped_total", ())] == 0
