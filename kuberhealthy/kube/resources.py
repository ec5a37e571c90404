"""Typed access to the resources Kuberhealthy uses: its three CRDs, pods, Leases.

Each function is one API call (or, for eviction and read-modify-write, a short documented sequence).
Objects are plain dicts in their wire form.
"""
from __future__ import annotations

import builtins
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kuberhealthy.base.copies import json_copy
from kuberhealthy.base.errors import ApiError, BadRequest, Conflict, NotFound, Unreachable, is_transient
from kuberhealthy.kube.client import READ_TIMEOUT, Kube, Obj

logger = logging.getLogger(__name__)

GROUP = "comcast.github.io"
UPDATE_ATTEMPTS = 8  # conflicts update_with_retry takes before it gives up
RETRY_PREFERRED = 3600.0  # seconds a server's refusal of a preferred version is remembered (it may be upgraded)


@dataclass(frozen=True)
class Bounds:
    """How long a read-modify-write may take: each request at most `timeout` seconds, and none started
    after `deadline` (monotonic seconds on `clock`; None: no deadline)."""

    timeout: float = READ_TIMEOUT
    deadline: float | None = None
    clock: Callable[[], float] = time.monotonic

    def per_request(self, timeout: float) -> Bounds:
        """The same deadline, with another per-request timeout (a retried call's next attempt)."""
        return Bounds(timeout, self.deadline, self.clock)


@dataclass(frozen=True)
class Resource:
    """Where a kind of object lives in the API."""

    plural: str
    group: str = ""
    version: str = "v1"
    namespaced: bool = True
    subresource: str = ""  # "status": reads and writes of one object go to its status subresource

    def status(self) -> Resource:
        """The same resource, one object's reads and writes through its status subresource (a write
        changes only the status; an object cannot be created there)."""
        return Resource(self.plural, self.group, self.version, self.namespaced, "status")

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            sub = sub or self.subresource or None
        if sub:
            base += f"/{sub}"
        return base


KHCHECKS = Resource("khchecks", GROUP)
KHSTATES = Resource("khstates", GROUP)
KHJOBS = Resource("khjobs", GROUP)
HEALTHCHECKS = Resource("healthchecks", "kuberhealthy.github.io", "v2")  # Kuberhealthy v3's one CRD
PODS = Resource("pods")
LEASES = Resource("leases", "coordination.k8s.io")
EVENTS = Resource("events")
TOKENREVIEWS = Resource("tokenreviews", "authentication.k8s.io", namespaced=False)
DEPLOYMENTS = Resource("deployments", "apps")  # only for stopping a release before uninstall


@dataclass(frozen=True)
class Versions:
    """The versions of a kind sent as a request body rather than named by a Resource's path: the preferred
    one (served by the newest Kubernetes), and older ones asked only of a server that cannot read it."""

    kind: str
    preferred: str
    fallbacks: tuple[str, ...] = ()

    @property
    def in_order(self) -> tuple[str, ...]:
        return (self.preferred, *self.fallbacks)


# POSTed to pods/<name>/eviction: policy/v1 from Kubernetes 1.22; before, policy/v1beta1 (unlisted from 1.25 on).
EVICTION = Versions("Eviction", "policy/v1", ("policy/v1beta1",))
FOREIGN = "foreign"  # evict_pod: the pod under that name is not the one meant (its uid differs); left alone


class PodLogFollow:
    """One followed container log (Resources.follow_pod_log): its lines, each with its newline, as they
    arrive, until the log ends or `deadline` (monotonic) passes; close() ends it from any thread.

    Each read waits at most the whole bound (the stream's read timeout), so a log that stays quiet
    ends the stream no later than twice the bound. Lines come as the watch reader splits them: a
    blank line is not passed on. A stream that breaks ends the iteration quietly: what was read is
    what the caller has."""

    def __init__(self, raw: Any, deadline: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._raw = raw
        self._deadline = deadline
        self._clock = clock

    def __iter__(self) -> Iterator[bytes]:
        try:
            for line in Kube.iter_lines(self._raw):
                yield line + b"\n"
                if self._clock() >= self._deadline:
                    return
        except ApiError as e:  # a read timeout at the bound, or a broken stream
            logger.debug("A followed pod log ended: %s", e)
        finally:
            self.close()

    def close(self) -> None:
        Kube.shutdown_stream(self._raw)


class Resources:
    """CRUD on our resources through one Kube connection."""

    def __init__(self, kube: Kube, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self._observers: dict[str, list[Callable[[Obj], None]]] = {}
        self._clock = clock
        self._eviction_refused_at: float | None = None  # when the server last could not read EVICTION.preferred

    def on_written(self, res: Resource, fn: Callable[[Obj], None]) -> None:
        """fn(obj) runs with the answer of every create, replace and patch of `res` made here (a cache's
        observe(): the writer's own cache is current with its write at once)."""
        self._observers.setdefault(res.plural, []).append(fn)

    def _written(self, res: Resource, obj: Obj) -> Obj:
        for fn in self._observers.get(res.plural, ()):
            fn(obj)
        return obj

    def get(self, res: Resource, namespace: str, name: str, timeout: float = READ_TIMEOUT) -> Obj:
        return dict(self.kube.request("GET", res.path(namespace, name), timeout=timeout))

    def list(self, res: Resource, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None, timeout: float = READ_TIMEOUT) -> tuple[list[Obj], str]:
        """All objects (following `continue` pages) and the list's resourceVersion."""
        items: list[Obj] = []
        query: dict[str, Any] = {"limit": 500}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        while True:
            doc = self.kube.request("GET", res.path(namespace), query=query, timeout=timeout)
            items.extend(doc.get("items") or [])
            meta = doc.get("metadata") or {}
            if not meta.get("continue"):
                return items, str(meta.get("resourceVersion") or "")
            query["continue"] = meta["continue"]

    def list_bounded(self, res: Resource, namespace: str | None = None, label_selector: str | None = None,
                     field_selector: str | None = None, max_items: int = 500,
                     timeout: float = READ_TIMEOUT) -> tuple[builtins.list[Obj], bool]:
        """At most `max_items` objects (the first ones in the API server's order: by name) in pages of at
        most 500, every page within one `timeout` in all; and whether that was all of them."""
        items: builtins.list[Obj] = []
        query: dict[str, Any] = {}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        deadline = time.monotonic() + timeout
        while True:
            query["limit"] = max(1, min(500, max_items - len(items)))
            doc = self.kube.request("GET", res.path(namespace), query=query,
                                    timeout=max(0.1, deadline - time.monotonic()))
            items.extend(doc.get("items") or [])
            token = (doc.get("metadata") or {}).get("continue")
            if not token:
                return items[:max_items], True
            if len(items) >= max_items or deadline - time.monotonic() < 0.1:
                return items[:max_items], False
            query["continue"] = token

    def create(self, res: Resource, namespace: str, body: Obj, timeout: float = READ_TIMEOUT,
               dry_run: bool = False) -> Obj:
        """POST; with `dry_run` the API server validates (and prunes, defaults) but stores nothing."""
        query = {"dryRun": "All"} if dry_run else None
        created = dict(self.kube.request("POST", res.path(namespace), query=query, body=body, timeout=timeout))
        return created if dry_run else self._written(res, created)

    def replace(self, res: Resource, namespace: str, name: str, body: Obj, timeout: float = READ_TIMEOUT,
                dry_run: bool = False) -> Obj:
        """PUT with the body's resourceVersion: Conflict when someone wrote in between. With `dry_run` the
        API server answers what it would store (pruned, defaulted) and stores nothing."""
        query = {"dryRun": "All"} if dry_run else None
        answer = dict(self.kube.request("PUT", res.path(namespace, name), query=query, body=body, timeout=timeout))
        return answer if dry_run else self._written(res, answer)

    def merge_patch(self, res: Resource, namespace: str, name: str, patch: Obj, timeout: float = READ_TIMEOUT) -> Obj:
        return self._written(res, dict(self.kube.request("PATCH", res.path(namespace, name), body=patch,
                                                         content_type="application/merge-patch+json", timeout=timeout)))

    # --- Events (events.EventsAPI) and pod logs -------------------------------------------------------

    def create_event(self, namespace: str, body: Obj, timeout: float = READ_TIMEOUT) -> Obj:
        return self.create(EVENTS, namespace, body, timeout=timeout)

    def patch_event(self, namespace: str, name: str, body: Obj, timeout: float = READ_TIMEOUT) -> Obj:
        return self.merge_patch(EVENTS, namespace, name, body, timeout=timeout)

    def pod_log(self, namespace: str, name: str, container: str | None = None, tail_lines: int = 40,
                limit_bytes: int = 16384, timeout: float = READ_TIMEOUT) -> str:
        """The end of a container's log: its last `tail_lines` lines, or fewer of the last ones when those
        do not fit in `limit_bytes` (pods/log: the API server reads it from the node's kubelet).

        The kubelet counts limitBytes from the start of the tail, so when the last `tail_lines` lines are
        longer than `limit_bytes` it answers with their beginning, cut mid-line, and not the log's end. An
        answer that fills `limit_bytes` is asked for again with half the lines, until one fits or a
        single line is left: a few requests at most, all of them within `timeout`."""
        deadline = time.monotonic() + timeout
        lines = tail_lines
        while True:
            query: dict[str, str | int] = {"tailLines": lines, "limitBytes": limit_bytes}
            if container:
                query["container"] = container
            data = self.kube.request_bytes("GET", PODS.path(namespace, name, "log"), query=query,
                                           timeout=max(0.1, deadline - time.monotonic()))
            if len(data) < limit_bytes or lines <= 1 or deadline - time.monotonic() < 0.1:
                return data.decode("utf-8", "replace")
            lines //= 2

    def follow_pod_log(self, namespace: str, name: str, container: str | None, limit_bytes: int,
                       seconds: float) -> PodLogFollow:
        """A container's log from its start, followed as it grows (pods/log with follow): open when this
        returns (ApiError raised here: the pod or container unknown, not started, the API away). It ends
        when the container ends, after `limit_bytes` (the kubelet stops there), or at `seconds`."""
        query: dict[str, str | int] = {"follow": "true", "limitBytes": limit_bytes}
        if container:
            query["container"] = container
        raw = self.kube.open_stream(PODS.path(namespace, name, "log"), query, read_timeout=seconds)
        return PodLogFollow(raw, time.monotonic() + seconds)

    def delete(self, res: Resource, namespace: str, name: str, grace_seconds: int | None = None,
               uid: str | None = None, timeout: float = READ_TIMEOUT) -> bool:
        """Delete; False when it was already gone. `uid` guards against deleting a same-named successor."""
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self.kube.request("DELETE", res.path(namespace, name), body=body, timeout=timeout)
            return True
        except NotFound:
            return False
        except Conflict:  # uid precondition failed: the pod we meant is gone
            return False

    def evict_pod(self, namespace: str, name: str, uid: str | None = None, timeout: float = READ_TIMEOUT) -> str:
        """Evict a pod (EVICTION's preferred version; an older one only where the server cannot read it),
        else delete it.

        Returns how it went: "evicted", "deleted", "gone", or FOREIGN: `uid` (a precondition, in the
        eviction's deleteOptions and on the delete) is not the uid of the pod now under that name, so a
        pod the caller did not create is never touched. An unreachable API server ends the sequence at
        once (raised): the fallbacks are for servers that refuse a version, not for servers that are
        away, where each would only wait out its own timeout. A server that refuses the eviction itself (a
        PodDisruptionBudget, a webhook, RBAC) is not asked again in another version: the pod is deleted.
        """
        for version in self._eviction_order():
            body: Obj = {"apiVersion": version, "kind": EVICTION.kind,
                         "metadata": {"name": name, "namespace": namespace}}
            if uid:
                body["deleteOptions"] = {"preconditions": {"uid": uid}}
            try:
                self.kube.request("POST", PODS.path(namespace, name, "eviction"), body=body, timeout=timeout)
                if version == EVICTION.preferred:
                    self._eviction_refused_at = None
                return "evicted"
            except NotFound:
                # The eviction subresource is served everywhere; an unknown body version is a 4xx/5xx
                # other than 404, so a 404 means the pod itself is gone.
                return "gone"
            except Conflict as e:
                if uid:  # the precondition failed: another pod has the name now
                    logger.debug("Not evicting %s/%s: %s", namespace, name, e)
                    return FOREIGN
                logger.debug("Eviction as %s failed for %s/%s: %s", version, namespace, name, e)
                break
            except ApiError as e:
                if is_transient(e) and e.status in (0, 503, 504):
                    raise
                logger.debug("Eviction as %s failed for %s/%s: %s", version, namespace, name, e)
                if e.status != BadRequest.status:
                    break
                # 400: the server cannot read an Eviction of this version (policy/v1 before 1.22). Ask the
                # next one, and ask that first for a while rather than two requests for every eviction.
                if version == EVICTION.preferred:
                    self._eviction_refused_at = self._clock()
        return "deleted" if self.delete(PODS, namespace, name, uid=uid, timeout=timeout) else "gone"

    def _eviction_order(self) -> tuple[str, ...]:
        """EVICTION's versions, the preferred first unless the server could not read it lately."""
        refused = self._eviction_refused_at
        if refused is not None and self._clock() - refused < RETRY_PREFERRED:
            return (*EVICTION.fallbacks, EVICTION.preferred)
        return EVICTION.in_order

    def update_with_retry(self, res: Resource, namespace: str, name: str,
                          mutate: Callable[[Obj | None], Obj | None], *,
                          hint: Obj | None = None, bounds: Bounds = Bounds(),
                          stop: threading.Event | None = None) -> Obj | None:
        """Read-modify-write with optimistic concurrency.

        `mutate` gets the current object (None if missing) and returns the object to write (a fresh
        body to create, or the modified object to replace), or None to write nothing. On 409 the
        object is re-read and `mutate` runs again, with a short jittered backoff.

        `hint` is a copy of the object from a watch cache: the first attempt starts from it instead
        of a GET (its resourceVersion makes a stale hint a harmless 409 and a re-read).

        Each request waits at most `bounds.timeout` seconds, and none starts after `bounds.deadline`.
        Errors other than 409 are raised to the caller, which knows whether a retry makes sense.
        Through a subresource (`res.status()`) a missing object is never created (`mutate(None)` is still
        asked, and must answer None).
        """
        waiter = stop or threading.Event()
        delay = 0.02
        timeout, deadline, attempts = bounds.timeout, bounds.deadline, UPDATE_ATTEMPTS

        def budget() -> float:
            if deadline is None:
                return timeout
            left = deadline - bounds.clock()
            if left <= 0:
                raise Unreachable(f"gave up writing {res.plural} {namespace}/{name}: out of time")
            return min(timeout, max(0.2, left))
        for attempt in range(attempts):
            current: Obj | None
            if attempt == 0 and hint is not None:
                current = json_copy(hint)
            else:
                try:
                    current = self.get(res, namespace, name, timeout=budget())
                except NotFound:
                    current = None
            desired = mutate(current)
            if desired is None:
                return current
            try:
                if current is None:
                    if res.subresource:
                        raise ValueError(f"cannot create {res.plural} {namespace}/{name} through /{res.subresource}")
                    return self.create(res, namespace, desired, timeout=budget())
                return self.replace(res, namespace, name, desired, timeout=budget())
            except Conflict:
                logger.debug("Conflict writing %s %s/%s (attempt %d); retrying", res.plural, namespace, name,
                             attempt + 1)
                if waiter.wait(delay * (1 + random.random())):
                    break
                delay = min(delay * 2, 1.0)
        raise Conflict(f"gave up writing {res.plural} {namespace}/{name} after {attempts} conflicts")
