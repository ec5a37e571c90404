"""Pod status documents the simulated kubelet writes.

Status shapes follow what a real kubelet reports (phase, conditions, containerStatuses with waiting /
running / terminated states), trimmed to the fields Kuberhealthy and tests look at. The addresses in
them come from testbed/cluster/loopback.py.
"""
from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _containers(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list((pod.get("spec") or {}).get("containers") or [])


def _container_statuses(pod: Mapping[str, Any], state: dict[str, Any], ready: bool) -> list[dict[str, Any]]:
    return [{"name": c.get("name", ""), "image": c.get("image", ""), "imageID": "", "restartCount": 0,
             "ready": ready, "started": "running" in state, "state": state}
            for c in _containers(pod)]


def _conditions(ready: bool, since: str) -> list[dict[str, Any]]:
    flag = "True" if ready else "False"
    return [{"type": "Initialized", "status": "True", "lastTransitionTime": since},
            {"type": "Ready", "status": flag, "lastTransitionTime": since},
            {"type": "ContainersReady", "status": flag, "lastTransitionTime": since},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": since}]


def _ips(pod_ip: str | None, host_ip: str) -> dict[str, Any]:
    """None: no pod IP yet (a real kubelet's first Pending status; a merge patch adds it later)."""
    if pod_ip is None:
        return {"hostIP": host_ip}
    return {"hostIP": host_ip, "podIP": pod_ip, "podIPs": [{"ip": pod_ip}]}


def waiting(pod: Mapping[str, Any], pod_ip: str | None, host_ip: str, start_time: str, *, reason: str,
            message: str = "") -> dict[str, Any]:
    """Pending with every container waiting for `reason` (ContainerCreating, ErrImagePull, ...)."""
    state: dict[str, Any] = {"waiting": {"reason": reason}}
    if message:
        state["waiting"]["message"] = message
    return {"status": {"phase": "Pending", "startTime": start_time, **_ips(pod_ip, host_ip),
                       "conditions": _conditions(False, start_time),
                       "containerStatuses": _container_statuses(pod, state, ready=False)}}


def running(pod: Mapping[str, Any], pod_ip: str, host_ip: str, start_time: str,
            started_at: str) -> dict[str, Any]:
    state = {"running": {"startedAt": started_at}}
    return {"status": {"phase": "Running", "startTime": start_time, **_ips(pod_ip, host_ip),
                       "conditions": _conditions(True, started_at),
                       "containerStatuses": _container_statuses(pod, state, ready=True)}}


def terminated(pod: Mapping[str, Any], pod_ip: str, host_ip: str, start_time: str, *, started_at: str,
               exit_code: int, reason: str | None = None) -> dict[str, Any]:
    """Finished: every container terminated with `exit_code` and `reason` (default Completed for 0, else Error)."""
    finished = now_rfc3339()
    reason = reason or ("Completed" if exit_code == 0 else "Error")
    state = {"terminated": {"exitCode": exit_code, "reason": reason,
                            "startedAt": started_at, "finishedAt": finished}}
    return {"status": {"phase": "Succeeded" if exit_code == 0 else "Failed", "startTime": start_time,
                       **_ips(pod_ip, host_ip), "conditions": _conditions(False, finished),
                       "containerStatuses": _container_statuses(pod, state, ready=False)}}
