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

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from kuberhealthy.kube import HEALTHCHECKS, KHSTATES, Cache, Obj
from kuberhealthy.records import rollups
from kuberhealthy.records.rollups import Rollup
from kuberhealthy.records.uptime import FIELD, RollupMemo, text_of
from kuberhealthy.records.uptime import state_key as key_of

FRESH = 60.0  # seconds a computed window or timeline is served before it is computed again
KEPT = 5_000  # computed windows and timelines kept (the least recently used go first)
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


class Uptime:
    """Windows and timelines per check, from the khstate cache and (with HealthChecks) their states in
    the khstate shape (records/kinds.py: Kind.states)."""

    def __init__(self, khstates: Cache, hc_states: Cache | None = None, memo: RollupMemo | None = None,
                 wall: Callable[[], float] = time.time, clock: Callable[[], float] = time.monotonic) -> None:
        self._khstates, self._hc_states = khstates, hc_states
        self.memo = memo or RollupMemo()
        self._wall, self._clock = wall, clock
        self._lock = threading.Lock()
        # (what, key) -> (text, at, value), least recently used first
        self._computed: OrderedDict[tuple[str, str], tuple[str | None, float, Any]] = OrderedDict()

    def state(self, kind: str, namespace: str, name: str) -> Obj | None:
        cache = self._hc_states if kind == HEALTHCHECK else self._khstates
        return cache.get(namespace, name) if cache is not None else None

    def rollup_of(self, key: str, state: Obj | None) -> Rollup:
        """The rollup a state holds (empty for none, and for one that cannot be read)."""
        return self.memo.rollup(key, stored(state))

    def rollup(self, kind: str, namespace: str, name: str) -> Rollup:
        return self.rollup_of(state_key(kind, namespace, name), self.state(kind, namespace, name))

    def _kept(self, what: str, key: str, state: Obj | None, compute: Callable[[Rollup, float], Any]) -> Any:
        text = text_of(stored(state))
        at = self._clock()
        with self._lock:
            hit = self._computed.get((what, key))
            if hit is not None:
                self._computed.move_to_end((what, key))
        if hit is not None and hit[0] == text and at - hit[1] < FRESH:
            return hit[2]
        value = compute(self.rollup_of(key, state), self._wall())
        with self._lock:
            self._computed[(what, key)] = (text, at, value)
            while len(self._computed) > KEPT:
                self._computed.popitem(last=False)
        return value

    def windows_of(self, key: str, state: Obj | None) -> Windows:
        """rollups.windows() of a state now: uptime and coverage per window (1h, 24h, 7d, 30d), and the
        duration percentiles of 24h and 7d. Do not change what it returns (it is shared)."""
        return self._kept("windows", key, state, rollups.windows)  # type: ignore[no-any-return]

    def windows(self, kind: str, namespace: str, name: str) -> Windows:
        return self.windows_of(state_key(kind, namespace, name), self.state(kind, namespace, name))

    def timeline_of(self, key: str, state: Obj | None, window: str) -> Buckets:
        """rollups.timeline() of a state now (24h and 7d hourly, 30d per UTC day), oldest first; raises
        ValueError for another window. Do not change what it returns (it is shared)."""
        if window not in TIMELINES:
            raise ValueError(f"window must be one of {', '.join(TIMELINES)}, not {window!r}")
        return self._kept(f"timeline {window}", key, state,  # type: ignore[no-any-return]
                          lambda r, now: rollups.timeline(r, now, window))

    def timeline(self, kind: str, namespace: str, name: str, window: str) -> Buckets:
        return self.timeline_of(state_key(kind, namespace, name), self.state(kind, namespace, name), window)

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """Drop what is kept of a check that is gone."""
        key = state_key(kind, namespace, name)
        with self._lock:
            for k in [k for k in self._computed if k[1] == key]:
                del self._computed[k]
        self.memo.forget(key)
