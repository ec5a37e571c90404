"""A check's uptime rollup (rollups.py) as its state object stores it: packed, and within a byte budget.

Encoding. pack() and serialize() give {"v": 1, "hours": "<base64>"}; the bytes are varints (7 bits a byte): the
first bucket's hour, then per bucket: the hours since the previous one (0 for the first), a flag byte
(bit 0-2: OK, failed, skipped follow; bit 3 paused; bits 4-6 level; bit 7 a histogram follows), the
counts flagged, and the histogram: bins, first index, then per bin one varint gap*16 + min(count, 15)
(and count-15 when the count is 15 or more). The number of bins is written doubled, plus one when the
counts add up to OK + failed: then the last count is written as 0. The first index is counted (zigzag)
from the previous bucket's first bin. A 1-minute check's hour takes about 5 bytes plus one per distinct
duration bin.

Budget. Serialized compactly it is at most BUDGET_BYTES (8 KiB) whatever was recorded: when it would
be more, histograms are made coarser, level by level, first in hours older than 7 days, then older than
a day, then in all (oldest hours first each time), then the oldest hours are dropped. What was dropped
stays dropped (the stored object is the rollup; the next writer continues from it).

Incremental. A run changes the newest hour, or adds one: pack() given the previous Packed of the same
rollup re-encodes only that hour, not the 720 before it. When the value would pass the budget it is fitted
to HEADROOM bytes under it, so the next runs' growth does not fit it again at every write.

Not here: the arithmetic of buckets and windows (rollups.py), where the value is kept (uptime.py).
"""
from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from kuberhealthy.records.rollups import (
    _MAX_COUNT,
    BUDGET_BYTES,
    DROPPED,
    HOURS,
    MAX_INDEX,
    VERSION,
    Hour,
    Rollup,
    _coarsen,
    _since,
)

_MAX_INPUT = 4 * BUDGET_BYTES  # base64 characters parse() reads before calling it nonsense
_WRAPPER = len('{"v":1,"hours":""}')
HEADROOM = 512  # bytes under the budget a fitted value is made, room for the next runs
# Degradation order: (minimum age in hours, level), each applied oldest hour first until the value fits.
_LADDER = tuple((age, level) for age in (168, 24, 0) for level in range(1, DROPPED + 1))


def _varint(n: int, out: bytearray) -> None:
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)


def _first_bin(previous: Hour | None, level: int) -> int:
    """Where a histogram's first index is counted from: the previous bucket's first bin, at `level`."""
    if previous is None or not previous.bins or level >= DROPPED:
        return 0
    return (previous.bins[0][0] << previous.level) >> level


def _encode_hour(h: Hour, previous: Hour | None) -> bytes:
    out = bytearray()
    _varint(0 if previous is None else h.hour - previous.hour, out)
    out.append((h.ok > 0) | (h.failed > 0) << 1 | (h.skipped > 0) << 2 | h.paused << 3 | h.level << 4
               | bool(h.bins) << 7)
    for n in (h.ok, h.failed, h.skipped):
        if n:
            _varint(n, out)
    if h.bins:
        implied = sum(c for _, c in h.bins) == h.ok + h.failed  # the last count follows from the others
        _varint(len(h.bins) * 2 + implied, out)
        shift = h.bins[0][0] - _first_bin(previous, h.level)
        _varint(shift * 2 if shift >= 0 else -shift * 2 - 1, out)  # zigzag: small either way
        prev = h.bins[0][0] - 1
        for k, (i, count) in enumerate(h.bins):
            c = 0 if implied and k == len(h.bins) - 1 else count
            _varint((i - prev - 1) * 16 + min(c, 15), out)
            if c >= 15:
                _varint(c - 15, out)
            prev = i
    return bytes(out)


def _encode(hours: tuple[Hour, ...]) -> bytes:
    if not hours:
        return b""
    out = bytearray()
    _varint(hours[0].hour, out)
    for k, h in enumerate(hours):
        out += _encode_hour(h, hours[k - 1] if k else None)
    return bytes(out)


def _raw_limit(budget: int) -> int:
    return 3 * ((budget - _WRAPPER) // 4)  # base64 turns 3 bytes into 4 characters


def fit(rollup: Rollup, budget: int = BUDGET_BYTES) -> Rollup:
    """The rollup made small enough to serialize in `budget` bytes (see the module's Budget)."""
    if not rollup.hours:
        return rollup
    rollup = _since(rollup, rollup.hours[-1].hour - HOURS)
    hours, limit = list(rollup.hours), _raw_limit(budget)
    sizes = [len(_encode_hour(h, hours[k - 1] if k else None)) for k, h in enumerate(hours)]
    total = _varint_len(hours[0].hour) + sum(sizes)
    if total <= limit:
        return rollup
    newest = hours[-1].hour
    for min_age, level in _LADDER:
        for k, h in enumerate(hours):
            if newest - h.hour < min_age:
                break
            if h.level >= level:
                continue
            hours[k] = _coarsen(h, level)
            for j in range(k, min(k + 2, len(hours))):  # the next one counts its first bin from this one
                size = len(_encode_hour(hours[j], hours[j - 1] if j else None))
                total += size - sizes[j]
                sizes[j] = size
            if total <= limit:
                return Rollup(tuple(hours))
    while len(hours) > 1 and total > limit:  # then the oldest hours go, one at a time
        first = len(_encode_hour(hours[1], None))
        total += first - sizes[0] - sizes[1] + _varint_len(hours[1].hour) - _varint_len(hours[0].hour)
        del hours[0], sizes[0]
        sizes[0] = first
    return Rollup(tuple(hours))


def _varint_len(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def serialize(rollup: Rollup) -> dict[str, Any]:
    """The value for the state object: one JSON object, at most BUDGET_BYTES when dumped compactly."""
    return pack(rollup).value()


@dataclass(frozen=True)
class Packed:
    """A rollup with its encoding; `head` is how many bytes of `data` encode all hours but the newest."""

    rollup: Rollup
    data: bytes
    head: int

    def value(self) -> dict[str, Any]:
        return {"v": VERSION, "hours": base64.b64encode(self.data).decode("ascii")}


def _packed(rollup: Rollup) -> Packed:
    hours = rollup.hours
    if not hours:
        return Packed(rollup, b"", 0)
    head = bytearray()
    _varint(hours[0].hour, head)
    for k, h in enumerate(hours[:-1]):
        head += _encode_hour(h, hours[k - 1] if k else None)
    return Packed(rollup, bytes(head) + _encode_hour(hours[-1], hours[-2] if len(hours) > 1 else None), len(head))


def _same(a: tuple[Hour, ...], b: tuple[Hour, ...]) -> bool:
    """The same Hour objects (not equal ones: the same, as record() keeps them), in the same order."""
    return len(a) == len(b) and not [x for x, y in zip(a, b, strict=True) if x is not y]


def pack(rollup: Rollup, previous: Packed | None = None) -> Packed:
    """`rollup` encoded within the budget. With `previous` (the Packed this rollup was made from by
    record()/paused() of its newest hours), the hours both share are not encoded again."""
    hours = rollup.hours
    packed: Packed | None = None
    if previous is not None and hours and previous.rollup.hours:
        old = previous.rollup.hours
        last = _encode_hour(hours[-1], hours[-2] if len(hours) > 1 else None)
        if hours[0].hour == old[0].hour and _same(hours[:-1], old[:-1]):  # the newest hour changed
            packed = Packed(rollup, previous.data[:previous.head] + last, previous.head)
        elif _same(hours[:-1], old):  # an hour was added
            packed = Packed(rollup, previous.data + last, len(previous.data))
    if packed is None:
        packed = _packed(rollup)
    if len(packed.data) > _raw_limit(BUDGET_BYTES) or (hours and hours[-1].hour - hours[0].hour >= HOURS):
        packed = _packed(fit(rollup, BUDGET_BYTES - HEADROOM))
    return packed


class _Nonsense(ValueError):
    pass


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise _Nonsense("truncated")
        self.pos += 1
        return self.data[self.pos - 1]

    def varint(self, limit: int = _MAX_COUNT) -> int:
        data, pos, n, shift = self.data, self.pos, 0, 0
        while pos < len(data):
            b = data[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            if n > limit or shift > 28:
                raise _Nonsense("a number out of range")
            if b < 0x80:
                self.pos = pos
                return n
            shift += 7
        raise _Nonsense("truncated")


def _decode(data: bytes) -> tuple[Hour, ...]:
    if not data:
        return ()
    r = _Reader(data)
    hour = r.varint()
    first, hours = hour, list[Hour]()
    while r.pos < len(data):
        delta = r.varint(HOURS)
        if (delta == 0) != (not hours):
            raise _Nonsense("hours out of order")
        hour += delta
        if hour - first >= HOURS:
            raise _Nonsense("more than 30 days of hours")
        flags = r.byte()
        level = flags >> 4 & 7
        if level > DROPPED or (flags & 0x80 and level == DROPPED):
            raise _Nonsense("an unknown histogram level")
        ok = r.varint() if flags & 1 else 0
        failed = r.varint() if flags & 2 else 0
        skipped = r.varint() if flags & 4 else 0
        if (ok == 0 and flags & 1) or (failed == 0 and flags & 2) or (skipped == 0 and flags & 4):
            raise _Nonsense("a zero count flagged")
        bins: list[tuple[int, int]] = []
        if flags & 0x80:
            top = MAX_INDEX >> level
            n, z = r.varint(2 * top + 3), r.varint(2 * top + 1)
            n, implied = n // 2, n % 2
            i = _first_bin(hours[-1] if hours else None, level) + (z // 2 if z % 2 == 0 else -(z + 1) // 2) - 1
            if not -1 <= i < top:
                raise _Nonsense("a histogram out of range")
            for k in range(n):
                pair = r.varint()
                i += pair // 16 + 1
                count = pair % 16 + (r.varint() if pair % 16 == 15 else 0)
                if implied and k == n - 1 and count == 0:
                    count = ok + failed - sum(c for _, c in bins)
                if i > top or count <= 0 or count > _MAX_COUNT:
                    raise _Nonsense("a histogram out of range")
                bins.append((i, count))
            if not bins:
                raise _Nonsense("an empty histogram flagged")
        hours.append(Hour(hour, ok, failed, skipped, bool(flags & 8), level, tuple(bins)))
    return tuple(hours)


def parse(raw: Any) -> tuple[Rollup, str | None]:
    """The rollup a state object holds (None: none yet) and a warning for an Event when what it holds
    cannot be read (then the rollup is empty: it starts afresh). Never raises."""
    if raw is None:
        return Rollup(), None
    try:
        if not isinstance(raw, dict):
            raise _Nonsense(f"a {type(raw).__name__}, not an object")
        version, text = raw.get("v"), raw.get("hours")
        if version != VERSION or isinstance(version, bool):
            raise _Nonsense(f"version {version!r}, this daemon reads {VERSION}")
        if not isinstance(text, str) or len(text) > _MAX_INPUT:
            raise _Nonsense(f"hours is not a string of at most {_MAX_INPUT} characters")
        try:
            data = base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise _Nonsense("hours is not base64") from None
        return Rollup(_decode(data)), None
    except _Nonsense as e:
        return Rollup(), f"the stored uptime rollup could not be read ({e}); it starts afresh"


