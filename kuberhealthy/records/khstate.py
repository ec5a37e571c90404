"""The khstate record: its v2 wire shape and the few writes the daemon makes to it.

A khstate (same name and namespace as its khcheck or khjob) holds the last result. Writers:
  claim_run      the runner, at the start of a run: new `uuid` (the only run allowed to report)
  record_report  the report handler: OK/Errors/LastRun from the checker pod, iff the uuid still matches
  record_result  the runner, after the pod exits: RunDuration and Node
  record_error   the runner, when the run itself failed: OK false and `Check execution error: ...`
Every write is read-modify-write with resourceVersion (409 → re-read, retry), so concurrent writers
never lose each other's fields. Each takes a RunWrite: which khstate, for which run, written by which
replica, and how long the write may take.

`LastRun` has one-second precision (as v2 writes it), too coarse to tell two quick reports apart, so a
report also stamps the annotation REPORTED_UUID with the run it was accepted for; the runner waits on
that.

Binding a run to its pod (docs/interface.md#report-authenticity): the claim also names the pod the run will create
(RUN_POD) and the SHA-256 of a secret the pod carries in an annotation (RUN_KEY_SHA256), so every
replica can tell that pod from a look-alike with the same labels and env: a pod name is unique in its
namespace, and only the run knows the secret before its pod exists. The runner's last write
(record_result or record_error) stamps FINISHED_UUID: that run is over and may not report any more;
it is also the one uuid the status page may show. Annotations, not spec fields: a khstate CRD of an
older chart would prune unknown spec fields.

Token binding (docs/interface.md#report-authenticity): a report stored with a verified ServiceAccount
token writes TOKEN_BOUND_GENERATION, the khcheck's (or khjob's) `metadata.generation` at that time.
While that still equals the workload's generation, the check is bound: record_report refuses a report
without a token (TokenBound), deciding on the khstate it writes, so a cache that has not seen the
binding yet cannot let one through. A spec field, not an annotation: an integer in the spec is what
the contract names; the outdated-CRD check (outputs/schemacheck.py) warns when the CRD would prune it.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from kuberhealthy.base.errors import KuberhealthyError, NotFound
from kuberhealthy.base.times import format_datetime, utcnow
from kuberhealthy.kube import KHSTATES, Api, Bounds, Obj
from kuberhealthy.records import rollups
from kuberhealthy.records.history import RunRecord, apply_run
from kuberhealthy.records.uptime import RollupWrite

REPORTED_UUID = "kuberhealthy.comcast.github.io/reported-uuid"
RUN_POD = "kuberhealthy.comcast.github.io/run-pod"
RUN_KEY_SHA256 = "kuberhealthy.comcast.github.io/run-key-sha256"
FINISHED_UUID = "kuberhealthy.comcast.github.io/finished-uuid"
WORKLOAD_CHECK = "KHCheck"
WORKLOAD_JOB = "KHJob"
TOKEN_BOUND_GENERATION = "tokenBoundGeneration"  # spec: the workload generation a token report bound the check at


@dataclass
class HistoryWrite:
    """What a run's last write adds to its khstate (history.apply_run), decided inside the write."""

    record: Callable[[Obj], RunRecord]  # the run, given the stored spec (a report's OK/Errors are there)
    length: int  # config historyLength
    capture_logs: bool  # config captureLogs
    now: float  # unix seconds
    previous_failures: int = 0  # consecutiveFailures before this run; set by the write
    rollup: RollupWrite | None = None  # the uptime rollup's part (records/uptime.py)

    def apply(self, spec: Obj) -> None:
        failures = spec.get("consecutiveFailures")
        self.previous_failures = failures if isinstance(failures, int) and not isinstance(failures, bool) else 0
        record = self.record(spec)
        # a write retried after its answer was lost finds the run in the history: count it once
        fresh = not (self.length > 0 and record.uuid in [e.get("uuid") for e in spec.get("history") or ()
                                                          if isinstance(e, dict)])
        spec.update(apply_run(spec, record, self.length, self.now, self.capture_logs))
        if self.rollup is not None:
            judged = fresh and record.judged
            self.rollup.apply(spec, (rollups.OK if record.ok else rollups.FAILED) if judged else None,
                              record.duration if judged else None)


class StaleReport(KuberhealthyError):
    """The report's run is not the one the khstate currently allows (it moved on, or never started)."""


class RunFinished(StaleReport):
    """The report's run is still the khstate's, but it is over (finished as a result or an error)."""


class TokenBound(KuberhealthyError):
    """A report without a verified token, for a check bound to tokens; str(e) is the one-line reason."""


@dataclass(frozen=True)
class TokenBinding:
    """What a report's write knows of the token binding: its workload's `metadata.generation` when the
    report was judged, and whether the report came with a verified token."""

    generation: int
    by_token: bool


def token_bound_generation(obj: Obj | None) -> int | None:
    """The generation the check was bound to tokens at (TOKEN_BOUND_GENERATION); None when never bound."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    value = spec.get(TOKEN_BOUND_GENERATION) if isinstance(spec, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def bound_reason(namespace: str, name: str, workload: str = WORKLOAD_CHECK) -> str:
    """The one-line answer to a tokenless report for a bound check: why, and how the binding ends."""
    kind = "khjob" if workload == WORKLOAD_JOB else "khcheck"
    return (f"check {namespace}/{name} is bound to ServiceAccount tokens since it reported with one; send the "
            f"pod's token (the file named by KH_REPORT_TOKEN_FILE) as Authorization: Bearer <token>, or change "
            f"the {kind}'s spec to end the binding")


@dataclass(frozen=True)
class Spec:
    """A khstate's `spec`, parsed tolerantly (a hand-edited or v2-written khstate must not crash us)."""

    ok: bool
    errors: tuple[str, ...]
    run_duration: str
    namespace: str
    node: str
    last_run: str | None
    authoritative_pod: str
    uuid: str

    @classmethod
    def of(cls, obj: Obj) -> Spec:
        s = obj.get("spec") if isinstance(obj, dict) else None
        if not isinstance(s, dict):
            s = {}
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict):
            meta = {}
        errors = s.get("Errors") or []
        return cls(
            ok=bool(s.get("OK", False)),
            errors=tuple(str(e) for e in errors) if isinstance(errors, list) else (),
            run_duration=str(s.get("RunDuration") or ""),
            namespace=str(s.get("Namespace") or meta.get("namespace") or ""),
            node=str(s.get("Node") or ""),
            last_run=str(s["LastRun"]) if s.get("LastRun") else None,
            authoritative_pod=str(s.get("AuthoritativePod") or ""),
            uuid=str(s.get("uuid") or ""),
        )


def _annotation(obj: Obj | None, key: str) -> str:
    """An annotation's value; "" for a missing one, or a hand-edited object of the wrong shape."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    value = annotations.get(key) if isinstance(annotations, dict) else None
    return str(value) if isinstance(value, str) else ""


def reported_uuid(obj: Obj | None) -> str:
    return _annotation(obj, REPORTED_UUID)


def finished_uuid(obj: Obj | None) -> str:
    """The uuid of the last run that is over (its pod exited or the run failed); "" before any."""
    return _annotation(obj, FINISHED_UUID)


@dataclass(frozen=True)
class RunClaim:
    """Which run may report, and from which pod (see the module docstring)."""

    uuid: str
    pod: str  # "" when claimed by a daemon that did not bind runs to pods
    key_sha256: str
    finished: bool  # the run is over: no report is taken for it any more

    @classmethod
    def of(cls, obj: Obj | None) -> RunClaim:
        spec = obj.get("spec") if isinstance(obj, dict) else None  # Spec.of(obj).uuid, without the rest of Spec
        run = str(spec.get("uuid") or "") if isinstance(spec, dict) else ""
        return cls(uuid=run, pod=_annotation(obj, RUN_POD), key_sha256=_annotation(obj, RUN_KEY_SHA256),
                   finished=bool(run) and finished_uuid(obj) == run)


def _annotate(obj: Obj, values: dict[str, str]) -> None:
    annotations = obj.setdefault("metadata", {}).setdefault("annotations", {})
    if annotations is None:
        annotations = obj["metadata"]["annotations"] = {}
    for key, value in values.items():
        if value:
            annotations[key] = value
        else:
            annotations.pop(key, None)


def new_body(namespace: str, name: str, pod_name: str, workload: str = WORKLOAD_CHECK) -> Obj:
    return {
        "apiVersion": KHSTATES.api_version,
        "kind": "KuberhealthyState",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"OK": True, "Errors": [], "RunDuration": "", "Namespace": namespace, "Node": "",
                 "AuthoritativePod": pod_name, "uuid": "", "khWorkload": workload},
    }


Mutate = Callable[["Obj | None"], "Obj | None"]


class StateStore(Protocol):
    """Where a kind of check keeps its state, in the khstate shape (statestore.py has the HealthCheck's)."""

    def read(self, api: Api, namespace: str, name: str, timeout: float) -> Obj | None:
        """The state as the API server has it now; None when there is none."""
        ...

    def update(self, api: Api, namespace: str, name: str, mutate: Mutate, hint: Obj | None,
               bounds: Bounds) -> Obj | None:
        """Read-modify-write (409: re-read, mutate again); the state written, or the current one when
        `mutate` answered None."""
        ...


class KhstateStore:
    """The state is a khstate of the check's name (v2's place)."""

    def read(self, api: Api, namespace: str, name: str, timeout: float) -> Obj | None:
        try:
            return api.get(KHSTATES, namespace, name, timeout=timeout)
        except NotFound:
            return None

    def update(self, api: Api, namespace: str, name: str, mutate: Mutate, hint: Obj | None,
               bounds: Bounds) -> Obj | None:
        return api.update_with_retry(KHSTATES, namespace, name, mutate, hint=hint, bounds=bounds)


KHSTATE_STORE = KhstateStore()


@dataclass(frozen=True)
class RunWrite:
    """What every write below needs: which khstate (`res`, `namespace`, `name`), for which run, written by
    which replica (`pod_name`, the khstate's AuthoritativePod), and how long the write may take."""

    res: Api
    namespace: str
    name: str
    run_uuid: str  # "": no particular run (record_error of a crashed worker writes unconditionally)
    pod_name: str
    workload: str = WORKLOAD_CHECK
    bounds: Bounds = field(default_factory=Bounds)
    store: StateStore = KHSTATE_STORE  # where the check's state lives

    def per_request(self, timeout: float) -> RunWrite:
        """The same write with another per-request timeout (a retried call's next attempt)."""
        return replace(self, bounds=self.bounds.per_request(timeout))

    def update(self, mutate: Callable[[Obj | None], Obj | None], hint: Obj | None = None) -> Obj | None:
        return self.store.update(self.res, self.namespace, self.name, mutate, hint, self.bounds)


def _writer(w: RunWrite, change: Callable[[Obj], None]) -> Callable[[Obj | None], Obj | None]:
    def mutate(current: Obj | None) -> Obj | None:
        obj = current if current is not None else new_body(w.namespace, w.name, w.pod_name, w.workload)
        spec = obj.setdefault("spec", {})
        spec.setdefault("Errors", [])
        spec.setdefault("RunDuration", "")
        spec.setdefault("Namespace", w.namespace)
        spec.setdefault("Node", "")
        spec.setdefault("uuid", "")
        spec.setdefault("OK", True)
        change(obj)
        return obj
    return mutate


def claim_run(w: RunWrite, *, hint: Obj | None = None, run_pod: str = "", run_key_sha256: str = "") -> Obj:
    """Make w.run_uuid the only run allowed to report, from the pod named run_pod whose run-key
    annotation hashes to run_key_sha256; create the khstate if missing."""
    def change(obj: Obj) -> None:
        obj["spec"]["uuid"] = w.run_uuid
        obj["spec"]["AuthoritativePod"] = w.pod_name
        obj["spec"]["Namespace"] = w.namespace
        _annotate(obj, {RUN_POD: run_pod, RUN_KEY_SHA256: run_key_sha256})
    out = w.update(_writer(w, change), hint)
    assert out is not None
    return out


def was_run(obj: Obj | None, run_uuid: str) -> bool:
    """Whether the khstate knows `run_uuid` as one of its check's runs that is over: the last finished
    run, or a run in its history."""
    if obj is None or not run_uuid:
        return False
    history = (obj.get("spec") or {}).get("history")
    return finished_uuid(obj) == run_uuid or (isinstance(history, list) and any(
        isinstance(e, dict) and e.get("uuid") == run_uuid for e in history))


def record_report(w: RunWrite, ok: bool, errors: list[str], *, now: dt.datetime | None = None,
                  hint: Obj | None = None, binding: TokenBinding | None = None) -> Obj:
    """Store a checker pod's report. Writes nothing and raises StaleReport if w.run_uuid is not the current
    run, RunFinished (a StaleReport) if that run is over or was an earlier run of the check, TokenBound if
    the check is bound to tokens and `binding` says the report came without one.

    `binding` (None: the workload's generation is unknown, nothing about tokens is decided or written):
    a token report binds the check at binding.generation; a tokenless one clears a binding of another
    generation (the spec changed since), so a recreated khcheck whose generations count up again
    cannot fall back into an old binding.
    A cached `hint` is used only when it already names this run: a cache lagging behind the run's
    claim must not turn a valid report into a StaleReport, so that case re-reads from the API.
    """
    run_uuid, namespace, name = w.run_uuid, w.namespace, w.name
    when = format_datetime(now or utcnow())
    if hint is not None and Spec.of(hint).uuid != run_uuid:
        hint = None

    def mutate(current: Obj | None) -> Obj | None:
        if current is None or Spec.of(current).uuid != run_uuid:
            if was_run(current, run_uuid):
                raise RunFinished(f"run {run_uuid} of {namespace}/{name} is over")
            raise StaleReport(f"run {run_uuid} of {namespace}/{name} is not the current run")
        if finished_uuid(current) == run_uuid:
            raise RunFinished(f"run {run_uuid} of {namespace}/{name} is over")
        spec = current["spec"]
        if binding is not None:
            bound = token_bound_generation(current)
            if binding.by_token:
                spec[TOKEN_BOUND_GENERATION] = binding.generation
            elif bound == binding.generation:
                raise TokenBound(bound_reason(namespace, name, str(spec.get("khWorkload") or WORKLOAD_CHECK)))
            elif bound is not None:
                spec.pop(TOKEN_BOUND_GENERATION, None)
        spec["OK"] = ok
        spec["Errors"] = list(errors)
        spec["LastRun"] = when
        spec["AuthoritativePod"] = w.pod_name
        spec.setdefault("RunDuration", "")
        spec.setdefault("Node", "")
        spec.setdefault("Namespace", namespace)
        current.setdefault("metadata", {}).setdefault("annotations", {})[REPORTED_UUID] = run_uuid
        return current
    out = w.update(mutate, hint)
    assert out is not None
    return out


def record_result(w: RunWrite, run_duration: str, node: str, *, hint: Obj | None = None,
                  history: HistoryWrite | None = None) -> Obj | None:
    """After the pod exited: RunDuration and Node (and the run in the history), unless a newer run has
    claimed the khstate."""
    if hint is not None and Spec.of(hint).uuid != w.run_uuid:
        hint = None  # decide "claimed by a newer run" on a fresh read, not a lagging cache
    def mutate(current: Obj | None) -> Obj | None:
        if current is None or Spec.of(current).uuid != w.run_uuid:
            return None
        current["spec"]["RunDuration"] = run_duration
        current["spec"]["Node"] = node
        current["spec"]["AuthoritativePod"] = w.pod_name
        if history is not None:
            history.apply(current["spec"])
        _annotate(current, {FINISHED_UUID: w.run_uuid})
        return current
    return w.update(mutate, hint)


class _Superseded(Exception):
    pass


def record_error(w: RunWrite, errors: list[str], run_duration: str = "", node: str = "", *,
                 now: dt.datetime | None = None, history: HistoryWrite | None = None,
                 hint: Obj | None = None) -> Obj | None:
    """The run failed: OK false with the given errors; the current uuid is kept.

    With a `w.run_uuid`, nothing is written (None returned) unless the khstate still names that run: a
    stopped or late run must never overwrite its successor's result. `hint` (the cache's copy) saves the
    read when it names this run; otherwise "claimed by another run" is decided on a fresh read.
    """
    when = format_datetime(now or utcnow())
    run_uuid = w.run_uuid or None
    if hint is not None and (run_uuid is None or Spec.of(hint).uuid != run_uuid):
        hint = None

    def change(obj: Obj) -> None:
        if run_uuid is not None and str(obj["spec"].get("uuid") or "") != run_uuid:
            raise _Superseded()
        spec = obj["spec"]
        spec["OK"] = False
        spec["Errors"] = list(errors)
        spec["LastRun"] = when
        spec["AuthoritativePod"] = w.pod_name
        if run_duration:
            spec["RunDuration"] = run_duration
        if node:
            spec["Node"] = node
        if history is not None:
            history.apply(spec)
        if spec.get("uuid"):
            _annotate(obj, {FINISHED_UUID: str(spec["uuid"])})  # the run is over: no late report
    write = _writer(w, change)

    def mutate(current: Obj | None) -> Obj | None:
        try:
            return write(current)
        except _Superseded:
            return None
    out = w.update(mutate, hint)
    if run_uuid is not None and (out is None or Spec.of(out).uuid != run_uuid):
        return None
    return out


def rebind_run_pod(w: RunWrite, run_pod: str, *, hint: Obj | None = None) -> Obj | None:
    """The run's claim names another pod (RUN_POD): its v2 name was taken by a pod it did not create.
    Written before that pod is created. None (nothing written) when the khstate no longer names the run."""
    run_uuid = w.run_uuid
    if RunClaim.of(hint).uuid != run_uuid:  # a cache behind the claim: read instead
        hint = None

    def mutate(current: Obj | None) -> Obj | None:
        if RunClaim.of(current).uuid != run_uuid or RunClaim.of(current).finished:
            return None
        assert current is not None
        _annotate(current, {RUN_POD: run_pod})
        return current
    out = w.update(mutate, hint)
    return out if RunClaim.of(out).pod == run_pod and RunClaim.of(out).uuid == run_uuid else None
