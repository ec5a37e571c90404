"""Pictures of a check's uptime and durations as inline SVG: the 30-day bar, the outcome timeline, the
duration sparkline and the duration plot.

Why SVG drawn on the server and no charting library: the pages must work offline and with JavaScript
off, under a Content-Security-Policy that allows no inline script or style and no other origin; a
library would be one more asset to serve, audit, licence and keep current, for four simple shapes. The
markup here is a pure function of its input (the same buckets give the same bytes), so callers can cache
it by what it depends on.

Readable without colour: every state has a shape as well as a hue. An OK day is a plain bar, a degraded
day has a notch cut into its top, a failing day is taller and hatched, a day without data is an outline,
a paused day is a short pause sign. Each segment carries a <title> (the tooltip) with its date and
figures; each <svg> has role="img" and an aria-label that names the check and says the figures in words.
Colours are presentation attributes (the CSP forbids style attributes) and classes, so a page's CSS may
restyle them. No ids, no scripts, no external references: any number of charts may share a page.

Not here: where the buckets come from (web/uptime.py), caching, or the page around a chart.
"""
from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup, escape

from kuberhealthy.base.times import parse_time

OK_AT = 0.999  # a day's uptime at or above this is OK
DEGRADED_AT = 0.95  # below OK_AT and at or above this: degraded; below: failing
OK, DEGRADED, FAILING, NO_DATA, PAUSED = "ok", "degraded", "failing", "nodata", "paused"
STATES = (OK, DEGRADED, FAILING, PAUSED, NO_DATA)
WORDS = {OK: "OK", DEGRADED: "degraded", FAILING: "failing", PAUSED: "paused", NO_DATA: "no data"}
COLOUR = {OK: "#2e7d32", DEGRADED: "#f9a825", FAILING: "#c62828", PAUSED: "#546e7a", NO_DATA: "#9e9e9e"}
P50_COLOUR, P95_COLOUR, AXIS_COLOUR = "#1565c0", "#6a1b9a", "#555555"

Bucket = Mapping[str, Any]


# --- words and numbers ----------------------------------------------------------------------------------

def duration_text(seconds: float | None) -> str:
    """850 ms, 1.2 s, 2 min 3 s, 5 min, 1 h 2 min."""
    if seconds is None:
        return "\u2014"
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds == int(seconds) else f"{seconds:.1f} s"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")


def uptime_text(ratio: float | None) -> str:
    """99.93 %; never "100 %" for less than all (rounded down), "—" for none."""
    if ratio is None:
        return "\u2014"
    if ratio >= 1:
        return "100 %"
    return f"{math.floor(ratio * 10000) / 100:.2f} %"


def _n(v: float) -> str:
    """A coordinate: two decimals at most, no trailing zeros (deterministic, short)."""
    text = f"{v:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _when(start: object, daily: bool) -> str:
    unix = parse_time(start)
    if unix is None:
        return "?"
    t = dt.datetime.fromtimestamp(unix, dt.timezone.utc)
    return t.strftime("%Y-%m-%d UTC") if daily else t.strftime("%Y-%m-%d %H:%M UTC")


def _int(b: Bucket, key: str) -> int:
    v = b.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def _num(b: Bucket, key: str) -> float | None:
    v = b.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def uptime_of(b: Bucket) -> float | None:
    judged = _int(b, "ok") + _int(b, "failed")
    return _int(b, "ok") / judged if judged else None


def uptime_state(u: float | None) -> str:
    """OK, degraded or failing by an uptime ratio; no data for none."""
    if u is None:
        return NO_DATA
    return OK if u >= OK_AT else DEGRADED if u >= DEGRADED_AT else FAILING


def state_of(b: Bucket) -> str:
    """A bucket's state: by its uptime when it holds a finished run, else paused or no data."""
    u = uptime_of(b)
    if u is None and _int(b, "paused"):
        return PAUSED
    return uptime_state(u)


def bucket_text(b: Bucket, daily: bool) -> str:
    """A bucket's tooltip: its date and figures in words."""
    state = state_of(b)
    parts = [f"{_when(b.get('start'), daily)}: {WORDS[state]}"]
    if uptime_of(b) is not None:
        parts.append(f"uptime {uptime_text(uptime_of(b))}")
    runs = (_int(b, "ok"), _int(b, "failed"), _int(b, "skipped"))
    if any(runs):
        parts.append(f"runs {runs[0]} OK, {runs[1]} failed, {runs[2]} skipped")
    p50, p95 = _num(b, "durationP50"), _num(b, "durationP95")
    if p50 is not None or p95 is not None:
        parts.append(f"p50 {duration_text(p50)}, p95 {duration_text(p95)}")
    if _int(b, "paused"):
        parts.append(f"paused {_int(b, 'paused')} h")
    coverage = _num(b, "coverage")
    if coverage is not None and 0 < coverage < 1:
        parts.append(f"covered {round(coverage * 100)} %")
    return "; ".join(parts)


def summary(buckets: Sequence[Bucket]) -> str:
    """The figures of a run of buckets in words: overall uptime and the count of each state."""
    ok = sum(_int(b, "ok") for b in buckets)
    failed = sum(_int(b, "failed") for b in buckets)
    counts = {s: 0 for s in STATES}
    for b in buckets:
        counts[state_of(b)] += 1
    said = ", ".join(f"{counts[s]} {WORDS[s]}" for s in STATES if counts[s])
    overall = f"uptime {uptime_text(ok / (ok + failed))}" if ok + failed else "no finished runs"
    return f"{overall}; {said}" if said else overall


# --- the segment bars (30-day bar, outcome timeline) ---------------------------------------------------

TALL, BAR_TOP = 28, 6  # a failing segment is the full height; the others start lower
# Each state's segments are one group that sets their look once (a 1,000-check overview draws 30,000).
LOOK = {OK: f'fill="{COLOUR[OK]}"', DEGRADED: f'fill="{COLOUR[DEGRADED]}"', FAILING: f'fill="{COLOUR[FAILING]}"',
        PAUSED: f'fill="{COLOUR[PAUSED]}"',
        NO_DATA: f'fill="none" stroke="{COLOUR[NO_DATA]}" stroke-width="1" pointer-events="visible"'}


def _shape(state: str, x: float, w: float) -> str:
    """One bucket's outline as path data (see the module docstring), in a 0..TALL high band."""
    h = TALL - BAR_TOP
    if state == OK:
        return f"M{_n(x)} {BAR_TOP}h{_n(w)}v{h}h{_n(-w)}z"
    if state == DEGRADED:  # a notch cut into the top
        return f"M{_n(x)} {BAR_TOP}l{_n(w / 2)} 5l{_n(w / 2)} -5v{h}h{_n(-w)}z"
    if state == FAILING:  # taller (and hatched: _hatch)
        return f"M{_n(x)} 0h{_n(w)}v{TALL}h{_n(-w)}z"
    if state == PAUSED:  # a pause sign, low and short
        bw = max(1.0, w / 3)
        return (f"M{_n(x)} {TALL - 10}h{_n(bw)}v10h{_n(-bw)}z"
                f"M{_n(x + w - bw)} {TALL - 10}h{_n(bw)}v10h{_n(-bw)}z")
    return f"M{_n(x + 0.5)} {BAR_TOP + 0.5}h{_n(max(0.5, w - 1))}v{h - 1}h{_n(-max(0.5, w - 1))}z"


def _hatch(xs: Sequence[float], w: float) -> str:
    """White diagonal strokes over the failing segments at these x (drawn once, never hovered)."""
    d = "".join(f"M{_n(x)} {k}l{_n(w)} {_n(-w)}" for x in xs for k in range(int(w) + 3, TALL, 5))
    return (f'<path class="hatch" d="{d}" stroke="#ffffff" stroke-width="1.2" fill="none" '
            f'pointer-events="none"/>' if d else "")


def _segments(shapes: Sequence[tuple[str, float, str]], w: float) -> str:
    """Segments (state, x, tooltip) as a group per state, then the hatch of the failing ones."""
    out = []
    for state in STATES:
        mine = [(x, tip) for st, x, tip in shapes if st == state]
        if mine:
            out.append(f'<g class="seg seg-{state}" {LOOK[state]}>'
                       + "".join(f'<path d="{_shape(state, x, w)}">' + (f"<title>{escape(tip)}</title>" if tip else "")
                                 + "</path>" for x, tip in mine) + "</g>")
    out.append(_hatch([x for st, x, _ in shapes if st == FAILING], w))
    return "".join(out)


def _bar(buckets: Sequence[Bucket], name: str, cls: str, step: float, daily: bool, *,
         below: str = "", height: int = TALL) -> Markup:
    """Segments `step` wide (a fifth of it, at most 2, is the gap between them)."""
    gap = min(2.0, step / 5)
    width = max(1.0, len(buckets) * step - gap)
    shapes = [(state_of(b), i * step, bucket_text(b, daily)) for i, b in enumerate(buckets)]
    return Markup(f'<svg xmlns="http://www.w3.org/2000/svg" class="chart {cls}" role="img" '
                  f'aria-label="{escape(name)}" viewBox="0 0 {_n(width)} {height}" width="{_n(width)}" '
                  f'height="{height}" preserveAspectRatio="none">{_segments(shapes, step - gap)}{below}</svg>')


def day_bar(days: list[dict[str, Any]], label: str) -> str:
    """The 30-day bar: a segment per UTC day (Uptime.timeline(..., "30d")), oldest first. Returned as
    Markup (a str that Jinja does not escape again); everything of the input in it is escaped."""
    name = f"{label}: last {len(days)} days, {summary(days)}"
    return _bar(days, name, "daybar", step=10, daily=True)


def outcome_timeline(buckets: Sequence[Bucket], label: str, window: str) -> Markup:
    """Hourly buckets (Uptime.timeline(..., "24h" | "7d")) as segments, with the times below."""
    step = 35.0 if len(buckets) <= 24 else 5.0
    width = len(buckets) * step
    ticks = _time_ticks(buckets, 0.0, step)
    below = "".join(f'<line class="axis" x1="{_n(x)}" y1="{TALL}" x2="{_n(x)}" y2="{TALL + 4}" stroke="{AXIS_COLOUR}"/>'
                    f'<text x="{_n(min(max(x, 14.0), width - 14))}" y="{TALL + 15}" font-size="10" '
                    f'text-anchor="middle" fill="{AXIS_COLOUR}">{escape(t)}</text>' for x, t in ticks)
    name = f"{label}: outcomes per hour over {window}, {summary(buckets)}"
    return _bar(buckets, name, "timeline", step=step, daily=False, below=below, height=TALL + 18)


def _time_ticks(buckets: Sequence[Bucket], left: float, step: float) -> list[tuple[float, str]]:
    """Ticks at bucket starts: every 6 hours (24 buckets or fewer) or each UTC midnight."""
    out = []
    for i, b in enumerate(buckets):
        unix = parse_time(b.get("start"))
        if unix is None:
            continue
        t = dt.datetime.fromtimestamp(unix, dt.timezone.utc)
        if len(buckets) <= 24 and t.hour % 6 == 0:
            out.append((left + i * step, t.strftime("%H:%M")))
        elif len(buckets) > 24 and t.hour == 0:
            out.append((left + i * step, t.strftime("%m-%d")))
    return out


def legend() -> Markup:
    """Each segment's shape and its words, for a page that shows bars."""
    shapes = _segments([(state, i * 88, "") for i, state in enumerate(STATES)], 8)
    words = "".join(f'<text x="{i * 88 + 12}" y="22" font-size="11" fill="currentColor">{WORDS[state]}</text>'
                    for i, state in enumerate(STATES))
    return Markup('<svg xmlns="http://www.w3.org/2000/svg" class="chart legend" role="img" aria-label="'
                  f'Legend: OK at least {OK_AT * 100:g} %, degraded, failing below {DEGRADED_AT * 100:g} %, '
                  f'paused, no data" viewBox="0 0 440 {TALL}" width="440" height="{TALL}">{shapes}{words}</svg>')


# --- the sparkline ---------------------------------------------------------------------------------------

SPARK_W, SPARK_H = 120, 28


def sparkline(runs: Sequence[tuple[float | None, bool | None]], label: str) -> Markup:
    """Recent run durations, oldest first: (seconds or None, OK True / failed False / skipped None).
    A line through the durations; a failed run is a cross on it, the newest a dot."""
    timed = [(i, d, ok) for i, (d, ok) in enumerate(runs) if d is not None and math.isfinite(d) and d >= 0]
    failed = sum(1 for _, ok in runs if ok is False)
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart spark" role="img" '
            f'viewBox="0 0 {SPARK_W} {SPARK_H}" width="{SPARK_W}" height="{SPARK_H}" preserveAspectRatio="none" ')
    if not timed:
        name = f"{label}: run durations, none kept"
        return Markup(head + f'aria-label="{escape(name)}"><line x1="0" y1="{SPARK_H - 2}" x2="{SPARK_W}" '
                      f'y2="{SPARK_H - 2}" stroke="{COLOUR[NO_DATA]}" stroke-dasharray="3 3"/></svg>')
    top = max(d for _, d, _ in timed) or 1.0
    n = max(1, len(runs) - 1)

    def xy(i: int, d: float) -> tuple[float, float]:
        return 3 + i * (SPARK_W - 6) / n, SPARK_H - 3 - d / top * (SPARK_H - 6)

    pts = [xy(i, d) for i, d, _ in timed]
    lo, hi, last = min(d for _, d, _ in timed), top, timed[-1][1]
    name = (f"{label}: durations of the last {len(runs)} runs, {duration_text(lo)} to {duration_text(hi)}, "
            f"latest {duration_text(last)}" + (f", {failed} failed" if failed else ", none failed"))
    out = [head + f'aria-label="{escape(name)}"><title>{escape(name)}</title>',
           f'<polyline class="p50" points="{" ".join(f"{_n(x)},{_n(y)}" for x, y in pts)}" fill="none" '
           f'stroke="{P50_COLOUR}" stroke-width="1.5"/>']
    for (_, _, ok), (x, y) in zip(timed, pts, strict=True):
        if ok is False:
            out.append(f'<path class="spark-fail" d="M{_n(x - 3)} {_n(y - 3)}l6 6m0 -6l-6 6" '
                       f'stroke="{COLOUR[FAILING]}" stroke-width="1.8"/>')
    x, y = pts[-1]
    out.append(f'<circle class="p50-dot" cx="{_n(x)}" cy="{_n(y)}" r="2.2" fill="{P50_COLOUR}"/></svg>')
    return Markup("".join(out))


# --- the duration plot -----------------------------------------------------------------------------------

PLOT_W, PLOT_H = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 58, 12, 26, 40


def _nice_top(v: float) -> float:
    """The smallest 1, 2, 4, 6 or 8 times a power of ten at or above v (its quarters read well)."""
    if v <= 0:
        return 1.0
    p = 10.0 ** math.floor(math.log10(v))
    return next(m * p for m in (1, 2, 4, 6, 8, 10) if m * p >= v * 0.999999)


def _runs(values: Sequence[float | None], x: Any, y: Any) -> list[list[tuple[float, float]]]:
    """Consecutive points of the values that are numbers (a gap breaks the line)."""
    out: list[list[tuple[float, float]]] = []
    prev = False
    for i, v in enumerate(values):
        if v is None:
            prev = False
            continue
        if not prev:
            out.append([])
        out[-1].append((x(i), y(v)))
        prev = True
    return out


def _series(values: Sequence[float | None], x: Any, y: Any, look: tuple[str, str, str, bool],
            markers: bool) -> str:
    """A line through the values; look: (class, colour, dash pattern, square markers)."""
    cls, colour, dash, square = look
    out, dots = [], []
    for run in _runs(values, x, y):
        if len(run) > 1:
            out.append(f'<polyline class="{cls}" points="{" ".join(f"{_n(a)},{_n(b)}" for a, b in run)}" '
                       f'fill="none" stroke="{colour}" stroke-width="2"'
                       + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
        if markers or len(run) == 1:
            dots += [f'<rect x="{_n(a - 3)}" y="{_n(b - 3)}" width="6" height="6"/>' if square
                     else f'<circle cx="{_n(a)}" cy="{_n(b)}" r="3"/>' for a, b in run]
    if dots:
        out.append(f'<g class="{cls}-dot" fill="{colour}">{"".join(dots)}</g>')
    return "".join(out)


def duration_plot(buckets: Sequence[Bucket], label: str, window: str, p95: float | None = None) -> Markup:
    """p50 and p95 per bucket (solid line with dots; dashed line with squares) and the whole window's
    p95 (dotted level line), with labelled axes. `p95`: Uptime.windows(...)[window]["durationP95"]."""
    p50s = [_num(b, "durationP50") for b in buckets]
    p95s = [_num(b, "durationP95") for b in buckets]
    seen = [v for v in (*p50s, *p95s, p95) if v is not None]
    w, h = PLOT_W - LEFT - RIGHT, PLOT_H - TOP - BOTTOM
    top = _nice_top(max(seen) * 1.05) if seen else 1.0
    step = w / max(1, len(buckets))

    def x(i: int) -> float:
        return LEFT + (i + 0.5) * step

    def y(v: float) -> float:
        return TOP + h - v / top * h

    said = (f"window p95 {duration_text(p95)}" if p95 is not None else "no finished run in the window")
    name = f"{label}: run durations per hour over {window}, p50 and p95; {said}"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart durplot" role="img" '
           f'aria-label="{escape(name)}" viewBox="0 0 {PLOT_W} {PLOT_H}" width="{PLOT_W}" height="{PLOT_H}">',
           f'<title>{escape(name)}</title>']
    for k in range(5):  # the y axis: 0..top in quarters
        v = top * k / 4
        out.append(f'<line class="grid" x1="{LEFT}" y1="{_n(y(v))}" x2="{LEFT + w}" y2="{_n(y(v))}" '
                   f'stroke="#dddddd"/>'
                   f'<text x="{LEFT - 4}" y="{_n(y(v) + 3.5)}" font-size="10" text-anchor="end" '
                   f'fill="{AXIS_COLOUR}">{escape(duration_text(v) if v else "0")}</text>')
    for tx, t in _time_ticks(buckets, LEFT, step):
        out.append(f'<line class="axis" x1="{_n(tx)}" y1="{TOP + h}" x2="{_n(tx)}" y2="{TOP + h + 4}" '
                   f'stroke="{AXIS_COLOUR}"/>'
                   f'<text x="{_n(tx)}" y="{TOP + h + 15}" font-size="10" text-anchor="middle" '
                   f'fill="{AXIS_COLOUR}">{escape(t)}</text>')
    out.append(f'<path class="axis" d="M{LEFT} {TOP}V{TOP + h}H{LEFT + w}" fill="none" stroke="{AXIS_COLOUR}"/>'
               f'<text x="{LEFT + w / 2}" y="{PLOT_H - 6}" font-size="11" text-anchor="middle" '
               f'fill="{AXIS_COLOUR}">time (UTC), {escape(window)}</text>'
               f'<text x="12" y="{TOP + h / 2}" font-size="11" text-anchor="middle" fill="{AXIS_COLOUR}" '
               f'transform="rotate(-90 12 {TOP + h / 2})">duration</text>')
    if not seen:
        out.append(f'<text x="{LEFT + w / 2}" y="{TOP + h / 2}" font-size="13" text-anchor="middle" '
                   f'fill="{AXIS_COLOUR}">no finished runs in this window</text>')
    markers = len(buckets) <= 48
    out.append(_series(p95s, x, y, ("p95", P95_COLOUR, "6 3", True), markers))
    out.append(_series(p50s, x, y, ("p50", P50_COLOUR, "", False), markers))  # on top: p95 >= p50 often equal
    if p95 is not None:
        out.append(f'<line class="p95-window" x1="{LEFT}" y1="{_n(y(p95))}" x2="{LEFT + w}" y2="{_n(y(p95))}" '
                   f'stroke="#000000" stroke-width="1.5" stroke-dasharray="1 3"/>')
    out.append(_plot_legend(window, p95))
    out.append("</svg>")
    return Markup("".join(out))


def _plot_legend(window: str, p95: float | None) -> str:
    y = 12
    out = [f'<line class="p50" x1="{LEFT}" y1="{y}" x2="{LEFT + 22}" y2="{y}" stroke="{P50_COLOUR}" '
           f'stroke-width="2"/><circle class="p50-dot" cx="{LEFT + 11}" cy="{y}" r="3" fill="{P50_COLOUR}"/>'
           f'<text x="{LEFT + 27}" y="{y + 4}" font-size="11" fill="currentColor">p50 per hour</text>',
           f'<line class="p95" x1="{LEFT + 130}" y1="{y}" x2="{LEFT + 152}" y2="{y}" stroke="{P95_COLOUR}" '
           f'stroke-width="2" stroke-dasharray="6 3"/><rect class="p95-dot" x="{LEFT + 138}" y="{y - 3}" width="6" '
           f'height="6" fill="{P95_COLOUR}"/>'
           f'<text x="{LEFT + 157}" y="{y + 4}" font-size="11" fill="currentColor">p95 per hour</text>']
    if p95 is not None:
        out.append(f'<line class="p95-window" x1="{LEFT + 260}" y1="{y}" x2="{LEFT + 282}" y2="{y}" stroke="#000000" '
                   f'stroke-width="1.5" stroke-dasharray="1 3"/><text x="{LEFT + 287}" y="{y + 4}" font-size="11" '
                   f'fill="currentColor">p95 over {escape(window)}: {escape(duration_text(p95))}</text>')
    return "".join(out)
