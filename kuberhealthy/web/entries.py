"""What the JSON API (`/api/checks`) and the dashboard say about each check and job, from the caches.

One entry per khcheck and per khjob (a check and a job of the same name share their khstate, as in
v2, and are two entries told apart by `kind`), with the fields of docs/interface.md#json-api: the last result
(`state` ok | failing | never-run), the spec's interval and timeout, durations in seconds, RFC3339
times, the counters and history kept in the khstate (history.py), and the run in flight.

Every replica answers from its own watch caches; no request calls the API. The run in flight is
read from the khstate claim (khstate.RunClaim: the run's pod) and the pod cache, so a standby knows
it as well as the leader: `currentRun` names its phase, pod and start, never its uuid (a live uuid
lets a stranger report: docs/interface.md#report-authenticity). `nextRun` is LastRun + runInterval (the leader's
schedule follows it). A paused check (records/pause.py) shows `paused: {until, reason}` (null when not
paused, and for jobs) and its `nextRun` is the pause's end, when it runs at once.

Beside each entry (not in its JSON) go the key `/` shows the check under and the check's labels of the
`kuberhealthy.io/` prefix, which /metrics turns into metric labels (web/status/metrics.py).

ViewCache keeps each entry and its JSON bytes, rebuilt only for the objects that changed (khcheck,
khjob, khstate or a checker pod of that check): a page of 1,000 checks with full histories is not
re-serialised per request; an entry whose pause ends is rebuilt by the first read after its end. What
it does not do: decide anything, or serve HTTP (web/api.py).
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kuberhealthy.base.durations import parse_duration
from kuberhealthy.base.times import format_time, parse_time
from kuberhealthy.kube import Cache, Obj, key_of
from kuberhealthy.records import pause
from kuberhealthy.records.checkpod import pod_check_index
from kuberhealthy.records.checkspec import DEFAULT_RUN_INTERVAL, DEFAULT_TIMEOUT
from kuberhealthy.records.history import entries, stats
from kuberhealthy.records.khstate import RunClaim, Spec

CHECK = "check"
JOB = "job"
OK, FAILING, NEVER_RUN = "ok", "failing", "never-run"
LIVE_PHASES = ("Pending", "Running")
LABEL_PREFIX = "kuberhealthy.io/"  # a check's labels under this prefix are kept beside its entry

View = dict[str, Any]


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


def view(kind: str, obj: Obj, state: Obj | None, pods: Cache, now: float, expose_logs: bool) -> View:
    """One entry of the JSON API."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    sspec = (state or {}).get("spec") or {}
    result = Spec.of(state or {})
    never = state is None or not result.last_run or not result.authoritative_pod
    interval = _seconds(spec.get("runInterval"), DEFAULT_RUN_INTERVAL) if kind == CHECK else None
    last_run = result.last_run if not never else None
    last_unix = parse_time(last_run) if last_run else None
    paused = pause.active(obj, now) if kind == CHECK else None
    next_run = (format_time(last_unix + interval) if last_unix is not None and interval else None)
    if paused is not None:
        next_run = format_time(paused.until)
    figures = stats(sspec, now)
    out: View = {
        "namespace": str(meta.get("namespace") or ""),
        "name": str(meta.get("name") or ""),
        "kind": kind,
        "state": NEVER_RUN if never else (OK if result.ok else FAILING),
        "interval": interval,
        "timeout": _seconds(spec.get("timeout"), DEFAULT_TIMEOUT),
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
        "history": entries(sspec, expose_logs),
        "paused": paused.view() if paused is not None else None,
    }
    if kind == JOB:
        out["phase"] = str(spec.get("phase") or "")
    return out


def sort_key(v: View) -> tuple[str, str, str]:
    return (v["namespace"], v["name"], v["kind"])


def prefixed_labels(obj: Obj) -> dict[str, str]:
    """The object's labels under LABEL_PREFIX (metrics and status pages read these; no other label is kept)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items() if str(k).startswith(LABEL_PREFIX)} \
        if isinstance(labels, dict) else {}


@dataclass
class Built:
    version: tuple[str, str, str, bool, bool]  # (object rv, khstate rv, pods rv digest, expose_logs, paused)
    view: View
    body: bytes
    key: str = ""  # "<ns>/<name>": what `/` shows the check under and /metrics labels it with
    labels: Mapping[str, str] = field(default_factory=dict)  # prefixed_labels of the check or job


class ViewCache:
    """Entries and their JSON, rebuilt per object only after one of its caches changed."""

    def __init__(self, khchecks: Cache, khjobs: Cache, khstates: Cache, pods: Cache,
                 expose_logs: Callable[[], bool], wall: Callable[[], float] = time.time) -> None:
        self._khchecks, self._khjobs, self._khstates, self._pods = khchecks, khjobs, khstates, pods
        self._expose = expose_logs
        self._wall = wall
        self._lock = threading.Lock()
        self._dirty: set[str] = set()  # "<ns>/<name>" whose entries must be rebuilt
        self._all_dirty = True
        self._built: dict[tuple[str, str], Built] = {}  # (kind, key) -> entry
        self._pause_ends: dict[str, float] = {}  # key -> when the pause its built entry shows ends
        self.rebuilt = 0  # entries rebuilt so far (for tests and figures)

    def attach(self) -> ViewCache:
        for cache in (self._khchecks, self._khjobs, self._khstates):
            cache.add_listener(self._changed)
        self._pods.add_listener(self._pod_changed)
        return self

    def _changed(self, _etype: str, obj: Obj, _prev: Obj | None) -> None:
        with self._lock:
            self._dirty.add(key_of(obj))

    def _pod_changed(self, _etype: str, obj: Obj, _prev: Obj | None) -> None:
        for key in pod_check_index(obj):
            with self._lock:
                self._dirty.add(key)

    def entries(self, namespaces: Iterable[str] | None = None) -> list[Built]:
        """Every entry (optionally of these namespaces), sorted by namespace, name, kind."""
        self._refresh()
        wanted = set(namespaces) if namespaces is not None else None
        with self._lock:
            built = list(self._built.values())
        if wanted is not None:
            built = [b for b in built if b.view["namespace"] in wanted]
        return sorted(built, key=lambda b: sort_key(b.view))

    def one(self, namespace: str, name: str) -> list[Built]:
        """The check and/or job of this name ([] when neither exists)."""
        self._refresh()
        key = f"{namespace}/{name}"
        with self._lock:
            return [b for (kind, k), b in sorted(self._built.items()) if k == key]

    def _refresh(self) -> None:
        now = self._wall()
        with self._lock:
            all_dirty, dirty = self._all_dirty, self._dirty
            self._all_dirty, self._dirty = False, set()
            ended = {key for key, until in self._pause_ends.items() if until <= now}
            dirty |= ended
            for key in ended:
                del self._pause_ends[key]
        objects = {(CHECK, key_of(o)): o for o in self._khchecks.list()} if all_dirty else {}
        if all_dirty:
            objects.update({(JOB, key_of(o)): o for o in self._khjobs.list()})
        else:
            for key in dirty:
                ns, _, name = key.partition("/")
                for kind, cache in ((CHECK, self._khchecks), (JOB, self._khjobs)):
                    obj = cache.get(ns, name)
                    if obj is not None:
                        objects[(kind, key)] = obj
        expose = self._expose()
        fresh: dict[tuple[str, str], Built | None] = {}
        for (kind, key), obj in objects.items():
            ns, _, name = key.partition("/")
            state = self._khstates.get(ns, name)
            pods_rv = ",".join(sorted(_rv(p) for p in self._pods.by_index("check", key)))
            paused = pause.active(obj, now) if kind == CHECK else None
            version = (_rv(obj), _rv(state), pods_rv, expose, paused is not None)
            with self._lock:
                old = self._built.get((kind, key))
            if old is not None and old.version == version and not all_dirty:
                continue
            v = view(kind, obj, state, self._pods, now, expose)
            fresh[(kind, key)] = Built(version, v, json.dumps(v, separators=(",", ":")).encode(), key,
                                       prefixed_labels(obj))
            if paused is not None:
                with self._lock:
                    self._pause_ends[key] = paused.until
        gone: set[tuple[str, str]] = set()
        if not all_dirty:
            for key in dirty:
                ns, _, name = key.partition("/")
                if self._khchecks.get(ns, name) is None:
                    gone.add((CHECK, key))
                if self._khjobs.get(ns, name) is None:
                    gone.add((JOB, key))
        with self._lock:
            if all_dirty:
                self._built = {k: b for k, b in fresh.items() if b is not None}
            else:
                for k in gone:
                    self._built.pop(k, None)
                self._built.update({k: b for k, b in fresh.items() if b is not None})
            self.rebuilt += len(fresh)
