"""The token binding and the finished marker as the khstate write decides them (records/khstate.py
record_report), held reports that meet them (outputs/heldreports.py), and the outdated-CRD probe that
must notice a CRD pruning the binding (outputs/schemacheck.py). Pure: an in-memory khstate store."""
from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from kuberhealthy.outputs.heldreports import FINISHED, STALE, TOKEN_BOUND, Held, HeldReports
from kuberhealthy.outputs.schemacheck import consequences, probe_body, pruned_fields
from kuberhealthy.records import khstate
from kuberhealthy.records.khstate import (
    TOKEN_BOUND_GENERATION,
    RunFinished,
    RunWrite,
    StaleReport,
    TokenBinding,
    TokenBound,
    record_report,
    token_bound_generation,
)

NS, CHECK, RUN = "team", "dns", "run-1"
WHEN = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)


class Store:
    """khstates by name; update_with_retry runs the write's mutate on a copy and keeps what it returns."""

    def __init__(self) -> None:
        self.states: dict[str, dict[str, Any]] = {}
        self.writes = 0

    def put(self, name: str = CHECK, run: str = RUN, finished: str = "", bound: int | None = None,
            **spec: Any) -> None:
        annotations = {khstate.FINISHED_UUID: finished} if finished else {}
        if bound is not None:
            spec[TOKEN_BOUND_GENERATION] = bound
        self.states[name] = {"metadata": {"annotations": annotations},
                             "spec": {"OK": False, "Errors": ["before"], "uuid": run, **spec}}

    def update_with_retry(self, res: Any, namespace: str, name: str, mutate: Any, **_: Any) -> Any:
        out = mutate(copy.deepcopy(self.states.get(name)))
        if out is not None:
            self.states[name] = out
            self.writes += 1
        return out


def report(store: Store, binding: TokenBinding | None, run: str = RUN) -> dict[str, Any]:
    write = RunWrite(store, NS, CHECK, run, "kh-0")  # type: ignore[arg-type]
    out: dict[str, Any] = record_report(write, True, [], now=WHEN, binding=binding)
    return out


def test_a_token_report_binds_the_check_at_its_generation() -> None:
    store = Store()
    store.put()
    out = report(store, TokenBinding(3, by_token=True))
    assert out["spec"][TOKEN_BOUND_GENERATION] == 3 and out["spec"]["OK"] is True
    assert token_bound_generation(out) == 3


def test_a_tokenless_report_for_a_bound_check_is_refused_saying_how_the_binding_ends_and_writes_nothing() -> None:
    store = Store()
    store.put(bound=3)
    with pytest.raises(TokenBound) as caught:
        report(store, TokenBinding(3, by_token=False))
    assert f"check {NS}/{CHECK} is bound to ServiceAccount tokens" in str(caught.value)
    assert "KH_REPORT_TOKEN_FILE" in str(caught.value) and "change the khcheck's spec" in str(caught.value)
    assert store.writes == 0 and store.states[CHECK]["spec"]["Errors"] == ["before"]


def test_a_khjob_bound_to_tokens_is_named_as_one() -> None:
    store = Store()
    store.put(khWorkload=khstate.WORKLOAD_JOB, bound=2)
    with pytest.raises(TokenBound, match="change the khjob's spec"):
        report(store, TokenBinding(2, by_token=False))


def test_a_new_generation_ends_the_binding_and_the_tokenless_report_clears_it() -> None:
    store = Store()
    store.put(bound=3)
    out = report(store, TokenBinding(4, by_token=False))
    assert TOKEN_BOUND_GENERATION not in out["spec"] and out["spec"]["OK"] is True


def test_without_a_known_generation_the_binding_is_neither_decided_nor_written() -> None:
    store = Store()
    store.put(bound=3)
    out = report(store, None)
    assert out["spec"][TOKEN_BOUND_GENERATION] == 3


@pytest.mark.parametrize("value", [True, "3", 3.0, None])
def test_a_hand_edited_binding_that_is_no_integer_binds_nothing(value: Any) -> None:
    assert token_bound_generation({"spec": {TOKEN_BOUND_GENERATION: value}}) is None


def test_a_report_for_a_run_that_is_over_is_refused_as_finished_and_one_for_another_run_as_stale() -> None:
    store = Store()
    store.put(finished=RUN)
    with pytest.raises(RunFinished):
        report(store, None)
    store.put(run="run-2")
    with pytest.raises(StaleReport) as caught:
        report(store, None)
    assert not isinstance(caught.value, RunFinished) and store.writes == 0


def held(name: str = CHECK, run: str = RUN, binding: TokenBinding | None = None) -> Held:
    return Held(NS, name, run, True, (), WHEN, 2e9, binding)


def test_held_reports_are_written_only_for_a_current_unfinished_run_and_every_drop_is_counted_by_why() -> None:
    store = Store()
    store.put("finished", run="a", finished="a")
    store.put("moved", run="newer")
    store.put("bound", run="c", bound=1)
    store.put("live", run="d")
    reports = HeldReports(store, lambda: "kh-0")  # type: ignore[arg-type]
    for h in (held("finished", "a"), held("moved", "b"), held("bound", "c", TokenBinding(1, by_token=False)),
              held("live", "d", TokenBinding(1, by_token=True))):
        assert reports.add(h)
    assert reports.flush_once() is True
    assert (reports.written, reports.dropped) == (1, 3)
    assert {k: v for k, v in reports.dropped_by.items() if v} == {FINISHED: 1, STALE: 1, TOKEN_BOUND: 1}
    assert store.states["finished"]["spec"]["Errors"] == ["before"]  # the run's error stands
    assert store.states["live"]["spec"][TOKEN_BOUND_GENERATION] == 1  # a held token report binds too


def test_the_crd_probe_notices_a_crd_that_prunes_the_binding() -> None:
    probe = probe_body("comcast.github.io/v1", "kh", 1_700_000_000.0)
    assert pruned_fields(probe) == []
    pruned = copy.deepcopy(probe)
    del pruned["spec"][TOKEN_BOUND_GENERATION]
    assert pruned_fields(pruned) == [TOKEN_BOUND_GENERATION]
    assert consequences([TOKEN_BOUND_GENERATION]) == "no check is bound to report tokens"
    assert consequences(["history", TOKEN_BOUND_GENERATION]) == \
        "no history is kept and no check is bound to report tokens"
    assert consequences(["history"]) == "no history is kept"
