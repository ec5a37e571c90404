"""The composition root: builds every long-lived part of the daemon and owns their start() and
stop(deadline). Replacing parts on a config reload is reconfigure.py's; nothing but daemon/ imports this.

Caches (reflectors) run on every replica: every replica serves `/` and accepts reports. The leader
elector runs on every replica; the controller starts check workers and reapers only while this
replica leads. Stop order matters for the contract's shutdown: stop runs (removing their pods) →
release the Lease → flush Influx → stop caches.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kuberhealthy.base.config import Config
from kuberhealthy.base.errors import ApiError, NotFound
from kuberhealthy.base.notify import Notifier
from kuberhealthy.base.osnames import name_this_thread
from kuberhealthy.base.threads import Deaths
from kuberhealthy.control.controller import Controller
from kuberhealthy.control.finalizers import Finalizers, wakeups
from kuberhealthy.control.leader import Candidacy, ForcedLeader, LeaderElector
from kuberhealthy.control.reaper import CheckReaper, StateReaper
from kuberhealthy.kube import (
    EVENTS,
    HEALTHCHECKS,
    KHCHECKS,
    KHJOBS,
    KHSTATES,
    LEASES,
    PODS,
    Kube,
    Obj,
    Reflector,
    Resources,
    Selection,
)
from kuberhealthy.kube.mappedcache import MappedCache
from kuberhealthy.kube.resources import PodLogFollow
from kuberhealthy.needs import CacheState, Part
from kuberhealthy.outputs.events import EventRecorder, ObjectRef
from kuberhealthy.outputs.heldreports import HeldReports
from kuberhealthy.outputs.influx import InfluxForwarder
from kuberhealthy.outputs.runstats import SchedulingMetrics
from kuberhealthy.outputs.schemacheck import SchemaCheck
from kuberhealthy.records import hcstate, kinds, migration
from kuberhealthy.records.checkpod import (
    CHECK_POD_SELECTOR,
    CHECK_POD_STORAGE,
    RUN_ID_LABEL,
    slim_pod,
)
from kuberhealthy.records.statestore import HealthCheckStore
from kuberhealthy.records.uptime import RollupBook
from kuberhealthy.records.v3lease import V3_LEASE_NAME, V3LeaseGate

logger = logging.getLogger(__name__)

OWNER_LOOKUP_TIMEOUT = 5.0  # seconds
Elector = LeaderElector | ForcedLeader


class Services:
    """The daemon's parts, wired together. Construct, start(), later stop(deadline)."""

    def __init__(self, config: Config, kube: Kube, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.kube = kube
        self.resources = Resources(kube)
        self.clock = clock
        self.notifier = Notifier()
        ns = config.target_namespace or None
        everything = Selection(ns)
        self.khchecks = Reflector(kube, KHCHECKS, everything, notifier=self.notifier, name="kh-reflector-khchecks")
        self.khstates = Reflector(kube, KHSTATES, everything, notifier=self.notifier, name="kh-reflector-khstates")
        self.khjobs = Reflector(kube, KHJOBS, everything, notifier=self.notifier, name="kh-reflector-khjobs")
        self.pods = Reflector(kube, PODS, Selection(ns, CHECK_POD_SELECTOR), notifier=self.notifier,
                              storage=CHECK_POD_STORAGE, name="kh-reflector-pods")
        # HealthChecks (Kuberhealthy v3's kind): optional, an install upgraded without their CRD runs on
        self.healthchecks = Reflector(kube, HEALTHCHECKS, everything, notifier=self.notifier,
                                      name="kh-reflector-healthchecks").optional(self._healthchecks_missing)
        # v3's own Lease: while another controller holds it, no HealthCheck runs here
        self.v3_leases = Reflector(kube, LEASES, Selection(config.pod_namespace,
                                                           field_selector=f"metadata.name={V3_LEASE_NAME}"),
                                   notifier=self.notifier, name="kh-reflector-v3-lease")
        self.reflectors = [self.khchecks, self.khstates, self.khjobs, self.pods, self.healthchecks]
        for cache, res in ((self.khchecks, KHCHECKS), (self.khstates, KHSTATES), (self.khjobs, KHJOBS),
                           (self.healthchecks, HEALTHCHECKS)):
            self.resources.on_written(res, cache.observe)  # our writes are in our caches at once
        self.hc_store = HealthCheckStore(self.healthchecks, self._state_not_kept)
        self.v3_gate = V3LeaseGate(self.v3_leases, config.pod_namespace, config.leader_election.lease_name,
                                   lambda: self.config.pod_name)
        self.kinds = kinds.standard(
            lambda: self.config, kinds.V2Caches(self.khchecks, self.khjobs, self.khstates),
            kinds.V3Parts(self.healthchecks, MappedCache(self.healthchecks, hcstate.view), self.hc_store,
                          self.v3_gate.reason, lambda obj: migration.pending(obj, self.khchecks)),
            superseded=lambda obj: migration.migrated(obj, self.healthchecks))
        self.deaths = Deaths()  # every thread of the daemon reports an unexpected end here
        for r in (*self.reflectors, self.v3_leases):
            r.supervised_by(self.deaths)
        self.fatal = threading.Event()  # set when a part died unexpectedly: the process must stop
        self.on_fatal: Callable[[], None] | None = None  # called once when that happens
        self.influx: InfluxForwarder | None = None  # when enableInflux is on
        self.influx_dropped_before = 0  # points dropped by forwarders replaced since start (reconfigure)
        self.stats = SchedulingMetrics()
        self.held = HeldReports(self.resources, lambda: self.config.pod_name)
        self.events = EventRecorder(self.resources, config.pod_name)  # every replica: reports are refused anywhere
        self.stuck_terminating: set[str] = set()  # checker pods already reported as stuck Terminating
        self.disrupted_in_a_row: dict[str, int] = {}  # per check ident: runs in a row the cluster disrupted
        self.rollups = RollupBook()  # uptime rollups: the memo and what waits for each check's next write
        self._owner_lock = threading.Lock()
        self._owner: tuple[bool, Obj | None] = (False, None)  # (looked up yet, ownerReference)
        self.controller: Controller | None = None
        self.elector: Elector | None = None
        self._parts: list[Part] = []  # started after the caches, stopped before them (reverse order)
        self._started = False
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None

    def add_part(self, part: Part) -> None:
        """Register a part to run with the daemon (its unexpected end stops the daemon)."""
        part.supervised_by(self.deaths)
        self._parts.append(part)

    def replace_part(self, old: Part, new: Part | None, timeout: float = 30.0) -> None:
        """Stop `old` (joined) and put `new` (started, if the services run) in its place."""
        index = self._parts.index(old)
        old.stop()
        old.join(timeout)
        if new is None:
            del self._parts[index]
            return
        new.supervised_by(self.deaths)
        self._parts[index] = new
        if self._started:
            new.start()

    def insert_part(self, part: Part) -> None:
        """Add a part that stops before the held reports but after everything else (Influx's place)."""
        part.supervised_by(self.deaths)
        self._parts.insert(3, part)
        if self._started:
            part.start()

    # --- queries used by the web layer --------------------------------------------------------------

    def current_master(self) -> str:
        """The Lease holder as this replica last saw it ("" when nobody holds it)."""
        return str(self.elector.holder()) if self.elector is not None else ""

    def is_leader(self) -> bool:
        return bool(self.elector.is_leader()) if self.elector is not None else False

    def owner_reference(self, namespace: str) -> Obj | None:
        """An ownerReference to this replica's own pod, for checker pods in its namespace.

        Looked up once (outside a cluster there is no such pod, and runs proceed without one). The
        lookup runs without holding the lock: a slow API server must not queue every run behind it.
        """
        if namespace != self.config.pod_namespace:
            return None
        with self._owner_lock:
            looked_up, owner = self._owner
        if looked_up:
            return owner
        try:
            pod = self.resources.get(PODS, self.config.pod_namespace, self.config.pod_name,
                                     timeout=OWNER_LOOKUP_TIMEOUT)
            meta = pod.get("metadata") or {}
            owner = {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"), "uid": meta.get("uid")}
        except NotFound:
            owner = None
        except ApiError as e:
            logger.warning("Cannot look up this replica's pod for ownerReferences: %s", e)
            return None
        with self._owner_lock:
            self._owner = (True, owner)
        return owner

    def read_checker_pods(self, run_uuid: str | None, ip: str | None, timeout: float) -> list[Obj]:
        """One bounded read of the checker pods with this run uuid label (or this Running pod IP).

        The report handler's fallback for a pod its cache has not seen: one label- or field-selected
        list, only on a cache miss, never a list per report.
        """
        ns = self.config.target_namespace or None
        if run_uuid:
            items, _ = self.resources.list(PODS, ns, f"{CHECK_POD_SELECTOR},{RUN_ID_LABEL}={run_uuid}",
                                           timeout=timeout)
        else:
            items, _ = self.resources.list(PODS, ns, CHECK_POD_SELECTOR, f"status.podIP={ip},status.phase=Running",
                                           timeout=timeout)
        return [slim_pod(o) for o in items]

    def read_checker_pod(self, namespace: str, name: str, timeout: float) -> Obj | None:
        """One bounded read of a pod the cache has not seen (a token's pod); None when it is gone."""
        try:
            return slim_pod(self.resources.get(PODS, namespace, name, timeout=timeout))
        except NotFound:
            return None

    def _healthchecks_missing(self, missing: bool) -> None:
        if missing:
            logger.warning("The HealthCheck CRD (healthchecks.kuberhealthy.github.io) is not installed: khchecks "
                           "run, HealthChecks cannot be created. Helm never upgrades CRDs: apply "
                           "helm/kuberhealthy/crds/kuberhealthy.github.io_healthchecks.yaml (kubectl apply -f) to "
                           "add it")
            self.events.state_not_kept(
                ObjectRef("Pod", self.config.pod_namespace, self.config.pod_name, "", "v1"),
                "The HealthCheck CRD is not installed: HealthChecks cannot run until it is. Helm never upgrades "
                "CRDs: kubectl apply -f the chart's crds/kuberhealthy.github.io_healthchecks.yaml")
        else:
            logger.info("The HealthCheck CRD is installed now: HealthChecks run")
        controller = self.controller
        if controller is not None:
            controller.kinds_changed()

    def _state_not_kept(self, hc: Obj, what: str) -> None:
        self.events.state_not_kept(ObjectRef.of(hc), what)

    def read_khstate(self, namespace: str, name: str, timeout: float) -> Obj | None:
        """One bounded read of a khstate (the report handler's, when the cache lags the run's claim)."""
        try:
            return self.resources.get(KHSTATES, namespace, name, timeout=timeout)
        except NotFound:
            return None

    def read_check_events(self, namespace: str, kind: str, name: str, limit: int, timeout: float) -> list[Obj]:
        """One bounded read of the Events about one check (`kind`: its involvedObject kind): at most
        `limit`, the first ones by name (an Event's name ends in its time), within `timeout` in all."""
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        items, _ = self.resources.list_bounded(EVENTS, namespace, field_selector=selector, max_items=limit,
                                               timeout=timeout)
        return items

    def follow_pod_log(self, namespace: str, pod: str, container: str | None, limit_bytes: int,
                       seconds: float) -> PodLogFollow:
        """A checker pod's log, followed: at most `limit_bytes`, for at most `seconds` (kube.PodLogFollow)."""
        return self.resources.follow_pod_log(namespace, pod, container, limit_bytes, seconds)

    def influx_points_dropped(self) -> int:
        """InfluxDB points given up on since start, by this forwarder and the ones it replaced."""
        influx = self.influx
        return self.influx_dropped_before + (influx.dropped_points() if influx is not None else 0)

    def cache_status(self) -> list[CacheState]:
        """(cache, current, seconds not current) for each cache: readiness body and metrics."""
        return [(r.plural, r.is_current(), r.stale_seconds()) for r in self.reflectors if not r.missing.is_set()]

    def ready(self) -> bool:
        """Every cache has synced once since start (an optional one whose CRD is missing is not waited
        for). It stays true through an API outage: every replica shares the API server, so pulling them
        all out of the Service would only drop reports."""
        return all(r.synced.is_set() or r.missing.is_set() for r in self.reflectors)

    # --- lifecycle ---------------------------------------------------------------------------------

    def start_caches(self) -> None:
        for r in (*self.reflectors, self.v3_leases):
            r.start()

    def wait_synced(self, timeout: float) -> bool:
        deadline = self.clock() + timeout

        def synced(r: Reflector) -> bool:
            """Synced, or known missing (an optional cache's CRD: looked at every half second)."""
            while not r.synced.is_set() and not r.missing.is_set():
                left = deadline - self.clock()
                if left <= 0:
                    return False
                r.synced.wait(min(0.5, left))
            return True
        return all(synced(r) for r in self.reflectors)

    def start(self) -> None:
        self.start_caches()
        for part in self._parts:
            part.start()
        self._started = True
        self._supervisor = threading.Thread(target=self._supervise, name="kh-supervisor", daemon=True)
        self._supervisor.start()

    def _supervise(self) -> None:
        """A thread that ended unexpectedly means the process must stop cleanly, never hang half-alive.

        Waits for a report (threads.Deaths), it does not poll; stop() wakes it to end."""
        name_this_thread()
        self.deaths.event.wait()
        self.check_deaths()

    def check_deaths(self) -> bool:
        """True (and fatal set, on_fatal called) when a thread ended while the services were not stopping."""
        dead = self.deaths.names()
        # Threads end only after stop() has set their stop events, which then do not report; a report
        # seen together with _stopping is a thread that failed during the shutdown itself.
        if not dead or self._stopping.is_set():
            return False
        logger.error("Thread(s) ended unexpectedly: %s; stopping", ", ".join(dead))
        self.fatal.set()
        if self.on_fatal is not None:
            self.on_fatal()
        return True

    def stop(self, timeout: float = 50.0) -> None:
        """Stop everything within `timeout` seconds: parts in reverse order, then the caches."""
        self._stopping.set()
        self.deaths.wake()
        deadline = self.clock() + timeout
        for part in reversed(self._parts):
            try:
                part.stop()
                part.join(max(0.1, deadline - self.clock()))
            except Exception:  # shutdown must go on whatever one part does
                logger.exception("Error stopping %s", type(part).__name__)
        for r in (*self.reflectors, self.v3_leases):
            r.stop()
        for r in (*self.reflectors, self.v3_leases):
            r.join(max(0.1, deadline - self.clock()))
        if self._supervisor is not None:
            self._supervisor.join(max(0.1, deadline - self.clock()))
        alive = [r.name for r in self.reflectors if r.is_alive()]
        if alive:
            logger.warning("Threads still running after stop: %s", ", ".join(alive))


def build(config: Config, kube: Kube) -> Services:
    """Wire the whole daemon: caches, elector (or forced leader), controller, leader-only parts, Influx."""
    services = Services(config, kube)
    services.add_part(services.events)  # stopped after everything that raises Events
    services.add_part(SchemaCheck(services.resources, services.events, config.target_namespace or config.pod_namespace,
                                  config.pod_namespace, config.pod_name))
    services.add_part(services.held)  # stopped last of the parts but Events: reports may arrive until the end
    if config.enable_influx:
        services.influx = InfluxForwarder(config)
        services.add_part(services.influx)

    finalizer_wake = wakeups(services)

    def leader_parts() -> list[Part]:
        return [CheckReaper(services), StateReaper(services), Finalizers(services, finalizer_wake)]

    controller = Controller(services, leader_parts)
    services.controller = controller
    services.v3_leases.add_listener(lambda *_: controller.kinds_changed())
    services.elector = make_elector(controller, services, config)
    # Started in this order, stopped in reverse: the controller stops its checks first, then the
    # elector releases the Lease, then Influx flushes.
    services.add_part(services.elector)
    services.add_part(controller)
    return services


def make_elector(controller: Controller, services: Services, config: Config) -> Elector:
    settings = config.leader_election
    candidacy = Candidacy(config.pod_namespace, config.pod_name, settings)
    if config.enable_force_master:
        return ForcedLeader(services.resources, candidacy, controller.became_leader, controller.lost_leadership)
    # The one Lease, watched: a standby takes a released Lease at once (leader.py). Not a cache that
    # readiness waits for: the decision is always a fresh GET.
    watch = Reflector(services.kube, LEASES,
                      Selection(config.pod_namespace, field_selector=f"metadata.name={settings.lease_name}"),
                      name="kh-lease-watch")
    return LeaderElector(services.resources, candidacy, controller.became_leader, controller.lost_leadership,
                         watch=watch)
