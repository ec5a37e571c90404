"""List + watch one kind of object into an in-memory store, and wake whoever waits on it.

Why not `kubernetes.informer.SharedInformer` (client 37.x)? It cannot list custom objects (it reads
`resp.items`, which on CustomObjectsApi's dict answer is the dict method), sets no client read
timeout (a dead connection hangs it), has no "synced" signal for readiness, no indexes, and its
stop() blocks until the next event arrives. This reflector adds exactly those: a server-side watch
timeout shorter than the client read timeout, bookmarks, resume from the last resourceVersion,
re-list on 410, backoff on errors, indexes, a `synced` event, and a stop that closes the stream.

Waiting is shared through a `Notifier`: every store change calls notify_all on one Condition, so a
check run can wait on "pod past Pending, or khstate LastRun moved, or stop" without polling.
"""
from __future__ import annotations

import builtins
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kuberhealthy.errors import ApiError, Gone, KuberhealthyError
from kuberhealthy.kube.client import Kube, Obj
from kuberhealthy.kube.resources import Resource, Resources
from kuberhealthy.threads import BackgroundThread

logger = logging.getLogger(__name__)

T = TypeVar("T")
Listener = Callable[[str, Obj, "Obj | None"], None]  # (event type, object, previous object)
Indexer = Callable[[Obj], list[str]]

WATCH_SECONDS = 240  # server closes the watch after this; the client read timeout is longer


def key_of(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class Notifier:
    """One Condition shared by the reflectors, so a waiter can watch several stores at once."""

    def __init__(self) -> None:
        self._cond = threading.Condition()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[], T], deadline: float, stop: threading.Event | None = None,
                 clock: Callable[[], float] = time.monotonic) -> T | None:
        """Block until predicate() is truthy (returned), the monotonic deadline passes or stop is set (None).

        Whoever sets `stop` must call wake() so the waiter notices at once.
        """
        with self._cond:
            while True:
                value = predicate()
                if value:
                    return value
                if stop is not None and stop.is_set():
                    return None
                remaining = deadline - clock()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)


class Reflector(BackgroundThread):
    """Keeps `store` equal to the server's objects of one resource (optionally one namespace/selector)."""

    def __init__(self, kube: Kube, resource: Resource, *, namespace: str | None = None,
                 label_selector: str | None = None, notifier: Notifier | None = None,
                 indexers: dict[str, Indexer] | None = None, name: str | None = None,
                 watch_seconds: int = WATCH_SECONDS) -> None:
        super().__init__(name or f"kh-reflector-{resource.plural}")
        self._kube = kube
        self._res = resource
        self._resources = Resources(kube)
        self._namespace = namespace or None
        self._selector = label_selector
        self.notifier = notifier or Notifier()
        self._indexers = dict(indexers or {})
        self._watch_seconds = watch_seconds
        self._lock = threading.Lock()
        self._store: dict[str, Obj] = {}
        self._indexes: dict[str, dict[str, set[str]]] = {n: {} for n in self._indexers}
        self._listeners: list[Listener] = []
        self._rv: str | None = None
        self._stream: Any = None
        self.synced = threading.Event()
        self.failed: BaseException | None = None

    # --- reading ---------------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._store.get(f"{namespace}/{name}")

    def list(self) -> list[Obj]:
        with self._lock:
            return list(self._store.values())

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        with self._lock:
            return [self._store[k] for k in self._indexes[index].get(value, ()) if k in self._store]

    def add_listener(self, fn: Listener) -> None:
        """fn(type, obj, old) runs on the reflector thread after each change; keep it quick."""
        self._listeners.append(fn)

    # --- lifecycle --------------------------------------------------------------------------------

    def stop(self) -> None:
        super().stop()
        stream = self._stream
        if stream is not None:
            self._kube.shutdown_stream(stream)  # unblock the watch read at once

    # --- the loop ----------------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            try:
                if self._rv is None:
                    self._relist()
                self._watch()
                backoff = 0.2
            except Gone:
                logger.info("%s: resourceVersion expired; re-listing", self.name)
                self._rv = None
            except (ApiError, KuberhealthyError, ValueError) as e:
                if self._stop.is_set():
                    break
                logger.warning("%s: %s; retrying in %.1fs", self.name, e, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
            except Exception:  # a bug: log it, back off, keep the cache alive
                logger.exception("%s: unexpected error; retrying in %.1fs", self.name, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def _relist(self) -> None:
        items, rv = self._resources.list(self._res, self._namespace, self._selector)
        fresh = {key_of(o): o for o in items}
        with self._lock:
            old = self._store
            self._store = fresh
            self._indexes = {n: {} for n in self._indexers}
            for k, o in fresh.items():
                self._index_add(k, o)
        self._rv = rv
        for k, o in old.items():
            if k not in fresh:
                self._emit("DELETED", o, o)
        for k, o in fresh.items():
            prev = old.get(k)
            if prev is None:
                self._emit("ADDED", o, None)
            elif (prev.get("metadata") or {}).get("resourceVersion") != (o.get("metadata") or {}).get(
                    "resourceVersion"):
                self._emit("MODIFIED", o, prev)
        self.synced.set()
        self.notifier.wake()

    def _watch(self) -> None:
        query: dict[str, Any] = {"watch": "true", "allowWatchBookmarks": "true",
                                 "timeoutSeconds": self._watch_seconds, "resourceVersion": self._rv or ""}
        if self._selector:
            query["labelSelector"] = self._selector
        raw = self._kube.open_stream(self._res.path(self._namespace), query, self._watch_seconds + 30.0)
        self._stream = raw
        try:
            if self._stop.is_set():
                return
            for line in self._kube.iter_lines(raw):
                if self._stop.is_set():
                    return
                self._apply(json.loads(line))
        finally:
            self._stream = None
            self._kube.shutdown_stream(raw)

    def _apply(self, event: dict[str, Any]) -> None:
        etype = event.get("type")
        obj = event.get("object") or {}
        if etype == "ERROR":
            code = int(obj.get("code") or 0)
            if code == 410:
                raise Gone(str(obj.get("message") or "resourceVersion too old"))
            raise ApiError(f"watch error {code}: {obj.get('message')}", status=code)
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if etype == "BOOKMARK":
            if rv:
                self._rv = rv
            return
        key = key_of(obj)
        with self._lock:
            prev = self._store.get(key)
            if prev is not None:
                self._index_remove(key, prev)
            if etype == "DELETED":
                self._store.pop(key, None)
            else:
                self._store[key] = obj
                self._index_add(key, obj)
        if rv:
            self._rv = rv
        self._emit(str(etype), obj, prev)
        self.notifier.wake()

    def _index_add(self, key: str, obj: Obj) -> None:
        for name, fn in self._indexers.items():
            for value in fn(obj):
                self._indexes[name].setdefault(value, set()).add(key)

    def _index_remove(self, key: str, obj: Obj) -> None:
        for name, fn in self._indexers.items():
            for value in fn(obj):
                keys = self._indexes[name].get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._indexes[name][value]

    def _emit(self, etype: str, obj: Obj, prev: Obj | None) -> None:
        for fn in list(self._listeners):
            try:
                fn(etype, obj, prev)
            except Exception:  # a listener's bug must not stop the cache
                logger.exception("%s: listener failed on %s %s", self.name, etype, key_of(obj))
