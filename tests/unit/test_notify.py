"""The keyed notifier: a change wakes the waiters of its topics and nobody else."""
from __future__ import annotations

import threading
import time

from kuberhealthy.base.notify import Notifier
from testbed.fakes.readouts import subscriber_count

A = ("pods", "uuid", "a")
B = ("pods", "uuid", "b")


def test_a_notification_wakes_only_the_waiters_of_its_topic() -> None:
    n = Notifier()
    calls = {"a": 0, "b": 0}
    stop = threading.Event()
    with n.waiter(A) as wa, n.waiter(B) as wb:
        def pa() -> bool:
            calls["a"] += 1
            return calls["a"] > 5

        def pb() -> bool:
            calls["b"] += 1
            return False
        ta = threading.Thread(target=lambda: wa.wait_for(pa, time.monotonic() + 30, stop=stop))
        tb = threading.Thread(target=lambda: wb.wait_for(pb, time.monotonic() + 30, stop=stop))
        ta.start()
        tb.start()
        deadline = time.monotonic() + 10
        while calls["a"] <= 5 and time.monotonic() < deadline:
            n.notify([A])
            threading.Event().wait(0.01)
        ta.join(10)
        assert calls["a"] > 5 and calls["b"] == 1  # B's predicate ran once, at the start
        stop.set()
        wb.wake()
        tb.join(10)
    assert calls["b"] == 2  # and once more for the wake-up that ended its wait


def test_a_change_during_the_predicate_is_not_lost() -> None:
    n = Notifier()
    box = {"ready": False, "looked": 0}
    with n.waiter(A) as w:
        def predicate() -> bool:
            box["looked"] += 1
            if box["looked"] == 1:  # the change lands while the first evaluation runs
                box["ready"] = True
                n.notify([A])
                return False
            return bool(box["ready"])
        started = time.monotonic()
        assert w.wait_for(predicate, started + 30) is True
    assert time.monotonic() - started < 29  # returned on the wake-up, not at the deadline


def test_notify_all_and_wake_reach_a_waiter_without_topics() -> None:
    n = Notifier()
    stop = threading.Event()
    with n.waiter() as w:
        threading.Timer(0.05, lambda: (stop.set(), w.wake())).start()
        assert w.wait_for(lambda: None, time.monotonic() + 30, stop=stop) is None
    with n.waiter() as w:
        flag = {"v": False}
        threading.Timer(0.05, lambda: (flag.update(v=True), n.notify_all())).start()
        assert w.wait_for(lambda: flag["v"], time.monotonic() + 30) is True


def test_closing_a_waiter_unsubscribes_it() -> None:
    n = Notifier()
    w = n.waiter(A, B)
    assert subscriber_count(n) == 1
    w.close()
    assert subscriber_count(n) == 0
    n.notify([A, B])  # nothing left to wake; must not fail
