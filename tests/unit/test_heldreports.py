"""Held reports: written when the API answers, each on its own, until their run's deadline."""
from __future__ import annotations

import datetime as dt
from typing import Any

from kuberhealthy.base.errors import Unreachable
from kuberhealthy.outputs.heldreports import Held, HeldReports


class FakeResources:
    """khstates by name, each naming its run; writes to names in `away` fail as an absent API would."""

    def __init__(self, away: set[str]) -> None:
        self.away = away
        self.states: dict[str, dict[str, Any]] = {}

    def update_with_retry(self, res: Any, namespace: str, name: str, mutate: Any, **_: Any) -> Any:
        if name in self.away:
            raise Unreachable(f"PUT {name}: connection refused")
        current = self.states.setdefault(name, {"metadata": {}, "spec": {"uuid": f"run-{name}"}})
        return mutate(current)


def held(name: str, expires: float = 2e9) -> Held:
    return Held("ns", name, f"run-{name}", True, (), dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc), expires)


def test_one_write_that_fails_does_not_hold_up_the_others() -> None:
    res = FakeResources(away={"slow"})
    reports = HeldReports(res, lambda: "kh-0")  # type: ignore[arg-type]
    for name in ("slow", "b", "c"):
        assert reports.add(held(name))
    assert reports.flush_once() is False
    assert reports.holds("run-slow") and not reports.holds("run-b") and not reports.holds("run-c")
    assert res.states["b"]["spec"]["LastRun"] == "2026-12-01T00:00:00Z"  # when it was received
    res.away.clear()
    assert reports.flush_once() is True
    assert (reports.written, reports.dropped) == (3, 0)


def test_a_report_past_its_runs_deadline_is_dropped_and_a_stale_one_too() -> None:
    res = FakeResources(away=set())
    reports = HeldReports(res, lambda: "kh-0", wall=lambda: 1000.0)  # type: ignore[arg-type]
    reports.add(held("late", expires=999.0))
    res.states["moved"] = {"metadata": {}, "spec": {"uuid": "a-newer-run"}}
    reports.add(held("moved"))
    assert reports.flush_once() is True
    assert (reports.written, reports.dropped) == (0, 2)
    assert "LastRun" not in res.states["moved"]["spec"]
