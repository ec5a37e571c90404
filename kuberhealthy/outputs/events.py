"""Kubernetes Events on khchecks and khjobs, so `kubectl describe khcheck` tells what happened.

Reasons (docs/interface.md#events):
  CheckFailed        Warning  a run failed or reported failure; the message is the first error
  CheckRecovered     Normal   the first OK run after failures
  CheckRunRequested  Normal   someone asked for a run now (annotation or HTTP)
  ReportRejected     Warning  a report for the check was refused; the message says why
  PauseIgnored       Warning  the paused-until annotation holds no RFC 3339 time (records/pause.py)
  SpecInvalid        Warning  a HealthCheck's spec cannot be run; the message names the field
  StateNotKept       Warning  the installed CRD drops status fields of ours; the message says what is lost

Callers (a run, a report handler) only queue: `record()` never blocks and never raises. One sender
thread turns the queue into core/v1 Events. Like client-go's recorder, an event the same as one sent
before (same object, type, reason and message) within WINDOW seconds does not make a new Event: the
existing one gets `count` + 1 and a new `lastTimestamp` (a PATCH), so a check failing the same way
every minute is one Event with a rising count, not a flood. Count updates are coalesced too: at most one
PATCH per Event every COUNT_EVERY seconds; repeats in between are owed, summed, and sent together when
that time is up (or at stop), each with its own count and the latest `lastTimestamp`. So a check that
fails on every run of a short interval costs one request a minute, not one per run: the daemon's own
work per failed run does not grow when runs fail faster (a backlog of pods that start too slowly). A
first occurrence is never held back. Event names are `<object>.<unix ns, hex>`
as client-go makes them, so a create retried after a lost answer finds its own Event (409) instead
of making a second one. The queue is bounded: when the events API is slow or away, new events are
dropped and counted. API errors are retried briefly (transient ones), then logged and given up.

ReportRejected is damped before it is queued (anyone can send a report that is refused): at most one
per object and reason per REJECTED_EVERY seconds. The ones damped in between are not lost but counted,
as client-go's correlator counts repeats: the next one let through carries them in its weight, so the
Event's `count` is the number of rejections, while the API sees at most one request per minute per
check and reason. `damped` counts them for the process.

What this module does not do: decide when an event is due (the runner and the report handler do),
or talk to the API itself: it is handed an `EventsAPI` (kube/resources.py implements it), so it
imports nothing from `kubernetes`. Events are best-effort; nothing waits for them.
"""
from __future__ import annotations

import collections
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from kuberhealthy.base.errors import ApiError, Conflict, NotFound, is_transient
from kuberhealthy.base.threads import BackgroundThread
from kuberhealthy.base.times import format_time
from kuberhealthy.kube import KHCHECKS

logger = logging.getLogger(__name__)

API_VERSION = KHCHECKS.api_version
KIND_CHECK = "KuberhealthyCheck"
KIND_JOB = "KuberhealthyJob"
COMPONENT = "kuberhealthy"

NORMAL = "Normal"
WARNING = "Warning"
CHECK_FAILED = "CheckFailed"
CHECK_RECOVERED = "CheckRecovered"
CHECK_RUN_REQUESTED = "CheckRunRequested"
REPORT_REJECTED = "ReportRejected"
PAUSE_IGNORED = "PauseIgnored"
SPEC_INVALID = "SpecInvalid"
STATE_NOT_KEPT = "StateNotKept"
POD_DISRUPTED = "CheckPodDisrupted"

QUEUE_EVENTS = 1000  # events waiting to be sent; more are dropped
CACHE_ENTRIES = 4096  # events remembered for counting (client-go: maxLruCacheEntries)
WINDOW = 1800.0  # seconds an event is counted onto its predecessor (the API server keeps Events 1 h)
COUNT_EVERY = 60.0  # seconds: at most one count update (PATCH) per Event in this time; repeats wait and add up
REQUEST_TIMEOUT = 5.0  # seconds per API request
ATTEMPTS = 3  # tries per event for transient errors
BACKOFF_FIRST = 0.5  # seconds, doubled per try
FLUSH_TIMEOUT = 2.0  # seconds stop() may spend sending what is queued
MESSAGE_CHARS = 1024
REJECTED_EVERY = 60.0  # seconds: at most one ReportRejected per object and reason in this time
WARN_EVERY = 60.0  # seconds between warnings about dropped or unsent events
_NAME_MAX = 253


@dataclass(frozen=True)
class EventLimits:
    """How much an EventRecorder holds and how long it waits (the defaults above; tests shrink them)."""

    queue_events: int = QUEUE_EVENTS
    cache_entries: int = CACHE_ENTRIES
    window: float = WINDOW
    timeout: float = REQUEST_TIMEOUT
    backoff_first: float = BACKOFF_FIRST
    flush_timeout: float = FLUSH_TIMEOUT
    rejected_every: float = REJECTED_EVERY
    count_every: float = COUNT_EVERY


class EventsAPI(Protocol):
    """The two core/v1 Event calls the recorder needs. Both raise kuberhealthy.base.errors.ApiError."""

    def create_event(self, namespace: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        """POST /api/v1/namespaces/{namespace}/events"""

    def patch_event(self, namespace: str, name: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        """PATCH /api/v1/namespaces/{namespace}/events/{name} (merge patch: {count, lastTimestamp})"""


@dataclass(frozen=True)
class ObjectRef:
    """The khcheck or khjob an event is about. Without `uid`, `kubectl describe` does not show it."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    api_version: str = API_VERSION

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectRef:
        meta = obj.get("metadata") or {}
        return cls(str(obj.get("kind") or KIND_CHECK), str(meta.get("namespace") or ""),
                   str(meta.get("name") or ""), str(meta.get("uid") or ""),
                   str(obj.get("apiVersion") or API_VERSION))

    def involved_object(self) -> dict[str, str]:
        out = {"apiVersion": self.api_version, "kind": self.kind, "namespace": self.namespace, "name": self.name}
        if self.uid:
            out["uid"] = self.uid
        return out


@dataclass(frozen=True)
class _Pending:
    ref: ObjectRef
    type: str
    reason: str
    message: str
    wall: float  # unix seconds when it happened (a late send keeps the right time)
    mono: float
    weight: int = 1  # occurrences it stands for (damped ReportRejected ones before it, plus itself)

    @property
    def key(self) -> tuple[str, ...]:
        r = self.ref
        return (r.api_version, r.kind, r.namespace, r.name, r.uid, self.type, self.reason, self.message)


@dataclass
class _Sent:
    name: str
    count: int  # as the API server has it
    last_mono: float  # when the latest occurrence counted onto it happened (sent or owed)
    sent_mono: float  # when its last request went out (the sender's clock)
    owed: _Pending | None = None  # repeats not sent yet: the latest of them, weighing them all
    owed_items: int = 0  # how many repeats `owed` stands for
    owed_due: float = 0.0  # when `owed` is sent (sent_mono + count_every)


@dataclass
class _Damped:
    passed: float  # when the last ReportRejected for this (object, reason) was let through (monotonic)
    since: int = 0  # damped since then


def event_body(item: _Pending, name: str, instance: str) -> dict[str, Any]:
    """A core/v1 Event as the recorder creates it: first seen when `item` happened, counting its weight."""
    ref, when = item.ref, format_time(item.wall)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": ref.namespace},
        "involvedObject": ref.involved_object(),
        "reason": item.reason, "message": item.message, "type": item.type,
        "count": item.weight, "firstTimestamp": when, "lastTimestamp": when,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT, "reportingInstance": instance,
    }


class EventRecorder(BackgroundThread):
    """A bounded queue of events and one thread that sends them, counting repeats."""

    thread_name = "kh-events"

    def __init__(self, api: EventsAPI, instance: str, limits: EventLimits = EventLimits(), *,
                 wall: Callable[[], float] = time.time, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(self.thread_name)
        self._api = api
        self.instance = instance[:128]  # the API server's limit for reportingInstance
        self._max = max(1, limits.queue_events)
        self._cache_entries = max(1, limits.cache_entries)
        self.window = limits.window
        self.timeout = limits.timeout
        self._backoff_first = limits.backoff_first
        self.flush_timeout = limits.flush_timeout
        self._wall = wall
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: collections.deque[_Pending] = collections.deque()
        self._sent: collections.OrderedDict[tuple[str, ...], _Sent] = collections.OrderedDict()  # sender only
        self._last_ns = 0  # sender only: names stay unique even when two events share a clock tick
        self.count_every = limits.count_every
        self._owing: list[tuple[float, int, tuple[str, ...]]] = []  # sender only: heap of (due, seq, key)
        self._seq = itertools.count()
        self.created = 0  # Events created (under _cond, as are the counters below)
        self.counted = 0  # repeats counted onto an existing Event (owed ones once their PATCH is sent)
        self.patches = 0  # count updates sent (one PATCH may count many repeats)
        self.dropped = 0  # not queued: the queue was full, or the recorder stopped
        self.failed = 0  # given up after API errors
        self._unreported = 0
        self._last_warning: float | None = None
        self.rejected_every = limits.rejected_every
        self._rejections: collections.OrderedDict[tuple[str, ...], _Damped] = collections.OrderedDict()  # _cond
        self.damped = 0  # ReportRejected events damped (counted onto the next one let through)

    # --- the callers' side -------------------------------------------------------------------------------

    def record(self, ref: ObjectRef, type_: str, reason: str, message: str, weight: int = 1) -> bool:
        """Queue an event (standing for `weight` occurrences); False if it was dropped. Never blocks on
        the API, never raises."""
        item = _Pending(ref, type_, reason, _cap(message), self._wall(), self._clock(), max(1, weight))
        with self._cond:
            if self._stop.is_set() or len(self._queue) >= self._max:
                self.dropped += 1
                self._warn_locked("the queue is full" if not self._stop.is_set() else "the recorder is stopped")
                return False
            self._queue.append(item)
            self._cond.notify()
            return True

    def check_failed(self, ref: ObjectRef, first_error: str) -> bool:
        return self.record(ref, WARNING, CHECK_FAILED, first_error or "check failed")

    def check_recovered(self, ref: ObjectRef, failures: int = 0) -> bool:
        after = f" after {failures} failed run{'s' if failures != 1 else ''}" if failures > 0 else ""
        return self.record(ref, NORMAL, CHECK_RECOVERED, f"Check {ref.namespace}/{ref.name} is OK again{after}")

    def run_requested(self, ref: ObjectRef, source: str = "") -> bool:
        via = f" ({source})" if source else ""
        return self.record(ref, NORMAL, CHECK_RUN_REQUESTED, f"A run of {ref.namespace}/{ref.name} was requested{via}")

    def pause_ignored(self, ref: ObjectRef, annotation: str, value: str) -> bool:
        return self.record(ref, WARNING, PAUSE_IGNORED, f"{annotation}={value[:200]!r} is not an RFC 3339 time "
                           f"with an offset (e.g. 2026-12-02T06:00:00Z): ignored, the check is not paused")

    def spec_invalid(self, ref: ObjectRef, problem: str) -> bool:
        return self.record(ref, WARNING, SPEC_INVALID, f"not run: {problem[:900]}")

    def state_not_kept(self, ref: ObjectRef, what: str) -> bool:
        return self.record(ref, WARNING, STATE_NOT_KEPT, what[:1000])

    def pod_disrupted(self, ref: ObjectRef, pod: str, why: str, in_a_row: int) -> bool:
        """A run skipped because the cluster disrupted its checker pod (the third in a row fails instead)."""
        return self.record(ref, WARNING, POD_DISRUPTED, f"checker pod {pod} was disrupted ({in_a_row} in a row): "
                           f"{why[:600]}")

    def report_rejected(self, ref: ObjectRef, reason: str) -> bool:
        """Damped (module docstring): True when queued or counted onto the next one, False if dropped."""
        key = (ref.api_version, ref.kind, ref.namespace, ref.name, ref.uid, reason)
        now = self._clock()
        with self._cond:
            seen = self._rejections.get(key)
            if seen is not None and now - seen.passed < self.rejected_every:
                seen.since += 1
                self.damped += 1
                return True
            weight = 1 + (seen.since if seen is not None else 0)
            self._rejections[key] = _Damped(now)
            self._rejections.move_to_end(key)
            while len(self._rejections) > self._cache_entries:
                self._rejections.popitem(last=False)
        return self.record(ref, WARNING, REPORT_REJECTED, f"A report for {ref.namespace}/{ref.name} was rejected: "
                           f"{reason}", weight)

    def queued(self) -> int:
        with self._cond:
            return len(self._queue)

    # --- lifecycle ------------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop accepting events; the thread sends what is queued (within flush_timeout) and ends."""
        with self._cond:
            self._stop.set()
            self._cond.notify_all()

    # --- the sender ---------------------------------------------------------------------------------------------

    def step(self) -> bool:
        """Send one queued event, or else one owed count whose time has come (the thread's unit of work;
        tests call it directly). False: nothing to do now.

        Raises the ApiError that made it give up the event (counted in `failed`)."""
        with self._cond:
            item = self._queue.popleft() if self._queue else None
        try:
            if item is not None:
                self._deliver(item, ATTEMPTS)
            elif not self._send_due(ATTEMPTS):
                return False
        except ApiError:
            with self._cond:
                self.failed += 1
            raise
        return True

    def owing(self) -> int:
        """Events with repeats counted but not sent yet (sender state: for tests and the sender thread)."""
        return sum(1 for sent in self._sent.values() if sent.owed is not None)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self._cond:
                    while not self._queue and not self._stop.is_set():
                        wait = self._due_in()
                        if wait is not None and wait <= 0:
                            break
                        self._cond.wait(wait)
                if not self._stop.is_set():
                    self.step()
            except ApiError as e:  # given up on one event; the next may fare better
                with self._cond:
                    self._warn_locked(f"the API refused or did not answer ({e})")
            except Exception:  # a bug must not end event recording
                logger.exception("Event recorder: unexpected error; continuing")
                self._stop.wait(self._backoff_first)
        try:
            self._flush()
        except Exception:
            logger.exception("Event recorder: unexpected error while flushing")

    def _flush(self) -> None:
        """At stop: what is queued, then every owed count at once, within flush_timeout."""
        deadline = self._clock() + self.flush_timeout
        while self._clock() < deadline:
            with self._cond:
                item = self._queue.popleft() if self._queue else None
            try:
                if item is not None:
                    self._deliver(item, 1)
                elif not self._send_due(1, force=True):
                    break
            except ApiError as e:
                with self._cond:
                    self.failed += 1
                    self._warn_locked(f"the API refused or did not answer ({e})")
                if is_transient(e):  # the API is away: do not spend the shutdown on it
                    break
        owed = sum(1 for sent in self._sent.values() if sent.owed is not None)
        with self._cond:
            left = len(self._queue) + owed
            self._queue.clear()
            self.failed += left
        if left:
            logger.warning("Event recorder: %d events not sent at shutdown", left)

    def _deliver(self, item: _Pending, attempts: int) -> None:
        """Count onto the Event sent for the same thing within the window (now, or owed until COUNT_EVERY
        has passed since its last request), else create one."""
        seen = self._sent.get(item.key)
        if seen is not None and item.mono - seen.last_mono <= self.window:
            if seen.owed is not None or self._clock() - seen.sent_mono < self.count_every:
                self._owe(item.key, seen, item)
                return
            if self._count(item.key, seen, item, 1, attempts):
                return
            # expired (the API server keeps Events for --event-ttl): start anew
        elif seen is not None and seen.owed is not None:
            self._send_owed(item.key, seen, attempts)  # an older run of repeats first, then a new Event
        self._create(item, attempts)

    def _owe(self, key: tuple[str, ...], seen: _Sent, item: _Pending) -> None:
        """A repeat too soon after the Event's last request: summed into what it owes."""
        if seen.owed is None:
            seen.owed, seen.owed_due = item, seen.sent_mono + self.count_every
            heapq.heappush(self._owing, (seen.owed_due, next(self._seq), key))
        else:
            seen.owed = replace(item, weight=seen.owed.weight + item.weight)
        seen.owed_items += 1
        seen.last_mono = item.mono
        self._sent.move_to_end(key)

    def _next_owed(self) -> tuple[float, tuple[str, ...], _Sent] | None:
        """The owed count due first (stale heap entries dropped on the way)."""
        while self._owing:
            due, _, key = self._owing[0]
            seen = self._sent.get(key)
            if seen is not None and seen.owed is not None and seen.owed_due == due:
                return due, key, seen
            heapq.heappop(self._owing)
        return None

    def _due_in(self) -> float | None:
        """Seconds until an owed count is due (None: none is owed)."""
        first = self._next_owed()
        return None if first is None else first[0] - self._clock()

    def _send_due(self, attempts: int, force: bool = False) -> bool:
        """Send the owed count due first, if its time has come (any, with `force`). False: none sent."""
        first = self._next_owed()
        if first is None or (not force and first[0] > self._clock()):
            return False
        heapq.heappop(self._owing)
        self._send_owed(first[1], first[2], attempts)
        return True

    def _send_owed(self, key: tuple[str, ...], seen: _Sent, attempts: int) -> None:
        owed, items = seen.owed, seen.owed_items
        seen.owed, seen.owed_items = None, 0
        assert owed is not None
        if not self._count(key, seen, owed, items, attempts):
            self._create(owed, attempts)

    def _count(self, key: tuple[str, ...], seen: _Sent, item: _Pending, items: int, attempts: int) -> bool:
        """PATCH the Event's count up by `item`'s weight (standing for `items` repeats); False: the Event
        has expired."""
        body = {"count": seen.count + item.weight, "lastTimestamp": format_time(item.wall)}
        try:
            self._call(attempts, lambda: self._api.patch_event(item.ref.namespace, seen.name, body, self.timeout))
        except NotFound:
            return False
        seen.count += item.weight
        seen.last_mono = max(seen.last_mono, item.mono)
        seen.sent_mono = self._clock()
        self._sent.move_to_end(key)
        with self._cond:
            self.counted += items
            self.patches += 1
        return True

    def _create(self, item: _Pending, attempts: int) -> None:
        name = self._name(item)
        body = event_body(item, name, self.instance)
        try:
            self._call(attempts, lambda: self._api.create_event(item.ref.namespace, body, self.timeout))
        except Conflict as e:
            if not e.already_exists:
                raise
            # A create of ours that landed although its answer was lost: it is this very Event.
        self._sent[item.key] = _Sent(name, item.weight, item.mono, self._clock())
        self._sent.move_to_end(item.key)
        lost = 0
        while len(self._sent) > self._cache_entries:
            lost += self._sent.popitem(last=False)[1].owed is not None  # forgotten with repeats owed
        with self._cond:
            self.created += 1
            self.failed += lost

    def _call(self, attempts: int, fn: Callable[[], Any]) -> None:
        delay = self._backoff_first
        for attempt in range(1, attempts + 1):
            try:
                fn()
                return
            except ApiError as e:
                if not is_transient(e) or attempt == attempts or self._stop.wait(delay):
                    raise
                delay *= 2

    def _name(self, item: _Pending) -> str:
        ns = max(int(item.wall * 1e9), self._last_ns + 1)
        self._last_ns = ns
        suffix = f".{ns:x}"
        return item.ref.name[:_NAME_MAX - len(suffix)].rstrip(".-") + suffix

    def _warn_locked(self, why: str) -> None:
        self._unreported += 1
        now = self._clock()
        if self._last_warning is None or now - self._last_warning >= WARN_EVERY:
            logger.warning("Event recorder: %d events not sent: %s", self._unreported, why)
            self._unreported = 0
            self._last_warning = now


def _cap(message: str) -> str:
    return message if len(message) <= MESSAGE_CHARS else message[:MESSAGE_CHARS - 3] + "..."
