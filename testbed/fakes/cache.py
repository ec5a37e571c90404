"""FakeCache: the reading surface of kube.Reflector over a dict, notifying the real Notifier like it does."""
from __future__ import annotations

import builtins
import threading
from collections.abc import Callable
from typing import Any

from kuberhealthy.base.notify import Notifier, Topic
from kuberhealthy.kube import Obj, Resource, Storage, key_of
from testbed.fakes.clock import Activity, FakeClock


def _labels_match(obj: Obj, selector: str | None) -> bool:
    """A label selector of equalities (`a=b`, `a==b`), inequalities (`a!=b`: true without the label, as
    the API server has it) and existence (`a`)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (selector or "").split(",")):
        if "!=" in term:
            k, _, v = term.partition("!=")
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" not in term:
            if term.strip() not in labels:
                return False
        elif not all(labels.get(k) == v for k, v in _terms(term)):
            return False
    return True


def _terms(selector: str | None) -> list[tuple[str, str]]:
    """`a=b,c==d` as pairs; other selector syntax is not needed here and refused."""
    out = []
    for term in filter(None, (selector or "").split(",")):
        if "!" in term or "=" not in term:
            raise ValueError(f"the fake API supports equality selectors only, not {term!r}")
        k, _, v = term.partition("=")
        out.append((k.strip(), v.lstrip("=").strip()))
    return out


def _field(obj: Obj, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


class FakeCache:
    """kube.Reflector's reading surface over the objects FakeApi delivers; changes notify as it does."""

    def __init__(self, resource: Resource, notifier: Notifier, clock: FakeClock, activity: Activity, *,
                 selector: str | None = None, storage: Storage | None = None, synced: bool = True) -> None:
        self.plural = resource.plural
        self.name = f"kh-fake-cache-{resource.plural}"
        self.selector = selector
        self.notifier = notifier
        self._clock = clock
        self._activity = activity
        storage = storage or Storage()
        self._indexers = dict(storage.indexers)
        self._transform = storage.transform
        self._lock = threading.Lock()  # the store and indexes; never held while listeners run
        self._delivery = threading.RLock()  # one change applied at a time, in order
        self._store: dict[str, Obj] = {}
        self._indexes: dict[str, dict[str, set[str]]] = {n: {} for n in self._indexers}
        self._listeners: list[Callable[[str, Obj, Obj | None], None]] = []
        self._paused: builtins.list[tuple[str, Obj]] | None = None
        self.synced = threading.Event()
        self._current = synced
        self._impaired_at: float | None = None
        self._recovered_at: float | None = None
        self.applied = 0  # changes applied (watch events handled), under _delivery: for the work budget
        if synced:
            self.synced.set()

    # --- reading (Reflector's surface) ----------------------------------------------------------------

    def get(self, namespace: str, name: str) -> Obj | None:
        with self._lock:
            obj = self._store.get(f"{namespace}/{name}")
        self._activity.touch()
        return obj

    def list(self) -> list[Obj]:
        with self._lock:
            items = list(self._store.values())
        self._activity.touch()
        return items

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        with self._lock:
            items = [self._store[k] for k in self._indexes[index].get(value, ()) if k in self._store]
        self._activity.touch()
        return items

    def __len__(self) -> int:
        with self._lock:
            return len(self._store)

    def add_listener(self, fn: Callable[[str, Obj, Obj | None], None]) -> None:
        self._listeners.append(fn)

    def topic(self, index: str, value: str) -> Topic:
        return (self.plural, index, value)

    def is_current(self) -> bool:
        return self._current

    def stale_seconds(self) -> float:
        if self._current or self._impaired_at is None:
            return 0.0
        return max(0.0, self._clock() - self._impaired_at)

    def impaired_since(self, since: float) -> bool:
        if not self._current:
            return True
        return self._recovered_at is not None and self._recovered_at >= since

    # --- what a test does to it ------------------------------------------------------------------------

    def set_current(self, current: bool) -> None:
        """Its watch fails (False) or works again (True), as Reflector._set_current: every waiter looks again."""
        if current == self._current:
            return
        self._current = current
        if current:
            if self._impaired_at is not None:
                self._recovered_at = self._clock()
        else:
            self._impaired_at = self._clock()
        self.notifier.notify_all()

    def sync(self) -> None:
        """The first list has arrived."""
        self.synced.set()
        self.set_current(True)
        self.notifier.notify_all()

    def pause(self) -> None:
        """Its watch falls behind: changes are kept back until resume(). (It still counts as current.)"""
        with self._lock:
            if self._paused is None:
                self._paused = []

    def resume(self) -> None:
        with self._delivery:  # what arrives meanwhile waits: the held changes go first, in order
            with self._lock:
                held, self._paused = self._paused or [], None
            for etype, obj in held:
                self._apply(etype, obj)

    # --- fed by FakeApi ------------------------------------------------------------------------------------

    def selects(self, obj: Obj) -> bool:
        return _labels_match(obj, self.selector)

    def deliver(self, etype: str, obj: Obj) -> None:
        with self._delivery:
            with self._lock:
                if self._paused is not None:
                    self._paused.append((etype, obj))
                    return
            self._apply(etype, obj)

    def _apply(self, etype: str, obj: Obj) -> None:
        self.applied += 1
        if self._transform is not None:
            obj = self._transform(obj)
        key = key_of(obj)
        with self._lock:
            prev = self._store.pop(key, None)
            if prev is not None:
                self._index(key, prev, add=False)
            if etype != "DELETED":
                self._store[key] = obj
                self._index(key, obj, add=True)
        for fn in list(self._listeners):
            fn(etype, obj, prev)
        topics: set[Topic] = {(self.plural, "key", key)}
        for name, fn_index in self._indexers.items():
            for o in (obj, prev):
                if o is not None:
                    topics.update((self.plural, name, v) for v in fn_index(o))
        self.notifier.notify(topics)

    def _index(self, key: str, obj: Obj, add: bool) -> None:
        for name, fn in self._indexers.items():
            for value in fn(obj):
                keys = self._indexes[name].setdefault(value, set())
                if add:
                    keys.add(key)
                else:
                    keys.discard(key)
                    if not keys:
                        del self._indexes[name][value]
