"""Every way a watch can end leads the reflector back to a current cache (over a scripted fake API)."""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kuberhealthy.base.errors import NotFound, Unreachable
from kuberhealthy.kube import KHCHECKS, Reflector, Selection, reflector
from kuberhealthy.kube.client import Kube
from kuberhealthy.kube.reflector import READ_GRACE, WATCH_SECONDS


@pytest.fixture(autouse=True)
def short_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reflector backs off on its stop event between watches (real time, 0.1 s and up): 1 ms here, so
    a script of failures plays in milliseconds. What follows each failure is the same."""
    monkeypatch.setattr(reflector, "BACKOFF_FIRST", 0.001)


def obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, "managedFields": [{"x": 1}]}}


class Stream:
    def __init__(self, frames: list[Any]) -> None:
        self.frames = frames

    def shutdown(self) -> None:  # what urllib3 does after a broken read
        raise RuntimeError("Cannot shutdown as connection has already been released to the pool")


class FakeKube:
    """Lists return `items`; each watch plays the next script: frames (dicts) and exceptions."""

    def __init__(self, scripts: list[list[Any]]) -> None:
        self.items: list[dict[str, Any]] = [obj("a", "1")]
        self.scripts = scripts
        self.lists = 0
        self.watches: list[dict[str, Any]] = []
        self.read_timeouts: list[float] = []
        self.done = threading.Event()

    def request(self, method: str, path: str, *, query: Any = None, timeout: float = 0, **_: Any) -> Any:
        if not self.done.is_set():  # what the reflector does after the last script (before stop) is not played
            self.lists += 1
        return {"items": [json.loads(json.dumps(i)) for i in self.items], "metadata": {"resourceVersion": "10"}}

    def open_stream(self, path: str, query: dict[str, Any], read_timeout: float) -> Stream:
        self.watches.append(dict(query))
        self.read_timeouts.append(read_timeout)
        if not self.scripts:
            self.done.set()
            raise Unreachable("no more scripts")
        return Stream(self.scripts.pop(0))

    @staticmethod
    def iter_lines(raw: Stream) -> Iterator[bytes]:
        for frame in raw.frames:
            if isinstance(frame, BaseException):
                raise frame
            yield json.dumps(frame).encode()

    shutdown_stream = staticmethod(Kube.shutdown_stream)  # the real clean-up, which must never raise


def run_reflector(kube: FakeKube) -> Reflector:
    r = Reflector(kube, KHCHECKS, Selection("ns"), name="kh-test-reflector")  # type: ignore[arg-type]
    r.start()
    assert kube.done.wait(20), "the reflector did not play every script"
    r.stop()
    r.join(5)
    return r


def test_a_410_inside_the_stream_is_followed_by_a_fresh_list_even_when_clean_up_raises() -> None:
    kube = FakeKube([[{"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}], []])
    r = run_reflector(kube)
    assert kube.lists == 2  # the first list and the re-list after the 410
    assert kube.watches[1]["resourceVersion"] == "10"  # resumed from the new list, not the dead version
    assert r.synced.is_set()


def test_a_broken_stream_resumes_and_a_second_failure_in_a_row_relists() -> None:
    kube = FakeKube([[{"type": "ADDED", "object": obj("b", "11")}, Unreachable("reset by peer")],
                     [Unreachable("reset by peer")]])
    r = run_reflector(kube)
    assert kube.watches[1]["resourceVersion"] == "11"  # the first break resumes where it was
    assert kube.lists == 2  # the second break in a row starts over from a list
    assert r.watch_errors >= 2


def test_an_error_event_of_another_kind_relists() -> None:
    kube = FakeKube([[{"type": "ERROR", "object": {"code": 500, "message": "internal error"}}], []])
    run_reflector(kube)
    assert kube.lists == 2


def test_a_silent_stream_is_given_up_within_thirty_seconds() -> None:
    kube = FakeKube([[]])
    run_reflector(kube)
    assert all(t <= 30 for t in kube.read_timeouts)
    assert int(kube.watches[0]["timeoutSeconds"]) + READ_GRACE <= 30
    assert WATCH_SECONDS <= int(kube.watches[0]["timeoutSeconds"])


def test_the_cache_is_not_current_after_an_error_and_says_since_when() -> None:
    kube = FakeKube([[Unreachable("refused")]])
    r = run_reflector(kube)
    assert not r.is_current() and r.impaired_since(0.0)


def test_managed_fields_never_reach_the_cache() -> None:
    kube = FakeKube([[{"type": "MODIFIED", "object": obj("a", "12")}]])
    r = run_reflector(kube)
    assert "managedFields" not in (r.get("ns", "a") or {"metadata": {"managedFields": 1}})["metadata"]


class MissingCrd(FakeKube):
    """A resource whose CRD is not installed (lists answer 404) until `install()`."""

    def __init__(self) -> None:
        super().__init__([])
        self.installed = threading.Event()

    def request(self, method: str, path: str, *, query: Any = None, timeout: float = 0, **_: Any) -> Any:
        if not self.installed.is_set():
            raise NotFound("the server could not find the requested resource")
        return super().request(method, path, query=query, timeout=timeout)


def test_an_optional_resource_whose_crd_is_missing_is_current_and_says_so_once_then_fills_when_it_appears(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reflector, "MISSING_RETRY", 0.01)
    kube = MissingCrd()
    said: list[bool] = []
    r = Reflector(kube, KHCHECKS, Selection(), name="kh-test-optional").optional(said.append)  # type: ignore[arg-type]
    r.start()
    try:
        assert r.missing.wait(5) and r.is_current() and not r.synced.is_set()
        kube.installed.set()
        assert r.synced.wait(5) and r.get("ns", "a") is not None
        assert said[:2] == [True, False] and not r.missing.is_set()
    finally:
        r.stop()
        r.join(5)


def test_a_resource_not_made_optional_treats_a_404_as_an_error_not_as_missing() -> None:
    kube = MissingCrd()
    r = Reflector(kube, KHCHECKS, Selection(), name="kh-test-required")  # type: ignore[arg-type]
    r.start()
    try:
        assert not r.synced.wait(0.3) and not r.missing.is_set() and not r.is_current()
    finally:
        r.stop()
        r.join(5)
