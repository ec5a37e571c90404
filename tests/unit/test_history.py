"""The khstate history, counters and statistics (kuberhealthy/records/history.py) and the probe khstate of
the CRD check (outputs/schemacheck.py): pure functions, no I/O but the chart's CRD file, which the written
keys must validate against."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kuberhealthy.base.times import format_time
from kuberhealthy.outputs.schemacheck import PROBE_NAME_PREFIX, consequences, probe_body, pruned_fields
from kuberhealthy.records import history as h
from kuberhealthy.records.history import RunFacts, RunRecord
from testbed.fakes.readouts import stats_json

T0 = 1_796_119_200.0  # 2026-12-01T10:00:00Z
ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "helm" / "kuberhealthy" / "crds" / "comcast.github.io_khstates.yaml"
REASON = "timed out waiting for checker pod to report in"
NASTY = "<&>\"\\\u2028é€😀\x01\n"  # what costs most in Go's JSON: escapes, 4-byte characters


def base_spec() -> dict[str, Any]:
    return {"OK": True, "Errors": [], "RunDuration": "", "Namespace": "ns", "Node": "", "LastRun": None,
            "AuthoritativePod": "kh-0", "uuid": "u"}


def ok(i: int, **kw: Any) -> RunRecord:
    return RunRecord.reported(RunFacts(f"run-{i}", T0 + 60 * i, 1.5, "node-1", f"check-{i}"),
                              {"OK": True, "Errors": []}, **kw)


def bad(i: int, errors: tuple[str, ...] = ("checker says no",), **kw: Any) -> RunRecord:
    return RunRecord.reported(RunFacts(f"run-{i}", T0 + 60 * i, 2.0, "node-1", f"check-{i}"),
                              {"OK": False, "Errors": list(errors)}, **kw)


def failed(i: int, **kw: Any) -> RunRecord:
    return RunRecord.failed(RunFacts(f"run-{i}", T0 + 60 * i, 300.0, "node-2", f"check-{i}"), REASON,
                            [f"Check execution error: ns/check: {REASON}"], **kw)


def skipped(i: int) -> RunRecord:
    return RunRecord.skipped(RunFacts(f"run-{i}", T0 + 60 * i, 0.25))


def play(records: list[RunRecord], length: int = h.HISTORY_LENGTH, spec: dict[str, Any] | None = None,
         **kw: Any) -> dict[str, Any]:
    spec = spec if spec is not None else base_spec()
    for r in records:
        spec.update(h.apply_run(spec, r, length, r.start + r.duration, **kw))
    return spec


def added(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: spec[k] for k in h.ADDED_KEYS if k in spec}


# --- counters ------------------------------------------------------------------------------------------------

def test_counters_follow_a_mix_of_outcomes_and_a_skip_neither_breaks_nor_extends_a_streak() -> None:
    spec = play([ok(0), bad(1), failed(2), skipped(3), bad(4), ok(5), failed(6), skipped(7)])
    assert (spec["successCount"], spec["failureCount"], spec["consecutiveFailures"]) == (2, 4, 1)
    assert spec["lastOK"] == format_time(T0 + 300 + 1.5)
    assert spec["lastFailure"] == format_time(T0 + 360 + 300)
    streak = play([bad(0), skipped(1), failed(2)])
    assert streak["consecutiveFailures"] == 2


def test_a_first_run_starts_the_counters_from_zero_and_sets_only_its_own_timestamp() -> None:
    keys = h.apply_run(base_spec(), ok(0), 24, T0)
    assert keys["successCount"] == 1 and keys["failureCount"] == 0 and keys["consecutiveFailures"] == 0
    assert keys["lastOK"] == "2026-12-01T10:00:00Z" and "lastFailure" not in keys
    assert set(keys) <= set(h.ADDED_KEYS)


def test_a_skipped_run_changes_no_counter_and_no_timestamp() -> None:
    spec = play([ok(0), bad(1)])
    before = {k: spec[k] for k in ("successCount", "failureCount", "consecutiveFailures", "lastOK", "lastFailure")}
    after = h.apply_run(spec, skipped(2), 24, T0 + 9999)
    assert {k: after[k] for k in before} == before


def test_the_same_run_applied_twice_counts_once() -> None:
    spec = play([ok(0), bad(1)])
    again = play([bad(1)], spec=copy.deepcopy(spec))
    assert added(again) == added(spec)


def test_apply_run_returns_new_keys_and_leaves_the_spec_alone() -> None:
    spec = play([bad(0, logs="a log")])
    frozen = copy.deepcopy(spec)
    h.apply_run(spec, failed(1, logs="x"), 24, T0 + 999)
    assert spec == frozen


def test_junk_counters_in_a_hand_edited_khstate_count_as_zero() -> None:
    spec = {**base_spec(), "successCount": "many", "failureCount": -3, "consecutiveFailures": True,
            "lastOK": "not a time", "history": ["junk", {"uuid": 7}]}
    keys = h.apply_run(spec, ok(0), 24, T0)
    assert (keys["successCount"], keys["failureCount"], keys["consecutiveFailures"]) == (1, 0, 0)
    assert [e["uuid"] for e in keys["history"]] == ["run-0", "7"]


# --- history ---------------------------------------------------------------------------------------------------

def test_a_history_entry_holds_every_field_of_the_run() -> None:
    (entry,) = h.apply_run(base_spec(), failed(0, logs="line 1\nline 2\n"), 24, T0)["history"]
    assert entry == {"uuid": "run-0", "start": "2026-12-01T10:00:00Z", "duration": "5m0s", "OK": False,
                     "errors": [f"Check execution error: ns/check: {REASON}"], "node": "node-2", "pod": "check-0",
                     "outcome": f"failed: {REASON}", "logs": "line 1\nline 2"}


def test_durations_are_go_strings_in_milliseconds_and_a_skip_has_no_verdict() -> None:
    r = RunRecord.reported(RunFacts("r", T0, 1.2345678, "n", "p"), {"OK": True, "Errors": []})
    assert h.apply_run({}, r, 24, T0)["history"][0]["duration"] == "1.235s"
    (entry,) = h.apply_run({}, skipped(0), 24, T0)["history"]
    assert entry["OK"] is None and entry["outcome"] == "skipped" and entry["errors"] == [] and "logs" not in entry


def test_history_is_newest_first_and_capped_at_history_length() -> None:
    spec = play([ok(i) for i in range(30)], length=5)
    assert [e["uuid"] for e in spec["history"]] == [f"run-{i}" for i in (29, 28, 27, 26, 25)]
    assert spec["successCount"] == 30
    shorter = play([ok(30)], length=2, spec=spec)
    assert [e["uuid"] for e in shorter["history"]] == ["run-30", "run-29"]


def test_history_length_zero_keeps_counting_and_clears_an_old_history() -> None:
    spec = play([ok(0), bad(1)])
    spec = play([failed(2), ok(3)], length=0, spec=spec)
    assert spec["history"] == []
    assert (spec["successCount"], spec["failureCount"], spec["consecutiveFailures"]) == (2, 2, 0)


def test_only_failed_runs_keep_logs_and_only_the_newest_three_failures() -> None:
    spec = play([bad(0, logs="l0"), ok(1, logs="ok log"), failed(2, logs="l2"), skipped(3), bad(4, logs="l4"),
                 failed(5, logs="l5"), bad(6)])
    logs = {e["uuid"]: e.get("logs") for e in spec["history"]}
    assert logs == {"run-6": None, "run-5": "l5", "run-4": "l4", "run-3": None, "run-2": "l2", "run-1": None,
                    "run-0": None}


def test_capture_logs_off_writes_no_tails_and_drops_the_old_ones() -> None:
    spec = play([failed(0, logs="secret")])
    spec = play([failed(1, logs="more")], spec=spec, capture_logs=False)
    assert all("logs" not in e for e in spec["history"])


def test_an_unreadable_log_is_recorded_as_such() -> None:
    (entry,) = h.apply_run({}, failed(0, logs=h.log_unavailable("pods/log: forbidden")), 24, T0)["history"]
    assert entry["logs"] == "(log not available: pods/log: forbidden)"


def test_each_error_is_capped_and_a_long_list_says_how_many_more() -> None:
    (entry,) = h.apply_run({}, bad(0, errors=tuple("x" * 2000 for _ in range(8))), 24, T0)["history"]
    assert len(entry["errors"]) == h.ERRORS_PER_ENTRY + 1
    assert all(len(e) == h.ERROR_CHARS and e.endswith("...") for e in entry["errors"][:-1])
    assert entry["errors"][-1] == "... and 3 more errors"


def test_the_current_result_keeps_its_errors_as_reported() -> None:
    spec = base_spec() | {"OK": False, "Errors": ["y" * 5000]}
    keys = h.apply_run(spec, RunRecord.reported(RunFacts("r", T0, 1, "n", "p"), spec), 24, T0)
    assert "Errors" not in keys and len(keys["history"][0]["errors"][0]) == h.ERROR_CHARS


# --- the 64 KiB promise ------------------------------------------------------------------------------------------

def maximal(i: int) -> RunRecord:
    return failed(i, logs=(NASTY * 400 + "\n") * 100) if i % 2 else bad(
        i, errors=tuple(NASTY * 300 for _ in range(50)), logs=NASTY * 10_000)


@pytest.mark.parametrize("length", [3, 24, 100, 1000])
def test_history_adds_at_most_64_kib_with_maximal_errors_and_logs(length: int) -> None:
    runs = min(length, 150) + 5  # 150 maximal entries are far past the budget already
    spec = play([maximal(i) for i in range(runs)], length=length)
    assert h.encoded_size(added(spec)) <= h.BUDGET_BYTES
    assert len(json.dumps(added(spec), separators=(",", ":")).encode()) <= h.BUDGET_BYTES
    newest, record = spec["history"][0], maximal(runs - 1)
    assert newest["uuid"] == record.uuid and "logs" in newest  # the newest keeps what matters most
    assert len(newest["errors"]) == min(len(record.errors), h.ERRORS_PER_ENTRY + 1)
    assert len(spec["history"]) >= min(length, 10)  # older entries lose text before they are dropped


def test_older_entries_lose_error_text_before_any_entry_is_dropped() -> None:
    spec = play([bad(i, errors=tuple("e" * 600 for _ in range(6))) for i in range(24)])
    assert len(spec["history"]) == 24
    assert h.encoded_size(added(spec)) <= h.BUDGET_BYTES
    assert len(spec["history"][-1]["errors"]) == 1 and len(spec["history"][0]["errors"]) == 6


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(st.text(min_size=0, max_size=3000), min_size=1, max_size=30),
       budget=st.integers(min_value=200, max_value=20_000), length=st.integers(min_value=0, max_value=40))
def test_the_budget_holds_whatever_the_text_and_the_budget(texts: list[str], budget: int, length: int) -> None:
    spec = base_spec()
    for i, text in enumerate(texts):
        r = bad(i, errors=(text, text[::-1]), logs=text * 3) if i % 3 else skipped(i)
        spec.update(h.apply_run(spec, r, length, T0 + i, budget=budget))
        assert h.encoded_size(added(spec)) <= budget
        assert len(spec["history"]) <= length


def test_encoded_size_counts_what_go_escapes() -> None:
    assert h.encoded_size("a") == 3
    assert h.encoded_size("<") == len('"\\u003c"')
    assert h.encoded_size("é") == 4 and h.encoded_size("\n") == 4 and h.encoded_size("\u2028") == 8


# --- log tails ------------------------------------------------------------------------------------------------------

def test_a_log_tail_is_the_last_40_lines() -> None:
    log = "".join(f"line {i}\n" for i in range(100))
    assert h.log_tail(log) == "\n".join(f"line {i}" for i in range(60, 100))


def test_a_long_log_tail_is_cut_at_4_kib_on_a_line_boundary() -> None:
    log = "".join(f"{i:04d} " + "x" * 195 + "\n" for i in range(40))
    tail = h.log_tail(log)
    assert len(tail.encode()) <= h.LOG_BYTES
    assert tail.split("\n")[0].startswith("00") and len(tail.split("\n")[0]) == 200  # a whole line
    assert tail.endswith("0039 " + "x" * 195)


def test_a_single_huge_line_is_cut_inside_it_but_never_inside_a_character() -> None:
    tail = h.log_tail("€" * 5000)
    assert set(tail) == {"€"} and len(tail.encode()) <= h.LOG_BYTES and len(tail) == h.LOG_BYTES // 3


def test_a_log_tail_drops_terminal_escapes_and_decodes_bad_bytes() -> None:
    assert h.log_tail(b"\x1b[31mred\x1b[0m\r\nok\xff\x00\n") == "red\nok\ufffd"


@given(st.text(), st.integers(min_value=0, max_value=200), st.integers(min_value=0, max_value=5000))
def test_a_log_tail_fits_its_limits_and_is_the_end_of_the_log(text: str, lines: int, limit: int) -> None:
    tail = h.log_tail(text, lines, limit)
    assert len(tail.encode("utf-8", "surrogatepass")) <= limit
    assert tail.count("\n") < max(1, lines)
    assert h.log_tail(text, 10**6, 10**9).endswith(tail)


# --- the read side ---------------------------------------------------------------------------------------------------

def test_uptime_is_the_ok_share_of_judged_runs_and_skips_do_not_count() -> None:
    spec = play([ok(0), bad(1), skipped(2), ok(3), failed(4), ok(5)])
    s = h.stats(spec, T0 + 600)
    assert s.uptime == pytest.approx(3 / 5)
    assert (s.success_count, s.failure_count, s.consecutive_failures) == (3, 2, 0)
    assert s.uptime_24h is None  # the history reaches back 5 minutes, not a day


def test_uptime_24h_appears_once_the_history_covers_a_day_and_counts_only_that_day() -> None:
    old = RunRecord.reported(RunFacts("old", T0 - h.DAY - 60, 1, "n", "p"), {"OK": False, "Errors": ["x"]})
    spec = play([old, ok(0), ok(1), bad(2), ok(3)])
    s = h.stats(spec, T0 + 300)
    assert s.uptime_24h == pytest.approx(3 / 4) and s.uptime == pytest.approx(3 / 5)


def test_duration_percentiles_are_nearest_rank_over_judged_runs() -> None:
    spec = base_spec()
    for i in range(1, 21):
        spec.update(h.apply_run(spec, RunRecord.reported(RunFacts(f"r{i}", T0 + i, float(i), "n", "p"), {"OK": True}),
                                24, T0 + i))
    spec.update(h.apply_run(spec, RunRecord.skipped(RunFacts("s", T0 + 99, 999.0)), 24, T0 + 99))
    s = h.stats(spec, T0 + 100)
    assert (s.duration_p50, s.duration_p95) == (10.0, 19.0)
    assert h.percentile([], 50) is None and h.percentile([3.0], 95) == 3.0


def test_a_never_run_check_has_no_statistics() -> None:
    assert stats_json(h.stats(base_spec(), T0)) == {
        "consecutiveFailures": 0, "successCount": 0, "failureCount": 0, "lastOK": None, "lastFailure": None,
        "uptime": None, "uptime24h": None, "durationP50": None, "durationP95": None}


def test_the_api_sees_log_tails_only_when_they_are_exposed_and_never_junk() -> None:
    spec = play([failed(0, logs="secret token")])
    spec["history"].append("junk")
    assert [e.get("logs") for e in h.entries(spec)] == [None]
    assert [e.get("logs") for e in h.entries(spec, expose_logs=True)] == ["secret token"]


# --- the CRD ---------------------------------------------------------------------------------------------------

def khstate_crd() -> dict[str, Any]:
    (crd,) = [d for d in yaml.safe_load_all(CRD.read_text()) if d]
    return dict(crd)


def as_json_schema(schema: Any) -> Any:
    """OpenAPI `nullable: true` as a JSON-schema "null" type."""
    if isinstance(schema, dict):
        out = {k: as_json_schema(v) for k, v in schema.items() if k != "nullable"}
        if schema.get("nullable") and isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        return out
    if isinstance(schema, list):
        return [as_json_schema(v) for v in schema]
    return schema


def test_the_shipped_crd_describes_every_added_field() -> None:
    spec = khstate_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert all(spec[k].get("description") for k in h.ADDED_KEYS)
    assert set(spec["history"]["items"]["properties"]) == set(h.ENTRY_KEYS)


def test_the_probe_finds_pruned_fields_in_the_answer() -> None:
    probe = probe_body("comcast.github.io/v1", "kh", T0)
    assert pruned_fields(probe) == []
    assert probe["metadata"]["generateName"] == PROBE_NAME_PREFIX
    pruned = copy.deepcopy(probe)
    del pruned["spec"]["history"][0]["outcome"]
    del pruned["spec"]["lastOK"]
    assert pruned_fields(pruned) == ["lastOK", "history[].outcome"]


def test_an_old_crd_that_prunes_the_uptime_rollups_is_found_and_says_what_is_lost() -> None:
    probe = probe_body("comcast.github.io/v1", "kh", T0)
    pruned = copy.deepcopy(probe)
    del pruned["spec"]["rollups"]
    assert pruned_fields(pruned) == ["rollups"]
    assert consequences(["rollups"]) == "no uptime over 7 or 30 days is kept"


def test_what_apply_run_writes_and_the_probe_validate_against_the_crd_schema() -> None:
    crd = khstate_crd()
    schema = as_json_schema(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    spec = play([maximal(i) for i in range(6)] + [skipped(7), ok(8)])
    body = {"apiVersion": "comcast.github.io/v1", "kind": "KuberhealthyState", "metadata": {"name": "x"},
            "spec": spec}
    jsonschema.validate(body, schema, format_checker=jsonschema.FormatChecker())
    jsonschema.validate(probe_body("comcast.github.io/v1", "kh", T0), schema,
                        format_checker=jsonschema.FormatChecker())


def test_the_khstate_printer_columns_show_ok_failures_last_run_age_and_the_first_error() -> None:
    cols = {c["name"]: c["jsonPath"] for c in khstate_crd()["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert cols == {"OK": ".spec.OK", "Failures": ".spec.consecutiveFailures", "LastRun": ".spec.LastRun",
                    "Age": ".metadata.creationTimestamp", "Error": ".spec.Errors[0]"}
