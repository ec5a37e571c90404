"""bench.saturate's verdict on work per run: a failed run may cost more than an OK one, but neither cost may grow
with the backlog (the costs by outcome are fitted over the steps, and each step is held to them)."""
from __future__ import annotations

from typing import Any

from bench.saturate import by_outcome


def step(factor: float, ok: int, failed: int, per_run: float) -> dict[str, Any]:
    return {"factor": factor, "runs": {"ended": {"ok": ok, "timed_out": failed}}, "api": {"per_run": per_run}}


def per_run(r: dict[str, Any]) -> Any:
    return r["api"]["per_run"]


def test_steps_whose_runs_cost_the_same_by_outcome_are_flat_however_many_fail() -> None:
    rows = [step(f, ok, 400 - ok, (ok * 4.5 + (400 - ok) * 6.0) / 400) for f, ok in ((2, 400), (0.5, 150), (0.25, 40))]
    line = by_outcome("API requests per run", rows, per_run)
    assert "an OK run 4.50, a failed one 6.00" in line and "(flat;" in line


def test_a_step_whose_runs_cost_more_as_the_backlog_grows_is_called_out() -> None:
    rows = [step(2, 400, 0, 4.5), step(1, 300, 100, 4.9), step(0.5, 150, 250, 5.6), step(0.25, 40, 360, 9.3)]
    assert "(NOT flat;" in by_outcome("API requests per run", rows, per_run)


def test_two_steps_cannot_tell_the_costs_apart() -> None:
    rows = [step(2, 400, 0, 4.5), step(0.25, 40, 360, 6.0)]
    assert "needs 3 steps" in by_outcome("API requests per run", rows, per_run)
