"""Own writes in the cache at once: not_newer() and Reflector.observe(), over a fake API whose watch stream the
test feeds event by event.

A skipped watch event calls no listener, so to know the reflector has dealt with it a test sends a marker
event (another object) after it and waits for the marker's listener call: a watch is applied in order.
"""
from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from kuberhealthy.base.notify import Notifier, Topic
from kuberhealthy.kube import KHSTATES, Reflector, Selection, Storage
from kuberhealthy.kube.client import Kube
from kuberhealthy.kube.reflector import not_newer

WAIT = 5.0  # seconds: a generous bound for what happens at once
NS = Selection("ns")
AS_SERVED = Storage()


def obj(name: str, rv: str | None, namespace: str = "ns", **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"metadata": meta, "spec": dict(spec)}


def rv_of(o: dict[str, Any] | None) -> str | None:
    return None if o is None else o["metadata"].get("resourceVersion")


# --- not_newer ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("incoming", "held", "expected"), [
    ("5", "5", True),  # the same version
    ("4", "5", True),  # an older one
    ("9", "10", True),  # compared as numbers, not as text ("9" > "10")
    ("10", "9", False),
    ("6", "5", False),
    ("abc", "abc", True),  # not numbers: only the same text is known to add nothing
    ("abc", "abd", False),
    ("abd", "abc", False),
    ("5", "x", False),
    ("x", "5", False),
    (None, "5", False),  # no version to compare: take it
    ("5", None, False),
    ("", "5", False),
])
def test_not_newer_says_whether_an_incoming_version_adds_nothing(incoming: str | None, held: str | None,
                                                                 expected: bool) -> None:
    assert not_newer(obj("a", incoming), obj("a", held)) is expected


def test_not_newer_takes_anything_when_nothing_is_held() -> None:
    assert not not_newer(obj("a", "5"), None)
    assert not not_newer({}, {})


# --- a reflector over a watch the test feeds ---------------------------------------------------------------


class Stream:
    """A watch stream: frames the test puts, until shutdown (or end())."""

    def __init__(self) -> None:
        self.frames: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def shutdown(self) -> None:
        self.frames.put(None)


class FakeKube:
    """Lists return `items` at resourceVersion `list_rv`; each watch is a Stream the test feeds."""

    def __init__(self, items: Iterable[dict[str, Any]] = (), list_rv: str = "10") -> None:
        self.items = list(items)
        self.list_rv = list_rv
        self.streams: list[Stream] = []
        self.watching = threading.Event()

    def request(self, method: str, path: str, *, query: Any = None, timeout: float = 0, **_: Any) -> Any:
        return {"items": [json.loads(json.dumps(i)) for i in self.items], "metadata": {"resourceVersion": self.list_rv}}

    def open_stream(self, path: str, query: dict[str, Any], read_timeout: float) -> Stream:
        stream = Stream()
        self.streams.append(stream)
        self.watching.set()
        return stream

    @staticmethod
    def iter_lines(raw: Stream) -> Iterator[bytes]:
        while (frame := raw.frames.get()) is not None:
            yield json.dumps(frame).encode()

    shutdown_stream = staticmethod(Kube.shutdown_stream)


class RecordingNotifier(Notifier):
    def __init__(self) -> None:
        super().__init__()
        self.notified: list[set[Topic]] = []

    def notify(self, topics: Iterable[Topic]) -> None:
        topics = set(topics)
        self.notified.append(topics)
        super().notify(topics)


class Seen:
    """The listener calls of a reflector, and a way to wait for one."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None, str | None]] = []  # (type, name, rv, previous rv)
        self._cond = threading.Condition()

    def __call__(self, etype: str, o: dict[str, Any], prev: dict[str, Any] | None) -> None:
        with self._cond:
            self.calls.append((etype, o["metadata"]["name"], rv_of(o), rv_of(prev)))
            self._cond.notify_all()

    def of(self, name: str) -> list[tuple[str, str | None, str | None]]:
        with self._cond:
            return [(t, rv, prev) for t, n, rv, prev in self.calls if n == name]

    def wait_for(self, name: str, rv: str) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: any(c[1:3] == (name, rv) for c in self.calls), WAIT), \
                f"no listener call for {name} at {rv}: {self.calls}"


class Bed:
    """A started reflector over a FakeKube, its watch open, and what its listener saw."""

    def __init__(self, kube: FakeKube, selection: Selection, storage: Storage) -> None:
        self.kube = kube
        self.notifier = RecordingNotifier()
        self.r = Reflector(kube, KHSTATES, selection, notifier=self.notifier, storage=storage,  # type: ignore[arg-type]
                           name="kh-test-reflector")
        self.seen = Seen()
        self.r.add_listener(self.seen)
        self._markers = 0

    def start(self) -> Bed:
        self.r.start()
        assert self.r.synced.wait(WAIT) and self.kube.watching.wait(WAIT)
        return self

    def stop(self) -> None:
        self.r.stop()
        self.r.join(WAIT)

    def watch(self, etype: str, o: dict[str, Any]) -> None:
        """The API server sends this event on the open watch."""
        self.kube.streams[-1].frames.put({"type": etype, "object": o})

    def settle(self) -> None:
        """Return once every event sent so far was dealt with (applied or skipped)."""
        self._markers += 1
        name, rv = f"marker-{self._markers}", str(1000 + self._markers)
        self.watch("ADDED", obj(name, rv))
        self.seen.wait_for(name, rv)


@pytest.fixture
def beds() -> Iterator[list[Bed]]:
    made: list[Bed] = []
    yield made
    for b in made:
        b.stop()


def bed_of(beds: list[Bed], selection: Selection = NS, storage: Storage = AS_SERVED,
           start: bool = True) -> Bed:
    """A reflector over one khstate "a" at resourceVersion 5 (the list's is 10)."""
    b = Bed(FakeKube([obj("a", "5", x=0)]), selection, storage)
    beds.append(b)
    return b.start() if start else b


# --- observe() ----------------------------------------------------------------------------------------------


def test_observe_stores_the_object_tells_the_listeners_and_wakes_the_waiters_of_its_key(beds: list[Bed]) -> None:
    b = bed_of(beds)
    key_topic = b.r.topic("key", "ns/a")
    looking, woke = threading.Event(), threading.Event()

    def wait() -> None:
        def written() -> bool:
            looking.set()
            return rv_of(b.r.get("ns", "a")) == "12"
        with b.notifier.waiter(key_topic) as w:
            if w.wait_for(written, time.monotonic() + 2 * WAIT):
                woke.set()

    waiter = threading.Thread(target=wait, name="test-waiter", daemon=True)
    waiter.start()
    assert looking.wait(WAIT)  # subscribed, and found nothing yet: only a wake-up makes it look again
    b.r.observe(obj("a", "12", x=1))
    assert woke.wait(WAIT), "the waiter on the object's key was not woken"
    waiter.join(WAIT)
    assert (b.r.get("ns", "a") or {})["spec"] == {"x": 1}
    assert b.seen.of("a") == [("ADDED", "5", None), ("MODIFIED", "12", "5")]
    assert key_topic in b.notifier.notified[-1]


def test_the_watchs_later_copy_of_an_observed_version_is_skipped(beds: list[Bed]) -> None:
    b = bed_of(beds)
    b.r.observe(obj("a", "12", x=1))
    b.watch("MODIFIED", obj("a", "12", x=1))
    b.settle()
    assert b.seen.of("a") == [("ADDED", "5", None), ("MODIFIED", "12", "5")]  # once, from observe()
    assert rv_of(b.r.get("ns", "a")) == "12"


def test_the_watchs_copy_of_an_observed_version_is_skipped_before_the_transform_runs_on_it(beds: list[Bed]) -> None:
    transformed: list[tuple[str, str | None]] = []

    def transform(o: dict[str, Any]) -> dict[str, Any]:
        transformed.append((o["metadata"]["name"], rv_of(o)))
        return o
    b = bed_of(beds, storage=Storage(transform=transform))
    b.r.observe(obj("a", "12", x=1))
    b.watch("MODIFIED", obj("a", "12", x=1))  # the echo of the write
    b.watch("MODIFIED", obj("a", "13", x=2))  # someone else's write after it
    b.settle()
    assert [t for t in transformed if t[0] == "a"] == [("a", "5"), ("a", "12"), ("a", "13")]  # list, observe, 13
    assert rv_of(b.r.get("ns", "a")) == "13"


def test_a_created_object_is_in_the_cache_at_once_and_its_watch_copy_is_skipped(beds: list[Bed]) -> None:
    b = bed_of(beds)
    b.r.observe(obj("new", "12", x=1))
    assert rv_of(b.r.get("ns", "new")) == "12"
    b.watch("ADDED", obj("new", "12", x=1))
    b.settle()
    assert [(rv, prev) for _t, rv, prev in b.seen.of("new")] == [("12", None)]


def test_a_watch_event_older_than_the_observed_version_is_skipped_and_a_newer_one_applies(beds: list[Bed]) -> None:
    b = bed_of(beds)
    b.r.observe(obj("a", "15", x=2))
    b.watch("MODIFIED", obj("a", "12", x=1))  # written before ours: the cache must not go back
    b.settle()
    assert (b.r.get("ns", "a") or {})["spec"] == {"x": 2}
    b.watch("MODIFIED", obj("a", "16", x=3))  # someone wrote after us
    b.seen.wait_for("a", "16")
    assert (b.r.get("ns", "a") or {})["spec"] == {"x": 3}
    assert b.seen.of("a") == [("ADDED", "5", None), ("MODIFIED", "15", "5"), ("MODIFIED", "16", "15")]


def test_observing_an_older_version_than_the_cache_holds_changes_nothing(beds: list[Bed]) -> None:
    b = bed_of(beds)
    b.watch("MODIFIED", obj("a", "20", x=2))
    b.seen.wait_for("a", "20")
    b.r.observe(obj("a", "18", x=1))  # an answer that arrived after the watch had moved on
    b.r.observe(obj("a", "20", x=2))
    assert (b.r.get("ns", "a") or {})["spec"] == {"x": 2}
    assert len(b.seen.of("a")) == 2


@pytest.mark.parametrize("selection", [Selection("ns", label_selector="app=kh"),
                                       Selection("ns", field_selector="metadata.name=a")])
def test_observe_is_ignored_by_a_reflector_with_a_selector(beds: list[Bed], selection: Selection) -> None:
    b = bed_of(beds, selection)
    b.r.observe(obj("a", "12", x=1))  # whether it still matches the selector is the server's to say
    b.r.observe(obj("b", "13"))
    assert rv_of(b.r.get("ns", "a")) == "5" and b.r.get("ns", "b") is None
    assert b.seen.of("a") == [("ADDED", "5", None)] and b.seen.of("b") == []


def test_observe_is_ignored_for_an_object_in_another_namespace_than_the_reflectors(beds: list[Bed]) -> None:
    b = bed_of(beds)
    b.r.observe(obj("a", "12", namespace="other"))
    assert b.r.get("other", "a") is None and b.seen.of("a") == [("ADDED", "5", None)]


def test_a_reflector_of_every_namespace_observes_objects_of_any_namespace(beds: list[Bed]) -> None:
    b = bed_of(beds, Selection())
    b.r.observe(obj("a", "12", namespace="other"))
    assert rv_of(b.r.get("other", "a")) == "12"


def test_observe_before_the_reflector_synced_is_ignored(beds: list[Bed]) -> None:
    b = bed_of(beds, start=False)
    b.r.observe(obj("a", "12", x=1))
    assert b.r.get("ns", "a") is None and b.seen.calls == []
    b.start()  # the list is what the cache starts from
    assert rv_of(b.r.get("ns", "a")) == "5" and b.seen.of("a") == [("ADDED", "5", None)]


def test_an_observed_object_is_stored_as_the_reflectors_storage_shapes_it(beds: list[Bed]) -> None:
    def keep_spec(o: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": o["metadata"], "spec": o["spec"]}

    b = bed_of(beds, storage=Storage(indexers={"x": lambda o: [str(o["spec"].get("x"))]}, transform=keep_spec))
    written = dict(obj("a", "12", x=7), status={"big": "..."})
    written["metadata"]["managedFields"] = [{"manager": "kh"}]
    b.r.observe(written)
    assert b.r.get("ns", "a") == {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "12"},
                                  "spec": {"x": 7}}
    assert [o["metadata"]["name"] for o in b.r.by_index("x", "7")] == ["a"] and b.r.by_index("x", "0") == []
    assert {b.r.topic("x", "7"), b.r.topic("x", "0")} <= b.notifier.notified[-1]


def test_a_late_observe_of_a_version_the_watch_has_passed_does_not_bring_back_a_deleted_object(
        beds: list[Bed]) -> None:
    b = bed_of(beds)
    # Our PATCH's answer (rv 12) is still on its way to observe() when the watch delivers that very write
    # and then someone's delete of the object (rv 13): the watch thread can get there first.
    b.watch("MODIFIED", obj("a", "12", x=1))
    b.watch("DELETED", obj("a", "13", x=1))
    b.settle()
    assert b.r.get("ns", "a") is None
    b.r.observe(obj("a", "12", x=1))
    assert b.r.get("ns", "a") is None  # today: the deleted object is back, until the next re-list
