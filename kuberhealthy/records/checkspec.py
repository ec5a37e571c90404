"""A khcheck, khjob or HealthCheck parsed into what a run needs, with each kind's defaults.

Pure: no API access. A khcheck's bad runInterval falls back to the default with an error logged (as v2
did); a bad timeout likewise. A HealthCheck (Kuberhealthy v3's kind) is stricter: a value that cannot
be read is a SpecProblem naming the field, and the check does not run until it is fixed. Comparing two
CheckSpecs tells the controller whether a check must restart.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from kuberhealthy.base.durations import parse_duration
from kuberhealthy.records.khstate import WORKLOAD_CHECK, WORKLOAD_JOB

logger = logging.getLogger(__name__)

DEFAULT_RUN_INTERVAL = 600.0  # seconds (10m)
DEFAULT_TIMEOUT = 300.0  # seconds (5m)
KIND_KHCHECK = "khcheck"  # a khcheck (comcast.github.io/v1), state in its khstate
KIND_KHJOB = "khjob"  # a khjob (comcast.github.io/v1), state in its khstate
KIND_HEALTHCHECK = "healthcheck"  # a HealthCheck (kuberhealthy.github.io/v2), state in its status
HC_PREFIX = "hc:"  # a HealthCheck's ident is `<ns>/hc:<name>` (records/kinds.py)
PREFIXES = {KIND_KHCHECK: "", KIND_KHJOB: "", KIND_HEALTHCHECK: HC_PREFIX}


def ident(namespace: str, name: str, prefix: str = "") -> str:
    """A check's identity inside the daemon (records/kinds.py): `<namespace>/<prefix><name>`."""
    return f"{namespace}/{prefix}{name}"


class SpecProblem(ValueError):
    """A HealthCheck field that cannot be run with; str(e) names the field and says why."""

    def __init__(self, field_path: str, why: str) -> None:
        super().__init__(f"{field_path}: {why}")
        self.field = field_path
        self.why = why


def _duration_or(value: Any, default: float, what: str, key: str) -> float:
    if value in (None, ""):
        return default
    try:
        seconds = parse_duration(str(value))
    except ValueError:
        logger.error("%s: invalid %s %r; using the default %.0fs", key, what, value, default)
        return default
    if seconds <= 0:
        logger.error("%s: %s %r must be positive; using the default %.0fs", key, what, value, default)
        return default
    return seconds


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


@dataclass(frozen=True)
class CheckSpec:
    """One khcheck/khjob as the runner sees it. Equality covers exactly what forces a restart."""

    namespace: str
    name: str
    run_interval: float  # seconds
    timeout: float  # seconds
    pod_spec_json: str = field(repr=False)  # canonical JSON, so specs compare by value
    extra_labels: tuple[tuple[str, str], ...] = ()
    extra_annotations: tuple[tuple[str, str], ...] = ()
    workload: str = WORKLOAD_CHECK
    uid: str = ""  # the khcheck's (or khjob's) uid: Events name it; a re-created check is a new check
    kind: str = KIND_KHCHECK
    pod_labels: tuple[tuple[str, str], ...] = ()  # a HealthCheck's podSpec.metadata.labels
    pod_annotations: tuple[tuple[str, str], ...] = ()  # a HealthCheck's podSpec.metadata.annotations
    single_run_only: bool = False  # a HealthCheck that runs once after creation and never again

    @property
    def key(self) -> str:
        """`<ns>/<name>`: how logs, errors and v2's answers name the check."""
        return f"{self.namespace}/{self.name}"

    @property
    def ident(self) -> str:
        """The check's identity inside the daemon (a HealthCheck's is `<ns>/hc:<name>`)."""
        return ident(self.namespace, self.name, PREFIXES[self.kind])

    @property
    def pod_spec(self) -> dict[str, Any]:
        return dict(json.loads(self.pod_spec_json))

    @classmethod
    def of(cls, obj: dict[str, Any], workload: str = WORKLOAD_CHECK) -> CheckSpec:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        pod_spec = spec.get("podSpec") if isinstance(spec.get("podSpec"), dict) else {}
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            run_interval=(_duration_or(spec.get("runInterval"), DEFAULT_RUN_INTERVAL, "runInterval", key)
                          if workload == WORKLOAD_CHECK else 0.0),
            timeout=_duration_or(spec.get("timeout"), DEFAULT_TIMEOUT, "timeout", key),
            pod_spec_json=json.dumps(pod_spec, sort_keys=True),
            extra_labels=tuple(sorted(_str_map(spec.get("extraLabels")).items())),
            extra_annotations=tuple(sorted(_str_map(spec.get("extraAnnotations")).items())),
            workload=workload,
            uid=str(meta.get("uid") or ""),
            kind=KIND_KHJOB if workload == WORKLOAD_JOB else KIND_KHCHECK,
        )

    @classmethod
    def of_job(cls, obj: dict[str, Any]) -> CheckSpec:
        return cls.of(obj, WORKLOAD_JOB)

    @classmethod
    def of_healthcheck(cls, obj: dict[str, Any], default_run_interval: float, default_timeout: float) -> CheckSpec:
        """A HealthCheck as v3 reads it: `podSpec.spec` is the pod's spec, `podSpec.metadata` its labels and
        annotations, an unset (or empty) runInterval or timeout takes the given default. Raises
        SpecProblem for a value v3 could not run with either, naming the field."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            raise SpecProblem("spec", "missing")
        pod = spec.get("podSpec")
        if not isinstance(pod, dict) or not isinstance(pod.get("spec"), dict):
            raise SpecProblem("spec.podSpec.spec", "missing: the checker pod's spec goes there")
        pod_meta = pod.get("metadata")
        if pod_meta is not None and not isinstance(pod_meta, dict):
            raise SpecProblem("spec.podSpec.metadata", "not an object")
        single = spec.get("singleRunOnly")
        if single is not None and not isinstance(single, bool):
            raise SpecProblem("spec.singleRunOnly", f"{single!r} is not true or false")
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            run_interval=_strict_duration(spec.get("runInterval"), default_run_interval, "spec.runInterval"),
            timeout=_strict_duration(spec.get("timeout"), default_timeout, "spec.timeout"),
            pod_spec_json=json.dumps(pod["spec"], sort_keys=True),
            extra_labels=_strict_map(spec.get("extraLabels"), "spec.extraLabels"),
            extra_annotations=_strict_map(spec.get("extraAnnotations"), "spec.extraAnnotations"),
            uid=str(meta.get("uid") or ""),
            workload=WORKLOAD_JOB if single is True else WORKLOAD_CHECK,
            kind=KIND_HEALTHCHECK,
            pod_labels=_strict_map((pod_meta or {}).get("labels"), "spec.podSpec.metadata.labels"),
            pod_annotations=_strict_map((pod_meta or {}).get("annotations"), "spec.podSpec.metadata.annotations"),
            single_run_only=single is True,
        )


def _strict_duration(value: Any, default: float, field_path: str) -> float:
    if value in (None, ""):
        return default
    try:
        seconds = parse_duration(str(value))
    except ValueError:
        raise SpecProblem(field_path, f"{value!r} is not a duration (e.g. 30s, 5m, 1h)") from None
    if seconds <= 0:
        raise SpecProblem(field_path, f"{value!r} must be more than zero")
    return seconds


def _strict_map(value: Any, field_path: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise SpecProblem(field_path, "not a map of strings to strings")
    return tuple(sorted(value.items()))


def validate_pod_spec(pod_spec: dict[str, Any]) -> str | None:
    """Why the podSpec cannot run, or None. (v2 checks the same two things.)"""
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return "podSpec has no containers"
    for i, c in enumerate(containers):
        if not isinstance(c, dict):
            return f"podSpec container {i} is not an object"
        if not str(c.get("image") or "").strip():
            return f"podSpec container {c.get('name') or i} has no image"
    return None
