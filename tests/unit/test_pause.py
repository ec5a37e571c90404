"""Pause on the leader, over the in-memory fakes with an injected clock (records/pause.py,
docs/interface.md#pausing-a-check): a paused check starts no run and creates no pod, its khstate keeps the last
result, a run in flight when the pause begins finishes, and the check runs at once when the pause ends (the annotation
removed, or its time passed); an unparsable value is ignored with a PauseIgnored Event and a log line; a past time is
no pause. The worker's own timer ends a pause in production; here the fake clock moves, and a nudge stands in for that
timer firing (the real timer is exercised in tests/integration/test_pause.py)."""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kuberhealthy.base.times import format_time
from kuberhealthy.control.controller import Controller
from kuberhealthy.control.workers import CheckWorker
from kuberhealthy.kube import KHCHECKS, KHSTATES, PODS, Obj
from kuberhealthy.records import khstate, pause, rollcodec, runnow, uptime
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.run.runner import Runner
from testbed.fakes import NS, FakeServices, khcheck, khstate_of, report
from testbed.fakes.gate import Gate

JOIN = 5.0  # seconds
HOUR = 3600.0
KEY = f"{NS}/probe"


# --- the value rules ----------------------------------------------------------------------------------------

def obj_with(**annotations: str) -> Obj:
    return {"metadata": {"namespace": NS, "name": "probe", "annotations": annotations}}


@pytest.mark.parametrize("text, unix", [
    ("2026-12-02T06:00:00Z", 1796191200.0),
    ("2026-12-02T07:00:00+01:00", 1796191200.0),
    ("2026-12-02t06:00:00.5z", 1796191200.5),
    (" 2026-12-02T06:00:00Z\n", 1796191200.0),
])
def test_an_rfc3339_time_with_its_offset_sets_a_pause_until_then(text: str, unix: float) -> None:
    p = pause.of(obj_with(**{pause.PAUSED_UNTIL: text, pause.PAUSED_REASON: "maintenance"}))
    assert p == pause.Pause(unix, "maintenance")
    assert p.active(unix - 1) and not p.active(unix)
    assert p.view() == {"until": "2026-12-02T06:00:00Z", "reason": "maintenance"}


@pytest.mark.parametrize("text", ["tomorrow", "", "2026-12-02", "2026-12-02T06:00:00", "2026-12-02 06:00:00Z",
                                  "1796191200", "2026-13-02T06:00:00Z"])
def test_a_value_that_is_no_rfc3339_time_with_an_offset_is_unparsable_and_no_pause(text: str) -> None:
    obj = obj_with(**{pause.PAUSED_UNTIL: text})
    assert pause.of(obj) is None and pause.active(obj, 0.0) is None
    assert pause.unparsable(obj) == text


def test_a_past_time_is_no_pause_and_no_annotation_is_nothing_to_warn_about() -> None:
    past = obj_with(**{pause.PAUSED_UNTIL: "2020-01-01T00:00:00Z"})
    assert pause.active(past, 1796191200.0) is None and pause.unparsable(past) is None
    assert pause.of(obj_with()) is None and pause.unparsable(obj_with()) is None and pause.unparsable(None) is None


def test_only_a_change_of_either_pause_annotation_counts_as_a_pause_change() -> None:
    a = obj_with(**{pause.PAUSED_UNTIL: "2026-12-02T06:00:00Z"})
    assert pause.changed(a, None) and pause.changed(obj_with(), a)
    assert pause.changed(obj_with(**{pause.PAUSED_UNTIL: "2026-12-02T06:00:00Z", pause.PAUSED_REASON: "x"}), a)
    assert not pause.changed(a, obj_with(**{pause.PAUSED_UNTIL: "2026-12-02T06:00:00Z"}))
    assert not pause.changed(obj_with(**{runnow.RUN_NOW_ANNOTATION: "x"}), obj_with())


# --- the leader ---------------------------------------------------------------------------------------------

@pytest.fixture
def gate(fake_services: FakeServices) -> Gate:
    return Gate(fake_services)


def leader(services: FakeServices, runner: Any) -> Controller:
    c = Controller(services, runner=runner, clock=services.clock, wall=services.clock.wall)
    c.start()
    c.became_leader()
    return c


@pytest.fixture
def controller(fake_services: FakeServices, gate: Gate) -> Iterator[Controller]:
    c = leader(fake_services, gate)
    yield c
    c.stop()
    gate.release()
    c.join(JOIN)
    assert not c.is_alive()


def until_value(services: FakeServices, seconds: float) -> str:
    """A paused-until value `seconds` after the fake wall clock's now."""
    return format_time(services.clock.wall() + seconds)


def annotate(services: FakeServices, **values: str | None) -> Obj:
    """Set (a string) or remove (None) annotations of khcheck probe, as `kubectl annotate` does."""
    def change(obj: Obj) -> None:
        annotations = obj["metadata"].setdefault("annotations", {})
        for name, value in values.items():
            if value is None:
                annotations.pop(name, None)
            else:
                annotations[name] = value
    return services.api.edit(KHCHECKS, NS, "probe", change)


def paused_check(services: FakeServices, seconds: float = HOUR, reason: str = "node maintenance") -> Obj:
    obj = khcheck("probe", run_interval="1h")
    obj["metadata"]["annotations"] = {pause.PAUSED_UNTIL: until_value(services, seconds),
                                      pause.PAUSED_REASON: reason}
    return services.api.put(KHCHECKS, obj)


def worker_of(services: FakeServices, controller: Controller) -> CheckWorker:
    return services.until(lambda: controller.workers.get(KEY), "the check's worker")


def waiting_out_its_pause(services: FakeServices, worker: CheckWorker, paused: bool = True) -> None:
    """Until the worker has looked at its khcheck and waits out a pause (or, with paused=False, does not).
    Each look is nudged from here: the worker's cache read is what wakes this wait."""
    def settled() -> bool:
        worker.nudge()
        return (worker.paused_until is not None) == paused
    services.until(settled, "the worker waiting out the pause" if paused else "the worker not paused")


def end_of_pause_passes(services: FakeServices, worker: CheckWorker) -> None:
    """The fake clock moves past the pause's end; the nudge is the worker's timer firing."""
    assert worker.paused_until is not None
    services.clock.advance(worker.paused_until - services.clock.wall() + 1)
    worker.nudge()


def test_a_paused_check_creates_no_pod_keeps_its_last_result_and_runs_at_once_when_its_time_passes(
        fake_services: FakeServices) -> None:
    kubelet = fake_services.kubelet

    def checker(pod: Obj) -> None:  # starts, reports OK at once and exits
        report(fake_services, kubelet.run(pod), ok=True)
        kubelet.finish(pod)
    fake_services.api.on_create(PODS, checker)
    clock = fake_services.clock
    last = fake_services.api.put(KHSTATES, khstate_of("probe", OK=False, Errors=["dns lookup failed"],
                                                      LastRun=format_time(clock.wall() - 2 * HOUR),
                                                      AuthoritativePod="kh-test-0"))
    paused_check(fake_services)  # overdue by an hour: it would run at once

    def runner(services: FakeServices, spec: CheckSpec, stop_event: threading.Event) -> Runner:
        return Runner(services, spec, stop_event, clock=clock, wall=clock.wall)
    controller = leader(fake_services, runner)
    try:
        worker = worker_of(fake_services, controller)
        paused_since = clock.wall()
        waiting_out_its_pause(fake_services, worker)
        assert fake_services.api.made("create", PODS) == [] and worker.runs == 0
        kept = fake_services.api.peek(KHSTATES, NS, "probe") or {}
        assert kept["metadata"]["resourceVersion"] == last["metadata"]["resourceVersion"]  # not even claimed
        assert khstate.Spec.of(kept).errors == ("dns lookup failed",)

        end_of_pause_passes(fake_services, worker)
        fake_services.until(lambda: khstate.Spec.of(fake_services.api.peek(KHSTATES, NS, "probe") or {}).ok,
                            "the run at the pause's end recorded")
        assert len(fake_services.api.made("create", PODS)) == 1 and worker.resumed_runs == 1
        assert controller.workers[KEY] is worker  # pausing restarts nothing
        # the paused hour rode on that run's write: marked paused, counted neither way; the run counted OK
        stored = ((fake_services.api.peek(KHSTATES, NS, "probe") or {}).get("spec") or {}).get(uptime.FIELD)
        rollup, _ = rollcodec.parse(stored)
        paused_from = int(paused_since // 3600)
        assert next(h.hour for h in rollup.hours if h.paused) == paused_from
        assert sum(h.ok for h in rollup.hours) == 1 and sum(h.failed for h in rollup.hours) == 0
    finally:
        controller.stop()
        controller.join(JOIN)


def test_a_run_in_flight_when_the_pause_begins_finishes_and_the_next_waits_for_the_pause(
        fake_services: FakeServices, gate: Gate, controller: Controller) -> None:
    fake_services.api.put(KHCHECKS, khcheck("probe", run_interval="1m"))
    fake_services.until(lambda: gate.started == 1, "the first run")
    worker = controller.workers[KEY]
    annotate(fake_services, **{pause.PAUSED_UNTIL: until_value(fake_services, HOUR)})
    fake_services.clock.advance(120)  # two intervals pass while it runs: it would start again at once
    gate.release()
    fake_services.until(lambda: worker.runs == 1, "the run in flight finished")
    waiting_out_its_pause(fake_services, worker)
    assert gate.started == 1 and gate.stopped_runs == 0  # finished, not stopped; no second run


def test_removing_the_annotation_runs_the_check_at_once_and_the_schedule_continues_from_that_run(
        fake_services: FakeServices, gate: Gate, controller: Controller) -> None:
    paused_check(fake_services, seconds=10 * HOUR)
    worker = worker_of(fake_services, controller)
    waiting_out_its_pause(fake_services, worker)
    annotate(fake_services, **{pause.PAUSED_UNTIL: None, pause.PAUSED_REASON: None})
    fake_services.until(lambda: gate.started == 1, "the run when the pause ended")
    assert worker.resumed_runs == 1 and worker.requested_runs == 0 and worker.paused_until is None
    gate.release()
    fake_services.until(lambda: worker.runs == 1, "that run finished")
    assert gate.started == 1  # the next is due an interval after it


def test_a_pause_set_on_an_idle_check_and_extended_keeps_it_paused_until_the_new_time(
        fake_services: FakeServices, gate: Gate, controller: Controller) -> None:
    paused_check(fake_services, seconds=60)
    worker = worker_of(fake_services, controller)
    waiting_out_its_pause(fake_services, worker)
    first = worker.paused_until
    annotate(fake_services, **{pause.PAUSED_UNTIL: until_value(fake_services, 2 * HOUR)})
    fake_services.until(lambda: worker.nudge() or worker.paused_until != first, "the new end seen")
    fake_services.clock.advance(120)  # past the first end, not the second
    worker.nudge()
    waiting_out_its_pause(fake_services, worker)
    assert gate.started == 0
    end_of_pause_passes(fake_services, worker)
    fake_services.until(lambda: gate.started == 1, "the run at the new end")


def test_a_run_requested_while_paused_waits_for_the_pause_to_end_then_runs_once(
        fake_services: FakeServices, gate: Gate, controller: Controller) -> None:
    paused_check(fake_services)
    worker = worker_of(fake_services, controller)
    waiting_out_its_pause(fake_services, worker)
    annotate(fake_services, **{runnow.RUN_NOW_ANNOTATION: "please"})
    fake_services.until(lambda: ("CheckRunRequested", KEY, "annotation") in fake_services.events.recorded,
                        "the request seen")
    waiting_out_its_pause(fake_services, worker)
    assert gate.started == 0 and runnow.requested(fake_services.api.peek(KHCHECKS, NS, "probe")) == "please"
    end_of_pause_passes(fake_services, worker)
    fake_services.until(lambda: gate.started == 1, "one run when the pause ended")
    fake_services.until(lambda: runnow.requested(fake_services.api.peek(KHCHECKS, NS, "probe")) is None,
                        "the run-now annotation removed by that run")
    assert worker.requested_runs == 1 and worker.resumed_runs == 1


def test_an_unparsable_value_is_ignored_with_one_warning_event_and_a_log_line(
        fake_services: FakeServices, gate: Gate, controller: Controller, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="kuberhealthy.control.controller")
    obj = khcheck("probe")
    obj["metadata"]["annotations"] = {pause.PAUSED_UNTIL: "tomorrow morning"}
    fake_services.api.put(KHCHECKS, obj)
    fake_services.until(lambda: gate.started == 1, "the check running as usual")
    assert controller.workers[KEY].paused_until is None
    annotate(fake_services, **{pause.PAUSED_REASON: "still not a time"})  # a pause change, the same bad value
    annotate(fake_services, **{pause.PAUSED_UNTIL: "next week"})  # a new bad value: warned about again

    def ignored() -> list[tuple[str, str, str]]:
        return [e for e in fake_services.events.recorded if e[0] == "PauseIgnored"]
    fake_services.until(lambda: len(ignored()) >= 2, "the second value warned about")
    # Pause changes are handled in order: the reason's change came before "next week", and raised nothing.
    assert ignored() == [("PauseIgnored", KEY, "tomorrow morning"), ("PauseIgnored", KEY, "next week")]
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and pause.PAUSED_UNTIL in r.getMessage()]
    assert ["tomorrow morning" in warned[0].getMessage(), "next week" in warned[1].getMessage()] == [True, True]
    assert len(warned) == 2


def test_a_past_time_is_no_pause_the_check_runs_at_once_and_nothing_is_warned_about(
        fake_services: FakeServices, gate: Gate, controller: Controller) -> None:
    obj = khcheck("probe")
    obj["metadata"]["annotations"] = {pause.PAUSED_UNTIL: until_value(fake_services, -60)}
    fake_services.api.put(KHCHECKS, obj)
    fake_services.until(lambda: gate.started == 1, "the check running as usual")
    assert controller.workers[KEY].paused_until is None and fake_services.events.recorded == []
    assert fake_services.api.made("merge_patch", KHCHECKS) == []  # the daemon never writes the annotation


def waits_of_a_paused_worker(services: FakeServices, spec: CheckSpec) -> tuple[CheckWorker, list[float]]:
    """The timeouts of the waits a worker makes for this paused check, looking once."""
    worker = CheckWorker(services, spec, runner=Gate(services), clock=services.clock, wall=services.clock.wall)
    timeouts: list[float] = []

    class Recording(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            timeouts.append(-1.0 if timeout is None else timeout)
            worker._stop.set()  # one look is enough
            return True
    worker._wake = Recording()
    worker._run()
    return worker, timeouts


def test_the_worker_waits_the_pause_out_from_the_wall_clock_and_does_not_poll(fake_services: FakeServices) -> None:
    # The worker's one wait lasts until the pause's end: its wake event is waited on with that timeout.
    worker, timeouts = waits_of_a_paused_worker(fake_services, CheckSpec.of(paused_check(fake_services, seconds=90)))
    assert timeouts == [pytest.approx(90.0, abs=1.0)] and worker.runs == 0
    assert worker.paused_until == pytest.approx(fake_services.clock.wall() + 90, abs=1.0)


def test_a_pause_until_the_end_of_time_waits_a_day_at_a_time_instead_of_overflowing_the_wait(
        fake_services: FakeServices) -> None:
    obj = khcheck("probe")
    obj["metadata"]["annotations"] = {pause.PAUSED_UNTIL: "9999-12-31T23:59:59Z"}  # past threading.TIMEOUT_MAX
    worker, timeouts = waits_of_a_paused_worker(fake_services, CheckSpec.of(fake_services.api.put(KHCHECKS, obj)))
    assert timeouts == [86400.0] and worker.paused_until is not None and worker.runs == 0
