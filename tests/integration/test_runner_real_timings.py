"""Runs against the simulated kubelet in real-timings mode (timings.REAL): a pod is Running about 1 s
after it was created, and a deleted pod's container stops (exit 143), the pod is Failed while it is
Terminating, and the object goes only ~10 s after the delete, as on a real kubelet (testbed/README.md).

A drain (an eviction, as `kubectl drain` does it) mid-run skips the run, whichever phase it hits;
a checker that ends without reporting fails with v2's reason first and why second; the run's own
eviction on a timeout is still a failure.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kuberhealthy.kube import PODS
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.run.runner import Outcome, Phase, Runner, RunResult
from testbed.cluster.apiserver import TestCluster
from testbed.daemons.inprocess import InProcessDaemon, check_spec, state_of
from testbed.fakes.readouts import skipped_count
from testbed.sim.kubelet import SimKubelet
from testbed.sim.timings import REAL
from testbed.wait import wait_for

REPORT_IN = "timed out waiting for checker pod to report in"


@pytest.fixture
def kubelet(cluster: TestCluster, namespace: str) -> Iterator[SimKubelet]:
    """The simulated kubelet with a real kubelet's timings."""
    sim = SimKubelet(str(cluster.kubeconfig), nodes=1, namespace=namespace, signing_key=cluster.sa_key,
                     timings=REAL)
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()


class Background:
    """One run on a thread of its own, so the test can drain its pod mid-way."""

    def __init__(self, d: InProcessDaemon, check: CheckSpec) -> None:
        self.runner = Runner(d.services, check, threading.Event())
        self.box: dict[str, Any] = {}
        self._thread = threading.Thread(target=lambda: self.box.update(r=self.runner.run()), name="kh-test-run")
        self._thread.start()

    def result(self) -> RunResult:
        self._thread.join(90)
        assert not self._thread.is_alive(), f"the run did not end (phase {self.runner.phase.value})"
        result: RunResult = self.box["r"]
        return result


def drain(d: InProcessDaemon, run: Background, phase: Phase) -> dict[str, Any]:
    """Evict the run's pod (as `kubectl drain` does) once the run is in `phase`; the pod as it was then."""
    wait_for(lambda: run.runner.phase is phase and run.runner.pod.name, what=f"the run in {phase.value}")
    pod = d.services.resources.get(PODS, run.runner.check.namespace, run.runner.pod.name, timeout=5)
    d.services.resources.evict_pod(run.runner.check.namespace, run.runner.pod.name, timeout=5)
    return pod


def assert_skipped_as_pod_deleted(d: InProcessDaemon, namespace: str, result: RunResult, phase: Phase) -> None:
    assert result.outcome is Outcome.SKIPPED, result
    assert result.skip_reason == "pod-deleted" and result.phase is phase and result.errors == []
    assert skipped_count(d.services.stats, "pod-deleted") == 1
    s = state_of(d, namespace)
    assert s.errors == () and s.run_duration == ""  # nothing recorded for the run


def test_the_real_timings_kubelet_stops_a_deleted_pod_and_removes_it_seconds_later(
        kubelet: SimKubelet, daemon: InProcessDaemon, namespace: str) -> None:
    """What the runs below meet: Running after ~1 s; on a delete, exit 143 and Failed while Terminating."""
    run = Background(daemon, check_spec(namespace, "kh-sim/hang-silent", timeout="60s"))
    pod = drain(daemon, run, Phase.REPORT)
    record = kubelet.record(namespace, pod["metadata"]["name"])
    assert record is not None and record.running is not None and record.seen is not None
    assert record.running - record.seen > 0.5  # not at once
    stopped = wait_for(lambda: (p := daemon.services.resources.get(PODS, namespace, pod["metadata"]["name"],
                                                                    timeout=5))["status"]["phase"] == "Failed" and p,
                       what="the pod Failed while Terminating")
    assert stopped["metadata"]["deletionTimestamp"]
    assert stopped["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 143
    assert record.deleted is None and record.exit_code == 143  # the object is still there
    run.result()


def test_a_checker_pod_drained_before_it_reported_skips_the_run(daemon: InProcessDaemon, namespace: str) -> None:
    """Before the fix: `timed out waiting for checker pod to report in`, ~1 s after the delete."""
    run = Background(daemon, check_spec(namespace, "kh-sim/hang-silent", timeout="60s"))
    drain(daemon, run, Phase.REPORT)
    result = run.result()
    assert_skipped_as_pod_deleted(daemon, namespace, result, Phase.REPORT)
    assert result.duration < 30  # at once, not at the deadline (a generous bound)


def test_a_checker_pod_drained_while_it_starts_skips_the_run(daemon: InProcessDaemon, namespace: str) -> None:
    """Before the fix: the Terminating pod outlived the deadline Pending, `failed to see pod running`."""
    run = Background(daemon, check_spec(namespace, "kh-sim/ok", timeout="5s", env={"SIM_PENDING_DELAY": "30"}))
    # bound (an unscheduled pod's delete is immediate on any API server), Pending, with its IP (a later sync)
    wait_for(lambda: ((run.runner.pod.current() or {}).get("status") or {}).get("podIP"), what="the pod Pending")
    drain(daemon, run, Phase.START)
    assert_skipped_as_pod_deleted(daemon, namespace, run.result(), Phase.START)


def test_a_checker_pod_drained_after_it_reported_but_before_it_exited_skips_the_run(
        daemon: InProcessDaemon, namespace: str) -> None:
    """Before the fix: the pod's exit 143 while Terminating was taken for its exit, and the run recorded."""
    run = Background(daemon, check_spec(namespace, "kh-sim/hang", timeout="60s"))
    drain(daemon, run, Phase.EXIT)
    result = run.result()
    assert result.outcome is Outcome.SKIPPED and result.skip_reason == "pod-deleted" and result.phase is Phase.EXIT
    s = state_of(daemon, namespace)
    assert s.ok is True and s.run_duration == ""  # the report stands; the run is not recorded


def test_an_oom_killed_checker_fails_with_v2s_reason_first_and_the_oom_kill_second(
        daemon: InProcessDaemon, namespace: str) -> None:
    result = Background(daemon, check_spec(namespace, "kh-sim/oom", timeout="60s")).result()
    assert result.outcome is Outcome.FAILED and result.phase is Phase.REPORT
    assert state_of(daemon, namespace).errors == (
        f"Check execution error: {namespace}/probe: {REPORT_IN}",
        f"checker pod {result.pod} container main: OOMKilled (exit 137)")


def test_the_runs_own_eviction_on_a_timeout_is_still_a_failure_with_v2s_reason(
        kubelet: SimKubelet, daemon: InProcessDaemon, namespace: str) -> None:
    t0 = time.monotonic()
    result = Background(daemon, check_spec(namespace, "kh-sim/hang-silent", timeout="3s")).result()
    assert result.outcome is Outcome.FAILED and result.phase is Phase.REPORT
    assert state_of(daemon, namespace).errors == (f"Check execution error: {namespace}/probe: {REPORT_IN}",)
    assert time.monotonic() - t0 < 30  # at the deadline, not after the pod is gone
    record = wait_for(lambda: (r := kubelet.record(namespace, result.pod)) and r.exit_code == 143 and r,
                      what="the evicted pod stopped (exit 143)")
    assert record.deleted is None or record.deleted > record.exited  # Terminating for a while


def test_a_passing_check_is_recorded_with_a_real_kubelets_start_up_time(daemon: InProcessDaemon,
                                                                         namespace: str) -> None:
    result = Background(daemon, check_spec(namespace, "kh-sim/ok", timeout="20s")).result()
    assert result.outcome is Outcome.REPORTED and result.phase is Phase.DONE
    assert result.duration >= REAL.running_after * 0.5
    assert state_of(daemon, namespace).ok is True
