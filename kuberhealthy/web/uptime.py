"""What the web reads of each check's uptime rollup: windows, timelines and the 30 days, from the caches.

A check's rollup is in its state (khstate `spec.rollups`, a HealthCheck's `status.rollups`, seen in the
khstate shape: records/uptime.py). Every replica reads it from its own watch caches, never from the API.
Parsing is memoised per stored value (records/uptime.RollupMemo, shared with the run's writes in the
leader), and what is computed from it is kept until the stored value changes or FRESH seconds pass (the
windows end at "now", so they move with time even while nothing is written).

Keys: the entry kinds of web/entries.py (check, job, healthcheck); a check and a job of the same name
share their khstate, and so their rollup.

Not here: how the figures are drawn (web/charts.py) or served (web/api.py, web/status/, dashboard).
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kuberhealthy.kube import HEALTHCHECKS, KHSTATES, Cache, Obj
from kuberhealthy.records import rollcodec, rollups
from kuberhealthy.records.rollups import HOUR, Hour, Rollup
from kuberhealthy.records.uptime import FIELD, RollupMemo, text_of
from kuberhealthy.records.uptime import state_key as key_of

FRESH = 60.0  # seconds a computed window or timeline is served before it is computed again
KEPT = 5_000  # computed windows and 30-day timelines kept (the least recently used go first)
HOURLY_KEPT = 32  # hourly timelines (24h, 7d) kept
# Whole decodes (a few ms each) per second before figures of an unchanged value are served an hour old: when
# the hour turns every check's summary is made again, and one listing must not make all of them.
DECODES_PER_SECOND = 100


_WHOLE = threading.Lock()  # whole values are decoded one at a time in the process


class _Deferred(Exception):
    """The whole-decode budget is spent and the caller has older figures of the same value."""
HEALTHCHECK = "healthcheck"  # web/entries.HEALTHCHECK (the one entry kind whose state is not a khstate)
WINDOWS = tuple(rollups.WINDOWS)  # "1h", "24h", "7d", "30d"
TIMELINES = rollups.TIMELINES  # "24h", "7d", "30d"

Windows = dict[str, dict[str, float | None]]
Buckets = list[dict[str, Any]]


def state_key(kind: str, namespace: str, name: str) -> str:
    """The memo's key of a check's state object, for an entry kind."""
    return key_of(HEALTHCHECKS.plural if kind == HEALTHCHECK else KHSTATES.plural, namespace, name)


def stored(state: Obj | None) -> Any:
    """The rollup value a khstate-shaped state holds (None: none)."""
    return ((state or {}).get("spec") or {}).get(FIELD)


@dataclass(frozen=True)
class _Digest:
    """What is kept of one check's stored rollup between its runs: a Summary for the current hour (days
    too once a 30-day timeline was asked for) and how to read the next value of the same hour: where its
    newest hour starts, a hash of the bytes before that and of them all, the newest two hours. Never its
    721 hours, nor its bytes (a hash stands for them: a collision would misread one check for an hour)."""

    summary: rollups.Summary
    size: int
    whole: int  # hash of all the bytes
    last_at: int
    head: int  # hash of the bytes before last_at
    first: int
    last: Hour | None
    prev: Hour | None


class Uptime:
    """Windows and timelines per check, from the khstate cache and (with HealthChecks) their states in
    the khstate shape (records/kinds.py: Kind.states).

    Per check a _Digest: a run that changed only the newest hour (the common case) is read by decoding
    that hour alone and adding it to the Summary; the whole value is decoded once per hour (or after
    another writer's value). Hourly timelines (24h, 7d) decode the whole value and are kept for a few
    checks only (a check's own page asks for them)."""

    def __init__(self, khstates: Cache, hc_states: Cache | None = None, memo: RollupMemo | None = None,
                 wall: Callable[[], float] = time.time, clock: Callable[[], float] = time.monotonic) -> None:
        self._khstates, self._hc_states = khstates, hc_states
        self.memo = memo or RollupMemo()  # the writer's, in the leader (not used for reads)
        self._wall, self._clock = wall, clock
        self._lock = threading.Lock()
        # (what, key) -> (text, at, value), least recently used first
        self._computed: OrderedDict[tuple[str, str], tuple[str | None, float, Any]] = OrderedDict()
        self._digests: dict[str, _Digest] = {}
        self._hourlies: OrderedDict[tuple[str, str], tuple[str | None, float, Buckets]] = OrderedDict()
        self.decodes = 0  # whole values decoded (figures and tests)
        self._tokens, self._filled = float(DECODES_PER_SECOND), clock()

    def state(self, kind: str, namespace: str, name: str) -> Obj | None:
        cache = self._hc_states if kind == HEALTHCHECK else self._khstates
        return cache.get(namespace, name) if cache is not None else None

    def rollup_of(self, key: str, state: Obj | None) -> Rollup:
        """The rollup a state holds, decoded whole (empty for none, and for one that cannot be read)."""
        return rollcodec.parse(stored(state))[0]

    def rollup(self, kind: str, namespace: str, name: str) -> Rollup:
        return self.rollup_of(state_key(kind, namespace, name), self.state(kind, namespace, name))

    def _digest(self, key: str, state: Obj | None, now: float, days: bool = False,
                may_defer: bool = False) -> tuple[_Digest, Hour | None] | None:
        """The check's digest for its stored value at `now`, and the value's bucket of now's hour (None:
        none); None when the state holds no value. `may_defer`: the caller has the figures of this same
        value from earlier, so when the whole-decode budget is spent it raises _Deferred instead."""
        data = rollcodec.data_of(stored(state))
        if data is None:
            return None
        hour = int(now // HOUR)
        with self._lock:
            kept = self._digests.get(key)
        if kept is not None and kept.summary.hour == hour and (not days or kept.summary.today is not None):
            found = self._next(kept, data, hour)
            if found is not None:
                with self._lock:
                    self._digests[key] = found
                return found, found.last if found.last is not None and found.last.hour == hour else None
        if not self._spend() and may_defer:
            raise _Deferred
        with _WHOLE:  # one month of objects (~280 KB) at a time, whatever the requests in flight
            return self._decoded(key, state, data, hour, days)

    def _decoded(self, key: str, state: Obj | None, data: bytes, hour: int,
                 days: bool) -> tuple[_Digest, Hour | None] | None:
        rollup, tail, _ = rollcodec.parse_tail(stored(state))
        self.decodes += 1
        if tail.last is not None and tail.last.hour > hour:  # a clock behind the writer's: read it whole
            return None
        digest = _Digest(rollups.summarize(rollup, hour, days), len(data), hash(data), tail.last_at,
                         hash(data[:tail.last_at]), tail.first, tail.last, tail.prev)
        with self._lock:
            self._digests[key] = digest
        return digest, tail.last if tail.last is not None and tail.last.hour == hour else None

    def _spend(self) -> bool:
        """A whole decode from the budget (DECODES_PER_SECOND, a second's worth at once); False: spent."""
        now = self._clock()
        with self._lock:
            self._tokens = min(float(DECODES_PER_SECOND), self._tokens + (now - self._filled) * DECODES_PER_SECOND)
            self._filled = now
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True

    @staticmethod
    def _next(kept: _Digest, data: bytes, hour: int) -> _Digest | None:
        """`kept` for `data` when it differs only in the bucket of `hour` (changed, or added after kept's
        newest bucket): that bucket alone is decoded. None: decode it all."""
        if kept.size == len(data) and kept.whole == hash(data):
            return kept
        last = kept.last
        if last is None or hash(data[:kept.last_at]) != kept.head:
            return None
        found = rollcodec.newest_from(data, kept.last_at, kept.first, kept.prev, last.hour)
        if found is None:
            return None
        hours, last_at = found
        if len(hours) == 1 and last.hour == hour:  # another run in the summary's hour
            return dataclasses.replace(kept, size=len(data), whole=hash(data), last=hours[0])
        if len(hours) == 2 and hours[0] == last and hours[1].hour == hour:  # the first run of the hour
            return dataclasses.replace(kept, size=len(data), whole=hash(data), last_at=last_at,
                                       head=hash(data[:last_at]), last=hours[1], prev=hours[0])
        return None

    def _kept(self, what: str, key: str, state: Obj | None, compute: Callable[[bool], Any]) -> Any:
        text = text_of(stored(state))
        at = self._clock()
        with self._lock:
            hit = self._computed.get((what, key))
            if hit is not None:
                self._computed.move_to_end((what, key))
        if hit is not None and hit[0] == text and at - hit[1] < FRESH:
            return hit[2]
        try:
            value = compute(hit is not None and hit[0] == text)
        except _Deferred:  # a value only older, and the whole-decode budget spent: served as it was
            assert hit is not None
            return hit[2]
        with self._lock:
            self._computed[(what, key)] = (text, at, value)
            while len(self._computed) > KEPT:
                self._computed.popitem(last=False)
        return value

    def windows_of(self, key: str, state: Obj | None) -> Windows:
        """rollups.windows() of a state now: uptime and coverage per window (1h, 24h, 7d, 30d), and the
        duration percentiles of 24h and 7d. Do not change what it returns (it is shared)."""
        def compute(may_defer: bool) -> Windows:
            now = self._wall()
            found = self._digest(key, state, now, may_defer=may_defer)
            fast = rollups.windows_at(found[0].summary, found[1], now) if found is not None else None
            return fast if fast is not None else rollups.windows(self.rollup_of(key, state), now)
        return self._kept("windows", key, state, compute)  # type: ignore[no-any-return]

    def windows(self, kind: str, namespace: str, name: str) -> Windows:
        return self.windows_of(state_key(kind, namespace, name), self.state(kind, namespace, name))

    def timeline_of(self, key: str, state: Obj | None, window: str) -> Buckets:
        """rollups.timeline() of a state now (24h and 7d hourly, 30d per UTC day), oldest first; raises
        ValueError for another window. Do not change what it returns (it is shared)."""
        if window not in TIMELINES:
            raise ValueError(f"window must be one of {', '.join(TIMELINES)}, not {window!r}")

        def compute(may_defer: bool = False) -> Buckets:
            now = self._wall()
            if window == "30d":
                found = self._digest(key, state, now, days=True, may_defer=may_defer)
                fast = rollups.days_at(found[0].summary, found[1], now) if found is not None else None
                if fast is not None:
                    return fast
            return rollups.timeline(self.rollup_of(key, state), now, window)
        if window != "30d":  # a check's own page: decoded whole, kept for few checks
            return self._hourly(key, state, window, compute)
        return self._kept(f"timeline {window}", key, state, compute)  # type: ignore[no-any-return]

    def _hourly(self, key: str, state: Obj | None, window: str, compute: Callable[[], Buckets]) -> Buckets:
        text, at = text_of(stored(state)), self._clock()
        with self._lock:
            hit = self._hourlies.get((window, key))
        if hit is not None and hit[0] == text and at - hit[1] < FRESH:
            return hit[2]
        value = compute()
        with self._lock:
            self._hourlies[(window, key)] = (text, at, value)
            self._hourlies.move_to_end((window, key))
            while len(self._hourlies) > HOURLY_KEPT:
                self._hourlies.popitem(last=False)
        return value

    def timeline(self, kind: str, namespace: str, name: str, window: str) -> Buckets:
        return self.timeline_of(state_key(kind, namespace, name), self.state(kind, namespace, name), window)

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """Drop what is kept of a check that is gone."""
        key = state_key(kind, namespace, name)
        with self._lock:
            for k in [k for k in self._computed if k[1] == key]:
                del self._computed[k]
            for k in [k for k in self._hourlies if k[1] == key]:
                del self._hourlies[k]
            self._digests.pop(key, None)
