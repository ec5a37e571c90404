"""The dashboard's pictures of each check: the 30-day bar and duration sparkline of an overview row, and
the check page's timelines and duration plots, kept rendered while what they depend on is the same.

Why keep them: the overview draws every check on every load, and a 1,000-check overview must not draw
30,000 segments each time. A row's pictures depend on its entry (web/entries.py: its version names its
state object's resourceVersion, so its rollup and its history) and on the UTC day (the 30-day window
moves at midnight); a check page's plots on the stored rollup and the UTC hour. Those are the keys here;
nothing else can change what is drawn.

The figures come from the Uptime part (web/uptime.py). Its timelines are computed at most FRESH seconds
ago, so one computed just before a day or hour began is recomputed here from its rollup for `now`:
a picture is never kept under a day it does not show.

Not here: the drawing (web/charts.py), the page around the pictures (templates), the figures (records/).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from markupsafe import Markup

from kuberhealthy.base.durations import parse_duration
from kuberhealthy.base.times import format_time
from kuberhealthy.records import rollups
from kuberhealthy.records.uptime import text_of
from kuberhealthy.web import charts
from kuberhealthy.web.dashboard.rows import MARK_FAIL, MARK_OK, mark_of
from kuberhealthy.web.entries import HEALTHCHECK, JOB, Built, View
from kuberhealthy.web.uptime import Buckets, Uptime, state_key, stored

KEPT = 5_000  # checks whose pictures are kept (the least recently drawn go first)
HOUR, DAY = 3600, 86400
NAMED = {HEALTHCHECK: "HealthCheck ", JOB: "job "}  # a khcheck is named by its namespace/name alone


def label(kind: str, namespace: str, name: str) -> str:
    """How a chart names its check: `ns/name`, `HealthCheck ns/name`, `job ns/name`."""
    return f"{NAMED.get(kind, '')}{namespace}/{name}"


def run_points(history: Sequence[Mapping[str, Any]]) -> list[tuple[float | None, bool | None]]:
    """The kept history (newest first) as a sparkline's runs, oldest first: (seconds, OK / failed / None
    for skipped)."""
    out: list[tuple[float | None, bool | None]] = []
    for e in reversed(history):
        mark = mark_of(e)
        try:
            seconds: float | None = parse_duration(str(e.get("duration")))
        except ValueError:
            seconds = None
        out.append((seconds, True if mark == MARK_OK else False if mark == MARK_FAIL else None))
    return out


@dataclass(frozen=True)
class RowPictures:
    day_bar: Markup
    spark: Markup


@dataclass(frozen=True)
class Figure:
    """One window's figures on a check page, as text."""

    window: str
    uptime: str  # "99.93 % (OK)", "— (no finished run)"
    coverage: str
    p50: str = ""
    p95: str = ""
    p99: str = ""


@dataclass(frozen=True)
class CheckPlots:
    figures: tuple[Figure, ...]
    day_bar: Markup
    timeline_24h: Markup
    timeline_7d: Markup
    plot_24h: Markup
    plot_7d: Markup
    legend: Markup


def _timeline(uptime: Uptime, key: str, state: Any, window: str, now: float) -> Buckets:
    """Uptime's timeline when it ends in the bucket holding `now`, else one computed for `now`."""
    width = DAY if window == "30d" else HOUR
    buckets = uptime.timeline_of(key, state, window)
    if buckets and buckets[-1].get("start") == format_time(now // width * width):
        return buckets
    return rollups.timeline(uptime.rollup_of(key, state), now, window)


def _figure(window: str, w: Mapping[str, float | None]) -> Figure:
    u = w.get("uptime")
    if u is None:
        said = f"{charts.uptime_text(None)} (no finished run)"
    else:
        said = f"{charts.uptime_text(u)} ({charts.WORDS[charts.uptime_state(u)]})"
    cov = w.get("coverage")
    out = Figure(window, said, f"{round(cov * 100)} %" if cov is not None else charts.uptime_text(None))
    if "durationP50" in w:
        out = Figure(window, out.uptime, out.coverage, charts.duration_text(w.get("durationP50")),
                     charts.duration_text(w.get("durationP95")), charts.duration_text(w.get("durationP99")))
    return out


class Pictures:
    """Rendered pictures per check, each kept with what it was drawn from."""

    def __init__(self, kept: int = KEPT) -> None:
        self._kept = kept
        self._lock = threading.Lock()
        self._drawn: OrderedDict[tuple[str, str], tuple[object, Any]] = OrderedDict()

    def _get(self, key: tuple[str, str], deps: object) -> Any:
        with self._lock:
            hit = self._drawn.get(key)
            if hit is None or hit[0] != deps:
                return None
            self._drawn.move_to_end(key)
            return hit[1]

    def _put(self, key: tuple[str, str], deps: object, value: Any) -> None:
        with self._lock:
            self._drawn[key] = (deps, value)
            self._drawn.move_to_end(key)
            while len(self._drawn) > self._kept:
                self._drawn.popitem(last=False)

    def row(self, uptime: Uptime, built: Built, now: float) -> RowPictures:
        """An overview row's 30-day bar and sparkline."""
        v = built.view
        kind, ns, name = v["kind"], v["namespace"], v["name"]
        state = uptime.state(kind, ns, name)
        key = state_key(kind, ns, name)
        deps = (built.version, text_of(stored(state)), int(now // DAY))
        pics: RowPictures | None = self._get(("row", f"{kind}:{ns}/{name}"), deps)
        if pics is None:
            named = label(kind, ns, name)
            pics = RowPictures(day_bar=Markup(charts.day_bar(_timeline(uptime, key, state, "30d", now), named)),
                               spark=charts.sparkline(run_points(v.get("history") or []), named))
            self._put(("row", f"{kind}:{ns}/{name}"), deps, pics)
        return pics

    def plots(self, uptime: Uptime, view: View, now: float) -> CheckPlots:
        """A check page's figures (read each time), 30-day bar, outcome timelines and duration plots (24h and
        7d: kept while the stored rollup and the UTC hour are the same)."""
        kind, ns, name = view["kind"], view["namespace"], view["name"]
        state = uptime.state(kind, ns, name)
        key = state_key(kind, ns, name)
        windows = uptime.windows_of(key, state)  # kept by Uptime for a minute: the 1h window moves
        figures = tuple(_figure(w, windows.get(w) or {}) for w in uptime_windows(windows))
        deps = (text_of(stored(state)), int(now // HOUR))
        plots: CheckPlots | None = self._get(("page", f"{kind}:{ns}/{name}"), deps)
        if plots is not None:
            return replace(plots, figures=figures)
        named = label(kind, ns, name)
        h24, d7 = (_timeline(uptime, key, state, w, now) for w in ("24h", "7d"))
        plots = CheckPlots(
            figures=figures,
            day_bar=Markup(charts.day_bar(_timeline(uptime, key, state, "30d", now), named)),
            timeline_24h=charts.outcome_timeline(h24, named, "24h"),
            timeline_7d=charts.outcome_timeline(d7, named, "7d"),
            plot_24h=charts.duration_plot(h24, named, "24h", (windows.get("24h") or {}).get("durationP95")),
            plot_7d=charts.duration_plot(d7, named, "7d", (windows.get("7d") or {}).get("durationP95")),
            legend=charts.legend())
        self._put(("page", f"{kind}:{ns}/{name}"), deps, plots)
        return plots

    def forget(self, kind: str, namespace: str, name: str) -> None:
        with self._lock:
            for what in ("row", "page"):
                self._drawn.pop((what, f"{kind}:{namespace}/{name}"), None)


def uptime_windows(windows: Mapping[str, object]) -> list[str]:
    """The windows to show, shortest first."""
    return [w for w in rollups.WINDOWS if w in windows]
