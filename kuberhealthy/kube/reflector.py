"""List + watch one kind of object into an in-memory store, and wake whoever waits on a change.

Why not `kubernetes.informer.SharedInformer` (client 37.x)? It cannot list custom objects (it reads
`resp.items`, which on CustomObjectsApi's dict answer is the dict method), sets no client read
timeout (a dead connection hangs it), has no "synced" signal for readiness, no indexes, and its
stop() blocks until the next event arrives.

How a watch ends, and what follows (every way leads back to a current cache within seconds):
  * the server's own timeout (a clean EOF)          → resume from the last resourceVersion
  * 410 Gone (in the stream or as a status)        → re-list
  * an ERROR event of another kind                 → re-list
  * reset, refused, EOF mid-frame, a broken clean-up → back off (jittered, capped at BACKOFF_MAX), resume;
                                                     after a second failure in a row, re-list
  * a silent stream (a frozen API server keeps the TCP connection and says nothing): the server-side
    timeout is WATCH_SECONDS (jittered) and the client's read timeout a few seconds longer, so a
    stream that has said nothing for READ_TIMEOUT seconds is dropped and re-opened (< 30 s).
  * an unexpected exception (a bug)                → logged, back off, re-list

Freshness: the cache is *current* from a successful list or watch open until an error. While it is
not, what it says may be old: `impaired_since(t)` tells a check run whether to trust a cache-based
verdict that would fail it (the runner confirms with a read, or skips the run).

Transform: `transform(obj)` runs on every object before it is stored (client-go's SetTransform):
callers keep only the fields they read. managedFields are always dropped.

Own writes: `observe(obj)` takes an object this process just wrote (the answer of its create, replace or
patch) into the cache at once, as the watch will deliver it moments later (client-go's mutation
cache). Whoever waits on that object sees the write without waiting for the watch, and the next
read-modify-write starts from the current resourceVersion instead of a 409 and a GET. Per object the
cache never goes back: a watch event older than what it holds (resourceVersions compared as numbers,
as etcd issues them) is skipped, and so is the watch's copy of a write already observed.

Waking: each change notifies the topics `(plural, "key", ns/name)` and `(plural, index, value)` for
the object's index values before and after, so only the waiters concerned wake (see notify.py).
"""
from __future__ import annotations

import builtins
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kuberhealthy.base.copies import json_copy
from kuberhealthy.base.errors import ApiError, Gone, KuberhealthyError, NotFound
from kuberhealthy.base.notify import Notifier, Topic
from kuberhealthy.base.threads import BackgroundThread
from kuberhealthy.kube.client import Kube, Obj
from kuberhealthy.kube.protocols import Listener
from kuberhealthy.kube.resources import Resource, Resources

logger = logging.getLogger(__name__)

Indexer = Callable[[Obj], list[str]]
Transform = Callable[[Obj], Obj]

WATCH_SECONDS = 20  # server closes the watch after about this (jittered up to +25%)
READ_GRACE = 5.0  # seconds past the server's timeout before a silent stream counts as dead
BACKOFF_FIRST = 0.2  # seconds
BACKOFF_MAX = 2.0  # seconds: an API server back after an outage is seen within this
MISSING_RETRY = 30.0  # seconds between lists of an optional resource whose CRD is not installed


@dataclass(frozen=True)
class Selection:
    """Which objects of a resource a cache holds: one namespace (None: all) and the list/watch selectors."""

    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None


@dataclass(frozen=True)
class Storage:
    """What a cache keeps of each object and how it finds it again: `transform` runs on every object
    before it is stored (None: as served, less managedFields); `indexers` name the indexes by_index() reads."""

    indexers: Mapping[str, Indexer] = field(default_factory=dict)
    transform: Transform | None = None


def key_of(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _rv_of(obj: Obj | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")


def not_newer(incoming: Obj, held: Obj | None) -> bool:
    """Whether `incoming` adds nothing to `held` (the same object version, or an older one)."""
    new, old = _rv_of(incoming), _rv_of(held)
    if not new or not old:
        return False
    if new == old:
        return True
    return new.isdigit() and old.isdigit() and int(new) < int(old)


def drop_managed_fields(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class _WatchEnded(Exception):
    """The stream said something that means: list again (an ERROR event other than 410)."""


class Reflector(BackgroundThread):
    """Keeps `store` equal to the server's objects of one resource (optionally one namespace/selector)."""

    def __init__(self, kube: Kube, resource: Resource, selection: Selection = Selection(), *,
                 notifier: Notifier | None = None, storage: Storage = Storage(), name: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(name or f"kh-reflector-{resource.plural}")
        self._on_missing: Callable[[bool], None] | None = None  # optional(): the resource may not exist
        self.missing = threading.Event()
        self._kube = kube
        self._res = resource
        self.plural = resource.plural
        self._resources = Resources(kube)
        self._namespace = selection.namespace or None
        self._selector = selection.label_selector
        self._fields = selection.field_selector
        self.notifier = notifier or Notifier()
        self._indexers = dict(storage.indexers)
        self._watch_seconds = WATCH_SECONDS
        self._transform = storage.transform
        self._clock = clock
        self._lock = threading.Lock()
        self._change_lock = threading.Lock()  # one change (store, listeners, waking) at a time: watch or observe()
        self._store: dict[str, Obj] = {}
        self._indexes: dict[str, dict[str, set[str]]] = {n: {} for n in self._indexers}
        self._values: dict[str, tuple[tuple[str, str], ...]] = {}  # key -> its (index, value) pairs
        self._listeners: list[Listener] = []
        self._rv: str | None = None
        self._stream: Any = None
        self.synced = threading.Event()
        self.failed: BaseException | None = None
        self._current = False
        self._impaired_at: float | None = None  # when it last stopped being current
        self._recovered_at: float | None = None  # when it last became current again after that
        self.relists = 0
        self.watch_errors = 0

    def optional(self, on_missing: Callable[[bool], None]) -> Reflector:
        """Make the resource optional: a 404 on its list means its CRD is not installed. Then `missing`
        is set, on_missing(True) is called once, and the list is tried again every MISSING_RETRY seconds
        (on_missing(False) when it appears). Readiness does not wait for a missing resource."""
        self._on_missing = on_missing
        return self

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

    def __len__(self) -> int:
        with self._lock:
            return len(self._store)

    def add_listener(self, fn: Listener) -> None:
        """fn(type, obj, old) runs on the reflector thread after each change; keep it quick."""
        self._listeners.append(fn)

    def topic(self, index: str, value: str) -> Topic:
        """The topic notified when an object with this index value (or "key" ns/name) changes."""
        return (self.plural, index, value)

    # --- freshness ---------------------------------------------------------------------------------

    def is_current(self) -> bool:
        """True while the last list or watch open succeeded and no error has happened since (or the
        resource is optional and missing: there is nothing to be behind on)."""
        return self._current or self.missing.is_set()

    def stale_seconds(self) -> float:
        """How long the cache has not been current (0 while it is)."""
        if self._current:
            return 0.0
        since = self._impaired_at
        return 0.0 if since is None else max(0.0, self._clock() - since)

    def impaired_since(self, since: float) -> bool:
        """Whether the cache was not current at any moment from `since` (monotonic) until now."""
        if not self._current:
            return True
        recovered = self._recovered_at
        return recovered is not None and recovered >= since

    def _set_current(self, current: bool) -> None:
        if current == self._current:
            return
        now = self._clock()
        self._current = current
        if current:
            if self._impaired_at is not None:
                self._recovered_at = now
                logger.info("%s: current again after %.1fs", self.name, now - self._impaired_at)
        else:
            self._impaired_at = now
        self.notifier.notify_all()  # waiters that judge by freshness look again

    # --- lifecycle --------------------------------------------------------------------------------

    def stop(self) -> None:
        super().stop()
        stream = self._stream
        if stream is not None:
            self._kube.shutdown_stream(stream)  # unblock the watch read at once

    # --- the loop ----------------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = BACKOFF_FIRST
        failures = 0  # consecutive failed attempts
        while not self._stop.is_set():
            try:
                if self._rv is None:
                    self._relist()
                if self._watch():
                    backoff, failures = BACKOFF_FIRST, 0
                    continue
                failures += 1  # ended at once with nothing said: not a healthy stream; back off
                logger.debug("%s: watch ended at once; retrying in %.1fs", self.name, backoff)
            except NotFound:
                if self._on_missing is None or self._rv is not None:
                    raise
                if not self.missing.is_set():
                    self.missing.set()
                    self._on_missing(True)
                self._stop.wait(MISSING_RETRY)
                continue
            except Gone:
                logger.info("%s: resourceVersion expired; re-listing", self.name)
                self._rv = None
                continue
            except _WatchEnded as e:
                logger.info("%s: %s; re-listing", self.name, e)
                self._rv = None
                continue
            except (ApiError, KuberhealthyError, ValueError) as e:
                if self._stop.is_set():
                    break
                failures += 1
                self.watch_errors += 1
                logger.warning("%s: %s; retrying in %.1fs", self.name, e, backoff)
            except Exception:  # a bug: log it, back off, start over from a fresh list
                if self._stop.is_set():
                    break
                failures += 2
                self.watch_errors += 1
                logger.exception("%s: unexpected error; re-listing in %.1fs", self.name, backoff)
            self._set_current(False)
            if failures >= 2:
                self._rv = None  # whatever went wrong twice, a fresh list is the safe way back
            self._stop.wait(backoff * (0.5 + random.random() / 2))
            backoff = min(backoff * 2, BACKOFF_MAX)

    def observe(self, obj: Obj) -> None:
        """Take an object this process just wrote into the cache (see the module docstring). Ignored when
        this cache could not hold it (another namespace; a selector it cannot judge here) or already
        holds that version or a newer one."""
        if self._selector or self._fields or not self.synced.is_set():
            return
        meta = obj.get("metadata") or {}
        if self._namespace is not None and meta.get("namespace") != self._namespace:
            return
        self._change("MODIFIED", self._prepare(json_copy(obj)), own=True)  # the writer keeps its own copy

    def _relist(self) -> None:
        items, rv = self._resources.list(self._res, self._namespace, self._selector, self._fields)
        if self.missing.is_set():
            self.missing.clear()
            if self._on_missing is not None:
                self._on_missing(False)
        fresh = {key_of(o): self._prepare(o) for o in items}
        with self._change_lock:
            with self._lock:
                old = self._store
                self._store = fresh
                self._indexes = {n: {} for n in self._indexers}
                self._values = {}
                for k, o in fresh.items():
                    self._index_add(k, o)
            self._rv = rv
            self.relists += 1
            for k, o in old.items():
                if k not in fresh:
                    self._emit("DELETED", o, o)
            for k, o in fresh.items():
                prev = old.get(k)
                if prev is None:
                    self._emit("ADDED", o, None)
                elif _rv_of(prev) != _rv_of(o):
                    self._emit("MODIFIED", o, prev)
        self.synced.set()
        self._set_current(True)
        self.notifier.notify_all()

    def _prepare(self, obj: Obj) -> Obj:
        obj = drop_managed_fields(obj)
        return self._transform(obj) if self._transform is not None else obj

    def _watch(self) -> bool:
        """One watch until it ends; False when it ended at once without a single frame."""
        seconds = int(self._watch_seconds * (1 + random.random() / 4))
        query: dict[str, Any] = {"watch": "true", "allowWatchBookmarks": "true",
                                 "timeoutSeconds": seconds, "resourceVersion": self._rv or ""}
        if self._selector:
            query["labelSelector"] = self._selector
        if self._fields:
            query["fieldSelector"] = self._fields
        raw = self._kube.open_stream(self._res.path(self._namespace), query, seconds + READ_GRACE)
        self._stream = raw
        opened, frames = self._clock(), 0
        try:
            if self._stop.is_set():
                return True
            self._set_current(True)
            for line in self._kube.iter_lines(raw):
                if self._stop.is_set():
                    return True
                frames += 1
                self._apply(json.loads(line))
            return frames > 0 or self._clock() - opened >= 1.0
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
            raise _WatchEnded(f"watch error {code}: {obj.get('message')}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if etype == "BOOKMARK":
            if rv:
                self._rv = rv
            return
        if etype not in ("ADDED", "MODIFIED", "DELETED"):
            raise _WatchEnded(f"unexpected watch event type {etype!r}")
        # The watch's copy of an own write observed already: skipped here, before the transform (one
        # in about three events of a check run); _change() would skip it too, after paying for it.
        if etype == "DELETED" or not not_newer(obj, self._store.get(key_of(obj))):  # a read of one key: no lock
            self._change(str(etype), self._prepare(obj))
        if rv:
            self._rv = rv

    def _change(self, etype: str, obj: Obj, own: bool = False) -> None:
        """Store one change, tell the listeners, wake the waiters: unless it adds nothing to what is held
        (`own`: an observed write the watch has already gone past, a delete after it included)."""
        key = key_of(obj)
        with self._change_lock:
            if own and not_newer(obj, {"metadata": {"resourceVersion": self._rv}}):
                return
            with self._lock:
                prev = self._store.get(key)
                if etype != "DELETED" and not_newer(obj, prev):
                    return
                old = self._index_remove(key)
                if etype == "DELETED":
                    self._store.pop(key, None)
                    new = self._index_values(obj)
                else:
                    self._store[key] = obj
                    new = self._index_add(key, obj)
            self._emit(etype, obj, prev)
            topics: set[Topic] = {(self.plural, "key", key)}
            topics.update((self.plural, name, value) for name, value in (*old, *new))
            self.notifier.notify(topics)

    def _index_values(self, obj: Obj) -> tuple[tuple[str, str], ...]:
        return tuple((name, value) for name, fn in self._indexers.items() for value in fn(obj))

    def _index_add(self, key: str, obj: Obj) -> tuple[tuple[str, str], ...]:
        """Index a stored object; its index values are kept for its removal (indexers run once per version)."""
        values = self._index_values(obj)
        if values:
            self._values[key] = values
        for name, value in values:
            self._indexes[name].setdefault(value, set()).add(key)
        return values

    def _index_remove(self, key: str) -> tuple[tuple[str, str], ...]:
        """Take a stored object out of the indexes; the index values it had."""
        values = self._values.pop(key, ())
        for name, value in values:
            keys = self._indexes[name].get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._indexes[name][value]
        return values

    def _emit(self, etype: str, obj: Obj, prev: Obj | None) -> None:
        for fn in list(self._listeners):
            try:
                fn(etype, obj, prev)
            except Exception:  # a listener's bug must not stop the cache
                logger.exception("%s: listener failed on %s %s", self.name, etype, key_of(obj))
