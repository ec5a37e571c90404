"""Wake exactly the waiters a change concerns: the cost of an event is O(its subscribers), not O(waiters).

A cache change names *topics*: `(resource, index, value)` triples such as `("pods", "uuid", <run uuid>)`
or `("khstates", "key", "<ns>/<name>")`. A waiter subscribes to the topics its predicate reads and
blocks on its own flag; `notify(topics)` sets the flags of those topics' subscribers only. With a
thousand checks each waiting on its own pod and khstate, one pod event wakes one run, where a shared
Condition woke all thousand to re-check their predicates under one lock.

`notify_all()` is for rare, global changes (a cache re-listed, or went stale or current again).

This module knows nothing about Kubernetes; the reflectors name the topics.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")
Topic = tuple[str, str, str]  # (resource plural, index name or "key", value)


class Waiter:
    """One thread's subscription and wake-up flag. Use as a context manager, or close() when done."""

    def __init__(self, notifier: Notifier) -> None:
        self._notifier = notifier
        self._flag = threading.Event()
        self.topics: set[Topic] = set()

    def watch(self, *topics: Topic) -> Waiter:
        """Subscribe to more topics (idempotent)."""
        self._notifier.subscribe(self, topics)
        return self

    def wake(self) -> None:
        """Make the current (or next) wait re-evaluate its predicate at once (e.g. after a stop)."""
        self._flag.set()

    def wait_for(self, predicate: Callable[[], T], deadline: float, stop: threading.Event | None = None,
                 clock: Callable[[], float] = time.monotonic) -> T | None:
        """Block until predicate() is truthy (returned), the monotonic deadline passes or stop is set (None).

        The flag is cleared before the predicate is evaluated, so a change that lands while it runs
        is never missed: it sets the flag and the wait returns at once to look again.
        """
        while True:
            self._flag.clear()
            value = predicate()
            if value:
                return value
            if stop is not None and stop.is_set():
                return None
            remaining = deadline - clock()
            if remaining <= 0:
                return None
            self._flag.wait(remaining)

    def close(self) -> None:
        self._notifier.unsubscribe(self)

    def __enter__(self) -> Waiter:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class Notifier:
    """Topic → subscribed waiters. Thread-safe; the lock is held only to copy a subscriber set."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subs: dict[Topic, set[Waiter]] = {}
        self._waiters: set[Waiter] = set()

    def waiter(self, *topics: Topic) -> Waiter:
        return Waiter(self).watch(*topics)

    def subscribe(self, waiter: Waiter, topics: Iterable[Topic]) -> None:
        with self._lock:
            self._waiters.add(waiter)
            for topic in topics:
                self._subs.setdefault(topic, set()).add(waiter)
                waiter.topics.add(topic)

    def unsubscribe(self, waiter: Waiter) -> None:
        with self._lock:
            self._waiters.discard(waiter)
            for topic in waiter.topics:
                subs = self._subs.get(topic)
                if subs is not None:
                    subs.discard(waiter)
                    if not subs:
                        del self._subs[topic]
            waiter.topics.clear()

    def notify(self, topics: Iterable[Topic]) -> None:
        with self._lock:
            targets = [w for t in topics for w in self._subs.get(t, ())]
        for w in targets:
            w.wake()

    def notify_all(self) -> None:
        with self._lock:
            targets = list(self._waiters)
        for w in targets:
            w.wake()
