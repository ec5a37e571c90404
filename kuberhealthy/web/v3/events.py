"""v3's `GET /api/events` answer: the Events about one check as Kuberhealthy v3 lists them.

v3 answers a JSON array (Go's json.Encoder: compact, HTML-escaped strings, a newline at the end) of
`{"message", "reason", "type", "lastTimestamp"}`, `lastTimestamp` in unix seconds and left out when
unset. We keep that shape. Ours: the array is oldest first (v3's page sorts it so), at most SHOWN of
the newest, and an Event written through events.k8s.io (no lastTimestamp) is timed by its eventTime,
series or creation instead of showing none.

What it does not do: read the API (the route asks services.read_check_events, one bounded read).
"""
from __future__ import annotations

from collections.abc import Iterable

from kuberhealthy.base.times import parse_time
from kuberhealthy.kube import Obj
from kuberhealthy.web.gojson import go_json_string, valid_text

READ = 1000  # Events read at most for one check (two pages); the recorder folds repeats into one
SHOWN = 100  # the newest of them answered
READ_TIMEOUT = 10.0  # seconds for that read, all pages


def when(event: Obj) -> int:
    """When an Event last happened, in unix seconds (0: unknown)."""
    meta = event.get("metadata") or {}
    series = event.get("series") or {}
    for value in (event.get("lastTimestamp"), series.get("lastObservedTime") if isinstance(series, dict) else None,
                  event.get("eventTime"), event.get("firstTimestamp"), meta.get("creationTimestamp")):
        at = parse_time(value) if isinstance(value, str) and value else None
        if at is not None and at > 0:
            return int(at)
    return 0


def _text(event: Obj, key: str) -> str:
    value = event.get(key)
    return go_json_string(valid_text(value if isinstance(value, str) else ""))


def render(events: Iterable[Obj], shown: int = SHOWN) -> bytes:
    """The answer's bytes: the newest `shown` Events, oldest first."""
    timed = sorted(((when(e), i, e) for i, e in enumerate(events)), key=lambda t: (t[0], t[1]))[-shown:]
    items = []
    for at, _, e in timed:
        item = f'{{"message":{_text(e, "message")},"reason":{_text(e, "reason")},"type":{_text(e, "type")}'
        items.append(item + (f',"lastTimestamp":{at}}}' if at else "}"))
    return ("[" + ",".join(items) + "]\n").encode("utf-8")
