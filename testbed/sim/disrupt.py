"""Disruptions of a running pod, in the shapes a Kubernetes 1.26+ cluster writes (SIM_DISRUPT).

The test bed's 1.20 API server has no controllers that would set the `DisruptionTarget` condition, so
the simulated kubelet writes what a newer cluster does, SIM_DISRUPT_AFTER seconds after the pod runs
(behaviours.Settings), on a thread of its own (`sim-disrupt-<ns>/<name>`):

- `eviction`, `preemption`, `taint`: the condition (reason EvictionByEvictionAPI, PreemptionByScheduler,
  DeletionByTaintManager) in a status write, then the pod deleted the way that component deletes it:
  the eviction API (`pods/<name>/eviction`, policy/v1beta1 on 1.20), or a DELETE with the pod's own
  grace period. The deletion then goes the kubelet's usual way (the watch sees the deletionTimestamp:
  gone at once, or with graceful timings exit 143 and Failed while Terminating, the condition kept).
- `pressure`, `shutdown`: the kubelet's own eviction (node pressure, graceful node shutdown): the
  condition (TerminationByKubelet), phase Failed, status.reason `Evicted` / `Terminated` and the
  kubelet's message in one write, then (`stop_after` later) the running containers terminated, exit
  143. No deletionTimestamp: the object stays until someone (the daemon, a reaper) deletes it.

The checker's behaviour stops when the disruption starts, as it stops when a deletion is seen (a real
container runs on until its SIGTERM, which follows at once). A pod that finished first (Succeeded or
Failed) is left alone: nothing is written and the record's `disrupted` stays None. A pod whose checker
exited but whose sidecar runs on has not finished: it is disrupted.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from testbed.sim import podstatus
from testbed.sim.behaviours import (
    DISRUPT_EVICTION,
    DISRUPT_PREEMPTION,
    DISRUPT_PRESSURE,
    DISRUPT_SHUTDOWN,
    DISRUPT_TAINT,
    checker_container,
)
from testbed.sim.driver import PodDriver
from testbed.sim.podmodel import EXIT_SIGTERM
from testbed.sim.podstatus import TERMINAL
from testbed.sim.rawapi import RawApi, SimApiError
from testbed.sim.threadset import ThreadSet
from testbed.sim.timings import Timings

logger = logging.getLogger(__name__)

CONDITION = "DisruptionTarget"
JOIN_TIMEOUT = 5.0
EVICT, DELETE, KUBELET = "evict", "delete", "kubelet"  # how the pod ends (Shape.ends)
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
# The eviction manager's words, with the figures of a simulated node.
PRESSURE_MESSAGE = ("The node was low on resource: memory. Threshold quantity: 100Mi, available: 42Mi. "
                    "Container {container} was using 512Mi, request is 0, has larger consumption of memory. ")


@dataclass(frozen=True)
class Shape:
    """What one mode writes: the condition's reason and message, how the pod ends, and for the kubelet's
    own evictions the pod's status.reason."""

    reason: str
    message: str
    ends: str
    pod_reason: str = ""


def shape(mode: str, pod: Mapping[str, Any]) -> Shape:
    if mode == DISRUPT_EVICTION:
        return Shape("EvictionByEvictionAPI", "Eviction API: evicting", EVICT)
    if mode == DISRUPT_PREEMPTION:
        scheduler = str((pod.get("spec") or {}).get("schedulerName") or "default-scheduler")
        return Shape("PreemptionByScheduler", f"{scheduler}: preempting to accommodate a higher priority pod",
                     DELETE)
    if mode == DISRUPT_TAINT:
        return Shape("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint", DELETE)
    if mode == DISRUPT_PRESSURE:
        message = PRESSURE_MESSAGE.format(container=checker_container(pod).get("name", ""))
        return Shape("TerminationByKubelet", message, KUBELET, "Evicted")
    if mode == DISRUPT_SHUTDOWN:
        return Shape("TerminationByKubelet", SHUTDOWN_MESSAGE, KUBELET, "Terminated")
    raise ValueError(f"unknown disruption {mode!r}")


def condition(s: Shape) -> dict[str, Any]:
    return {"type": CONDITION, "status": "True", "reason": s.reason, "message": s.message,
            "lastProbeTime": None, "lastTransitionTime": podstatus.now_rfc3339()}


class Disruptor:
    """Disruptions: per pod whose SIM_DISRUPT is set, wait, then write the mode's shapes."""

    def __init__(self, api: Callable[[], RawApi | None], timings: Timings, stop: threading.Event) -> None:
        self._api = api
        self.timings = timings
        self._stop = stop
        self._threads = ThreadSet(stop)

    def schedule(self, driver: PodDriver, mode: str, after: float) -> None:
        """Disrupt the pod `after` seconds from now (called by its driver once Running was written)."""
        self._threads.start(f"sim-disrupt-{driver.record.key}", self._run, driver, mode, after)

    def join(self, timeout: float) -> None:
        self._threads.join(timeout)

    def _run(self, driver: PodDriver, mode: str, after: float) -> None:
        try:
            self._disrupt(driver, mode, after)
        except Exception:  # top of the thread: log, never kill the test process
            logger.exception("disruption %s of %s failed", mode, driver.record.key)
            driver.record.errors.append("disruption crashed; see log")

    def _disrupt(self, driver: PodDriver, mode: str, after: float) -> None:
        if driver.wait(after) or self._stop.is_set():
            return  # deleted first, or the kubelet stops
        rec, model = driver.record, driver.model
        finishing = not driver.interrupt()  # else the checker stops; its thread writes nothing more
        driver.join(JOIN_TIMEOUT)
        if finishing or model.phase in TERMINAL:
            logger.debug("pod %s finished before its disruption (%s): left alone", rec.key, mode)
            return
        s = shape(mode, driver.pod)
        patch = model.add_condition(condition(s))
        if s.ends == KUBELET:
            patch = model.fail(s.pod_reason, s.message)
        if not driver.write_status_until(self._stop, patch, f"disruption {mode}"):
            return
        rec.disrupted, rec.disruption = time.monotonic(), mode
        driver.note_phase()
        logger.debug("pod %s disrupted: %s (%s)", rec.key, mode, s.reason)
        if s.ends != KUBELET:
            self._delete(driver, s.ends)
        elif not self._stop.wait(self.timings.stop_after) and model.running:
            if driver.write_status_until(self._stop, model.stop_running(EXIT_SIGTERM), f"disruption {mode}"):
                driver.note_phase()

    def _delete(self, driver: PodDriver, how: str) -> None:
        """Delete the pod as the eviction API or a controller does (its own grace period: a deletionTimestamp)."""
        api = self._api()
        if api is None:
            return
        meta = driver.pod.get("metadata") or {}
        name, namespace = meta.get("name"), meta.get("namespace")
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        try:
            if how == EVICT:
                api.call_until(self._stop, "POST", path + "/eviction",
                               {"apiVersion": "policy/v1beta1", "kind": "Eviction",
                                "metadata": {"name": name, "namespace": namespace}})
            else:
                api.call_until(self._stop, "DELETE", path, {"apiVersion": "v1", "kind": "DeleteOptions",
                                                            "preconditions": {"uid": driver.uid}})
        except SimApiError as e:
            if e.status not in (404, 409):
                driver.record.errors.append(f"disruption: {how}: {e}")
