"""v3's `GET /json`: every check (of every kind `/json` lists) in Kuberhealthy v3's summary, as v3's Go
writes it (`json.MarshalIndent(state, "", "  ")` of `{OK, Errors, CheckDetails, CurrentMaster, Metadata}`).

Each CheckDetails value is v3's CheckDetail: the HealthCheck status fields with v3's names, types and
units, then `nextRunUnix`, `podName`, `timeoutSeconds`, `runIntervalSeconds`; Go's `omitempty` leaves
out zero values (`ok` and `currentUUID` are always there), map keys are sorted, strings escaped as
Go escapes them (web/gojson.py). Units: `runDuration` is integer nanoseconds (Go's time.Duration),
times are unix seconds, `timeoutSeconds`/`runIntervalSeconds` whole seconds (truncated, as Go's
int64(d.Seconds())). `currentUUID` is always "": a live run's uuid would let anyone report for it.

Where the values come from: the JSON API's entries (web/entries.py ViewCache), which are rebuilt only
when a check, its state or its pods change. `lastRunUnix` is the start of the run in flight while
one is (with `podName`, its pod; v3 sets the start when a run begins), else the time of the last
result; `nextRunUnix` is our schedule's next run (a pause's end for a paused check), shown only
while no run is in flight, as v3 does. Counters and `lastOKUnix`/`lastFailureUnix` are the kept
statistics; `additionalMetadata` is the entry's when it has one.

Keys: a check's name, as v3's; a name that two checks of the returned set share is keyed
`<namespace>/<name>` instead (v3 would keep only one), and of a same-named pair in one namespace the
kind with a prefix (web/checkkinds.py: `hc:` for HealthChecks) is keyed `<namespace>/<prefix><name>`.

Top level (ours, as `/`): `OK` is false and `Errors` holds the errors (v3 skips empty ones) of every
check whose last result failed and that is not paused; a check that never ran is listed (`ok: false`, as v3's
status says before a first report) but does not count. `CurrentMaster` is the Lease holder;
`Metadata` is `{}`.

Each check's rendered value is kept until its entry is rebuilt, and the unfiltered page until one of
its checks or the master changes; a filtered request joins the kept values. What it does
not do: call the API, or know HTTP (web/v3/routes.py).
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from kuberhealthy.base.times import parse_time
from kuberhealthy.web.checkkinds import CheckKinds
from kuberhealthy.web.entries import FAILING, OK, Built, View, ViewCache
from kuberhealthy.web.gojson import go_json_string, valid_text

Value = bool | int | str | list[str]
INDENT = "  "


def _unix(value: object) -> int:
    """RFC3339 to whole unix seconds; 0 (omitted) when absent or unreadable."""
    when = parse_time(value) if isinstance(value, str) and value else None
    return int(when) if when is not None and when > 0 else 0


def _whole(seconds: object) -> int:
    return int(seconds) if isinstance(seconds, (int, float)) and seconds > 0 else 0


def detail(view: View) -> list[tuple[str, Value]]:
    """One check's CheckDetail fields in v3's order, without those Go's omitempty leaves out."""
    live = view.get("currentRun") or None
    duration = view.get("runDuration")
    fields: list[tuple[str, Value]] = [
        ("ok", view.get("state") == OK),
        ("errors", [valid_text(str(e)) for e in view.get("errors") or []]),
        ("consecutiveFailures", int(view.get("consecutiveFailures") or 0)),
        ("runDuration", round(duration * 1e9) if isinstance(duration, (int, float)) else 0),
        ("namespace", valid_text(str(view.get("namespace") or ""))),
        ("currentUUID", ""),
        ("lastRunUnix", _unix(live.get("started")) if live else _unix(view.get("lastRun"))),
        ("successCount", int(view.get("successCount") or 0)),
        ("failureCount", int(view.get("failureCount") or 0)),
        ("lastOKUnix", _unix(view.get("lastOK"))),
        ("lastFailureUnix", _unix(view.get("lastFailure"))),
        ("additionalMetadata", valid_text(str(view.get("additionalMetadata") or ""))),
        ("nextRunUnix", 0 if live else _unix(view.get("nextRun"))),
        ("podName", valid_text(str(live.get("pod") or "")) if live else ""),
        ("timeoutSeconds", _whole(view.get("timeout"))),
        ("runIntervalSeconds", _whole(view.get("interval"))),
    ]
    return [(k, v) for k, v in fields if k in ("ok", "currentUUID") or v]


def _value(value: Value, depth: int) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return go_json_string(value)
    if not value:
        return "[]"
    inner = INDENT * (depth + 1)
    return "[\n" + ",\n".join(inner + go_json_string(v) for v in value) + "\n" + INDENT * depth + "]"


def render_detail(fields: list[tuple[str, Value]], depth: int = 2) -> str:
    """A CheckDetail as MarshalIndent writes it at `depth` (inside CheckDetails: 2)."""
    inner = INDENT * (depth + 1)
    lines = [f"{inner}{go_json_string(k)}: {_value(v, depth + 1)}" for k, v in fields]
    return "{\n" + ",\n".join(lines) + "\n" + INDENT * depth + "}"


@dataclass(frozen=True)
class Rendered:
    """One check's part of the summary, kept while its entry is unchanged."""

    built: Built  # the entry it was rendered from (compared by identity)
    namespace: str
    name: str
    prefix: str
    failing: bool
    counted_errors: tuple[str, ...]  # its non-blank errors when it counts for the top level, else ()
    body: str  # the CheckDetail, rendered at depth 2


def keys(rendered: Iterable[Rendered]) -> list[tuple[str, Rendered]]:
    """Each check's key: its name, unless another check of the set has that name."""
    items = list(rendered)
    names: dict[str, int] = {}
    pairs: dict[tuple[str, str], int] = {}
    for r in items:
        names[r.name] = names.get(r.name, 0) + 1
        pairs[(r.namespace, r.name)] = pairs.get((r.namespace, r.name), 0) + 1
    out = []
    taken: set[str] = set()
    for r in items:
        if names[r.name] == 1:
            key = r.name
        elif pairs[(r.namespace, r.name)] > 1:
            key = f"{r.namespace}/{r.prefix}{r.name}"
        else:
            key = f"{r.namespace}/{r.name}"
        if key in taken:  # two kinds without a prefix share the name: never two values under one key
            key = f"{r.namespace}/{r.built.view.get('kind')}:{r.name}"
        taken.add(key)
        out.append((valid_text(key), r))
    return out


class Summary:
    """The `/json` bytes, from the JSON API's entries; each check rendered once per change of its entry."""

    def __init__(self, views: ViewCache, kinds: CheckKinds, master: Callable[[], str]) -> None:
        self._views = views
        self._kinds = kinds
        self._master = master
        self._lock = threading.Lock()
        self._memo: dict[tuple[str, str], Rendered] = {}  # (entry kind, "<ns>/<name>") -> its part
        self.rendered = 0  # checks rendered so far (for tests and figures)
        self._page: tuple[tuple[Rendered, ...], str, bytes] | None = None  # the unfiltered page, its parts, master

    def _rendered(self, built: Built) -> Rendered | None:
        view = built.view
        kind = self._kinds.of_entry(str(view.get("kind") or ""))
        if kind is None or not kind.summarized:
            return None
        namespace, name = str(view.get("namespace") or ""), str(view.get("name") or "")
        memo_key = (kind.entry_kind, f"{namespace}/{name}")
        with self._lock:
            old = self._memo.get(memo_key)
        if old is not None and old.built is built:
            return old
        failing = view.get("state") == FAILING
        counted = () if not failing or view.get("paused") else tuple(  # v3 skips only empty ones
            valid_text(str(e)) for e in view.get("errors") or [] if str(e))
        fresh = Rendered(built, namespace, name, kind.prefix, failing and not view.get("paused"), counted,
                         render_detail(detail(view)))
        with self._lock:
            self._memo[memo_key] = fresh
            self.rendered += 1
        return fresh

    def page(self, namespaces: Collection[str] | None = None) -> bytes:
        """The summary of every check (of these namespaces), as v3 writes it (no trailing newline)."""
        built = self._views.entries(namespaces)
        parts = tuple(r for b in built if (r := self._rendered(b)) is not None)
        master = self._master()
        if namespaces is None:
            kept = self._page
            if kept is not None and kept[1] == master and len(kept[0]) == len(parts) and all(
                    a is b for a, b in zip(kept[0], parts, strict=True)):
                return kept[2]
            self._forget(parts)
        body = self._render(parts, master)
        if namespaces is None:
            self._page = (parts, master, body)
        return body

    def _render(self, parts: tuple[Rendered, ...], master: str) -> bytes:
        errors = [e for r in parts for e in r.counted_errors]
        ok = not any(r.failing for r in parts)
        keyed = sorted(keys(parts), key=lambda kr: kr[0].encode("utf-8"))
        details = "{}" if not keyed else "{\n" + ",\n".join(
            f"{INDENT * 2}{go_json_string(k)}: {r.body}" for k, r in keyed) + "\n" + INDENT + "}"
        text = (f'{{\n  "OK": {"true" if ok else "false"},\n  "Errors": {_value(errors, 1)},\n'
                f'  "CheckDetails": {details},\n  "CurrentMaster": {go_json_string(valid_text(master))},\n'
                f'  "Metadata": {{}}\n}}')
        return text.encode("utf-8")

    def _forget(self, current: tuple[Rendered, ...]) -> None:
        """Drop the kept parts of checks that are gone (after an unfiltered page: it saw every check)."""
        alive = {(r.built.view.get("kind"), f"{r.namespace}/{r.name}") for r in current}
        with self._lock:
            if len(self._memo) > len(alive):
                self._memo = {k: v for k, v in self._memo.items() if k in alive}
