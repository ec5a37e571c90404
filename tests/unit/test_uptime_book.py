"""The uptime rollup's write path: what a run's write adds, what waits for the next one, the memo."""
from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kuberhealthy.records import rollcodec, rollups
from kuberhealthy.records.uptime import FIELD, PENDING_LIMIT, RollupBook

KEY = "khstates/ns/check"
T0 = 1_800_000_000.0  # unix seconds, on an hour
HOUR = 3600.0


def write(book: RollupBook, spec: dict[str, Any], now: float, outcome: str | None, duration: float | None = 1.0,
          interval: float | None = 60.0, done: bool = True) -> str | None:
    w = book.write(KEY, now, interval)
    w.apply(spec, outcome, duration)
    if done:
        w.done()
    return w.warning


def stored(spec: dict[str, Any]) -> rollups.Rollup:
    rollup, warning = rollcodec.parse(spec[FIELD])
    assert warning is None
    return rollup


def totals(rollup: rollups.Rollup) -> tuple[int, int, int]:
    return (sum(h.ok for h in rollup.hours), sum(h.failed for h in rollup.hours),
            sum(h.skipped for h in rollup.hours))


def test_a_write_puts_the_run_in_its_hour_and_the_value_is_what_serialize_gives() -> None:
    book, spec = RollupBook(), {}
    write(book, spec, T0 + 10, rollups.OK, 2.0)
    write(book, spec, T0 + 70, rollups.FAILED, 3.0)
    expected = rollups.record(rollups.record(rollups.empty(), T0 + 10, rollups.OK, 2.0, interval=60.0),
                              T0 + 70, rollups.FAILED, 3.0, interval=60.0)
    assert spec[FIELD] == rollcodec.serialize(expected)
    assert totals(stored(spec)) == (1, 1, 0)


def test_skipped_runs_wait_for_the_next_write_and_are_dropped_only_once_it_succeeded() -> None:
    book, spec = RollupBook(), {}
    book.skipped(KEY, T0 + 5)
    write(book, spec, T0 + 65, rollups.OK, done=False)  # a write that did not go through
    assert book.pending(KEY).skipped == (T0 + 5,)
    spec = {}
    write(book, spec, T0 + 125, rollups.OK)
    assert totals(stored(spec)) == (1, 0, 1)
    assert book.pending(KEY).skipped == ()
    write(book, spec, T0 + 185, rollups.OK)
    assert totals(stored(spec)) == (2, 0, 1)  # counted once


def test_a_skip_that_arrives_while_a_write_is_in_flight_stays_for_the_one_after() -> None:
    book, spec = RollupBook(), {}
    w = book.write(KEY, T0 + 60, 60.0)
    book.skipped(KEY, T0 + 61)
    w.apply(spec, rollups.OK, 1.0)
    w.done()
    assert book.pending(KEY).skipped == (T0 + 61,)


def test_a_write_with_no_judged_run_still_carries_what_was_pending() -> None:
    book, spec = RollupBook(), {}
    book.skipped(KEY, T0 + 5)
    write(book, spec, T0 + 65, None)
    assert totals(stored(spec)) == (0, 0, 1)


def test_paused_time_marks_its_hours_paused_and_they_count_neither_way() -> None:
    book, spec = RollupBook(), {}
    write(book, spec, T0 + 10, rollups.OK)
    book.paused(KEY, T0 + HOUR, T0 + 4 * HOUR)
    write(book, spec, T0 + 4 * HOUR + 30, rollups.OK)
    rollup = stored(spec)
    assert [h.paused for h in rollup.hours] == [False, True, True, True, False]
    assert totals(rollup) == (2, 0, 0)
    assert rollups.windows(rollup, T0 + 4 * HOUR + 60)["24h"]["uptime"] == 1.0


def test_pending_skips_are_bounded() -> None:
    book = RollupBook()
    for i in range(PENDING_LIMIT + 50):
        book.skipped(KEY, T0 + i)
    assert len(book.pending(KEY).skipped) == PENDING_LIMIT


def test_a_value_edited_into_nonsense_starts_afresh_with_a_warning_and_never_raises() -> None:
    book = RollupBook()
    for junk in ({"v": 1, "hours": "%%%"}, {"v": 99, "hours": ""}, "a string", [1, 2],
                 {"v": 1, "hours": "AAAA" * 9000}):
        spec: dict[str, Any] = {FIELD: junk}
        warning = write(book, spec, T0 + 10, rollups.OK)
        assert warning and "starts afresh" in warning
        assert totals(stored(spec)) == (1, 0, 0)


def test_a_value_this_process_wrote_is_not_parsed_again_but_one_written_elsewhere_is() -> None:
    book, spec = RollupBook(), {}
    for i in range(5):
        write(book, spec, T0 + 60 * i, rollups.OK)
    assert book.memo.parses == 0
    other = rollups.record(stored(spec), T0 + 400, rollups.FAILED, 1.0)  # another leader's write
    spec[FIELD] = rollcodec.serialize(other)
    write(book, spec, T0 + 460, rollups.OK)
    assert book.memo.parses == 1
    assert totals(stored(spec)) == (6, 1, 0)


def test_thirty_days_of_one_minute_runs_stay_within_the_byte_budget_through_every_write() -> None:
    book, spec = RollupBook(), {}
    rng = random.Random(7)
    t = T0
    biggest = 0
    while t < T0 + 31 * 24 * HOUR:
        write(book, spec, t, rollups.OK if rng.random() > 0.05 else rollups.FAILED, rng.uniform(0.5, 4.0))
        biggest = max(biggest, len(json.dumps(spec[FIELD], separators=(",", ":"))))
        t += 60
    assert biggest <= rollups.BUDGET_BYTES
    rollup = stored(spec)
    assert rollup.hours[-1].hour - rollup.hours[0].hour < rollups.HOURS
    up = rollups.windows(rollup, t)["30d"]["uptime"]
    assert up is not None and 0.93 < up < 0.97


runs = st.lists(st.tuples(st.floats(0, 5 * HOUR), st.sampled_from([rollups.OK, rollups.FAILED, rollups.SKIPPED]),
                          st.floats(0.001, 100.0)), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(runs)
def test_writing_incrementally_gives_the_same_value_as_serializing_from_scratch(steps: list[Any]) -> None:
    book, spec = RollupBook(), {}
    rollup = rollups.empty()
    now = T0
    for gap, outcome, duration in steps:
        now += gap
        if outcome == rollups.SKIPPED:
            book.skipped(KEY, now)
            rollup = rollups.record(rollup, now, outcome, None, interval=60.0)
            continue
        write(book, spec, now, outcome, duration)
        rollup = rollups.trim(rollups.record(rollup, now, outcome, duration, interval=60.0), now)
        assert spec[FIELD] == rollcodec.serialize(rollup)
