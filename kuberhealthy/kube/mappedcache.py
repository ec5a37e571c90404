"""A watch cache seen through a function: every object of another cache, as `view(obj)` makes it.

A HealthCheck keeps its check's state in its own status; the parts that read states take them in the
khstate shape (records/hcstate.view). MappedCache gives them that without a second watch: reads, lists,
listeners and topics are the source cache's, each object mapped once per version (views are
read-only to callers, like any cached object). Waiting on a view's topic is waiting on the source's.
"""
from __future__ import annotations

import builtins
import threading
from collections.abc import Callable

from kuberhealthy.base.notify import Topic
from kuberhealthy.kube.client import Obj
from kuberhealthy.kube.protocols import Cache, Listener

MEMO_LIMIT = 50_000  # names whose last view is kept; beyond it the memo starts again


class MappedCache:
    """Cache protocol over `source`, every object as `view(obj)`."""

    def __init__(self, source: Cache, view: Callable[[Obj], Obj]) -> None:
        self.source = source
        self._view = view
        self._lock = threading.Lock()
        # (namespace, name) -> (the object last viewed, its view): a cached object is replaced, never
        # changed, so the same object is the same version
        self._memo: dict[tuple[str, str], tuple[Obj, Obj]] = {}

    def _of(self, obj: Obj) -> Obj:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        with self._lock:
            held = self._memo.get(key)
        if held is not None and held[0] is obj:
            return held[1]
        out = self._view(obj)
        with self._lock:
            if len(self._memo) >= MEMO_LIMIT:
                self._memo.clear()
            self._memo[key] = (obj, out)
        return out

    @property
    def plural(self) -> str:
        return self.source.plural

    @property
    def synced(self) -> threading.Event:
        return self.source.synced

    def get(self, namespace: str, name: str) -> Obj | None:
        obj = self.source.get(namespace, name)
        return self._of(obj) if obj is not None else None

    def list(self) -> builtins.list[Obj]:
        return [self._of(o) for o in self.source.list()]

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        return [self._of(o) for o in self.source.by_index(index, value)]

    def add_listener(self, fn: Listener) -> None:
        def mapped(etype: str, obj: Obj, prev: Obj | None) -> None:
            fn(etype, self._of(obj), self._of(prev) if prev is not None else None)
        self.source.add_listener(mapped)

    def topic(self, index: str, value: str) -> Topic:
        return self.source.topic(index, value)

    def is_current(self) -> bool:
        return self.source.is_current()

    def stale_seconds(self) -> float:
        return self.source.stale_seconds()

    def impaired_since(self, since: float) -> bool:
        return self.source.impaired_since(since)
