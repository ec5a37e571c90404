"""Leader election on a coordination.k8s.io/v1 Lease, with a real stop and release.

Why our own: the client's `leaderelection` package cannot stop or release a lease, times with the
wall clock and calls sys.exit. Here:
  * `decide()` is pure: given what we last saw of the Lease and the monotonic time we saw it change,
    it says create / acquire / renew / wait. Expiry is judged by *our* monotonic clock since the
    record last changed (never by comparing another machine's wall clock), as client-go does.
  * Writes carry the resourceVersion they read, so a 409 means another replica won the race.
  * The leader steps down when it has not renewed for `renew_deadline`, which is shorter than
    `lease_duration`, so it stops its checks before anyone else may take over.
  * stop() releases the Lease (holder cleared). Every replica also watches the one Lease (when given
    a `watch`): a standby tries at once when the Lease is freed, instead of at its next retry, so the
    running standby takes over a released Lease in milliseconds, before a replacement pod has even
    started. The watch only wakes the loop (the decision still comes from a fresh GET), and only for
    changes that matter: a free Lease, or, while leading, another holder. Expiry is still found by
    the retryPeriod loop (an expiry makes no event).
  * A replica that loses the lease keeps contending for as long as it runs.
"""
from __future__ import annotations

import datetime as dt
import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kuberhealthy.base.config import LeaderElection
from kuberhealthy.base.errors import ApiError, Conflict, NotFound
from kuberhealthy.base.threads import PeriodicThread
from kuberhealthy.base.times import format_micro_time, utcnow
from kuberhealthy.kube import LEASES, Obj, Resources
from kuberhealthy.kube.protocols import Listener

logger = logging.getLogger(__name__)


class Action(enum.Enum):
    CREATE = "create"  # no Lease exists
    ACQUIRE = "acquire"  # free (no holder) or expired: take it
    RENEW = "renew"  # ours: renew it
    WAIT = "wait"  # someone else holds a live lease


@dataclass(frozen=True)
class Record:
    """The part of a Lease that tells whether its holder is alive."""

    holder: str
    renew_time: str
    transitions: int
    duration: float

    @classmethod
    def of(cls, lease: Obj) -> Record:
        spec = lease.get("spec") or {}
        return cls(holder=str(spec.get("holderIdentity") or ""), renew_time=str(spec.get("renewTime") or ""),
                   transitions=int(spec.get("leaseTransitions") or 0),
                   duration=float(spec.get("leaseDurationSeconds") or 0))


def decide(record: Record | None, observed_at: float, now: float, identity: str, lease_duration: float) -> Action:
    """What to do next, from the Lease as last read and when (monotonic) its record last changed."""
    if record is None:
        return Action.CREATE
    if record.holder == identity:
        return Action.RENEW
    if not record.holder:
        return Action.ACQUIRE
    ttl = record.duration if record.duration > 0 else lease_duration
    if now - observed_at >= ttl:
        return Action.ACQUIRE
    return Action.WAIT


@dataclass(frozen=True)
class Candidacy:
    """Who contends for which Lease, by which rules: the Lease's namespace, this replica's identity (its
    pod name) and the leaderElection settings (the Lease's name and timings)."""

    namespace: str
    identity: str
    settings: LeaderElection


class LeaseWatch(Protocol):
    """What the elector needs of a cache of its one Lease (kube.reflector.Reflector)."""

    def add_listener(self, fn: Listener) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def join(self, timeout: float | None = None) -> None: ...


class LeaderElector(PeriodicThread):
    """One thread contending for the Lease; calls on_started / on_stopped on leadership changes."""

    def __init__(self, resources: Resources, candidacy: Candidacy,
                 on_started: Callable[[], None], on_stopped: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], dt.datetime] = utcnow, watch: LeaseWatch | None = None) -> None:
        super().__init__("kh-leader-elector", candidacy.settings.retry_period, tick_at_start=True)
        self._res = resources
        self._ns = candidacy.namespace
        self.identity = candidacy.identity
        self._settings = candidacy.settings
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._leading = False
        self._holder = ""
        self._record: Record | None = None
        self._observed_at = clock()
        self._last_renew = 0.0
        # Each Lease call is bounded by the retry period and, while leading, by half of what is left of
        # the renew deadline: a hung connection cannot keep this replica leading past renewDeadline
        # (plus one retryPeriod), which is shorter than leaseDuration.
        self._call_timeout = candidacy.settings.retry_period
        self._wake = threading.Event()  # set by the Lease watch (or stop): try now, not at the next retry
        self._watch = watch
        if watch is not None:
            watch.add_listener(self._lease_changed)

    # --- queries ---------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        with self._lock:
            return self._leading

    def holder(self) -> str:
        with self._lock:
            return self._holder

    # --- the loop ----------------------------------------------------------------------------------

    def start(self) -> None:
        if self._watch is not None:
            self._watch.start()
        super().start()

    def stop(self) -> None:
        super().stop()
        self._wake.set()

    def _run(self) -> None:
        self._safe_tick()
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            self._safe_tick()
        self.finish()

    def _lease_changed(self, etype: str, obj: Obj, prev: Obj | None) -> None:
        """The Lease watch's listener (its thread): wake the loop for a freed Lease or a lost one."""
        if (obj.get("metadata") or {}).get("name") != self._settings.lease_name:
            return
        holder = "" if etype == "DELETED" else Record.of(obj).holder
        if not holder or (holder != self.identity and self.is_leader()):
            self._wake.set()

    def tick(self) -> None:
        self.try_once()

    def tick_failed(self) -> None:
        self._renew_failed()  # keep contending whatever happens; the next try starts fresh

    def finish(self) -> None:
        self._release()
        if self._watch is not None:
            self._watch.stop()
            self._watch.join(self._settings.retry_period)

    def try_once(self) -> Action:
        """Read the Lease, decide, act. Public so tests can step the elector without a thread."""
        name = self._settings.lease_name
        timeout = self._settings.retry_period
        if self.is_leader():
            left = self._settings.renew_deadline - (self._clock() - self._last_renew)
            if left <= 0:
                logger.warning("Could not renew Lease within %.1fs; stepping down", self._settings.renew_deadline)
                self._set_leading(False)
            else:
                timeout = min(timeout, left / 2)  # the GET and the PUT both fit before the deadline
        self._call_timeout = max(0.2, timeout)
        try:
            lease: Obj | None = self._res.get(LEASES, self._ns, name, timeout=self._call_timeout)
        except NotFound:
            lease = None
        except ApiError as e:
            logger.warning("Cannot read Lease %s/%s: %s", self._ns, name, e)
            self._renew_failed()
            return Action.WAIT
        record = Record.of(lease) if lease is not None else None
        now = self._clock()
        if record != self._record:
            self._record, self._observed_at = record, now
        action = decide(record, self._observed_at, now, self.identity, self._settings.lease_duration)
        with self._lock:
            self._holder = record.holder if record else ""
        if action is Action.WAIT:
            if self.is_leader():  # someone else holds it now: we lost it
                logger.warning("Lease %s/%s is held by %s; stepping down", self._ns, name, record and record.holder)
                self._set_leading(False)
            return action
        try:
            written = self._write(action, lease)
        except Conflict:
            logger.info("Lost the race for Lease %s/%s", self._ns, name)
            self._renew_failed()
            return Action.WAIT
        except ApiError as e:
            logger.warning("Cannot %s Lease %s/%s: %s", action.value, self._ns, name, e)
            self._renew_failed()
            return Action.WAIT
        self._record, self._observed_at = Record.of(written), self._clock()
        self._last_renew = self._clock()
        with self._lock:
            self._holder = self.identity
        if not self.is_leader():
            logger.info("Became leader (Lease %s/%s, identity %s)", self._ns, name, self.identity)
            self._set_leading(True)
        return action

    def _write(self, action: Action, lease: Obj | None) -> Obj:
        now = format_micro_time(self._wall())
        duration = round(self._settings.lease_duration)
        if action is Action.CREATE or lease is None:
            return self._res.create(LEASES, self._ns, timeout=self._call_timeout, body={
                "apiVersion": LEASES.api_version, "kind": "Lease",
                "metadata": {"name": self._settings.lease_name, "namespace": self._ns},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": duration,
                         "acquireTime": now, "renewTime": now, "leaseTransitions": 0}})
        spec = lease.setdefault("spec", {})
        if action is Action.ACQUIRE:
            spec["holderIdentity"] = self.identity
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec["renewTime"] = now
        spec["leaseDurationSeconds"] = duration
        return self._res.replace(LEASES, self._ns, self._settings.lease_name, lease, timeout=self._call_timeout)

    def _renew_failed(self) -> None:
        if self.is_leader() and self._clock() - self._last_renew >= self._settings.renew_deadline:
            logger.warning("Could not renew Lease within %.1fs; stepping down", self._settings.renew_deadline)
            self._set_leading(False)

    def _set_leading(self, leading: bool) -> None:
        with self._lock:
            if self._leading == leading:
                return
            self._leading = leading
        (self._on_started if leading else self._on_stopped)()

    def _release(self) -> None:
        """On stop: give up leadership (callbacks first: checks stop before the Lease is freed)."""
        was_leader = self.is_leader()
        self._set_leading(False)
        if not was_leader:
            return
        name = self._settings.lease_name
        try:
            lease = self._res.get(LEASES, self._ns, name)
            if Record.of(lease).holder != self.identity:
                return
            lease["spec"]["holderIdentity"] = ""
            lease["spec"]["leaseDurationSeconds"] = 1
            lease["spec"]["renewTime"] = format_micro_time(self._wall())
            self._res.replace(LEASES, self._ns, name, lease)
            with self._lock:
                self._holder = ""
            logger.info("Released Lease %s/%s", self._ns, name)
        except ApiError as e:
            logger.warning("Could not release Lease %s/%s: %s", self._ns, name, e)


class ForcedLeader(PeriodicThread):
    """enableForceMaster: always the leader, and it never writes the Lease.

    CurrentMaster is still "the Lease holder" (as v2 computed it independently of force-master): this
    part reads the Lease every retryPeriod and reports its holder, or itself when nobody holds one.
    """

    def __init__(self, resources: Resources, candidacy: Candidacy,
                 on_started: Callable[[], None], on_stopped: Callable[[], None]) -> None:
        super().__init__("kh-forced-leader", candidacy.settings.retry_period, tick_at_start=True)
        self._res = resources
        self._ns = candidacy.namespace
        self.identity = candidacy.identity
        self._settings = candidacy.settings
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._leading = False
        self._observed = ""

    def is_leader(self) -> bool:
        return self._leading

    def holder(self) -> str:
        return self._observed or self.identity

    def start(self) -> None:
        self._leading = True
        self._on_started()
        super().start()

    def stop(self) -> None:
        super().stop()
        if self._leading:
            self._leading = False
            self._on_stopped()

    def observe(self) -> None:
        try:
            lease = self._res.get(LEASES, self._ns, self._settings.lease_name, timeout=self._settings.retry_period)
            self._observed = Record.of(lease).holder
        except NotFound:
            self._observed = ""
        except ApiError as e:
            logger.debug("Cannot read Lease %s/%s: %s", self._ns, self._settings.lease_name, e)

    def tick(self) -> None:
        self.observe()
