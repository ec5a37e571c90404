"""What tests read off the product's objects that the product itself never needs to read.

The daemon writes these (an env var into a checker pod, a skip into a counter, a waiter into a
notifier, the history statistics into the JSON API) and never reads them back; a test does, to check
what was written. Kept here rather than in the package, so the package holds no code only tests call.
"""
from __future__ import annotations

from typing import Any

from kuberhealthy.base.notify import Notifier
from kuberhealthy.outputs.runstats import SchedulingMetrics
from kuberhealthy.records.history import HistoryStats


def pod_env_value(pod: dict[str, Any], name: str) -> str | None:
    """A literal env value from the pod's containers (first match)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for e in container.get("env") or []:
            if e.get("name") == name and "value" in e:
                return str(e["value"])
    return None


def skipped_count(metrics: SchedulingMetrics, reason: str) -> float:
    """kuberhealthy_runs_skipped_total{reason} as a scrape would read it."""
    for family in metrics.skipped.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels.get("reason") == reason:
                return float(sample.value)
    return 0.0


def subscriber_count(notifier: Notifier) -> int:
    """Waiters the notifier still holds: one not closed is a leak."""
    with notifier._lock:
        return len(notifier._waiters)


def stats_json(stats: HistoryStats) -> dict[str, Any]:
    """The statistics under the JSON API's key names (web/entries.py writes them one by one)."""
    return {"consecutiveFailures": stats.consecutive_failures, "successCount": stats.success_count,
            "failureCount": stats.failure_count, "lastOK": stats.last_ok, "lastFailure": stats.last_failure,
            "uptime": stats.uptime, "uptime24h": stats.uptime_24h,
            "durationP50": stats.duration_p50, "durationP95": stats.duration_p95}
