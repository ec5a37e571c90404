"""Pause: a khcheck annotation that stops a check's runs until a time, for people on call.

`comcast.github.io/paused-until` (an RFC 3339 time with its offset: `2026-12-02T06:00:00Z`), and
optionally `comcast.github.io/paused-reason`, set with `kubectl annotate`: only by annotation, so
Kubernetes RBAC decides who may silence a check; no HTTP route sets or removes it. Until that time the
check's worker (control/workers.py) creates no pods and its khstate keeps the last result; a run in
flight when the pause begins finishes; when the time passes or the annotation is removed, the check
runs at once. While paused the check is left out of the status page's top-level OK and Errors and of
`kuberhealthy_cluster_state` (web/status/page.py); `/api/checks` shows `paused: {until, reason}`
(web/entries.py) and `kuberhealthy_check_paused` is 1.

A value that is not an RFC 3339 time with an offset is ignored (the check runs as usual); the leader
says so once per value in a log line and a PauseIgnored Warning Event (control/controller.py). A time
already past means not paused. The daemon never writes the annotation (an expired one may stay).
Annotations are not part of CheckSpec, so pausing never restarts a check.

This module holds the names and the value rules; it keeps no state and decides nothing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from kuberhealthy.base.times import format_time, parse_time
from kuberhealthy.kube import Obj

PAUSED_UNTIL = "comcast.github.io/paused-until"
PAUSED_REASON = "comcast.github.io/paused-reason"
REASON_CHARS = 1024  # of the reason shown (an annotation may hold far more)

# RFC 3339's date-time: a full date, a time, an optional fraction and an offset that must be there.
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


@dataclass(frozen=True)
class Pause:
    """A pause as its annotations set it: until when (unix seconds) and why."""

    until: float
    reason: str = ""

    def active(self, now: float) -> bool:
        return now < self.until

    def view(self) -> dict[str, str]:
        """What `/api/checks` shows."""
        return {"until": format_time(self.until), "reason": self.reason}


def _annotations(obj: Obj | None) -> dict[str, object]:
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return annotations if isinstance(annotations, dict) else {}


def value(obj: Obj | None) -> str | None:
    """The paused-until annotation's value, as written; None when there is none."""
    raw = _annotations(obj).get(PAUSED_UNTIL)
    return None if raw is None else str(raw)


def parse_until(text: str) -> float | None:
    """Unix seconds of an RFC 3339 date-time with its offset (whitespace around it allowed); else None."""
    text = text.strip()
    if not _RFC3339.fullmatch(text):
        return None
    return parse_time(text)


def of(obj: Obj | None) -> Pause | None:
    """The pause a khcheck's annotations set, past or not; None when none or unparsable."""
    raw = value(obj)
    until = parse_until(raw) if raw is not None else None
    if until is None:
        return None
    reason = str(_annotations(obj).get(PAUSED_REASON) or "")
    return Pause(until, reason if len(reason) <= REASON_CHARS else reason[:REASON_CHARS - 3] + "...")


def active(obj: Obj | None, now: float) -> Pause | None:
    """The pause in force at `now` (unix seconds), or None."""
    p = of(obj)
    return p if p is not None and p.active(now) else None


def unparsable(obj: Obj | None) -> str | None:
    """The value when the annotation is there but not a time this module reads, else None."""
    raw = value(obj)
    return raw if raw is not None and parse_until(raw) is None else None


def changed(obj: Obj, prev: Obj | None) -> bool:
    """True when a change of a khcheck set, changed or removed either pause annotation."""
    a, b = _annotations(obj), _annotations(prev)
    return any(a.get(k) != b.get(k) for k in (PAUSED_UNTIL, PAUSED_REASON))
