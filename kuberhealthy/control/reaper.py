"""Leader-only housekeeping: finished checker pods, completed khjobs and orphaned khstates.

Two background parts, each one named thread on its own interval:
  CheckReaper  (checkReaperRunInterval) deletes finished checker pods beyond the per-check counts or
               older than maxCheckPodAge, and Completed run-once checks (khjobs) older than maxKHJobAge.
  StateReaper  (stateReaperInterval) deletes state objects (khstates) that no check of a kind keeping
               its state there has the namespace/name of (neither a khcheck nor a khjob).
Kind-blind: which kinds run once and where states live is their Kind's (records/kinds.py); a
HealthCheck keeps its state in itself, so it leaves nothing to reap.
Both decide from the informer caches (no list calls) with pure functions that tests drive without I/O,
and delete with the object's uid as a precondition, so a same-named successor is never hit. The state
reaper confirms every candidate with a GET of the khcheck and the khjob first: a cache that lags
behind a just-created check must never cost that check its state.

Semantics follow Kuberhealthy v2.7.1's reaper, with these deliberate differences:
  * maxCheckPodAge and maxKHJobAge are honoured as configured (the contract: "older than this are
    deleted"); v2 silently raised them to at least 30s and 5m. Only the count-based clean-up keeps
    a pod that finished less than 30s ago, since its run may still be reading it.
  * The keep-counts apply per check (its ident: checkpod.pod_check_index) and per phase:
    the newest maxCompletedPodCount Succeeded and the newest maxErrorPodCount Failed pods are kept,
    newest by creation time. v2 only applied either count once a check had more than
    maxCompletedPodCount finished pods in total, so maxErrorPodCount could silently not apply.
  * A pod's finish time is the latest container `finishedAt`; when a container has no terminated state
    (v2 then never reaped the pod) it falls back to the latest condition transition, then startTime,
    then creationTimestamp.

Checker pods our pod cache does not select (a check's label without our app label: pods upstream v3 left
behind before a cluster moved to this daemon) are found by one list per pod label every FOREIGN_EVERY
passes, and reaped by the same rules.

What this module does not do: touch Pending or Running pods (the runner owns live pods), decide who
leads (the controller starts these parts only on the leader), or list anything else from the API.
"""
from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kuberhealthy.base.config import Config
from kuberhealthy.base.errors import ApiError, NotFound
from kuberhealthy.base.threads import PeriodicThread
from kuberhealthy.base.times import parse_time
from kuberhealthy.kube import PODS, Cache, Obj, Resource, key_of
from kuberhealthy.needs import ReaperNeeds
from kuberhealthy.records.checkpod import APP_LABEL, APP_LABEL_VALUE, pod_check_index
from kuberhealthy.records.kinds import Kind

logger = logging.getLogger(__name__)

FOREIGN_EVERY = 10  # passes between looks for checker pods our pod cache does not select
FOREIGN_SELECTOR = f"{APP_LABEL}!={APP_LABEL_VALUE}"  # with a check's label, without our app label
LIST_TIMEOUT = 10.0  # seconds
MIN_CHECK_POD_AGE = 30.0  # seconds: the count-based clean-up leaves a just-finished pod this long
FINISHED_PHASES = ("Succeeded", "Failed")


# --- pure selection logic ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Doomed:
    """An object selected for deletion, with the uid to guard the delete and why it goes."""

    namespace: str
    name: str
    uid: str
    reason: str

    @classmethod
    def of(cls, obj: Obj, reason: str) -> Doomed:
        meta = obj.get("metadata") or {}
        return cls(str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or ""),
                   reason)


@dataclass(frozen=True)
class Limits:
    """The reaper's limits (seconds, counts), as configured (their defaults are Config's)."""

    max_completed_pods: int
    max_error_pods: int
    max_pod_age: float
    max_khjob_age: float

    @classmethod
    def from_config(cls, config: Config) -> Limits:
        return cls(max_completed_pods=config.max_completed_pod_count,
                   max_error_pods=config.max_error_pod_count,
                   max_pod_age=config.max_check_pod_age,
                   max_khjob_age=config.max_khjob_age)


def _created(obj: Obj) -> float | None:
    return parse_time((obj.get("metadata") or {}).get("creationTimestamp"))


def pod_finished_at(pod: Obj) -> float | None:
    """When a finished pod finished (see the module docstring for the fallbacks)."""
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    finished = [parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
                for cs in statuses]
    if statuses and all(t is not None for t in finished):
        return max(t for t in finished if t is not None)
    conditions = status.get("conditions") or []
    transitions = [t for t in (parse_time(c.get("lastTransitionTime")) for c in conditions) if t is not None]
    if transitions:
        return max(transitions)
    return parse_time(status.get("startTime")) or _created(pod)


def _newest_first(pod: Obj) -> tuple[float, float, str]:
    # creationTimestamp has whole-second precision: break ties by finish time, then by name
    # (checker pods are named <check>-<unix seconds>).
    return (_created(pod) or 0.0, pod_finished_at(pod) or 0.0, str((pod.get("metadata") or {}).get("name")))


def pods_to_reap(pods: Iterable[Obj], now: float, limits: Limits) -> list[Doomed]:
    """Finished checker pods to delete, given every checker pod we know of and the wall-clock time."""
    groups: dict[tuple[str, str, str], list[Obj]] = defaultdict(list)
    for pod in pods:
        meta = pod.get("metadata") or {}
        phase = (pod.get("status") or {}).get("phase")
        checks = pod_check_index(pod)
        if phase not in FINISHED_PHASES or not checks or meta.get("deletionTimestamp"):
            continue
        groups[(str(meta.get("namespace") or ""), checks[0], str(phase))].append(pod)

    doomed: list[Doomed] = []
    for (_ns, _check, phase), members in sorted(groups.items()):
        keep = limits.max_completed_pods if phase == "Succeeded" else limits.max_error_pods
        setting = "maxCompletedPodCount" if phase == "Succeeded" else "maxErrorPodCount"
        for rank, pod in enumerate(sorted(members, key=_newest_first, reverse=True)):
            finished = pod_finished_at(pod)
            if finished is None:
                continue
            age = now - finished
            if age > limits.max_pod_age:
                doomed.append(Doomed.of(pod, f"{phase} {age:.0f}s ago, older than maxCheckPodAge "
                                             f"({limits.max_pod_age:.0f}s)"))
            elif rank >= keep and age >= MIN_CHECK_POD_AGE:
                doomed.append(Doomed.of(pod, f"{phase}, beyond the newest {keep} ({setting})"))
    return doomed


def khjobs_to_reap(jobs: Iterable[Obj], now: float, limits: Limits) -> list[Doomed]:
    """Completed khjobs created more than maxKHJobAge ago."""
    doomed: list[Doomed] = []
    for job in jobs:
        created = _created(job)
        if (job.get("spec") or {}).get("phase") != "Completed" or created is None:
            continue
        if (job.get("metadata") or {}).get("deletionTimestamp"):
            continue
        age = now - created
        if age > limits.max_khjob_age:
            doomed.append(Doomed.of(job, f"Completed, created {age:.0f}s ago, older than maxKHJobAge "
                                         f"({limits.max_khjob_age:.0f}s)"))
    return doomed


def orphan_states(states: Iterable[Obj], *owner_keys: set[str]) -> list[Doomed]:
    """State objects whose `namespace/name` is the key of no check that keeps its state there."""
    return [Doomed.of(s, "no khcheck or khjob of the same name") for s in states
            if not any(key_of(s) in keys for keys in owner_keys)
            and not (s.get("metadata") or {}).get("deletionTimestamp")]


# --- the threads ------------------------------------------------------------------------------------


class _Periodic(PeriodicThread):
    """One named thread calling reap_once() every `interval` seconds until stop()."""

    thread_name = "kh-reaper"

    def __init__(self, interval: float) -> None:
        super().__init__(self.thread_name, interval)

    def tick(self) -> None:
        self.reap_once()

    def reap_once(self) -> list[Doomed]:
        raise NotImplementedError

    def _delete(self, services: ReaperNeeds, res: Resource, d: Doomed) -> bool:
        try:
            gone = services.resources.delete(res, d.namespace, d.name, uid=d.uid or None)
        except ApiError as e:
            logger.warning("%s: could not delete %s %s/%s: %s", self.thread_name, res.plural, d.namespace,
                           d.name, e)
            return False
        if gone:
            logger.info("%s: deleted %s %s/%s (%s)", self.thread_name, res.plural, d.namespace, d.name,
                        d.reason)
        return gone


class CheckReaper(_Periodic):
    """Deletes finished checker pods and completed khjobs (see the module docstring)."""

    thread_name = "kh-check-reaper"

    def __init__(self, services: ReaperNeeds, now: Callable[[], float] = time.time,
                 interval: float | None = None) -> None:
        super().__init__(services.config.check_reaper_run_interval if interval is None else interval)
        self.services = services
        self.now = now  # wall clock: ages are measured against API timestamps
        self.limits = Limits.from_config(services.config)
        self._passes = 0

    def _foreign_pods(self) -> list[Obj]:
        """Every FOREIGN_EVERY passes, one list per kind's pod label of the checker pods our pod cache does
        not select (labelled as a check's, not with our app label: left by upstream v3 before a move to
        this daemon); none on the other passes. The pod cache stays ours alone."""
        self._passes += 1
        if self._passes % FOREIGN_EVERY != 1:
            return []
        found: list[Obj] = []
        namespace = self.services.config.target_namespace or None
        for label in sorted({kind.pod_label for kind in self.services.kinds}):
            try:
                items, _ = self.services.resources.list(PODS, namespace, f"{label},{FOREIGN_SELECTOR}",
                                                        timeout=LIST_TIMEOUT)
            except ApiError as e:
                logger.warning("%s: cannot list checker pods left by others: %s", self.thread_name, e)
                continue
            found.extend(items)
        return found

    def start(self) -> None:
        lim = self.limits
        logger.info("%s: keeping %d Succeeded and %d Failed pods per check, pods up to %.0fs, "
                    "completed khjobs up to %.0fs", self.thread_name, lim.max_completed_pods,
                    lim.max_error_pods, lim.max_pod_age, lim.max_khjob_age)
        super().start()

    def reap_once(self) -> list[Doomed]:
        """One pass over the caches; returns what was deleted."""
        s = self.services
        deleted: list[Doomed] = []
        now = self.now()
        if s.pods.synced.is_set():
            for d in pods_to_reap([*s.pods.list(), *self._foreign_pods()], now, self.limits):
                if self._stop.is_set():
                    return deleted
                if self._delete(s, PODS, d):
                    deleted.append(d)
        for kind in s.kinds:
            if not kind.runs_once or not kind.checks.synced.is_set():
                continue
            for d in khjobs_to_reap(kind.checks.list(), now, self.limits):
                if self._stop.is_set():
                    return deleted
                if self._delete(s, kind.resource, d):
                    deleted.append(d)
        return deleted


class StateReaper(_Periodic):
    """Deletes khstates left behind by deleted khchecks and khjobs (see the module docstring)."""

    thread_name = "kh-state-reaper"

    def __init__(self, services: ReaperNeeds, interval: float | None = None) -> None:
        super().__init__(services.config.state_reaper_interval if interval is None else interval)
        self.services = services

    def reap_once(self) -> list[Doomed]:
        """One pass: candidates from the caches, each confirmed against the API; returns what was deleted."""
        s = self.services
        deleted: list[Doomed] = []
        stores: dict[str, tuple[Resource, Cache, list[Kind]]] = {}  # state resource -> its cache and owners
        for kind in s.kinds:
            if kind.state_resource is not None:
                entry = stores.setdefault(kind.state_resource.plural, (kind.state_resource, kind.states, []))
                entry[2].append(kind)
        for res, states, owners in stores.values():
            if not all(c.synced.is_set() for c in (states, *(k.checks for k in owners))):
                logger.debug("%s: caches not synced yet; skipping this cycle", self.thread_name)
                continue
            keys = [{key_of(o) for o in k.checks.list()} for k in owners]
            for d in orphan_states(states.list(), *keys):
                if self._stop.is_set():
                    break
                if self._confirmed_orphan(d, owners) and self._delete(s, res, d):
                    deleted.append(d)
        return deleted

    def _confirmed_orphan(self, d: Doomed, owners: list[Kind]) -> bool:
        """True only when the API itself says no check of those kinds has that name."""
        for kind in owners:
            try:
                self.services.resources.get(kind.resource, d.namespace, d.name)
            except NotFound:
                continue
            except ApiError as e:
                logger.warning("%s: cannot confirm state %s/%s is orphaned (%s); keeping it",
                               self.thread_name, d.namespace, d.name, e)
                return False
            logger.debug("%s: %s %s/%s exists (cache lag); keeping its state", self.thread_name,
                         kind.resource.plural, d.namespace, d.name)
            return False
        return True
