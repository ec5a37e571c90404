"""Leader-only: a deleted check carrying its kind's finalizer is never left stuck.

Upstream Kuberhealthy v3 puts the finalizer `kuberhealthy.io/healthcheck` on every HealthCheck it runs
and removes it itself after cleaning up. A cluster moved from v3 to this daemon keeps those
HealthChecks: without this part, deleting one would hang in Terminating for good. So, for every check
of a kind with a finalizer (records/kinds.py) that is being deleted and still carries it: its checker
pods are deleted (found by the kind's pod label with one bounded list per check and pass, so pods
upstream v3 created, which our pod cache does not select, count too), and once none is left, the
finalizer is removed (a merge patch guarded by the resourceVersion; other finalizers are kept).

Woken by changes of those kinds' checks and by checker pods going away; while a removal waits for
pods, it looks again every PENDING_EVERY seconds; otherwise every RESCAN_EVERY seconds in case a
change was missed. Kind-blind.
"""
from __future__ import annotations

import logging
import threading

from kuberhealthy.base.errors import ApiError, NotFound
from kuberhealthy.base.threads import BackgroundThread
from kuberhealthy.kube import PODS, Obj
from kuberhealthy.needs import ReaperNeeds
from kuberhealthy.records.checkpod import pod_check_index
from kuberhealthy.records.kinds import Kind

logger = logging.getLogger(__name__)

PENDING_EVERY = 2.0  # seconds between looks while a deleted check's pods are going
RESCAN_EVERY = 60.0  # seconds between looks when nothing is pending
REQUEST_TIMEOUT = 10.0  # seconds per API request


def wakeups(services: ReaperNeeds) -> threading.Event:
    """An Event set whenever a Finalizers part may have work: a check of a kind with a finalizer changed
    while being deleted, or a checker pod went away. Made once per daemon (caches keep their listeners;
    each leadership term's Finalizers part waits on the same Event)."""
    wake = threading.Event()

    def check_changed(etype: str, obj: Obj, prev: Obj | None) -> None:
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            wake.set()

    def pod_changed(etype: str, obj: Obj, prev: Obj | None) -> None:
        if etype == "DELETED":
            wake.set()
    for kind in services.kinds:
        if kind.finalizer:
            kind.checks.add_listener(check_changed)
    services.pods.add_listener(pod_changed)
    return wake


class Finalizers(BackgroundThread):
    """Removes each kind's finalizer from its deleted checks once their checker pods are gone."""

    def __init__(self, services: ReaperNeeds, wake: threading.Event) -> None:
        super().__init__("kh-finalizers")
        self.services = services
        self._wake = wake  # wakeups()
        self.removed = 0  # finalizers removed

    def stop(self) -> None:
        super().stop()
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before looking: a change meanwhile sets it again
            try:
                pending = self.pass_once()
            except Exception:  # top of this thread's loop: look again later
                logger.exception("%s: pass failed", self.name)
                pending = 1
            if self._stop.wait(0) or self._wake.wait(PENDING_EVERY if pending else RESCAN_EVERY):
                continue

    def pass_once(self) -> int:
        """One look at every deleted check with a finalizer of ours to remove; how many still wait."""
        pending = 0
        for kind in self.services.kinds:
            if not kind.finalizer:
                continue
            for obj in kind.checks.list():
                meta = obj.get("metadata") or {}
                if meta.get("deletionTimestamp") and kind.finalizer in (meta.get("finalizers") or []):
                    if self._stop.is_set():
                        return pending
                    pending += 0 if self._finalize(kind, obj) else 1
        return pending

    def _finalize(self, kind: Kind, obj: Obj) -> bool:
        """Delete the check's pods; remove the finalizer once none is left. True when it was removed."""
        meta = obj.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        api = self.services.resources
        check = kind.ident(namespace, name)
        try:
            pods, _ = api.list(PODS, namespace, f"{kind.pod_label}={name}", timeout=REQUEST_TIMEOUT)
            pods = [p for p in pods if check in pod_check_index(p)]
            for pod in pods:
                pod_meta = pod.get("metadata") or {}
                if not pod_meta.get("deletionTimestamp"):
                    api.delete(PODS, namespace, str(pod_meta.get("name") or ""), uid=str(pod_meta.get("uid") or "")
                               or None, timeout=REQUEST_TIMEOUT)
            if pods:
                logger.info("%s %s/%s is being deleted: waiting for %d checker pod(s) to go before removing %s",
                            kind.name, namespace, name, len(pods), kind.finalizer)
                return False
            kept = [f for f in meta.get("finalizers") or [] if f != kind.finalizer]
            api.merge_patch(kind.resource, namespace, name,
                            {"metadata": {"finalizers": kept or None,
                                          "resourceVersion": str(meta.get("resourceVersion") or "")}},
                            timeout=REQUEST_TIMEOUT)
        except NotFound:
            return True  # gone already
        except ApiError as e:
            logger.warning("%s %s/%s: cannot remove %s yet: %s", kind.name, namespace, name, kind.finalizer, e)
            return False
        self.removed += 1
        logger.info("%s %s/%s: its checker pods are gone; removed the finalizer %s", kind.name, namespace, name,
                    kind.finalizer)
        return True
