"""`kuberhealthy stop-release`: stop a release's daemons while their RBAC still exists.

`helm uninstall` deletes the daemon's Deployment and its RBAC in one pass, so the daemon's SIGTERM path
(stop the runs, remove their checker pods, release the Lease) meets `forbidden` on every call, and
checker pods in other namespaces (no ownerReference: garbage collection cannot remove them) are left
until their timeout. The chart's pre-delete hook runs this first: scale the Deployment to 0 and wait
until its pods are gone, so each daemon stops the ordinary way, with its permissions intact.

Best effort by design: a hook that fails blocks `helm uninstall`, so every outcome is logged and the
exit code is 0; a Deployment that is already gone is nothing to do. It does not remove checker pods
itself (a daemon still running could create more meanwhile); the daemons' own shutdown does.
"""
from __future__ import annotations

import logging
import threading
import time

from kuberhealthy.base.errors import ApiError, NotFound
from kuberhealthy.kube import DEPLOYMENTS, PODS, Obj, Resources

logger = logging.getLogger(__name__)

POLL = 1.0  # seconds between looks at the daemon pods (a one-shot command: no watch worth its set-up)
CALL_TIMEOUT = 10.0


def _selector(deployment: Obj) -> str:
    match = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(match.items()))


def stop_release(resources: Resources, namespace: str, name: str, timeout: float,
                 stop: threading.Event | None = None) -> str:
    """Scale Deployment `namespace/name` to 0 and wait (up to `timeout` seconds) until none of its pods
    exist. Returns what happened: "absent", "stopped", "timed out" or "failed: <reason>"."""
    stop = stop or threading.Event()
    end = time.monotonic() + timeout
    try:
        deployment = resources.get(DEPLOYMENTS, namespace, name, timeout=CALL_TIMEOUT)
    except NotFound:
        logger.info("Deployment %s/%s is gone already: nothing to stop", namespace, name)
        return "absent"
    except ApiError as e:
        logger.warning("Could not read Deployment %s/%s: %s", namespace, name, e)
        return f"failed: {e}"
    selector = _selector(deployment)
    if not selector:
        logger.warning("Deployment %s/%s has no matchLabels selector: not stopping it", namespace, name)
        return "failed: no selector"
    try:
        resources.merge_patch(DEPLOYMENTS, namespace, name, {"spec": {"replicas": 0}}, timeout=CALL_TIMEOUT)
    except ApiError as e:
        logger.warning("Could not scale Deployment %s/%s to 0: %s", namespace, name, e)
        return f"failed: {e}"
    logger.info("Scaled Deployment %s/%s to 0; waiting up to %.0fs for its pods (%s) to stop", namespace, name,
                timeout, selector)
    left: list[str] = []
    while True:
        try:
            pods, _ = resources.list(PODS, namespace, label_selector=selector, timeout=CALL_TIMEOUT)
            left = sorted(str((p.get("metadata") or {}).get("name")) for p in pods)
        except ApiError as e:  # transient: look again until the deadline
            logger.warning("Could not list the daemon pods: %s", e)
        else:
            if not left:
                logger.info("Every daemon pod of %s/%s has stopped", namespace, name)
                return "stopped"
        if time.monotonic() >= end or stop.wait(min(POLL, max(0.0, end - time.monotonic()))):
            logger.warning("Daemon pods still there after %.0fs: %s", timeout, ", ".join(left) or "?")
            return "timed out"
