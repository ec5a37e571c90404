"""khstate writes against the real API server, including a watch cache that lags behind."""
from __future__ import annotations

import pytest

from kuberhealthy.kube import KHSTATES, Resources
from kuberhealthy.records import khstate


def write(res: Resources, namespace: str, run_uuid: str) -> khstate.RunWrite:
    """A write to the khstate "c" for `run_uuid`, by the replica kh-0."""
    return khstate.RunWrite(res, namespace, "c", run_uuid, "kh-0")


def test_a_report_is_stored_even_when_the_cached_copy_predates_the_runs_claim(res: Resources,
                                                                              namespace: str) -> None:
    before = khstate.claim_run(write(res, namespace, "run-1"))
    khstate.claim_run(write(res, namespace, "run-2"), hint=before)  # 409 on the stale hint, then re-read
    out = khstate.record_report(write(res, namespace, "run-2"), False, ["boom"], hint=before)
    spec = khstate.Spec.of(out)
    assert (spec.uuid, spec.ok, spec.errors) == ("run-2", False, ("boom",))
    assert khstate.reported_uuid(out) == "run-2"


def test_a_report_from_a_replaced_run_is_refused_even_with_a_matching_stale_hint(res: Resources,
                                                                                 namespace: str) -> None:
    first = khstate.claim_run(write(res, namespace, "run-1"))
    khstate.claim_run(write(res, namespace, "run-2"))
    with pytest.raises(khstate.StaleReport):
        khstate.record_report(write(res, namespace, "run-1"), True, [], hint=first)
    assert khstate.Spec.of(res.get(KHSTATES, namespace, "c")).last_run is None


def test_record_result_does_not_touch_a_state_claimed_by_a_newer_run(res: Resources, namespace: str) -> None:
    khstate.claim_run(write(res, namespace, "run-1"))
    khstate.claim_run(write(res, namespace, "run-2"))
    assert khstate.record_result(write(res, namespace, "run-1"), "1s", "node-a") is not None
    spec = khstate.Spec.of(res.get(KHSTATES, namespace, "c"))
    assert spec.run_duration == "" and spec.node == ""


def test_an_execution_error_keeps_the_current_uuid(res: Resources, namespace: str) -> None:
    khstate.claim_run(write(res, namespace, "run-1"))
    out = khstate.record_error(write(res, namespace, ""), ["Check execution error: x"], "2s", "n1")
    spec = khstate.Spec.of(out)
    assert (spec.uuid, spec.ok, spec.errors, spec.run_duration, spec.node) == (
        "run-1", False, ("Check execution error: x",), "2s", "n1")
    assert spec.last_run is not None


def test_a_late_run_never_records_its_error_over_the_run_that_followed_it(res: Resources, namespace: str) -> None:
    khstate.claim_run(write(res, namespace, "run-1"))
    khstate.claim_run(write(res, namespace, "run-2"))
    before = res.get(KHSTATES, namespace, "c")
    assert khstate.record_error(write(res, namespace, "run-1"), ["Check execution error: late"]) is None
    after = res.get(KHSTATES, namespace, "c")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert khstate.record_error(write(res, namespace, "run-2"), ["Check execution error: now"]) is not None
