"""A HealthCheck's status seen as a khstate, and back: one set of state rules for both kinds of check.

Kuberhealthy v3 keeps a check's result in its HealthCheck's `status` (the status subresource), with
its own names and units; v2 (and this daemon's khchecks) keep it in a khstate's `spec`. Every rule
about state (claiming a run, storing a report, recording a result, the history and its counters) is
written once, in khstate.py and history.py, over the khstate shape. For a HealthCheck, `view()` turns
its status into that shape and `status_of()` turns the shape, after a write's changes, back into a
status:

  khstate (view)                          HealthCheck status
  spec.OK, spec.Errors                    ok, errors
  spec.RunDuration (Go duration string)   runDuration (integer nanoseconds, as Go's time.Duration)
  spec.LastRun (RFC3339, whole seconds)   lastRunUnix
  spec.lastOK, spec.lastFailure           lastOKUnix, lastFailureUnix
  spec.Namespace                          namespace
  spec.consecutiveFailures, successCount, failureCount   the same names
  spec.Node, spec.history                 node, history (ours)
  spec.rollups                            rollups (ours: records/uptime.py)
  spec.uuid, spec.AuthoritativePod        runBinding.uuid, runBinding.authoritativePod (ours)
  spec.tokenBoundGeneration               tokenBinding.generation (ours)
  annotations: run pod, run key hash,     runBinding.pod, .keySha256, .reportedUUID, .finishedUUID (ours)
    reported uuid, finished uuid
`currentUUID` is v3's uuid of the run in flight: the view's uuid while its run is not over, "" after.
`additionalMetadata` and any status field not named here are kept as they were.

Where the installed CRD is v3's own, the API server drops our status fields. Then the run binding
(the run's uuid, its pod, its key's hash, the reported and finished uuids) lives in the HealthCheck's
annotations under the khstate's own annotation names (`binding_annotations()`), and `view()` reads
it from there when the status has none; the uuid falls back to v3's `currentUUID`.

Pure: no API access, no clock.
"""
from __future__ import annotations

import math
from typing import Any

from kuberhealthy.base.durations import format_duration, parse_duration
from kuberhealthy.base.times import format_time, parse_time
from kuberhealthy.kube import KHSTATES, Obj
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.records.khstate import (
    FINISHED_UUID,
    REPORTED_UUID,
    RUN_KEY_SHA256,
    RUN_POD,
    TOKEN_BOUND_GENERATION,
    WORKLOAD_CHECK,
    WORKLOAD_JOB,
)
from kuberhealthy.records.uptime import FIELD as ROLLUPS

RUN_BINDING, TOKEN_BINDING = "runBinding", "tokenBinding"  # our status objects
RUN_UUID_ANNOTATION = "kuberhealthy.comcast.github.io/run-uuid"  # the run binding's uuid, where the CRD prunes it
# runBinding's keys and the khstate annotation each mirrors
BINDING_ANNOTATIONS = {"pod": RUN_POD, "keySha256": RUN_KEY_SHA256, "reportedUUID": REPORTED_UUID,
                       "finishedUUID": FINISHED_UUID}
BINDING_KEYS = frozenset({RUN_UUID_ANNOTATION, *BINDING_ANNOTATIONS.values()})  # every annotation of the binding
COUNTERS = ("consecutiveFailures", "successCount", "failureCount")
# khstate spec time key -> status unix key
TIMES = {"LastRun": "lastRunUnix", "lastOK": "lastOKUnix", "lastFailure": "lastFailureUnix"}
# status fields the view covers; any other is kept as it was
OWN_FIELDS = frozenset({"ok", "errors", "runDuration", "namespace", "currentUUID", "node", "history", ROLLUPS,
                        RUN_BINDING, TOKEN_BINDING, *COUNTERS, *TIMES.values()})


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    """An integer field as v3 writes it (JSON numbers; int64 may arrive as a float or a numeric string)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and abs(value) < 2**63:
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return 0
    return 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def duration_ns(text: str) -> int:
    """A Go duration string as integer nanoseconds; 0 for "" or a string Go would not parse."""
    try:
        return round(parse_duration(text) * 1e9) if text else 0
    except ValueError:
        return 0


def view(hc: Obj, workload: str | None = None) -> Obj:
    """The HealthCheck's state as a khstate: what khstate.py, history.py and the readers of khstates take.
    `metadata` is the HealthCheck's (name, namespace, uid, resourceVersion), its annotations only the run
    binding's. Tolerant: a status edited into nonsense reads as no state, never an error."""
    meta = _dict(hc.get("metadata"))
    status = _dict(hc.get("status"))
    binding = _dict(status.get(RUN_BINDING))
    hc_annotations = _dict(meta.get("annotations"))
    annotations: dict[str, str] = {}
    for key, annotation in BINDING_ANNOTATIONS.items():
        value = _str(binding.get(key)) or _str(hc_annotations.get(annotation))
        if value:
            annotations[annotation] = value
    uuid = (_str(binding.get("uuid")) or _str(hc_annotations.get(RUN_UUID_ANNOTATION))
            or _str(status.get("currentUUID")))
    run_ns = _int(status.get("runDuration"))
    spec: dict[str, Any] = {
        "OK": status.get("ok") is True if "ok" in status else True,  # never run: OK, as a new khstate
        "RunDuration": format_duration(run_ns / 1e9) if run_ns > 0 else "",
        "Namespace": _str(status.get("namespace")) or _str(meta.get("namespace")),
        "Node": _str(status.get("node")),
        "AuthoritativePod": _str(binding.get("authoritativePod")),
        "uuid": uuid,
        "khWorkload": workload,
    }
    errors = status.get("errors")
    if isinstance(errors, list):
        spec["Errors"] = [e for e in errors if isinstance(e, str)]
    elif "errors" not in status:
        spec["Errors"] = []
    for key, unix_key in TIMES.items():
        unix = _int(status.get(unix_key))
        if unix > 0:
            spec[key] = format_time(unix)
    for key in COUNTERS:
        if key in status:
            spec[key] = _int(status.get(key))
    if isinstance(status.get("history"), list):
        spec["history"] = status["history"]
    if ROLLUPS in status:
        spec[ROLLUPS] = status[ROLLUPS]  # read (and checked) by records/uptime.py
    generation = _dict(status.get(TOKEN_BINDING)).get("generation")
    if isinstance(generation, int) and not isinstance(generation, bool):
        spec[TOKEN_BOUND_GENERATION] = generation
    out_meta: dict[str, Any] = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "generation")
                                if k in meta}
    if annotations:
        out_meta["annotations"] = annotations
    return {"apiVersion": KHSTATES.api_version, "kind": "KuberhealthyState", "metadata": out_meta, "spec": spec}


def status_of(state: Obj, old_status: Any = None) -> dict[str, Any]:
    """The HealthCheck status for a khstate-shaped `state` (a view after a write's changes), keeping what
    `old_status` holds beyond the view (additionalMetadata, fields of a later v3)."""
    spec = _dict(state.get("spec"))
    meta = _dict(state.get("metadata"))
    annotations = _dict(meta.get("annotations"))
    out = {k: v for k, v in _dict(old_status).items() if k not in OWN_FIELDS}
    uuid = _str(spec.get("uuid"))
    out["ok"] = spec.get("OK") is True
    errors = spec.get("Errors")
    out["errors"] = [e for e in errors if isinstance(e, str)] if isinstance(errors, list) else []
    out["runDuration"] = duration_ns(_str(spec.get("RunDuration")))
    out["namespace"] = _str(spec.get("Namespace")) or _str(meta.get("namespace"))
    out["currentUUID"] = uuid if uuid and _str(annotations.get(FINISHED_UUID)) != uuid else ""
    for key, unix_key in TIMES.items():
        unix = parse_time(spec.get(key))
        out[unix_key] = int(unix) if unix is not None else 0
    for key in COUNTERS:
        out[key] = _int(spec.get(key))
    node = _str(spec.get("Node"))
    if node:
        out["node"] = node
    if isinstance(spec.get("history"), list):
        out["history"] = spec["history"]
    if ROLLUPS in spec:
        out[ROLLUPS] = spec[ROLLUPS]
    binding: dict[str, Any] = {"uuid": uuid} if uuid else {}
    pod = _str(spec.get("AuthoritativePod"))
    if pod:
        binding["authoritativePod"] = pod
    for key, annotation in BINDING_ANNOTATIONS.items():
        value = _str(annotations.get(annotation))
        if value:
            binding[key] = value
    if binding:
        out[RUN_BINDING] = binding
    generation = spec.get(TOKEN_BOUND_GENERATION)
    if isinstance(generation, int) and not isinstance(generation, bool):
        out[TOKEN_BINDING] = {"generation": generation}
    return out


def binding_annotations(state: Obj) -> dict[str, str | None]:
    """Where the installed CRD drops our status fields: the HealthCheck annotations that keep the run
    binding of a khstate-shaped `state` (None removes one), for a merge patch of its metadata."""
    spec = _dict(state.get("spec"))
    annotations = _dict(_dict(state.get("metadata")).get("annotations"))
    out: dict[str, str | None] = {RUN_UUID_ANNOTATION: _str(spec.get("uuid")) or None}
    for annotation in BINDING_ANNOTATIONS.values():
        out[annotation] = _str(annotations.get(annotation)) or None
    return out


def workload_of(check: CheckSpec) -> str:
    """The khstate `khWorkload` a HealthCheck's view carries: a run-once HealthCheck reads as a job."""
    return WORKLOAD_JOB if check.single_run_only else WORKLOAD_CHECK
