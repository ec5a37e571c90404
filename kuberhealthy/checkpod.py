"""The checker pod for one run, built exactly as CONTRACT section 4 says (pure; no API access).

Existing checker images rely on these names: the env vars they read, the labels Kuberhealthy finds
them by, the annotation the report handler verifies.
"""
from __future__ import annotations

import copy
import sys
from typing import Any

from kuberhealthy.checks import CheckSpec

RUN_ID_LABEL = "kuberhealthy-run-id"
CHECK_NAME_LABEL = "kuberhealthy-check-name"
APP_LABEL_VALUE = "kuberhealthy-check"
CHECK_NAME_ANNOTATION = "comcast.github.io/check-name"
KH_REPORTING_URL = "KH_REPORTING_URL"
KH_RUN_UUID = "KH_RUN_UUID"
KH_CHECK_RUN_DEADLINE = "KH_CHECK_RUN_DEADLINE"
KH_POD_NAMESPACE = "KH_POD_NAMESPACE"
INJECTED_ENV = (KH_REPORTING_URL, KH_RUN_UUID, KH_CHECK_RUN_DEADLINE, KH_POD_NAMESPACE)


def pod_name(check_name: str, unix_seconds: int) -> str:
    return f"{check_name}-{unix_seconds}".lower()


def build_pod(check: CheckSpec, run_uuid: str, unix_now: float, reporting_url: str,
              owner: dict[str, Any] | None = None, deadline_unix: float | None = None) -> dict[str, Any]:
    """The pod body to create for this run. `owner` is an ownerReference (the controller's pod) or None.

    `deadline_unix` is when the run must be over (run start + timeout); by default unix_now + timeout.
    """
    spec = copy.deepcopy(check.pod_spec)
    spec["restartPolicy"] = "Never"
    deadline = int(deadline_unix if deadline_unix is not None else unix_now + check.timeout)
    injected = [
        {"name": KH_REPORTING_URL, "value": reporting_url},
        {"name": KH_RUN_UUID, "value": run_uuid},
        {"name": KH_CHECK_RUN_DEADLINE, "value": str(deadline)},
        {"name": KH_POD_NAMESPACE, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
    ]
    # Every container, init containers included (v2 did only `containers`; an init container that
    # reports, or waits for its deadline, needs them just the same).
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        env = [e for e in container.get("env") or [] if e.get("name") not in INJECTED_ENV]
        container["env"] = env + copy.deepcopy(injected)
    labels = dict(check.extra_labels)
    labels.update({RUN_ID_LABEL: run_uuid, CHECK_NAME_LABEL: check.name, "app": APP_LABEL_VALUE})
    annotations = dict(check.extra_annotations)
    annotations[CHECK_NAME_ANNOTATION] = check.name
    meta: dict[str, Any] = {
        "name": pod_name(check.name, int(unix_now)),
        "namespace": check.namespace,
        "labels": labels,
        "annotations": annotations,
    }
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def pod_env_value(pod: dict[str, Any], name: str) -> str | None:
    """A literal env value from the pod's containers (first match)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for e in container.get("env") or []:
            if e.get("name") == name and "value" in e:
                return str(e["value"])
    return None


def _pick(src: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: src[k] for k in keys if isinstance(src, dict) and k in src}


def _interned(value: Any) -> Any:
    """Repeated short strings (namespaces, phases, node names, label values) stored once, not per pod."""
    return sys.intern(value) if isinstance(value, str) and len(value) <= 64 else value


def _interned_map(mapping: Any) -> dict[str, Any]:
    return {sys.intern(str(k)): _interned(v) for k, v in mapping.items()} if isinstance(mapping, dict) else {}


_KEPT_ENV = (KH_RUN_UUID, KH_CHECK_RUN_DEADLINE)


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """What the daemon reads of a checker pod, and nothing else (the pod cache's transform).

    A kept checker pod is ~5-10 KB on the wire (managedFields, the whole podSpec, conditions); with
    thousands of checks and several kept pods each, the cache would hold mostly bytes nobody reads.
    Kept: identity and times, labels, the check-name annotation, per container its name and
    KH_RUN_UUID and KH_CHECK_RUN_DEADLINE env (the report handler's), nodeName/hostNetwork, and the
    status fields the runner, the report handler and the reaper decide on (of the conditions only
    the latest transition time, the reaper's fallback for a pod's finish time).
    """
    meta = pod.get("metadata") or {}
    slim_meta = _pick(meta, ("name", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"))
    slim_meta["namespace"] = _interned(meta.get("namespace"))
    slim_meta["labels"] = _interned_map(meta.get("labels"))
    annotations = meta.get("annotations") or {}
    if CHECK_NAME_ANNOTATION in annotations:
        slim_meta["annotations"] = {CHECK_NAME_ANNOTATION: _interned(annotations[CHECK_NAME_ANNOTATION])}
    spec = pod.get("spec") or {}
    containers = [{"name": _interned(c.get("name")),
                   "env": [e for e in c.get("env") or [] if isinstance(e, dict) and e.get("name") in _KEPT_ENV]}
                  for c in spec.get("containers") or [] if isinstance(c, dict)]
    slim_spec: dict[str, Any] = {"containers": containers}
    if spec.get("nodeName"):
        slim_spec["nodeName"] = _interned(spec["nodeName"])
    if spec.get("hostNetwork"):
        slim_spec["hostNetwork"] = True
    status = pod.get("status") or {}
    slim_status = {k: _interned(v) for k, v in _pick(status, ("phase", "podIP", "hostIP", "startTime",
                                                               "reason")).items()}
    ips = [i for i in status.get("podIPs") or [] if isinstance(i, dict) and i.get("ip") != status.get("podIP")]
    if ips:
        slim_status["podIPs"] = [_pick(i, ("ip",)) for i in ips]
    times = [str(c["lastTransitionTime"]) for c in status.get("conditions") or []
             if isinstance(c, dict) and c.get("lastTransitionTime")]
    if times:
        slim_status["conditions"] = [{"lastTransitionTime": max(times)}]
    if status.get("containerStatuses"):
        slim_status["containerStatuses"] = [
            {"state": {
                sys.intern(str(kind)): {k: _interned(v) for k, v in
                                        _pick(detail, ("reason", "finishedAt", "exitCode")).items()}
                for kind, detail in (cs.get("state") or {}).items() if isinstance(detail, dict)}}
            for cs in status["containerStatuses"] if isinstance(cs, dict)]
    return {"metadata": slim_meta, "spec": slim_spec, "status": slim_status}
