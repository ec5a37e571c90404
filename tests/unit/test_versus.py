"""bench.versus's pure parts: the order old and new run in, CPU per run, the ratios and the table."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.versus import (
    NEW,
    OLD,
    Measured,
    figures,
    floor_lines,
    floor_of,
    kubelet_ratio,
    middle,
    provenance,
    ratio,
    round_ratios,
    schedule,
    size_table,
)
from testbed.daemons.process import FROM_SOURCE, IMPORTED_FROM, imported_from

LABELS = {OLD: "abc1234", NEW: "working tree"}


def row(n: int, runs: int, daemon_seconds: float, window_s: float = 100.0, sim_seconds: float = 5.0) -> dict[str, Any]:
    return {"n": n, "runs": runs, "window_s": window_s,
            "cpu": {"daemon": round(daemon_seconds / window_s, 3), "daemon_seconds": daemon_seconds,
                    "sim": round(sim_seconds / window_s, 3), "sim_seconds": sim_seconds},
            "api": {"per_run": 4.0}, "mem": {"peak_pss_mb": 100.0}, "status_page": {"p99": 0.02},
            "false_failures": {"results": 0}, "sim": {"refused_total": 0}}


def test_old_and_new_alternate_which_goes_first_from_one_round_to_the_next() -> None:
    assert schedule([250, 500], 2) == [(1, 250, OLD), (1, 250, NEW), (1, 500, OLD), (1, 500, NEW),
                                       (2, 250, NEW), (2, 250, OLD), (2, 500, NEW), (2, 500, OLD)]


def test_cpu_per_run_is_the_daemons_cpu_seconds_over_the_runs_started_in_the_window() -> None:
    f = figures(row(250, 500, 10.0))
    assert f is not None and f.cpu_per_run_ms == pytest.approx(20.0)


def test_a_row_without_the_cpu_seconds_falls_back_to_cores_times_the_window() -> None:
    r = row(250, 500, 10.0)
    del r["cpu"]["daemon_seconds"]
    f = figures(r)
    assert f is not None and f.cpu_per_run_ms == pytest.approx(20.0)


def test_a_row_that_could_not_be_measured_or_ran_nothing_has_no_cpu_per_run_nor_ratio() -> None:
    assert figures({"n": 250, "error": "boom"}) is None
    idle = figures(row(250, 0, 1.0))
    assert idle is not None and idle.cpu_per_run_ms is None
    assert ratio(idle, figures(row(250, 500, 10.0))) is None
    assert ratio(figures(row(250, 500, 10.0)), None) is None


def test_the_overall_ratio_is_the_median_of_the_rounds_ratios() -> None:
    measured = [Measured(1, 250, OLD, row(250, 500, 10.0)), Measured(1, 250, NEW, row(250, 500, 5.0)),
                Measured(2, 250, NEW, row(250, 500, 7.0)), Measured(2, 250, OLD, row(250, 500, 10.0)),
                Measured(3, 250, OLD, row(250, 500, 10.0)), Measured(3, 250, NEW, {"n": 250, "error": "boom"})]
    assert round_ratios(measured, 250) == [(1, pytest.approx(0.5)), (2, pytest.approx(0.7)), (3, None)]
    assert middle([r for _, r in round_ratios(measured, 250)]) == pytest.approx(0.6)
    table = "\n".join(size_table(measured, 250, LABELS))
    assert "| round 1 new (working tree) | 500 | 0.050 | 10.0 ms | 0.50x | 1.00 |" in table
    assert "| round 3 new (working tree) | not measured: boom |" in table
    assert "| median new (2 measured) | 500 | 0.060 | 12.0 ms | 0.60x | 1.20 |" in table
    assert "CPU per run new/old 0.60x (median of rounds: 0.50x, 0.70x, -); target <= 0.6x" in table


def test_a_size_with_nothing_measured_still_has_its_table() -> None:
    table = "\n".join(size_table([], 500, LABELS))
    assert "| median old (0 measured) | not measured: no round |" in table
    assert "CPU per run new/old - (median of rounds: none)" in table


def test_the_old_daemon_counts_only_when_its_log_shows_it_imported_the_old_source(tmp_path: Path) -> None:
    source = tmp_path / "src"
    log = tmp_path / "daemon.log"
    log.write_text(f"{IMPORTED_FROM}{source}/kuberhealthy/__init__.py\n2024 INFO kuberhealthy.cli: starting\n")
    assert imported_from(log.read_text()) == f"{source}/kuberhealthy/__init__.py"
    assert provenance({"daemon_log": {"path": str(log)}}, source) is None
    assert "not from" in str(provenance({"daemon_log": {"path": str(log)}}, tmp_path / "elsewhere"))
    log.write_text("2024 INFO kuberhealthy.cli: starting\n")
    assert "does not say" in str(provenance({"daemon_log": {"path": str(log)}}, source))
    assert IMPORTED_FROM.strip() in FROM_SOURCE


def test_the_kubelet_normalised_ratio_cancels_a_machine_that_ran_slower_in_one_window() -> None:
    # the same code measured twice: in the second window everything took 1.5x the CPU, the kubelet's too
    old, new = figures(row(250, 500, 10.0, sim_seconds=5.0)), figures(row(250, 500, 15.0, sim_seconds=7.5))
    assert ratio(new, old) == pytest.approx(1.5)
    assert kubelet_ratio(new, old) == pytest.approx(1.0)
    assert kubelet_ratio(new, figures(row(250, 500, 10.0, sim_seconds=0.0))) is None
    measured = [Measured(1, 250, OLD, row(250, 500, 10.0, sim_seconds=5.0)),
                Measured(1, 250, NEW, row(250, 500, 12.0, sim_seconds=7.5))]
    table = "\n".join(size_table(measured, 250, LABELS))
    assert "normalised by the simulated kubelet's CPU in each window 0.80x (rounds: 0.80x)" in table


def test_a_row_from_before_the_kubelet_seconds_were_kept_uses_its_cores() -> None:
    r = row(250, 500, 10.0, sim_seconds=5.0)
    del r["cpu"]["sim_seconds"]
    f = figures(r)
    assert f is not None and f.per_kubelet == pytest.approx(2.0)


def test_the_floor_is_read_from_bench_floors_own_printout_and_each_side_is_shown_over_it() -> None:
    printout = ("| report POST, new connection | 905 µs | 1 | 0.91 ms |\n"
                "| **floor per run** | | | **5.50 ms** |\n\nbeside: pod event ...")
    assert floor_of(printout) == pytest.approx(5.5)
    assert floor_of("bench.floor: the test bed did not start") is None
    measured = [Measured(1, 250, OLD, row(250, 500, 5.5)), Measured(1, 250, NEW, row(250, 500, 4.4))]
    [line] = floor_lines({1: 5.5}, measured, 250)  # old 11 ms per run, new 8.8 ms
    assert line == ("250 checks round 1: floor 5.50 ms per run; old 2.00x the floor, new 1.60x; "
                    "the 0.6x target is 1.20x the floor")
    [unmeasured] = floor_lines({1: None}, measured, 250)
    assert "floor - per run; old - the floor, new -; the 0.6x target is - the floor" in unmeasured
