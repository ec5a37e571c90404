"""Where a check's uptime rollup lives and how a run's write carries it.

The rollup (rollups.py, packed by rollcodec.py) is kept in the check's state object under FIELD: the
khstate's `spec.rollups`, a HealthCheck's `status.rollups` (hcstate.py maps one onto the other). It is
written only inside the run's own last write (khstate.HistoryWrite, the one that adds the run to the
history): no API request of its own. What happens between two such writes waits in memory, per state
object, until the next one carries it: runs that were skipped (not judged) and the time a check was
paused. A pending item is dropped only once a write that carried it succeeded; a new leader starts with
none pending (the state object is the one source).

Memo. Parsing a full rollup costs milliseconds; a state object is written by this process and read back
unchanged from the watch. `RollupMemo` keeps, per state object, the last stored text and what it parsed
to (and its Packed encoding), so a write after a write only encodes the newest hour again.

Not here: the arithmetic (rollups.py), the bytes (rollcodec.py), the readers (web/uptime.py).
"""
from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kuberhealthy.records import rollcodec, rollups
from kuberhealthy.records.rollups import Rollup

FIELD = "rollups"  # the key in a khstate's spec and a HealthCheck's status
MEMO_LIMIT = 20_000  # state objects remembered; past it the memo starts over (a parse each, once)
PENDING_LIMIT = 1_000  # skipped runs kept per state object between two writes


def state_key(plural: str, namespace: str, name: str) -> str:
    """The memo's and the book's key of a state object: its resource's plural (khstates, healthchecks)
    and its namespace and name."""
    return f"{plural}/{namespace}/{name}"


def text_of(raw: Any) -> str | None:
    """The packed hours of a stored value, None when it holds none of our version."""
    if isinstance(raw, Mapping) and raw.get("v") == rollups.VERSION and isinstance(raw.get("hours"), str):
        return str(raw["hours"])
    return None


class RollupMemo:
    """Per state object (a key of the caller's choosing): the last stored text and its parse."""

    def __init__(self, limit: int = MEMO_LIMIT) -> None:
        self._lock = threading.Lock()
        self._limit = limit
        self._by_key: dict[str, tuple[str, rollcodec.Packed]] = {}
        self.parses = 0  # values parsed (the rest came from the memo)

    def packed(self, key: str, raw: Any) -> tuple[rollcodec.Packed | None, Rollup, str | None]:
        """The stored value's rollup, its Packed when known, and a warning when it could not be read."""
        text = text_of(raw)
        if text is not None:
            with self._lock:
                hit = self._by_key.get(key)
            if hit is not None and hit[0] == text:
                return hit[1], hit[1].rollup, None
        rollup, warning = rollcodec.parse(raw)
        self.parses += raw is not None
        if text is not None and warning is None:
            packed = rollcodec.Packed(rollup, b"", 0)  # no encoding known: the next pack() encodes all
            self.remember(key, text, packed)
            return None, rollup, None
        return None, rollup, warning

    def rollup(self, key: str, raw: Any) -> Rollup:
        return self.packed(key, raw)[1]

    def remember(self, key: str, text: str, packed: rollcodec.Packed) -> None:
        with self._lock:
            if len(self._by_key) >= self._limit and key not in self._by_key:
                self._by_key.clear()
            self._by_key[key] = (text, packed)

    def forget(self, key: str) -> None:
        with self._lock:
            self._by_key.pop(key, None)


@dataclass(frozen=True)
class Pending:
    """What waits for a state object's next run write: skipped runs (unix seconds) and paused spans."""

    skipped: tuple[float, ...] = ()
    paused: tuple[tuple[float, float], ...] = ()


@dataclass
class RollupWrite:
    """One run's part of its write: what was pending when it began, and (set by apply(), the last call
    wins: a write may be tried again) a warning when the stored value could not be read."""

    book: RollupBook
    key: str
    now: float  # unix seconds: the run's end
    interval: float | None  # the check's runInterval (seconds), None for a check that runs once
    pending: Pending = field(default_factory=Pending)
    warning: str | None = None

    def apply(self, spec: dict[str, Any], outcome: str | None, duration: float | None) -> None:
        """Put the rollup after this run (rollups.OK or FAILED; None: the run adds nothing, only what was
        pending) into `spec` (a khstate spec) in place."""
        self.warning = self.book.apply(spec, self, outcome, duration)

    def done(self) -> None:
        """The write that carried this succeeded."""
        self.book.carried(self.key, self.pending)


class RollupBook:
    """The process's rollup writer: the memo and what is pending per state object."""

    def __init__(self, memo: RollupMemo | None = None) -> None:
        self.memo = memo or RollupMemo()
        self._lock = threading.Lock()
        self._pending: dict[str, Pending] = {}

    def skipped(self, key: str, now: float) -> None:
        """A run that was not judged: counted in its hour by the next write."""
        with self._lock:
            p = self._pending.get(key, Pending())
            self._pending[key] = Pending((*p.skipped, now)[-PENDING_LIMIT:], p.paused)

    def paused(self, key: str, start: float, end: float) -> None:
        """The check was paused from `start` to `end` (unix seconds): marked by the next write."""
        if end <= start:
            return
        with self._lock:
            p = self._pending.get(key, Pending())
            self._pending[key] = Pending(p.skipped, (*p.paused, (start, end))[-PENDING_LIMIT:])

    def pending(self, key: str) -> Pending:
        with self._lock:
            return self._pending.get(key, Pending())

    def carried(self, key: str, pending: Pending) -> None:
        """A write that carried `pending` succeeded: those items are done."""
        if not (pending.skipped or pending.paused):
            return
        with self._lock:
            p = self._pending.get(key)
            if p is None:
                return
            left = Pending(tuple(t for t in p.skipped if t not in pending.skipped),
                           tuple(s for s in p.paused if s not in pending.paused))
            if left.skipped or left.paused:
                self._pending[key] = left
            else:
                del self._pending[key]

    def write(self, key: str, now: float, interval: float | None) -> RollupWrite:
        """A run's part of its write (with what is pending now)."""
        return RollupWrite(self, key, now, interval, self.pending(key))

    def apply(self, spec: dict[str, Any], w: RollupWrite, outcome: str | None, duration: float | None) -> str | None:
        """Set spec[FIELD] to the rollup after `w`; the warning when the stored value was nonsense."""
        previous, rollup, warning = self.memo.packed(w.key, spec.get(FIELD))
        for start, end in w.pending.paused:
            rollup = rollups.paused(rollup, start, end)
        for at in w.pending.skipped:
            rollup = rollups.record(rollup, at, rollups.SKIPPED, None, interval=w.interval)
        if outcome is not None:
            rollup = rollups.record(rollup, w.now, outcome, duration, interval=w.interval)
        rollup = rollups.trim(rollup, w.now)
        packed = rollcodec.pack(rollup, previous if previous is not None and previous.data else None)
        value = packed.value()
        spec[FIELD] = value
        self.memo.remember(w.key, value["hours"], packed)
        return warning
