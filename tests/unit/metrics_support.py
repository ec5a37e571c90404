"""Helpers of the /metrics tests: a Config carrying the metrics settings, rows as the JSON API's cache holds
them (entries.Built's view, key and labels), a scrape of the daemon's collectors, and promtool."""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from kuberhealthy.base.config import Config, PromMetrics
from kuberhealthy.web.status.metrics import CheckStatsCollector, make_registry
from kuberhealthy.web.status.page import StatusSummary, details_of, summarize

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
NOW = 1_714_564_800.0  # 2024-05-01T12:00:00Z


def metrics_config(style: str = "v2", **prom: Any) -> Config:
    """A Config with this metricsStyle and these promMetricsConfig fields (snake_case)."""
    return dataclasses.replace(Config(), metrics_style=style,
                               prom_metrics=dataclasses.replace(PromMetrics(), **prom))


@dataclass(frozen=True)
class Row:
    """What entries.Built gives /metrics: the JSON API entry, the key `/` shows, the kuberhealthy.io/ labels."""

    view: dict[str, Any]
    key: str
    labels: dict[str, str] = field(default_factory=dict)


def row(name: str, ns: str = "ns", kind: str = "check", labels: dict[str, str] | None = None,
        key: str | None = None, **fields: Any) -> Row:
    view = {"namespace": ns, "name": name, "kind": kind, "interval": 60.0, "consecutiveFailures": 0,
            "successCount": 0, "failureCount": 0, "lastOK": None, "paused": None, **fields}
    return Row(view, key or f"{ns}/{name}", dict(labels or {}))


def khstate(ns: str, name: str, job: bool = False, **spec: Any) -> Any:
    obj = {"metadata": {"namespace": ns, "name": name, "resourceVersion": "1"},
           "spec": {"Namespace": ns, "AuthoritativePod": "kh-0", **spec}}
    return details_of(obj, job)


def summary_of(*details: Any) -> StatusSummary:
    return summarize(sorted(details, key=lambda d: d.key))


def scrape(summary: StatusSummary, rows: Sequence[Any] | None = None, config: Config | PromMetrics | None = None,
           leader: bool | None = None, wall: Callable[[], float] = lambda: NOW) -> str:
    """The text /metrics serves over these sources, wired as the daemon wires them."""
    cfg = config if config is not None else metrics_config()
    extra: list[Collector] = [] if rows is None else [CheckStatsCollector(lambda: rows, cfg, wall=wall)]
    registry = make_registry(lambda: summary, lambda: "kh-0", cfg, extra=extra,
                             rows=None if rows is None else (lambda: rows),
                             leader=None if leader is None else (lambda: leader))
    return generate_latest(registry).decode("utf-8")


Sample = tuple[dict[str, str], float]


def families(text: str) -> dict[str, list[Sample]]:
    """Samples by sample name (`_total`, `_bucket` included)."""
    out: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def by_check(samples: list[Sample]) -> dict[str, Sample]:
    return {labels["check"]: (labels, value) for labels, value in samples}


def promtool(text: str) -> subprocess.CompletedProcess[str]:
    if not Path(PROMTOOL).is_file():
        pytest.skip("promtool not installed (hack/tools.sh installs it)")
    return subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True,
                          timeout=60, check=False)
