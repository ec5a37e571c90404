"""Short regression versions of the `make faults` restart and stall scenarios (bench/faults_bench.py).

Each test runs on a private test bed (its own API server + etcd), so restarting or cutting off the API
server never disturbs the session's shared `cluster`. The daemon runs as a real process. The asserts
are the contract's promises (docs/interface.md#under-faults): no false alarm for a checker that reported OK,
every check records a good run within 60 s of the fault's end, a silent API stream is replaced within
30 s, never two live checker pods for one check, `/` and `/healthz` answer throughout. Failures that
the simulated kubelet itself caused (a pod status write it lost during the outage) are not blamed on
the product; they are reported as a warning, since they leave those runs unproven.
"""
from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed.faults.faultbed import RECOVERY_LIMIT, BedSettings, FaultBed, fault_api_kill, fault_proxy_stall
from testbed.faults.verdict import Outcome, evaluate

SILENT_STREAM_LIMIT = 30.0  # seconds: a silent watch stream is replaced within this (contract)
SHORT = BedSettings(checks=4, interval="6s", timeout="20s", delays=(0.5, 1.0), log_level=logging.INFO)
SETTLE = 25.0  # seconds after the fault: runs it caught end (fail or not) within their 20 s timeout


@pytest.fixture
def bed_factory(tmp_path: Path) -> Iterator[Callable[[BedSettings], FaultBed]]:
    """Started fault beds, always stopped (API server thawed, every process and thread ended)."""
    beds: list[FaultBed] = []

    def make(settings: BedSettings) -> FaultBed:
        bed = FaultBed(tmp_path / "bed", settings)
        beds.append(bed)
        return bed.start(warmup_timeout=60)
    yield make
    for bed in beds:
        bed.stop()


def assert_invariants(outcome: Outcome) -> None:
    where = f"(logs: {outcome.workdir})"
    if outcome.bed_failures:
        warnings.warn(f"the simulated kubelet broke {len(outcome.bed_failures)} runs; unproven: "
                      + " | ".join(outcome.bed_problems) + f" {where}", stacklevel=2)
    assert not outcome.false_alarms, f"false alarms: {outcome.violations} {where}"
    assert outcome.recovery_s is not None, f"no good run after the fault for {outcome.unrecovered} {where}"
    assert outcome.recovery_s <= RECOVERY_LIMIT, f"first good run only after {outcome.recovery_s:.1f}s {where}"
    assert outcome.max_live <= 1, f"two live checker pods for one check: {outcome.overlaps} {where}"
    assert not outcome.violations, f"{outcome.violations} {where}"


def test_an_api_server_restart_causes_no_false_alarm_and_checks_recover(
        bed_factory: Callable[[BedSettings], FaultBed]) -> None:
    bed = bed_factory(SHORT)
    bed.wait_mid_runs(limit=10, at_least=1)
    _, end = fault_api_kill(bed, down=3.0)
    bed.observe_recovery(end, settle=SETTLE, limit=RECOVERY_LIMIT + 5)
    assert_invariants(evaluate(bed, "api-kill", end))


def test_a_silent_api_path_is_replaced_within_30s_and_causes_no_false_alarm(
        bed_factory: Callable[[BedSettings], FaultBed]) -> None:
    bed = bed_factory(dataclasses.replace(SHORT, api_via_proxy=True))
    assert bed.api_proxy is not None
    bed.wait_mid_runs(limit=10, at_least=1)
    # After the stall every connection opened so far stays silent for good: only a client that gives
    # up on a silent stream and reconnects gets through again.
    _, end = fault_proxy_stall(bed, seconds=5.0, blackhole_old=True)
    bed.observe_recovery(end, settle=SETTLE, limit=RECOVERY_LIMIT + 5)
    outcome = evaluate(bed, "proxy-stall", end)
    reconnects = bed.api_proxy.accepted_since(end)
    assert reconnects, f"the daemon never opened a new API connection after the stall (logs: {bed.workdir})"
    assert reconnects[0] - end <= SILENT_STREAM_LIMIT, (
        f"first new API connection {reconnects[0] - end:.1f}s after the stall (logs: {bed.workdir})")
    assert_invariants(outcome)
