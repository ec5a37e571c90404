"""This process's own writes are in its caches at once (Resources.on_written -> Reflector.observe), on the real
API server: the answer of a replace is what the cache holds when replace() returns, and the watch's copy of
that write, when it comes, changes nothing and calls no listener a second time."""
from __future__ import annotations

import copy
import threading

from kuberhealthy.kube import KHSTATES, Obj, Reflector, Resources, Selection
from kuberhealthy.records import khstate
from testbed.wait import wait_for


def rv(obj: Obj | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")


def test_a_replaced_khstate_is_in_the_observing_cache_at_once_and_its_watch_copy_calls_no_listener_again(
        res: Resources, namespace: str) -> None:
    r = Reflector(res.kube, KHSTATES, Selection(namespace), name="kh-test-reflector")
    res.on_written(KHSTATES, r.observe)  # as Services wires its caches
    lock = threading.Lock()
    calls: list[tuple[str, str, str]] = []  # (type, name, resourceVersion)

    def listen(etype: str, obj: Obj, _prev: Obj | None) -> None:
        with lock:
            calls.append((etype, obj["metadata"]["name"], rv(obj)))

    def calls_for(name: str) -> list[tuple[str, str, str]]:
        with lock:
            return [c for c in calls if c[1] == name]

    r.add_listener(listen)
    r.start()
    try:
        assert r.synced.wait(10)
        created = res.create(KHSTATES, namespace, khstate.new_body(namespace, "c", "kh-0"))
        body = copy.deepcopy(created)
        body["spec"]["uuid"] = "run-2"
        replaced = res.replace(KHSTATES, namespace, "c", body)
        held = r.get(namespace, "c")
        assert rv(held) == rv(replaced) != rv(created)  # at once: not after the watch's round trip
        assert held is not None and held["spec"]["uuid"] == "run-2"

        # A write the cache does not observe, made after ours: once the watch has delivered it, it has
        # delivered our create and replace too (a watch is in resourceVersion order).
        Resources(res.kube).create(KHSTATES, namespace, khstate.new_body(namespace, "marker", "kh-0"))
        wait_for(lambda: calls_for("marker"), timeout=30, what="the watch to deliver the marker")
        assert [c[2] for c in calls_for("c")] == [rv(created), rv(replaced)]  # each version once
        assert rv(r.get(namespace, "c")) == rv(replaced)
    finally:
        r.stop()
        r.join(10)
    assert not r.is_alive()
