"""Counters about the daemon's own scheduling, kept in memory and exported beside the v2 families.

  kuberhealthy_runs_skipped_total{reason}   runs neither recorded as OK nor as failed, by why:
      api-unavailable  the control plane was away or its caches stale: the daemon could not start,
                       follow or finish the run, which says nothing about the checked thing
      pod-deleted      someone else deleted the checker pod before it finished (v2 skipped these too)
      pod-disrupted    the cluster disrupted the checker pod (the DisruptionTarget condition: an eviction,
                       a preemption, a node's pressure or shutdown) before it reported
  kuberhealthy_schedule_lag_seconds         histogram of (run start - due time), on the leader

These are process-local (a new leader starts from zero), as Prometheus counters are.
"""
from __future__ import annotations

from prometheus_client import Counter, Histogram
from prometheus_client.registry import Collector

SKIP_API = "api-unavailable"
SKIP_POD_DELETED = "pod-deleted"
SKIP_POD_DISRUPTED = "pod-disrupted"
SKIP_REASONS = (SKIP_API, SKIP_POD_DELETED, SKIP_POD_DISRUPTED)
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class SchedulingMetrics:
    """The families above; the controller's workers observe the lag, a run counts its skip."""

    def __init__(self) -> None:
        self.skipped = Counter("kuberhealthy_runs_skipped", "Check runs skipped instead of recorded, by reason",
                               ["reason"], registry=None)
        for reason in SKIP_REASONS:
            self.skipped.labels(reason)
        self.schedule_lag = Histogram("kuberhealthy_schedule_lag_seconds",
                                      "How late check runs started against their due time (leader)",
                                      buckets=LAG_BUCKETS, registry=None)

    def skip(self, reason: str) -> None:
        self.skipped.labels(reason).inc()

    def collectors(self) -> list[Collector]:
        return [self.skipped, self.schedule_lag]
