"""The dashboard's presentation rules (web/dashboard/view.py): times, durations, the history strip, rows and
their order, the filter, and which rows a poll must be sent. Pure functions; no Flask."""
from __future__ import annotations

from typing import Any

import pytest

from kuberhealthy.base.times import format_time
from kuberhealthy.web.dashboard import rows as dashview
from kuberhealthy.web.dashboard.changelog import ChangeLog, Delta
from kuberhealthy.web.dashboard.rows import Filter, countdown, duration_text, relative

NOW = 1_800_000_000.0


def entry(ok: bool | None, minutes_ago: int = 1, outcome: str = "reported") -> dict[str, Any]:
    return {"uuid": f"u-{minutes_ago}", "start": format_time(NOW - 60 * minutes_ago), "duration": "1.5s", "OK": ok,
            "errors": [] if ok is not False else ["boom"], "node": "n", "pod": "p", "outcome": outcome}


def view(name: str, state: str = "ok", namespace: str = "ns-a", kind: str = "check", **over: Any) -> dict[str, Any]:
    v: dict[str, Any] = {"namespace": namespace, "name": name, "kind": kind, "state": state, "interval": 60.0,
                         "timeout": 30.0, "runDuration": 1.5, "lastRun": format_time(NOW - 30),
                         "nextRun": format_time(NOW + 30), "errors": ["disk full"] if state == "failing" else [],
                         "consecutiveFailures": 1 if state == "failing" else 0, "currentRun": None, "history": []}
    v.update(over)
    return v


@pytest.mark.parametrize(("ago", "text"), [(0, "just now"), (4, "just now"), (40, "40 s ago"), (125, "2 min ago"),
                                           (3 * 3600 + 5, "3 h ago"), (2 * 86400, "2 d ago")])
def test_a_past_time_reads_as_people_say_it(ago: float, text: str) -> None:
    assert relative(NOW - ago, NOW) == text


def test_a_time_never_seen_reads_never() -> None:
    assert relative(None, NOW) == "never"


@pytest.mark.parametrize(("ahead", "text"), [(40, "in 40 s"), (245, "in 4 min 5 s"), (720, "in 12 min"),
                                             (0, "due now"), (-30, "due now"), (7200, "in 2 h")])
def test_a_countdown_shows_seconds_under_ten_minutes_and_due_now_once_passed(ahead: float, text: str) -> None:
    assert countdown(NOW + ahead, NOW) == text


@pytest.mark.parametrize(("seconds", "text"), [(0.85, "850 ms"), (1.234, "1.2 s"), (30.0, "30 s"), (123, "2 min 3 s"),
                                               (300, "5 min"), (3720, "1 h 2 min"), (None, "\u2014")])
def test_durations_read_in_the_unit_that_fits(seconds: float | None, text: str) -> None:
    assert duration_text(seconds) == text


def test_the_strip_runs_oldest_to_newest_in_runs_of_equal_marks_with_a_spoken_summary() -> None:
    history = [entry(False, 1), entry(False, 2), entry(None, 3, outcome="skipped"), entry(True, 4), entry(True, 5)]
    s = dashview.strip(history)  # history is newest first
    assert [(m.kind, m.count) for m in s.marks] == [("o", 2), ("s", 1), ("f", 2)]
    assert "".join(m.glyphs for m in s.marks) == "\u2713\u2713\u2013\u2717\u2717"  # shapes, not only colours
    assert s.label == "last 5 runs: 2 passed, 2 failed, 1 skipped; newest failed"
    assert dashview.strip([]).label == "no runs kept"


def test_rows_are_grouped_by_namespace_failing_groups_first_and_failing_rows_first() -> None:
    rows = [dashview.row(v, NOW) for v in (
        view("b-ok", namespace="alpha"), view("a-never", "never-run", namespace="alpha"),
        view("z-fail", "failing", namespace="zulu"), view("a-ok", namespace="zulu"),
        view("m-fail", "failing", namespace="mike"))]
    groups = dashview.groups(rows)
    assert [g.namespace for g in groups] == ["mike", "zulu", "alpha"]
    assert [r.name for r in groups[1].rows] == ["z-fail", "a-ok"]
    assert [r.name for r in groups[2].rows] == ["a-never", "b-ok"]
    assert groups[1].summary == "2 checks, 1 failing"


def test_a_row_says_what_a_person_on_call_needs() -> None:
    r = dashview.row(view("dns", "failing", errors=["x" * 400, "second"], currentRun={"phase": "Running"},
                          history=[entry(False), entry(True, 2)]), NOW)
    assert (r.id, dashview.STATE_TEXT[r.state], r.running, r.last_run_text, r.next_run_text) == (
        "check:ns-a/dns", "Failing", "Running", "30 s ago", "in 30 s")
    assert len(r.first_error) == dashview.ERROR_CHARS and r.first_error.endswith("\u2026") and r.error_count == 2
    assert r.consecutive_failures == 1 and r.duration_text == "1.5 s"


def test_a_job_row_shows_its_phase_instead_of_a_next_run() -> None:
    r = dashview.row(view("once", kind="job", interval=None, nextRun=None, phase="Completed"), NOW)
    assert (r.phase, r.next_run, r.next_run_text) == ("Completed", None, "")


def test_the_filter_matches_namespace_state_and_text_in_the_name_or_first_error() -> None:
    fail = dashview.row(view("web", "failing", errors=["Connection REFUSED"]), NOW)
    ok = dashview.row(view("dns", namespace="ns-b"), NOW)
    assert Filter.of({"q": "refused"}).matches(fail) and not Filter.of({"q": "refused"}).matches(ok)
    assert Filter.of({"q": "ns-b/d"}).matches(ok)
    assert Filter.of({"ns": "ns-b"}).matches(ok) and not Filter.of({"ns": "ns-b"}).matches(fail)
    assert Filter.of({"state": "failing"}).matches(fail) and not Filter.of({"state": "failing"}).matches(ok)
    empty = Filter.of({"state": "bogus"})
    assert empty == Filter() and not (empty.text or empty.namespace or empty.state)


def test_the_banner_counts_failing_never_run_and_running() -> None:
    views = [view("a"), view("b", "failing"), view("c", "never-run", currentRun={"phase": "Pending"})]
    s = dashview.banner(views, "kh-0")
    assert (s.total, s.failing, s.never_run, s.running, s.healthy, s.headline) == (3, 1, 1, 1, False, "1 of 3 failing")
    assert dashview.banner([view("a"), view("b")], "").headline == "All 2 OK"
    assert dashview.banner([], "").headline == "No checks yet"


def test_a_poll_is_told_only_the_rows_changed_or_removed_since_its_token() -> None:
    log = ChangeLog()
    first = log.observe({"check:a/x": ("1",), "check:a/y": ("1",)}, "kh-0")
    assert log.observe({"check:a/x": ("1",), "check:a/y": ("1",)}, "kh-0") == first  # nothing new
    second = log.observe({"check:a/x": ("2",), "check:a/y": ("1",)}, "kh-0")
    assert second != first
    delta = log.since(first)
    assert (delta.token, delta.full, delta.changed, delta.removed) == (second, False, ["check:a/x"], [])
    third = log.observe({"check:a/x": ("2",)}, "kh-0")
    assert log.since(first).changed == ["check:a/x"] and log.since(first).removed == ["check:a/y"]
    assert log.since(third) == Delta(third, False, [], [])
    assert log.unchanged(third) and not log.unchanged(second)


def test_a_token_from_another_process_or_older_than_the_removals_kept_gets_everything() -> None:
    log = ChangeLog(keep=1)
    t0 = log.observe({"check:a/x": 1, "check:a/y": 1, "check:a/z": 1}, "")
    log.observe({"check:a/x": 1, "check:a/y": 1}, "")
    t2 = log.observe({"check:a/x": 1}, "")  # the first removal is forgotten
    assert log.since(t0).full and log.since(t0).changed == ["check:a/x"]
    assert not log.since(t2).full
    other = ChangeLog()  # another epoch: a restart, or another replica
    other.observe({"check:a/x": 2}, "")
    assert other.since(t2).full
    assert log.since("garbage").full


def test_another_replica_knows_a_token_that_names_the_same_state() -> None:
    mine, theirs = ChangeLog(), ChangeLog()
    theirs.observe({"check:a/x": 1}, "kh-0")
    theirs.observe({"check:a/x": ("rv", 2)}, "kh-0")
    token = mine.observe({"check:a/x": ("rv", 2)}, "kh-0")
    held = theirs.observe({"check:a/x": ("rv", 2)}, "kh-0")
    assert token != held and mine.unchanged(held) and theirs.unchanged(token)
    assert mine.since(held) == Delta(token, False)  # nothing to send
    theirs.observe({"check:a/x": ("rv", 3)}, "kh-0")
    assert not mine.unchanged(theirs.observe({"check:a/x": ("rv", 3)}, "kh-0"))


def test_a_new_master_is_a_new_generation() -> None:
    log = ChangeLog()
    t = log.observe({"check:a/x": 1}, "kh-0")
    assert log.observe({"check:a/x": 1}, "kh-1") != t
