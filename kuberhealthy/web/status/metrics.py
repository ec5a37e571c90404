"""The Prometheus families of /metrics, computed from the caches at scrape time, in one of two label styles.

Users' dashboards and alert rules query these names and labels; config `metricsStyle` picks the style.
`v2` (the default) is Kuberhealthy v2's (v2.8's promMetricsConfig included): `check="<ns>/<name>"` and
`namespace` (the khstate's spec.Namespace, as v2 labelled it). `v3` is v3's catalog's: `check="<name>"`
and `namespace="<ns>"`, on ours too, so v3's dashboards and alerts work unchanged. Both styles export
every family of v2, v3 and ours; only the check labels differ. khchecks, khjobs and HealthChecks alike:
each under the key `/` shows it (web/shown.py), so a HealthCheck beside a same-named khcheck that is
not its migration pair is `check="<ns>/hc:<name>"` (v3 style: `check="hc:<name>"`), and a migrated
pair is one series under the khcheck's key.
  v2: kuberhealthy_running{current_master} 1, kuberhealthy_cluster_state 1|0, kuberhealthy_check{status,
      error} 1|0 and kuberhealthy_check_duration_seconds, the same two for jobs. `error` is the errors
      joined with `|`, '"' as "'" (as v2), optionally cut to a number of bytes or left out.
  ours, per check, from the JSON API's entries (web/entries.py: the check's persisted counters, which
      survive restarts and leader changes; every replica exports the same values):
      kuberhealthy_check_consecutive_failures (v3 has it too), kuberhealthy_check_last_success_timestamp_seconds
      (absent until the first OK run), kuberhealthy_check_interval_seconds (runInterval),
      kuberhealthy_check_runs_total{result="ok|failed"} (judged runs), kuberhealthy_check_paused 1|0,
      kuberhealthy_check_uptime_ratio{window="1h|24h|7d|30d"} (OK over judged runs in the window ending now,
      from the check's rollups: the entry's `windows`; no sample for a window without a finished run);
      and kuberhealthy_influx_points_dropped_total.
  v3: kuberhealthy_check_success_total, _failure_total and _seconds_since_success (-1 before the first OK
      run) from the same entries; the histogram kuberhealthy_check_run_duration_seconds (v3's buckets,
      one observation per check: its last run); kuberhealthy_controller_leader when the app hands in
      who leads. (v3's scheduler and reaper figures belong with the scheduling metrics, outputs/.)
Jobs, and HealthChecks that run once (`singleRunOnly`), get only v2's two job families (they run once; a
job and a check of one name share a khstate).

Extra labels: for each name in promMetricsConfig's allow-list (empty: severity and category, v3's) and not
in its deny-list, the check's label `kuberhealthy.io/<name>` becomes label `<name>` on every per-check
and per-job family, cut to labelValueMaxLength characters. A name a family already uses (check, status,
...), one Prometheus gives every target (job, instance) and `run_uuid` (a live uuid lets a stranger
report) are dropped with a warning. A family carries an extra label on all its series or on none: on all
as soon as one check of the scrape has a value for it, "" for the others, which Prometheus stores as no
label: a check's series stay the same ones whether or not a neighbour is labelled, and a cluster that
labels no check exports exactly v2's label sets.

Custom collectors on their own registry; prometheus-client renders the text, so quotes, backslashes and
newlines are escaped and the output always parses. The per-check families keep each check's rendered
samples between scrapes while the check's row (web/entries.py's Built, web/status/page.py's Details) is
the same object (web/status/exposition.py); what changes with the clock alone
(kuberhealthy_check_seconds_since_success) is made at every scrape.
"""
from __future__ import annotations

import functools
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client import disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from kuberhealthy.base.config import Config, PromMetrics
from kuberhealthy.base.durations import parse_duration
from kuberhealthy.base.times import parse_time
from kuberhealthy.web.entries import LABEL_PREFIX, runs_once
from kuberhealthy.web.gojson import valid_text
from kuberhealthy.web.status.exposition import Part, RowCache, TextFamily, Values, families
from kuberhealthy.web.status.page import Details, StatusSummary

logger = logging.getLogger(__name__)

V2, V3 = "v2", "v3"
KNOWN_EXTRA_LABELS = ("severity", "category")  # the check labels v3 maps (what an empty allow-list means)
RUN_DURATION_BUCKETS = ("1", "5", "10", "30", "60", "120", "300")  # v3's, in seconds, as v3 writes `le`
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Labels our families or Prometheus itself use, and run_uuid (never a label: a live uuid lets anyone report).
_TAKEN = frozenset({"check", "namespace", "status", "error", "result", "le", "reason", "window", "current_master",
                    "job", "instance", "run_uuid"})

Settings = Config | PromMetrics  # a whole Config picks the style; PromMetrics alone means v2
# (is job, key) -> (the row's labels, (extra names, value length), their values): Labelling.of's memo
LabelMemo = dict[tuple[bool, str], tuple[Mapping[str, str], tuple[tuple[str, ...], int], tuple[str, ...]]]


@functools.lru_cache(maxsize=256)
def _maker(kind: str, name: str, documentation: str, labels: tuple[str, ...]) -> Callable[[], Metric]:
    """An empty family's maker, the same object for the same family and labels (exposition keeps its header
    by it)."""
    cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
    return functools.partial(cls, name, documentation, labels=list(labels))


def error_label(errors: tuple[str, ...] | None, config: PromMetrics) -> str:
    """v2's error label value: joined with '|', '"' as "'", cut to error_label_max_length bytes if set."""
    return _cut(valid_text("|".join(errors or ()).replace('"', "'")), config.error_label_max_length)


def _cut(text: str, limit: int) -> str:
    """At most `limit` bytes (0: no limit), cut on a character boundary so the value stays valid UTF-8."""
    raw = text.encode("utf-8")
    return raw[:limit].decode("utf-8", "ignore") if 0 < limit < len(raw) else text


def _first(text: str, limit: int) -> str:
    """The first `limit` characters (0: all)."""
    return text[:limit] if limit > 0 else text


def duration_seconds(run_duration: str) -> float:
    """RunDuration in seconds; 0 when unset or unparsable (v2 logged and exported 0)."""
    if not run_duration:
        return 0.0
    try:
        return parse_duration(run_duration)
    except ValueError:
        return 0.0


@functools.lru_cache(maxsize=16)
def extra_label_names(allow: tuple[str, ...], deny: tuple[str, ...]) -> tuple[str, ...]:
    """The extra labels in effect: the allow-list (empty: v3's two) less the deny-list, each a Prometheus
    label name no family uses yet; the rest are dropped with a warning (once per setting: cached)."""
    names: list[str] = []
    for name in allow or KNOWN_EXTRA_LABELS:
        if name in deny or name in names:
            continue
        if not _LABEL_NAME.match(name) or name.startswith("__") or name in _TAKEN:
            logger.warning("promMetricsConfig.labelAllowlist: %r cannot be a metric label (not a Prometheus "
                           "label name, or one the metrics use already); dropped", name)
            continue
        names.append(name)
    return tuple(names)


@dataclass(frozen=True)
class MetricsSettings:
    """What shapes the labels of one scrape."""

    style: str = V2
    prom: PromMetrics = field(default_factory=PromMetrics)
    extra: tuple[str, ...] = KNOWN_EXTRA_LABELS  # allowed extra label names
    value_max_length: int = 0  # characters kept of an extra label's value (0: all)

    @classmethod
    def of(cls, config: Settings) -> MetricsSettings:
        prom = config.prom_metrics if isinstance(config, Config) else config
        style = config.metrics_style if isinstance(config, Config) else V2
        return cls(style=V3 if style == V3 else V2, prom=prom,
                   extra=extra_label_names(tuple(prom.label_allowlist), tuple(prom.label_denylist)),
                   value_max_length=prom.label_value_max_length)


class CheckRow(Protocol):
    """One check or job as the JSON API's cache holds it (entries.Built): its entry, the key `/` shows it
    under ("<ns>/<name>"), and its `kuberhealthy.io/` labels."""

    @property
    def view(self) -> Mapping[str, object]: ...

    @property
    def key(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


@dataclass(frozen=True)
class _Row:
    view: Mapping[str, object]
    key: str
    labels: Mapping[str, str]


Rows = Callable[[], Iterable[CheckRow | Mapping[str, object]]]  # a bare entry has no labels


def _row(item: CheckRow | Mapping[str, object]) -> CheckRow:
    """The row, keyed "<ns>/<name>" when it does not say its key."""
    view, labels = (item, {}) if isinstance(item, Mapping) else (item.view, item.labels)
    if not isinstance(item, Mapping) and item.key:
        return item
    return _Row(view, f"{view.get('namespace') or ''}/{view.get('name') or ''}", labels)


@dataclass(frozen=True)
class Labelling:
    """One scrape's check labels: the style, and the extra labels its families carry with their values."""

    v3: bool
    names: tuple[str, ...] = ()
    values: Mapping[tuple[bool, str], tuple[str, ...]] = field(default_factory=dict)  # (is job, key) -> values

    @classmethod
    def of(cls, settings: MetricsSettings, rows: Iterable[CheckRow], kept: LabelMemo | None = None) -> Labelling:
        """The labelling of a scrape of `rows`. `kept`: each row's values from the last scrape, reused while
        its labels are the same object and the settings the same (and replaced by this scrape's)."""
        found: dict[tuple[bool, str], tuple[str, ...]] = {}
        memo: LabelMemo = {}
        wanted = (settings.extra, settings.value_max_length)
        for row in rows:
            key = (runs_once(row.view), row.key)
            if key in found:
                continue
            hit = kept.get(key) if kept is not None else None
            if hit is not None and hit[0] is row.labels and hit[1] == wanted:
                values = hit[2]
            else:
                values = tuple(_first(valid_text(str(row.labels.get(LABEL_PREFIX + name) or "")),
                                      settings.value_max_length) for name in settings.extra)
            found[key] = values
            memo[key] = (row.labels, wanted, values)
        if kept is not None:
            kept.clear()
            kept.update(memo)
        used = [i for i, _ in enumerate(settings.extra) if any(v[i] for v in found.values())]
        return cls(settings.style == V3, tuple(settings.extra[i] for i in used),
                   {k: tuple(v[i] for i in used) for k, v in found.items()})

    def check(self, key: str, namespace: str) -> list[str]:
        """The check and namespace label values of the check `/` shows under `key` ("<ns>/<name>")."""
        ns, _, name = key.partition("/")
        return [name, ns] if self.v3 else [key, namespace]

    def extra(self, key: str, is_job: bool = False) -> list[str]:
        values = self.values.get((is_job, key)) or self.values.get((not is_job, key))
        return list(values) if values else [""] * len(self.names)


class KuberhealthyCollector(Collector):
    """The summary's families (v2's and v3's cluster-wide ones) at each scrape; never blocks on the API."""

    def __init__(self, summary: Callable[[], StatusSummary], current_master: Callable[[], str],
                 config: Settings | Callable[[], Settings], rows: Rows | None = None,
                 leader: Callable[[], bool] | None = None) -> None:
        self._summary = summary
        self._current_master = current_master
        self._config = config
        self._rows = rows
        self._leader = leader
        self._kept = RowCache()
        self._labels: LabelMemo = {}

    def describe(self) -> list[Metric]:
        return []  # names are fixed and unique on our own registry; skip the collect() at register time

    def _workload(self, kind: str, entries: tuple[Details, ...], settings: MetricsSettings,
                  lab: Labelling) -> list[TextFamily]:
        suppress = settings.prom.suppress_error_label
        makers = (_maker("gauge", f"kuberhealthy_{kind}", f"Shows the status of a Kuberhealthy {kind}",
                         ("check", "namespace", "status", *([] if suppress else ["error"]), *lab.names)),
                  _maker("gauge", f"kuberhealthy_{kind}_duration_seconds",
                         f"Shows the {kind} run duration of a Kuberhealthy {kind}", ("check", "namespace", *lab.names)))

        def row(d: Details) -> tuple[Part, ...]:
            extra = tuple(lab.extra(d.key, d.is_job))

            def values() -> tuple[Values, Values]:
                check = tuple(lab.check(d.key, d.spec_namespace))
                error = () if suppress else (error_label(d.errors, settings.prom),)
                return ((((*check, "1" if d.ok else "0", *error, *extra), 1.0 if d.ok else 0.0),),
                        (((*check, *extra), duration_seconds(d.run_duration)),))
            context = (lab.v3, lab.names, extra, suppress, settings.prom.error_label_max_length)
            return self._kept.parts((kind, d.key), d, context, values)
        return families(makers, (row(d) for d in entries))

    def collect(self) -> Iterator[Metric]:
        config = self._config
        settings = MetricsSettings.of(config if isinstance(config, (Config, PromMetrics)) else config())
        summary = self._summary()
        lab = Labelling.of(settings, (_row(r) for r in self._rows()) if self._rows else (), self._labels)
        running = GaugeMetricFamily("kuberhealthy_running", "Shows if kuberhealthy is running error free",
                                    labels=["current_master"])
        running.add_metric([valid_text(self._current_master())], 1.0)
        yield running
        yield GaugeMetricFamily("kuberhealthy_cluster_state", "Shows the status of the cluster",
                                value=1.0 if summary.ok else 0.0)
        if self._leader is not None:
            yield GaugeMetricFamily("kuberhealthy_controller_leader",
                                    "1 while this replica leads (runs the checks), else 0",
                                    value=1.0 if self._leader() else 0.0)
        yield from self._workload("check", summary.checks, settings, lab)
        yield from self._workload("job", summary.jobs, settings, lab)
        self._kept.sweep()
        yield run_duration_histogram(duration_seconds(d.run_duration) for d in summary.checks)


def run_duration_histogram(durations: Iterable[float]) -> HistogramMetricFamily:
    """v3's histogram: one observation per check, its last run's duration."""
    seen = sorted(durations)
    buckets = [(le, float(sum(1 for s in seen if s <= float(le)))) for le in RUN_DURATION_BUCKETS]
    return HistogramMetricFamily("kuberhealthy_check_run_duration_seconds",
                                 "The checks' last run durations, one observation per check",
                                 buckets=[*buckets, ("+Inf", float(len(seen)))], sum_value=sum(seen))


class CheckStatsCollector(Collector):
    """Per-check counters and times from the JSON API's entries, at scrape time."""

    def __init__(self, rows: Rows, config: Settings | Callable[[], Settings] | None = None,
                 wall: Callable[[], float] = time.time) -> None:
        self._rows = rows
        self._config = config if config is not None else PromMetrics()
        self._wall = wall
        self._kept = RowCache()
        self._labels: LabelMemo = {}

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        config = self._config
        settings = MetricsSettings.of(config if isinstance(config, (Config, PromMetrics)) else config())
        rows = [_row(r) for r in self._rows()]
        lab = Labelling.of(settings, rows, self._labels)
        labels = ("check", "namespace", *lab.names)
        makers = [_maker(kind, name, text, (*labels, *extra)) for kind, name, text, extra in _CHECK_FAMILIES]
        since_ok = GaugeMetricFamily("kuberhealthy_check_seconds_since_success",
                                     "Seconds since the check last ran OK; -1 when it never has", labels=list(labels))
        now = self._wall()

        def shown() -> Iterator[CheckRow]:  # once per key, checks only (jobs have v2's families alone)
            seen: set[str] = set()
            for row in rows:
                if not runs_once(row.view) and row.key not in seen:
                    seen.add(row.key)
                    yield row

        def parts(row: CheckRow) -> tuple[Part, ...]:
            entry = row.view
            values = (*lab.check(row.key, str(entry.get("namespace") or "")), *lab.extra(row.key))
            when = parse_time(entry.get("lastOK"))
            since_ok.add_metric(values, max(0.0, now - when) if when is not None else -1.0)
            return self._kept.parts(row.key, row, (lab.v3, lab.names, values),
                                    lambda: _check_values(entry, values, when))
        cached = families(makers, (parts(row) for row in shown()))
        self._kept.sweep()
        yield from cached[:-1]
        yield since_ok
        yield cached[-1]


# The per-check families whose samples are kept between scrapes, in the order of _check_values (and of
# /metrics, kuberhealthy_check_seconds_since_success going before the last): kind, name, help, more labels
_CHECK_FAMILIES = (
    ("gauge", "kuberhealthy_check_consecutive_failures", "Failed runs of the check since its last OK run", ()),
    ("gauge", "kuberhealthy_check_last_success_timestamp_seconds", "When the check last ran OK, in unix seconds", ()),
    ("gauge", "kuberhealthy_check_interval_seconds", "The check's runInterval", ()),
    ("counter", "kuberhealthy_check_runs", "Judged runs of the check, by result (persisted)", ("result",)),
    ("gauge", "kuberhealthy_check_paused", "1 while the check is paused (its paused-until annotation is ahead), else 0",
     ()),
    ("counter", "kuberhealthy_check_success", "Runs of the check that ended OK (persisted)", ()),
    ("counter", "kuberhealthy_check_failure", "Runs of the check that failed (persisted)", ()),
    ("gauge", "kuberhealthy_check_uptime_ratio", "OK runs over judged runs of the check in the window ending now "
     "(0..1), from its rollups; absent for a window without a finished run", ("window",)),
)


def _check_values(entry: Mapping[str, object], labels: tuple[str, ...], last_ok: float | None) -> list[Values]:
    """One check's samples of each of _CHECK_FAMILIES."""
    ok, failed = _number(entry.get("successCount")), _number(entry.get("failureCount"))
    return [
        ((labels, _number(entry.get("consecutiveFailures"))),),
        ((labels, last_ok),) if last_ok is not None else (),
        ((labels, _number(entry.get("interval"))),),
        (((*labels, "ok"), ok), ((*labels, "failed"), failed)),
        ((labels, 1.0 if entry.get("paused") else 0.0),),
        ((labels, ok),),
        ((labels, failed),),
        tuple(((*labels, window), ratio) for window, ratio in _uptimes(entry.get("windows"))),
    ]


def _uptimes(windows: object) -> Iterator[tuple[str, float]]:
    """(window, uptime) of an entry's `windows`, for each window whose uptime is a number."""
    if not isinstance(windows, Mapping):
        return
    for window, figures in windows.items():
        ratio = figures.get("uptime") if isinstance(figures, Mapping) else None
        if isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and math.isfinite(ratio):
            yield str(window), float(ratio)


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


CacheStatus = Callable[[], Iterable[tuple[str, bool, float]]]  # (cache, current, seconds not current)


class CacheCollector(Collector):
    """Freshness of the watch caches: `kuberhealthy_cache_current{cache}` 1|0 and how long it has not been."""

    def __init__(self, status: CacheStatus) -> None:
        self._status = status

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
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
                  config: Settings | Callable[[], Settings], cache_status: CacheStatus | None = None,
                  extra: Iterable[Collector] = (), *, rows: Rows | None = None,
                  leader: Callable[[], bool] | None = None) -> CollectorRegistry:
    """A registry holding only Kuberhealthy's collectors (what `/metrics` exposes). `rows` (the JSON API's
    entries) give the checks' labels to the summary's families (pass the same to CheckStatsCollector);
    `leader` adds kuberhealthy_controller_leader. CheckStatsCollector and the others come in `extra`."""
    # No `<counter>_created` / `<histogram>_created` series: no dashboard or rule uses them, and they
    # double the counters' series. The switch is process-wide and read at scrape time.
    disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus-client leaves it unannotated
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KuberhealthyCollector(summary, current_master, config, rows, leader))
    if cache_status is not None:
        registry.register(CacheCollector(cache_status))
    for collector in extra:
        registry.register(collector)
    return registry
