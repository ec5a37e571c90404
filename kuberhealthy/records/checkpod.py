"""The checker pod for one run, built exactly as docs/interface.md#checker-pods says (pure; no API access).

Existing checker images rely on these names: the env vars they read, the labels Kuberhealthy finds
them by, the annotation the report handler verifies.
"""
from __future__ import annotations

import hashlib
import secrets
import string
import sys
from dataclasses import dataclass
from typing import Any

from kuberhealthy.base.copies import json_copy
from kuberhealthy.checkclient import ENV_DEADLINE as KH_CHECK_RUN_DEADLINE
from kuberhealthy.checkclient import ENV_POD_NAMESPACE as KH_POD_NAMESPACE
from kuberhealthy.checkclient import ENV_REPORTING_URL as KH_REPORTING_URL
from kuberhealthy.checkclient import ENV_RUN_UUID as KH_RUN_UUID
from kuberhealthy.checkclient import ENV_TOKEN_FILE as KH_REPORT_TOKEN_FILE
from kuberhealthy.kube.reflector import Storage
from kuberhealthy.records.checkspec import HC_PREFIX, KIND_HEALTHCHECK, CheckSpec, ident

RUN_ID_LABEL = "kuberhealthy-run-id"
CHECK_NAME_LABEL = "kuberhealthy-check-name"
APP_LABEL = "app"
APP_LABEL_VALUE = "kuberhealthy-check"
CHECK_POD_SELECTOR = f"{APP_LABEL}={APP_LABEL_VALUE}"  # every checker pod, whichever check
CHECK_NAME_ANNOTATION = "comcast.github.io/check-name"
# A HealthCheck's checker pod also carries what Kuberhealthy v3 puts on its pods, so v3's tools find it.
V3_CHECK_LABEL = "healthcheck"  # label: the HealthCheck's name
V3_RUN_UUID = "kh-run-uuid"  # label and annotation: the run's uuid
V3_CREATED_BY = "createdBy"  # annotation: "kuberhealthy"
V3_CHECK_NAME_ANNOTATION = "kuberhealthyCheckName"  # annotation: the HealthCheck's name
# A secret of the run, on its pod only; the run's khstate claim holds its SHA-256 (khstate.RUN_KEY_SHA256).
RUN_KEY_ANNOTATION = "kuberhealthy.comcast.github.io/run-key"
# The check author's word on which containers of the checker pod are sidecars (comma-separated names).
SIDECARS_ANNOTATION = "kuberhealthy.github.io/sidecars"
DISRUPTION_CONDITION = "DisruptionTarget"  # Kubernetes 1.26+: an eviction, a preemption, a node shutdown
# The env names checkers read are checkclient's (it is standalone).
INJECTED_ENV = (KH_REPORTING_URL, KH_RUN_UUID, KH_CHECK_RUN_DEADLINE, KH_POD_NAMESPACE, KH_REPORT_TOKEN_FILE)
# The report token (docs/interface.md#report-token): a projected ServiceAccount token only Kuberhealthy accepts
# (audience), valid 10 minutes (the API server's minimum) and rotated by the kubelet, mounted read-only in
# every container. A projected volume works whatever automountServiceAccountToken says, and a token of
# this audience is useless against the API server.
TOKEN_AUDIENCE = "kuberhealthy"
TOKEN_SECONDS = 600
TOKEN_VOLUME = "kuberhealthy-report-token"
TOKEN_DIR = "/var/run/secrets/kuberhealthy/report"
TOKEN_PATH = f"{TOKEN_DIR}/token"
_SUFFIX_CHARS = string.ascii_lowercase + string.digits


def pod_name(check_name: str, unix_seconds: int) -> str:
    return f"{check_name}-{unix_seconds}".lower()


def fallback_pod_name(v2_name: str) -> str:
    """`<check>-<unix seconds>-<5 random [a-z0-9]>`: the name a run takes when a pod it did not create holds
    its v2 name. What `generateName: <check>-<unix seconds>-` would give, but chosen here, before the create,
    so the run's claim names the pod before it exists (a report never meets a claim naming another pod)."""
    return f"{v2_name}-" + "".join(secrets.choice(_SUFFIX_CHARS) for _ in range(5))


def new_run_key() -> str:
    return secrets.token_hex(16)


def run_key_sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def pod_run_key(pod: dict[str, Any]) -> str:
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get(RUN_KEY_ANNOTATION) or "")


@dataclass(frozen=True)
class Claimed:
    """What a run's khstate claim says of its pod before it exists: its name and its secret (the claim
    holds the secret's hash, the pod the secret itself)."""

    name: str | None = None  # None: from the run's start (pod_name)
    run_key: str = ""  # "": no run-key annotation


def build_pod(check: CheckSpec, run_uuid: str, unix_now: float, reporting_url: str,
              owner: dict[str, Any] | None = None, deadline_unix: float | None = None,
              claimed: Claimed = Claimed()) -> dict[str, Any]:
    """The pod body to create for this run. `owner` is an ownerReference (the controller's pod) or None.

    `deadline_unix` is when the run must be over (run start + timeout); by default unix_now + timeout.
    `claimed` is the name the run claimed (default: from unix_now) and its secret (an annotation).
    """
    name, run_key = claimed.name, claimed.run_key
    spec = json_copy(check.pod_spec)
    spec["restartPolicy"] = "Never"
    deadline = int(deadline_unix if deadline_unix is not None else unix_now + check.timeout)
    injected = [
        {"name": KH_REPORTING_URL, "value": reporting_url},
        {"name": KH_RUN_UUID, "value": run_uuid},
        {"name": KH_CHECK_RUN_DEADLINE, "value": str(deadline)},
        {"name": KH_POD_NAMESPACE, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
        {"name": KH_REPORT_TOKEN_FILE, "value": TOKEN_PATH},
    ]
    mount = {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True}
    # A projected token needs a ServiceAccount; admission would pick "default" anyway: say so, so the
    # pod is valid wherever it is created.
    if not spec.get("serviceAccountName") and not spec.get("serviceAccount"):
        spec["serviceAccountName"] = "default"
    spec["volumes"] = [v for v in spec.get("volumes") or [] if v.get("name") != TOKEN_VOLUME] + [
        {"name": TOKEN_VOLUME, "projected": {"sources": [{"serviceAccountToken": {
            "audience": TOKEN_AUDIENCE, "expirationSeconds": TOKEN_SECONDS, "path": "token"}}]}}]
    # Every container, init containers included (v2 did only `containers`; an init container that
    # reports, or waits for its deadline, needs them just the same).
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        env = [e for e in container.get("env") or [] if e.get("name") not in INJECTED_ENV]
        container["env"] = env + json_copy(injected)
        mounts = [m for m in container.get("volumeMounts") or []
                  if m.get("name") != TOKEN_VOLUME and m.get("mountPath") != TOKEN_DIR]
        container["volumeMounts"] = [*mounts, dict(mount)]
    # The check author's first (a HealthCheck's podSpec.metadata, then extraLabels/extraAnnotations),
    # ours last: the names Kuberhealthy finds its pods by are never the author's to change.
    labels = {**dict(check.pod_labels), **dict(check.extra_labels)}
    labels.update({RUN_ID_LABEL: run_uuid, CHECK_NAME_LABEL: check.name, APP_LABEL: APP_LABEL_VALUE})
    annotations = {**dict(check.pod_annotations), **dict(check.extra_annotations)}
    annotations[CHECK_NAME_ANNOTATION] = check.name
    if check.kind == KIND_HEALTHCHECK:
        labels.update({V3_CHECK_LABEL: check.name, V3_RUN_UUID: run_uuid})
        annotations.update({V3_RUN_UUID: run_uuid, V3_CREATED_BY: "kuberhealthy", V3_CHECK_NAME_ANNOTATION: check.name})
    annotations.pop(RUN_KEY_ANNOTATION, None)  # never the check author's
    if run_key:
        annotations[RUN_KEY_ANNOTATION] = run_key
    meta: dict[str, Any] = {
        "name": name or pod_name(check.name, int(unix_now)),
        "namespace": check.namespace,
        "labels": labels,
        "annotations": annotations,
    }
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _pick(src: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: src[k] for k in keys if isinstance(src, dict) and k in src}


def _interned(value: Any) -> Any:
    """Repeated short strings (namespaces, phases, node names, label values) stored once, not per pod."""
    return sys.intern(value) if isinstance(value, str) and len(value) <= 64 else value


def _interned_map(mapping: Any) -> dict[str, Any]:
    return {sys.intern(str(k)): _interned(v) for k, v in mapping.items()} if isinstance(mapping, dict) else {}


_KEPT_ENV = (KH_RUN_UUID, KH_CHECK_RUN_DEADLINE)
MESSAGE_CHARS = 200  # of the pod's status message (an eviction's can be long)


def _slim_container_status(cs: dict[str, Any]) -> dict[str, Any]:
    """Its name and state: waiting/terminated reason, exitCode, finishedAt (why a checker ended, when)."""
    return {"name": _interned(cs.get("name")), "state": {
        sys.intern(str(kind)): {k: _interned(v) for k, v in _pick(detail, ("reason", "finishedAt", "exitCode")).items()}
        for kind, detail in (cs.get("state") or {}).items() if isinstance(detail, dict)}}


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """What the daemon reads of a checker pod, and nothing else (the pod cache's transform).

    A kept checker pod is ~5-10 KB on the wire (managedFields, the whole podSpec, conditions); with
    thousands of checks and several kept pods each, the cache would hold mostly bytes nobody reads.
    Kept: identity and times, labels, the check-name, run-key and sidecars annotations, per container its
    name and KH_RUN_UUID and KH_CHECK_RUN_DEADLINE env (the report handler's), the init containers that
    are native sidecars (restartPolicy Always), nodeName/hostNetwork, and the status fields the runner,
    the report handler and the reaper decide on (of the conditions the latest transition time, the
    reaper's fallback for a pod's finish time, and a true DisruptionTarget's reason and message; per
    container and init container its name and state's reason, exitCode and finishedAt, and the pod's
    reason and message: a run error says why a checker ended without reporting, podstate.why_ended).
    """
    meta = pod.get("metadata") or {}
    slim_meta = _pick(meta, ("name", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"))
    slim_meta["namespace"] = _interned(meta.get("namespace"))
    slim_meta["labels"] = _interned_map(meta.get("labels"))
    annotations = meta.get("annotations") or {}
    kept = {k: _interned(annotations[k]) for k in (CHECK_NAME_ANNOTATION, V3_CHECK_NAME_ANNOTATION)
            if k in annotations}
    if RUN_KEY_ANNOTATION in annotations:
        kept[RUN_KEY_ANNOTATION] = str(annotations[RUN_KEY_ANNOTATION])
    if SIDECARS_ANNOTATION in annotations:
        kept[SIDECARS_ANNOTATION] = _interned(str(annotations[SIDECARS_ANNOTATION])[:MESSAGE_CHARS])
    if kept:
        slim_meta["annotations"] = kept
    spec = pod.get("spec") or {}
    containers = [{"name": _interned(c.get("name")),
                   "env": [e for e in c.get("env") or [] if isinstance(e, dict) and e.get("name") in _KEPT_ENV]}
                  for c in spec.get("containers") or [] if isinstance(c, dict)]
    slim_spec: dict[str, Any] = {"containers": containers}
    native = [{"name": _interned(c.get("name")), "restartPolicy": "Always"} for c in spec.get("initContainers") or []
              if isinstance(c, dict) and c.get("restartPolicy") == "Always"]
    if native:
        slim_spec["initContainers"] = native
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
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == DISRUPTION_CONDITION and c.get("status") == "True":
            slim_status.setdefault("conditions", []).append(
                {"type": DISRUPTION_CONDITION, "status": "True", "reason": _interned(c.get("reason")),
                 "message": str(c.get("message") or "")[:MESSAGE_CHARS]})
    if status.get("message"):  # an eviction's or a node shutdown's words, for a run error (bounded)
        slim_status["message"] = str(status["message"])[:MESSAGE_CHARS]
    for key in ("initContainerStatuses", "containerStatuses"):
        if status.get(key):
            slim_status[key] = [_slim_container_status(cs) for cs in status[key] if isinstance(cs, dict)]
    return {"metadata": slim_meta, "spec": slim_spec, "status": slim_status}


# --- indexes of the checker pod cache ------------------------------------------------------------------


def pod_uuid_index(pod: dict[str, Any]) -> list[str]:
    run_id = ((pod.get("metadata") or {}).get("labels") or {}).get(RUN_ID_LABEL)
    return [run_id] if run_id else []


def pod_ip_index(pod: dict[str, Any]) -> list[str]:
    status = pod.get("status") or {}
    ips = {str(i.get("ip")) for i in status.get("podIPs") or [] if i.get("ip")}
    if status.get("podIP"):
        ips.add(str(status["podIP"]))
    return sorted(ips)


def pod_check(pod: dict[str, Any]) -> tuple[str, str, str] | None:
    """(namespace, name, ident prefix) of the check a checker pod belongs to; None for none.

    A HealthCheck's pod: labelled `healthcheck=<name>` (v3's label) and either without our check-name
    label (a pod upstream v3 created) or with the `kuberhealthyCheckName` annotation of the same name
    (ours). Else the `kuberhealthy-check-name` label names a khcheck or khjob (a khcheck's author may
    put a `healthcheck` label on its pods: that alone does not make them a HealthCheck's)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    namespace = str(meta.get("namespace") or "")
    v3_name, name = labels.get(V3_CHECK_LABEL), labels.get(CHECK_NAME_LABEL)
    if v3_name and (not name or ((meta.get("annotations") or {}).get(V3_CHECK_NAME_ANNOTATION) == v3_name)):
        return namespace, str(v3_name), HC_PREFIX
    return (namespace, str(name), "") if name else None


def pod_check_index(pod: dict[str, Any]) -> list[str]:
    """The ident of the pod's check (records/kinds.py): `<ns>/<name>`, `<ns>/hc:<name>` for a HealthCheck's."""
    found = pod_check(pod)
    return [ident(*found)] if found else []


# The checker pod cache (the daemon's, and the test bed's fake): slim pods, indexed by run, IP and check.
CHECK_POD_STORAGE = Storage({"uuid": pod_uuid_index, "ip": pod_ip_index, "check": pod_check_index}, slim_pod)
