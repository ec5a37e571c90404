"""web/charts.py: the SVG pictures of uptime and durations, read as XML: their structure, accessible names,
escaping, tooltips, the shapes that tell states apart without colour, and that nothing in them reaches
out (no script, link, style attribute or id)."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from markupsafe import escape

from kuberhealthy.base.times import format_time
from kuberhealthy.records import rollups
from kuberhealthy.web import charts

SVG = "{http://www.w3.org/2000/svg}"
DAY = 86400
NOW = 1_796_300_000.0  # 2026-12-03T...Z
NASTY = '<script>alert("x")</script> & \'q\''


def svg(markup: str) -> ET.Element:
    return ET.fromstring(markup)


def day(i: int, *, p50: float | None = None, p95: float | None = None, **counts: int) -> dict[str, Any]:
    """The i-th of 30 UTC days as Uptime.timeline gives it: counts ok, failed, skipped, paused (0 unless given)."""
    return {"start": format_time((NOW // DAY - 29 + i) * DAY), "ok": 0, "failed": 0, "skipped": 0, "paused": 0,
            "coverage": 1.0, "durationP50": p50, "durationP95": p95, **counts}


def month(**odd: dict[str, Any]) -> list[dict[str, Any]]:
    """30 OK days, with days given by index (d3=..., d12=...) replaced."""
    out = [day(i, ok=144, p50=1.2, p95=2.5) for i in range(30)]
    for key, fields in odd.items():
        i = int(key[1:])
        out[i] = day(i, **fields)
    return out


def segments(root: ET.Element) -> list[tuple[str, str, str]]:
    """(state, path data, tooltip) of every segment, in x order."""
    out = []
    for g in root.iter(f"{SVG}g"):
        state = (g.get("class") or "").removeprefix("seg seg-")
        for p in g.findall(f"{SVG}path"):
            title = p.find(f"{SVG}title")
            out.append((state, str(p.get("d")), title.text or "" if title is not None else ""))
    return sorted(out, key=lambda s: float(re.match(r"M([\d.]+)", s[1]).group(1)))  # type: ignore[union-attr]


def relative(d: str) -> str:
    """Path data with its first x taken as 0 (the shape of a segment wherever it is)."""
    x0 = float(re.match(r"M([\d.]+)", d).group(1))  # type: ignore[union-attr]
    return re.sub(r"M([\d.]+)", lambda m: f"M{float(m.group(1)) - x0:g}", d)


def assert_self_contained(markup: str) -> None:
    root = svg(markup)
    for el in root.iter():
        assert el.tag not in (f"{SVG}script", f"{SVG}foreignObject")
        assert "style" not in el.attrib and "id" not in el.attrib  # the CSP forbids style attributes
        assert not any(k.endswith("href") for k in el.attrib)
        assert all("url(" not in v for v in el.attrib.values())
    assert "http" not in markup.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_the_day_bar_is_an_image_named_for_its_check_with_a_segment_and_tooltip_per_day() -> None:
    root = svg(charts.day_bar(month(d29={"ok": 10, "failed": 1, "skipped": 2, "p50": 0.85, "p95": 3.0}), "ns/dns"))
    assert root.tag == f"{SVG}svg" and root.get("role") == "img"
    assert (root.get("aria-label") or "").startswith("ns/dns: last 30 days, uptime ")
    segs = segments(root)
    assert len(segs) == 30 and all(tip for _, _, tip in segs)
    first, last = segs[0][2], segs[-1][2]
    assert first.startswith(format_time((NOW // DAY - 29) * DAY)[:10] + " UTC: OK")
    assert "uptime 100 %" in first and "runs 144 OK, 0 failed, 0 skipped" in first and "p50 1.2 s, p95 2.5 s" in first
    assert "failing" in last and "uptime 90.90 %" in last and "runs 10 OK, 1 failed, 2 skipped" in last
    assert "p50 850 ms, p95 3 s" in last
    assert_self_contained(charts.day_bar(month(), "ns/dns"))


def test_the_day_bar_says_the_states_of_its_days_in_its_name() -> None:
    name = svg(charts.day_bar(month(d3={"ok": 99, "failed": 1}, d4={"ok": 1, "failed": 1}, d5={"paused": 24},
                                    d6={}), "x")).get("aria-label")
    assert name == "x: last 30 days, uptime 99.94 %; 26 OK, 1 degraded, 1 failing, 1 paused, 1 no data"


def test_a_day_is_coloured_by_its_uptime_ok_degraded_failing_or_grey_without_runs() -> None:
    cases = {"ok": {"ok": 1000, "failed": 1}, "degraded": {"ok": 96, "failed": 4}, "failing": {"ok": 94, "failed": 6},
             "paused": {"paused": 3}, "nodata": {"skipped": 5}}
    for state, fields in cases.items():
        assert charts.state_of(day(0, **fields)) == state
        seg = [s for s in segments(svg(charts.day_bar(month(d0=fields), "x"))) if s[0] == state]
        assert len(seg) == (30 if state == "ok" else 1) and re.match(r"M0(\.5)? ", seg[0][1])


def test_every_state_has_its_own_shape_so_the_bar_reads_without_colour() -> None:
    """With fills and strokes ignored, the five states still differ: plain bar, notched, taller and
    hatched, a pause sign, an outline."""
    cases = {"ok": {"ok": 5}, "degraded": {"ok": 97, "failed": 3}, "failing": {"ok": 1, "failed": 1},
             "paused": {"paused": 2}, "nodata": {}}
    shapes = {}
    for state, fields in cases.items():
        markup = charts.day_bar([day(0, **fields)], "x")
        d = segments(svg(markup))[0][1]
        shapes[state] = (relative(d), 'class="hatch"' in markup)
    assert len(set(shapes.values())) == len(cases)
    assert shapes["failing"][1] and not shapes["ok"][1]  # hatched
    heights = {s: max(float(n) for n in re.findall(r"v([\d.]+)", d[0])) for s, d in shapes.items()}
    assert heights["failing"] > heights["ok"] > heights["paused"]
    markup = charts.day_bar([day(0)], "x")
    assert 'fill="none"' in markup and "stroke=" in markup  # no data: an outline


def test_everything_of_the_input_is_escaped() -> None:
    days = month()
    days[0]["start"] = NASTY  # not a time: said as "?"
    markup = charts.day_bar(days, NASTY)
    assert "<script>" not in markup and "&lt;script&gt;" in markup
    root = svg(markup)  # well-formed
    assert (root.get("aria-label") or "").startswith(NASTY + ": ")
    for pic in (charts.sparkline([(1.0, True)], NASTY), charts.outcome_timeline(days[:24], NASTY, "24h"),
                charts.duration_plot(days[:24], NASTY, "24h", 2.0)):
        assert "<script>" not in pic and (svg(pic).get("aria-label") or "").startswith(NASTY + ": ")


def test_bad_figures_in_a_bucket_are_taken_as_none_not_a_crash() -> None:
    odd = {"start": None, "ok": "many", "failed": -3, "skipped": True, "paused": None, "coverage": float("nan"),
           "durationP50": float("inf"), "durationP95": "1s"}
    segs = segments(svg(charts.day_bar([odd], "x")))
    assert segs[0][0] == "nodata" and segs[0][2] == "?: no data"


def test_the_same_buckets_give_the_same_bytes_and_no_ids_so_charts_can_share_a_page() -> None:
    assert charts.day_bar(month(), "a") == charts.day_bar(month(), "a")
    for markup in (charts.day_bar(month(), "a"), charts.legend(), charts.sparkline([(1.0, False)], "a"),
                   charts.outcome_timeline(month()[:24], "a", "24h"), charts.duration_plot(month(), "a", "7d", 1.0)):
        assert_self_contained(markup)


def test_the_day_bar_is_markup_that_jinja_does_not_escape_again() -> None:
    bar = charts.day_bar(month(), "a")
    assert isinstance(bar, str) and str(escape(bar)) == bar


def test_uptime_is_never_rounded_up_to_all() -> None:
    assert charts.uptime_text(0.99999) == "99.99 %"
    assert charts.uptime_text(1.0) == "100 %" and charts.uptime_text(None) == "\u2014"
    assert charts.uptime_text(2 / 3) == "66.66 %"


@pytest.mark.parametrize(("seconds", "text"), [(None, "\u2014"), (0.85, "850 ms"), (1.25, "1.2 s"), (2.0, "2 s"),
                                               (123, "2 min 3 s"), (3720, "1 h 2 min")])
def test_durations_read_as_people_say_them(seconds: float | None, text: str) -> None:
    assert charts.duration_text(seconds) == text


def test_the_sparkline_draws_the_durations_with_a_cross_on_each_failed_run() -> None:
    runs: list[tuple[float | None, bool | None]] = [(1.0, True), (2.0, False), (None, None), (4.0, True), (3.0, False)]
    markup = charts.sparkline(runs, "ns/web")
    root = svg(markup)
    assert root.get("role") == "img"
    assert root.get("aria-label") == "ns/web: durations of the last 5 runs, 1 s to 4 s, latest 3 s, 2 failed"
    line = root.find(f"{SVG}polyline")
    assert line is not None and len((line.get("points") or "").split()) == 4  # the skipped run has no duration
    assert len([p for p in root.iter(f"{SVG}path") if p.get("class") == "spark-fail"]) == 2
    ys = [float(pt.split(",")[1]) for pt in (line.get("points") or "").split()]
    assert ys[2] == min(ys)  # the longest run is highest
    assert_self_contained(markup)


def test_a_sparkline_without_durations_says_so() -> None:
    root = svg(charts.sparkline([(None, None)], "ns/x"))
    assert root.get("aria-label") == "ns/x: run durations, none kept" and root.find(f"{SVG}polyline") is None


def test_the_outcome_timeline_has_a_segment_per_hour_and_the_times_below() -> None:
    r = rollups.empty()
    for k in range(24 * 7):
        t = NOW - 7 * DAY + k * 3600
        r = rollups.record(r, t, "failed" if k % 3 == 0 and k > 150 else "ok", 1.0, interval=3600)
    for window, count in (("24h", 24), ("7d", 168)):
        markup = charts.outcome_timeline(rollups.timeline(r, NOW, window), "ns/dns", window)
        root = svg(markup)
        segs = segments(root)
        assert len(segs) == count and all(re.match(r"\d{4}-\d\d-\d\d \d\d:00 UTC: ", tip) for _, _, tip in segs)
        assert (root.get("aria-label") or "").startswith(f"ns/dns: outcomes per hour over {window}, uptime ")
        assert any(s == "failing" for s, _, _ in segs)
        labels = [t.text for t in root.iter(f"{SVG}text")]
        assert labels and all(re.fullmatch(r"\d\d:00" if window == "24h" else r"\d\d-\d\d", x or "") for x in labels)


def test_the_duration_plot_draws_p50_and_p95_and_the_window_p95_on_labelled_axes() -> None:
    hours = [day(i, ok=6, p50=1.0 + (i % 3), p95=4.0 + (i % 3)) for i in range(24)]
    hours[5] = day(5)  # no finished run: a gap in both lines
    markup = charts.duration_plot(hours, "ns/dns", "24h", 5.5)
    root = svg(markup)
    assert root.get("role") == "img"
    assert root.get("aria-label") == "ns/dns: run durations per hour over 24h, p50 and p95; window p95 5.5 s"
    lines = {c: [p for p in root.iter(f"{SVG}polyline") if p.get("class") == c] for c in ("p50", "p95")}
    assert len(lines["p50"]) == 2 and len(lines["p95"]) == 2  # broken at the empty hour
    assert lines["p95"][0].get("stroke-dasharray")  # told apart by its dashes as well as its colour
    assert not lines["p50"][0].get("stroke-dasharray")
    level = next(p for p in root.iter(f"{SVG}line") if p.get("class") == "p95-window")
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert "duration" in texts and "time (UTC), 24h" in texts and "p95 over 24h: 5.5 s" in texts
    top_label = max((t for t in root.iter(f"{SVG}text") if t.get("text-anchor") == "end"),
                    key=lambda t: -float(t.get("y") or 0))
    assert top_label.text == "8 s"  # the axis ends at a round number above everything drawn
    y0 = float(next(t for t in root.iter(f"{SVG}text") if t.text == "0").get("y") or 0) - 3.5
    y_top = float(top_label.get("y") or 0) - 3.5
    assert float(level.get("y1") or 0) == pytest.approx(y0 + (y_top - y0) * 5.5 / 8, abs=0.01)
    assert_self_contained(markup)


def test_a_duration_plot_without_runs_says_so() -> None:
    root = svg(charts.duration_plot([day(i) for i in range(24)], "ns/x", "24h", None))
    assert "no finished runs in this window" in [t.text for t in root.iter(f"{SVG}text")]
    assert (root.get("aria-label") or "").endswith("no finished run in the window")
    assert root.find(f"{SVG}polyline") is None


def test_a_check_failing_every_third_run_on_one_day_shows_that_day_failing() -> None:
    r = rollups.empty()
    for k in range(30 * 24):
        t = NOW - 30 * DAY + k * 3600 + 60
        bad = NOW - 3 * DAY <= t < NOW - 2 * DAY and k % 3 == 0
        r = rollups.record(r, t, "failed" if bad else "ok", 2.0, interval=3600)
    segs = segments(svg(charts.day_bar(rollups.timeline(r, NOW, "30d"), "ns/x")))
    states = [s for s, _, _ in segs]
    assert states.count("failing") >= 1 and states.count("ok") >= 27
    failing = [tip for s, _, tip in segs if s == "failing"]
    assert all("uptime 6" in tip or "uptime 7" in tip or "uptime 8" in tip for tip in failing)


def test_the_legend_names_each_shape_in_words() -> None:
    root = svg(charts.legend())
    assert [t.text for t in root.iter(f"{SVG}text")] == ["OK", "degraded", "failing", "paused", "no data"]
    assert root.get("role") == "img" and "Legend" in (root.get("aria-label") or "")
