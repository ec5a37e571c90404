"""Uptime rollups (kuberhealthy/records/rollups.py): hourly buckets over 30 days, their windows and
timelines, the packed value's byte budget, and what a leader change, a restart and a clock that jumps
do to them. Pure functions: no I/O, no clock."""
from __future__ import annotations

import base64
import functools
import json
import math
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuberhealthy.base.times import format_time
from kuberhealthy.records import rollcodec as c
from kuberhealthy.records import rollups as r
from kuberhealthy.records.history import percentile
from kuberhealthy.records.rollups import Hour, Rollup

T0 = 1_796_119_200  # 2026-12-01T10:00:00Z, on the hour
HOUR = 3600
DAY = 24 * HOUR
MONTH = 30 * DAY


def size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def outcomes(fail_every: int = 0, skip_every: int = 0) -> Callable[[int], str]:
    def pick(k: int) -> str:
        if skip_every and k % skip_every == skip_every - 1:
            return r.SKIPPED
        if fail_every and k % fail_every == fail_every - 1:
            return r.FAILED
        return r.OK
    return pick


ALL_OK = outcomes()


def play(interval: int, runs: int, pick: Callable[[int], str] = ALL_OK,
         duration: Callable[[random.Random], float] = lambda g: g.lognormvariate(math.log(2.0), 0.3),
         start: int = T0, rollup: Rollup | None = None, seed: int = 7) -> Rollup:
    g, out = random.Random(seed), rollup or r.empty()
    for k in range(runs):
        out = r.record(out, start + k * interval, pick(k), duration(g), interval=interval)
    return out


def counts(rollup: Rollup) -> list[tuple[int, int, int, int, bool]]:
    return [(h.hour, h.ok, h.failed, h.skipped, h.paused) for h in rollup.hours]


def roundtrip(rollup: Rollup) -> Rollup:
    value = c.serialize(rollup)
    assert size(value) <= r.BUDGET_BYTES
    back, warning = c.parse(json.loads(json.dumps(value)))
    assert warning is None
    return back


def relative_error(got: float | None, exact: float | None) -> float:
    assert got is not None and exact is not None
    return abs(got - exact) / exact


@pytest.fixture(scope="module")
def month_at_one_minute() -> Rollup:
    """43,200 runs a minute apart: every 17th fails, every 29th is skipped, durations vary."""
    return play(60, 43_200, outcomes(fail_every=17, skip_every=29))


# --- counting -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("interval", [60, 600, HOUR])
def test_thirty_days_of_runs_count_every_run_in_its_hour_at_one_minute_ten_minutes_and_an_hour(
        interval: int, month_at_one_minute: Rollup) -> None:
    runs = MONTH // interval
    pick = outcomes(fail_every=17, skip_every=29)
    rollup = month_at_one_minute if interval == 60 else play(interval, runs, pick)
    assert len(rollup.hours) == 720
    kinds = [pick(k) for k in range(runs)]
    assert sum(h.ok for h in rollup.hours) == kinds.count(r.OK)
    assert sum(h.failed for h in rollup.hours) == kinds.count(r.FAILED)
    assert sum(h.skipped for h in rollup.hours) == kinds.count(r.SKIPPED)
    now = T0 + MONTH  # on the hour: every bucket weighs 1 in the 30-day window
    win = r.windows(rollup, now)
    assert win["30d"]["uptime"] == pytest.approx(kinds.count(r.OK) / (runs - kinds.count(r.SKIPPED)))
    assert {name: win[name]["coverage"] for name in win} == {"1h": 1.0, "24h": 1.0, "7d": 1.0, "30d": 1.0}
    back = roundtrip(rollup)
    assert counts(back) == counts(rollup)  # the budget takes durations first, never a count
    assert r.windows(back, now)["30d"]["uptime"] == win["30d"]["uptime"]


@pytest.mark.parametrize("interval", [60, 600, HOUR])
def test_a_check_that_fails_every_third_run_shows_66_7_percent_uptime(interval: int) -> None:
    rollup = play(interval, MONTH // interval, outcomes(fail_every=3))
    hourly = interval == HOUR  # one run a window hour: a window cut mid-hour weighs a run by halves
    for now in (T0 + MONTH,) if hourly else (T0 + MONTH, T0 + MONTH - 1800):
        win = r.windows(rollup, now)
        names = ("24h", "7d", "30d") if hourly else ("1h", "24h", "7d", "30d")
        assert {name: round(100 * (win[name]["uptime"] or 0), 1) for name in names} == dict.fromkeys(names, 66.7)


def test_skipped_runs_count_neither_way_and_carry_no_duration() -> None:
    rollup = r.record(r.empty(), T0 + 10, r.OK, 1.0)
    rollup = r.record(rollup, T0 + 20, r.SKIPPED, 500.0)
    rollup = r.record(rollup, T0 + 30, r.FAILED, 1.0)
    win = r.windows(rollup, T0 + 40)
    assert win["1h"]["uptime"] == 0.5 and win["24h"]["durationP99"] == pytest.approx(1.0, rel=r.ALPHA)
    only_skips = r.record(r.empty(), T0, r.SKIPPED, 2.0)
    assert r.windows(only_skips, T0 + 1)["24h"] == {"uptime": None, "coverage": pytest.approx(1 / 24 / HOUR),
                                                    "durationP50": None, "durationP95": None, "durationP99": None}


def test_a_paused_hour_says_so_counts_neither_way_and_is_spanned() -> None:
    rollup = play(600, 6)  # 10:00..10:50
    rollup = r.paused(rollup, T0 + HOUR, T0 + 4 * HOUR)  # 11:00..13:59
    rollup = play(600, 6, outcomes(fail_every=2), start=T0 + 4 * HOUR, rollup=rollup)
    line = r.timeline(rollup, T0 + 5 * HOUR - 1, "24h")
    assert [(b["start"], b["ok"], b["failed"], b["paused"], b["coverage"]) for b in line[-5:]] == [
        (format_time(T0 + k * HOUR), *c) for k, c in enumerate(
            [(6, 0, 0, 1.0), (0, 0, 1, 1.0), (0, 0, 1, 1.0), (0, 0, 1, 1.0), (3, 3, 0, 1.0)])]
    win = r.windows(rollup, T0 + 5 * HOUR)
    assert win["24h"]["uptime"] == 0.75 and win["24h"]["coverage"] == pytest.approx(5 / 24)
    assert r.paused(rollup, T0, T0) is rollup  # an empty span marks nothing


def test_the_empty_hours_between_runs_on_time_are_spanned_and_a_longer_silence_is_not() -> None:
    daily = play(DAY, 8)
    assert r.windows(daily, T0 + 7 * DAY + 1)["7d"]["coverage"] == pytest.approx(1.0)
    unknown = r.empty()
    for k in range(8):
        unknown = r.record(unknown, T0 + k * DAY, r.OK, 1.0)  # interval not given: nothing to judge gaps by
    assert r.windows(unknown, T0 + 7 * DAY + 1)["7d"]["coverage"] == pytest.approx(7 / 168, abs=0.01)
    down = r.record(play(600, 6), T0 + 5 * HOUR, r.OK, 1.0, interval=600)  # 4 silent hours, 10-min check
    assert [h.hour - T0 // HOUR for h in down.hours] == [0, 5]


def test_an_empty_rollup_has_no_uptime_no_coverage_and_no_percentiles() -> None:
    win = r.windows(r.empty(), T0)
    assert all(w["uptime"] is None and w["coverage"] == 0.0 for w in win.values())
    assert win["7d"]["durationP95"] is None and "durationP50" not in win["30d"] and "durationP50" not in win["1h"]
    assert c.serialize(r.empty()) == {"v": 1, "hours": ""}
    assert c.parse({"v": 1, "hours": ""}) == (r.empty(), None)


def test_record_refuses_an_unknown_outcome_and_ignores_a_time_or_duration_that_is_not_a_number() -> None:
    with pytest.raises(ValueError):
        r.record(r.empty(), T0, "reported", 1.0)
    assert r.record(r.empty(), math.nan, r.OK, 1.0) == r.empty()
    rollup = r.record(r.record(r.empty(), T0, r.OK, math.nan), T0, r.FAILED, -5.0)
    assert counts(rollup) == [(T0 // HOUR, 1, 1, 0, False)] and rollup.hours[0].bins == ((0, 1),)


# --- timelines --------------------------------------------------------------------------------------------------

def test_timelines_are_hourly_for_a_day_and_a_week_and_daily_for_thirty_days_oldest_first(
        month_at_one_minute: Rollup) -> None:
    now = T0 + MONTH - 1
    day, week, month = (r.timeline(month_at_one_minute, now, w) for w in r.TIMELINES)
    assert (len(day), len(week), len(month)) == (24, 168, 30)
    assert day[0]["start"] == format_time(T0 + MONTH - DAY) and week[-1]["start"] == format_time(T0 + MONTH - HOUR)
    assert month[0]["start"] == "2026-12-02T00:00:00Z" and month[-1]["start"] == "2026-12-31T00:00:00Z"
    assert (month[0]["coverage"], month[-1]["coverage"]) == (1.0, 10 / 24)  # the last day is today, to 09:59
    assert sum(b["ok"] + b["failed"] + b["skipped"] for b in month) == 43_200 - 14 * 60  # not Dec 1, 10:00..
    assert all(set(b) == {"start", "ok", "failed", "skipped", "paused", "coverage", "durationP50", "durationP95"}
               for b in day + month)
    assert all(b["durationP50"] <= b["durationP95"] for b in day)
    with pytest.raises(ValueError, match="24h, 7d, 30d"):
        r.timeline(month_at_one_minute, now, "1h")


# --- percentiles ----------------------------------------------------------------------------------------------

DISTRIBUTIONS: dict[str, Callable[[random.Random], float]] = {
    "lognormal": lambda g: g.lognormvariate(math.log(2.0), 0.5),
    "uniform": lambda g: g.uniform(0.5, 30.0),
    "exponential": lambda g: g.expovariate(1 / 5.0),
    "bimodal": lambda g: g.gauss(1.0, 0.05) if g.random() < 0.9 else g.gauss(60.0, 5.0),
    "heavy tail": lambda g: 0.01 * g.paretovariate(1.2),
    "milliseconds": lambda g: g.uniform(0.001, 0.05),
    "constant": lambda g: 4.2,
}


def samples(name: str, n: int, seed: int = 11) -> list[float]:
    g = random.Random(seed)
    return [max(0.001, DISTRIBUTIONS[name](g)) for _ in range(n)]


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_percentiles_of_a_day_are_within_the_stated_error_of_the_exact_ones(name: str) -> None:
    values = samples(name, 1440)
    rollup = r.empty()
    for k, d in enumerate(values):
        rollup = r.record(rollup, T0 + 60 * k, r.OK if k % 5 else r.FAILED, d)
    win = r.windows(rollup, T0 + DAY)
    for p in (50, 95, 99):
        for window in ("24h", "7d"):
            assert relative_error(win[window][f"durationP{p}"], percentile(values, p)) <= r.ALPHA + 1e-9
    for k, bucket in enumerate(r.timeline(rollup, T0 + DAY - 1, "24h")):
        hour = values[60 * k:60 * (k + 1)]
        for p in (50, 95):
            assert relative_error(bucket[f"durationP{p}"], percentile(hour, p)) <= r.ALPHA + 1e-9


@pytest.mark.parametrize("level", [1, 2, 3])
def test_coarser_histograms_keep_their_own_stated_error(level: int) -> None:
    values = samples("lognormal", 600)
    fine = Hour(T0 // HOUR, ok=600, bins=r._with_bins((r.bin_index(d), 1) for d in values))
    hour = r._coarsen(fine, level)
    assert hour == Hour(T0 // HOUR, ok=600, bins=r._with_bins((r.bin_index(d, level), 1) for d in values), level=level)
    win = r.windows(Rollup((hour,)), T0 + HOUR)
    for p in (50, 95, 99):
        assert relative_error(win["24h"][f"durationP{p}"], percentile(values, p)) <= r.error_bound(level) + 1e-9
    assert [round(r.error_bound(k), 3) for k in range(5)] == [0.02, 0.04, 0.08, 0.159, 1.0]


@given(st.lists(st.floats(min_value=0.001, max_value=1e6), min_size=1, max_size=300), st.integers(1, 100))
def test_any_percentile_of_any_durations_is_within_two_percent(values: list[float], p: int) -> None:
    hour = Hour(T0 // HOUR, ok=len(values), bins=r._with_bins((r.bin_index(d), 1) for d in values))
    [got] = r._percentiles([(hour, 1.0)], [p])
    assert relative_error(got, percentile(values, p)) <= r.ALPHA + 1e-9


# --- the byte budget ------------------------------------------------------------------------------------------

def test_thirty_days_at_one_minute_fit_in_8_kib_with_the_newest_day_at_full_precision(
        month_at_one_minute: Rollup) -> None:
    value = c.serialize(month_at_one_minute)
    assert 6 * 1024 < size(value) <= r.BUDGET_BYTES
    back = roundtrip(month_at_one_minute)
    assert len(back.hours) == 720 and all(h.level == 0 for h in back.hours[-24:])
    assert [h.level for h in back.hours] == sorted((h.level for h in back.hours), reverse=True)  # older: coarser
    now = T0 + MONTH
    fine, packed = r.windows(month_at_one_minute, now), r.windows(back, now)
    for p in ("durationP50", "durationP95", "durationP99"):
        assert relative_error(packed["24h"][p], fine["24h"][p]) <= 2 * r.ALPHA
        coarsest = max(h.level for h in back.hours[-168:])
        assert relative_error(packed["7d"][p], fine["7d"][p]) <= 2 * r.error_bound(coarsest)
    assert roundtrip(back) == back  # what fits is written as it is: no further loss on the next write


def test_a_month_of_one_minute_runs_that_take_the_same_time_fits_whole_at_full_precision() -> None:
    steady = play(60, 43_200, outcomes(fail_every=17, skip_every=29), lambda g: 2.0)
    assert size(c.serialize(steady)) <= r.BUDGET_BYTES and roundtrip(steady) == steady


def test_a_value_just_over_its_budget_loses_precision_in_its_oldest_hours_only() -> None:
    rollup = play(600, 6 * 24 * 12, outcomes(fail_every=7))
    whole = size(c.serialize(rollup))
    assert whole <= r.BUDGET_BYTES and c.fit(rollup, whole) == rollup
    tight = c.fit(rollup, whole - 40)
    changed = [k for k, (a, b) in enumerate(zip(rollup.hours, tight.hours, strict=True)) if a != b]
    assert changed and changed == list(range(len(changed))) and len(changed) < len(rollup.hours) // 4
    assert all(tight.hours[k].level > 0 for k in changed) and counts(tight) == counts(rollup)
    assert size(c.serialize(tight)) <= whole - 40


@functools.cache
def worst_cases() -> dict[str, Rollup]:
    return dict(_worst_cases())


def _worst_cases() -> Iterator[tuple[str, Rollup]]:
    g = random.Random(5)
    base = T0 // HOUR

    def hour(k: int, big: bool) -> Hour:
        n = 2**31 - 1 if big else 3600
        bins = r._with_bins((g.randrange(r.MAX_INDEX + 1), g.randint(1, 5000)) for _ in range(200))
        return Hour(base + k, g.randint(1, n), g.randint(1, n), g.randint(1, n), k % 2 == 0, 0, bins)
    yield "every hour different, counts near the limit", Rollup(tuple(hour(k, True) for k in range(721)))
    yield "every hour different, a run a second", Rollup(tuple(hour(k, False) for k in range(721)))
    yield "every other hour, different", Rollup(tuple(hour(k, False) for k in range(0, 721, 2)))
    yield "30 days of 1-minute runs, durations spread wide", play(
        60, 43_200, outcomes(fail_every=3, skip_every=7), lambda g: g.lognormvariate(g.uniform(-5, 8), 2.0))


@pytest.mark.parametrize("name", ["every hour different, counts near the limit", "every hour different, a run a second",
                                  "every other hour, different", "30 days of 1-minute runs, durations spread wide"])
def test_the_worst_cases_never_exceed_8_kib_and_lose_durations_before_hours_and_old_hours_before_new(
        name: str) -> None:
    rollup = worst_cases()[name]
    back = roundtrip(rollup)
    assert back.hours and back.hours[-1] == r._coarsen(rollup.hours[-1], back.hours[-1].level)
    kept = {h.hour for h in back.hours}
    assert kept == {h.hour for h in rollup.hours if h.hour >= back.hours[0].hour}  # only the oldest go
    if len(back.hours) < len(rollup.hours):
        assert all(h.level == r.DROPPED for h in back.hours)
    assert counts(back) == [c for c in counts(rollup) if c[0] in kept]


# --- leaders, restarts, clocks --------------------------------------------------------------------------------

def test_a_new_leader_mid_hour_continues_from_the_stored_value_and_counts_each_run_once() -> None:
    one_leader = play(60, 90, outcomes(fail_every=4))
    first = c.serialize(play(60, 40, outcomes(fail_every=4)))  # the old leader's last write, 10:39
    stored, warning = c.parse(first)
    assert warning is None
    g = random.Random(7)
    for _ in range(40):
        g.lognormvariate(math.log(2.0), 0.3)  # the same durations as one leader had
    new_leader = stored
    for k in range(40, 90):
        new_leader = r.record(new_leader, T0 + 60 * k, outcomes(fail_every=4)(k), g.lognormvariate(math.log(2.0), 0.3),
                              interval=60)
    assert new_leader == one_leader
    assert r.merge(stored, new_leader) == new_leader == r.merge(new_leader, stored)  # stale + fresh: no doubling


def test_a_restart_reads_back_exactly_what_it_wrote() -> None:
    rollup = r.paused(play(600, 500, outcomes(fail_every=5, skip_every=9)), T0 + 100 * HOUR, T0 + 103 * HOUR)
    assert roundtrip(rollup) == rollup
    assert c.parse(json.loads(json.dumps(c.serialize(rollup)))) == (rollup, None)


def test_merge_keeps_per_hour_the_copy_with_more_runs_and_a_pause_from_either() -> None:
    stale = play(60, 90)
    fresh = play(60, 150)
    paused = r.paused(stale, T0 + 2 * HOUR, T0 + 3 * HOUR)
    merged = r.merge(paused, fresh)
    assert counts(merged) == [(T0 // HOUR, 60, 0, 0, False), (T0 // HOUR + 1, 60, 0, 0, False),
                              (T0 // HOUR + 2, 30, 0, 0, True)]
    assert merged == r.merge(fresh, paused) and r.merge(merged, merged) == merged
    assert r.merge(r.empty(), fresh) == fresh and r.merge(r.empty(), r.empty()) == r.empty()
    late = r.record(r.empty(), T0 + 40 * DAY, r.OK, 1.0)
    assert r.merge(fresh, late) == late  # the newer copy's 30 days decide what is kept


def test_trim_drops_hours_older_than_thirty_days_and_record_trims_too(month_at_one_minute: Rollup) -> None:
    assert r.trim(month_at_one_minute, T0 + MONTH) is month_at_one_minute
    later = r.trim(month_at_one_minute, T0 + MONTH + 5 * DAY)
    assert later.hours[0].hour == (T0 + 5 * DAY) // HOUR and len(later.hours) == 720 - 5 * 24
    assert r.trim(month_at_one_minute, T0 + 90 * DAY) == r.empty()
    assert r.trim(month_at_one_minute, T0) is month_at_one_minute  # hours after `now` stay
    grown = r.record(month_at_one_minute, T0 + MONTH + 2 * HOUR, r.OK, 1.0)
    assert grown.hours[-1].hour - grown.hours[0].hour == r.HOURS - 1


def test_a_clock_set_back_puts_a_run_in_its_own_hour_and_one_older_than_thirty_days_is_ignored() -> None:
    rollup = play(600, 60)  # 10:00 .. 19:50
    back = r.record(rollup, T0 + 3 * HOUR + 5, r.FAILED, 9.0)
    assert counts(back) == [(c[0], 6, 1, 0, False) if c[0] == T0 // HOUR + 3 else c for c in counts(rollup)]
    earlier = r.record(rollup, T0 - 2 * DAY, r.OK, 1.0)
    assert earlier.hours[0].hour == (T0 - 2 * DAY) // HOUR and earlier.hours[1:] == rollup.hours
    assert r.record(rollup, T0 + 10 * HOUR - 31 * DAY, r.OK, 1.0) == rollup
    assert r.windows(back, T0 + 4 * HOUR - 1)["24h"]["uptime"] == 24 / 25  # later hours are not in it yet
    assert roundtrip(earlier) == earlier


def test_a_clock_jumping_forward_trims_old_hours_and_coverage_says_so() -> None:
    rollup = play(600, 6 * 24 * 10)  # ten days
    jumped = r.record(rollup, T0 + 13 * DAY, r.OK, 1.0, interval=600)
    win = r.windows(jumped, T0 + 13 * DAY + 1800)
    assert win["24h"]["coverage"] == pytest.approx(0.5 / 24) and win["1h"]["coverage"] == pytest.approx(0.5)
    assert win["7d"]["coverage"] == pytest.approx(4 * 24 / 168)  # Dec 7, 10:30 .. Dec 11, 10:00
    assert win["30d"]["coverage"] == pytest.approx((10 * 24 + 0.5) / 720) and win["7d"]["uptime"] == 1.0
    far = r.record(rollup, T0 + 45 * DAY, r.FAILED, 1.0, interval=600)
    assert counts(far) == [((T0 + 45 * DAY) // HOUR, 0, 1, 0, False)]
    assert r.windows(far, T0 + 45 * DAY)["30d"]["coverage"] == 0.0


# --- nonsense -------------------------------------------------------------------------------------------------

def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


VALID = c.serialize(play(600, 30, outcomes(fail_every=2)))["hours"]
NONSENSE: dict[str, Any] = {
    "a list": [1, 2], "a string": VALID, "a number": 1, "a boolean": True, "an empty object": {},
    "no version": {"hours": VALID}, "version as text": {"v": "1", "hours": VALID},
    "version true": {"v": True, "hours": VALID}, "a later version": {"v": 2, "hours": VALID},
    "version 0": {"v": 0, "hours": VALID}, "hours a number": {"v": 1, "hours": 5},
    "hours null": {"v": 1, "hours": None}, "bad base64": {"v": 1, "hours": "***"},
    "bad padding": {"v": 1, "hours": VALID[:-1]}, "not ascii": {"v": 1, "hours": "é" * 8},
    "too long": {"v": 1, "hours": "A" * (c._MAX_INPUT + 4)},
    "truncated": {"v": 1, "hours": b64(base64.b64decode(VALID)[:-1])},
    "hours out of order": {"v": 1, "hours": b64(bytes([0x80, 0x80, 0x20, 0, 1, 1, 0, 1, 1]))},
    "a zero count flagged": {"v": 1, "hours": b64(bytes([5, 0, 1, 0]))},
    "an unknown level": {"v": 1, "hours": b64(bytes([5, 0, 0x50]))},
    "a histogram past its last bin": {"v": 1, "hours": b64(bytes([5, 0, 0x81, 1, 2, 0xFE, 0x08, 1, 0x11]))},
    "more than 30 days": {"v": 1, "hours": b64(bytes([5, 0, 1, 1, 0xD1, 0x05, 1, 1]))},
    "trailing garbage": {"v": 1, "hours": b64(base64.b64decode(VALID) + b"\xff")},
    "an endless number": {"v": 1, "hours": b64(b"\xff" * 12)},
}


@pytest.mark.parametrize("name", sorted(NONSENSE))
def test_nonsense_in_the_state_object_reads_as_empty_with_a_warning(name: str) -> None:
    rollup, warning = c.parse(NONSENSE[name])
    assert rollup == r.empty() and warning and "uptime rollup" in warning


def test_no_rollup_yet_reads_as_empty_without_a_warning_and_the_valid_sample_reads() -> None:
    assert c.parse(None) == (r.empty(), None)
    assert c.parse({"v": 1, "hours": VALID})[1] is None


def check_invariants(rollup: Rollup) -> None:
    hours = [h.hour for h in rollup.hours]
    assert hours == sorted(set(hours)) and (not hours or hours[-1] - hours[0] < r.HOURS)
    assert size(c.serialize(rollup)) <= r.BUDGET_BYTES
    r.windows(rollup, T0)
    r.timeline(rollup, T0, "30d")


def test_random_bytes_and_mutated_values_never_raise_and_never_read_as_a_broken_rollup() -> None:
    g = random.Random(2026)
    valid = base64.b64decode(c.serialize(play(600, 500, outcomes(fail_every=3, skip_every=5)))["hours"])
    for i in range(3000):
        if i % 3 == 0:
            text = "".join(g.choice("AZaz09+/=_-é \n") for _ in range(g.randrange(60)))
        elif i % 3 == 1:
            text = b64(bytes(g.randrange(256) for _ in range(g.randrange(40))))
        else:
            mutated = bytearray(valid)
            for _ in range(g.randint(1, 4)):
                mutated[g.randrange(len(mutated))] = g.randrange(256)
            text = b64(bytes(mutated[:g.randint(0, len(mutated))] if g.random() < 0.3 else mutated))
        rollup, warning = c.parse({"v": 1, "hours": text})
        assert warning is None or rollup == r.empty()
        check_invariants(rollup)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
                    max_leaves=12)


@given(st.one_of(JSON, st.fixed_dictionaries({"v": JSON, "hours": JSON}),
                 st.fixed_dictionaries({"v": st.just(1), "hours": st.binary(max_size=64).map(b64)})))
def test_whatever_json_the_state_object_holds_reads_without_an_exception(raw: Any) -> None:
    rollup, warning = c.parse(raw)
    assert warning is None or (rollup == r.empty() and warning.startswith("the stored uptime rollup"))
    check_invariants(rollup)
