"""What the web reads of the rollups: a summary plus the newest hour gives exactly what the whole rollup
gives, and a run in the same hour is read by decoding that hour alone (web/uptime.py)."""
from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kuberhealthy.kube import Obj
from kuberhealthy.records import rollcodec, rollups
from kuberhealthy.records.uptime import FIELD, RollupBook
from kuberhealthy.web.uptime import DECODES_PER_SECOND, FRESH, Uptime, state_key
from testbed.fakes.world import month_of_runs

T0 = 1_800_000_000.0  # on an hour
HOUR = 3600.0


class States:
    """A state cache: what Uptime reads (get)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Obj] = {}

    def get(self, namespace: str, name: str) -> Obj | None:
        return self.objects.get((namespace, name))

    def put(self, spec: dict[str, Any], name: str = "c") -> None:
        self.objects[("ns", name)] = {"metadata": {"namespace": "ns", "name": name}, "spec": dict(spec)}


def close(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The same figures, floats within rounding (sums taken in another order)."""
    if a.keys() != b.keys():
        return False
    for k, x in a.items():
        y = b[k]
        if isinstance(x, dict):
            if not close(x, y):
                return False
        elif isinstance(x, float) and isinstance(y, float):
            if x != pytest.approx(y, rel=1e-9, abs=1e-12):
                return False
        elif x != y:
            return False
    return True


def random_rollup(rng: random.Random, end: float, hours: int) -> rollups.Rollup:
    rollup, t = rollups.empty(), end - hours * HOUR
    while t < end:
        kind = rng.choice([rollups.OK] * 8 + [rollups.FAILED, rollups.SKIPPED])
        rollup = rollups.record(rollup, t, kind, rng.lognormvariate(0, 1) if kind != rollups.SKIPPED else None,
                                interval=rng.choice([60.0, 600.0, None]))
        if rng.random() < 0.01:
            rollup = rollups.paused(rollup, t, t + rng.uniform(0, 5 * HOUR))
        t += rng.choice([30.0, 60.0, 300.0, 3 * HOUR])
    return rollup


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 800), st.floats(0.0, 0.999), st.sampled_from([0, 0, 1, 5, 30, 800]))
def test_windows_from_a_summary_and_the_current_hour_equal_windows_of_the_whole_rollup(
        seed: int, hours: int, into_hour: float, later: int) -> None:
    """`later` hours after the newest bucket (0: now is in its hour): the same figures either way."""
    rng = random.Random(seed)
    rollup = random_rollup(rng, T0 + 0.5 * HOUR, hours)
    hour = rollup.hours[-1].hour + later
    summary = rollups.summarize(rollup, hour, days=True)
    current = rollup.hours[-1] if later == 0 else None
    now = (hour + into_hour) * HOUR
    fast = rollups.windows_at(summary, current, now)
    assert fast is not None and close(fast, rollups.windows(rollup, now))
    days = rollups.days_at(summary, current, now)
    assert days is not None and close({"d": days}, {"d": rollups.timeline(rollup, now, "30d")})


def test_a_summary_is_not_used_outside_its_hour() -> None:
    rollup = rollups.record(rollups.empty(), T0 + 10, rollups.OK, 1.0)
    summary = rollups.summarize(rollup, rollup.hours[-1].hour, days=True)
    assert rollups.windows_at(summary, rollup.hours[-1], T0 + HOUR + 1) is None
    assert rollups.days_at(summary, rollup.hours[-1], T0 + HOUR + 1) is None


def test_a_check_that_has_not_run_this_hour_is_decoded_once_in_the_hour_not_at_every_read() -> None:
    clock = [T0 + 60.0]
    states = States()
    states.put({FIELD: month_of_runs(T0)})  # the newest bucket is the hour before T0
    uptime = Uptime(states, wall=lambda: clock[0], clock=lambda: clock[0] * 1000)  # FRESH never holds
    for i in range(10):
        clock[0] = T0 + 60.0 + 300 * i
        assert close(uptime.windows("check", "ns", "c"),
                     rollups.windows(rollcodec.parse(month_of_runs(T0))[0], clock[0]))
    assert uptime.decodes == 1


def test_runs_in_the_same_hour_are_read_without_decoding_the_month_again() -> None:
    clock = [T0 + 60.0]
    states, book = States(), RollupBook()
    spec: dict[str, Any] = {FIELD: month_of_runs(T0)}
    uptime = Uptime(states, wall=lambda: clock[0], clock=lambda: clock[0] * 1000)  # FRESH never holds
    key = state_key("check", "ns", "c")
    for i in range(20):
        clock[0] = T0 + 60.0 * (i + 1) + 5
        w = book.write(key, clock[0], 60.0)
        w.apply(spec, rollups.OK if i % 3 else rollups.FAILED, 1.0 + i / 10)
        w.done()
        states.put(spec)
        got = uptime.windows("check", "ns", "c")
        whole = rollups.windows(rollcodec.parse(spec[FIELD])[0], clock[0])
        assert close(got, whole)
        days = uptime.timeline("check", "ns", "c", "30d")
        assert close({"d": days}, {"d": rollups.timeline(rollcodec.parse(spec[FIELD])[0], clock[0], "30d")})
    assert uptime.decodes <= 3  # the first read, the first 30-day timeline, the new hour's first run
    assert book.memo.parses == 1  # the seeded value; then every write extended its Tail


def test_a_value_written_by_someone_else_is_decoded_whole_and_read_right() -> None:
    states = States()
    rng = random.Random(3)
    uptime = Uptime(states, wall=lambda: T0 + 1800, clock=lambda: rng.random() * 1e9)
    first = random_rollup(rng, T0 + 1700, 50)
    states.put({FIELD: rollcodec.serialize(first)})
    uptime.windows("check", "ns", "c")
    other = random_rollup(rng, T0 + 1750, 40)
    states.put({FIELD: rollcodec.serialize(other)})
    assert close(uptime.windows("check", "ns", "c"), rollups.windows(other, T0 + 1800))


def test_a_state_without_rollups_or_with_nonsense_reads_as_no_runs() -> None:
    states = States()
    uptime = Uptime(states, wall=lambda: T0)
    states.put({"OK": True})
    assert uptime.windows("check", "ns", "c")["30d"] == {"uptime": None, "coverage": 0.0}
    states.put({FIELD: {"v": 1, "hours": "%%"}}, name="d")
    assert uptime.windows("check", "ns", "d")["24h"]["uptime"] is None
    assert [b["ok"] for b in uptime.timeline("check", "ns", "d", "30d")] == [0] * 30
    with pytest.raises(ValueError, match="24h, 7d, 30d"):
        uptime.timeline("check", "ns", "d", "1y")


def test_when_the_hour_turns_one_listing_decodes_at_most_a_seconds_budget_and_serves_the_rest_as_they_were() -> None:
    wall, mono = [T0 + 60.0], [0.0]
    states = States()
    value = month_of_runs(T0)
    for i in range(150):
        states.put({FIELD: value}, name=f"c{i}")
    uptime = Uptime(states, wall=lambda: wall[0], clock=lambda: mono[0])
    first = [uptime.windows("check", "ns", f"c{i}") for i in range(150)]
    assert uptime.decodes == 150  # none had figures yet: every one is made
    wall[0], mono[0] = T0 + HOUR + 60.0, mono[0] + 2 * FRESH  # the next hour; all due again
    again = [uptime.windows("check", "ns", f"c{i}") for i in range(150)]
    made = uptime.decodes - 150
    assert made == DECODES_PER_SECOND
    assert [a is b for a, b in zip(again, first, strict=True)].count(True) == 150 - made  # served as they were
    mono[0] += 1.0  # a second later the budget is back
    rest = [uptime.windows("check", "ns", f"c{i}") for i in range(150)]
    assert uptime.decodes == 300
    assert all(close(r, rollups.windows(rollcodec.parse(value)[0], wall[0])) for r in rest)
