"""A khcheck or khjob parsed into what a run needs, with v2's defaults and fallbacks.

Pure: no API access. A bad runInterval falls back to the default with an error logged (as v2 did);
a bad timeout likewise. Comparing two CheckSpecs tells the controller whether a check must restart.
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

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

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
        )

    @classmethod
    def of_job(cls, obj: dict[str, Any]) -> CheckSpec:
        return cls.of(obj, WORKLOAD_JOB)


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
