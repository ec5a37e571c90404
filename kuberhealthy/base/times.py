"""RFC 3339 times as Kubernetes and v2 write them: the one parser and the one formatter of the package.

The API server writes metav1.Time as UTC whole seconds (`2026-12-01T10:00:00Z`), and so did v2 for a
khstate's LastRun; the history, run-now and Event timestamps we write take the same form. A Lease's
renewTime is a metav1.MicroTime: the same with microseconds.

Parsing is tolerant, because khstates are hand-edited and the daemon must not crash on one: whatever
`datetime.fromisoformat` reads once `Z`/`z` is taken as `+00:00` (fractions of a second, offsets, a
lower-case `t`), a time without an offset is UTC, and anything else (not a string, empty, unreadable)
is None, never an exception. Surrounding whitespace is not stripped.

Not here: Go's strict time.Time decoding of the v2 status page (web/gojson.py), Go durations
(durations.py), reading any clock but the wall clock's now (callers pass their times in).
"""
from __future__ import annotations

import datetime as dt

UTC = dt.timezone.utc
_WHOLE_SECONDS = "%Y-%m-%dT%H:%M:%SZ"


def parse_datetime(text: object) -> dt.datetime | None:
    """An RFC 3339 timestamp as an aware datetime (UTC when it names no offset); None if unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def parse_time(text: object) -> float | None:
    """Unix seconds of an RFC 3339 timestamp (fractions kept); None if unreadable (see parse_datetime)."""
    when = parse_datetime(text)
    return when.timestamp() if when is not None else None


def format_datetime(when: dt.datetime) -> str:
    """metav1.Time's wire form: UTC, whole seconds (the fraction is cut, not rounded)."""
    return when.astimezone(UTC).strftime(_WHOLE_SECONDS)


def format_time(unix: float) -> str:
    """format_datetime of unix seconds."""
    return format_datetime(dt.datetime.fromtimestamp(int(unix), UTC))


def format_micro_time(when: dt.datetime) -> str:
    """metav1.MicroTime's wire form (a Lease's acquireTime and renewTime): UTC, six fraction digits."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def utcnow() -> dt.datetime:
    return dt.datetime.now(UTC)
