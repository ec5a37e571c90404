"""The controller over the in-memory fakes: which checks run, when leadership comes and goes.

Runs are stand-ins that record themselves and last until their worker stops them (a check's run is
the runner's business: tests/unit/test_runner.py); one test wires the real Runner end to end.
Reconciles are not debounced here (checkChangeDebounce 0) unless a test says so. The tests of checks
run for each kind (khchecks and HealthChecks: one controller); khjobs have their own.
"""
from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kuberhealthy.base.threads import Deaths
from kuberhealthy.base.times import format_datetime, utcnow
from kuberhealthy.control.controller import MAX_GAP, MAX_SPREAD, START_RATE, Controller, JobWorker, spread
from kuberhealthy.kube import HEALTHCHECKS, KHCHECKS, KHJOBS, KHSTATES, PODS, Obj, Resource
from kuberhealthy.needs import Part
from kuberhealthy.records import hcstate, khstate
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.run.runner import Outcome, Phase, Runner, RunResult
from testbed.fakes import KINDS, NS, FakeClock, FakeServices, fake_config, khcheck, khjob, report
from testbed.fakes.world import healthcheck, khstate_of

JOIN = 5.0  # seconds


class StandIn:
    """A run that records itself and, like a real one, lasts until its worker is stopped (or ends at once)."""

    def __init__(self, runs: Runs, spec: CheckSpec, stop: threading.Event) -> None:
        self.runs = runs
        self.spec = spec
        self.stop = stop
        self.woken = False

    def wake(self) -> None:
        self.woken = True

    def run(self) -> RunResult:
        self.runs.started(self)
        if self.runs.block:
            self.stop.wait()
        if self.stop.is_set():
            return RunResult(Outcome.STOPPED, str(uuid.uuid4()), Phase.REPORT)
        outcome, reason = self.runs.outcomes.get(self.spec.ident, (Outcome.REPORTED, ""))
        return RunResult(outcome, str(uuid.uuid4()), Phase.DONE, skip_reason=reason)


class Runs:
    """The controller's runner factory, and the log of the runs it made."""

    def __init__(self, services: FakeServices, block: bool = True) -> None:
        self.services = services
        self.block = block
        self.outcomes: dict[str, tuple[Outcome, str]] = {}
        self._lock = threading.Lock()
        self.all: list[StandIn] = []

    def __call__(self, _services: object, spec: CheckSpec, stop: threading.Event) -> StandIn:
        return StandIn(self, spec, stop)

    def started(self, run: StandIn) -> None:
        with self._lock:
            self.all.append(run)
        self.services.activity.touch()

    def of(self, key: str) -> list[StandIn]:
        """The runs of the check with this ident (key())."""
        with self._lock:
            return [r for r in self.all if r.spec.ident == key]

    def wait(self, key: str, count: int = 1) -> list[StandIn]:
        def enough() -> list[StandIn]:
            found = self.of(key)
            return found if len(found) >= count else []
        return self.services.until(enough, f"{count} run(s) of {key}")


class StandInPart:
    """A leader-only part (a reaper) without a thread."""

    def __init__(self) -> None:
        self.started = self.stopped = False
        self.deaths: Deaths | None = None

    def supervised_by(self, deaths: Deaths) -> None:
        self.deaths = deaths

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.stopped = True

    def join(self, timeout: float | None = None) -> None:
        pass

    def is_alive(self) -> bool:
        return self.started and not self.stopped


class Parts:
    def __init__(self) -> None:
        self.made: list[StandInPart] = []

    def __call__(self) -> list[Part]:
        part = StandInPart()
        self.made.append(part)
        return [part]


@pytest.fixture
def runs(fake_services: FakeServices) -> Runs:
    return Runs(fake_services)


@pytest.fixture
def parts() -> Parts:
    return Parts()


def start_controller(services: FakeServices, runner: Callable[..., Any], parts: Parts | None = None) -> Controller:
    controller = Controller(services, parts or Parts(), runner=runner, clock=services.clock)
    controller.start()
    return controller


_kind: list[str] = []  # the kind of check of the current test


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> Iterator[str]:
    """The kind of the checks a test adds, each in turn."""
    _kind.append(request.param)
    yield request.param
    _kind.clear()


@pytest.fixture
def controller(fake_services: FakeServices, runs: Runs, parts: Parts, kind: str) -> Iterator[Controller]:
    c = start_controller(fake_services, runs, parts)
    yield c
    stop(c)


def stop(controller: Controller) -> None:
    controller.stop()
    controller.join(JOIN)
    assert not controller.is_alive()


def is_v3() -> bool:
    return bool(_kind) and _kind[0] == "healthcheck"


def resource() -> Resource:
    return HEALTHCHECKS if is_v3() else KHCHECKS


def add(services: FakeServices, name: str, **spec: Any) -> Obj:
    """Put a check of the test's kind (a changed spec when it exists: a new generation)."""
    obj = healthcheck(name, **spec) if is_v3() else khcheck(name, **spec)
    old = services.api.peek(resource(), NS, name)
    obj["metadata"]["generation"] = (old or {}).get("metadata", {}).get("generation", 0) + 1
    return services.api.put(resource(), obj)


def relabel(services: FakeServices, name: str) -> None:
    """An edit of the check that changes nothing a run uses."""
    def change(obj: Obj) -> None:
        obj["metadata"]["labels"] = {"edited": str(uuid.uuid4())}
    services.api.edit(resource(), NS, name, change)


def ran_at(services: FakeServices, name: str, when: str) -> None:
    """The check's state says it last ran at `when` (RFC 3339)."""
    if is_v3():
        def change(obj: Obj) -> None:
            obj["status"] = hcstate.status_of(khstate_of(name, LastRun=when), obj.get("status"))
        services.api.edit(HEALTHCHECKS, NS, name, change)
    else:
        services.api.put(KHSTATES, khstate_of(name, LastRun=when))


def key(name: str) -> str:
    """The check's ident (how the controller keys its workers)."""
    return f"{NS}/hc:{name}" if is_v3() else f"{NS}/{name}"


# --- reconcile per check -----------------------------------------------------------------------------

def test_becoming_leader_starts_one_worker_per_check_and_runs_each_at_once(
        fake_services: FakeServices, runs: Runs, parts: Parts, controller: Controller) -> None:
    add(fake_services, "a")
    add(fake_services, "b")
    controller.became_leader()
    runs.wait(key("a"))
    runs.wait(key("b"))
    assert sorted(controller.workers) == [key("a"), key("b")] and controller.is_leading()
    assert len(parts.made) == 1 and parts.made[0].started and parts.made[0].deaths is fake_services.deaths


def test_checks_changed_while_following_start_once_each_when_this_replica_leads(
        fake_services: FakeServices, runs: Runs, controller: Controller) -> None:
    add(fake_services, "a")
    add(fake_services, "b")
    add(fake_services, "a", timeout="2m")  # check events while following: nothing to do yet
    assert not controller.workers and controller.reconciles == 0
    controller.became_leader()
    [run_a] = runs.wait(key("a"))
    runs.wait(key("b"))
    assert run_a.spec.timeout == 120.0 and len(runs.of(key("a"))) == 1


def test_a_check_added_while_leading_starts_its_worker(
        fake_services: FakeServices, runs: Runs, controller: Controller) -> None:
    add(fake_services, "a")
    controller.became_leader()
    runs.wait(key("a"))
    add(fake_services, "b")
    runs.wait(key("b"))
    assert len(runs.of(key("a"))) == 1


def test_a_deleted_check_stops_its_worker_and_ends_its_run(
        fake_services: FakeServices, runs: Runs, controller: Controller) -> None:
    add(fake_services, "a")
    add(fake_services, "b")
    controller.became_leader()
    [run_a] = runs.wait(key("a"))
    runs.wait(key("b"))
    worker = controller.workers[key("a")]
    fake_services.api.remove(resource(), NS, "a")
    worker.join(JOIN)
    assert not worker.is_alive() and run_a.stop.is_set() and run_a.woken
    assert sorted(controller.workers) == [key("b")]


def test_a_changed_spec_restarts_only_that_check(
        fake_services: FakeServices, runs: Runs, controller: Controller) -> None:
    add(fake_services, "a")
    add(fake_services, "b")
    controller.became_leader()
    [first] = runs.wait(key("a"))
    [run_b] = runs.wait(key("b"))
    old_a, worker_b = controller.workers[key("a")], controller.workers[key("b")]
    add(fake_services, "a", timeout="2m")
    _, second_a = runs.wait(key("a"), 2)
    old_a.join(JOIN)
    assert first.stop.is_set() and not old_a.is_alive()
    assert second_a.spec.timeout == 120.0 and controller.workers[key("a")] is not old_a
    assert controller.workers[key("b")] is worker_b and not run_b.stop.is_set() and runs.of(key("b")) == [run_b]


def test_an_edit_that_changes_nothing_a_run_uses_restarts_nothing(
        fake_services: FakeServices, runs: Runs, controller: Controller) -> None:
    add(fake_services, "a")
    controller.became_leader()
    [run_a] = runs.wait(key("a"))
    worker = controller.workers[key("a")]
    relabel(fake_services, "a")  # a new resourceVersion, the same CheckSpec
    add(fake_services, "c")  # reconciled after the edit: once c runs, the edit has been looked at
    runs.wait(key("c"))
    assert controller.workers[key("a")] is worker and runs.of(key("a")) == [run_a] and not run_a.stop.is_set()


def test_check_changes_within_the_debounce_are_reconciled_together_once_it_has_passed(
        clock: FakeClock, kind: str) -> None:
    services = FakeServices(clock=clock, config=fake_config(check_change_debounce=10.0))
    runs = Runs(services)
    controller = start_controller(services, runs)
    try:
        add(services, "a")
        controller.became_leader()
        runs.wait(key("a"))
        reconciles = controller.reconciles
        add(services, "b")
        add(services, "c")
        assert not runs.of(key("b")) and not runs.of(key("c"))  # inside the debounce: nothing yet
        clock.advance(10.0)
        relabel(services, "a")  # a change after the debounce (it changes no run): the loop looks again
        runs.wait(key("b"))
        runs.wait(key("c"))
        assert controller.reconciles == reconciles + 1  # b and c together, whichever event came first
        assert len(runs.of(key("a"))) == 1
    finally:
        stop(controller)


def test_a_check_that_ran_recently_keeps_its_cadence_when_leadership_begins(
        fake_services: FakeServices, runs: Runs, controller: Controller) -> None:
    recently = format_datetime(utcnow())  # the controller reads the wall clock itself (time.time())
    add(fake_services, "a", run_interval="1h")
    ran_at(fake_services, "a", recently)
    add(fake_services, "b", run_interval="1h")  # never ran: due now
    controller.became_leader()
    runs.wait(key("b"))
    assert key("a") in controller.workers and not runs.of(key("a"))


def starts_per_second(dues: dict[str, float], now: float) -> Counter[int]:
    return Counter(int(due - now) for due in dues.values())


def test_a_batch_of_overdue_checks_is_spread_evenly_over_half_its_interval_not_started_in_a_burst() -> None:
    """After a takeover 200 overdue checks of a 30 s interval start over 15 s, about 13 a second: not 33 a
    second for 6 s, a burst every check then repeats every interval (its cadence keeps that phase)."""
    specs = [CheckSpec.of(khcheck(f"c{i}", run_interval="30s")) for i in range(200)]
    dues = spread(specs, 1000.0)
    assert sorted(dues) == sorted(s.key for s in specs)
    assert min(dues.values()) == 1000.0 and 1014.0 < max(dues.values()) < 1015.0
    assert max(starts_per_second(dues, 1000.0).values()) <= 14


@pytest.mark.parametrize("every,count", [("10s", 100), ("1h", 600)])
def test_a_batch_that_fits_twenty_a_second_takes_at_most_thirty_seconds_or_half_an_interval(
        every: str, count: int) -> None:
    specs = [CheckSpec.of(khcheck(f"c{i}", run_interval=every)) for i in range(count)]
    dues = spread(specs, 0.0)
    for spec in specs:
        assert dues[spec.key] < min(MAX_SPREAD, spec.run_interval / 2)


def test_a_thousand_overdue_checks_start_at_most_twenty_a_second_over_fifty_seconds_of_their_minute() -> None:
    """30 s would be 33 first runs a second, twice the steady rate of a thousand 1-minute checks."""
    specs = [CheckSpec.of(khcheck(f"c{i}", run_interval="1m")) for i in range(1000)]
    dues = spread(specs, 0.0)
    assert max(starts_per_second(dues, 0.0).values()) <= START_RATE
    assert 49.0 < max(dues.values()) < 50.0


def test_a_batch_too_large_for_twenty_a_second_within_an_interval_fills_the_interval_and_no_more() -> None:
    specs = [CheckSpec.of(khcheck(f"c{i}-{every}", run_interval=every)) for i in range(2000) for every in ("10s", "1h")]
    dues = spread(specs, 0.0)
    for spec in specs:
        assert dues[spec.key] < spec.run_interval
    assert max(dues[s.key] for s in specs if s.run_interval == 10) > 9.9


def test_a_few_overdue_checks_start_at_once() -> None:
    specs = [CheckSpec.of(khcheck(name, run_interval="1h")) for name in ("a", "b", "c")]
    assert max(spread(specs, 0.0).values()) <= 2 * MAX_GAP


# --- leadership ----------------------------------------------------------------------------------------

def test_losing_the_lead_stops_every_worker_and_leader_part_before_it_returns(
        fake_services: FakeServices, runs: Runs, parts: Parts, controller: Controller) -> None:
    add(fake_services, "a")
    add(fake_services, "b")
    controller.became_leader()
    runs.wait(key("a"))
    runs.wait(key("b"))
    workers = list(controller.workers.values())
    controller.lost_leadership()
    assert not controller.is_leading() and not controller.workers
    assert not any(w.is_alive() for w in workers)
    assert all(r.stop.is_set() for r in runs.all) and parts.made[0].stopped


def test_leading_again_starts_the_checks_again(
        fake_services: FakeServices, runs: Runs, parts: Parts, controller: Controller) -> None:
    add(fake_services, "a")
    controller.became_leader()
    runs.wait(key("a"))
    controller.lost_leadership()
    add(fake_services, "b")  # changed while following
    controller.became_leader()
    runs.wait(key("a"), 2)
    runs.wait(key("b"))
    assert len(parts.made) == 2 and parts.made[1].started and not parts.made[1].stopped


# --- jobs ----------------------------------------------------------------------------------------------------

def phases(services: FakeServices, name: str) -> list[str]:
    return [c.body["spec"]["phase"] for c in services.api.made("merge_patch", KHJOBS)
            if c.name == name and c.body is not None]


def test_a_new_khjob_runs_once_and_ends_completed(fake_services: FakeServices) -> None:
    runs = Runs(fake_services, block=False)
    fake_services.api.put(KHJOBS, khjob("once"))
    controller = start_controller(fake_services, runs)
    try:
        controller.became_leader()
        fake_services.until(lambda: phases(fake_services, "once") == ["Running", "Completed"], "the job completed")
        assert len(runs.of(key("once"))) == 1
    finally:
        stop(controller)


def test_a_khjob_whose_run_was_skipped_for_the_api_is_put_back_to_run_again(fake_services: FakeServices) -> None:
    runs = Runs(fake_services, block=False)
    runs.outcomes[key("retry")] = (Outcome.SKIPPED, "api-unavailable")
    job = fake_services.api.put(KHJOBS, khjob("retry"))
    worker = JobWorker(fake_services, CheckSpec.of_job(job), runs)  # type: ignore[arg-type]  # its runs are stand-ins
    worker.start()
    worker.join(JOIN)
    assert not worker.is_alive() and phases(fake_services, "retry") == ["Running", ""]


def test_khjobs_left_running_by_a_previous_leader_are_completed_if_they_reported_and_run_again_if_not(
        fake_services: FakeServices) -> None:
    runs = Runs(fake_services, block=False)
    fake_services.api.put(KHJOBS, khjob("reported", phase="Running"))
    fake_services.api.put(KHSTATES, khstate_of("reported", uuid="r1", annotations={khstate.REPORTED_UUID: "r1"}))
    fake_services.api.put(KHJOBS, khjob("unreported", phase="Running"))
    fake_services.api.put(KHSTATES, khstate_of("unreported", uuid="r2"))
    controller = start_controller(fake_services, runs)
    try:
        controller.became_leader()
        fake_services.until(lambda: phases(fake_services, "unreported") == ["", "Running", "Completed"],
                            "the unreported job run again")
        assert phases(fake_services, "reported") == ["Completed"] and not runs.of(key("reported"))
        assert len(runs.of(key("unreported"))) == 1
    finally:
        stop(controller)


# --- with the real runner ------------------------------------------------------------------------------

def test_a_leader_runs_each_check_through_a_real_run_to_its_recorded_result(
        fake_services: FakeServices, kind: str) -> None:
    kubelet = fake_services.kubelet

    def checker(pod: Obj) -> None:  # starts, reports at once and exits; the pods of check "bad" report failure
        pod = kubelet.run(pod)
        broken = pod["metadata"]["name"].startswith("bad-")
        report(fake_services, pod, ok=not broken, errors=["it is broken"] if broken else [])
        kubelet.finish(pod)
    fake_services.api.on_create(PODS, checker)
    clock = fake_services.clock

    def runner(services: FakeServices, spec: CheckSpec, stop_event: threading.Event) -> Runner:
        return Runner(services, spec, stop_event, clock=clock, wall=clock.wall)
    add(fake_services, "good")
    add(fake_services, "bad")
    controller = start_controller(fake_services, runner)
    try:
        controller.became_leader()

        store = fake_services.kinds.named(kind).store  # type: ignore[union-attr]

        def result(name: str) -> khstate.Spec:
            return khstate.Spec.of(store.read(fake_services.api, NS, name, 1.0) or {})
        fake_services.until(lambda: khstate.finished_uuid(store.read(fake_services.api, NS, "good", 1.0)) and
                            khstate.finished_uuid(store.read(fake_services.api, NS, "bad", 1.0)),
                            "both runs recorded")
        good, bad = result("good"), result("bad")
        assert good.ok is True and bad.ok is False and bad.errors == ("it is broken",)
    finally:
        stop(controller)
