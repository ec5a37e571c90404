"""What a run reads off its checker pod: the phase predicates, v2's failure reasons, the log tail.

Pure functions on the pod as the cache keeps it (checkpod.slim_pod), plus one bounded read of the
checker's log for a failed run's history entry. The state machine that uses them is runner.py.
"""
from __future__ import annotations

from kuberhealthy.base.errors import ApiError
from kuberhealthy.kube import Api, Obj
from kuberhealthy.records.history import LOG_LINES, log_unavailable

POD_START_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")
FINISHED = ("Succeeded", "Failed")

# v2's reasons, kept word for word: alerts and dashboards match on them.
ERR_CLEANUP = "failed to see pod cleanup within timeout"
ERR_RUNNING = "failed to see pod running within timeout"
ERR_REPORT = "timed out waiting for checker pod to report in"
ERR_EXIT = "timed out waiting for pod to exit"
ERR_START = "error when waiting for pod to start: "

LOG_READ_BYTES = 16384  # what the API server sends of a log at most (the history keeps 4 KiB)


def live(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") not in FINISHED


def terminating(pod: Obj) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def pending(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in (None, "", "Pending")


def start_failure(pod: Obj) -> str | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        if reason in POD_START_FAILURES:
            return str(reason)
    return None


def pod_uid(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or meta.get("name") or "")


def pod_name_of(pod: Obj | None) -> str:
    return str(((pod or {}).get("metadata") or {}).get("name") or "")


def read_log_tail(api: Api, namespace: str, name: str, pod: Obj | None, timeout: float) -> str:
    """The end of the checker's log (its first container when it has several), through the API
    server; a log that cannot be read is said so (history.log_unavailable), never raised."""
    containers = ((pod or {}).get("spec") or {}).get("containers") or []
    container = str(containers[0].get("name") or "") if len(containers) > 1 else None
    try:
        return api.pod_log(namespace, name, container or None, tail_lines=LOG_LINES, limit_bytes=LOG_READ_BYTES,
                           timeout=timeout)
    except ApiError as e:
        return log_unavailable(str(e))
