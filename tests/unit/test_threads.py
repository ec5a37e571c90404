"""The thread base: unexpected ends report themselves, periodic loops survive a bad tick, stop is prompt;
and the services' supervisor and the arbiter's signal handling act on those reports and signals."""
from __future__ import annotations

import queue
import signal
import threading
from types import FrameType
from typing import Any

import pytest

from kuberhealthy.base.config import load
from kuberhealthy.base.threads import BackgroundThread, Deaths, PeriodicThread
from kuberhealthy.daemon import server
from kuberhealthy.daemon.services import Services


class Crashing(BackgroundThread):
    def _run(self) -> None:
        raise RuntimeError("a bug")


class Returning(BackgroundThread):
    def _run(self) -> None:
        return


class Waiting(BackgroundThread):
    def _run(self) -> None:
        self._stop.wait()


class OneOff(Returning):
    finite = True


class Ticking(PeriodicThread):
    def __init__(self, fail_first: int) -> None:
        super().__init__("kh-test-ticking", 0.001, tick_at_start=True)
        self.fail_first = fail_first
        self.ticks = 0
        self.failures = 0
        self.finished = 0
        self.enough = threading.Event()

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks >= 5:
            self.enough.set()
        if self.ticks <= self.fail_first:
            raise ValueError("bad cycle")

    def tick_failed(self) -> None:
        self.failures += 1

    def finish(self) -> None:
        self.finished += 1


def _run_to_end(t: BackgroundThread) -> None:
    t.start()
    t.join(5)
    assert not t.is_alive()


@pytest.mark.parametrize("kind", [Crashing, Returning])
def test_a_thread_that_ends_unasked_reports_itself(kind: type[BackgroundThread]) -> None:
    deaths = Deaths()
    t = kind("kh-test-dies")
    t.supervised_by(deaths)
    _run_to_end(t)
    assert deaths.event.is_set() and deaths.names() == ["kh-test-dies"]


def test_a_stopped_thread_does_not_report_a_death() -> None:
    deaths = Deaths()
    t = Waiting("kh-test-waits")
    t.supervised_by(deaths)
    t.start()
    t.stop()
    t.join(5)
    assert not t.is_alive() and not deaths.event.is_set()


def test_a_one_off_thread_may_end_by_itself_but_not_by_an_exception() -> None:
    deaths = Deaths()
    done = OneOff("kh-test-once")
    done.supervised_by(deaths)
    _run_to_end(done)
    assert not deaths.event.is_set()

    class OneOffCrash(Crashing):
        finite = True
    crash = OneOffCrash("kh-test-once-crash")
    crash.supervised_by(deaths)
    _run_to_end(crash)
    assert deaths.names() == ["kh-test-once-crash"]


def test_a_periodic_thread_survives_failing_ticks_and_finishes_once_after_stop() -> None:
    deaths = Deaths()
    t = Ticking(fail_first=3)
    t.supervised_by(deaths)
    t.start()
    assert t.enough.wait(5)
    t.stop()
    t.join(5)
    assert not t.is_alive()
    assert t.failures == 3 and t.ticks >= 5 and t.finished == 1
    assert not deaths.event.is_set()


def test_a_thread_cannot_be_started_twice() -> None:
    t = Waiting("kh-test-twice")
    t.start()
    try:
        with pytest.raises(RuntimeError):
            t.start()
    finally:
        t.stop()
        t.join(5)


def _services() -> Services:
    return Services(load(None), kube=None)  # type: ignore[arg-type]  # no cache is started here


def test_the_supervisor_stops_the_process_when_a_thread_reports_its_death() -> None:
    services = _services()
    called: list[bool] = []
    services.on_fatal = lambda: called.append(True)
    services.deaths.report("kh-reflector-khstates")
    assert services.check_deaths() is True
    assert services.fatal.is_set() and called == [True]


def test_the_supervisor_ignores_a_death_reported_during_shutdown() -> None:
    services = _services()
    services.stop(1.0)
    services.deaths.report("kh-controller")
    assert services.check_deaths() is False
    assert not services.fatal.is_set()


class FakeArbiter:
    def __init__(self) -> None:
        self.queued: list[int] = []
        self.WORKERS = {4242: object()}

    def signal(self, sig: int, frame: FrameType | None) -> None:
        self.queued.append(sig)


def test_the_arbiter_handler_only_queues_and_a_second_signal_hard_stops_on_a_thread() -> None:
    arbiter = FakeArbiter()
    killed: list[tuple[int, int]] = []
    exited = threading.Event()

    def hard_stop(srv: Any, signals: queue.SimpleQueue[int]) -> None:
        server._hard_stop(srv, signals, kill=lambda pid, sig: killed.append((pid, sig)),
                          exit_now=lambda code: exited.set())

    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.install_arbiter_signals(arbiter, hard_stop=hard_stop)
        handler = signal.getsignal(signal.SIGINT)
        assert callable(handler)
        handler(signal.SIGINT, None)
        assert arbiter.queued == [signal.SIGTERM]  # SIGINT stops gracefully, through gunicorn's queue
        assert not exited.wait(0.2) and killed == []
        handler(signal.SIGTERM, None)
        assert exited.wait(5)
        assert killed == [(4242, signal.SIGKILL)]
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
