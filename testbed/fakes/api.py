"""FakeApi: the API server and kube.Resources in one, with injected faults (see testbed/fakes/__init__.py)."""
from __future__ import annotations

import copy
import itertools
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kuberhealthy.base.errors import ApiError, Conflict, NotFound, ServerError, Unreachable
from kuberhealthy.kube import EVENTS, PODS, Obj, Resource, Resources
from kuberhealthy.kube.resources import FOREIGN
from testbed.fakes.cache import FakeCache, _field, _labels_match, _terms
from testbed.fakes.clock import Activity, FakeClock, stamp


@dataclass
class Fault:
    method: str  # an Api method: get, list, create, replace, merge_patch, delete, evict_pod, pod_log, ...
    plural: str | None  # None: any resource
    error: ApiError
    times: int
    commit: bool = False  # the write goes through, then the answer is lost


@dataclass(frozen=True)
class Call:
    method: str
    plural: str
    namespace: str
    name: str
    body: Obj | None = field(default=None, compare=False)


class FakeApi:
    """The API server behind kube.Resources, in memory (kube.Api). Product code calls the Api methods
    (logged in `calls`, subject to faults); tests set the scene through put/edit/remove/peek and `logs`,
    which are neither."""

    # The product's read-modify-write, on this class's get/create/replace. Not a subclass of Resources on
    # purpose: a call Resources gains that is not faked here must fail loudly, not reach a missing Kube.
    update_with_retry = Resources.update_with_retry

    def __init__(self, clock: FakeClock, activity: Activity) -> None:
        self._clock = clock
        self._activity = activity
        self._lock = threading.RLock()
        self._objects: dict[tuple[str, str, str], Obj] = {}
        self._rv = itertools.count(1)
        self._caches: dict[str, list[FakeCache]] = {}
        self._on_create: dict[str, list[Callable[[Obj], None]]] = {}
        self.calls: list[Call] = []
        self.faults: list[Fault] = []
        self.down = False  # every call fails as unreachable
        self.stuck: set[tuple[str, str]] = set()  # (namespace, pod): deleting it only marks it Terminating
        self.logs: dict[tuple[str, str], str] = {}  # (namespace, pod): what its container printed
        # plural -> the status fields its CRD keeps (a write through /status prunes the others); a
        # plural named here has a status subresource, so a replace of the object keeps the stored status
        self.status_fields: dict[str, frozenset[str] | None] = {}

    def attach(self, cache: FakeCache) -> None:
        self._caches.setdefault(cache.plural, []).append(cache)

    def on_create(self, res: Resource, fn: Callable[[Obj], None]) -> None:
        """fn(created object) runs in the creating thread after each create of this kind (a scripted kubelet)."""
        self._on_create.setdefault(res.plural, []).append(fn)

    def fail(self, method: str, res: Resource | None = None, error: ApiError | None = None, times: int = 1,
             commit: bool = False) -> None:
        """The next `times` calls of `method` (on `res`) raise `error` (default: a 500)."""
        with self._lock:
            self.faults.append(Fault(method, res.plural if res else None,
                                     error or ServerError("etcdserver: request timed out", status=500), times, commit))

    def made(self, method: str | None = None, res: Resource | None = None) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if (method is None or c.method == method)
                    and (res is None or c.plural == res.plural)]

    # --- the scene (no faults, not logged) -------------------------------------------------------------------

    def put(self, res: Resource, obj: Obj) -> Obj:
        """Create or overwrite an object (no resourceVersion check)."""
        meta = obj["metadata"]
        with self._lock:
            old = self._objects.get((res.plural, meta.get("namespace", ""), meta["name"]))
            new = self._new(res, obj)
            if old is not None:  # the same object, changed: it keeps its identity
                new["metadata"].update({k: old["metadata"][k] for k in ("uid", "creationTimestamp")})
            return self._store(res, new, "ADDED" if old is None else "MODIFIED")

    def edit(self, res: Resource, namespace: str, name: str, change: Callable[[Obj], None]) -> Obj:
        with self._lock:
            obj = copy.deepcopy(self._existing(res, namespace, name))
            change(obj)
            return self._store(res, obj, "MODIFIED")

    def remove(self, res: Resource, namespace: str, name: str) -> None:
        with self._lock:
            obj = self._objects.pop((res.plural, namespace, name))
            self._deliver(res, "DELETED", obj)

    def peek(self, res: Resource, namespace: str, name: str) -> Obj | None:
        with self._lock:
            obj = self._objects.get((res.plural, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def objects(self, res: Resource, namespace: str | None = None, label_selector: str | None = None) -> list[Obj]:
        with self._lock:
            return [copy.deepcopy(o) for (plural, ns, _), o in sorted(self._objects.items())
                    if plural == res.plural and (namespace is None or ns == namespace)
                    and _labels_match(o, label_selector)]

    # --- kube.Api: what product code calls ------------------------------------------------------------

    def get(self, res: Resource, namespace: str, name: str, timeout: float = 0) -> Obj:
        with self._lock:
            self._enter("get", res, namespace, name)
            return copy.deepcopy(self._existing(res, namespace, name))

    def list(self, res: Resource, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None, timeout: float = 0) -> tuple[list[Obj], str]:
        with self._lock:
            self._enter("list", res, namespace or "", "")
            items = [o for o in self.objects(res, namespace, label_selector)
                     if all(_field(o, k) == v for k, v in _terms(field_selector))]
            return items, str(next(self._rv))

    def create(self, res: Resource, namespace: str, body: Obj, timeout: float = 0, dry_run: bool = False) -> Obj:
        name = str((body.get("metadata") or {}).get("name") or "")
        with self._lock:
            fault = self._enter("create", res, namespace, name, body)
            if (res.plural, namespace, name) in self._objects:
                raise Conflict(f'{res.plural} "{name}" already exists', reason="AlreadyExists")
            obj = copy.deepcopy(body)
            obj.setdefault("metadata", {})["namespace"] = namespace
            if dry_run:
                return self._new(res, obj)
            out = self._store(res, self._new(res, obj), "ADDED")
        self._lost(fault)
        for fn in self._on_create.get(res.plural, ()):
            fn(copy.deepcopy(out))
        return out

    def replace(self, res: Resource, namespace: str, name: str, body: Obj, timeout: float = 0,
                dry_run: bool = False) -> Obj:
        with self._lock:
            sub = res.subresource
            method = "replace_status" if sub == "status" else "replace"
            fault = self._enter(method + ("_dry_run" if dry_run else ""), res, namespace, name, body)
            current = self._existing(res, namespace, name)
            if (body.get("metadata") or {}).get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise Conflict(f'Operation cannot be fulfilled on {res.plural} "{name}": the object has been '
                               "modified; please apply your changes to the latest version and try again")
            if sub == "status":  # only the status changes; fields the CRD does not know are pruned
                obj = copy.deepcopy(current)
                status = copy.deepcopy(body.get("status") or {})
                kept = self.status_fields.get(res.plural)
                obj["status"] = {k: v for k, v in status.items() if kept is None or k in kept}
            else:
                obj = copy.deepcopy(body)
                if res.plural in self.status_fields:  # a status subresource: the stored status is kept
                    obj["status"] = copy.deepcopy(current.get("status")) if "status" in current else None
                    if obj["status"] is None:
                        del obj["status"]
            obj["metadata"].update({k: current["metadata"][k] for k in ("uid", "creationTimestamp", "namespace")})
            if dry_run:
                return copy.deepcopy(obj)
            out = self._store(res, obj, "MODIFIED")
        self._lost(fault)
        return out

    def merge_patch(self, res: Resource, namespace: str, name: str, patch: Obj, timeout: float = 0) -> Obj:
        with self._lock:
            fault = self._enter("merge_patch", res, namespace, name, patch)
            obj = _merge(copy.deepcopy(self._existing(res, namespace, name)), patch)
            out = self._store(res, obj, "MODIFIED")
        self._lost(fault)
        return out

    def create_event(self, namespace: str, body: Obj, timeout: float = 0) -> Obj:
        return self.create(EVENTS, namespace, body, timeout=timeout)

    def patch_event(self, namespace: str, name: str, body: Obj, timeout: float = 0) -> Obj:
        return self.merge_patch(EVENTS, namespace, name, body, timeout=timeout)

    def pod_log(self, namespace: str, name: str, container: str | None = None, tail_lines: int = 40,
                limit_bytes: int = 16384, timeout: float = 0) -> str:
        with self._lock:
            self._enter("pod_log", PODS, namespace, name, {"container": container})
            self._existing(PODS, namespace, name)
            lines = self.logs.get((namespace, name), "").splitlines(keepends=True)[-tail_lines:]
        return "".join(lines).encode()[-limit_bytes:].decode("utf-8", "replace")

    def delete(self, res: Resource, namespace: str, name: str, grace_seconds: int | None = None,
               uid: str | None = None, timeout: float = 0) -> bool:
        with self._lock:
            fault = self._enter("delete", res, namespace, name, {"uid": uid})  # the precondition, for tests
            gone = self._delete(res, namespace, name, uid)
        self._lost(fault)
        return gone

    def evict_pod(self, namespace: str, name: str, uid: str | None = None, timeout: float = 0) -> str:
        """As kube.Resources: a `uid` precondition that another pod under the name fails leaves it alone."""
        with self._lock:
            fault = self._enter("evict_pod", PODS, namespace, name, {"uid": uid})
            obj = self._objects.get((PODS.plural, namespace, name))
            if obj is not None and uid and obj["metadata"].get("uid") != uid:
                how = FOREIGN
            else:
                how = "evicted" if self._delete(PODS, namespace, name, None) else "gone"
        self._lost(fault)
        return how

    # --- inside ------------------------------------------------------------------------------------------

    def _enter(self, method: str, res: Resource, namespace: str, name: str, body: Obj | None = None) -> Fault | None:
        """Log the call; raise its fault, or return a committing fault to raise after the write."""
        self.calls.append(Call(method, res.plural, namespace, name, copy.deepcopy(body)))
        self._activity.touch()
        if self.down:
            raise Unreachable("connection refused (the fake API server is down)")
        for fault in self.faults:
            if fault.times > 0 and fault.method == method and fault.plural in (None, res.plural):
                fault.times -= 1
                if fault.commit:
                    return fault
                raise fault.error
        return None

    @staticmethod
    def _lost(fault: Fault | None) -> None:
        if fault is not None:
            raise fault.error

    def _existing(self, res: Resource, namespace: str, name: str) -> Obj:
        obj = self._objects.get((res.plural, namespace, name))
        if obj is None:
            raise NotFound(f'{res.plural} "{name}" not found')
        return obj

    def _new(self, res: Resource, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", stamp(self._clock))
        if res.plural == PODS.plural:
            obj.setdefault("status", {"phase": "Pending"})
        return obj

    def _store(self, res: Resource, obj: Obj, etype: str) -> Obj:
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        meta = obj["metadata"]
        self._objects[(res.plural, meta.get("namespace", ""), meta["name"])] = obj
        self._deliver(res, etype, obj)
        return copy.deepcopy(obj)

    def _deliver(self, res: Resource, etype: str, obj: Obj) -> None:
        for cache in self._caches.get(res.plural, ()):
            if cache.selects(obj):
                cache.deliver(etype, copy.deepcopy(obj))

    def _delete(self, res: Resource, namespace: str, name: str, uid: str | None) -> bool:
        obj = self._objects.get((res.plural, namespace, name))
        if obj is None or (uid and obj["metadata"].get("uid") != uid):
            return False
        if res.plural == PODS.plural and (namespace, name) in self.stuck:
            if not obj["metadata"].get("deletionTimestamp"):
                obj = copy.deepcopy(obj)
                obj["metadata"]["deletionTimestamp"] = stamp(self._clock)
                self._store(res, obj, "MODIFIED")
            return True
        del self._objects[(res.plural, namespace, name)]
        self._deliver(res, "DELETED", obj)
        return True


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out
