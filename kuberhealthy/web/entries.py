"""What the JSON API (`/api/checks`) and the dashboard say about each check, from the caches.

One entry per khcheck, khjob and HealthCheck, told apart by `kind` (check | job | healthcheck; a check
and a job of the same name share their khstate, as in v2; a HealthCheck's state is its status, read in
the khstate shape: records/hcstate.py), with the fields of docs/interface.md#json-api: the last result
(`state` ok | failing | never-run), the spec's interval and timeout (a HealthCheck's defaults are
config healthCheckDefaults'), durations in seconds, RFC3339 times, the counters and history kept in the
state (history.py), and the run in flight. A HealthCheck's entry says `singleRunOnly`; one that runs
once has no interval and no next run, as a job.

Every replica answers from its own watch caches; no request calls the API. The run in flight is
read from the state's claim (khstate.RunClaim: the run's pod) and the pod cache, so a standby knows
it as well as the leader: `currentRun` names its phase, pod and start, never its uuid (a live uuid
lets a stranger report: docs/interface.md#report-authenticity). `nextRun` is LastRun + runInterval (the leader's
schedule follows it). A paused check (records/pause.py) shows `paused: {until, reason}` (null when not
paused, and for jobs) and its `nextRun` is the pause's end, when it runs at once.

Beside each entry (not in its JSON) go the key the check is shown under (web/shown.py: `<ns>/<name>`,
`<ns>/hc:<name>` for a HealthCheck beside a same-named khcheck), whether it is shown at all (a migrated
khcheck is not: its HealthCheck is), and the check's labels of the `kuberhealthy.io/` prefix, which
/metrics turns into metric labels (web/status/metrics.py).

Each entry also says `windows`: uptime and coverage over 1h, 24h, 7d and 30d, and duration percentiles
over 24h and 7d, from the check's rollup in its state (web/uptime.py; every window null and uncovered
without one).

ViewCache keeps each entry and its JSON bytes, rebuilt only for the objects that changed (khcheck,
khjob, khstate, HealthCheck or a checker pod of that name): a page of 1,000 checks with full histories
is not re-serialised per request; an entry whose pause ends is rebuilt by the first read after its end.
Windows end at "now", so they move while nothing is written: an entry whose state holds a rollup has its
windows taken again by the first read FRESH seconds after they were (only the windows: the rest of its
JSON is kept and the new windows spliced in; the entries built together at start are spread over the
second half of that time, so no one read takes them all again at once).
What it does not do: decide anything, or serve HTTP (web/api.py).
"""
from __future__ import annotations

import dataclasses
import heapq
import json
import threading
import time
import zlib
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kuberhealthy.base.durations import parse_duration
from kuberhealthy.base.times import format_time, parse_time
from kuberhealthy.kube import Cache, Obj, key_of
from kuberhealthy.records import pause, rollups
from kuberhealthy.records.checkpod import pod_check_index
from kuberhealthy.records.checkspec import DEFAULT_RUN_INTERVAL, DEFAULT_TIMEOUT, HC_PREFIX
from kuberhealthy.records.history import entries, stats
from kuberhealthy.records.khstate import RunClaim, Spec
from kuberhealthy.records.uptime import text_of
from kuberhealthy.web.shown import Shown, single_run_only
from kuberhealthy.web.uptime import FRESH, Uptime, Windows, state_key, stored

CHECK = "check"
JOB = "job"
HEALTHCHECK = "healthcheck"
KINDS = (CHECK, JOB, HEALTHCHECK)  # the entries' kinds, as `?kind=` names them
OK, FAILING, NEVER_RUN = "ok", "failing", "never-run"
LIVE_PHASES = ("Pending", "Running")
LABEL_PREFIX = "kuberhealthy.io/"  # a check's labels under this prefix are kept beside its entry

View = dict[str, Any]
NO_WINDOWS: Windows = rollups.windows(rollups.empty(), 0.0)  # every window null, none of it covered
Defaults = tuple[float, float]  # (runInterval, timeout) in seconds, where a spec leaves them unset


def _seconds(value: object, default: float | None) -> float | None:
    if value is None or value == "":
        return default
    try:
        return parse_duration(str(value))
    except ValueError:
        return default


def _rv(obj: Obj | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")


def current_run(state: Obj | None, pods: Cache) -> View | None:
    """The run in flight (from the claim and the pod cache), or None."""
    claim = RunClaim.of(state)
    if not claim.uuid or claim.finished or not claim.pod or state is None:
        return None
    meta = state.get("metadata") or {}
    pod = pods.get(str(meta.get("namespace") or ""), claim.pod)
    if pod is None:  # claimed, its pod not created (yet, or never: a leader that died in between)
        return None
    phase = str((pod.get("status") or {}).get("phase") or "Pending")
    if phase not in LIVE_PHASES:
        return None
    return {"phase": phase, "pod": claim.pod,
            "started": (pod.get("metadata") or {}).get("creationTimestamp")}


def view(kind: str, obj: Obj, state: Obj | None, pods: Cache, now: float, expose_logs: bool,
         defaults: Defaults = (DEFAULT_RUN_INTERVAL, DEFAULT_TIMEOUT)) -> View:
    """One entry of the JSON API. `defaults` fill a spec's unset runInterval and timeout."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    sspec = (state or {}).get("spec") or {}
    result = Spec.of(state or {})
    once = kind == JOB or (kind == HEALTHCHECK and single_run_only(obj))
    # A HealthCheck whose status v3 wrote (or whose CRD prunes our run binding) names no pod: its time says it ran.
    never = state is None or not result.last_run or (not result.authoritative_pod and kind != HEALTHCHECK)
    interval = _seconds(spec.get("runInterval"), defaults[0]) if not once else None
    last_run = result.last_run if not never else None
    last_unix = parse_time(last_run) if last_run else None
    paused = pause.active(obj, now) if kind != JOB else None
    next_run = (format_time(last_unix + interval) if last_unix is not None and interval else None)
    if paused is not None:
        next_run = format_time(paused.until)
    history = entries(sspec, expose_logs)
    figures = stats(sspec, now, history)
    out: View = {
        "namespace": str(meta.get("namespace") or ""),
        "name": str(meta.get("name") or ""),
        "kind": kind,
        "state": NEVER_RUN if never else (OK if result.ok else FAILING),
        "interval": interval,
        "timeout": _seconds(spec.get("timeout"), defaults[1]),
        "runDuration": _seconds(result.run_duration, None) if not never else None,
        "durationP50": figures.duration_p50,
        "durationP95": figures.duration_p95,
        "lastRun": last_run,
        "nextRun": next_run,
        "errors": list(result.errors) if not never else [],
        "consecutiveFailures": figures.consecutive_failures,
        "successCount": figures.success_count,
        "failureCount": figures.failure_count,
        "lastOK": figures.last_ok,
        "lastFailure": figures.last_failure,
        "uptime": figures.uptime,
        "uptime24h": figures.uptime_24h,
        "node": result.node if not never else "",
        "currentRun": current_run(state, pods),
        "history": history,
        "paused": paused.view() if paused is not None else None,
    }
    if kind == JOB:
        out["phase"] = str(spec.get("phase") or "")
    if kind == HEALTHCHECK:
        out["singleRunOnly"] = once
    return out


def sort_key(v: View) -> tuple[str, str, str]:
    return (v["namespace"], v["name"], v["kind"])


def runs_once(v: Mapping[str, Any]) -> bool:
    """The entry is of a check that runs once (a khjob, a singleRunOnly HealthCheck): shown as a job."""
    return v.get("kind") == JOB or v.get("singleRunOnly") is True


def prefixed_labels(obj: Obj) -> dict[str, str]:
    """The object's labels under LABEL_PREFIX (metrics and status pages read these; no other label is kept)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items() if str(k).startswith(LABEL_PREFIX)} \
        if isinstance(labels, dict) else {}


Version = tuple[object, ...]  # (object rv, state rv, pods rv digest, expose_logs, paused, key, shown, defaults)


@dataclass
class Built:
    version: Version
    view: View
    body: bytes
    key: str = ""  # what `/` shows the check under and /metrics labels it with (web/shown.py)
    labels: Mapping[str, str] = field(default_factory=dict)  # prefixed_labels of the check or job
    shown: bool = True  # False: a migrated khcheck (its HealthCheck is shown); never listed
    head: int = 0  # body[:head] is the entry's JSON up to its windows (`,"windows":{...}}` follows)
    moving: bool = False  # its windows move with time (its state holds a rollup)


def with_windows(view: View, windows: Windows) -> tuple[View, bytes, int]:
    """The entry with these windows, its JSON, and where in it the windows start."""
    base = json.dumps(view, separators=(",", ":")).encode()
    head = len(base) - 1
    return ({**view, "windows": windows},
            base[:head] + b',"windows":' + json.dumps(windows, separators=(",", ":")).encode() + b"}", head)


Stale = tuple[float, int, str, str, Built]  # when an entry's windows are due, a tie-breaker, kind, key, the entry


@dataclass(frozen=True)
class HealthCheckCaches:
    """What the HealthCheck entries are built from: the HealthChecks, their states in the khstate shape
    (records/kinds.py: Kind.states), and the defaults of an unset runInterval and timeout."""

    checks: Cache
    states: Cache
    defaults: Callable[[], Defaults] = lambda: (600.0, 30.0)


class ViewCache:
    """Entries and their JSON, rebuilt per object only after one of its caches changed."""

    # The daemon's four caches, then options by keyword (callers name each: none travel together)
    def __init__(self, khchecks: Cache, khjobs: Cache, khstates: Cache, pods: Cache,  # noqa: PLR0913
                 expose_logs: Callable[[], bool], *, wall: Callable[[], float] = time.time,
                 healthchecks: HealthCheckCaches | None = None, uptime: Uptime | None = None) -> None:
        self._khchecks, self._khjobs, self._khstates, self._pods = khchecks, khjobs, khstates, pods
        self._hc = healthchecks
        self._uptime = uptime
        self._shown = Shown(khchecks, khjobs, healthchecks.checks if healthchecks is not None else None)
        self._expose = expose_logs
        self._wall = wall
        self._lock = threading.Lock()
        self._dirty: set[str] = set()  # "<ns>/<name>" whose entries (of every kind) must be rebuilt
        self._all_dirty = True
        self._built: dict[tuple[str, str], Built] = {}  # (kind, "<ns>/<name>") -> entry
        self._pause_ends: dict[str, float] = {}  # "<ns>/<name>" -> when the pause its built entry shows ends
        self._stale: list[Stale] = []  # heap: (when, sequence, kind, "<ns>/<name>", the Built then current)
        self._seq = 0  # the heap's tie-breaker
        self.rebuilt = 0  # entries rebuilt so far (for tests and figures)
        self.rewindowed = 0  # entries whose windows alone were taken again (for tests and figures)

    def attach(self) -> ViewCache:
        for cache in (self._khchecks, self._khjobs, self._khstates):
            cache.add_listener(self._changed)
        if self._hc is not None:
            self._hc.checks.add_listener(self._changed)
        self._pods.add_listener(self._pod_changed)
        return self

    def _changed(self, _etype: str, obj: Obj, _prev: Obj | None) -> None:
        with self._lock:
            self._dirty.add(key_of(obj))

    def _pod_changed(self, _etype: str, obj: Obj, _prev: Obj | None) -> None:
        for ident in pod_check_index(obj):
            namespace, _, name = ident.partition("/")
            with self._lock:
                self._dirty.add(f"{namespace}/{name.removeprefix(HC_PREFIX)}")

    def entries(self, namespaces: Iterable[str] | None = None, kinds: Collection[str] | None = None) -> list[Built]:
        """Every shown entry (optionally of these namespaces, of these kinds), sorted by namespace, name, kind."""
        self._refresh()
        wanted = set(namespaces) if namespaces is not None else None
        with self._lock:
            built = [b for b in self._built.values() if b.shown]
        if wanted is not None:
            built = [b for b in built if b.view["namespace"] in wanted]
        if kinds is not None:
            built = [b for b in built if b.view["kind"] in kinds]
        return sorted(built, key=lambda b: sort_key(b.view))

    def one(self, namespace: str, name: str, kinds: Collection[str] | None = None) -> list[Built]:
        """The shown entries of this name, of every kind or of these ([] when none)."""
        self._refresh()
        key = f"{namespace}/{name}"
        with self._lock:
            return [b for (kind, k), b in sorted(self._built.items())
                    if k == key and b.shown and (kinds is None or kind in kinds)]

    def _sources(self) -> tuple[tuple[str, Cache], ...]:
        sources = [(CHECK, self._khchecks), (JOB, self._khjobs)]
        if self._hc is not None:
            sources.append((HEALTHCHECK, self._hc.checks))
        return tuple(sources)

    def _refresh(self) -> None:
        now = self._wall()
        with self._lock:
            all_dirty, dirty = self._all_dirty, self._dirty
            self._all_dirty, self._dirty = False, set()
            ended = {key for key, until in self._pause_ends.items() if until <= now}
            dirty |= ended
            for key in ended:
                del self._pause_ends[key]
            due = self._due(now) if not all_dirty else []
        sources = self._sources()
        objects: dict[tuple[str, str], Obj] = {}
        for kind, cache in sources:
            if all_dirty:
                objects.update({(kind, key_of(o)): o for o in cache.list()})
                continue
            for key in dirty:
                ns, _, name = key.partition("/")
                obj = cache.get(ns, name)
                if obj is not None:
                    objects[(kind, key)] = obj
        expose = self._expose()
        fresh: dict[tuple[str, str], Built] = {}
        for (kind, key), obj in objects.items():
            built = self._build(kind, key, obj, now, expose, all_dirty)
            if built is not None:
                fresh[(kind, key)] = built
        # Windows taken again (entries rebuilt above have theirs already)
        moved = [(kind, key, old, self._rewindow(kind, key, old)) for kind, key, old in due if (kind, key) not in fresh]
        gone: set[tuple[str, str]] = set()
        if not all_dirty:
            for key in dirty:
                gone |= {(kind, key) for kind, _ in sources if (kind, key) not in objects}
        taken = self._wall()  # after every window above was taken: web/uptime.py's FRESH has run from before
        with self._lock:
            if all_dirty:
                self._built, self._stale = fresh, []
            else:
                for k in gone:
                    self._built.pop(k, None)
                self._built.update(fresh)
            for (kind, key), built in fresh.items():
                self._arm(kind, key, built, taken + (FRESH * (1 - _spread(kind, key) / 2) if all_dirty else FRESH))
            for kind, key, old, new in moved:
                if self._built.get((kind, key)) is old:
                    self._built[(kind, key)] = new
                    self._arm(kind, key, new, taken + FRESH)
                    self.rewindowed += new is not old
            self.rebuilt += len(fresh)

    def _due(self, now: float) -> list[tuple[str, str, Built]]:
        """The built entries whose windows are due to be taken again (under the lock)."""
        due: list[tuple[str, str, Built]] = []
        while self._stale and self._stale[0][0] <= now:
            _when, _seq, kind, key, built = heapq.heappop(self._stale)
            if self._built.get((kind, key)) is built:
                due.append((kind, key, built))
        return due

    def _arm(self, kind: str, key: str, built: Built, when: float) -> None:
        """Take the entry's windows again at the first read from `when` on (under the lock)."""
        if built.moving:
            self._seq += 1
            heapq.heappush(self._stale, (when, self._seq, kind, key, built))

    def _state(self, kind: str, key: str) -> Obj | None:
        ns, _, name = key.partition("/")
        if kind == HEALTHCHECK:
            return self._hc.states.get(ns, name) if self._hc is not None else None
        return self._khstates.get(ns, name)

    def _windows(self, kind: str, key: str, state: Obj | None) -> tuple[Windows, bool]:
        """The entry's windows, and whether they move with time (its state holds a rollup)."""
        if self._uptime is None or text_of(stored(state)) is None:
            return NO_WINDOWS, False
        ns, _, name = key.partition("/")
        return self._uptime.windows_of(state_key(kind, ns, name), state), True

    def _rewindow(self, kind: str, key: str, old: Built) -> Built:
        """The built entry with its windows taken again: the rest of its JSON is kept."""
        windows, moving = self._windows(kind, key, self._state(kind, key))
        if windows is old.view.get("windows"):  # still the same (web/uptime.py keeps them FRESH seconds)
            return old
        view = {**old.view, "windows": windows}
        body = old.body[:old.head] + b',"windows":' + json.dumps(windows, separators=(",", ":")).encode() + b"}"
        return dataclasses.replace(old, view=view, body=body, moving=moving)

    def _build(self, kind: str, key: str, obj: Obj, now: float, expose: bool, force: bool) -> Built | None:
        """The entry of `obj`, or None when the built one is still current."""
        ns, _, name = key.partition("/")
        defaults: Defaults = (DEFAULT_RUN_INTERVAL, DEFAULT_TIMEOUT)
        state = self._state(kind, key)
        if kind == HEALTHCHECK and self._hc is not None:
            pods = self._pods.by_index("check", f"{ns}/{HC_PREFIX}{name}")
            defaults = self._hc.defaults()
            shown_key, shown = self._shown.healthcheck_key(obj), True
        else:
            pods = self._pods.by_index("check", key)
            shown_key, shown = key, not (kind == CHECK and self._shown.khcheck_hidden(obj))
        pods_rv = ",".join(sorted(_rv(p) for p in pods))
        paused = pause.active(obj, now) if kind != JOB else None
        version: Version = (_rv(obj), _rv(state), pods_rv, expose, paused is not None, shown_key, shown, defaults)
        with self._lock:
            old = self._built.get((kind, key))
        if old is not None and old.version == version and not force:
            return None
        v = view(kind, obj, state, self._pods, now, expose, defaults)
        if paused is not None:
            with self._lock:
                self._pause_ends[key] = paused.until
        windows, moving = self._windows(kind, key, state)
        v, body, head = with_windows(v, windows)
        return Built(version, v, body, shown_key, prefixed_labels(obj), shown, head, moving)


def _spread(kind: str, key: str) -> float:
    """A fraction in [0, 1) fixed per entry: spreads the windows of entries built together over time."""
    return zlib.crc32(f"{kind}/{key}".encode()) / 2**32
