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

Incremental. A run changes the newest hour, or adds one: extend() re-encodes only that hour, from a Tail
(the bytes and the newest two hours), not the 720 before it, and newest_after() decodes only the hours
from where the newest started. When the value would pass the budget it is fitted to HEADROOM bytes under
it, so the next runs' growth does not fit it again at every write.

Not here: the arithmetic of buckets and windows (rollups.py), where the value is kept (uptime.py).
"""
from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass
from typing import Any

from kuberhealthy.records.rollups import (
    _MAX_COUNT,
    BUDGET_BYTES,
    DROPPED,
    HOUR,
    HOURS,
    MAX_INDEX,
    VERSION,
    Hour,
    Rollup,
    _add,
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


def _text(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass(frozen=True)
class Tail:
    """A packed rollup as a writer or reader keeps it between writes: its bytes and only what the next run
    touches (its newest hour and the one before, where the newest hour's bytes start), not its 721 hours.
    A parsed month is ~280 KB of objects; a Tail is its ~6 KB of bytes."""

    data: bytes
    last_at: int = 0  # where the newest hour's bytes start (the bytes before it encode all older hours)
    first: int = 0  # the oldest hour
    last: Hour | None = None  # None: no hours
    prev: Hour | None = None

    def value(self) -> dict[str, Any]:
        return {"v": VERSION, "hours": _text(self.data)}


def _tail(hours: tuple[Hour, ...]) -> Tail:
    if not hours:
        return Tail(b"")
    head = bytearray()
    _varint(hours[0].hour, head)
    for k, h in enumerate(hours[:-1]):
        head += _encode_hour(h, hours[k - 1] if k else None)
    prev = hours[-2] if len(hours) > 1 else None
    return Tail(bytes(head) + _encode_hour(hours[-1], prev), len(head), hours[0].hour, hours[-1], prev)


def pack(rollup: Rollup) -> Tail:
    """`rollup` encoded within the budget: fitted HEADROOM bytes under it when it is over, so the runs
    that follow grow it for a while without being fitted again."""
    hours = rollup.hours
    tail = _tail(hours)
    if len(tail.data) > _raw_limit(BUDGET_BYTES) or (hours and hours[-1].hour - hours[0].hour >= HOURS):
        tail = _tail(fit(rollup, BUDGET_BYTES - HEADROOM).hours)
    return tail


def extend(tail: Tail, now: float, outcome: str, duration: float | None, interval: float | None) -> Tail | None:
    """The Tail after rollups.record(..., now, outcome, duration, interval=interval) of its rollup, when
    that only changes its newest hour or adds hours after it within the kept 30 days and the budget (the
    common case: a run in the current hour, or the first run of a new one). None otherwise: then decode,
    record and pack the whole rollup."""
    last = tail.last
    if last is None or not math.isfinite(now):
        return None
    hour = int(now // HOUR)
    if hour == last.hour:
        h = _add(last, outcome, duration)
        data = tail.data[:tail.last_at] + _encode_hour(h, tail.prev)
        return Tail(data, tail.last_at, tail.first, h, tail.prev) if len(data) <= _raw_limit(BUDGET_BYTES) else None
    if hour < last.hour or hour - tail.first >= HOURS:
        return None
    added: list[Hour] = []
    if interval is not None and (hour - last.hour - 1) * HOUR < 2 * interval:
        added = [Hour(k) for k in range(last.hour + 1, hour)]  # nothing was due in them: spanned
    added.append(_add(Hour(hour), outcome, duration))
    out, prev, last_at = bytearray(tail.data), last, 0
    for h in added:
        last_at = len(out)
        out += _encode_hour(h, prev)
        prev = h
    if len(out) > _raw_limit(BUDGET_BYTES):
        return None
    return Tail(bytes(out), last_at, tail.first, added[-1], added[-2] if len(added) > 1 else last)


class _Nonsense(ValueError):
    pass


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def varint(self, limit: int = _MAX_COUNT) -> int:
        n, self.pos = _long_varint(self.data, self.pos, limit)
        return n


_new_hour = object.__new__


def _long_varint(data: bytes, pos: int, limit: int) -> tuple[int, int]:
    """The varint at `pos` (at most `limit`) and the position after it."""
    n = shift = 0
    end = len(data)
    while pos < end:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if n > limit or shift > 28:
            raise _Nonsense("a number out of range")
        if b < 0x80:
            return n, pos
        shift += 7
    raise _Nonsense("truncated")


def _decode_run(r: _Reader, hour: int, first: int, previous: Hour | None) -> tuple[list[Hour], int]:
    """The hours from r.pos to the end, the one before them being `previous` (None: they are the first) at
    `hour`; and where the last of them starts. A value of one byte (most) is read inline: a month is
    some 5,000 of them."""
    hours: list[Hour] = []
    data, pos = r.data, r.pos
    end, last_at = len(data), pos
    try:
        while pos < end:
            last_at = pos
            b = data[pos]
            delta, pos = (b, pos + 1) if b < 0x80 else _long_varint(data, pos, HOURS)
            if (delta == 0) != (previous is None):
                raise _Nonsense("hours out of order")
            hour += delta
            if hour - first >= HOURS:
                raise _Nonsense("more than 30 days of hours")
            flags = data[pos]
            pos += 1
            level = flags >> 4 & 7
            if level > DROPPED or (flags & 0x80 and level == DROPPED):
                raise _Nonsense("an unknown histogram level")
            ok = failed = skipped = 0
            if flags & 1:
                b = data[pos]
                ok, pos = (b, pos + 1) if b < 0x80 else _long_varint(data, pos, _MAX_COUNT)
            if flags & 2:
                b = data[pos]
                failed, pos = (b, pos + 1) if b < 0x80 else _long_varint(data, pos, _MAX_COUNT)
            if flags & 4:
                b = data[pos]
                skipped, pos = (b, pos + 1) if b < 0x80 else _long_varint(data, pos, _MAX_COUNT)
            if (ok == 0 and flags & 1) or (failed == 0 and flags & 2) or (skipped == 0 and flags & 4):
                raise _Nonsense("a zero count flagged")
            bins: list[tuple[int, int]] = []
            if flags & 0x80:
                top = MAX_INDEX >> level
                n, pos = _long_varint(data, pos, 2 * top + 3)
                z, pos = _long_varint(data, pos, 2 * top + 1)
                n, implied = n // 2, n % 2
                i = _first_bin(previous, level) + (z // 2 if z % 2 == 0 else -(z + 1) // 2) - 1
                if not -1 <= i < top:
                    raise _Nonsense("a histogram out of range")
                counted = 0
                for k in range(n):
                    b = data[pos]
                    pair, pos = (b, pos + 1) if b < 0x80 else _long_varint(data, pos, _MAX_COUNT)
                    i += pair // 16 + 1
                    count = pair % 16
                    if count == 15:
                        b = data[pos]
                        more, pos = (b, pos + 1) if b < 0x80 else _long_varint(data, pos, _MAX_COUNT)
                        count += more
                    if implied and k == n - 1 and count == 0:
                        count = ok + failed - counted
                    if i > top or count <= 0 or count > _MAX_COUNT:
                        raise _Nonsense("a histogram out of range")
                    bins.append((i, count))
                    counted += count
                if not bins:
                    raise _Nonsense("an empty histogram flagged")
            previous = _new_hour(Hour)  # Hour(...) without a frozen dataclass's per-field setattr: 2 µs an hour
            previous.__dict__.update(hour=hour, ok=ok, failed=failed, skipped=skipped, paused=bool(flags & 8),
                                     level=level, bins=tuple(bins))
            hours.append(previous)
    except IndexError:
        raise _Nonsense("truncated") from None
    r.pos = pos
    return hours, last_at


def _decode(data: bytes) -> tuple[tuple[Hour, ...], int]:
    """Every hour of `data`, and where the newest one starts."""
    if not data:
        return (), 0
    r = _Reader(data)
    hour = r.varint()
    hours, last_at = _decode_run(r, hour, hour, None)
    return tuple(hours), last_at


def tail_of(hours: tuple[Hour, ...], data: bytes, last_at: int) -> Tail:
    if not hours:
        return Tail(data)
    return Tail(data, last_at, hours[0].hour, hours[-1], hours[-2] if len(hours) > 1 else None)


def newest_after(data: bytes, tail: Tail) -> list[Hour] | None:
    """The hours `data` holds from where `tail`'s newest hour started, when everything before that is
    `tail`'s (the newest hour changed, or hours were added after it); None when not (decode it all)."""
    if tail.last is None or len(data) < tail.last_at or data[:tail.last_at] != tail.data[:tail.last_at]:
        return None
    found = newest_from(data, tail.last_at, tail.first, tail.prev, tail.last.hour)
    return found[0] if found is not None else None


def newest_from(data: bytes, at: int, first: int, prev: Hour | None, hour: int) -> tuple[list[Hour], int] | None:
    """The hours `data` holds from byte `at` on, where an hour `hour` starts after `prev` (the caller
    knows the bytes before `at` are the ones it decoded), and where the last of them starts; None when
    they do not read so."""
    r = _Reader(data)
    r.pos = at
    try:
        hours, last_at = _decode_run(r, prev.hour if prev is not None else 0, first, prev)
    except _Nonsense:
        return None
    return (hours, last_at) if hours and hours[0].hour == hour else None


def _bytes(raw: Any) -> bytes:
    """The packed bytes of a stored value; _Nonsense saying why not."""
    if not isinstance(raw, dict):
        raise _Nonsense(f"a {type(raw).__name__}, not an object")
    version, text = raw.get("v"), raw.get("hours")
    if version != VERSION or isinstance(version, bool):
        raise _Nonsense(f"version {version!r}, this daemon reads {VERSION}")
    if not isinstance(text, str) or len(text) > _MAX_INPUT:
        raise _Nonsense(f"hours is not a string of at most {_MAX_INPUT} characters")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise _Nonsense("hours is not base64") from None


def _unreadable(e: _Nonsense) -> str:
    return f"the stored uptime rollup could not be read ({e}); it starts afresh"


def data_of(raw: Any) -> bytes | None:
    """The packed bytes of a stored value (None: it holds none this version reads). Decoding base64 is
    cheap: compare these, not the text, with what was kept."""
    try:
        return _bytes(raw)
    except _Nonsense:
        return None


def parse(raw: Any) -> tuple[Rollup, str | None]:
    """The rollup a state object holds (None: none yet) and a warning for an Event when what it holds
    cannot be read (then the rollup is empty: it starts afresh). Never raises."""
    rollup, _, warning = parse_tail(raw)
    return rollup, warning


def parse_tail(raw: Any) -> tuple[Rollup, Tail, str | None]:
    """parse(), and the value's Tail."""
    if raw is None:
        return Rollup(), Tail(b""), None
    try:
        data = _bytes(raw)
        hours, last_at = _decode(data)
    except _Nonsense as e:
        return Rollup(), Tail(b""), _unreadable(e)
    return Rollup(hours), tail_of(hours, data, last_at), None
