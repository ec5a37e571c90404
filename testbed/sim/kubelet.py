"""The simulated kubelet: fake nodes plus one pod watch that drives every new pod through its life.

The test API server has no scheduler or kubelet, so pods would stay Pending forever. SimKubelet plays
both: it binds each new pod to one of its nodes, writes realistic status (loopback pod IPs), runs the
behaviour named by the image (see README.md) and honours deletion and eviction by deleting terminating
pods with grace 0: at once, or (timings=REAL, timings.py) the way a real kubelet does, the container
stopped with exit 143 and the object removed seconds later. Everything is driven by one watch
(re-listing on 410, resuming on errors); each pod gets its own thread (driver.py), and force deletions
go through a small pool so the watch never blocks on them. The nodes' kubelet endpoint, where the API
server reads what each checker printed (pods/log), is logs.py's. With `timings.start_rate`, pods start slowly
on purpose: at most that many per second go from ContainerCreating to Running (startgate.py), so a
backlog of Pending pods builds when they are created faster. Sidecars (image kh-sim/sidecar) run beside
the checker, and SIM_DISRUPT writes the disruptions of a 1.26+ cluster (disrupt.py). It does not
simulate restarts, probes, init containers other than native sidecars, volumes or resource accounting.

The watch survives an API server that restarts (connection refused for a while, then 410 on resume:
it retries with backoff capped at WATCH_RETRY_CAP and re-lists) and one that freezes (the stream goes
silent: the read timeout, a little longer than the server-side timeoutSeconds, drops it and resumes).
"""
from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import urllib3
from kubernetes.watch.watch import iter_resp_lines

from testbed.cluster import loopback
from testbed.cluster.builders import MERGE_PATCH
from testbed.sim import logs, podstatus
from testbed.sim.behaviours import behaviour_for_image, checker_container
from testbed.sim.disrupt import Disruptor
from testbed.sim.driver import KubeletParts, Placement, PodDriver
from testbed.sim.rawapi import DEFAULT_POOL_SIZE, OpenStream, RawApi, SimApiError
from testbed.sim.records import PodRecord, ReportResult
from testbed.sim.retry import backoff
from testbed.sim.startgate import StartGate
from testbed.sim.terminate import Terminator
from testbed.sim.timings import FAST, Timings
from testbed.sim.tokens import TokenMinter
from testbed.wait import wait_for

logger = logging.getLogger(__name__)

WATCH_SECONDS = 30  # server-side watch timeout: a healthy stream ends (and is resumed) this often
# Client-side read timeout of the watch: a stream silent for this long (a frozen API server; a healthy one
# ends it after WATCH_SECONDS and sends bookmarks) is dropped and resumed.
WATCH_READ_TIMEOUT = WATCH_SECONDS + 5.0
WATCH_CONNECT_TIMEOUT = 5.0
WATCH_RETRY_BASE = 0.25  # seconds before the first resume after a watch error; doubles per failure
WATCH_RETRY_CAP = 2.0  # seconds: the longest pause between attempts while the API server is away
JOIN_TIMEOUT = 20.0


class _Expired(Exception):
    """The watch's resourceVersion is too old (410): re-list."""


class SimKubelet:
    """Bind, run and clean up pods in one namespace (or all) of a test API server. Single use:
    start() once, stop() (idempotent) once done. Two kubelets must not watch overlapping namespaces."""

    def __init__(self, kubeconfig_path: str, *, nodes: int = 3, namespace: str | None = None,
                 node_prefix: str = "sim-node", pool_size: int = DEFAULT_POOL_SIZE,
                 signing_key: Path | None = None, timings: Timings = FAST) -> None:
        """`pool_size`: API connections kept for reuse; about the number of pods driven at once (one
        thread each), or every call beyond it pays a new TLS handshake. `signing_key`: the cluster's
        ServiceAccount signing key, for checkers that send an expired token (SIM_TOKEN=expired).
        `timings`: how long each step takes; timings.REAL is a real kubelet's (Running after ~1 s, the
        pod IP on a later sync, graceful deletion: exit 143, Failed while Terminating, removed ~10 s
        later), the default FAST does everything at once, so the fast tests stay fast. `timings.start_rate`
        makes pods start slowly on purpose (startgate.py); `start_gate.set_rate()` changes it later."""
        self.kubeconfig_path = str(kubeconfig_path)
        self.namespace = namespace
        self.pool_size = pool_size
        self.nodes: list[tuple[str, str]] = [(f"{node_prefix}-{i}", loopback.node_ip(i))
                                             for i in range(nodes)]
        self._node_ips = dict(self.nodes)
        self._api: RawApi | None = None
        self._logs: logs.KubeletServer | None = None  # the nodes' kubelet endpoint (logs.py), from start()
        self._signing_key = signing_key
        self.tokens: TokenMinter | None = None  # projected ServiceAccount tokens (tokens.py), from start()
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._lock = threading.Lock()
        self._drivers: dict[str, PodDriver] = {}  # live pods by ns/name
        self._records: dict[str, PodRecord] = {}  # every pod ever driven by ns/name (latest wins)
        self._all_drivers: list[PodDriver] = []  # for joining on stop
        self._deleting: set[str] = set()  # uids with a grace-0 delete in flight
        self._next_node = 0
        self._stream = OpenStream()  # the open watch response, so stop() can cut it
        self._rv = ""  # last resourceVersion seen (watch thread only); "" means list first
        self._failures = 0  # watch attempts failed in a row (watch thread only); sets the backoff
        self.watch_requests = 0  # watch requests opened (for tests: a dropped stream was resumed)
        self._watch_thread = threading.Thread(target=self._watch_loop, name="sim-watch", daemon=True)
        self._deleter = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sim-delete")
        self.timings = timings
        self.start_gate = StartGate(timings.start_rate) if timings.start_rate is not None else None
        self._terminator = Terminator(self.timings, self._stop, self._delete_now)
        self._disruptor = Disruptor(lambda: self._api, self.timings, self._stop)

    # --- lifecycle ----------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> SimKubelet:
        """Create the nodes, start the watch and return once the first list is done."""
        self._api = RawApi(self.kubeconfig_path, pool_size=self.pool_size)
        self.tokens = TokenMinter(self._api, self._signing_key)
        try:
            self._logs = logs.acquire()
            for name, ip in self.nodes:
                self._ensure_node(name, ip)
            if self.start_gate is not None:
                self.start_gate.start()
            self._watch_thread.start()
            if not self._synced.wait(timeout):
                raise RuntimeError(f"simulated kubelet could not list pods within {timeout}s")
        except BaseException:
            self.stop()
            raise
        logger.info("simulated kubelet started: %d nodes, namespace %s",
                    len(self.nodes), self.namespace or "*")
        return self

    def stop(self) -> None:
        """Stop watching, cancel every pod's behaviour (killing subprocesses) and join every thread."""
        self._stop.set()
        self._stream.cut()
        if self._watch_thread.ident is not None:
            self._watch_thread.join(JOIN_TIMEOUT)
            if self._watch_thread.is_alive():
                logger.error("sim-watch did not stop within %ss", JOIN_TIMEOUT)
        with self._lock:  # no driver is added once _stop is set (see _adopt)
            drivers = list(self._all_drivers)
        for d in drivers:
            d.cancel()
        for d in drivers:
            if not d.join(JOIN_TIMEOUT):
                logger.error("driver of %s did not stop within %ss", d.record.key, JOIN_TIMEOUT)
        if self.start_gate is not None:
            self.start_gate.stop()
        self._deleter.shutdown(wait=True)
        self._terminator.join(JOIN_TIMEOUT)
        self._disruptor.join(JOIN_TIMEOUT)
        if self.tokens is not None:
            self.tokens.close()
        if self._api is not None:
            self._api.close()
        if self._logs is not None:
            logs.release(self._logs)
            self._logs = None

    def __enter__(self) -> SimKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- what tests read ----------------------------------------------------------------------------

    @property
    def records(self) -> dict[str, PodRecord]:
        """Every pod this kubelet drove, by `namespace/name` (a copy of the map; records are live)."""
        with self._lock:
            return dict(self._records)

    @property
    def report_results(self) -> dict[str, ReportResult]:
        """The report each pod sent, by `namespace/name` (pods that did not report are absent)."""
        return {k: r.report for k, r in self.records.items() if r.report is not None}

    @property
    def log_requests(self) -> list[logs.LogRequest]:
        """The container-log requests the nodes' endpoint answered (the API server's pods/log proxying),
        for pods in this kubelet's namespace (all of them when it watches every namespace)."""
        server = self._logs
        prefix = f"{self.namespace}/" if self.namespace else ""
        return [r for r in (server.requests if server else []) if r.pod.startswith(prefix)]

    def record(self, namespace: str, name: str) -> PodRecord | None:
        with self._lock:
            return self._records.get(f"{namespace}/{name}")

    def reported_record(self, namespace: str, name: str, timeout: float = 30.0) -> PodRecord:
        """The pod's record once its checker has the answer to its report. A run ends when the daemon has
        stored the report, which is before that answer reaches the checker: read `report` through this."""
        def reported() -> PodRecord | None:
            found = self.record(namespace, name)
            return found if found is not None and found.reported is not None else None
        return wait_for(reported, timeout, what=f"the report of pod {namespace}/{name} answered")

    # --- nodes --------------------------------------------------------------------------------------

    def _ensure_node(self, name: str, ip: str) -> None:
        assert self._api is not None
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kh-sim": "true"}}}
        try:
            self._api.call("POST", "/api/v1/nodes", body)
        except SimApiError as e:
            if e.status != 409:
                raise
        now = podstatus.now_rfc3339()
        capacity = {"cpu": "8", "memory": "32Gi", "pods": "110"}
        status = {"status": {
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "simulated kubelet is posting ready status",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "capacity": capacity, "allocatable": capacity}}
        if self._logs is not None:  # where the API server reads container logs (pods/log)
            status["status"]["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self._logs.port(ip)}}
        self._api.call("PATCH", f"/api/v1/nodes/{name}/status", status, content_type=MERGE_PATCH)

    def _pick_node(self) -> tuple[str, str]:
        with self._lock:
            node = self.nodes[self._next_node % len(self.nodes)]
            self._next_node += 1
        return node

    # --- the watch ----------------------------------------------------------------------------------

    def _pods_path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods" if self.namespace else "/api/v1/pods"

    def _watch_loop(self) -> None:
        while not self._stop.is_set():
            try:
                if not self._rv:
                    self._rv = self._relist()
                    self._failures = 0
                    self._synced.set()
                self._watch_once()
            except _Expired:
                logger.info("pod watch expired; re-listing")
                self._rv = ""
            except SimApiError as e:
                if self._stop.is_set():
                    break
                if e.status == 410:  # the whole request answered 410 (not an ERROR event): re-list now
                    logger.info("pod watch from %s is too old; re-listing", self._rv)
                    self._rv = ""
                    continue
                self._pause(f"pod watch failed: {e}")
            except (urllib3.exceptions.HTTPError, OSError) as e:  # the stream broke or went silent
                if self._stop.is_set():
                    break
                self._pause(f"pod watch connection lost ({type(e).__name__}: {e})")
            except Exception:  # top of the watch loop: log, back off, resume
                if self._stop.is_set():
                    break
                logger.exception("pod watch broke; resuming from %s", self._rv or "a fresh list")
                self._pause("pod watch broke")

    def _pause(self, why: str) -> None:
        """Back off before the next attempt: exponential with jitter, capped at WATCH_RETRY_CAP."""
        self._failures += 1
        delay = backoff(self._failures, WATCH_RETRY_BASE, WATCH_RETRY_CAP)
        # the first failure and then one line in ten, so a long outage does not flood the log
        log = logger.warning if self._failures % 10 == 1 else logger.debug
        log("%s; resuming from %s in %.2fs (failure %d in a row)", why, self._rv or "a list", delay,
            self._failures)
        self._stop.wait(delay)

    def _relist(self) -> str:
        assert self._api is not None
        listed = self._api.call("GET", self._pods_path())
        seen: set[str] = set()
        for pod in listed.get("items") or []:
            meta = pod.get("metadata") or {}
            seen.add(f"{meta.get('namespace')}/{meta.get('name')}")
            self._handle("ADDED", pod)
        with self._lock:
            vanished = [d for k, d in self._drivers.items() if k not in seen]
        for d in vanished:
            self._forget(d)
        return str((listed.get("metadata") or {}).get("resourceVersion", ""))

    def _watch_once(self) -> None:
        """One watch request from self._rv until the server ends it; self._rv follows every event."""
        assert self._api is not None
        query = {"watch": "true", "resourceVersion": self._rv, "allowWatchBookmarks": "true",
                 "timeoutSeconds": WATCH_SECONDS}
        self.watch_requests += 1
        resp = self._api.stream(self._pods_path(), query, timeout=(WATCH_CONNECT_TIMEOUT, WATCH_READ_TIMEOUT))
        self._failures = 0  # the API server answered: the next failure starts the backoff afresh
        self._stream.set(resp)
        try:
            if self._stop.is_set():
                return
            for line in iter_resp_lines(resp):
                if self._stop.is_set():
                    break
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Expired()
                    raise SimApiError(int(obj.get("code") or 0), json.dumps(obj))
                self._rv = str((obj.get("metadata") or {}).get("resourceVersion") or self._rv)
                if kind != "BOOKMARK":
                    self._handle(str(kind), obj)
        except (urllib3.exceptions.HTTPError, OSError):
            if not self._stop.is_set():
                raise
        finally:
            self._stream.set(None)
            resp.close()
            resp.release_conn()

    # --- event handling (watch thread only) ---------------------------------------------------------

    def _handle(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        key, uid = f"{meta.get('namespace')}/{meta.get('name')}", str(meta.get("uid", ""))
        with self._lock:
            driver = self._drivers.get(key)
        if driver is not None and driver.uid != uid:  # same name, new pod: the old one is gone
            self._forget(driver)
            driver = None
        if kind == "DELETED":
            if driver is not None:
                self._forget(driver)
            with self._lock:
                self._deleting.discard(uid)
            return
        node = str(spec.get("nodeName") or "")
        if meta.get("deletionTimestamp"):
            if driver is not None:
                if driver.record.terminating is None:
                    driver.record.terminating = time.monotonic()
                    logger.debug("pod %s is terminating", key)
                driver.cancel()
            if driver is not None and self.timings.graceful:
                self._terminate(driver, uid)
            elif driver is not None or node in self._node_ips:
                self._force_delete(key, uid)
            return
        if driver is not None:
            return  # an echo of our own writes, or someone else's edit: nothing to do
        status = pod.get("status") or {}
        if not node:
            node, host_ip = self._pick_node()
            bind = True
        elif node in self._node_ips and not status.get("podIP") and status.get("phase") in (None, "Pending"):
            host_ip, bind = self._node_ips[node], False  # created already bound to one of our nodes
        else:
            return
        self._adopt(pod, key, node=node, host_ip=host_ip, bind=bind)

    def _adopt(self, pod: dict[str, Any], key: str, *, node: str, host_ip: str, bind: bool) -> None:
        checker = checker_container(pod)
        image = str(checker.get("image", ""))
        behaviour = behaviour_for_image(image)
        spec = pod.get("spec") or {}
        names = [str(c.get("name", "")) for key in ("containers", "initContainers") for c in spec.get(key) or []]
        first = str(checker.get("name", ""))  # the log's first container is the one the checker prints in
        host_network = bool((pod.get("spec") or {}).get("hostNetwork"))
        pod_ip = host_ip if host_network else loopback.POD_IPS.allocate()
        meta = pod.get("metadata") or {}
        record = PodRecord(namespace=str(meta.get("namespace")), name=str(meta.get("name")),
                           uid=str(meta.get("uid", "")),
                           image=image, behaviour=behaviour.value, pod_ip=pod_ip, host_network=host_network,
                           seen=time.monotonic(),
                           log=logs.PodLog((first, *(n for n in names if n != first))))
        assert self._api is not None
        driver = PodDriver(self._api, pod, record, behaviour=behaviour,
                           placement=Placement(node=node, host_ip=host_ip, pod_ip=pod_ip, bind=bind),
                           parts=KubeletParts(self.tokens, self.timings, self.start_gate,
                                              self._disruptor.schedule))
        with self._lock:
            if self._stop.is_set():
                if not host_network:
                    loopback.POD_IPS.release(pod_ip)
                return
            self._drivers[key] = driver
            self._records[key] = record
            if self._logs is not None:
                self._logs.serve(key, record.log)
            self._all_drivers = [d for d in self._all_drivers if not d.join(0)] + [driver]
            driver.start()  # under the lock, so stop() never sees a driver that is not started yet
        logger.debug("adopted pod %s (%s) on %s", key, behaviour.value, node)

    def _forget(self, driver: PodDriver) -> None:
        driver.cancel()
        key = driver.record.key
        with self._lock:
            if self._drivers.get(key) is driver:
                del self._drivers[key]
        if self._logs is not None:
            self._logs.forget(key, driver.record.log)
        if driver.record.deleted is None:
            driver.record.deleted = time.monotonic()
        if not driver.record.host_network:
            loopback.POD_IPS.release(driver.pod_ip)
        logger.debug("pod %s is gone", key)

    def _terminate(self, driver: PodDriver, uid: str) -> None:
        """Graceful deletion (timings.Terminator): once per pod, however many events show it Terminating."""
        with self._lock:
            if uid in self._deleting or self._stop.is_set():
                return
            self._deleting.add(uid)
        self._terminator.terminate(driver)

    def _force_delete(self, key: str, uid: str) -> None:
        with self._lock:
            if uid in self._deleting or self._stop.is_set():
                return
            self._deleting.add(uid)
        try:
            self._deleter.submit(self._delete_now, key, uid)
        except RuntimeError:  # the pool is shut down: we are stopping
            pass

    def _delete_now(self, key: str, uid: str) -> None:
        """Grace-0 delete, retried on transient errors until it is answered or the kubelet stops."""
        assert self._api is not None
        namespace, name = key.split("/", 1)
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                "preconditions": {"uid": uid}}
        try:
            self._api.call_until(self._stop, "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body)
            return  # deleted (the DELETED event clears _deleting), or we are stopping
        except SimApiError as e:
            if e.status in (404, 409):
                return  # already gone, or a new pod took the name
            logger.warning("grace-0 delete of %s failed: %s", key, e)
        with self._lock:
            self._deleting.discard(uid)  # a later event for the pod may try again


