"""Sorting reports before they cost anything: does the report name a run the caches know?

A report that names a run the caches know (a pod in the pod cache carrying its `kh-run-uuid` or its
source address, or a khstate whose open claim names the uuid) takes a report slot and goes through
the caller rules (admission.py, caller.py). Anything else is a stranger's until proven
otherwise, and proving it must be cheap, because anyone who can open a connection can send one:

  * while the caches cannot be behind, it is refused at once (400, v2's text), with no API request;
  * while they may be behind, it waits in a small pool (POOL requests at once, POOL_WAIT seconds each,
    no report slot held) for the caches to name its run; when the pool is full it gets 503 with
    `Retry-After: 1` at once;
  * reads of the API server for such reports (rescue reads: pods by run-uuid label, or by pod IP, never
    an unfiltered list) are at most one per RESCUE_EVERY seconds for the whole process, and concurrent
    askers of the same run share one read's answer (single-flight).

"The caches may be behind" means one of:
  * the pod or khstate cache is not current (its watch failed and has not come back yet);
  * for a report by address only: the pod cache holds a checker pod created less than RECENT seconds
    ago that has no pod IP yet (a real kubelet writes the IP on its next status sync, after the
    container may already have started and reported), and its khstate either claims it by name (our
    runner's claim) or names another run (this replica's khstate cache trails the claim). A pod its
    khstate names without naming the pod (written by hand, or by v2) does not count; nor does any
    young pod for a report naming a uuid, which the pod's label already answers;
  * the khstate cache shows a run claimed less than RECENT seconds ago (first seen by this replica)
    whose pod the pod cache does not hold with a pod IP yet: the runner claims a run before it creates
    the pod, so a pod that starts and reports faster than the pod watch delivers it (the simulated
    kubelet does, in milliseconds) is still covered. Once the pod is in the cache (with its uuid label)
    this counts only for reports by address, and not for a pod stuck on its image (ErrImagePull and
    the like), which never reports: a check with a bad image must not turn strangers' 400s into 503s.
    Only claims naming their pod count (our runner's): a khstate written by hand or by v2 does not
    make every stranger wait.
Why from the caches and not from the runner's memory: only the leader runs checks but every replica
answers reports, and the claim and the pod reach every replica's caches by their watches. The other
sign one might use, a young pod whose run the khstate cache does not name yet (a standby's khstate
cache can trail the leader's claim), is deliberately not used: such a pod is in the pod cache with its
uuid and, once it has one, its IP, so its own reports are already "known" by both ways of naming a run,
and the claim lag is the caller rules' to wait out (finder.py waits for the claim, then reads the
khstate). Counting it would only turn strangers' 400s into 503s whenever a pod outlives its run's claim.
What is not covered: both watches silently stalled (still "current") while a run's claim and pod are
made and its checker reports; a stream silent that long is replaced within 30 s (reflector.py).

Pod creation times are the API server's (`creationTimestamp`) against this process's wall clock: a skew
of s seconds moves the 30 s window by s, which is harmless either way (longer: more 503s for
strangers; shorter: a genuine report not yet seen gets 400 only if its pod is still without an IP
after 30 s minus the skew).

What this module does not do: decide who may report (caller.py), take a report slot (admission.py, its
only user) or answer HTTP (routes.py).
"""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeAlias

from kuberhealthy.base.errors import ApiError
from kuberhealthy.base.notify import Notifier, Topic
from kuberhealthy.base.times import parse_time
from kuberhealthy.kube import Cache, Obj, key_of
from kuberhealthy.records.checkpod import pod_check_index, pod_ip_index, pod_uuid_index
from kuberhealthy.records.khstate import RunClaim
from kuberhealthy.records.kinds import Kinds, ident
from kuberhealthy.run.podstate import start_failure
from kuberhealthy.web.report.naming import FINISHED, FallbackRead, UnknownCaller, named_by, not_found

RECENT = 30.0  # seconds a checker pod without an IP counts as "the caches may be behind"
ABSENT_GRACE = 10.0  # seconds after a claim its pod may still be missing from a current pod cache
CLAIMED_AT = re.compile(r"-(\d{1,12})(?:-[a-z0-9]{5})?$")  # the unix seconds in a run's pod name
POOL = 4  # reports waiting for the caches at once
POOL_WAIT = 1.0  # seconds one of them waits
RESCUE_EVERY = 1.0  # seconds between rescue reads, for the whole process
RESCUE_AFTER = 0.3  # seconds of its wait a report gives the caches before it asks for a rescue read
TOPIC: Topic = ("kh-report-triage", "behind", "")  # notified when a young pod gets its IP or goes


@dataclass(frozen=True)
class Known:
    """The caches (or a rescue read: `pods`) name the report's run: the caller rules decide."""
    pods: list[Obj] | None = None


@dataclass(frozen=True)
class Unknown:
    """No run of ours is named, and the caches are not behind: 400 with `text`."""
    text: str


@dataclass(frozen=True)
class Behind:
    """No run is named yet, but the caches may be behind: 503 + Retry-After. `full`: the pool was full."""
    text: str
    full: bool = False


Sorted: TypeAlias = Known | Unknown | Behind


@dataclass
class _Flight:
    done: threading.Event = field(default_factory=threading.Event)
    pods: list[Obj] | None = None  # None: the read failed


class RescueReads:
    """At most one read per `every` seconds for the process; askers of one (uuid, ip) share a read."""

    def __init__(self, read: FallbackRead, every: float = RESCUE_EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self._every = every
        self._clock = clock
        self._lock = threading.Lock()
        self._flights: dict[tuple[str | None, str | None], _Flight] = {}
        self._last: float | None = None
        self.reads = 0  # reads made
        self.shared = 0  # askers served by another asker's read

    def ask(self, run_uuid: str | None, ip: str | None, timeout: float) -> list[Obj] | None:
        """The pods the API server has for this caller; None when no read may be made now or it failed."""
        key = (run_uuid, ip)
        with self._lock:
            flight = self._flights.get(key)
            mine = flight is None
            if flight is None:
                now = self._clock()
                if self._last is not None and now - self._last < self._every:
                    return None
                self._last = now
                self.reads += 1
                flight = self._flights[key] = _Flight()
            else:
                self.shared += 1
        if not mine:
            flight.done.wait(max(0.0, timeout))
            return flight.pods
        try:
            flight.pods = self._read(run_uuid, ip, max(0.1, timeout))
        except ApiError:
            flight.pods = None
        finally:
            with self._lock:
                del self._flights[key]
            flight.done.set()
        return flight.pods


@dataclass(frozen=True)
class TriageLimits:
    """How long a young pod or a fresh claim counts as "the caches may be behind", and the bounds of the
    pool and of the rescue reads (module docstring)."""
    recent: float = RECENT
    pool: int = POOL
    pool_wait: float = POOL_WAIT
    rescue_every: float = RESCUE_EVERY
    rescue_after: float = RESCUE_AFTER


class Triage:
    """Sorts reports by what the caches know (module docstring); one per web app."""

    def __init__(self, pods: Cache, kinds: Kinds, notifier: Notifier, rescue: FallbackRead | None,
                 limits: TriageLimits | None = None, *,
                 wall: Callable[[], float] = time.time, clock: Callable[[], float] = time.monotonic) -> None:
        limits = limits or TriageLimits()
        self._pods = pods
        self._kinds = kinds
        states: dict[int, tuple[str, Cache]] = {}  # every kind's state cache once, with its ident prefix
        for kind in kinds:
            states.setdefault(id(kind.states), (kind.prefix, kind.states))
        self._states = list(states.values())
        self._notifier = notifier
        self._recent = limits.recent
        self._pool = threading.BoundedSemaphore(limits.pool)
        self._pool_wait = limits.pool_wait
        self._rescue_after = limits.rescue_after
        self._wall = wall
        self._clock = clock
        self.rescue = RescueReads(rescue, limits.rescue_every, clock) if rescue is not None else None
        self._lock = threading.Lock()
        self._claims: dict[str, str] = {}  # check ident -> the uuid of its state's open claim
        self._claimed: dict[str, set[str]] = {}  # open claim's uuid -> check idents
        self._young: dict[str, float] = {}  # checker pod key -> created (unix s), while it has no IP
        self._unseen: dict[str, tuple[float, str]] = {}  # uuid of a claim naming its pod -> (first seen
        # (monotonic), "<namespace>/<pod>"), until
        # the pod cache holds a pod of that run with an IP
        self.pool_full = 0  # reports answered 503 at once because the pool was full
        for prefix, cache in self._states:
            cache.add_listener(self._state_listener(prefix))
        pods.add_listener(self._on_pod)
        for prefix, cache in self._states:  # what the caches hold already (a change meanwhile is applied twice)
            for state in cache.list():
                self._on_state(prefix, "ADDED", state, None)
        for pod in pods.list():
            self._on_pod("ADDED", pod, None)

    # --- what the caches say --------------------------------------------------------------------------

    def _state_listener(self, prefix: str) -> Callable[[str, Obj, Obj | None], None]:
        def changed(etype: str, obj: Obj, prev: Obj | None) -> None:
            self._on_state(prefix, etype, obj, prev)
        return changed

    def _states_current(self) -> bool:
        return all(cache.is_current() for _, cache in self._states)

    def _on_state(self, prefix: str, etype: str, obj: Obj, _prev: Obj | None) -> None:
        meta = obj.get("metadata") or {}
        key = ident(str(meta.get("namespace") or ""), str(meta.get("name") or ""), prefix)
        claim = RunClaim.of(obj)
        run = claim.uuid if etype != "DELETED" and not claim.finished else ""
        with self._lock:
            old = self._claims.pop(key, "")
            if old:
                keys = self._claimed.get(old, set())
                keys.discard(key)
                if not keys:
                    self._claimed.pop(old, None)
                if old != run:
                    self._unseen.pop(old, None)
            if run:
                self._claims[key] = run
                self._claimed.setdefault(run, set()).add(key)
                # Under the lock, after the claim is noted: a pod listener running meanwhile either finds
                # the claim or its pod is in the cache already, so nothing stays unseen by a race.
                if (run != old and claim.pod and self._claimed_recently(claim.pod)
                        and not any(pod_ip_index(p) for p in self._pods.by_index("uuid", run))):
                    self._unseen[run] = (self._clock(), f"{key.split('/', 1)[0]}/{claim.pod}")

    def _claimed_recently(self, pod_name: str) -> bool:
        """Whether a claim naming `pod_name` was made less than RECENT s ago, by the unix time the runner
        put in the name (`<check>-<unix>` or `<check>-<unix>-<5 random>`). A claim left by a run that
        ended long ago (its daemon stopped mid-run), seen when this replica's caches first fill, is no
        sign that a report is on its way."""
        match = CLAIMED_AT.search(pod_name)
        return match is not None and int(match.group(1)) > self._wall() - self._recent - 1

    def _on_pod(self, etype: str, obj: Obj, _prev: Obj | None) -> None:
        key = key_of(obj)
        created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
        waiting = (etype != "DELETED" and created is not None and not pod_ip_index(obj)
                   and (obj.get("status") or {}).get("phase") not in FINISHED)
        runs = pod_uuid_index(obj) if etype != "DELETED" and pod_ip_index(obj) else []
        with self._lock:
            was = self._young.pop(key, None) is not None
            if waiting and created is not None and created > self._wall() - self._recent:
                self._young[key] = created
            seen = [run for run in runs if self._unseen.pop(run, None) is not None]
        if (was and not waiting) or seen:
            self._notifier.notify([TOPIC])

    def known(self, run_uuid: str | None, ip: str | None) -> bool:
        """A pod in the cache carries the uuid (or the address, not finished), or an open claim names it."""
        if run_uuid:
            if self._pods.by_index("uuid", run_uuid):
                return True
            with self._lock:
                return run_uuid in self._claimed
        assert ip is not None
        return any((p.get("status") or {}).get("phase") not in FINISHED for p in self._pods.by_index("ip", ip))

    def behind(self, by_address: bool = False) -> bool:
        """Whether the caches may be behind what the API server has (module docstring). A young pod
        without an IP counts only for a report by address (a report naming a uuid is known by the pod's
        label already), and only while a run of ours claims it, or its khstate has not caught up with it."""
        if not self._pods.is_current() or not self._states_current():
            return True
        since, claimed_since = self._wall() - self._recent, self._clock() - self._recent
        with self._lock:
            for key in [k for k, created in self._young.items() if created <= since]:
                del self._young[key]
            for run in [r for r, (seen, _) in self._unseen.items() if seen <= claimed_since]:
                del self._unseen[run]
            unseen = list(self._unseen)
            young = list(self._young) if by_address else []
        return any(self._unseen_counts(run, by_address) for run in unseen) or any(self._awaited(k) for k in young)

    def _unseen_counts(self, run: str, by_address: bool) -> bool:
        """Whether a run claimed moments ago, whose pod the cache does not hold with an IP, may still
        send the report being sorted: while its pod is not in the cache at all, any report may be its,
        for ABSENT_GRACE s after the claim (a run creates its pod right after claiming it: a claim whose
        pod a current cache still lacks by then never got one, e.g. its daemon stopped); once it is (with
        the run's uuid label), only one by address, and only while the pod may still start (not stuck
        on its image: ErrImagePull and the like never report)."""
        pods = self._pods.by_index("uuid", run)
        if not pods:
            with self._lock:
                entry = self._unseen.get(run)
            match = CLAIMED_AT.search(entry[1]) if entry is not None else None
            return match is not None and self._wall() < int(match.group(1)) + 1 + ABSENT_GRACE
        return by_address and any(not pod_ip_index(p) and start_failure(p) is None for p in pods)

    def _awaited(self, key: str) -> bool:
        """Whether young pod `key` (no IP yet) may be a run's that will report: its khstate's open claim
        names it, or names another run (this replica's khstate cache may trail the claim). A pod whose
        khstate names its run without naming the pod (written by hand or by v2) does not count: else
        every such pod would turn strangers' 400s into 503s for half a minute."""
        namespace, _, name = key.partition("/")
        pod = self._pods.get(namespace, name)
        if pod is None:
            return False
        runs, checks = pod_uuid_index(pod), pod_check_index(pod)
        if not runs or not checks:
            return False
        _, check_ns, check = self._kinds.split(checks[0])
        claim = RunClaim.of(self._kinds.state_cache(checks[0]).get(check_ns, check))
        if start_failure(pod) is not None:
            return False  # stuck on its image: it will never report
        if claim.uuid != runs[0]:
            return True
        return claim.pod == name and not claim.finished

    def may_be_new(self, namespace: str, name: str) -> bool:
        """Whether pod `namespace/name` may exist while the pod cache does not hold it yet: a cache is not
        current, or a claim seen less than RECENT s ago names it (a run's claim names its pod before the
        pod exists, fallback names too: runner.py) and no pod of its run has an IP in the cache yet. For a
        bearer token naming a pod (tokens.py): a made-up pod is not given a review while runs start."""
        if not self._pods.is_current() or not self._states_current():
            return True
        self.behind()  # drops the signs that have expired
        key = f"{namespace}/{name}"
        with self._lock:
            return any(key == pod for _, pod in self._unseen.values())

    # --- sorting a report -----------------------------------------------------------------------------

    def sort(self, run_uuid: str | None, remote: str, end: float) -> Sorted:
        """Known, Unknown (400) or Behind (503) for a report naming `run_uuid` (None: by its `remote`
        address); waits (in the pool, at most POOL_WAIT and until the monotonic `end`) only when Behind."""
        try:
            ip, selector = named_by(run_uuid, remote)
        except UnknownCaller as e:
            return Unknown(str(e))
        if self.known(run_uuid, ip):
            return Known()
        if not self.behind(by_address=run_uuid is None):
            return Unknown(not_found(selector))
        if not self._pool.acquire(blocking=False):
            with self._lock:
                self.pool_full += 1
            return Behind("too many reports are waiting for the caches; try again shortly", full=True)
        try:
            return self._settle(run_uuid, ip, selector, min(end, self._clock() + self._pool_wait))
        finally:
            self._pool.release()

    def _settle(self, run_uuid: str | None, ip: str | None, selector: str, end: float) -> Sorted:
        """In the pool: wait for the caches to name the run or to be current, with one rescue read."""
        def settled() -> Sorted | None:
            if self.known(run_uuid, ip):
                return Known()
            if not self.behind(by_address=run_uuid is None):
                return Unknown(not_found(selector))
            return None
        topics = [TOPIC, self._pods.topic("uuid", run_uuid) if run_uuid else self._pods.topic("ip", ip or "")]
        with self._notifier.waiter(*topics) as waiter:
            outcome = waiter.wait_for(settled, min(end, self._clock() + self._rescue_after), clock=self._clock)
            if outcome is not None:
                return outcome
            if self.rescue is not None:
                pods = self.rescue.ask(run_uuid, ip, end - self._clock())
                if pods and (run_uuid or any((p.get("status") or {}).get("phase") == "Running" for p in pods)):
                    return Known(pods)
                if pods is not None and run_uuid:
                    return Unknown(not_found(selector))  # a fresh read has no pod with this label
            outcome = waiter.wait_for(settled, end, clock=self._clock)
        return outcome or Behind("the caches may be behind the API server; try again shortly")
