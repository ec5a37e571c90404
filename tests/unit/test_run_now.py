"""Run now on the leader, over the in-memory fakes: the run-now annotation on a khcheck starts a run at
once on that check's worker, the run removes it, a request during a run is dropped, nothing restarts,
and CheckRunRequested is raised once per request (runnow.py). Runs are stand-ins that last until the
test lets them end."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from kuberhealthy.base.times import format_datetime, utcnow
from kuberhealthy.control.controller import Controller
from kuberhealthy.kube import KHCHECKS, KHSTATES, Obj
from kuberhealthy.records import runnow
from testbed.fakes import NS, FakeServices, khcheck, khstate_of
from testbed.fakes.gate import Gate

JOIN = 5.0  # seconds


@pytest.fixture
def gate(fake_services: FakeServices) -> Gate:
    return Gate(fake_services)


@pytest.fixture
def controller(fake_services: FakeServices, gate: Gate) -> Iterator[Controller]:
    c = Controller(fake_services, runner=gate, clock=fake_services.clock)
    c.start()
    yield c
    c.stop()
    gate.release()
    c.join(JOIN)
    assert not c.is_alive()


def annotate(services: FakeServices, name: str, value: str | None) -> Obj:
    def change(obj: Obj) -> None:
        annotations = obj["metadata"].setdefault("annotations", {})
        if value is None:
            annotations.pop(runnow.RUN_NOW_ANNOTATION, None)
        else:
            annotations[runnow.RUN_NOW_ANNOTATION] = value
    return services.api.edit(KHCHECKS, NS, name, change)


def annotation(services: FakeServices, name: str) -> str | None:
    return runnow.requested(services.api.peek(KHCHECKS, NS, name))


def leading_with_one_idle_check(services: FakeServices, controller: Controller, name: str = "probe") -> None:
    """A check that ran a moment ago (so its worker waits an hour) and this replica leading."""
    services.api.put(KHSTATES, khstate_of(name, LastRun=format_datetime(utcnow())))
    services.api.put(KHCHECKS, khcheck(name, run_interval="1h"))
    controller.became_leader()
    # Listing khjobs after the checks' reconcile wakes this wait once the worker is there.
    services.until(lambda: controller.workers.get(f"{NS}/{name}"), "the check's worker")


def stop(controller: Controller, gate: Gate) -> None:
    controller.stop()
    gate.release()
    controller.join(JOIN)


def test_a_newly_set_annotation_runs_the_check_at_once_and_that_run_removes_it(
        fake_services: FakeServices, gate: Gate, controller: Controller) -> None:
    leading_with_one_idle_check(fake_services, controller)
    annotate(fake_services, "probe", "now please")
    fake_services.until(lambda: gate.started == 1, "the requested run")
    worker = controller.workers[f"{NS}/probe"]
    assert worker.requested_runs == 1
    fake_services.until(lambda: annotation(fake_services, "probe") is None, "the annotation removed")
    assert fake_services.events.recorded == [("CheckRunRequested", f"{NS}/probe", "annotation")]
    assert controller.workers[f"{NS}/probe"] is worker and worker.is_alive()  # not restarted
    assert controller.reconciles >= 2  # the annotation's changes were reconciled: no restart came of them


def test_a_request_made_by_the_api_raises_no_second_event_on_the_leader(
        fake_services: FakeServices, gate: Gate, controller: Controller) -> None:
    leading_with_one_idle_check(fake_services, controller)
    annotate(fake_services, "probe", runnow.api_value(fake_services.clock.wall()))
    fake_services.until(lambda: gate.started == 1, "the requested run")
    assert fake_services.events.recorded == []  # the handler that wrote it raised it


def test_a_request_while_a_run_is_in_flight_is_dropped_and_its_annotation_removed(
        fake_services: FakeServices, gate: Gate, controller: Controller) -> None:
    leading_with_one_idle_check(fake_services, controller)
    annotate(fake_services, "probe", "first")
    fake_services.until(lambda: gate.started == 1, "the requested run")
    fake_services.until(lambda: annotation(fake_services, "probe") is None, "the first annotation removed")
    annotate(fake_services, "probe", "second")  # the requested run is still going
    fake_services.until(lambda: annotation(fake_services, "probe") is None, "the second request removed")
    worker = controller.workers[f"{NS}/probe"]
    stop(controller, gate)
    assert gate.started == 1 and worker.requested_runs == 1
    assert [r for r, _, _ in fake_services.events.recorded] == ["CheckRunRequested"] * 2  # both were asked for


def test_other_changes_of_an_annotated_khcheck_do_not_count_as_new_requests(
        fake_services: FakeServices, gate: Gate, controller: Controller) -> None:
    leading_with_one_idle_check(fake_services, controller)
    fake_services.api.fail("merge_patch", KHCHECKS)  # the run cannot remove the annotation
    annotate(fake_services, "probe", "once")
    fake_services.until(lambda: gate.started == 1, "the requested run")
    gate.release()

    def relabel(obj: Obj) -> None:
        obj["metadata"]["labels"] = {"edited": "yes"}
    fake_services.api.edit(KHCHECKS, NS, "probe", relabel)  # still annotated: the same request
    add_later = khcheck("later", run_interval="1h")
    fake_services.api.put(KHCHECKS, add_later)  # reconciled after the edit: once it runs, the edit was seen
    fake_services.until(lambda: gate.started == 2, "the new check's first run")
    stop(controller, gate)
    assert controller.workers == {} and annotation(fake_services, "probe") == "once"
    assert fake_services.events.recorded == [("CheckRunRequested", f"{NS}/probe", "annotation")]


def test_an_annotation_left_while_nobody_led_runs_the_check_when_leadership_begins(
        fake_services: FakeServices, gate: Gate, controller: Controller) -> None:
    fake_services.api.put(KHSTATES, khstate_of("left", LastRun=format_datetime(utcnow())))
    fake_services.api.put(KHCHECKS, khcheck("left", run_interval="1h"))
    annotate(fake_services, "left", "while nobody led")  # seen by a follower: nothing to do yet
    controller.became_leader()
    fake_services.until(lambda: gate.started == 1, "the run")
    assert controller.workers[f"{NS}/left"].requested_runs == 1
    fake_services.until(lambda: annotation(fake_services, "left") is None, "the annotation removed")
    assert fake_services.events.recorded == []  # the replica that saw it set raised the Event


def test_the_annotation_value_rules() -> None:
    value = runnow.api_value(1_700_000_000.0)
    assert value == "2023-11-14T22:13:20Z (api)" and runnow.by_api(value) and not runnow.by_api("x")
    check: Obj = {"metadata": {"annotations": {runnow.RUN_NOW_ANNOTATION: "x"}}}
    assert runnow.requested(check) == "x" and runnow.requested({"metadata": {}}) is None
    assert runnow.newly_requested(check, None) == "x" and runnow.newly_requested(check, check) is None
    assert runnow.request_patch("v", "42") == {"metadata": {"resourceVersion": "42",
                                                            "annotations": {runnow.RUN_NOW_ANNOTATION: "v"}}}
