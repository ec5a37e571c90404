"""The Event recorder (kuberhealthy/outputs/events.py) over a fake events API: stepped by hand with an injected
clock, and a few tests of its thread (no sleeps; waits on events with a generous bound)."""
from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kuberhealthy.base.errors import ApiError, Conflict, Forbidden, NotFound, ServerError, Unreachable
from kuberhealthy.outputs import events as ev
from kuberhealthy.outputs.events import EventLimits, EventRecorder, ObjectRef

T0 = 1_796_119_200.0  # 2026-12-01T10:00:00Z
CHECK = ObjectRef(ev.KIND_CHECK, "team-a", "dns", "uid-1")
JOB = ObjectRef(ev.KIND_JOB, "team-b", "once", "uid-2")
WAIT = 10.0  # seconds a thread test may wait for something that happens at once


class FakeEvents:
    """Events by namespace/name, like the API server; `fail` holds errors to raise, one per call."""

    def __init__(self) -> None:
        self.store: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str, str]] = []
        self.fail: list[ApiError] = []
        self.gate: threading.Event | None = None  # when set up, calls wait for it (a slow API)
        self.called = threading.Event()
        self._cond = threading.Condition()

    def wait_calls(self, n: int) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.calls) >= n, WAIT)

    def _enter(self, what: str, namespace: str, name: str) -> None:
        with self._cond:
            self.calls.append((what, namespace, name))
            self._cond.notify_all()
        self.called.set()
        if self.gate is not None:
            assert self.gate.wait(WAIT)
        if self.fail:
            raise self.fail.pop(0)

    def create_event(self, namespace: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        name = body["metadata"]["name"]
        self._enter("create", namespace, name)
        if (namespace, name) in self.store:
            raise Conflict("exists", reason="AlreadyExists")
        self.store[(namespace, name)] = copy.deepcopy(body)
        return copy.deepcopy(body)

    def patch_event(self, namespace: str, name: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        self._enter("patch", namespace, name)
        if (namespace, name) not in self.store:
            raise NotFound("gone")
        self.store[(namespace, name)].update(body)
        return copy.deepcopy(self.store[(namespace, name)])

    def events(self) -> list[dict[str, Any]]:
        return [self.store[k] for k in sorted(self.store)]


class Clock:
    def __init__(self) -> None:
        self.wall = T0
        self.mono = 100.0

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def recorder(api: FakeEvents, clock: Clock, **kw: Any) -> EventRecorder:
    kw.setdefault("backoff_first", 0.001)
    return EventRecorder(api, "kh-0", EventLimits(**kw), wall=lambda: clock.wall, clock=lambda: clock.mono)


def drain(r: EventRecorder) -> None:
    while r.step():
        pass


@pytest.fixture
def api() -> FakeEvents:
    return FakeEvents()


@pytest.fixture
def clock() -> Clock:
    return Clock()


# --- what is sent ----------------------------------------------------------------------------------------------

def test_a_first_event_creates_a_core_v1_event_on_the_khcheck(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    assert r.check_failed(CHECK, "Check execution error: team-a/dns: timed out waiting for pod to exit")
    drain(r)
    (event,) = api.events()
    assert event == {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"dns.{int(T0 * 1e9):x}", "namespace": "team-a"},
        "involvedObject": {"apiVersion": "comcast.github.io/v1", "kind": "KuberhealthyCheck",
                           "namespace": "team-a", "name": "dns", "uid": "uid-1"},
        "reason": "CheckFailed", "message": "Check execution error: team-a/dns: timed out waiting for pod to exit",
        "type": "Warning", "count": 1, "firstTimestamp": "2026-12-01T10:00:00Z",
        "lastTimestamp": "2026-12-01T10:00:00Z", "source": {"component": "kuberhealthy"},
        "reportingComponent": "kuberhealthy", "reportingInstance": "kh-0"}
    assert r.created == 1 and r.counted == 0


def test_each_reason_has_its_type_and_a_message(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    r.check_failed(CHECK, "boom")
    r.check_recovered(CHECK, failures=3)
    r.run_requested(JOB, "annotation")
    r.report_rejected(CHECK, "stale run uuid")
    drain(r)
    got = [(e["involvedObject"]["kind"], e["type"], e["reason"], e["message"]) for e in api.events()]
    assert sorted(got) == sorted([
        ("KuberhealthyCheck", "Warning", "CheckFailed", "boom"),
        ("KuberhealthyCheck", "Normal", "CheckRecovered", "Check team-a/dns is OK again after 3 failed runs"),
        ("KuberhealthyJob", "Normal", "CheckRunRequested", "A run of team-b/once was requested (annotation)"),
        ("KuberhealthyCheck", "Warning", "ReportRejected", "A report for team-a/dns was rejected: stale run uuid"),
    ])
    assert {e["metadata"]["namespace"] for e in api.events() if e["involvedObject"]["kind"] == ev.KIND_JOB} == {
        "team-b"}


def test_an_object_ref_is_read_from_the_object_itself() -> None:
    obj = {"apiVersion": "comcast.github.io/v1", "kind": "KuberhealthyJob",
           "metadata": {"namespace": "ns", "name": "j", "uid": "u-9"}}
    assert ObjectRef.of(obj) == ObjectRef(ev.KIND_JOB, "ns", "j", "u-9")
    assert "uid" not in ObjectRef(ev.KIND_CHECK, "ns", "c").involved_object()


def test_a_long_message_is_capped(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    r.check_failed(CHECK, "x" * 10_000)
    drain(r)
    assert len(api.events()[0]["message"]) == ev.MESSAGE_CHARS


# --- counting repeats -------------------------------------------------------------------------------------------

def test_the_same_event_again_within_the_window_counts_onto_the_first(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    for i in range(3):
        if i:
            clock.advance(60)
        r.check_failed(CHECK, "boom")
        drain(r)
    (event,) = api.events()
    assert event["count"] == 3
    assert event["firstTimestamp"] == "2026-12-01T10:00:00Z" and event["lastTimestamp"] == "2026-12-01T10:02:00Z"
    assert [c[0] for c in api.calls] == ["create", "patch", "patch"]
    assert (r.created, r.counted, r.patches) == (1, 2, 2)


def test_repeats_within_a_minute_of_the_last_request_are_one_patch_when_the_minute_is_up(
        api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    r.check_failed(CHECK, "boom")
    drain(r)
    for _ in range(4):  # a check failing every 10 s (pods that start too slowly for its timeout)
        clock.advance(10)
        r.check_failed(CHECK, "boom")
        drain(r)
    assert [c[0] for c in api.calls] == ["create"] and r.owing() == 1
    assert api.events()[0]["count"] == 1  # the first occurrence was not held back
    clock.advance(ev.COUNT_EVERY - 40)  # a minute after the create
    drain(r)
    (event,) = api.events()
    assert [c[0] for c in api.calls] == ["create", "patch"] and r.owing() == 0
    assert event["count"] == 5 and event["lastTimestamp"] == "2026-12-01T10:00:40Z"  # the latest repeat's time
    assert (r.created, r.counted, r.patches) == (1, 4, 1)


def test_a_check_failing_on_every_run_costs_one_event_request_a_minute_however_short_its_interval(
        api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    for _ in range(60):  # ten minutes of a failure every 10 s
        r.check_failed(CHECK, "boom")
        drain(r)
        clock.advance(10)
    drain(r)
    (event,) = api.events()
    assert event["count"] == 60 and r.owing() == 0  # every failure counted
    assert [c[0] for c in api.calls] == ["create"] + ["patch"] * 10  # one request a minute, not one per failure


def test_an_owed_count_onto_an_expired_event_creates_it_anew_with_every_repeat(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    r.check_failed(CHECK, "boom")
    drain(r)
    api.store.clear()  # the API server's event TTL passed
    for _ in range(2):
        clock.advance(20)
        r.check_failed(CHECK, "boom")
        drain(r)
    clock.advance(20)
    drain(r)
    (event,) = api.events()
    assert [c[0] for c in api.calls] == ["create", "patch", "create"]
    assert event["count"] == 2 and event["firstTimestamp"] == "2026-12-01T10:00:40Z"


def test_stop_sends_the_owed_counts_at_once(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    r.check_failed(CHECK, "boom")
    drain(r)
    clock.advance(5)
    r.check_failed(CHECK, "boom")
    drain(r)
    assert r.owing() == 1
    r.stop()
    r.start()
    r.join(WAIT)
    assert not r.is_alive()
    assert [c[0] for c in api.calls] == ["create", "patch"] and api.events()[0]["count"] == 2 and r.failed == 0


def test_a_different_message_object_or_reason_is_a_new_event(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    r.check_failed(CHECK, "boom")
    r.check_failed(CHECK, "bang")
    r.check_failed(ObjectRef(ev.KIND_CHECK, "team-a", "dns", "uid-other"), "boom")  # a same-named successor
    r.report_rejected(CHECK, "boom")
    drain(r)
    assert len(api.events()) == 4 and all(e["count"] == 1 for e in api.events())


def test_after_the_window_a_repeat_starts_a_new_event(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock, window=600)
    r.check_failed(CHECK, "boom")
    clock.advance(601)
    r.check_failed(CHECK, "boom")
    drain(r)
    assert [e["count"] for e in api.events()] == [1, 1]


def test_an_expired_event_is_created_anew(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    r.check_failed(CHECK, "boom")
    drain(r)
    api.store.clear()  # the API server's event TTL passed
    clock.advance(ev.COUNT_EVERY)
    r.check_failed(CHECK, "boom")
    drain(r)
    (event,) = api.events()
    assert event["count"] == 1 and event["firstTimestamp"] == "2026-12-01T10:01:00Z"
    assert [c[0] for c in api.calls] == ["create", "patch", "create"]


def test_a_create_whose_answer_was_lost_is_not_made_twice(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)

    original = api.create_event

    def create_then_lose(namespace: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        original(namespace, body, timeout)
        if len(api.calls) == 1:
            raise Unreachable("read timed out")
        return body
    api.create_event = create_then_lose  # type: ignore[method-assign]
    r.check_failed(CHECK, "boom")
    r.check_failed(CHECK, "boom")
    drain(r)
    clock.advance(ev.COUNT_EVERY)  # the repeat's count is owed until then
    drain(r)
    (event,) = api.events()
    assert event["count"] == 2 and [c[0] for c in api.calls] == ["create", "create", "patch"]


def test_two_events_in_the_same_clock_tick_get_different_names(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    r.check_failed(CHECK, "boom")
    r.check_recovered(CHECK)
    drain(r)
    assert len(api.events()) == 2


def test_an_event_name_fits_the_api_servers_limit(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    r.check_failed(ObjectRef(ev.KIND_CHECK, "ns", "a" * 253, "u"), "boom")
    drain(r)
    (name,) = [k[1] for k in api.store]
    assert len(name) <= 253 and name.startswith("aaa") and name.endswith(f".{int(T0 * 1e9):x}")


def test_the_memory_of_sent_events_is_bounded(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock, cache_entries=2)
    for msg in ("a", "b", "c", "a"):
        r.check_failed(CHECK, msg)
    drain(r)
    assert len(api.events()) == 4  # "a" was forgotten, so its repeat is a new Event


# --- errors and the queue ------------------------------------------------------------------------------------------

def test_transient_errors_are_retried_and_others_are_given_up_at_once(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    api.fail = [ServerError("503"), Unreachable("refused")]
    r.check_failed(CHECK, "boom")
    assert r.step() is True
    assert len(api.events()) == 1 and len(api.calls) == 3
    api.fail = [Forbidden("events is forbidden")]
    r.check_recovered(CHECK)
    with pytest.raises(Forbidden):
        r.step()
    assert r.failed == 1 and len(api.calls) == 4


def test_an_api_that_stays_away_costs_one_event_not_the_recorder(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    api.fail = [Unreachable("refused")] * ev.ATTEMPTS
    r.check_failed(CHECK, "boom")
    r.check_failed(CHECK, "boom")
    with pytest.raises(Unreachable):
        r.step()
    drain(r)
    assert r.failed == 1 and len(api.events()) == 1


def test_a_full_queue_drops_new_events_and_counts_them(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock, queue_events=2)
    assert [r.check_failed(CHECK, str(i)) for i in range(5)] == [True, True, False, False, False]
    assert r.dropped == 3 and r.queued() == 2
    drain(r)
    assert [e["message"] for e in api.events()] == ["0", "1"]


# --- the thread -------------------------------------------------------------------------------------------------------

@pytest.fixture
def running(api: FakeEvents) -> Iterator[EventRecorder]:
    r = EventRecorder(api, "kh-0", EventLimits(backoff_first=0.001, flush_timeout=WAIT))
    r.start()
    try:
        yield r
    finally:
        if api.gate is not None:
            api.gate.set()
        r.stop()
        r.join(WAIT)
        assert not r.is_alive()


def test_the_thread_sends_what_is_recorded(running: EventRecorder, api: FakeEvents) -> None:
    running.check_failed(CHECK, "boom")
    assert api.called.wait(WAIT)
    running.stop()
    running.join(WAIT)
    assert not running.is_alive() and running.created == 1 and running.name == "kh-events"


def test_a_slow_api_never_blocks_the_caller(running: EventRecorder, api: FakeEvents) -> None:
    api.gate = threading.Event()  # the API does not answer until the gate opens
    running.check_failed(CHECK, "first")
    assert api.called.wait(WAIT)
    for i in range(ev.QUEUE_EVENTS + 10):  # while the sender is stuck in a request
        running.check_failed(CHECK, str(i))
    assert running.queued() == ev.QUEUE_EVENTS and running.dropped == 10
    api.gate.set()


def test_api_errors_are_logged_and_the_thread_carries_on(running: EventRecorder, api: FakeEvents,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "kuberhealthy.outputs.events")
    api.fail = [Forbidden("events is forbidden: User cannot create events")]
    running.check_failed(CHECK, "one")
    running.check_failed(CHECK, "two")
    assert api.wait_calls(2)
    running.stop()
    running.join(WAIT)
    assert [e["message"] for e in api.events()] == ["two"] and running.failed == 1
    assert "events is forbidden" in caplog.text


def test_the_thread_sends_an_owed_count_when_its_time_comes_without_another_event(api: FakeEvents) -> None:
    r = EventRecorder(api, "kh-0", EventLimits(backoff_first=0.001, count_every=0.05))
    r.start()
    try:
        r.check_failed(CHECK, "boom")
        assert api.wait_calls(1)
        r.check_failed(CHECK, "boom")
        assert api.wait_calls(2)  # the patch, once count_every has passed since the create
    finally:
        r.stop()
        r.join(WAIT)
    assert not r.is_alive()
    assert [c[0] for c in api.calls] == ["create", "patch"] and api.events()[0]["count"] == 2


def test_stop_sends_what_is_queued_and_then_refuses_more(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    for i in range(5):
        r.check_failed(CHECK, str(i))
    r.start()
    r.stop()
    r.join(WAIT)
    assert not r.is_alive()
    assert len(api.events()) == 5
    assert r.check_failed(CHECK, "late") is False and r.dropped == 1


def test_stop_gives_up_the_rest_when_the_api_is_away(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    for i in range(5):
        r.check_failed(CHECK, str(i))
    api.fail = [Unreachable("refused")] * 5
    r.stop()  # before start: the thread goes straight to its flush
    r.start()
    r.join(WAIT)
    assert not r.is_alive()
    assert len(api.calls) == 1 and r.failed == 5 and api.events() == []


# --- ReportRejected is damped ------------------------------------------------------------------------------

def test_a_repeated_rejection_is_one_event_a_minute_and_counts_the_damped_ones(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    for _ in range(10):
        assert r.report_rejected(CHECK, "its run is over")
        drain(r)
        clock.advance(1)
    assert [c[0] for c in api.calls] == ["create"] and r.damped == 9
    clock.advance(50)  # a minute after the first
    r.report_rejected(CHECK, "its run is over")
    drain(r)
    (event,) = api.events()
    assert [c[0] for c in api.calls] == ["create", "patch"]
    assert event["count"] == 11  # every rejection is counted, two requests made


def test_damping_is_per_check_and_reason(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    other = ObjectRef(ev.KIND_CHECK, "team-a", "ping", "uid-2")
    for ref, reason in [(CHECK, "a"), (CHECK, "b"), (other, "a"), (CHECK, "a"), (other, "a")]:
        r.report_rejected(ref, reason)
    drain(r)
    assert len(api.events()) == 3 and r.damped == 2


def test_other_events_are_not_damped(api: FakeEvents, clock: Clock) -> None:
    r = recorder(api, clock)
    for _ in range(3):
        r.check_failed(CHECK, "boom")
    drain(r)
    clock.advance(ev.COUNT_EVERY)  # the repeats are counted, in one request, a minute after the first
    drain(r)
    assert api.events()[0]["count"] == 3 and r.damped == 0
