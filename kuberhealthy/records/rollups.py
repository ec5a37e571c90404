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

Encoding. serialize() gives {"v": 1, "hours": "<base64>"}; the bytes are varints (7 bits a byte): the
first bucket's hour, then per bucket: the hours since the previous one (0 for the first), a flag byte
(bit 0-2: OK, failed, skipped follow; bit 3 paused; bits 4-6 level; bit 7 a histogram follows), the
counts flagged, and the histogram: bins, first index, then per bin one varint gap*16 + min(count, 15)
(and count-15 when the count is 15 or more). The number of bins is written doubled, plus one when the
counts add up to OK + failed: then the last count is written as 0. The first index is counted (zigzag)
from the previous bucket's first bin. A 1-minute check's hour takes about 5 bytes plus one per distinct
duration bin.

Budget. Serialized compactly it is at most BUDGET_BYTES (8 KiB) whatever was recorded: when it would
be more, histograms are made coarser, level by level, first in hours older than 7 days, then older than
a day, then in all (oldest hours first each time), then the oldest hours are dropped. What was dropped
stays dropped (the stored object is the rollup; the next writer continues from it).

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

import base64
import binascii
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
_MAX_INPUT = 4 * BUDGET_BYTES  # base64 characters parse() reads before calling it nonsense
_LOG_GAMMA = math.log(GAMMA)
_WRAPPER = len('{"v":1,"hours":""}')
# Degradation order: (minimum age in hours, level), each applied oldest hour first until the value fits.
_LADDER = tuple((age, level) for age in (168, 24, 0) for level in range(1, DROPPED + 1))

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
    return replace(h, ok=min(_MAX_COUNT, h.ok + (outcome == OK)), bins=bins,
                   failed=min(_MAX_COUNT, h.failed + (outcome == FAILED)),
                   skipped=min(_MAX_COUNT, h.skipped + (outcome == SKIPPED)))


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


# --- the encoding ---------------------------------------------------------------------------------------------

def _varint(n: int, out: bytearray) -> None:
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)


def _first_bin(previous: Hour | None, level: int) -> int:
    """Where a histogram's first index is counted from: the previous bucket's first bin, at `level`."""
    if previous is None or not previous.bins or level >= DROPPED:
        return 0
    return (previous.bins[0][0] << previous.level) >> level


def _encode_hour(h: Hour, previous: Hour | None) -> bytes:
    out = bytearray()
    _varint(0 if previous is None else h.hour - previous.hour, out)
    out.append((h.ok > 0) | (h.failed > 0) << 1 | (h.skipped > 0) << 2 | h.paused << 3 | h.level << 4
               | bool(h.bins) << 7)
    for n in (h.ok, h.failed, h.skipped):
        if n:
            _varint(n, out)
    if h.bins:
        implied = sum(c for _, c in h.bins) == h.ok + h.failed  # the last count follows from the others
        _varint(len(h.bins) * 2 + implied, out)
        shift = h.bins[0][0] - _first_bin(previous, h.level)
        _varint(shift * 2 if shift >= 0 else -shift * 2 - 1, out)  # zigzag: small either way
        prev = h.bins[0][0] - 1
        for k, (i, count) in enumerate(h.bins):
            c = 0 if implied and k == len(h.bins) - 1 else count
            _varint((i - prev - 1) * 16 + min(c, 15), out)
            if c >= 15:
                _varint(c - 15, out)
            prev = i
    return bytes(out)


def _encode(hours: tuple[Hour, ...]) -> bytes:
    if not hours:
        return b""
    out = bytearray()
    _varint(hours[0].hour, out)
    for k, h in enumerate(hours):
        out += _encode_hour(h, hours[k - 1] if k else None)
    return bytes(out)


def _raw_limit(budget: int) -> int:
    return 3 * ((budget - _WRAPPER) // 4)  # base64 turns 3 bytes into 4 characters


def fit(rollup: Rollup, budget: int = BUDGET_BYTES) -> Rollup:
    """The rollup made small enough to serialize in `budget` bytes (see the module's Budget)."""
    if not rollup.hours:
        return rollup
    rollup = _since(rollup, rollup.hours[-1].hour - HOURS)
    hours, limit = list(rollup.hours), _raw_limit(budget)
    sizes = [len(_encode_hour(h, hours[k - 1] if k else None)) for k, h in enumerate(hours)]
    total = _varint_len(hours[0].hour) + sum(sizes)
    if total <= limit:
        return rollup
    newest = hours[-1].hour
    for min_age, level in _LADDER:
        for k, h in enumerate(hours):
            if newest - h.hour < min_age:
                break
            if h.level >= level:
                continue
            hours[k] = _coarsen(h, level)
            for j in range(k, min(k + 2, len(hours))):  # the next one counts its first bin from this one
                size = len(_encode_hour(hours[j], hours[j - 1] if j else None))
                total += size - sizes[j]
                sizes[j] = size
            if total <= limit:
                return Rollup(tuple(hours))
    while len(hours) > 1 and total > limit:  # then the oldest hours go, one at a time
        first = len(_encode_hour(hours[1], None))
        total += first - sizes[0] - sizes[1] + _varint_len(hours[1].hour) - _varint_len(hours[0].hour)
        del hours[0], sizes[0]
        sizes[0] = first
    return Rollup(tuple(hours))


def _varint_len(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def serialize(rollup: Rollup) -> dict[str, Any]:
    """The value for the state object: one JSON object, at most BUDGET_BYTES when dumped compactly."""
    hours = rollup.hours
    data = _encode(hours)
    if len(data) > _raw_limit(BUDGET_BYTES) or (hours and hours[-1].hour - hours[0].hour >= HOURS):
        data = _encode(fit(rollup).hours)  # the common case, a value that fits, is encoded once
    return {"v": VERSION, "hours": base64.b64encode(data).decode("ascii")}


class _Nonsense(ValueError):
    pass


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise _Nonsense("truncated")
        self.pos += 1
        return self.data[self.pos - 1]

    def varint(self, limit: int = _MAX_COUNT) -> int:
        data, pos, n, shift = self.data, self.pos, 0, 0
        while pos < len(data):
            b = data[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            if n > limit or shift > 28:
                raise _Nonsense("a number out of range")
            if b < 0x80:
                self.pos = pos
                return n
            shift += 7
        raise _Nonsense("truncated")


def _decode(data: bytes) -> tuple[Hour, ...]:
    if not data:
        return ()
    r = _Reader(data)
    hour = r.varint()
    first, hours = hour, list[Hour]()
    while r.pos < len(data):
        delta = r.varint(HOURS)
        if (delta == 0) != (not hours):
            raise _Nonsense("hours out of order")
        hour += delta
        if hour - first >= HOURS:
            raise _Nonsense("more than 30 days of hours")
        flags = r.byte()
        level = flags >> 4 & 7
        if level > DROPPED or (flags & 0x80 and level == DROPPED):
            raise _Nonsense("an unknown histogram level")
        ok = r.varint() if flags & 1 else 0
        failed = r.varint() if flags & 2 else 0
        skipped = r.varint() if flags & 4 else 0
        if (ok == 0 and flags & 1) or (failed == 0 and flags & 2) or (skipped == 0 and flags & 4):
            raise _Nonsense("a zero count flagged")
        bins: list[tuple[int, int]] = []
        if flags & 0x80:
            top = MAX_INDEX >> level
            n, z = r.varint(2 * top + 3), r.varint(2 * top + 1)
            n, implied = n // 2, n % 2
            i = _first_bin(hours[-1] if hours else None, level) + (z // 2 if z % 2 == 0 else -(z + 1) // 2) - 1
            if not -1 <= i < top:
                raise _Nonsense("a histogram out of range")
            for k in range(n):
                pair = r.varint()
                i += pair // 16 + 1
                count = pair % 16 + (r.varint() if pair % 16 == 15 else 0)
                if implied and k == n - 1 and count == 0:
                    count = ok + failed - sum(c for _, c in bins)
                if i > top or count <= 0 or count > _MAX_COUNT:
                    raise _Nonsense("a histogram out of range")
                bins.append((i, count))
            if not bins:
                raise _Nonsense("an empty histogram flagged")
        hours.append(Hour(hour, ok, failed, skipped, bool(flags & 8), level, tuple(bins)))
    return tuple(hours)


def parse(raw: Any) -> tuple[Rollup, str | None]:
    """The rollup a state object holds (None: none yet) and a warning for an Event when what it holds
    cannot be read (then the rollup is empty: it starts afresh). Never raises."""
    if raw is None:
        return Rollup(), None
    try:
        if not isinstance(raw, dict):
            raise _Nonsense(f"a {type(raw).__name__}, not an object")
        version, text = raw.get("v"), raw.get("hours")
        if version != VERSION or isinstance(version, bool):
            raise _Nonsense(f"version {version!r}, this daemon reads {VERSION}")
        if not isinstance(text, str) or len(text) > _MAX_INPUT:
            raise _Nonsense(f"hours is not a string of at most {_MAX_INPUT} characters")
        try:
            data = base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise _Nonsense("hours is not base64") from None
        return Rollup(_decode(data)), None
    except _Nonsense as e:
        return Rollup(), f"the stored uptime rollup could not be read ({e}); it starts afresh"


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


def windows(rollup: Rollup, now: float) -> dict[str, dict[str, float | None]]:
    """Per window ("1h", "24h", "7d", "30d", each ending at `now`): uptime = OK / (OK + failed), None
    while it holds no finished run; coverage = the share of it the rollups span (0..1); for "24h" and
    "7d" also durationP50, durationP95, durationP99 (seconds, None without a duration)."""
    out: dict[str, dict[str, float | None]] = {}
    for name, hours in WINDOWS.items():
        seconds = hours * HOUR
        parts = _weighted(rollup, now, seconds)
        ok = sum(h.ok * w for h, w, _ in parts)
        judged = sum((h.ok + h.failed) * w for h, w, _ in parts)
        finished = any(h.ok + h.failed for h, w, _ in parts if w > 0)
        entry: dict[str, float | None] = {
            "uptime": ok / judged if finished and judged > 0 else None,
            "coverage": min(1.0, sum(inside for _, _, inside in parts) / seconds)}
        if name in _PERCENTILE_WINDOWS:
            p50, p95, p99 = _percentiles(((h, w) for h, w, _ in parts), (50, 95, 99))
            entry.update(durationP50=p50, durationP95=p95, durationP99=p99)
        out[name] = entry
    return out


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
    out = []
    for slot in range(last - count + 1, last + 1):
        hours = by_slot.get(slot, [])
        p50, p95 = _percentiles(((h, 1.0) for h in hours), (50, 95))
        out.append({"start": format_time(slot * width * HOUR), "ok": sum(h.ok for h in hours),
                    "failed": sum(h.failed for h in hours), "skipped": sum(h.skipped for h in hours),
                    "paused": sum(h.paused for h in hours), "coverage": len(hours) / width,
                    "durationP50": p50, "durationP95": p95})
    return out
