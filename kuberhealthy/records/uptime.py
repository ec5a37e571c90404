"""Where a check's uptime rollup lives and how a run's write carries it.

The rollup (rollups.py, packed by rollcodec.py) is kept in the check's state object under FIELD: the
khstate's `spec.rollups`, a HealthCheck's `status.rollups` (hcstate.py maps one onto the other). It is
written only inside the run's own last write (khstate.HistoryWrite, the one that adds the run to the
history): no API request of its own. What happens between two such writes waits in memory, per state
object, until the next one carries it: runs that were skipped (not judged) and the time a check was
paused. A pending item is dropped only once a write that carried it succeeded; a new leader starts with
none pending (the state object is the one source).

Memo. Decoding a month of hours costs milliseconds and its objects ~280 KB; a state object is written by
this process and read back unchanged. `RollupMemo` keeps, per state object, the Tail of the value it last
wrote (its ~6 KB of bytes and its newest two hours: rollcodec.Tail): a write after a write of the same
value re-encodes only the newest hour, and the whole value is decoded only when someone else wrote it,
a pause is marked, a new hour pushes the oldest out of the 30 days, or the budget is reached.

Not here: the arithmetic (rollups.py), the bytes (rollcodec.py), the readers (web/uptime.py).
"""
from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kuberhealthy.records import rollcodec, rollups

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
    """Per state object (a key of the caller's choosing): the Tail of the value last written or read."""

    def __init__(self, limit: int = MEMO_LIMIT) -> None:
        self._lock = threading.Lock()
        self._limit = limit
        self._by_key: dict[str, rollcodec.Tail] = {}
        self.parses = 0  # stored values decoded whole (the rest were extended from their Tail)

    def tail(self, key: str, raw: Any) -> rollcodec.Tail | None:
        """The kept Tail when the stored value is the one it was kept for."""
        with self._lock:
            hit = self._by_key.get(key)
        if hit is None or rollcodec.data_of(raw) != hit.data:
            return None
        return hit

    def remember(self, key: str, tail: rollcodec.Tail) -> None:
        with self._lock:
            if len(self._by_key) >= self._limit and key not in self._by_key:
                self._by_key.clear()
            self._by_key[key] = tail

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
        self._whole = threading.Lock()  # whole values are decoded one at a time (their objects are large)

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
        raw = spec.get(FIELD)
        kept = self.memo.tail(w.key, raw)
        tail = self._extended(kept, w, outcome, duration) if kept is not None else None
        warning = None
        if tail is None:  # decode it all: a value another process wrote, a pause, a new month's hour, the budget
            with self._whole:  # one month of objects (~280 KB) at a time: a start's first runs come all at once
                rollup, _, warning = rollcodec.parse_tail(raw)
                self.memo.parses += raw is not None
                for start, end in w.pending.paused:
                    rollup = rollups.paused(rollup, start, end)
                for at in w.pending.skipped:
                    rollup = rollups.record(rollup, at, rollups.SKIPPED, None, interval=w.interval)
                if outcome is not None:
                    rollup = rollups.record(rollup, w.now, outcome, duration, interval=w.interval)
                tail = rollcodec.pack(rollups.trim(rollup, w.now))
                del rollup
        spec[FIELD] = tail.value()
        self.memo.remember(w.key, tail)
        return warning

    @staticmethod
    def _extended(tail: rollcodec.Tail | None, w: RollupWrite, outcome: str | None,
                  duration: float | None) -> rollcodec.Tail | None:
        """The kept Tail after `w`, when only its newest hours change (else None)."""
        if w.pending.paused:
            return None
        for at in w.pending.skipped:
            tail = rollcodec.extend(tail, at, rollups.SKIPPED, None, w.interval) if tail is not None else None
        if outcome is not None and tail is not None:
            tail = rollcodec.extend(tail, w.now, outcome, duration, w.interval)
        if tail is None or tail.last is None or int(w.now // rollups.HOUR) - tail.first >= rollups.HOURS:
            return None  # the whole value must be trimmed
        return tail
