"""The status page's data: the khstate cache turned into v2's health summary and its exact JSON bytes.

v2 serves `GET /` as Go's `json.MarshalIndent(state, "", "  ")` of
`State{OK, Errors, CheckDetails, JobDetails, CurrentMaster}`; dashboards and scripts parse those bytes,
so they are reproduced exactly: struct field order, map keys sorted, Go's string escaping (`<`, `>`,
`&`, U+2028/U+2029 as `\\u....`, control characters as `\\u00xx`, invalid text as U+FFFD), `null` for a
khstate whose Errors is absent, `LastRun` re-formatted the way `metav1.Time` marshals (UTC, whole
seconds, omitted when unset). Those encodings are gojson.py's; this module lays out the document.

Rules (as v2): khstates with an empty AuthoritativePod never ran and are hidden; top-level OK is false
and Errors collects every non-blank error of the visible khstates as soon as one has any. Ours: a
khstate belongs under JobDetails when a khjob of that name exists (or the khstate says
`khWorkload: KHJob`), otherwise under CheckDetails; top-level errors are in key order. A paused check
(records/pause.py: its khcheck's paused-until time is ahead) keeps its CheckDetails entry but is left
out of the top-level OK and Errors (and so of kuberhealthy_cluster_state).

HealthChecks are listed in the same shape, from their states in the khstate shape (records/hcstate.py),
under the key web/shown.py gives them (`<ns>/<name>`, or `<ns>/hc:<name>` beside a same-named khcheck
that is not their migration pair); a migrated khcheck's khstate is not listed (its HealthCheck is, under
its key). A HealthCheck that runs once (`singleRunOnly`) is listed under JobDetails; one whose status
has a last run but names no pod (v3 wrote it, or v3's CRD prunes our run binding) counts as run.

StatusCache keeps one rendered fragment per state (memoised by resourceVersion) and rebuilds the
summary only after a reflector listener marked a cache changed (or a pause it knows of ended), at
most once per change, never per request. It reads caches; it never calls the API and knows nothing about HTTP.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Protocol

from kuberhealthy.kube import Obj, key_of
from kuberhealthy.records import pause
from kuberhealthy.records.khstate import WORKLOAD_JOB, RunClaim, finished_uuid
from kuberhealthy.web.gojson import go_json_string, go_time, is_blank, valid_text
from kuberhealthy.web.shown import Shown, single_run_only


@dataclass(frozen=True)
class Details:
    """One khstate as v2's WorkloadDetails, plus its pre-rendered status page entry."""

    key: str  # "<namespace>/<name>"
    namespace: str  # spec.Namespace (metadata.namespace when blank), used by the namespace filter
    ok: bool
    errors: tuple[str, ...] | None  # None: the khstate has no Errors list (rendered as null)
    run_duration: str
    authoritative_pod: str
    is_job: bool
    fragment: str  # `    "<key>": {...}` indented for its place inside CheckDetails/JobDetails
    spec_namespace: str = ""  # spec.Namespace exactly as stored (what v2 shows and labels metrics with)
    ran_unbound: bool = False  # a HealthCheck's state with a last run but no pod named: it ran

    @property
    def ran(self) -> bool:
        return bool(self.authoritative_pod) or self.ran_unbound


def _spec_str(spec: Obj, key: str) -> str:
    v = spec.get(key)
    return valid_text(v) if isinstance(v, str) else ""


def shown_uuid(obj: Obj) -> str:
    """The `uuid` the page shows: never that of a run that can still report (docs/interface.md#status-page). A run
    this daemon claimed (its pod named in the claim) and has not finished shows the last finished run's
    uuid instead ("" before any); a khstate no run of ours has claimed shows its uuid as v2 did."""
    claim = RunClaim.of(obj)
    if claim.pod and not claim.finished:
        return finished_uuid(obj)
    return claim.uuid


def details_of(obj: Obj, is_job: bool, key: str = "", healthcheck: bool = False) -> Details:
    """Parse one khstate (or a HealthCheck's state in its shape, shown under `key`) tolerantly:
    hand-edited or v2-written objects must not break the page."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = {}
    key = valid_text(key or f"{meta.get('namespace', '')}/{meta.get('name', '')}")
    raw_errors = spec.get("Errors")
    errors = tuple(valid_text(e) if isinstance(e, str) else "" for e in raw_errors) \
        if isinstance(raw_errors, list) else None
    ok = spec.get("OK") is True
    spec_ns = _spec_str(spec, "Namespace")
    d = {
        "RunDuration": _spec_str(spec, "RunDuration"), "Namespace": spec_ns, "Node": _spec_str(spec, "Node"),
        "AuthoritativePod": _spec_str(spec, "AuthoritativePod"), "uuid": valid_text(shown_uuid(obj)),
    }
    lines = [f"    {go_json_string(key)}: {{", f'      "OK": {"true" if ok else "false"},']
    if errors is None:
        lines.append('      "Errors": null,')
    elif not errors:
        lines.append('      "Errors": [],')
    else:
        lines.append('      "Errors": [')
        lines.append(",\n".join("        " + go_json_string(e) for e in errors))
        lines.append("      ],")
    for name in ("RunDuration", "Namespace", "Node"):
        lines.append(f'      "{name}": {go_json_string(d[name])},')
    last_run = go_time(spec.get("LastRun"))
    if last_run is not None:
        lines.append(f'      "LastRun": {last_run},')
    lines.append(f'      "AuthoritativePod": {go_json_string(d["AuthoritativePod"])},')
    lines.append(f'      "uuid": {go_json_string(d["uuid"])}')
    lines.append("    }")
    return Details(key=key, namespace=spec_ns or str(meta.get("namespace") or ""), ok=ok, errors=errors,
                   run_duration=d["RunDuration"], authoritative_pod=d["AuthoritativePod"], is_job=is_job,
                   fragment="\n".join(lines), spec_namespace=spec_ns,
                   ran_unbound=healthcheck and last_run is not None)


@dataclass(frozen=True)
class StatusSummary:
    """v2's health.State without CurrentMaster (that comes from the Lease, per request)."""

    ok: bool
    errors: tuple[str, ...]
    checks: tuple[Details, ...]  # sorted by key
    jobs: tuple[Details, ...]  # sorted by key


EMPTY = StatusSummary(ok=True, errors=(), checks=(), jobs=())


def summarize(entries: Iterable[Details], namespaces: Collection[str] | None = None,
              paused: Collection[str] = ()) -> StatusSummary:
    """Hide never-run khstates, apply the namespace filter, gather the errors (not those of the checks
    whose keys are in `paused`). `entries` in key order."""
    checks: list[Details] = []
    jobs: list[Details] = []
    for d in entries:
        if not d.ran or (namespaces and d.namespace not in namespaces):
            continue
        (jobs if d.is_job else checks).append(d)
    counted = [d for d in checks if d.key not in paused] if paused else checks
    errors = tuple(e for d in (*counted, *jobs) for e in (d.errors or ()) if not is_blank(e))
    return StatusSummary(ok=not errors, errors=errors, checks=tuple(checks), jobs=tuple(jobs))


def _details_map(entries: tuple[Details, ...]) -> str:
    if not entries:
        return "{}"
    return "{\n" + ",\n".join(d.fragment for d in entries) + "\n  }"


def render_head(summary: StatusSummary) -> str:
    """Everything before CurrentMaster, which changes independently of the khstates."""
    if summary.errors:
        errors = "[\n" + ",\n".join("    " + go_json_string(e) for e in summary.errors) + "\n  ]"
    else:
        errors = "[]"
    return (f'{{\n  "OK": {"true" if summary.ok else "false"},\n  "Errors": {errors},\n'
            f'  "CheckDetails": {_details_map(summary.checks)},\n  "JobDetails": {_details_map(summary.jobs)},\n')


def render_tail(current_master: str) -> str:
    return f'  "CurrentMaster": {go_json_string(valid_text(current_master))}\n}}'


def render(summary: StatusSummary, current_master: str) -> bytes:
    """The status page: byte for byte what v2's MarshalIndent writes (no trailing newline)."""
    return (render_head(summary) + render_tail(current_master)).encode("utf-8")


class Store(Protocol):
    """What StatusCache needs from a reflector."""

    def list(self) -> list[Obj]: ...

    def get(self, namespace: str, name: str) -> Obj | None: ...

    def add_listener(self, fn: Callable[[str, Obj, Obj | None], None]) -> None: ...


def _same_but_status(obj: Obj, prev: Obj) -> bool:
    """Whether two versions of an object differ at most in their status (and resourceVersion)."""
    meta, old = obj.get("metadata") or {}, prev.get("metadata") or {}
    return (obj.get("spec") == prev.get("spec") and meta.get("annotations") == old.get("annotations")
            and meta.get("labels") == old.get("labels") and meta.get("uid") == old.get("uid")
            and meta.get("deletionTimestamp") == old.get("deletionTimestamp"))


def _is_job(obj: Obj, khjobs: Store | None) -> bool:
    spec = obj.get("spec")
    if isinstance(spec, dict) and spec.get("khWorkload") == WORKLOAD_JOB:
        return True
    if khjobs is None:
        return False
    meta = obj.get("metadata") or {}
    return khjobs.get(str(meta.get("namespace", "")), str(meta.get("name", ""))) is not None


def paused_checks(khchecks: Store | None, now: float, healthchecks: Store | None = None,
                  shown: Shown | None = None) -> tuple[frozenset[str], float]:
    """The keys of the khchecks (and HealthChecks, under the keys `shown` gives them) paused at `now`, and
    when the first of those pauses ends (inf if none)."""
    keys: set[str] = set()
    ends = float("inf")
    for obj in khchecks.list() if khchecks is not None else ():
        p = pause.active(obj, now)
        if p is not None:
            meta = obj.get("metadata") or {}
            keys.add(valid_text(f"{meta.get('namespace', '')}/{meta.get('name', '')}"))
            ends = min(ends, p.until)
    for obj in healthchecks.list() if healthchecks is not None and shown is not None else ():
        p = pause.active(obj, now)
        if p is not None and shown is not None:
            keys.add(valid_text(shown.healthcheck_key(obj)))
            ends = min(ends, p.until)
    return frozenset(keys), ends


class StatusCache:
    """The summary and page bytes, rebuilt lazily after the khstate (or khjob, khcheck, HealthCheck) cache
    changed. `healthchecks` are the HealthChecks (their pause annotations, singleRunOnly, migration
    marks) and `hc_states` their states in the khstate shape (records/kinds.py: Kind.states)."""

    def __init__(self, khstates: Store, khjobs: Store | None = None, khchecks: Store | None = None,
                 wall: Callable[[], float] = time.time, *, healthchecks: Store | None = None,
                 hc_states: Store | None = None) -> None:
        self._khstates = khstates
        self._khjobs = khjobs
        self._khchecks = khchecks  # their pause annotations
        self._healthchecks = healthchecks if hc_states is not None else None
        self._hc_states = hc_states
        self._shown = Shown(khchecks, khjobs, self._healthchecks)
        self._wall = wall
        self._paused: tuple[frozenset[str], float] = (frozenset(), float("inf"))  # of the built summary
        self._lock = threading.Lock()  # guards the fields below
        self._build_lock = threading.Lock()  # one rebuild at a time
        self._generation = 0  # bumped by every cache change
        self._built: tuple[int, StatusSummary, tuple[Details, ...]] = (-1, EMPTY, ())
        self._head: tuple[int, str] = (-1, "")
        self._page: tuple[int, str, bytes] = (-1, "", b"")
        # What changed since the last build (guarded by _lock): states by identity, ("s", "<ns>/<name>") a
        # khstate and ("h", "<ns>/<name>") a HealthCheck; everything (a khcheck, khjob or a HealthCheck's
        # metadata or spec changed: whether and where each state is shown may have changed too); pauses.
        self._dirty: set[tuple[str, str]] = set()
        self._all_dirty = True
        self._checks_changed = True
        # Build side (guarded by _build_lock): identity -> (resourceVersion, is_job, shown key, details), and
        # the identities in their details' key order
        self._memo: dict[tuple[str, str], tuple[str, bool, str, Details]] = {}
        self._order: list[tuple[str, str]] = []

    def attach(self) -> StatusCache:
        """Listen to the caches; call once."""
        self._khstates.add_listener(self._state_changed)
        for cache in (self._khjobs, self._khchecks):
            if cache is not None:
                cache.add_listener(self._everything_changed)
        if self._healthchecks is not None:
            self._healthchecks.add_listener(self._healthcheck_changed)
        return self

    def _state_changed(self, _etype: str, obj: Obj, _prev: Obj | None) -> None:
        with self._lock:
            self._dirty.add(("s", key_of(obj)))
            self._generation += 1

    def _everything_changed(self, _etype: str, _obj: Obj, _prev: Obj | None) -> None:
        with self._lock:
            self._all_dirty = self._checks_changed = True
            self._generation += 1

    def _healthcheck_changed(self, etype: str, obj: Obj, prev: Obj | None) -> None:
        """A write of a HealthCheck's status (each run's) changes its own entry; anything else may change
        what the other entries show (migration marks, pauses, singleRunOnly, which keys exist)."""
        if etype == "MODIFIED" and prev is not None and _same_but_status(obj, prev):
            with self._lock:
                self._dirty.add(("h", key_of(obj)))
                self._generation += 1
        else:
            self._everything_changed(etype, obj, prev)

    def _current(self) -> tuple[int, StatusSummary, tuple[Details, ...]]:
        built = self._built
        if built[0] == self._generation and self._wall() < self._paused[1]:
            return built
        with self._build_lock:
            with self._lock:
                pause_ended = self._wall() >= self._paused[1]
                if pause_ended:  # a pause ended: the summary counts that check again
                    self._generation += 1
                generation = self._generation
                all_dirty, dirty, checks_changed = self._all_dirty, self._dirty, self._checks_changed
                self._all_dirty, self._dirty, self._checks_changed = False, set(), False
            built = self._built
            if built[0] == generation:
                return built
            entries = self._entries(all_dirty, dirty)
            paused = self._paused
            if checks_changed or pause_ended:
                paused = paused_checks(self._khchecks, self._wall(), self._healthchecks, self._shown)
            built = (generation, summarize(entries, paused=paused[0]), entries)
            with self._lock:
                self._built, self._paused = built, paused
            return built

    def _entries(self, all_dirty: bool, dirty: set[tuple[str, str]]) -> tuple[Details, ...]:
        """Every shown state in key order: the changed ones made again (all of them after `all_dirty`),
        each reusing its rendered fragment while its object's version and place are the same."""
        memo = self._memo
        reorder = all_dirty
        if all_dirty:
            old, memo = memo, {}
            for obj in self._khstates.list():
                self._put(memo, old, ("s", key_of(obj)), obj)
            for hc in self._healthchecks.list() if self._healthchecks is not None else ():
                self._put(memo, old, ("h", key_of(hc)), hc)
        else:
            for ident in dirty:
                namespace, _, name = ident[1].partition("/")
                cache = self._khstates if ident[0] == "s" else self._healthchecks
                found = cache.get(namespace, name) if cache is not None else None
                before = memo.get(ident)
                after = self._put(memo, memo, ident, found) if found is not None else None
                if after is None:
                    memo.pop(ident, None)
                if (before is None) != (after is None) or (before and after and before[2] != after[2]):
                    reorder = True
        self._memo = memo
        if reorder:
            self._order = sorted(memo, key=lambda ident: memo[ident][3].key)
        return tuple(memo[ident][3] for ident in self._order)

    def _put(self, memo: dict[tuple[str, str], tuple[str, bool, str, Details]],
             old: dict[tuple[str, str], tuple[str, bool, str, Details]], ident: tuple[str, str],
             obj: Obj) -> tuple[str, bool, str, Details] | None:
        """Enter the state of `obj` (a khstate, or a HealthCheck) under `ident`, unless it is not shown."""
        meta = obj.get("metadata") or {}
        rv = str(meta.get("resourceVersion") or "")
        if ident[0] == "s":
            namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
            if self._shown.khstate_hidden(namespace, name):
                return None
            state = obj
            job, shown = _is_job(obj, self._khjobs), f"{namespace}/{name}"
        else:
            found = self._hc_states.get(str(meta.get("namespace", "")), str(meta.get("name", ""))) \
                if self._hc_states is not None else None
            if found is None:
                return None
            state, job, shown = found, single_run_only(obj), self._shown.healthcheck_key(obj)
        held = old.get(ident)
        if held is not None and rv and held[0] == rv and held[1] == job and held[2] == shown:
            entry = held
        elif ident[0] == "s":
            entry = (rv, job, shown, details_of(state, job))
        else:
            entry = (rv, job, shown, details_of(state, job, shown, healthcheck=True))
        memo[ident] = entry
        return entry

    def summary(self) -> StatusSummary:
        """The unfiltered summary (what `/` without a filter and /metrics show)."""
        return self._current()[1]

    def page(self, current_master: str, namespaces: Collection[str] | None = None) -> bytes:
        """The status page bytes; the unfiltered page is cached until the caches or the master change."""
        generation, summary, entries = self._current()
        if namespaces:
            return render(summarize(entries, namespaces, self._paused[0]), current_master)
        page = self._page
        if page[0] == generation and page[1] == current_master:
            return page[2]
        head = self._head
        if head[0] != generation:
            head = (generation, render_head(summary))
            self._head = head
        body = (head[1] + render_tail(current_master)).encode("utf-8")
        self._page = (generation, current_master, body)
        return body
