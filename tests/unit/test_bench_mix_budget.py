"""The work budget's HealthCheck runs (tests/unit/work_budget.py): a HealthCheck run is counted like a khcheck
run, costs no more API requests than one, and adding its budget leaves the khcheck budgets as they were."""
from __future__ import annotations

from tests.unit.work_budget import API_TOTAL, add_new, kinds_side_by_side, measure

FEW = {"stored": 3, "hc-stored": 3, "posted": 3, "hc-posted": 3}


def test_a_healthcheck_run_makes_no_more_api_requests_than_a_khcheck_run() -> None:
    measured = measure(FEW)
    for way in ("stored", "posted"):
        assert measured["hc-" + way]["api create pods"] == 1
        assert measured["hc-" + way]["api replace_status healthchecks"] >= 1
        assert "api replace khstates" not in measured["hc-" + way]
        assert measured["hc-" + way][API_TOTAL] <= measured[way][API_TOTAL]
    table = kinds_side_by_side(measured)
    assert "api replace_status healthchecks" in table and "(posted)" in table


def test_adding_the_new_kinds_budgets_keeps_the_budgets_already_there() -> None:
    budget = {"stored": {API_TOTAL: 4.0}}
    measured = {"stored": {API_TOTAL: 9.0}, "hc-stored": {API_TOTAL: 4.0}}
    assert add_new(measured, budget) == {"stored": {API_TOTAL: 4.0}, "hc-stored": {API_TOTAL: 4.0}}
