"""A check's uptime rollups: hourly buckets over the last 30 days, packed into its state object.

The kept history (history.py) says how the last few runs went; rollups say how the last hour, day, week
and month went, whatever the interval, in a bounded size. One bucket per UTC hour (unix // 3600) holds
the runs OK, failed and skipped, whether the check was paused in that hour, and a histogram of the
durations of its judged runs (skipped runs count neither way and carry no duration). An hour with a
bucket is "spanned": the rollups know what happened in it (runs, or a pause, or nothing due between two
runs on time); coverage is the share of a window spanned. The newest bucket's hour and the 720 before it
are kept: a 30-day window ending anywhere in the newest hour touches all of them.

Durations. A log-scale histogram with fixed bounds: bin i (level 0) holds [D_MIN*g^i, D_MIN*g^(i+1)) with
g = (1+ALPHA)/(1-ALPHA), and stands for 2ab/(a+b) of its bounds a, b: any percentile of the judged runs'
durations (nearest rank, as history.percentile) is then within ALPHA = 2 % of the exact one, for
durations from 1 ms to about 115 days (shorter count as 1 ms, longer as the last bin). Level L merges
2^L neighbouring bins: its error bound is (g^(2^L)-1)/(g^(2^L)+1): 4 %, 8 %, 16 % for levels 1..3
(error_bound()); level 4 (DROPPED) keeps no durations. A window or day that merges hours of different
levels is as precise as its coarsest hour.

Encoding and the byte budget: rollcodec.py.

Time. Callers pass `now` (unix seconds); nothing here reads a clock. A run stamped before the newest
bucket (a clock set back, a late write) goes into its own hour if that is among the 721 kept
hours, else it is ignored; a clock jumping forward trims the hours that fall out and leaves the hours
in between unspanned. Leadership: the state object is the one source; a new leader parses it and
continues. merge() is for a stale and a fresh copy of that same object: per hour it keeps the bucket
with more runs (never a sum, so nothing counts twice), paused if either is.

Not here: where the state object keeps the value, the API and metrics that serve windows() and
timeline(), Events for parse warnings. Pure functions, no I/O, no clock, no kube imports.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from kuberhealthy.base.times import format_time

VERSION = 1
HOUR = 3600
HOURS = 721  # hourly buckets kept: 30 days back from any moment of the newest hour touch 721 hours
BUDGET_BYTES = 8 * 1024  # the serialized value, compact JSON
ALPHA = 0.02  # relative error of a percentile at level 0
GAMMA = (1 + ALPHA) / (1 - ALPHA)
D_MIN = 0.001  # seconds: the lower bound of bin 0
MAX_INDEX = 575  # the last level-0 bin: D_MIN * GAMMA**576 is about 1e7 s
DROPPED = 4  # the level of an hour whose durations are gone
OK, FAILED, SKIPPED = "ok", "failed", "skipped"
WINDOWS = {"1h": 1, "24h": 24, "7d": 168, "30d": 720}  # hours
TIMELINES = ("24h", "7d", "30d")  # hourly, hourly, daily (UTC days)
_PERCENTILE_WINDOWS = ("24h", "7d")
_MAX_COUNT = 2**31 - 1
_LOG_GAMMA = math.log(GAMMA)

Bins = tuple[tuple[int, int], ...]  # (index at the hour's level, count > 0), ascending index


@dataclass(frozen=True)
class Hour:
    """One UTC hour's bucket; `hour` is unix seconds // 3600."""

    hour: int
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    paused: bool = False
    level: int = 0
    bins: Bins = ()


@dataclass(frozen=True)
class Rollup:
    """A check's buckets, oldest first, at most HOURS hours from the oldest to the newest."""

    hours: tuple[Hour, ...] = ()


def empty() -> Rollup:
    return Rollup()


def error_bound(level: int = 0) -> float:
    """The relative error of a percentile taken from histograms of this level (1.0 once dropped)."""
    if level >= DROPPED:
        return 1.0
    g: float = GAMMA ** (2 ** level)
    return (g - 1) / (g + 1)


def bin_index(seconds: float, level: int = 0) -> int:
    i = int(math.log(seconds / D_MIN) / _LOG_GAMMA) if seconds > D_MIN else 0
    return min(MAX_INDEX, max(0, i)) >> level


def bin_value(index: int, level: int = 0) -> float:
    """The value a bin stands for: within error_bound(level) of everything in it."""
    lo, hi = D_MIN * GAMMA ** (index << level), D_MIN * GAMMA ** ((index + 1) << level)
    return 2 * lo * hi / (lo + hi)


# --- the write side -------------------------------------------------------------------------------------------

def _with_bins(bins: Iterable[tuple[int, float]]) -> Bins:
    acc: dict[int, int] = {}
    for i, c in bins:
        acc[i] = min(_MAX_COUNT, acc.get(i, 0) + int(c))
    return tuple(sorted((i, c) for i, c in acc.items() if c > 0))


def _coarsen(h: Hour, level: int) -> Hour:
    if level <= h.level:
        return h
    if level >= DROPPED:
        return replace(h, level=DROPPED, bins=())
    shift = level - h.level
    return replace(h, level=level, bins=_with_bins((i >> shift, c) for i, c in h.bins))


def _add(h: Hour, outcome: str, duration: float | None) -> Hour:
    bins = h.bins
    if outcome != SKIPPED and duration is not None and math.isfinite(duration) and h.level < DROPPED:
        bins = _with_bins((*bins, (bin_index(max(0.0, duration), h.level), 1)))
    return Hour(h.hour, min(_MAX_COUNT, h.ok + (outcome == OK)), min(_MAX_COUNT, h.failed + (outcome == FAILED)),
                min(_MAX_COUNT, h.skipped + (outcome == SKIPPED)), h.paused, h.level, bins)


def _kept(hours: dict[int, Hour], newest: int) -> Rollup:
    return Rollup(tuple(hours[k] for k in sorted(hours) if k > newest - HOURS))


def record(rollup: Rollup, now: float, outcome: str, duration_seconds: float | None, *,
           interval: float | None = None) -> Rollup:
    """The rollup after one run ending at `now`: OK, failed or skipped, with its duration (None: unknown).

    With the check's `interval` (seconds), the empty hours since the previous bucket count as spanned
    when they are shorter than two intervals (nothing was due); without it they stay unspanned."""
    if outcome not in (OK, FAILED, SKIPPED):
        raise ValueError(f"outcome must be {OK!r}, {FAILED!r} or {SKIPPED!r}, not {outcome!r}")
    if not math.isfinite(now):
        return rollup
    hour = int(now // HOUR)
    newest = rollup.hours[-1].hour if rollup.hours else hour
    if hour <= newest - HOURS:
        return rollup  # a clock set back more than 30 days: nothing to say about that hour any more
    kept = rollup.hours
    if kept and hour == newest:  # the common case: another run in the newest hour
        return Rollup((*kept[:-1], _add(kept[-1], outcome, duration_seconds)))
    if not kept or hour > newest:
        gaps: tuple[Hour, ...] = ()
        if kept and interval is not None and (hour - newest - 1) * HOUR < 2 * interval:
            gaps = tuple(Hour(k) for k in range(max(newest + 1, hour - HOURS + 1), hour))
        return _since(Rollup((*kept, *gaps, _add(Hour(hour), outcome, duration_seconds))), hour - HOURS)
    hours = {h.hour: h for h in kept}
    hours[hour] = _add(hours.get(hour, Hour(hour)), outcome, duration_seconds)
    return _kept(hours, newest)


def paused(rollup: Rollup, from_unix: float, to_unix: float) -> Rollup:
    """The rollup with the hours that [from_unix, to_unix) touches marked paused (and so spanned)."""
    if not (math.isfinite(from_unix) and math.isfinite(to_unix)) or to_unix <= from_unix:
        return rollup
    last = math.ceil(to_unix / HOUR) - 1
    first = max(int(from_unix // HOUR), last - HOURS + 1)
    hours = {h.hour: h for h in rollup.hours}
    for k in range(first, last + 1):
        hours[k] = replace(hours.get(k, Hour(k)), paused=True)
    return _kept(hours, max(last, rollup.hours[-1].hour if rollup.hours else last))


def trim(rollup: Rollup, now: float) -> Rollup:
    """The rollup without the hours older than 30 days before `now` (hours after `now` stay)."""
    if not math.isfinite(now):
        return rollup
    return _since(rollup, int(now // HOUR) - HOURS)


def _since(rollup: Rollup, horizon: int) -> Rollup:
    """The rollup without the hours up to `horizon`."""
    if not rollup.hours or rollup.hours[0].hour > horizon:
        return rollup
    return Rollup(rollup.hours[bisect.bisect_right(rollup.hours, horizon, key=lambda h: h.hour):])


def merge(a: Rollup, b: Rollup) -> Rollup:
    """One rollup from a stale and a fresh copy of the same stored value: per hour the bucket with more
    runs (then more durations, then the finer histogram), paused if either says so. Counts are never
    added, so a run both copies hold counts once; commutative and idempotent."""
    hours = {h.hour: h for h in a.hours}
    for h in b.hours:
        other = hours.get(h.hour)
        if other is None:
            hours[h.hour] = h
            continue
        best = max(h, other, key=_rank)
        hours[h.hour] = replace(best, paused=h.paused or other.paused)
    return _kept(hours, max(hours)) if hours else Rollup()


def _rank(h: Hour) -> tuple[int, int, int, int, int, Bins]:
    return (h.ok + h.failed + h.skipped, sum(c for _, c in h.bins), -h.level, h.ok, h.failed, h.bins)


# --- the read side ---------------------------------------------------------------------------------------

def _weighted(rollup: Rollup, now: float, seconds: float) -> list[tuple[Hour, float, float]]:
    """The buckets inside [now - seconds, now] with their weight (the share of the bucket's elapsed
    part inside the window; runs are taken as spread evenly) and the seconds of the window they span."""
    lo, out = now - seconds, []
    for h in rollup.hours:
        start = h.hour * HOUR
        end = min(start + HOUR, now)
        if start > now or start + HOUR <= lo:
            continue
        inside = max(0.0, end - max(start, lo))
        out.append((h, inside / (end - start) if end > start else 1.0, inside))
    return out


def _percentiles(weighted: Iterable[tuple[Hour, float]], ps: Iterable[int]) -> list[float | None]:
    """Nearest-rank percentiles of the merged histograms (at the coarsest level among them)."""
    parts = [(h, w) for h, w in weighted if h.bins and w > 0]
    if not parts:
        return [None for _ in ps]
    level = max(h.level for h, _ in parts)
    acc: dict[int, float] = {}
    for h, w in parts:
        for i, c in h.bins:
            j = i >> (level - h.level)
            acc[j] = acc.get(j, 0.0) + c * w
    items, total = sorted(acc.items()), sum(acc.values())
    out: list[float | None] = []
    for p in ps:
        target, seen, chosen = p * total / 100 * (1 - 1e-12), 0.0, items[-1][0]
        for i, weight in items:
            seen += weight
            if seen >= target:
                chosen = i
                break
        out.append(bin_value(chosen, level))
    return out


def _entry(name: str, parts: list[tuple[Hour, float, float]], seconds: float) -> dict[str, float | None]:
    """One window's figures from its parts: (bucket, weight, seconds of the window it spans)."""
    ok = sum(h.ok * w for h, w, _ in parts)
    judged = sum((h.ok + h.failed) * w for h, w, _ in parts)
    finished = any(h.ok + h.failed for h, w, _ in parts if w > 0)
    entry: dict[str, float | None] = {
        "uptime": ok / judged if finished and judged > 0 else None,
        "coverage": min(1.0, sum(inside for _, _, inside in parts) / seconds)}
    if name in _PERCENTILE_WINDOWS:
        p50, p95, p99 = _percentiles(((h, w) for h, w, _ in parts), (50, 95, 99))
        entry.update(durationP50=p50, durationP95=p95, durationP99=p99)
    return entry


def windows(rollup: Rollup, now: float) -> dict[str, dict[str, float | None]]:
    """Per window ("1h", "24h", "7d", "30d", each ending at `now`): uptime = OK / (OK + failed), None
    while it holds no finished run; coverage = the share of it the rollups span (0..1); for "24h" and
    "7d" also durationP50, durationP95, durationP99 (seconds, None without a duration)."""
    return {name: _entry(name, _weighted(rollup, now, hours * HOUR), hours * HOUR) for name, hours in WINDOWS.items()}


def _slot(start: int, width: int, hours: list[Hour], spanned: int | None = None) -> dict[str, Any]:
    """One timeline bucket of `width` hours from hour `start`: its hours' sums and percentiles."""
    p50, p95 = _percentiles(((h, 1.0) for h in hours), (50, 95))
    return {"start": format_time(start * HOUR), "ok": sum(h.ok for h in hours),
            "failed": sum(h.failed for h in hours), "skipped": sum(h.skipped for h in hours),
            "paused": sum(h.paused for h in hours),
            "coverage": (len(hours) if spanned is None else spanned) / width,
            "durationP50": p50, "durationP95": p95}


def timeline(rollup: Rollup, now: float, window: str) -> list[dict[str, Any]]:
    """The buckets of a window, oldest first, every one whether spanned or not: hourly for "24h" (24)
    and "7d" (168), per UTC day for "30d" (30), the last one holding `now`. Each: start (RFC3339), ok,
    failed, skipped, paused (hours paused), coverage (share of its hours spanned), durationP50/P95."""
    if window not in TIMELINES:
        raise ValueError(f"window must be one of {', '.join(TIMELINES)}, not {window!r}")
    width = 24 if window == "30d" else 1
    count = WINDOWS[window] // width
    last = int(now // HOUR) // width
    by_slot: dict[int, list[Hour]] = {}
    for h in rollup.hours:
        if last - count < h.hour // width <= last:
            by_slot.setdefault(h.hour // width, []).append(h)
    return [_slot(slot * width, width, by_slot.get(slot, [])) for slot in range(last - count + 1, last + 1)]


# --- the same figures from a summary: what a reader keeps between two runs ----------------------------------

@dataclass(frozen=True)
class Summary:
    """What windows() and the 30-day timeline need of a rollup at any moment of one hour (`hour`, at or
    after its newest bucket), without its 721 buckets: per window the sum of the buckets strictly inside
    it, its edge bucket (partly inside), and the days before `hour`'s day. The bucket of `hour` itself is
    not in it: the caller adds it (a run in that hour changes only that bucket). A merged bucket stands
    for many: its histogram at the coarsest level of theirs (none for 1h and 30d), `paused` unused."""

    hour: int
    inner: tuple[tuple[str, Hour, int, Hour | None], ...]  # (window, sum of inner buckets, how many, edge)
    days: tuple[dict[str, Any], ...] = ()  # the 29 days before `hour`'s, oldest first (timeline "30d")
    today: tuple[Hour, int, int] | None = None  # `hour`'s day before it: (merged, buckets, paused buckets)


def _merged(hours: Iterable[Hour], histogram: bool = True) -> Hour:
    hours = list(hours)
    with_bins = [h for h in hours if h.bins] if histogram else []
    level = max((h.level for h in with_bins), default=0)
    return Hour(-1, sum(h.ok for h in hours), sum(h.failed for h in hours), sum(h.skipped for h in hours),
                False, level, _with_bins((i >> (level - h.level), c) for h in with_bins for i, c in h.bins))


def summarize(rollup: Rollup, hour: int, days: bool = False) -> Summary:
    """The Summary of a rollup for the moments of `hour` (unix // 3600, not before its newest bucket);
    `days`: with the 30-day timeline's days too (only the pictures ask)."""
    by_hour = {h.hour: h for h in rollup.hours if h.hour < hour}
    inner = []
    for name, width in WINDOWS.items():
        inside = [by_hour[k] for k in range(hour - width + 1, hour) if k in by_hour]
        merged = _merged(inside, histogram=name in _PERCENTILE_WINDOWS)  # no percentiles of 1h, 30d
        inner.append((name, merged, len(inside), by_hour.get(hour - width)))
    if not days:
        return Summary(hour, tuple(inner))
    today = hour // 24
    before = [by_hour[k] for k in range(today * 24, hour) if k in by_hour]
    slots: dict[int, list[Hour]] = {}
    for h in by_hour.values():
        if today - 30 < h.hour // 24 < today:
            slots.setdefault(h.hour // 24, []).append(h)
    return Summary(hour, tuple(inner), tuple(_slot(d * 24, 24, slots.get(d, [])) for d in range(today - 29, today)),
                   (_merged(before), len(before), sum(h.paused for h in before)))


def windows_at(summary: Summary, current: Hour | None, now: float) -> dict[str, dict[str, float | None]] | None:
    """windows() at `now` of the rollup `summary` was made of, its bucket of the summary's hour being
    `current` (None: it has none); None unless `now` is in that hour (then ask windows())."""
    if int(now // HOUR) != summary.hour or (current is not None and current.hour != summary.hour):
        return None
    start = summary.hour * HOUR
    out = {}
    for name, merged, count, edge in summary.inner:
        seconds = WINDOWS[name] * HOUR
        parts = [(merged, 1.0, count * float(HOUR))]
        if edge is not None:
            inside = max(0.0, edge.hour * HOUR + HOUR - (now - seconds))
            parts.append((edge, inside / HOUR, inside))
        if current is not None:
            parts.append((current, 1.0, now - start))
        out[name] = _entry(name, parts, seconds)
    return out


def days_at(summary: Summary, current: Hour | None, now: float) -> list[dict[str, Any]] | None:
    """timeline(..., "30d") from a Summary made with days (None as for windows_at)."""
    if int(now // HOUR) != summary.hour or summary.today is None or (
            current is not None and current.hour != summary.hour):
        return None
    merged, count, paused_hours = summary.today
    hours = [merged] if current is None else [merged, current]
    today = _slot(summary.hour // 24 * 24, 24, hours, count + (current is not None))
    today["paused"] = paused_hours + (current is not None and current.paused)
    return [*summary.days, today]
