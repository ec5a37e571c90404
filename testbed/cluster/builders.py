"""Bodies of the objects tests and benchmarks create, and the API paths they live at.

Written from the interface (docs/interface.md#custom-resources, #checker-pods), not from the product: nothing here
imports `kuberhealthy`, so black-box tests can use it. Pure functions that return dicts; creating the objects
through the API is testbed/cluster/objects.py. The interface's label and annotation names live here once.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from typing_extensions import Unpack

GROUP = "comcast.github.io"
API_VERSION = f"{GROUP}/v1"
# docs/interface.md#checker-environment: what every checker pod carries.
APP_LABEL = "app"
CHECKER_APP = "kuberhealthy-check"
APP_SELECTOR = f"{APP_LABEL}={CHECKER_APP}"
CHECK_LABEL = "kuberhealthy-check-name"
RUN_ID_LABEL = "kuberhealthy-run-id"
CHECK_NAME_ANNOTATION = f"{GROUP}/check-name"
RUN_UUID_ENV = "KH_RUN_UUID"
TOKEN_FILE_ENV = "KH_REPORT_TOKEN_FILE"  # docs/interface.md#report-token: the pod's report token (a file path)
SAME_AS_RUN = "same"  # checker_pod(env_uuid=...): KH_RUN_UUID is the run's uuid

NAMESPACES = "/api/v1/namespaces"
MERGE_PATCH = "application/merge-patch+json"  # the content type of a JSON merge patch


# --- API paths ---------------------------------------------------------------------------------------

def cr_path(plural: str, ns: str, name: str | None = None) -> str:
    base = f"/apis/{API_VERSION}/namespaces/{ns}/{plural}"
    return f"{base}/{name}" if name else base


def khc(ns: str, name: str | None = None) -> str:
    return cr_path("khchecks", ns, name)


def khs(ns: str, name: str | None = None) -> str:
    return cr_path("khstates", ns, name)


def khj(ns: str, name: str | None = None) -> str:
    return cr_path("khjobs", ns, name)


def hcs(ns: str, name: str | None = None) -> str:
    """A HealthCheck's path (Kuberhealthy v3's kind, kuberhealthy.github.io/v2)."""
    base = f"/apis/kuberhealthy.github.io/v2/namespaces/{ns}/healthchecks"
    return f"{base}/{name}" if name else base


def pods_path(ns: str, name: str | None = None) -> str:
    return f"{NAMESPACES}/{ns}/pods" + (f"/{name}" if name else "")


def lease_path(ns: str, name: str | None = None) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases" + (f"/{name}" if name else "")


# --- times ---------------------------------------------------------------------------------------------

def micro_now(offset: float = 0.0) -> str:
    """Now (+ offset seconds) as a MicroTime, the form of a Lease's acquireTime and renewTime."""
    return datetime.fromtimestamp(time.time() + offset, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339(hours_ago: float = 0.0) -> str:
    return datetime.fromtimestamp(time.time() - hours_ago * 3600, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- resources -----------------------------------------------------------------------------------------

def env_list(env: Mapping[str, str] | None) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in (env or {}).items()]


def container(image: str, name: str = "main", env: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "image": image, "env": env_list(env)}


def khcheck(name: str, image: str = "kh-sim/ok", interval: str | None = "1h", timeout: str | None = "30s",
            env: Mapping[str, str] | None = None, containers: list[dict[str, Any]] | None = None,
            **spec: Any) -> dict[str, Any]:
    """A khcheck with one container (or `containers`); interval/timeout None leave the field out."""
    s: dict[str, Any] = {"podSpec": {"containers": containers or [container(image, env=env)]}}
    if interval is not None:
        s["runInterval"] = interval
    if timeout is not None:
        s["timeout"] = timeout
    s.update(spec)
    return {"apiVersion": API_VERSION, "kind": "KuberhealthyCheck", "metadata": {"name": name}, "spec": s}


def khjob(name: str, image: str = "kh-sim/ok", timeout: str = "30s", phase: str | None = "",
          env: Mapping[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A khjob; phase None leaves the field out."""
    s: dict[str, Any] = {"timeout": timeout, "podSpec": {"containers": [container(image, env=env)]}}
    if phase is not None:
        s["phase"] = phase
    s.update(spec)
    return {"apiVersion": API_VERSION, "kind": "KuberhealthyJob", "metadata": {"name": name}, "spec": s}


def khstate(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "KuberhealthyState", "metadata": {"name": name}, "spec": spec}


class PodShape(TypedDict, total=False):
    """The optional parts of a checker pod (checker_pod's keywords), each with its default:"""

    image: str  # "kh-sim/ok"
    env_uuid: str | None  # KH_RUN_UUID: SAME_AS_RUN (the run's), another value, or None for none
    annotate: bool  # True: the check-name annotation
    env: Mapping[str, str] | None  # more env after KH_RUN_UUID
    node_name: str | None  # None: unbound
    host_network: bool  # False
    labels: Mapping[str, str] | None  # more labels
    finalizers: list[str] | None
    namespace: str | None  # in the body's metadata


def checker_pod(name: str, check: str | None, run_uuid: str | None, **shape: Unpack[PodShape]) -> dict[str, Any]:
    """A pod as the daemon makes one for a run: the app, check-name and run-id labels, the check-name
    annotation (unless `annotate` is False) and KH_RUN_UUID (`env_uuid`: the run's, another value, or
    None for none) before `env`. A check or run_uuid of None leaves its label (and annotation) out."""
    meta_labels = {APP_LABEL: CHECKER_APP}
    if check:
        meta_labels[CHECK_LABEL] = check
    if run_uuid:
        meta_labels[RUN_ID_LABEL] = run_uuid
    meta_labels.update(shape.get("labels") or {})
    env_uuid = shape.get("env_uuid", SAME_AS_RUN)
    value = run_uuid if env_uuid == SAME_AS_RUN else env_uuid
    env_vars = ([{"name": RUN_UUID_ENV, "value": value}] if value else []) + env_list(shape.get("env"))
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": shape.get("image", "kh-sim/ok"), "env": env_vars}]}
    if node_name := shape.get("node_name"):
        spec["nodeName"] = node_name
    if shape.get("host_network"):
        spec["hostNetwork"] = True
    meta: dict[str, Any] = {"name": name, "labels": meta_labels,
                            "annotations": {CHECK_NAME_ANNOTATION: check} if check and shape.get("annotate", True)
                            else {}}
    if namespace := shape.get("namespace"):
        meta["namespace"] = namespace
    if finalizers := shape.get("finalizers"):
        meta["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def pod_status(phase: str, ip: str | None = None, host_ip: str = "127.0.0.1", **extra: Any) -> dict[str, Any]:
    """A merge patch for pods/<name>/status: the phase and, with `ip`, the pod and host addresses."""
    status: dict[str, Any] = {"phase": phase}
    if ip:
        status.update(podIP=ip, podIPs=[{"ip": ip}], hostIP=host_ip)
    status.update(extra)
    return {"status": status}


def finished_status(phase: str, hours_ago: float, ip: str) -> dict[str, Any]:
    """A status patch for a checker pod whose one container ran (or still runs) until `hours_ago`."""
    if phase == "Running":
        state: dict[str, Any] = {"running": {"startedAt": rfc3339(hours_ago)}}
    else:
        state = {"terminated": {"exitCode": 0 if phase == "Succeeded" else 1,
                                "reason": "Completed" if phase == "Succeeded" else "Error",
                                "startedAt": rfc3339(hours_ago + 0.01), "finishedAt": rfc3339(hours_ago)}}
    return {"status": {"phase": phase, "podIP": ip, "startTime": rfc3339(hours_ago + 0.02),
                       "containerStatuses": [{"name": "main", "image": "example.invalid/checker:1", "imageID": "",
                                              "ready": phase == "Running", "restartCount": 0, "state": state}]}}


def lease(name: str, holder: str, seconds: int) -> dict[str, Any]:
    """A Lease held by `holder` since now, for `seconds`."""
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": seconds,
                     "acquireTime": micro_now(), "renewTime": micro_now(), "leaseTransitions": 0}}
