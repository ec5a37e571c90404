"""The Lease elector stepped by hand: an injected clock and an in-memory Lease store, no threads."""
from __future__ import annotations

import copy
import threading
from typing import Any

from kuberhealthy.base.config import LeaderElection
from kuberhealthy.base.errors import Conflict, NotFound, Unreachable
from kuberhealthy.control.leader import Action, Candidacy, LeaderElector

SETTINGS = LeaderElection(lease_name="kh", lease_duration=15, renew_deadline=10, retry_period=2)


class FakeLeases:
    """A one-object store with resourceVersion checks, like the API server."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] | None = None
        self.rv = 0
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise Unreachable("connection refused")

    def get(self, res: Any, ns: str, name: str, timeout: float = 0) -> dict[str, Any]:
        self._check()
        if self.obj is None:
            raise NotFound("no lease")
        return copy.deepcopy(self.obj)

    def create(self, res: Any, ns: str, body: dict[str, Any], timeout: float = 0) -> dict[str, Any]:
        self._check()
        if self.obj is not None:
            raise Conflict("exists", reason="AlreadyExists")
        return self._store(body)

    def replace(self, res: Any, ns: str, name: str, body: dict[str, Any], timeout: float = 0) -> dict[str, Any]:
        self._check()
        assert self.obj is not None
        if body.get("metadata", {}).get("resourceVersion") != self.obj["metadata"]["resourceVersion"]:
            raise Conflict("stale")
        return self._store(body)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        self.obj = copy.deepcopy(body)
        self.obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return copy.deepcopy(self.obj)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(store: FakeLeases, clock: Clock, name: str, events: list[str]) -> LeaderElector:
    return LeaderElector(store, Candidacy("kh-ns", name, SETTINGS),  # type: ignore[arg-type]
                         lambda: events.append(f"{name} started"), lambda: events.append(f"{name} stopped"),
                         clock=clock)


def test_the_first_replica_creates_the_lease_and_the_second_stands_by() -> None:
    store, clock, events = FakeLeases(), Clock(), []
    a, b = elector(store, clock, "a", events), elector(store, clock, "b", events)
    assert a.try_once() is Action.CREATE and a.is_leader()
    assert b.try_once() is Action.WAIT and not b.is_leader()
    assert b.holder() == "a" and events == ["a started"]


def test_a_silent_holder_is_replaced_only_after_the_lease_duration() -> None:
    store, clock, events = FakeLeases(), Clock(), []
    a, b = elector(store, clock, "a", events), elector(store, clock, "b", events)
    a.try_once()
    b.try_once()  # b sees a's record now
    clock.now += 14.9
    assert b.try_once() is Action.WAIT
    clock.now += 0.2
    assert b.try_once() is Action.ACQUIRE and b.is_leader()
    assert store.obj is not None and store.obj["spec"]["leaseTransitions"] == 1


def test_a_leader_that_cannot_renew_steps_down_before_the_lease_could_pass_on() -> None:
    store, clock, events = FakeLeases(), Clock(), []
    a = elector(store, clock, "a", events)
    a.try_once()
    store.down = True
    for _ in range(4):  # retries every 2 s while the API is unreachable
        clock.now += 2
        a.try_once()
    assert a.is_leader()  # 8 s without renewal: still inside renewDeadline
    clock.now += 2
    a.try_once()
    assert not a.is_leader() and events == ["a started", "a stopped"]  # at 10 s, before leaseDuration (15 s)


def test_a_leader_that_sees_another_holder_steps_down_at_once() -> None:
    store, clock, events = FakeLeases(), Clock(), []
    a = elector(store, clock, "a", events)
    a.try_once()
    assert store.obj is not None
    store.obj["spec"]["holderIdentity"] = "usurper"
    a.try_once()
    assert not a.is_leader() and a.holder() == "usurper"


def test_stopping_releases_the_lease_so_a_standby_takes_over_at_its_next_try() -> None:
    store, clock, events = FakeLeases(), Clock(), []
    a, b = elector(store, clock, "a", events), elector(store, clock, "b", events)
    a.try_once()
    b.try_once()
    a._release()
    assert store.obj is not None and store.obj["spec"]["holderIdentity"] == ""
    assert b.try_once() is Action.ACQUIRE and b.is_leader()
    assert events == ["a started", "a stopped", "b started"]


def test_a_write_with_a_stale_resource_version_loses_the_race() -> None:
    store, clock, events = FakeLeases(), Clock(), []
    a, b = elector(store, clock, "a", events), elector(store, clock, "b", events)
    a.try_once()
    b.try_once()
    clock.now += 16  # a went silent; b may take over
    assert b.try_once() is Action.ACQUIRE and b.is_leader()
    assert store.obj is not None
    stale = copy.deepcopy(store.obj)
    stale["metadata"]["resourceVersion"] = "1"
    try:
        store.replace(None, "kh-ns", "kh", stale)
        raise AssertionError("a stale write must conflict")
    except Conflict:
        pass
    assert a.try_once() is Action.WAIT and not a.is_leader()  # a sees b's lease and does not lead


class FakeWatch:
    """The Lease watch as the elector sees it: listeners it can be told to call."""

    def __init__(self) -> None:
        self.listeners: list[Any] = []
        self.started = self.stopped = False

    def add_listener(self, fn: Any) -> None:
        self.listeners.append(fn)

    def emit(self, etype: str, obj: dict[str, Any]) -> None:
        for fn in self.listeners:
            fn(etype, copy.deepcopy(obj), None)

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.stopped = True

    def join(self, timeout: float | None = None) -> None:
        pass


def test_a_released_lease_wakes_the_standby_at_once_not_at_its_next_retry() -> None:
    store, events = FakeLeases(), list[str]()
    slow = LeaderElection(lease_name="kh", lease_duration=15, renew_deadline=10, retry_period=3600)
    watch = FakeWatch()
    a = LeaderElector(store, Candidacy("kh-ns", "a", SETTINGS), lambda: events.append("a started"),  # type: ignore[arg-type]
                      lambda: events.append("a stopped"))
    a.try_once()
    b = LeaderElector(store, Candidacy("kh-ns", "b", slow), lambda: events.append("b started"),  # type: ignore[arg-type]
                      lambda: events.append("b stopped"), watch=watch)
    b.start()  # its first try finds a holding the Lease; the next retry would be an hour away
    try:
        assert watch.started
        assert store.obj is not None
        watch.emit("MODIFIED", store.obj)  # a renewal: nothing to do, and nothing done
        a._release()
        assert store.obj is not None
        watch.emit("MODIFIED", store.obj)  # the release, as the watch delivers it
        deadline = threading.Event()
        for _ in range(200):  # a hang guard, not a speed limit
            if b.is_leader():
                break
            deadline.wait(0.05)
        assert b.is_leader() and store.obj["spec"]["holderIdentity"] == "b"
    finally:
        b.stop()
        b.join(10)
    assert watch.stopped
    assert events == ["a started", "a stopped", "b started", "b stopped"]


def test_the_leader_s_own_renewals_do_not_wake_it_but_another_holder_does() -> None:
    store, clock, events = FakeLeases(), Clock(), []
    watch = FakeWatch()
    a = LeaderElector(store, Candidacy("kh-ns", "a", SETTINGS), lambda: events.append("a started"),  # type: ignore[arg-type]
                      lambda: events.append("a stopped"), clock=clock, watch=watch)
    a.try_once()
    assert store.obj is not None
    watch.emit("MODIFIED", store.obj)
    assert not a._wake.is_set()  # its own renewal: a wake here would renew in a loop
    taken = copy.deepcopy(store.obj)
    taken["spec"]["holderIdentity"] = "b"
    watch.emit("MODIFIED", taken)
    assert a._wake.is_set()
    watch.emit("DELETED", taken)
    assert a._wake.is_set()
