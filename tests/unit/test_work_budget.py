"""The work per check run stays within its budget (tests/unit/work_budget.json): API requests, watch events and
Python calls inside kuberhealthy/, counted over scripted runs on the in-memory fakes (tests/unit/work_budget.py).

Counts, not times: the guard fails on any machine when a change adds a tenth more work per run, and never
because the machine is busy. The tests below show that it catches one extra request and a third more calls,
and that two measurements agree.
"""
from __future__ import annotations

import json
import re
import threading

import pytest

from kuberhealthy.kube import KHSTATES, PODS, Obj, key_of
from testbed.fakes import FakeServices
from testbed.fakes.workcount import CallCounter
from tests.unit import work_budget
from tests.unit.work_budget import (
    API_TOTAL,
    CHECK,
    MARGIN,
    PRODUCT_DIR,
    PYTHON_CALLS,
    RUNS,
    SCENE_DIRS,
    WATCH_EVENTS,
    PerRun,
    measure,
    over_budget,
)

STORED = {"stored": RUNS["stored"]}


@pytest.fixture(scope="module")
def measured() -> PerRun:
    return measure()


def test_the_work_per_check_run_stays_within_its_budget(measured: PerRun) -> None:
    budget_file = json.loads(work_budget.BUDGET_FILE.read_text())
    assert budget_file["runs"] == RUNS, (
        f"{work_budget.BUDGET_FILE.name} was measured over other runs: regenerate it with `{work_budget.REGENERATE}`")
    lines = over_budget(measured, work_budget.load_budget())
    assert not lines, work_budget.failure_message(lines)


def test_the_scripted_runs_do_the_work_of_a_run(measured: PerRun) -> None:
    """A pod created and seen Running and Succeeded, a report stored; the product's code counted on the run's
    thread and the test's (a counter that lost a thread would pass any budget)."""
    for kind, counts in measured.items():
        assert counts["api create pods"] == 1 and counts[API_TOTAL] >= 2, kind
        assert counts[WATCH_EVENTS] >= 3, kind
        assert counts[PYTHON_CALLS] >= 100, kind
    assert measured["posted"][PYTHON_CALLS] > measured["stored"][PYTHON_CALLS]  # the handler's work is in it


# The next two hold a tampered measurement to a budget regenerated from the untampered one, as
# `--write` would leave it, so that they do not depend on the budget file being fresh.

def test_one_extra_api_request_per_run_fails_the_guard_and_names_the_request(measured: PerRun) -> None:
    def one_more_get(services: FakeServices) -> None:  # a GET of the khstate after each pod create
        def get(_pod: Obj) -> None:
            services.api.get(KHSTATES, CHECK.namespace, CHECK.name)
        services.api.on_create(PODS, get)
    total = measured["stored"][API_TOTAL]
    assert over_budget(measure(STORED, tamper=one_more_get), measured) == [
        "stored runs: api get khstates 1 per run, budget 0 (fails above 0.00)",
        f"stored runs: {API_TOTAL} {total + 1:g} per run, budget {total:g} (fails above {total * MARGIN:.2f})"]


def test_a_third_more_python_calls_per_run_fails_the_guard(measured: PerRun) -> None:
    calls = measured["stored"][PYTHON_CALLS]
    extra = int(calls / 3) + 1

    def more_calls(services: FakeServices) -> None:  # product code on the run's thread, after its pod create
        def work(pod: Obj) -> None:
            for _ in range(extra):
                key_of(pod)
        services.api.on_create(PODS, work)
    lines = over_budget(measure(STORED, tamper=more_calls), measured)
    # the count itself may differ from calls + extra by a call or two a run (a thread's timing), never more
    found = re.fullmatch(rf"stored runs: {PYTHON_CALLS} ([0-9.]+) per run, budget {calls:g} "
                         rf"\(fails above {calls * MARGIN:.2f}\)", lines[0]) if len(lines) == 1 else None
    assert found is not None, lines
    assert float(found.group(1)) == pytest.approx(calls + extra, abs=2)


def test_two_measurements_in_one_process_agree_so_the_guard_is_not_flaky(measured: PerRun) -> None:
    again = measure()
    for kind, counts in measured.items():
        assert {k: v for k, v in again[kind].items() if k != PYTHON_CALLS} == {
            k: v for k, v in counts.items() if k != PYTHON_CALLS}, kind
        assert again[kind][PYTHON_CALLS] == pytest.approx(counts[PYTHON_CALLS], rel=0.02), kind


def test_the_failure_says_how_to_regenerate_the_budget_and_that_lowering_is_welcome() -> None:
    message = work_budget.failure_message(["stored runs: api total 5 per run, budget 4 (fails above 4.40)"])
    assert work_budget.REGENERATE in message and "make work-budget" in message and "welcome" in message
    assert "api total 5 per run" in message


def test_a_count_the_budget_lacks_fails_and_a_lower_count_passes() -> None:
    budget = {"stored": {API_TOTAL: 4.0, PYTHON_CALLS: 600.0}}
    assert over_budget({"stored": {API_TOTAL: 4.4, PYTHON_CALLS: 100.0}}, budget) == []
    assert over_budget({"stored": {"api list pods": 0.05}}, budget) == [
        "stored runs: api list pods 0.05 per run, budget 0 (fails above 0.00)"]
    assert over_budget({"posted": {API_TOTAL: 1.0}}, budget) == [
        "posted runs: api total 1 per run, budget 0 (fails above 0.00)"]


def test_the_call_counter_counts_calls_outside_the_scene_on_threads_started_while_it_counts() -> None:
    pod = {"metadata": {"namespace": "ns", "name": "p"}}

    def scene_helper() -> None:  # the scene's own code (tests/): never counted
        pass

    def count(in_thread: int) -> int:
        counter = CallCounter(PRODUCT_DIR, SCENE_DIRS)
        with counter.counting():
            for _ in range(5):
                key_of(pod)
                scene_helper()
            thread = threading.Thread(target=lambda: [key_of(pod) for _ in range(in_thread)], name="kh-test-counted")
            thread.start()
            thread.join()
        calls = counter.calls
        key_of(pod)  # not counting
        assert counter.calls == calls
        return calls

    assert count(20) - count(10) == 10  # the thread's calls count, the scene's own do not
    assert count(10) == 15
    counter = CallCounter(PRODUCT_DIR, SCENE_DIRS)
    with counter.counting():
        sorted([{"a": 1}], key=key_of)  # a library calling back into the product: those calls count
        json.dumps(pod)  # the scene's own use of a library: not counted
    assert counter.calls == 1
