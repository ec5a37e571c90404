"""The kinds of check the daemon runs, as data: where a kind's checks, states and pods live, and how its
objects are read. The runner, the controller, the reapers and the report handler are written once
against `Kind`; nothing there names a kind (tests/unit/test_architecture.py holds them to it).

  khcheck      KuberhealthyCheck (comcast.github.io/v1), state in a khstate of the same name
  khjob        KuberhealthyJob, runs once, state in a khstate of the same name
  healthcheck  HealthCheck (kuberhealthy.github.io/v2, Kuberhealthy v3's), state in its own status

A check's identity inside the daemon is its `ident`: `<namespace>/<prefix><name>`. khchecks and khjobs
have no prefix (their ident is v2's key, and they share the khstates, as in v2); a HealthCheck's is
`hc:` ("hc:" cannot start a Kubernetes name), so a khcheck and a HealthCheck of one name in one
namespace are two checks. Checker pods name their check by labels: `healthcheck=<name>` (v3's) makes a
pod a HealthCheck's, else `kuberhealthy-check-name=<name>` a khcheck's or khjob's
(checkpod.pod_check_index).

The daemon (daemon/services.py) builds the table; tests build it over fakes. Pure otherwise.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from kuberhealthy.base.config import Config
from kuberhealthy.kube import HEALTHCHECKS, KHCHECKS, KHJOBS, KHSTATES, Cache, Obj, Resource
from kuberhealthy.records import hcstate, migration, uptime
from kuberhealthy.records.checkpod import CHECK_NAME_LABEL, V3_CHECK_LABEL
from kuberhealthy.records.checkspec import (
    HC_PREFIX,
    KIND_HEALTHCHECK,
    KIND_KHCHECK,
    KIND_KHJOB,
    CheckSpec,
    ident,
)
from kuberhealthy.records.khstate import KHSTATE_STORE, WORKLOAD_JOB, StateStore

__all__ = ["HC_PREFIX", "KIND_HEALTHCHECK", "KIND_KHCHECK", "KIND_KHJOB", "V3_FINALIZER", "Kind", "Kinds", "V2Caches",
           "V3Parts", "control_view", "ident", "standard", "switch_marks"]

V3_FINALIZER = "kuberhealthy.io/healthcheck"  # upstream v3 puts it on every HealthCheck it runs


def _open() -> str:
    return ""


@dataclass(frozen=True)
class Kind:
    """One kind of check."""

    name: str  # KIND_KHCHECK | KIND_KHJOB | KIND_HEALTHCHECK
    prefix: str  # before the name in an ident
    resource: Resource  # where its checks live
    checks: Cache  # its checks
    states: Cache  # their states, in the khstate shape
    store: StateStore  # reads and writes a state
    event_kind: str  # involvedObject.kind of the Events about one of its checks
    parse: Callable[[Obj], CheckSpec]  # a check as a run needs it; raises checkspec.SpecProblem
    reporting_url: Callable[[], str]  # KH_REPORTING_URL of its checker pods
    pod_label: str  # the checker pod label whose value is the check's name
    state_resource: Resource | None = None  # where its states are objects of their own (khstates): orphans
    # are reaped; None: the state lives in the check itself
    runs_once: bool = False  # every check of it runs once (a khjob); else a spec may say so
    finalizer: str = ""  # a finalizer the daemon removes from a deleted check once its pods are gone
    gate: Callable[[], str] = field(default=_open)  # non-empty: why none of its checks may run now
    superseded: Callable[[Obj], bool] = field(default=lambda _obj: False)  # run as another kind now (migrated)

    def ident(self, namespace: str, name: str) -> str:
        return ident(namespace, name, self.prefix)

    def ident_of(self, obj: Obj) -> str:
        meta = obj.get("metadata") or {}
        return self.ident(str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    def state_key(self, namespace: str, name: str) -> str:
        """The key of a check's state object in the uptime rollups' book and memo (records/uptime.py)."""
        return uptime.state_key((self.state_resource or self.resource).plural, namespace, name)


class Kinds:
    """Every kind this daemon runs, khchecks first (the order a bare name is looked up in)."""

    def __init__(self, kinds: Sequence[Kind]) -> None:
        self.all = tuple(kinds)
        self._by_name = {k.name: k for k in self.all}
        self._by_prefix = sorted((k for k in self.all if k.prefix), key=lambda k: -len(k.prefix))

    def __iter__(self) -> Iterator[Kind]:
        return iter(self.all)

    def named(self, name: str) -> Kind | None:
        return self._by_name.get(name)

    def of(self, check: CheckSpec) -> Kind:
        """The kind of a parsed check."""
        return self._by_name[check.kind]

    def of_ident(self, check_ident: str, workload: str = "") -> tuple[Kind, str, str] | None:
        """(kind, namespace, name) of an ident; None when no cache has it. The unprefixed kinds share
        names (v2's khcheck and khjob): a bare ident is the first that holds the name, a run-once kind
        first when `workload` (a state's khWorkload) says the state is a job's."""
        namespace, _, rest = check_ident.partition("/")
        for kind in self._by_prefix:
            if rest.startswith(kind.prefix):
                name = rest[len(kind.prefix):]
                return (kind, namespace, name) if kind.checks.get(namespace, name) is not None else None
        bare = [k for k in self.all if not k.prefix]
        if workload == WORKLOAD_JOB:
            bare.sort(key=lambda k: not k.runs_once)
        for kind in bare:
            if kind.checks.get(namespace, rest) is not None:
                return kind, namespace, rest
        return None

    def state_cache(self, check_ident: str) -> Cache:
        """The states cache an ident's state is in (the unprefixed kinds share theirs)."""
        _, _, rest = check_ident.partition("/")
        for kind in self._by_prefix:
            if rest.startswith(kind.prefix):
                return kind.states
        return next(k for k in self.all if not k.prefix).states

    def split(self, check_ident: str) -> tuple[str, str, str]:
        """(prefix, namespace, name) of an ident."""
        namespace, _, rest = check_ident.partition("/")
        for kind in self._by_prefix:
            if rest.startswith(kind.prefix):
                return kind.prefix, namespace, rest[len(kind.prefix):]
        return "", namespace, rest

    def store_of(self, check_ident: str) -> StateStore:
        prefix, _, _ = self.split(check_ident)
        return next(k for k in self.all if k.prefix == prefix).store


def control_view(obj: Obj) -> tuple[object, ...]:
    """What of a check object the controller acts on: all but its status (and the run binding a CRD
    that prunes our status fields makes the daemon keep in annotations). Two versions with the same
    view are the same check to the controller."""
    meta = obj.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in hcstate.BINDING_KEYS}
    return (meta.get("generation"), meta.get("resourceVersion") if meta.get("generation") is None else None,
            annotations, meta.get("labels"), meta.get("deletionTimestamp"), meta.get("finalizers"))


def switch_marks(obj: Obj | None) -> tuple[str, str]:
    """The marks that move a check from one kind to another (records/migration.py): a change of them is
    acted on at once, not after the debounce, so neither kind runs once too often meanwhile."""
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return (str(annotations.get(migration.MIGRATED_TO) or ""), str(annotations.get(migration.MIGRATED_FROM) or ""))


@dataclass(frozen=True)
class V2Caches:
    """The caches of v2's kinds."""

    khchecks: Cache
    khjobs: Cache
    khstates: Cache


@dataclass(frozen=True)
class V3Parts:
    """What the HealthCheck kind runs on: its cache, its states (hcstate views of it), where a state is
    written (statestore.HealthCheckStore), and its gate (v3lease: v3's own controller holds its Lease)."""

    healthchecks: Cache
    states: Cache
    store: StateStore
    gate: Callable[[], str] = _open
    pending: Callable[[Obj], bool] = lambda _obj: False  # a migration's HealthCheck whose khcheck still runs


def standard(config: Callable[[], Config], v2: V2Caches, v3: V3Parts,
             superseded: Callable[[Obj], bool] = lambda _obj: False) -> Kinds:
    """This daemon's kinds: khchecks, khjobs and HealthChecks. `config` gives the settings in force
    (a reload replaces them); `superseded` says a khcheck now runs as its migrated HealthCheck."""
    def healthcheck(obj: Obj) -> CheckSpec:
        settings = config()
        return CheckSpec.of_healthcheck(obj, settings.healthcheck_run_interval, settings.healthcheck_timeout)

    return Kinds([
        Kind(KIND_KHCHECK, "", KHCHECKS, v2.khchecks, v2.khstates, KHSTATE_STORE, "KuberhealthyCheck", CheckSpec.of,
             lambda: config().external_check_reporting_url, CHECK_NAME_LABEL, state_resource=KHSTATES,
             superseded=superseded),
        Kind(KIND_KHJOB, "", KHJOBS, v2.khjobs, v2.khstates, KHSTATE_STORE, "KuberhealthyJob", CheckSpec.of_job,
             lambda: config().external_check_reporting_url, CHECK_NAME_LABEL, state_resource=KHSTATES,
             runs_once=True),
        Kind(KIND_HEALTHCHECK, HC_PREFIX, HEALTHCHECKS, v3.healthchecks, v3.states, v3.store, "HealthCheck",
             healthcheck, lambda: config().v3_reporting_url, V3_CHECK_LABEL, finalizer=V3_FINALIZER, gate=v3.gate,
             superseded=v3.pending),
    ])
