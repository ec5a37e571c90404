"""One check run over the in-memory fakes: every way a run ends, with the clock driven by the test.

The run is on its own thread (as on a check worker); the test plays the kubelet, the checker and the
faults, waiting on what the run does to the fakes (no polling), and moves time past the deadline by
hand. The reasons are v2's, word for word: alerts and dashboards match on them. Every test runs for each
kind of check (a khcheck, its state in a khstate; a HealthCheck, its state in its status): one machinery.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, Generic, Protocol

import pytest

from kuberhealthy.base.errors import Unreachable
from kuberhealthy.kube import HEALTHCHECKS, KHSTATES, PODS, Api, Cache, Obj, Resource
from kuberhealthy.needs import ControlNeeds, ReaperNeeds, RunNeeds, WebNeeds
from kuberhealthy.records import khstate, rollcodec, rollups, uptime
from kuberhealthy.records.checkpod import SIDECARS_ANNOTATION, build_pod
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.records.history import RunFacts, RunRecord
from kuberhealthy.run.runner import Outcome, Phase, Runner, RunResult
from testbed.fakes import KINDS, NODE, NS, REPORTING_URL, FakeServices, FakeStop, Subject, report
from testbed.fakes.clock import stamp
from testbed.fakes.readouts import skipped_count

PAST_DEADLINE = 61.0  # seconds: the check's timeout, and a little

_started: list[Run] = []  # runs of the current test
_subject: list[Subject] = []  # the check of the current test


@pytest.fixture(params=KINDS)
def subject(request: pytest.FixtureRequest, fake_services: FakeServices) -> Iterator[Subject]:
    """The check under test, of each kind in turn (every test of this module runs for both)."""
    it = Subject(fake_services, request.param, timeout="60s")
    _subject.append(it)
    yield it
    _subject.clear()


@pytest.fixture(autouse=True)
def each_kind(subject: Subject) -> Subject:
    return subject


def the_check() -> CheckSpec:
    return _subject[0].spec


def state_res() -> Resource:
    """Where the check's state is written."""
    return HEALTHCHECKS if _subject[0].kind == "healthcheck" else KHSTATES


@pytest.fixture(autouse=True)
def halt_runs_left_running() -> Iterator[None]:
    """A test that failed half way leaves its run waiting: stop it, so the next test starts clean."""
    yield
    while _started:
        run = _started.pop()
        run.halt()
        run.join()


class Run:
    """Runner(check).run() on a thread named like a worker's (so the leak guard sees it), driven by the test."""

    def __init__(self, services: FakeServices, check: CheckSpec | None = None) -> None:
        check = check or the_check()
        self.services = services
        self.stop = FakeStop(services.clock)
        self.runner = Runner(services, check, self.stop, clock=services.clock, wall=services.clock.wall)
        self._thread = futures.ThreadPoolExecutor(1, thread_name_prefix=f"kh-test-run-{check.name}")
        self._future = self._thread.submit(self.runner.run)
        _started.append(self)

    def pod(self) -> Obj:
        """The checker pod this run created, once it has."""
        pods = self.services.until(lambda: self.services.run_pods(self.runner.run_uuid), "the run's checker pod")
        return pods[0]

    def reached(self, phase: Phase) -> None:
        self.services.until(lambda: self.runner.phase is phase, f"phase {phase.value}")

    def halt(self) -> None:
        """What a worker's stop() does to its current run."""
        self.stop.set()
        self.runner.wake()

    def result(self, timeout: float = 10.0) -> RunResult:
        """The run's result (or what it raised); AssertionError if it does not end within `timeout` real s."""
        try:
            return self._future.result(timeout)
        except futures.TimeoutError:
            raise AssertionError(f"the run did not end (phase {self.runner.phase.value})") from None

    def join(self) -> None:
        self._thread.shutdown(wait=True)


def state(services: FakeServices) -> khstate.Spec:
    """The check's state as the API server has it (its khstate, or its HealthCheck's status)."""
    return _subject[0].state()


def execution_error(reason: str, name: str = "probe") -> tuple[str, ...]:
    """v2's run error, naming the check `<ns>/<name>` (a HealthCheck's too)."""
    return (f"Check execution error: {NS}/{name}: {reason}",)


def gone(services: FakeServices, pod: Obj) -> bool:
    return services.api.peek(PODS, NS, pod["metadata"]["name"]) is None


def drained(services: FakeServices, pod: Obj, stopped: bool = False) -> Obj:
    """`kubectl drain` (an eviction) as a real kubelet shows it: a deletionTimestamp 30 s ahead and the
    object still there; `stopped`: the container has stopped on the SIGTERM as well (exit 143), so the
    pod is Failed while Terminating (what the run then sees, when it looks after the kubelet's sync)."""
    def change(p: Obj) -> None:
        p["metadata"]["deletionTimestamp"] = stamp(services.clock)
        p["metadata"]["deletionGracePeriodSeconds"] = 30
        if stopped:
            sigterm(p)
    return services.api.edit(PODS, NS, pod["metadata"]["name"], change)


def sigterm(p: Obj) -> None:
    p["status"]["phase"] = "Failed"
    p["status"]["containerStatuses"] = [{"name": "main", "state": {"terminated": {"exitCode": 143, "reason": "Error"}}}]


def ended(services: FakeServices, pod: Obj, **status: Any) -> Obj:
    """The pod Failed, with these status fields (containerStatuses, initContainerStatuses, reason...)."""
    def change(p: Obj) -> None:
        p.setdefault("status", {}).update(phase="Failed", **status)
    return services.api.edit(PODS, NS, pod["metadata"]["name"], change)


def terminated(name: str, code: int, reason: str) -> dict[str, Any]:
    return {"name": name, "state": {"terminated": {"exitCode": code, "reason": reason}}}


def earlier_pod(services: FakeServices, run_uuid: str = "earlier-run", age: float = 600.0, **status: Any) -> Obj:
    """A checker pod of the check left by an earlier run, Running on the node."""
    body = build_pod(the_check(), run_uuid, services.clock.wall() - age, REPORTING_URL)
    body["status"] = {"phase": "Running", **status}
    return services.api.put(PODS, body)


# --- the fakes keep up with the seams ------------------------------------------------------------------

def protocol_members(proto: type) -> set[str]:
    return {name for klass in proto.__mro__ if klass not in (object, Protocol, Generic)
            for name in vars(klass) if not name.startswith("_")}


def test_the_fakes_offer_every_member_the_seams_name(fake_services: FakeServices) -> None:
    for proto, fake in ((RunNeeds, fake_services), (ControlNeeds, fake_services), (ReaperNeeds, fake_services),
                        (WebNeeds, fake_services), (Cache, fake_services.pods), (Api, fake_services.api)):
        missing = sorted(n for n in protocol_members(proto) if not hasattr(fake, n))
        assert not missing, f"{type(fake).__name__} lacks {proto.__name__}'s {missing}"


# --- the run's outcomes ---------------------------------------------------------------------------------

def test_a_check_that_reports_ok_is_recorded_with_its_duration_node_and_uuid(fake_services: FakeServices) -> None:
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    fake_services.clock.advance(2.5)
    report(fake_services, pod, ok=True)
    fake_services.kubelet.finish(pod)
    result = run.result()
    assert result.outcome is Outcome.REPORTED and result.phase is Phase.DONE and result.errors == []
    assert result.duration == 2.5 and result.node == NODE and result.pod == pod["metadata"]["name"]
    s = state(fake_services)
    assert s.ok is True and s.errors == () and s.uuid == result.run_uuid and s.last_run
    assert s.run_duration == "2.5s" and s.node == NODE and s.authoritative_pod == "kh-test-0"
    assert not gone(fake_services, pod)  # a finished pod is the reaper's, not the run's, to remove


def test_a_check_that_reports_failure_is_recorded_with_its_errors(fake_services: FakeServices) -> None:
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    report(fake_services, pod, ok=False, errors=["disk full", "dns slow"])
    fake_services.kubelet.finish(pod)
    result = run.result()
    assert result.outcome is Outcome.REPORTED and result.phase is Phase.DONE
    s = state(fake_services)
    assert s.ok is False and s.errors == ("disk full", "dns slow") and s.uuid == result.run_uuid


def test_a_run_whose_state_is_cached_costs_one_claim_one_create_and_one_record(
        fake_services: FakeServices, subject: Subject) -> None:
    subject.seed(uuid="the-run-before")
    fake_services.api.calls.clear()
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    report(fake_services, pod)  # the report handler's write, not the run's
    fake_services.kubelet.finish(pod)
    assert run.result().outcome is Outcome.REPORTED
    write = subject.write
    assert [(c.method, c.plural) for c in fake_services.api.calls] == [write, ("create", "pods"), write, write]


def test_a_pod_that_never_leaves_pending_fails_as_not_seen_running_within_the_timeout(
        fake_services: FakeServices) -> None:
    run = Run(fake_services)
    pod = run.pod()
    fake_services.clock.advance(PAST_DEADLINE)
    result = run.result()
    assert result.outcome is Outcome.FAILED and result.phase is Phase.START
    assert tuple(result.errors) == execution_error("failed to see pod running within timeout")
    s = state(fake_services)
    assert s.ok is False and s.errors == execution_error("failed to see pod running within timeout")
    assert gone(fake_services, pod)


def test_a_run_that_times_out_pending_reads_only_its_pod_then_records_from_its_cache(
        fake_services: FakeServices, subject: Subject) -> None:
    """A slow start costs no more than a quick run: the pod's fresh read (its containers never ran, so no
    report can be stored: no state read), the failure written from the cached state, the eviction."""
    subject.seed(uuid="the-run-before")
    fake_services.api.calls.clear()
    run = Run(fake_services)
    run.pod()
    fake_services.clock.advance(PAST_DEADLINE)
    assert run.result().outcome is Outcome.FAILED
    write = subject.write
    assert [(c.method, c.plural) for c in fake_services.api.calls] == [
        write, ("create", "pods"), ("get", "pods"), ("evict_pod", "pods"), write]


def test_a_checker_that_never_reports_times_out_waiting_for_the_report(fake_services: FakeServices) -> None:
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    fake_services.clock.advance(PAST_DEADLINE)
    result = run.result()
    assert result.outcome is Outcome.FAILED and result.phase is Phase.REPORT
    assert state(fake_services).errors == execution_error("timed out waiting for checker pod to report in")
    assert gone(fake_services, pod)


def test_a_checker_that_ends_without_reporting_fails_at_once_not_at_the_deadline(
        fake_services: FakeServices) -> None:
    run = Run(fake_services)
    fake_services.kubelet.finish(fake_services.kubelet.run(run.pod()), ok=False)
    result = run.result()
    assert result.outcome is Outcome.FAILED and result.duration == 0.0
    # v2's reason first (alerts match on it), then why, from the pod's status
    assert state(fake_services).errors == (*execution_error("timed out waiting for checker pod to report in"),
                                           f"checker pod {result.pod} container main exited 1")


def test_a_checker_that_reports_but_never_exits_times_out_waiting_for_the_pod_to_exit(
        fake_services: FakeServices) -> None:
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    report(fake_services, pod)
    run.reached(Phase.EXIT)
    fake_services.clock.advance(PAST_DEADLINE)
    result = run.result()
    assert result.outcome is Outcome.FAILED and result.phase is Phase.EXIT
    assert state(fake_services).errors == execution_error("timed out waiting for pod to exit")
    assert gone(fake_services, pod)


def test_an_image_that_cannot_be_pulled_fails_the_run_at_once(fake_services: FakeServices) -> None:
    run = Run(fake_services)
    pod = fake_services.kubelet.fail_to_pull(run.pod())
    result = run.result()
    assert result.outcome is Outcome.FAILED and result.phase is Phase.START and result.duration == 0.0
    assert state(fake_services).errors == execution_error("error when waiting for pod to start: ErrImagePull")
    assert gone(fake_services, pod)


def test_a_pod_spec_without_an_image_fails_the_run_before_any_pod_is_created(
        fake_services: FakeServices, subject: Subject) -> None:
    blank = Subject(fake_services, subject.kind, "blank", image="")
    result = Run(fake_services, blank.spec).result()
    assert result.outcome is Outcome.FAILED and result.phase is Phase.VALIDATE
    assert blank.state().errors == execution_error("podSpec container main has no image", "blank")
    assert not fake_services.api.made("create", PODS)


def test_an_earlier_checker_pod_still_running_is_removed_before_the_new_one_is_created(
        fake_services: FakeServices) -> None:
    old = earlier_pod(fake_services)
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    assert gone(fake_services, old)
    report(fake_services, pod)
    fake_services.kubelet.finish(pod)
    assert run.result().outcome is Outcome.REPORTED
    evictions = [c.name for c in fake_services.api.made("evict_pod")]
    assert evictions == [old["metadata"]["name"]]


def test_a_pod_stuck_terminating_fails_one_run_with_the_cleanup_error_and_does_not_block_the_next(
        fake_services: FakeServices) -> None:
    old = earlier_pod(fake_services)
    fake_services.api.stuck.add((NS, old["metadata"]["name"]))  # a finalizer nobody removes
    first = Run(fake_services)
    fake_services.until(lambda: fake_services.api.made("evict_pod"), "the earlier pod's eviction")
    fake_services.clock.advance(PAST_DEADLINE)
    result = first.result()
    assert result.outcome is Outcome.FAILED and result.phase is Phase.CLEAR
    assert state(fake_services).errors == execution_error("failed to see pod cleanup within timeout")
    assert fake_services.stuck_terminating == {old["metadata"]["uid"]}

    second = Run(fake_services)
    pod = fake_services.kubelet.run(second.pod())
    report(fake_services, pod)
    fake_services.kubelet.finish(pod)
    assert second.result().outcome is Outcome.REPORTED and state(fake_services).ok is True


def test_an_earlier_pod_deleted_while_still_pending_does_not_hold_up_the_next_run(
        fake_services: FakeServices) -> None:
    """After a failover the old leader's last pod may be deleted before any container of it started; a
    real kubelet can take most of a minute to remove it. Nothing of it runs: the new run goes ahead."""
    old = earlier_pod(fake_services, phase="Pending")
    fake_services.api.stuck.add((NS, old["metadata"]["name"]))  # deleting it only marks it Terminating
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    report(fake_services, pod)
    fake_services.kubelet.finish(pod)
    assert run.result().outcome is Outcome.REPORTED and state(fake_services).ok is True
    left = fake_services.api.peek(PODS, NS, old["metadata"]["name"])
    assert left is not None and left["metadata"].get("deletionTimestamp")  # evicted, still Terminating
    assert fake_services.stuck_terminating == set()  # not reported stuck: it was never waited for


def test_an_earlier_pod_whose_container_started_is_still_waited_for_while_terminating(
        fake_services: FakeServices) -> None:
    old = earlier_pod(fake_services, phase="Pending",
                      containerStatuses=[{"name": "main", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}])
    fake_services.api.stuck.add((NS, old["metadata"]["name"]))
    first = Run(fake_services)
    fake_services.until(lambda: fake_services.api.made("evict_pod"), "the earlier pod's eviction")
    fake_services.clock.advance(PAST_DEADLINE)
    result = first.result()
    assert result.outcome is Outcome.FAILED and result.phase is Phase.CLEAR


def test_a_checker_pod_deleted_by_someone_else_before_it_reported_skips_the_run(
        fake_services: FakeServices) -> None:
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    run.reached(Phase.REPORT)
    fake_services.api.remove(PODS, NS, pod["metadata"]["name"])
    result = run.result()
    assert result.outcome is Outcome.SKIPPED and result.skip_reason == "pod-deleted"
    assert result.duration == 0.0  # at once, not at the deadline
    s = state(fake_services)
    assert s.ok is True and s.errors == () and s.last_run is None
    assert skipped_count(fake_services.stats, "pod-deleted") == 1
    assert not fake_services.api.made("evict_pod")


@pytest.mark.parametrize("stopped", [False, True], ids=["terminating", "failed-while-terminating"])
def test_a_checker_pod_drained_while_it_starts_skips_the_run_as_pod_deleted(
        fake_services: FakeServices, stopped: bool) -> None:
    run = Run(fake_services)
    pod = run.pod()
    run.reached(Phase.START)
    drained(fake_services, pod, stopped)
    result = run.result()
    assert result.outcome is Outcome.SKIPPED and result.skip_reason == "pod-deleted" and result.phase is Phase.START
    assert result.duration == 0.0  # at once, not when the object is gone nor at the deadline
    assert state(fake_services).last_run is None and skipped_count(fake_services.stats, "pod-deleted") == 1
    assert not fake_services.api.made("evict_pod")


@pytest.mark.parametrize("stopped", [False, True], ids=["terminating", "failed-while-terminating"])
def test_a_checker_pod_drained_before_it_reported_skips_the_run_whatever_phase_it_ends_in(
        fake_services: FakeServices, stopped: bool) -> None:
    """The real kubelet's drain: the container stops on SIGTERM (exit 143) and the pod ends Failed while
    Terminating, seconds before the object goes; that is not a checker that ended without reporting."""
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    run.reached(Phase.REPORT)
    pod = drained(fake_services, pod, stopped)
    if not stopped:
        fake_services.api.edit(PODS, NS, pod["metadata"]["name"], sigterm)
    result = run.result()
    assert result.outcome is Outcome.SKIPPED and result.skip_reason == "pod-deleted" and result.phase is Phase.REPORT
    assert result.errors == [] and result.duration == 0.0
    s = state(fake_services)
    assert s.ok is True and s.errors == () and s.last_run is None
    assert skipped_count(fake_services.stats, "pod-deleted") == 1 and not fake_services.api.made("evict_pod")
    assert fake_services.api.peek(PODS, NS, pod["metadata"]["name"]) is not None  # still Terminating


@pytest.mark.parametrize("stopped", [False, True], ids=["terminating", "failed-while-terminating"])
def test_a_checker_pod_drained_after_it_reported_but_before_it_exited_skips_the_run(
        fake_services: FakeServices, stopped: bool) -> None:
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    report(fake_services, pod, ok=True)
    run.reached(Phase.EXIT)
    drained(fake_services, pod, stopped)
    result = run.result()
    assert result.outcome is Outcome.SKIPPED and result.skip_reason == "pod-deleted" and result.phase is Phase.EXIT
    s = state(fake_services)
    assert s.ok is True and s.errors == () and s.run_duration == ""  # the report stands; the run is not recorded
    assert skipped_count(fake_services.stats, "pod-deleted") == 1


def test_a_checker_pod_that_exited_before_it_was_deleted_is_recorded(fake_services: FakeServices) -> None:
    """The run saw it finish on its own first: a later deletion (the reaper, a person) changes nothing."""
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    report(fake_services, pod, ok=True)
    run.reached(Phase.EXIT)
    _subject[0].state_cache.pause()  # RECORD waits on its write; the run is past EXIT before the deletion
    fake_services.kubelet.finish(pod)
    fake_services.until(lambda: run.runner.phase is not Phase.EXIT, "the run past EXIT")
    drained(fake_services, pod)
    _subject[0].state_cache.resume()
    result = run.result()
    assert result.outcome is Outcome.REPORTED and state(fake_services).node == NODE


def test_an_oom_killed_checker_fails_with_v2s_reason_first_and_the_oom_kill_second(
        fake_services: FakeServices) -> None:
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    ended(fake_services, pod, containerStatuses=[terminated("main", 137, "OOMKilled")])
    result = run.result()
    assert result.outcome is Outcome.FAILED and result.phase is Phase.REPORT and result.duration == 0.0
    errors = (*execution_error("timed out waiting for checker pod to report in"),
              f"checker pod {result.pod} container main: OOMKilled (exit 137)")
    assert tuple(result.errors) == errors and state(fake_services).errors == errors
    assert fake_services.events.recorded[-1] == ("CheckFailed", f"{NS}/probe", errors[0])


def test_a_failed_init_container_fails_the_run_and_says_which_one_exited_how(
        fake_services: FakeServices, subject: Subject) -> None:
    init = Subject(fake_services, subject.kind, "init", timeout="60s", podSpec={
        "initContainers": [{"name": "setup", "image": "kh-sim/ok"}],
        "containers": [{"name": "main", "image": "kh-sim/ok"}]})
    run = Run(fake_services, init.spec)
    pod = run.pod()
    ended(fake_services, pod, initContainerStatuses=[terminated("setup", 1, "Error")],
          containerStatuses=[{"name": "main", "state": {"waiting": {"reason": "PodInitializing"}}}])
    result = run.result()
    assert result.outcome is Outcome.FAILED
    assert init.state().errors == (*execution_error("timed out waiting for checker pod to report in", "init"),
                                   f"checker pod {result.pod} init container setup exited 1")


def test_a_checker_evicted_by_its_node_under_pressure_is_skipped_as_disrupted_and_says_so(
        fake_services: FakeServices) -> None:
    """The kubelet's own eviction sets no deletionTimestamp: the pod just fails, with the reason. The
    cluster's housekeeping, not the check: skipped (pod-disrupted), with an Event."""
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    ended(fake_services, pod, reason="Evicted", message="The node was low on resource: memory. " + "x" * 500,
          containerStatuses=[terminated("main", 137, "Error")])
    result = run.result()
    assert result.outcome is Outcome.SKIPPED and result.skip_reason == "pod-disrupted"
    assert state(fake_services).errors == ()
    assert skipped_count(fake_services.stats, "pod-disrupted") == 1
    [detail] = [e[2] for e in fake_services.events.recorded if e[0] == "CheckPodDisrupted"]
    assert detail.startswith("1: Evicted: The node was low on resource: memory.") and len(detail) < 300


def test_a_checker_that_exits_0_without_reporting_fails_and_says_it_exited_0(fake_services: FakeServices) -> None:
    run = Run(fake_services)
    fake_services.kubelet.finish(fake_services.kubelet.run(run.pod()), ok=True)
    result = run.result()
    assert result.outcome is Outcome.FAILED
    assert state(fake_services).errors[1] == f"checker pod {result.pod} container main exited 0 without reporting"


def test_the_runs_own_eviction_on_a_timeout_is_still_a_failure_with_v2s_reason(fake_services: FakeServices) -> None:
    """Its own deletionTimestamp (the pod stays Terminating, as on a real kubelet) is not someone else's."""
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    fake_services.api.stuck.add((NS, pod["metadata"]["name"]))  # deleting it only marks it Terminating
    fake_services.clock.advance(PAST_DEADLINE)
    result = run.result()
    assert result.outcome is Outcome.FAILED and result.phase is Phase.REPORT
    assert state(fake_services).errors == execution_error("timed out waiting for checker pod to report in")
    left = fake_services.api.peek(PODS, NS, pod["metadata"]["name"])
    assert left is not None and left["metadata"].get("deletionTimestamp")  # evicted by the run, Terminating
    assert skipped_count(fake_services.stats, "pod-deleted") == 0


def test_an_earlier_pod_the_run_cleared_is_not_taken_for_its_own_pod_deleted(fake_services: FakeServices) -> None:
    old = earlier_pod(fake_services)
    fake_services.api.stuck.add((NS, old["metadata"]["name"]))
    run = Run(fake_services)
    fake_services.until(lambda: fake_services.api.made("evict_pod"), "the earlier pod's eviction")
    fake_services.api.edit(PODS, NS, old["metadata"]["name"], sigterm)  # it stops; it stays Terminating
    pod = fake_services.kubelet.run(run.pod())
    report(fake_services, pod)
    fake_services.kubelet.finish(pod)
    assert run.result().outcome is Outcome.REPORTED


# --- faults -------------------------------------------------------------------------------------------------

def test_api_errors_at_claim_and_create_are_retried_within_the_deadline(
        fake_services: FakeServices, subject: Subject) -> None:
    claim = ("create", KHSTATES) if subject.kind == "khcheck" else ("replace_status", HEALTHCHECKS)
    fake_services.api.fail(*claim)  # the claim creates the khstate (writes the HealthCheck's status)
    fake_services.api.fail("create", PODS, times=2)
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    report(fake_services, pod)
    fake_services.kubelet.finish(pod)
    result = run.result()
    assert result.outcome is Outcome.REPORTED and state(fake_services).ok is True
    assert len(fake_services.api.made(*claim)) >= 2 and len(fake_services.api.made("create", PODS)) == 3
    assert 0 < result.duration < 10  # the backoff passed on the fake clock, not the real one


def test_an_api_error_at_record_is_retried_and_the_duration_and_node_are_written(
        fake_services: FakeServices) -> None:
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    report(fake_services, pod)
    fake_services.api.fail(_subject[0].write[0], state_res())  # the run's next state write is RECORD
    fake_services.clock.advance(1.0)  # a duration to write (a HealthCheck's is nanoseconds: 0 reads as unset)
    fake_services.kubelet.finish(pod)
    result = run.result()
    assert result.outcome is Outcome.REPORTED and result.phase is Phase.DONE
    s = state(fake_services)
    assert s.ok is True and s.node == NODE and s.run_duration


def test_a_pod_create_whose_answer_was_lost_is_not_created_twice(fake_services: FakeServices) -> None:
    fake_services.api.fail("create", PODS, Unreachable("connection reset by peer"), commit=True)
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    report(fake_services, pod)
    fake_services.kubelet.finish(pod)
    assert run.result().outcome is Outcome.REPORTED
    assert len(fake_services.run_pods(run.runner.run_uuid)) == 1


def test_a_run_the_api_server_is_away_for_is_skipped_not_failed(fake_services: FakeServices) -> None:
    fake_services.api.down = True
    result = Run(fake_services).result()
    assert result.outcome is Outcome.SKIPPED and result.skip_reason == "api-unavailable"
    assert skipped_count(fake_services.stats, "api-unavailable") == 1
    fake_services.api.down = False
    assert state(fake_services).uuid == "" and not fake_services.api.objects(PODS)


def test_a_run_whose_caches_were_not_current_is_skipped_not_failed(fake_services: FakeServices) -> None:
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    fake_services.pods.set_current(False)  # the pod watch broke for a moment: a report may have been missed
    fake_services.pods.set_current(True)
    fake_services.clock.advance(PAST_DEADLINE)
    result = run.result()
    assert result.outcome is Outcome.SKIPPED and result.skip_reason == "api-unavailable"
    s = state(fake_services)
    assert s.ok is True and s.errors == ()
    assert gone(fake_services, pod)


def test_a_report_the_state_cache_has_not_seen_yet_is_confirmed_by_a_read_not_failed(
        fake_services: FakeServices, subject: Subject) -> None:
    """The state watch is behind when the pod ends; one read finds the report. (RECORD then writes
    from the stale cache copy, gets a 409 and re-reads: the product's conflict backoff, 20-40 ms real.)"""
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    run.reached(Phase.REPORT)
    subject.state_cache.pause()
    report(fake_services, pod, ok=False, errors=["slow dns"])
    fake_services.clock.advance(1.0)  # a duration to write (a HealthCheck's is nanoseconds: 0 reads as unset)
    fake_services.kubelet.finish(pod)
    result = run.result()
    subject.state_cache.resume()
    assert result.outcome is Outcome.REPORTED and result.phase is Phase.DONE
    s = state(fake_services)
    assert s.errors == ("slow dns",) and s.node == NODE and s.run_duration


def test_stopping_a_run_mid_way_removes_its_pod_and_records_no_failure(fake_services: FakeServices) -> None:
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    run.reached(Phase.REPORT)
    run.halt()
    result = run.result()
    assert result.outcome is Outcome.STOPPED and result.errors == []
    assert gone(fake_services, pod)
    assert [c.name for c in fake_services.api.made("evict_pod")] == [pod["metadata"]["name"]]
    s = state(fake_services)
    assert s.ok is True and s.errors == () and s.last_run is None
    assert skipped_count(fake_services.stats, "api-unavailable") == 0


class Points:
    """Stands in for the Influx forwarder."""

    def __init__(self) -> None:
        self.points: list[tuple[str, str, bool, list[str]]] = []

    def push(self, namespace: str, name: str, ok: bool, errors: list[str], duration: float) -> None:
        self.points.append((namespace, name, ok, list(errors)))


def test_reported_and_failed_runs_are_forwarded_to_influx_and_skipped_ones_are_not(
        fake_services: FakeServices) -> None:
    fake_services.influx = points = Points()
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    report(fake_services, pod, ok=False, errors=["disk full"])
    fake_services.kubelet.finish(pod)
    run.result()
    fake_services.clock.advance(1)  # the next run's pod name is a second later
    run = Run(fake_services)
    fake_services.kubelet.fail_to_pull(run.pod())
    run.result()
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    run.reached(Phase.REPORT)
    fake_services.api.remove(PODS, NS, pod["metadata"]["name"])
    assert run.result().outcome is Outcome.SKIPPED
    assert points.points == [
        (NS, "probe", False, ["disk full"]),
        (NS, "probe", False, list(execution_error("error when waiting for pod to start: ErrImagePull")))]


# --- sidecars that never exit, and disruptions (Kubernetes 1.26+ clusters) --------------------------------

MESHED_POD = {"containers": [{"name": "main", "image": "kh-sim/ok"}, {"name": "istio-proxy", "image": "proxy"}]}


def meshed(services: FakeServices, kind: str, **pod_spec: Any) -> Subject:
    """A check whose pod has a mesh's proxy beside the checker (or what `pod_spec` says)."""
    return Subject(services, kind, "meshed", timeout="60s", podSpec={**MESHED_POD, **pod_spec})


def checker_over(services: FakeServices, pod: Obj, code: int = 0, reason: str = "Completed",
                 sidecar: str = "istio-proxy", phase: str = "Running") -> Obj:
    """The checker container terminated; the sidecar runs on, so the pod stays `phase`."""
    def change(p: Obj) -> None:
        p["status"]["phase"] = phase
        p["status"]["containerStatuses"] = [terminated("main", code, reason),
                                            {"name": sidecar, "state": {"running": {}}}]
    return services.api.edit(PODS, NS, pod["metadata"]["name"], change)


def disrupted(services: FakeServices, pod: Obj, reason: str = "EvictionByEvictionAPI",
              message: str = "Eviction API: evicting", deleting: bool = True) -> Obj:
    """The DisruptionTarget condition a 1.26+ control plane or kubelet writes, and (but for a kubelet's
    own eviction) the deletionTimestamp that comes with it."""
    def change(p: Obj) -> None:
        p["status"].setdefault("conditions", []).append(
            {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message})
        if deleting:
            p["metadata"]["deletionTimestamp"] = stamp(services.clock)
    return services.api.edit(PODS, NS, pod["metadata"]["name"], change)


def annotate(annotations: dict[str, str]) -> Callable[[Obj], None]:
    """An edit of a pod that adds these annotations (as a webhook or the author puts them on it)."""
    def change(p: Obj) -> None:
        p["metadata"].setdefault("annotations", {}).update(annotations)
    return change


def deletes_of(services: FakeServices, pod: Obj) -> list[Any]:
    return [c for c in services.api.made(None, PODS) if c.method in ("delete", "evict_pod")
            and c.name == pod["metadata"]["name"]]


def reported_beside_a_proxy(services: FakeServices, kind: str) -> tuple[Subject, Run, Obj]:
    """A meshed check's run whose checker reported OK: the run waits in EXIT."""
    check = meshed(services, kind)
    run = Run(services, check.spec)
    pod = services.kubelet.run(run.pod())
    report(services, pod, ok=True)
    run.reached(Phase.EXIT)
    return check, run, pod


def test_a_checker_that_reported_beside_a_sidecar_that_never_exits_is_recorded_and_its_pod_ended(
        fake_services: FakeServices, subject: Subject) -> None:
    check, run, pod = reported_beside_a_proxy(fake_services, subject.kind)
    checker_over(fake_services, pod)
    result = run.result()  # no clock moved: within seconds, not at the timeout
    assert result.outcome is Outcome.REPORTED
    assert check.state().ok is True and check.state().node == NODE
    assert gone(fake_services, pod)  # the run ended the pod the sidecar kept alive


def test_a_sidecar_named_by_the_pods_annotation_or_the_config_does_not_hold_the_run(
        fake_services: FakeServices, subject: Subject) -> None:
    for name, sidecar in (("annotated", "vault-agent"), ("configured", "log-shipper")):
        if name == "configured":
            fake_services.config = dataclasses.replace(fake_services.config, sidecar_containers=("log-shipper",))
        pod_spec = {"containers": [{"name": "main", "image": "kh-sim/ok"}, {"name": sidecar, "image": "agent"}]}
        check = Subject(fake_services, subject.kind, name, timeout="60s", podSpec=pod_spec)
        run = Run(fake_services, check.spec)
        pod = fake_services.kubelet.run(run.pod())
        if name == "annotated":  # as a webhook or the author puts it on the pod
            fake_services.api.edit(PODS, NS, pod["metadata"]["name"], annotate({SIDECARS_ANNOTATION: f" x, {sidecar}"}))
        report(fake_services, pod, ok=True)
        run.reached(Phase.EXIT)
        checker_over(fake_services, pod, sidecar=sidecar)
        assert run.result().outcome is Outcome.REPORTED, name
        assert gone(fake_services, pod), name


def test_a_checker_that_crashes_beside_a_sidecar_fails_at_once_with_its_own_exit(
        fake_services: FakeServices, subject: Subject) -> None:
    check = meshed(fake_services, subject.kind)
    run = Run(fake_services, check.spec)
    pod = fake_services.kubelet.run(run.pod())
    fake_services.api.logs[(NS, pod["metadata"]["name"])] = "dialing the service\npanic: no route to host\n"
    checker_over(fake_services, pod, code=3, reason="Error")
    result = run.result()  # no clock moved: not at the timeout
    assert result.outcome is Outcome.FAILED and result.phase is Phase.REPORT
    assert check.state().errors == (*execution_error("timed out waiting for checker pod to report in", "meshed"),
                                    f"checker pod {result.pod} container main exited 3")
    assert gone(fake_services, pod)
    [entry] = check.history()
    assert "panic: no route to host" in entry.get("logs", "")  # read before the pod was ended
    log_reads = fake_services.api.made("pod_log")
    assert log_reads and all((c.body or {}).get("container") == "main" for c in log_reads)  # not the proxy's


def test_a_checker_that_reported_and_never_exits_beside_a_sidecar_still_times_out_waiting_for_exit(
        fake_services: FakeServices, subject: Subject) -> None:
    check, run, _ = reported_beside_a_proxy(fake_services, subject.kind)
    fake_services.clock.advance(PAST_DEADLINE)
    run.runner.wake()
    result = run.result()
    assert result.outcome is Outcome.FAILED and result.phase is Phase.EXIT
    assert check.state().errors == execution_error("timed out waiting for pod to exit", "meshed")


def test_a_sidecars_exit_never_decides_the_run_nor_its_errors(fake_services: FakeServices, subject: Subject) -> None:
    """A native sidecar (an init container with restartPolicy Always) the kubelet stopped with SIGTERM,
    and a checker that exited 0 without reporting: the checker's exit is the one told."""
    check = meshed(fake_services, subject.kind, initContainers=[
        {"name": "proxy", "image": "proxy", "restartPolicy": "Always"}])
    run = Run(fake_services, check.spec)
    pod = fake_services.kubelet.run(run.pod())
    ended(fake_services, pod, initContainerStatuses=[terminated("proxy", 143, "Error")],
          containerStatuses=[terminated("main", 0, "Completed"), terminated("istio-proxy", 137, "Error")])
    result = run.result()
    assert result.outcome is Outcome.FAILED
    assert check.state().errors[1] == f"checker pod {result.pod} container main exited 0 without reporting"


def test_a_native_sidecar_still_stopping_does_not_hold_a_run_that_reported(
        fake_services: FakeServices, subject: Subject) -> None:
    """The kubelet stops native sidecars itself: the run goes on once the checker is over, and leaves
    the pod to the kubelet (no delete of its own)."""
    check = Subject(fake_services, subject.kind, "native", timeout="60s", podSpec={
        "initContainers": [{"name": "proxy", "image": "proxy", "restartPolicy": "Always"}],
        "containers": [{"name": "main", "image": "kh-sim/ok"}]})
    run = Run(fake_services, check.spec)
    pod = fake_services.kubelet.run(run.pod())
    report(fake_services, pod, ok=True)
    run.reached(Phase.EXIT)

    def main_over(p: Obj) -> None:  # a 1.20 server dropped restartPolicy from the pod: known from the check
        p["status"]["initContainerStatuses"] = [{"name": "proxy", "state": {"running": {}}}]
        p["status"]["containerStatuses"] = [terminated("main", 0, "Completed")]
    fake_services.api.edit(PODS, NS, pod["metadata"]["name"], main_over)
    assert run.result().outcome is Outcome.REPORTED
    assert not deletes_of(fake_services, pod) and not gone(fake_services, pod)


@pytest.mark.parametrize("how", ["EvictionByEvictionAPI", "PreemptionByScheduler", "DeletionByTaintManager",
                                 "TerminationByKubelet"])
def test_a_checker_pod_disrupted_before_it_reported_skips_the_run_as_pod_disrupted(
        fake_services: FakeServices, how: str) -> None:
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    disrupted(fake_services, pod, reason=how, deleting=how != "TerminationByKubelet")
    result = run.result()
    assert result.outcome is Outcome.SKIPPED and result.skip_reason == "pod-disrupted"
    assert state(fake_services).errors == ()
    assert skipped_count(fake_services.stats, "pod-disrupted") == 1
    assert skipped_count(fake_services.stats, "pod-deleted") == 0
    assert [e[2].split(":")[0:2] for e in fake_services.events.recorded if e[0] == "CheckPodDisrupted"] == [
        ["1", f" {how}"]]


def test_a_checker_pod_disrupted_after_it_reported_keeps_its_result(fake_services: FakeServices) -> None:
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    report(fake_services, pod, ok=False, errors=["dns slow"])
    run.reached(Phase.EXIT)
    disrupted(fake_services, pod)
    result = run.result()
    assert result.outcome is Outcome.REPORTED
    assert state(fake_services).errors == ("dns slow",) and state(fake_services).node == NODE
    assert skipped_count(fake_services.stats, "pod-disrupted") == 0


def test_three_disrupted_runs_in_a_row_fail_the_third_and_a_judged_run_breaks_the_streak(
        fake_services: FakeServices) -> None:
    def disrupted_run() -> RunResult:
        run = Run(fake_services)
        pod = fake_services.kubelet.run(run.pod())
        disrupted(fake_services, pod, reason="TerminationByKubelet", message="The node was low on resource: memory.",
                  deleting=False)
        result = run.result()
        fake_services.api.delete(PODS, NS, pod["metadata"]["name"])
        fake_services.clock.advance(1.0)  # the next run's pod gets a new name
        return result

    assert [disrupted_run().outcome for _ in range(2)] == [Outcome.SKIPPED, Outcome.SKIPPED]
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    report(fake_services, pod, ok=True)
    fake_services.kubelet.finish(pod)
    assert run.result().outcome is Outcome.REPORTED  # judged: the streak starts again
    fake_services.api.delete(PODS, NS, pod["metadata"]["name"])
    fake_services.clock.advance(1.0)
    assert [disrupted_run().outcome for _ in range(3)] == [Outcome.SKIPPED, Outcome.SKIPPED, Outcome.FAILED]
    assert state(fake_services).errors[0] == execution_error(
        "checker pod disrupted 3 times in a row: TerminationByKubelet: The node was low on resource: memory.")[0]
    assert skipped_count(fake_services.stats, "pod-disrupted") == 4


def test_the_runs_own_eviction_is_not_taken_for_a_disruption(fake_services: FakeServices) -> None:
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    fake_services.clock.advance(PAST_DEADLINE)
    run.runner.wake()
    fake_services.until(lambda: deletes_of(fake_services, pod), "the run's eviction")
    result = run.result()
    assert result.outcome is Outcome.FAILED and result.skip_reason == ""


# --- uptime rollups ride on the run's own write ------------------------------------------------------------

def rollup_now(services: FakeServices) -> rollups.Rollup:
    """The rollup the check's state holds (khstate spec.rollups, or the HealthCheck's status.rollups)."""
    raw = ((_subject[0].raw_state() or {}).get("spec") or {}).get(uptime.FIELD)
    rollup, warning = rollcodec.parse(raw)
    assert warning is None
    return rollup


def counts(rollup: rollups.Rollup) -> tuple[int, int, int]:
    return (sum(h.ok for h in rollup.hours), sum(h.failed for h in rollup.hours),
            sum(h.skipped for h in rollup.hours))


def finished_run(services: FakeServices, ok: bool | None) -> RunResult:
    """One run to its end: reported OK or not OK, or (None) its pod deleted by someone else (skipped)."""
    run = Run(services)
    pod = services.kubelet.run(run.pod())
    services.clock.advance(1.5)
    if ok is None:
        run.reached(Phase.REPORT)
        services.api.remove(PODS, NS, pod["metadata"]["name"])
    else:
        report(services, pod, ok=ok, errors=[] if ok else ["down"])
        services.kubelet.finish(pod)
    result = run.result()
    if services.api.peek(PODS, NS, pod["metadata"]["name"]) is not None:
        services.api.remove(PODS, NS, pod["metadata"]["name"])  # the reaper's work
    services.clock.advance(60.0)
    return result


def test_each_judged_run_is_counted_in_its_hour_of_the_rollup_with_its_duration_in_the_same_write(
        fake_services: FakeServices) -> None:
    finished_run(fake_services, True)
    writes = len(fake_services.api.calls)
    finished_run(fake_services, False)
    state_writes = [c for c in fake_services.api.calls[writes:] if c.plural == state_res().plural]
    assert len(state_writes) == 3  # claim, report, record: the rollup makes no request of its own
    rollup = rollup_now(fake_services)
    assert counts(rollup) == (1, 1, 0)
    assert rollups.windows(rollup, fake_services.clock.wall())["1h"]["uptime"] == 0.5
    p50 = rollups.windows(rollup, fake_services.clock.wall())["24h"]["durationP50"]
    assert p50 is not None and abs(p50 - 1.5) <= 1.5 * rollups.ALPHA


def test_a_skipped_run_is_counted_by_the_next_runs_write_and_only_once(fake_services: FakeServices) -> None:
    finished_run(fake_services, True)
    assert finished_run(fake_services, None).outcome is Outcome.SKIPPED
    assert counts(rollup_now(fake_services)) == (1, 0, 0)  # the skip waits: it wrote nothing
    finished_run(fake_services, True)
    assert counts(rollup_now(fake_services)) == (2, 0, 1)
    finished_run(fake_services, True)
    assert counts(rollup_now(fake_services)) == (3, 0, 1)
    assert rollups.windows(rollup_now(fake_services), fake_services.clock.wall())["1h"]["uptime"] == 1.0


def test_a_failed_run_without_a_report_is_counted_as_failed(fake_services: FakeServices) -> None:
    run = Run(fake_services)
    fake_services.kubelet.run(run.pod())
    fake_services.clock.advance(PAST_DEADLINE)
    run.runner.wake()
    assert run.result().outcome is Outcome.FAILED
    assert counts(rollup_now(fake_services)) == (0, 1, 0)


def test_a_rollup_edited_into_nonsense_starts_afresh_with_a_warning_event(fake_services: FakeServices) -> None:
    _subject[0].seed(rollups={"v": 1, "hours": "not base64!"})
    finished_run(fake_services, True)
    assert counts(rollup_now(fake_services)) == (1, 0, 0)
    warned = [e for e in fake_services.events.recorded if e[0] == "StateNotKept"]
    assert warned and "uptime rollup could not be read" in warned[0][2]


def test_an_old_state_without_rollups_starts_them_empty_without_a_warning(fake_services: FakeServices) -> None:
    _subject[0].seed(successCount=5)
    finished_run(fake_services, True)
    assert counts(rollup_now(fake_services)) == (1, 0, 0)
    assert not [e for e in fake_services.events.recorded if e[0] == "StateNotKept"]


def test_a_write_tried_again_after_its_answer_was_lost_counts_the_run_once(fake_services: FakeServices) -> None:
    finished_run(fake_services, True)
    before = _subject[0].raw_state() or {}
    spec = json.loads(json.dumps(before["spec"]))  # as stored: the run is in the history already
    record = RunRecord.reported(RunFacts(spec["uuid"], 0.0, 1.5, NODE, "p"), spec)
    key = fake_services.kinds.of(the_check()).state_key(NS, "probe")
    write = khstate.HistoryWrite(lambda _s: record, 24, True, fake_services.clock.wall(),
                                 rollup=fake_services.rollups.write(key, fake_services.clock.wall(), 60.0))
    write.apply(spec)
    again, _ = rollcodec.parse(spec[uptime.FIELD])
    assert counts(again) == (1, 0, 0)
