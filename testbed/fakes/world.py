"""The daemon's parts as a run, the controller and the web app see them (FakeServices), a kubelet that moves
checkers through their phases, a report as the handler stores it, and object builders."""
from __future__ import annotations

import datetime as dt
import itertools
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kuberhealthy.base.config import Config
from kuberhealthy.base.errors import NotFound
from kuberhealthy.base.notify import Notifier
from kuberhealthy.base.threads import Deaths
from kuberhealthy.checkclient import ENV_RUN_UUID
from kuberhealthy.kube import EVENTS, HEALTHCHECKS, KHCHECKS, KHJOBS, KHSTATES, LEASES, PODS, Obj, Resource
from kuberhealthy.kube.mappedcache import MappedCache
from kuberhealthy.needs import ResultSink
from kuberhealthy.outputs.events import ObjectRef
from kuberhealthy.outputs.heldreports import HeldReports
from kuberhealthy.outputs.runstats import SchedulingMetrics
from kuberhealthy.records import hcstate, khstate, kinds, migration, rollcodec, rollups
from kuberhealthy.records.checkpod import (
    CHECK_NAME_ANNOTATION,
    CHECK_POD_SELECTOR,
    CHECK_POD_STORAGE,
    RUN_ID_LABEL,
    pod_check_index,
    slim_pod,
)
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.records.statestore import HealthCheckStore
from kuberhealthy.records.uptime import RollupBook
from kuberhealthy.records.v3lease import V3LeaseGate
from testbed.fakes.api import Call, FakeApi
from testbed.fakes.cache import FakeCache
from testbed.fakes.clock import Activity, FakeClock, T, stamp
from testbed.fakes.readouts import pod_env_value

NS = "kh-checks"
POD_NAME = "kh-test-0"  # this replica
REPORTING_URL = "http://kuberhealthy.kh.svc/externalCheckStatus"
V3_REPORTING_URL = "http://kuberhealthy.kh.svc/check"
NODE = "node-1"



def fake_config(**overrides: Any) -> Config:
    """A Config as load() would make it, without files or environment; reconciles are not debounced."""
    values: dict[str, Any] = {"pod_name": POD_NAME, "pod_namespace": "kuberhealthy",
                              "external_check_reporting_url": REPORTING_URL, "v3_reporting_url": V3_REPORTING_URL,
                              "check_change_debounce": 0.0}
    values.update(overrides)
    return Config(**values)


# --- time ---------------------------------------------------------------------------------------------


class Kubelet:
    """Moves checker pods through Pending → Running → Succeeded/Failed in the fake API."""

    def __init__(self, api: FakeApi, clock: FakeClock, node: str = NODE) -> None:
        self.api = api
        self.clock = clock
        self.node = node
        self._ips = itertools.count(10)

    def _edit(self, pod: Obj, change: Callable[[Obj], None]) -> Obj:
        meta = pod["metadata"]
        return self.api.edit(PODS, meta["namespace"], meta["name"], change)

    def run(self, pod: Obj, ip: str | None = None) -> Obj:
        """Scheduled on the node, containers started, a pod IP."""
        n = next(self._ips)
        address = ip or f"10.0.{n // 250}.{n % 250 + 1}"

        def change(p: Obj) -> None:
            p["spec"]["nodeName"] = self.node
            p["status"] = {"phase": "Running", "podIP": address, "podIPs": [{"ip": address}],
                           "hostIP": "192.0.2.1", "startTime": stamp(self.clock),
                           "containerStatuses": [{"name": c.get("name"), "state": {"running": {}}}
                                                 for c in p["spec"].get("containers") or []]}
        return self._edit(pod, change)

    def fail_to_pull(self, pod: Obj, reason: str = "ErrImagePull") -> Obj:
        def change(p: Obj) -> None:
            p["spec"]["nodeName"] = self.node
            p["status"] = {"phase": "Pending", "containerStatuses": [
                {"name": c.get("name"), "state": {"waiting": {"reason": reason}}}
                for c in p["spec"].get("containers") or []]}
        return self._edit(pod, change)

    def finish(self, pod: Obj, ok: bool = True) -> Obj:
        """Every container exited (0: Succeeded, 1: Failed)."""
        def change(p: Obj) -> None:
            status = p.setdefault("status", {})
            status["phase"] = "Succeeded" if ok else "Failed"
            status["containerStatuses"] = [
                {"name": c.get("name"), "state": {"terminated": {"exitCode": 0 if ok else 1,
                                                                 "finishedAt": stamp(self.clock)}}}
                for c in p["spec"].get("containers") or []]
        return self._edit(pod, change)


def report(services: FakeServices, pod: Obj, ok: bool = True, errors: Iterable[str] = ()) -> Obj:
    """A checker pod's report, stored as POST /externalCheckStatus (or /check) stores it once it knows the
    pod: in the state of the pod's check, whichever kind."""
    meta = pod["metadata"]
    namespace, check = meta["namespace"], meta["annotations"][CHECK_NAME_ANNOTATION]
    ident = (pod_check_index(pod) or [f"{namespace}/{check}"])[0]
    run_uuid = pod_env_value(pod, ENV_RUN_UUID) or ""
    now = dt.datetime.fromtimestamp(services.clock.wall(), dt.timezone.utc)  # LastRun on the fake wall clock
    write = khstate.RunWrite(services.resources, namespace, check, run_uuid, services.config.pod_name,
                             store=services.kinds.store_of(ident))
    return khstate.record_report(write, ok, list(errors), now=now,
                                 hint=services.kinds.state_cache(ident).get(namespace, check))


def khcheck(name: str, namespace: str = NS, run_interval: str = "1h", timeout: str = "60s",
            image: str = "kh-sim/ok", **spec: Any) -> Obj:
    body: dict[str, Any] = {"runInterval": run_interval, "timeout": timeout,
                            "podSpec": {"containers": [{"name": "main", "image": image}]}}
    body.update(spec)
    return {"apiVersion": KHCHECKS.api_version, "kind": "KuberhealthyCheck",
            "metadata": {"name": name, "namespace": namespace}, "spec": body}


def khjob(name: str, namespace: str = NS, phase: str = "", timeout: str = "60s") -> Obj:
    return {"apiVersion": KHJOBS.api_version, "kind": "KuberhealthyJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"timeout": timeout, "phase": phase,
                     "podSpec": {"containers": [{"name": "main", "image": "kh-sim/ok"}]}}}


def healthcheck(name: str, namespace: str = NS, run_interval: str = "1h", timeout: str = "60s",
                image: str = "kh-sim/ok", status: dict[str, Any] | None = None, **spec: Any) -> Obj:
    """A HealthCheck (Kuberhealthy v3's kind) shaped as v3 documents it: the pod's spec under podSpec.spec."""
    pod_spec = spec.pop("podSpec", None) or {"containers": [{"name": "main", "image": image}]}
    body: dict[str, Any] = {"runInterval": run_interval, "timeout": timeout, "podSpec": {"spec": pod_spec}}
    body.update(spec)
    out: dict[str, Any] = {"apiVersion": HEALTHCHECKS.api_version, "kind": "HealthCheck",
                           "metadata": {"name": name, "namespace": namespace}, "spec": body}
    if status is not None:
        out["status"] = status
    return out


def khstate_of(name: str, namespace: str = NS, annotations: dict[str, str] | None = None, **spec: Any) -> Obj:
    """A khstate as the daemon leaves it, with `spec` fields replaced."""
    body = khstate.new_body(namespace, name, POD_NAME)
    body["spec"].update(spec)
    if annotations:
        body["metadata"]["annotations"] = dict(annotations)
    return body


def month_of_runs(now: float, seed: int = 30) -> dict[str, Any]:
    """The stored uptime rollups of a check run every minute for the 30 days before `now` (one run in 20
    failed, durations spread over 1-4 s): a long-lived check's value, at its full size."""
    rollup, rng, t = rollups.empty(), random.Random(seed), now - 30 * 86400
    while t < now - 60:
        outcome = rollups.FAILED if rng.random() < 0.05 else rollups.OK
        rollup = rollups.record(rollup, t, outcome, rng.uniform(1.0, 4.0), interval=60.0)
        t += 60
    return rollcodec.serialize(rollup)


def days_of_runs(days: str, now: float, runs: tuple[tuple[int, float], ...] = ((0, 1.0),),
                 interval: float = 3600.0) -> dict[str, Any]:
    """The stored uptime rollups of runs following `days`, the last day ending at `now`: a mark per UTC day,
    oldest first (o OK, d degraded: one failed hour, f failing: every other hour failed, p paused, - no data,
    s slow: OK, six times as long). Each hour has a run at minute 1 plus each `runs` offset in seconds; a run's
    duration is 0.4-0.8 s times its factor."""
    r = rollups.empty()
    start = (int(now // 86400) - len(days) + 1) * 86400
    for d, mark in enumerate(days):
        for h in range(24):
            at = start + d * 86400 + h * 3600 + 60
            if at > now or mark == "-":
                continue
            if mark == "p":
                r = rollups.paused(r, at - 60, at + 3540)
                continue
            failed = (mark == "d" and h == 5) or (mark == "f" and h % 2 == 0)
            seconds = (0.4 + (h % 5) * 0.1) * (6 if mark == "s" else 1)
            for offset, factor in runs:
                if at + offset <= now:
                    r = rollups.record(r, at + offset, rollups.FAILED if failed else rollups.OK, seconds * factor,
                                       interval=interval)
    return rollcodec.serialize(r)


def check_spec(name: str = "probe", namespace: str = NS, **kwargs: Any) -> CheckSpec:
    return CheckSpec.of(khcheck(name, namespace, **kwargs))


KINDS = (kinds.KIND_KHCHECK, kinds.KIND_HEALTHCHECK)  # the kinds a behaviour suite runs for


class Subject:
    """The check a behaviour test runs, of one kind: put in the fake API, parsed as the controller parses
    it, and its state read, seeded and faulted wherever that kind keeps it (a khstate; a HealthCheck's
    status), so one test body holds for every kind."""

    def __init__(self, services: FakeServices, kind: str, name: str = "probe", **spec: Any) -> None:
        self.services, self.kind, self.name = services, kind, name
        if kind == kinds.KIND_HEALTHCHECK:
            pod_spec = spec.pop("podSpec", None)
            obj = healthcheck(name, podSpec=pod_spec, **spec) if pod_spec is not None else healthcheck(name, **spec)
            self.resource, self.state_resource = HEALTHCHECKS, HEALTHCHECKS
            self.state_cache: FakeCache = services.healthchecks
            self.write: tuple[str, str] = ("replace_status", HEALTHCHECKS.plural)
        else:
            obj = khcheck(name, **spec)
            self.resource, self.state_resource = KHCHECKS, KHSTATES
            self.state_cache = services.khstates
            self.write = ("replace", KHSTATES.plural)
        self.obj = services.api.put(self.resource, obj)
        self.spec = services.kinds.named(kind).parse(self.obj)  # type: ignore[union-attr]
        if kind == kinds.KIND_HEALTHCHECK and not services.hc_store.probed:
            services.hc_store.probe(services.api, self.obj, 1.0)  # the daemon's dry run, made before any run

    @property
    def store(self) -> khstate.StateStore:
        return self.services.kinds.of(self.spec).store

    def state(self) -> khstate.Spec:
        """The check's state as the API server has it."""
        return khstate.Spec.of(self.raw_state() or {})

    def raw_state(self) -> Obj | None:
        return self.store.read(self.services.api, self.spec.namespace, self.name, 1.0)

    def history(self) -> list[Obj]:
        """The check's run history as the API server has it, newest first (whichever kind keeps it)."""
        return list(((self.raw_state() or {}).get("spec") or {}).get("history") or [])  # a state, khstate-shaped

    def seed(self, annotations: dict[str, str] | None = None, **spec: Any) -> None:
        """Store a state as a daemon leaves it, with these khstate `spec` fields (and annotations)."""
        body = khstate_of(self.name, self.spec.namespace, annotations, **spec)
        if self.kind == kinds.KIND_HEALTHCHECK:
            def change(hc: Obj) -> None:
                hc["status"] = hcstate.status_of(body, hc.get("status"))
                if self.services.hc_store.pruned or annotations:
                    hc["metadata"].setdefault("annotations", {}).update(
                        {k: v for k, v in hcstate.binding_annotations(body).items() if v is not None})
            self.services.api.edit(HEALTHCHECKS, self.spec.namespace, self.name, change)
        else:
            self.services.api.put(KHSTATES, body)

    def state_writes(self) -> list[Call]:
        """The API calls that wrote the state."""
        method, plural = self.write
        return [c for c in self.services.api.calls if c.method == method and c.plural == plural]


class FakeEvents:
    """events.EventRecorder's queueing surface: each Event asked for, as (reason, "<ns>/<name>", detail)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.recorded: list[tuple[str, str, str]] = []

    def _add(self, reason: str, ref: ObjectRef, detail: str) -> bool:
        with self._lock:
            self.recorded.append((reason, f"{ref.namespace}/{ref.name}", detail))
        return True

    def check_failed(self, ref: ObjectRef, first_error: str) -> bool:
        return self._add("CheckFailed", ref, first_error)

    def check_recovered(self, ref: ObjectRef, failures: int = 0) -> bool:
        return self._add("CheckRecovered", ref, str(failures))

    def run_requested(self, ref: ObjectRef, source: str = "") -> bool:
        return self._add("CheckRunRequested", ref, source)

    def report_rejected(self, ref: ObjectRef, reason: str) -> bool:
        return self._add("ReportRejected", ref, reason)

    def pause_ignored(self, ref: ObjectRef, annotation: str, value: str) -> bool:
        return self._add("PauseIgnored", ref, value)

    def spec_invalid(self, ref: ObjectRef, problem: str) -> bool:
        return self._add("SpecInvalid", ref, problem)

    def state_not_kept(self, ref: ObjectRef, what: str) -> bool:
        return self._add("StateNotKept", ref, what)

    def pod_disrupted(self, ref: ObjectRef, pod: str, why: str, in_a_row: int) -> bool:
        return self._add("CheckPodDisrupted", ref, f"{in_a_row}: {why}")


# --- services ----------------------------------------------------------------------------------------------

class FakeLogFollow:
    """A followed log (kube.PodLogFollow) over the fake API's `logs`: what the pod printed, then the end."""

    def __init__(self, text: str) -> None:
        self.lines = [line.encode() for line in text.splitlines(keepends=True)]
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield from self.lines

    def close(self) -> None:
        self.closed = True


class FakeServices:
    """What Runner, Controller, workers and create_app use on `services`, over FakeApi and FakeCaches."""

    def __init__(self, *, config: Config | None = None, clock: FakeClock | None = None,
                 synced: bool = True) -> None:
        self.clock = clock or FakeClock()
        self.config = config or fake_config()
        self.activity = Activity()
        self.notifier = Notifier()
        self.clock.on_advance(self.notifier.notify_all)  # waits re-read their deadline
        self.api = FakeApi(self.clock, self.activity)
        self.resources = self.api

        def cache(res: Resource, **kwargs: Any) -> FakeCache:
            c = FakeCache(res, self.notifier, self.clock, self.activity, synced=synced, **kwargs)
            self.api.attach(c)
            return c
        self.khchecks = cache(KHCHECKS)
        self.khstates = cache(KHSTATES)
        self.khjobs = cache(KHJOBS)
        self.pods = cache(PODS, selector=CHECK_POD_SELECTOR, storage=CHECK_POD_STORAGE)
        self.healthchecks = cache(HEALTHCHECKS)
        self.api.status_fields[HEALTHCHECKS.plural] = None  # our CRD: a status subresource keeping every field
        self.v3_leases = cache(LEASES)
        self.reflectors = [self.khchecks, self.khstates, self.khjobs, self.pods, self.healthchecks]
        self.hc_store = HealthCheckStore(self.healthchecks, self._state_not_kept)
        self.v3_gate = V3LeaseGate(self.v3_leases, self.config.pod_namespace,
                                   self.config.leader_election.lease_name, lambda: self.config.pod_name,
                                   clock=self.clock, wall=self.clock.wall)
        self.kinds = kinds.standard(
            lambda: self.config, kinds.V2Caches(self.khchecks, self.khjobs, self.khstates),
            kinds.V3Parts(self.healthchecks, MappedCache(self.healthchecks, hcstate.view), self.hc_store,
                          self.v3_gate.reason, lambda obj: migration.pending(obj, self.khchecks)),
            superseded=lambda obj: migration.migrated(obj, self.healthchecks))
        self.stats = SchedulingMetrics()
        self.held = HeldReports(self.api, lambda: self.config.pod_name, wall=self.clock.wall)  # never started
        self.stuck_terminating: set[str] = set()
        self.disrupted_in_a_row: dict[str, int] = {}
        self.rollups = RollupBook()
        self.deaths = Deaths()  # where the controller's workers and parts report an unexpected end
        self.events = FakeEvents()
        self.influx: ResultSink | None = None
        self.kubelet = Kubelet(self.api, self.clock)
        self.master = POD_NAME  # the Lease holder as this replica saw it
        self.leader = False
        self.owner: Obj | None = None  # the ownerReference for checker pods in config.pod_namespace

    def owner_reference(self, namespace: str) -> Obj | None:
        return self.owner if namespace == self.config.pod_namespace else None

    def _state_not_kept(self, hc: Obj, what: str) -> None:
        self.events.state_not_kept(ObjectRef.of(hc), what)

    def wait_synced(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        return all(c.synced.wait(max(0.0, end - time.monotonic())) for c in self.reflectors)

    def sync(self) -> None:
        for c in self.reflectors:
            c.sync()

    def influx_points_dropped(self) -> int:
        return 0

    def cache_status(self) -> list[tuple[str, bool, float]]:
        return [(c.plural, c.is_current(), c.stale_seconds()) for c in self.reflectors]

    def ready(self) -> bool:
        return all(c.synced.is_set() for c in self.reflectors)

    def current_master(self) -> str:
        return self.master

    def is_leader(self) -> bool:
        return self.leader

    def read_checker_pods(self, run_uuid: str | None, ip: str | None, timeout: float) -> list[Obj]:
        ns = self.config.target_namespace or None
        if run_uuid:
            items, _ = self.api.list(PODS, ns, f"{CHECK_POD_SELECTOR},{RUN_ID_LABEL}={run_uuid}", timeout=timeout)
        else:
            items, _ = self.api.list(PODS, ns, CHECK_POD_SELECTOR, f"status.podIP={ip},status.phase=Running",
                                     timeout=timeout)
        return [slim_pod(o) for o in items]

    def read_checker_pod(self, namespace: str, name: str, timeout: float) -> Obj | None:
        try:
            return slim_pod(self.api.get(PODS, namespace, name, timeout=timeout))
        except NotFound:
            return None

    def read_check_events(self, namespace: str, kind: str, name: str, limit: int, timeout: float) -> list[Obj]:
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        items, _ = self.api.list(EVENTS, namespace, field_selector=selector, timeout=timeout)
        return items[:limit]

    def follow_pod_log(self, namespace: str, pod: str, container: str | None, limit_bytes: int,
                       seconds: float) -> FakeLogFollow:
        self.api.get(PODS, namespace, pod)
        return FakeLogFollow(self.api.logs.get((namespace, pod), "")[:limit_bytes])

    def read_khstate(self, namespace: str, name: str, timeout: float) -> Obj | None:
        try:
            return self.api.get(KHSTATES, namespace, name, timeout=timeout)
        except NotFound:
            return None

    def until(self, predicate: Callable[[], T], what: str, timeout: float = 10.0) -> T:
        return self.activity.until(predicate, what, timeout)

    def run_pods(self, run_uuid: str, namespace: str = NS) -> list[Obj]:
        """The pods of one run, as the API server has them."""
        return self.api.objects(PODS, namespace, f"{RUN_ID_LABEL}={run_uuid}")
