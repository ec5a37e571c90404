"""Builds every long-lived part of the daemon and owns their start() and stop(deadline).

Caches (reflectors) run on every replica: every replica serves `/` and accepts reports. The leader
elector runs on every replica; the controller starts check workers and reapers only while this
replica leads. Stop order matters for the contract's shutdown: stop runs (removing their pods) →
release the Lease → flush Influx → stop caches.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kuberhealthy.checkpod import APP_LABEL_VALUE, CHECK_NAME_LABEL, RUN_ID_LABEL, slim_pod
from kuberhealthy.config import Config
from kuberhealthy.errors import ApiError, NotFound
from kuberhealthy.heldreports import HeldReports
from kuberhealthy.kube import KHCHECKS, KHJOBS, KHSTATES, PODS, Kube, Obj, Reflector, Resources
from kuberhealthy.notify import Notifier
from kuberhealthy.runstats import RunStats

logger = logging.getLogger(__name__)

CHECK_POD_SELECTOR = f"app={APP_LABEL_VALUE}"
OWNER_LOOKUP_TIMEOUT = 5.0  # seconds


def pod_uuid_index(pod: Obj) -> list[str]:
    run_id = ((pod.get("metadata") or {}).get("labels") or {}).get(RUN_ID_LABEL)
    return [run_id] if run_id else []


def pod_ip_index(pod: Obj) -> list[str]:
    status = pod.get("status") or {}
    ips = {str(i.get("ip")) for i in status.get("podIPs") or [] if i.get("ip")}
    if status.get("podIP"):
        ips.add(str(status["podIP"]))
    return sorted(ips)


def pod_check_index(pod: Obj) -> list[str]:
    meta = pod.get("metadata") or {}
    check = (meta.get("labels") or {}).get(CHECK_NAME_LABEL)
    return [f"{meta.get('namespace')}/{check}"] if check else []


class Services:
    """The daemon's parts, wired together. Construct, start(), later stop(deadline)."""

    def __init__(self, config: Config, kube: Kube, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.kube = kube
        self.resources = Resources(kube)
        self.clock = clock
        self.notifier = Notifier()
        ns = config.target_namespace or None
        self.khchecks = Reflector(kube, KHCHECKS, namespace=ns, notifier=self.notifier,
                                  name="kh-reflector-khchecks")
        self.khstates = Reflector(kube, KHSTATES, namespace=ns, notifier=self.notifier,
                                  name="kh-reflector-khstates")
        self.khjobs = Reflector(kube, KHJOBS, namespace=ns, notifier=self.notifier, name="kh-reflector-khjobs")
        self.pods = Reflector(kube, PODS, namespace=ns, label_selector=CHECK_POD_SELECTOR, notifier=self.notifier,
                              indexers={"uuid": pod_uuid_index, "ip": pod_ip_index, "check": pod_check_index},
                              name="kh-reflector-pods", transform=slim_pod)
        self.reflectors = [self.khchecks, self.khstates, self.khjobs, self.pods]
        self.fatal = threading.Event()  # set when a part died unexpectedly: the process must stop
        self.on_fatal: Callable[[], None] | None = None  # called once when that happens
        self.influx: Any = None  # an InfluxForwarder when enableInflux is on
        self.stats = RunStats()
        self.held = HeldReports(self.resources, lambda: self.config.pod_name)
        self.stuck_terminating: set[str] = set()  # checker pods already reported as stuck Terminating
        self._owner_lock = threading.Lock()
        self._owner: tuple[bool, Obj | None] = (False, None)  # (looked up yet, ownerReference)
        self.controller: Any = None
        self.elector: Any = None
        self._parts: list[Any] = []  # started after the caches, stopped before them (reverse order)
        self._started = False
        self._stopping = threading.Event()
        self.supervise_interval = 1.0  # seconds between looks at the core threads
        self._supervisor: threading.Thread | None = None

    def add_part(self, part: Any) -> None:
        """Register something with start()/stop()/join(timeout) to run with the daemon."""
        self._parts.append(part)

    def replace_part(self, old: Any, new: Any | None, timeout: float = 30.0) -> None:
        """Stop `old` (joined) and put `new` (started, if the services run) in its place."""
        index = self._parts.index(old)
        old.stop()
        old.join(timeout)
        if new is None:
            del self._parts[index]
            return
        self._parts[index] = new
        if self._started:
            new.start()

    def insert_part(self, part: Any) -> None:
        """Add a part that stops before the held reports but after everything else (Influx's place)."""
        self._parts.insert(1, part)
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

    def cache_status(self) -> list[tuple[str, bool, float]]:
        """(cache, current, seconds not current) for each cache: readiness body and metrics."""
        return [(r.plural, r.is_current(), r.stale_seconds()) for r in self.reflectors]

    def ready(self) -> bool:
        """Every cache has synced once since start. It stays true through an API outage: every replica
        shares the API server, so pulling them all out of the Service would only drop reports."""
        return all(r.synced.is_set() for r in self.reflectors)

    # --- lifecycle ---------------------------------------------------------------------------------

    def start_caches(self) -> None:
        for r in self.reflectors:
            r.start()

    def wait_synced(self, timeout: float) -> bool:
        deadline = self.clock() + timeout
        return all(r.synced.wait(max(0.0, deadline - self.clock())) for r in self.reflectors)

    def start(self) -> None:
        self.start_caches()
        for part in self._parts:
            part.start()
        self._started = True
        self._supervisor = threading.Thread(target=self._supervise, name="kh-supervisor", daemon=True)
        self._supervisor.start()

    def _core_threads(self) -> list[Any]:
        core: list[Any] = list(self.reflectors)
        core += [p for p in (self.elector, self.controller) if p is not None and hasattr(p, "is_alive")]
        return core

    def _supervise(self) -> None:
        """A core thread that died unexpectedly means the process must stop cleanly, never hang half-alive."""
        while not self._stopping.wait(self.supervise_interval):
            if self.check_core_threads():
                return

    def check_core_threads(self) -> bool:
        """True (and fatal set, on_fatal called) when a core thread died while the services were not stopping."""
        dead = [getattr(t, "name", type(t).__name__) for t in self._core_threads() if not t.is_alive()]
        # Core threads end only after stop() has set _stopping: a death seen together with it is the
        # shutdown itself. Checking here, after the look, closes the race with a stop() that just began.
        if not dead or self._stopping.is_set():
            return False
        logger.error("Core thread(s) died: %s; stopping", ", ".join(map(str, dead)))
        self.fatal.set()
        if self.on_fatal is not None:
            self.on_fatal()
        return True

    def stop(self, timeout: float = 50.0) -> None:
        """Stop everything within `timeout` seconds: parts in reverse order, then the caches."""
        self._stopping.set()
        deadline = self.clock() + timeout
        for part in reversed(self._parts):
            try:
                part.stop()
                part.join(max(0.1, deadline - self.clock()))
            except Exception:  # shutdown must go on whatever one part does
                logger.exception("Error stopping %s", type(part).__name__)
        for r in self.reflectors:
            r.stop()
        for r in self.reflectors:
            r.join(max(0.1, deadline - self.clock()))
        if self._supervisor is not None:
            self._supervisor.join(max(0.1, deadline - self.clock()))
        alive = [r.name for r in self.reflectors if r.is_alive()]
        if alive:
            logger.warning("Threads still running after stop: %s", ", ".join(alive))


INFLUX_KEYS = ("enable_influx", "influx_url", "influx_username", "influx_password", "influx_db")
REAPER_KEYS = ("max_khjob_age", "max_check_pod_age", "max_completed_pod_count", "max_error_pod_count",
               "state_reaper_interval", "check_reaper_run_interval")
RESTART_KEYS = {"listen_host": "listenAddress", "listen_port": "listenAddress",
                "leader_election": "leaderElection"}  # applied only by a restart of the process
REBUILD_KEYS = ("target_namespace", "pod_name", "pod_namespace")  # the caches themselves change
CHECK_KEYS = ("external_check_reporting_url",)  # what every checker pod carries: its checks restart


def _changed(old: Config, new: Config, keys: tuple[str, ...]) -> bool:
    return any(getattr(old, k) != getattr(new, k) for k in keys)


def needs_restart(old: Config, new: Config) -> tuple[Config, list[str]]:
    """`new` with the settings that only a restart applies kept at their running values, and their names."""
    names = sorted({name for attr, name in RESTART_KEYS.items() if getattr(old, attr) != getattr(new, attr)})
    kept = dataclasses.replace(new, listen_host=old.listen_host, listen_port=old.listen_port,
                               leader_election=old.leader_election)
    return kept, names


def needs_rebuild(old: Config, new: Config) -> bool:
    """Whether the caches must be rebuilt (services stopped and started again) to apply `new`."""
    return _changed(old, new, REBUILD_KEYS)


def build(config: Config, kube: Kube) -> Services:
    """Wire the whole daemon: caches, elector (or forced leader), controller, leader-only parts, Influx."""
    from kuberhealthy.controller import Controller

    services = Services(config, kube)
    services.add_part(services.held)  # stopped last of the parts: reports may arrive until the end
    if config.enable_influx:
        from kuberhealthy.influx import InfluxForwarder
        services.influx = InfluxForwarder(config)
        services.add_part(services.influx)

    def leader_parts() -> list[Any]:
        from kuberhealthy.reaper import CheckReaper, StateReaper
        return [CheckReaper(services), StateReaper(services)]

    controller = Controller(services, leader_parts)
    services.controller = controller
    services.elector = make_elector(services, config)
    # Started in this order, stopped in reverse: the controller stops its checks first, then the
    # elector releases the Lease, then Influx flushes.
    services.add_part(services.elector)
    services.add_part(controller)
    return services


def make_elector(services: Services, config: Config) -> Any:
    from kuberhealthy.leader import ForcedLeader, LeaderElector
    controller = services.controller
    kind = ForcedLeader if config.enable_force_master else LeaderElector
    return kind(services.resources, config.pod_namespace, config.pod_name, config.leader_election,
                controller.became_leader, controller.lost_leadership)


def reconfigure(services: Services, new: Config) -> list[str]:
    """Apply a changed config to running services, in place; returns what was restarted.

    The Lease is kept. Only the parts a changed key feeds are replaced: the checks (the reporting URL
    every checker pod carries), the Influx forwarder, the reapers, the elector (enableForceMaster).
    Callers handle needs_restart/needs_rebuild first.
    """
    from kuberhealthy.influx import InfluxForwarder
    old = services.config
    services.config = new
    restarted: list[str] = []
    if _changed(old, new, INFLUX_KEYS):
        previous = services.influx
        services.influx = InfluxForwarder(new) if new.enable_influx else None
        if previous is not None:
            services.replace_part(previous, services.influx)
        elif services.influx is not None:
            services.insert_part(services.influx)
        restarted.append("influx")
    if _changed(old, new, CHECK_KEYS) and services.controller is not None:
        services.controller.restart_checks()  # running pods carry the old value: replace them
        restarted.append("checks")
    if _changed(old, new, REAPER_KEYS) and services.controller is not None:
        services.controller.restart_leader_parts()
        restarted.append("reapers")
    if old.enable_force_master != new.enable_force_master:
        previous = services.elector
        services.elector = make_elector(services, new)
        services.replace_part(previous, services.elector)  # the old one stops its checks, releases the Lease
        restarted.append("elector")
    return restarted
