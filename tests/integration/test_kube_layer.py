"""The kube/ layer against the real API server: CRUD on custom resources, errors, reflector, eviction."""
from __future__ import annotations

import threading
import time

import pytest

from kuberhealthy.base.errors import Conflict, NotFound
from kuberhealthy.kube import KHCHECKS, KHSTATES, PODS, Notifier, Reflector, Resources, Selection, Storage
from testbed.cluster.builders import checker_pod, khcheck
from testbed.wait import wait_for


def test_a_khcheck_created_through_the_api_reads_back_with_its_spec(res: Resources, namespace: str) -> None:
    res.create(KHCHECKS, namespace, khcheck("dns", interval="10m"))
    got = res.get(KHCHECKS, namespace, "dns")
    assert got["spec"]["runInterval"] == "10m"
    assert got["spec"]["podSpec"]["containers"][0]["image"] == "kh-sim/ok"
    items, rv = res.list(KHCHECKS, namespace)
    assert [i["metadata"]["name"] for i in items] == ["dns"] and rv


def test_reading_a_missing_object_raises_not_found(res: Resources, namespace: str) -> None:
    with pytest.raises(NotFound):
        res.get(KHSTATES, namespace, "nope")


def test_a_replace_with_a_stale_resource_version_raises_conflict(res: Resources, namespace: str) -> None:
    created = res.create(KHCHECKS, namespace, khcheck("a"))
    fresh = dict(created, spec=dict(created["spec"], runInterval="5m"))
    res.replace(KHCHECKS, namespace, "a", fresh)
    stale = dict(created, spec=dict(created["spec"], runInterval="7m"))
    with pytest.raises(Conflict):
        res.replace(KHCHECKS, namespace, "a", stale)


def test_update_with_retry_survives_a_concurrent_writer(res: Resources, namespace: str) -> None:
    res.create(KHCHECKS, namespace, khcheck("a"))
    calls = []

    def mutate(cur: dict | None) -> dict | None:
        assert cur is not None
        calls.append(cur["metadata"]["resourceVersion"])
        if len(calls) == 1:  # someone else writes between our read and our write
            res.merge_patch(KHCHECKS, namespace, "a", {"spec": {"timeout": "9m"}})
        cur["spec"]["runInterval"] = "1m"
        return cur

    out = res.update_with_retry(KHCHECKS, namespace, "a", mutate)
    assert out is not None and out["spec"]["runInterval"] == "1m" and out["spec"]["timeout"] == "9m"
    assert len(calls) == 2


def test_the_reflector_lists_then_follows_adds_changes_and_deletes(res: Resources, namespace: str) -> None:
    res.create(KHCHECKS, namespace, khcheck("before"))
    events: list[tuple[str, str]] = []
    r = Reflector(res.kube, KHCHECKS, Selection(namespace), name="kh-test-reflector")
    r.add_listener(lambda t, o, _p: events.append((t, o["metadata"]["name"])))
    r.start()
    try:
        assert r.synced.wait(10)
        assert r.get(namespace, "before") is not None
        res.create(KHCHECKS, namespace, khcheck("after"))
        res.merge_patch(KHCHECKS, namespace, "after", {"spec": {"runInterval": "2m"}})
        res.delete(KHCHECKS, namespace, "before")
        wait_for(lambda: ("DELETED", "before") in events, what="delete event")
        wait_for(lambda: (r.get(namespace, "after") or {}).get("spec", {}).get("runInterval") == "2m")
        assert r.get(namespace, "before") is None
        assert events[0] == ("ADDED", "before") and ("ADDED", "after") in events
    finally:
        r.stop()
        r.join(10)
    assert not r.is_alive()


def test_a_waiter_wakes_on_the_change_it_waits_for(res: Resources, namespace: str) -> None:
    notifier = Notifier()
    r = Reflector(res.kube, KHCHECKS, Selection(namespace), notifier=notifier, name="kh-test-reflector")
    r.start()
    try:
        assert r.synced.wait(10)
        threading.Timer(0.2, lambda: res.create(KHCHECKS, namespace, khcheck("late"))).start()
        with notifier.waiter(r.topic("key", f"{namespace}/late")) as waiter:
            got = waiter.wait_for(lambda: r.get(namespace, "late"), deadline=time.monotonic() + 20)
        assert got is not None
        stop = threading.Event()
        with notifier.waiter() as waiter:
            threading.Timer(0.1, lambda: (stop.set(), waiter.wake())).start()
            assert waiter.wait_for(lambda: None, deadline=time.monotonic() + 30, stop=stop) is None
    finally:
        r.stop()
        r.join(10)


def test_the_reflector_indexes_pods_by_label(res: Resources, namespace: str) -> None:
    by_run = Storage({"uuid": lambda p: [p["metadata"].get("labels", {}).get("kuberhealthy-run-id", "")]})
    r = Reflector(res.kube, PODS, Selection(namespace, "app=kuberhealthy-check"), storage=by_run,
                  name="kh-test-reflector")
    r.start()
    try:
        assert r.synced.wait(10)
        res.create(PODS, namespace, checker_pod("p1", None, "u-1", image="x", env_uuid=None))
        wait_for(lambda: r.by_index("uuid", "u-1"), what="indexed pod")
        res.delete(PODS, namespace, "p1")
        wait_for(lambda: not r.by_index("uuid", "u-1"), what="index cleared")
    finally:
        r.stop()
        r.join(10)


def test_evicting_a_pod_falls_back_to_what_the_server_serves(res: Resources, namespace: str) -> None:
    res.create(PODS, namespace, checker_pod("ev", None, None, image="x"))
    assert res.evict_pod(namespace, "ev") in ("evicted", "deleted")
    with pytest.raises(NotFound):
        res.get(PODS, namespace, "ev")
    assert res.evict_pod(namespace, "ev") == "gone"
