"""The v2 Prometheus families, computed from the khstate cache at scrape time.

Users' dashboards and alert rules query these names and labels, so they follow v2 (v2.8's
promMetricsConfig included): `kuberhealthy_running{current_master}` 1, `kuberhealthy_cluster_state` 1|0,
`kuberhealthy_check{check="<ns>/<name>",namespace,status,error}` 1|0,
`kuberhealthy_check_duration_seconds{check,namespace}`, and the same two for jobs. The error label is
the check's errors joined with `|`, double quotes turned into single quotes (as v2 did), optionally
truncated to a number of bytes or left out. Unlike v2, the text itself is rendered by
prometheus-client, so quotes, backslashes and newlines are escaped and the output always parses.

A custom collector on its own registry: no process/platform collectors, no state kept between scrapes.

Beside them (ours, README.md#metrics), per khcheck, labels {check="<ns>/<name>",namespace}, from the
JSON API's entries (checkview.ViewCache, so from the khstate's persisted counters: they survive
restarts and leader changes, and every replica exports the same values):
  kuberhealthy_check_consecutive_failures            failed runs since the last OK one
  kuberhealthy_check_last_success_timestamp_seconds  lastOK (unix seconds; absent until the first OK run)
  kuberhealthy_check_interval_seconds                the khcheck's runInterval
  kuberhealthy_check_runs_total{result="ok|failed"}  judged runs (skipped ones: kuberhealthy_runs_skipped_total)
  kuberhealthy_check_paused                          1 while the khcheck's paused-until time is ahead, else 0
Jobs are left out (they run once; a job and a check of the same name share a khstate). And
`kuberhealthy_influx_points_dropped_total`, points this process gave up on (influx.py).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from kuberhealthy.base.config import PromMetrics
from kuberhealthy.base.durations import parse_duration
from kuberhealthy.base.times import parse_time
from kuberhealthy.web.gojson import valid_text
from kuberhealthy.web.status.page import Details, StatusSummary


def error_label(errors: tuple[str, ...] | None, config: PromMetrics) -> str:
    """v2's error label value: joined with '|', '"' as "'", cut to error_label_max_length bytes if set."""
    text = valid_text("|".join(errors or ()).replace('"', "'"))
    limit = config.error_label_max_length
    if limit > 0:
        raw = text.encode("utf-8")
        if len(raw) > limit:  # cut on a character boundary so the value stays valid UTF-8
            text = raw[:limit].decode("utf-8", "ignore")
    return text


def duration_seconds(run_duration: str) -> float:
    """RunDuration in seconds; 0 when unset or unparsable (v2 logged and exported 0)."""
    if not run_duration:
        return 0.0
    try:
        return parse_duration(run_duration)
    except ValueError:
        return 0.0


class KuberhealthyCollector(Collector):
    """Reads the summary at each scrape; never blocks on the API."""

    def __init__(self, summary: Callable[[], StatusSummary], current_master: Callable[[], str],
                 config: PromMetrics | Callable[[], PromMetrics]) -> None:
        self._summary = summary
        self._current_master = current_master
        self._config_source = config

    @property
    def _config(self) -> PromMetrics:
        """The current settings (a callable follows config reloads)."""
        source = self._config_source
        return source if isinstance(source, PromMetrics) else source()

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # names are fixed and unique on our own registry; skip the collect() at register time

    def _workload(self, kind: str, what: str, entries: tuple[Details, ...]) -> Iterator[GaugeMetricFamily]:
        labels = ["check", "namespace", "status"]
        if not self._config.suppress_error_label:
            labels.append("error")
        state = GaugeMetricFamily(f"kuberhealthy_{kind}", f"Shows the status of a Kuberhealthy {kind}",
                                  labels=labels)
        duration = GaugeMetricFamily(f"kuberhealthy_{kind}_duration_seconds",
                                     f"Shows the {what} run duration of a Kuberhealthy {kind}",
                                     labels=["check", "namespace"])
        for d in entries:
            status = "1" if d.ok else "0"
            values = [d.key, d.spec_namespace, status]
            if not self._config.suppress_error_label:
                values.append(error_label(d.errors, self._config))
            state.add_metric(values, 1.0 if d.ok else 0.0)
            duration.add_metric([d.key, d.spec_namespace], duration_seconds(d.run_duration))
        yield state
        yield duration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        summary = self._summary()
        running = GaugeMetricFamily("kuberhealthy_running", "Shows if kuberhealthy is running error free",
                                    labels=["current_master"])
        running.add_metric([valid_text(self._current_master())], 1.0)
        yield running
        yield GaugeMetricFamily("kuberhealthy_cluster_state", "Shows the status of the cluster",
                                value=1.0 if summary.ok else 0.0)
        yield from self._workload("check", "check", summary.checks)
        yield from self._workload("job", "job", summary.jobs)


CacheStatus = Callable[[], Iterable[tuple[str, bool, float]]]  # (cache, current, seconds not current)


class CacheCollector(Collector):
    """Freshness of the watch caches: `kuberhealthy_cache_current{cache}` 1|0 and how long it has not been."""

    def __init__(self, status: CacheStatus) -> None:
        self._status = status

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        current = GaugeMetricFamily("kuberhealthy_cache_current",
                                    "1 while the watch cache is current, 0 while its watch is failing",
                                    labels=["cache"])
        stale = GaugeMetricFamily("kuberhealthy_cache_stale_seconds",
                                  "Seconds the watch cache has not been current (0 while it is)", labels=["cache"])
        for name, is_current, seconds in self._status():
            current.add_metric([name], 1.0 if is_current else 0.0)
            stale.add_metric([name], seconds)
        yield current
        yield stale


Entries = Callable[[], Iterable[Mapping[str, object]]]  # the JSON API's entries (checkview.view)


class CheckStatsCollector(Collector):
    """Per-check counters and times from the JSON API's entries, at scrape time."""

    def __init__(self, entries: Entries) -> None:
        self._entries = entries

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        labels = ["check", "namespace"]
        failures = GaugeMetricFamily("kuberhealthy_check_consecutive_failures",
                                     "Failed runs of the check since its last OK run", labels=labels)
        last_ok = GaugeMetricFamily("kuberhealthy_check_last_success_timestamp_seconds",
                                    "When the check last ran OK, in unix seconds", labels=labels)
        interval = GaugeMetricFamily("kuberhealthy_check_interval_seconds", "The check's runInterval",
                                     labels=labels)
        runs = CounterMetricFamily("kuberhealthy_check_runs", "Judged runs of the check, by result (persisted)",
                                   labels=[*labels, "result"])
        paused = GaugeMetricFamily("kuberhealthy_check_paused",
                                   "1 while the check is paused (its paused-until annotation is ahead), else 0",
                                   labels=labels)
        for entry in self._entries():
            if entry.get("kind") != "check":
                continue
            namespace = str(entry.get("namespace") or "")
            values = [f"{namespace}/{entry.get('name') or ''}", namespace]
            failures.add_metric(values, _number(entry.get("consecutiveFailures")))
            when = parse_time(entry.get("lastOK"))
            if when is not None:
                last_ok.add_metric(values, when)
            interval.add_metric(values, _number(entry.get("interval")))
            runs.add_metric([*values, "ok"], _number(entry.get("successCount")))
            runs.add_metric([*values, "failed"], _number(entry.get("failureCount")))
            paused.add_metric(values, 1.0 if entry.get("paused") else 0.0)
        yield from (failures, last_ok, interval, runs, paused)


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


class InfluxCollector(Collector):
    """`kuberhealthy_influx_points_dropped_total`: InfluxDB points this process gave up on."""

    def __init__(self, dropped: Callable[[], int]) -> None:
        self._dropped = dropped

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("kuberhealthy_influx_points_dropped",
                                  "InfluxDB points given up on: queue full, writes failing, or shutdown",
                                  value=float(self._dropped()))


def make_registry(summary: Callable[[], StatusSummary], current_master: Callable[[], str],
                  config: PromMetrics | Callable[[], PromMetrics], cache_status: CacheStatus | None = None,
                  extra: Iterable[Collector] = ()) -> CollectorRegistry:
    """A registry holding only Kuberhealthy's collectors (what `/metrics` exposes)."""
    # No `<counter>_created` / `<histogram>_created` series: no dashboard or rule uses them, and they
    # double the counters' series. The switch is process-wide and read at scrape time.
    disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus-client leaves it unannotated
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KuberhealthyCollector(summary, current_master, config))
    if cache_status is not None:
        registry.register(CacheCollector(cache_status))
    for collector in extra:
        registry.register(collector)
    return registry
