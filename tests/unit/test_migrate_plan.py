"""records/migrateplan.py: what the live migration does to one khcheck given what is there, and the objects
it writes (the HealthCheck, its status, the khstate of a rollback, the mark)."""
from __future__ import annotations

from typing import Any

import pytest

from kuberhealthy.base.times import parse_time
from kuberhealthy.kube import KHCHECKS, Obj
from kuberhealthy.records import hcstate, khstate, migration, runnow
from kuberhealthy.records.history import HISTORY_LENGTH
from kuberhealthy.records.migrateplan import (
    Outcome,
    Step,
    healthcheck_for,
    in_flight,
    khstate_back,
    mark_patch,
    merged_history,
    plan_rollback,
    plan_to_v3,
    status_for,
)

UID = "11111111-aaaa"


def khcheck(annotations: dict[str, str] | None = None, **spec: Any) -> Obj:
    body: dict[str, Any] = {"runInterval": "5m", "timeout": "1m",
                            "podSpec": {"containers": [{"name": "main", "image": "kh/check:1"}]}}
    body.update(spec)
    meta: dict[str, Any] = {"name": "probe", "namespace": "kh", "uid": UID, "resourceVersion": "7", "generation": 2}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": KHCHECKS.api_version, "kind": "KuberhealthyCheck", "metadata": meta, "spec": body}


def hc(mark: str | None = UID, status: dict[str, Any] | None = None, deleting: bool = False) -> Obj:
    meta: dict[str, Any] = {"name": "probe", "namespace": "kh", "uid": "22222222-bbbb", "generation": 1,
                            "annotations": {migration.MIGRATED_FROM: mark} if mark is not None else {}}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    out: Obj = {"metadata": meta, "spec": {"runInterval": "5m"}}
    if status is not None:
        out["status"] = status
    return out


def marked(**kw: Any) -> Obj:
    return khcheck({migration.MIGRATED_TO: "probe"}, **kw)


def test_a_khcheck_without_a_healthcheck_is_created_carried_and_marked_last() -> None:
    plan = plan_to_v3(khcheck(), None)
    assert plan.outcome is Outcome.MIGRATE and plan.key == "kh/probe"
    assert plan.steps == (Step.CREATE, Step.WRITE_STATUS, Step.MARK)


def test_a_pair_whose_marks_agree_is_already_migrated_with_nothing_to_do() -> None:
    plan = plan_to_v3(marked(), hc())
    assert plan.outcome is Outcome.ALREADY and plan.steps == ()


def test_a_healthcheck_of_ours_whose_khcheck_is_not_marked_yet_is_resumed_state_carried_again() -> None:
    plan = plan_to_v3(khcheck(), hc())
    assert plan.outcome is Outcome.MIGRATE and plan.steps == (Step.WRITE_STATUS, Step.MARK)
    assert plan.reason.startswith("resumed")


@pytest.mark.parametrize(("mark", "why"), [
    (None, f"it carries no {migration.MIGRATED_FROM} mark"),
    ("someone-else", f"its {migration.MIGRATED_FROM} mark is uid someone-else, not this khcheck's uid {UID}"),
])
def test_a_healthcheck_the_migration_did_not_create_is_refused_naming_both(mark: str | None, why: str) -> None:
    plan = plan_to_v3(khcheck(), hc(mark))
    assert plan.outcome is Outcome.REFUSE and plan.steps == ()
    assert plan.reason == (f"HealthCheck kh/probe exists and this migration did not create it from khcheck "
                           f"kh/probe ({why}); both left alone")


def test_a_foreign_healthcheck_is_refused_even_when_the_khcheck_carries_a_mark() -> None:
    assert plan_to_v3(marked(), hc(None)).outcome is Outcome.REFUSE


def test_a_stale_mark_with_no_healthcheck_is_removed_before_the_create_so_the_new_one_starts_pending() -> None:
    plan = plan_to_v3(marked(), None)
    assert plan.steps == (Step.UNMARK_STALE, Step.CREATE, Step.WRITE_STATUS, Step.MARK)


def test_a_khcheck_or_healthcheck_being_deleted_is_skipped() -> None:
    gone = khcheck()
    gone["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    assert plan_to_v3(gone, None).outcome is Outcome.SKIP
    assert plan_to_v3(khcheck(), hc(deleting=True)).outcome is Outcome.SKIP


def test_a_rollback_of_a_pair_copies_back_then_unmarks_then_deletes() -> None:
    plan = plan_rollback(marked(), hc())
    assert plan.outcome is Outcome.ROLL_BACK and plan.steps == (Step.COPY_BACK, Step.UNMARK, Step.DELETE)


def test_a_rollback_of_a_migration_stopped_before_the_switch_deletes_without_copying() -> None:
    plan = plan_rollback(khcheck(), hc())
    assert plan.steps == (Step.DELETE,) and "khstate kept" in plan.reason


def test_a_rollback_leaves_a_foreign_healthcheck_alone_and_removes_only_a_stale_mark() -> None:
    assert plan_rollback(khcheck(), hc(None)).outcome is Outcome.NOT_MIGRATED
    plan = plan_rollback(marked(), hc("someone-else"))
    assert plan.outcome is Outcome.ROLL_BACK and plan.steps == (Step.UNMARK,)


def test_a_rollback_with_nothing_migrated_has_nothing_to_do_and_a_lone_mark_is_removed() -> None:
    assert plan_rollback(khcheck(), None).outcome is Outcome.NOT_MIGRATED
    assert plan_rollback(marked(), None).steps == (Step.UNMARK,)


def test_the_healthcheck_is_the_offline_conversion_marked_with_the_khcheck_s_uid() -> None:
    body, notes = healthcheck_for(khcheck({"team": "a"}, extraLabels={"x": "y"}))
    assert body["apiVersion"] == "kuberhealthy.github.io/v2" and body["kind"] == "HealthCheck"
    assert body["metadata"] == {"name": "probe", "namespace": "kh",
                                "annotations": {"team": "a", migration.MIGRATED_FROM: UID}}
    assert body["spec"] == {"runInterval": "5m", "timeout": "1m", "extraLabels": {"x": "y"},
                            "podSpec": {"spec": {"containers": [{"name": "main", "image": "kh/check:1"}]}}}
    assert notes == []


def test_an_unset_interval_and_timeout_become_the_khcheck_s_defaults_and_are_said() -> None:
    check = khcheck()
    del check["spec"]["runInterval"], check["spec"]["timeout"]
    body, notes = healthcheck_for(check)
    assert (body["spec"]["runInterval"], body["spec"]["timeout"]) == ("10m0s", "5m0s")
    assert notes == ["spec.runInterval is not set: set to 10m0s, the khcheck's default",
                     "spec.timeout is not set: set to 5m0s, the khcheck's default"]


def test_the_khcheck_s_own_marks_run_now_request_and_finalizers_do_not_travel() -> None:
    check = khcheck({migration.MIGRATED_TO: "probe", runnow.RUN_NOW_ANNOTATION: "2030-01-01T00:00:00Z", "k": "v"})
    check["metadata"]["finalizers"] = ["example.com/hold"]
    body, _ = healthcheck_for(check)
    assert body["metadata"]["annotations"] == {"k": "v", migration.MIGRATED_FROM: UID}
    assert "finalizers" not in body["metadata"]


def state(**spec: Any) -> Obj:
    base: dict[str, Any] = {"OK": True, "Errors": [], "RunDuration": "2s", "Namespace": "kh", "Node": "n1",
                            "LastRun": "2030-01-02T03:04:05Z", "AuthoritativePod": "kh-0", "uuid": "u1",
                            "successCount": 4, "failureCount": 1, "consecutiveFailures": 0,
                            "history": [{"uuid": "u1", "start": "2030-01-02T03:04:03Z", "OK": True}]}
    base.update(spec)
    return {"metadata": {"name": "probe", "namespace": "kh", "annotations": {khstate.FINISHED_UUID: "u1"}},
            "spec": base}


def test_the_status_carries_the_khstate_s_counters_history_and_last_run() -> None:
    status = status_for(state(), khcheck(), hc())
    assert status is not None
    assert (status["successCount"], status["failureCount"], status["runDuration"]) == (4, 1, 2_000_000_000)
    assert status["lastRunUnix"] == parse_time("2030-01-02T03:04:05Z") and status["currentUUID"] == ""
    assert status["history"] == state()["spec"]["history"]
    assert status_for(None, khcheck(), hc()) is None


def test_a_token_binding_at_the_khcheck_s_generation_carries_over_at_the_healthcheck_s() -> None:
    bound = status_for(state(tokenBoundGeneration=2), khcheck(), hc())
    stale = status_for(state(tokenBoundGeneration=1), khcheck(), hc())
    assert bound is not None and bound[hcstate.TOKEN_BINDING] == {"generation": 1}
    assert stale is not None and hcstate.TOKEN_BINDING not in stale


def test_a_run_is_in_flight_while_its_claim_is_not_finished() -> None:
    assert not in_flight(None) and not in_flight(state())
    claimed = state(uuid="u2")
    assert in_flight(claimed)


def test_the_khstate_after_a_rollback_takes_the_newer_result_the_larger_counters_and_both_histories() -> None:
    status = status_for(state(), khcheck(), hc())
    assert status is not None
    status.update({"ok": False, "errors": ["boom"], "successCount": 2, "failureCount": 3, "consecutiveFailures": 2,
                   "lastRunUnix": int(parse_time("2030-01-02T05:00:00Z") or 0),
                   "history": [{"uuid": "u9", "start": "2030-01-02T04:59:58Z", "OK": False}]})
    back = khstate_back(hc(status=status), state())
    spec = back["spec"]
    assert (spec["OK"], spec["Errors"], spec["consecutiveFailures"]) == (False, ["boom"], 2)
    assert (spec["successCount"], spec["failureCount"]) == (4, 3)  # never a step back
    assert spec["LastRun"] == "2030-01-02T05:00:00Z" and spec["uuid"] == "u1"
    assert [e["uuid"] for e in spec["history"]] == ["u9", "u1"]
    assert back["metadata"]["annotations"] == {khstate.FINISHED_UUID: "u1"}


def test_an_older_healthcheck_result_does_not_replace_the_khstate_s() -> None:
    status = status_for(state(), khcheck(), hc())
    assert status is not None
    status.update({"ok": False, "lastRunUnix": int(parse_time("2030-01-01T00:00:00Z") or 0)})
    spec = khstate_back(hc(status=status), state())["spec"]
    assert spec["OK"] is True and spec["LastRun"] == "2030-01-02T03:04:05Z"


def test_a_rollback_without_a_khstate_makes_one_from_the_healthcheck() -> None:
    back = khstate_back(hc(status=status_for(state(), khcheck(), hc())), None)
    assert back["metadata"]["name"] == "probe" and back["spec"]["successCount"] == 4
    assert back["spec"]["LastRun"] == "2030-01-02T03:04:05Z"


def test_merged_histories_are_newest_first_one_entry_per_run_the_first_s_where_both_have_it() -> None:
    a = [{"uuid": "3", "start": "2030-01-01T00:00:30Z"}, {"uuid": "1", "start": "2030-01-01T00:00:10Z", "x": 1}]
    b = [{"uuid": "2", "start": "2030-01-01T00:00:20Z"}, {"uuid": "1", "start": "2030-01-01T00:00:10Z", "x": 2}]
    assert merged_history(a, b) == [a[0], b[0], a[1]]
    assert merged_history(a, None) == a and merged_history(None, None) is None


def test_merged_histories_keep_the_longer_length_or_the_default_history_length() -> None:
    a = [{"uuid": str(i), "start": f"2030-01-01T00:{i:02d}:00Z"} for i in range(40)]
    b = [{"uuid": f"b{i}", "start": f"2030-01-01T01:{i:02d}:00Z"} for i in range(20)]
    assert len(merged_history(a, b) or []) == 40
    assert len(merged_history(b, a[:20]) or []) == HISTORY_LENGTH == 24


def test_the_mark_patch_sets_or_removes_the_annotation_under_the_khcheck_s_uid() -> None:
    assert mark_patch(khcheck(), "probe") == {"metadata": {"uid": UID, "annotations": {migration.MIGRATED_TO: "probe"}}}
    assert mark_patch(khcheck(), None)["metadata"]["annotations"] == {migration.MIGRATED_TO: None}
