"""The check and state reapers against the real API server: what they delete and what they keep.

The test bed has no kubelet: pods are created, then given a phase and container states through the
status subresource; unbound pods vanish as soon as they are deleted.
"""
from __future__ import annotations

import time
import urllib.error
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kuberhealthy.base import config as khconfig
from kuberhealthy.control.reaper import CheckReaper, StateReaper
from kuberhealthy.daemon.services import Services
from kuberhealthy.kube import KHSTATES, Kube
from kuberhealthy.records.khstate import new_body
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import cr_path, khc, khcheck, khj, khjob, khs
from testbed.cluster.objects import create_finished_pod
from testbed.wait import wait_for

MakeServices = Callable[..., Services]


@pytest.fixture
def make_services(cluster: TestCluster, namespace: str) -> Iterator[MakeServices]:
    made: list[Services] = []

    def make(**raw: Any) -> Services:
        settings = {"targetNamespace": namespace, "checkReaperRunInterval": "200ms",
                    "stateReaperInterval": "200ms", **raw}
        config = khconfig.from_mapping(settings, {"POD_NAME": "kh-test-0", "POD_NAMESPACE": namespace})
        services = Services(config, Kube.connect(str(cluster.kubeconfig)))
        made.append(services)
        services.start_caches()
        assert services.wait_synced(10)
        return services

    yield make
    for services in made:
        services.stop(10)
        services.kube.close()


def make_pod(cluster: TestCluster, ns: str, name: str, check: str, phase: str = "Pending",
             finished_ago: float = 0.0) -> None:
    """A checker pod of `check`, finished (or started, Running) `finished_ago` seconds ago."""
    create_finished_pod(cluster, ns, name, check, phase, finished_ago / 3600, run_uuid=f"run-{name}", node_name=None)


def pod_names(cluster: TestCluster, ns: str) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]}


def cached_phases(services: Services) -> dict[str, str]:
    return {p["metadata"]["name"]: (p.get("status") or {}).get("phase", "") for p in services.pods.list()}


def make_job(cluster: TestCluster, ns: str, name: str, phase: str | None) -> None:
    cluster.request("POST", khj(ns), khjob(name, timeout="2m", phase=phase))


def make_state(cluster: TestCluster, ns: str, name: str) -> dict[str, Any]:
    body = new_body(ns, name, "kh-test-0")
    # Non-empty strings: API servers before 1.21 built with Go >= 1.16 decode "" as null (kubernetes#99804).
    body["spec"].update({"Node": "node-1", "uuid": f"run-{name}", "RunDuration": "1s"})
    return dict(cluster.request("POST", khs(ns), body))


def cr_names(cluster: TestCluster, ns: str, plural: str) -> set[str]:
    return {o["metadata"]["name"] for o in cluster.request("GET", cr_path(plural, ns))["items"]}


# --- the check reaper ---------------------------------------------------------------------------------


def test_the_check_reaper_keeps_the_newest_finished_pods_per_check_and_never_touches_live_ones(
        cluster: TestCluster, namespace: str, make_services: MakeServices) -> None:
    services = make_services(maxCompletedPodCount=2, maxErrorPodCount=1)
    for i, ago in enumerate((500, 400, 300, 200, 100)):
        make_pod(cluster, namespace, f"dns-s{i}", "dns", "Succeeded", finished_ago=ago)
    for i, ago in enumerate((450, 350, 250)):
        make_pod(cluster, namespace, f"dns-f{i}", "dns", "Failed", finished_ago=ago)
    make_pod(cluster, namespace, "dns-running", "dns", "Running")
    make_pod(cluster, namespace, "dns-pending", "dns")
    make_pod(cluster, namespace, "other-s0", "other", "Succeeded", finished_ago=100)
    make_pod(cluster, namespace, "ancient-s0", "ancient", "Succeeded", finished_ago=73 * 3600)
    make_pod(cluster, namespace, "fresh-f0", "fresh", "Failed", finished_ago=0)
    make_pod(cluster, namespace, "fresh-f1", "fresh", "Failed", finished_ago=0)
    wait_for(lambda: len(cached_phases(services)) == 14 and cached_phases(services)["fresh-f1"] == "Failed",
             what="the pod cache to see every pod")

    deleted = CheckReaper(services).reap_once()

    expected_gone = {"dns-s0", "dns-s1", "dns-s2", "dns-f0", "dns-f1", "ancient-s0"}
    assert {d.name for d in deleted} == expected_gone
    assert pod_names(cluster, namespace) == {"dns-s3", "dns-s4", "dns-f2", "dns-running", "dns-pending",
                                             "other-s0", "fresh-f0", "fresh-f1"}


def test_the_check_reaper_thread_removes_old_completed_khjobs_and_keeps_the_rest(
        cluster: TestCluster, namespace: str, make_services: MakeServices) -> None:
    services = make_services(maxKHJobAge="15m")
    make_job(cluster, namespace, "done", "Completed")
    make_job(cluster, namespace, "running", "Running")
    make_job(cluster, namespace, "new", None)  # not run yet (phase omitted: see make_state on "")
    make_pod(cluster, namespace, "job-s0", "done", "Succeeded", finished_ago=100)
    wait_for(lambda: len(services.khjobs.list()) == 3, what="the khjob cache")
    reaper = CheckReaper(services, now=lambda: time.time() + 3600)  # everything looks an hour old
    reaper.start()
    try:
        wait_for(lambda: "done" not in cr_names(cluster, namespace, "khjobs"), what="the completed khjob to go")
    finally:
        reaper.stop()
        reaper.join(5)
    assert not reaper.is_alive()
    assert cr_names(cluster, namespace, "khjobs") == {"running", "new"}
    assert pod_names(cluster, namespace) == {"job-s0"}  # within maxCheckPodAge and the counts


def test_a_completed_khjob_younger_than_the_max_age_is_kept(
        cluster: TestCluster, namespace: str, make_services: MakeServices) -> None:
    services = make_services(maxKHJobAge="5m")
    make_job(cluster, namespace, "done", "Completed")
    wait_for(lambda: services.khjobs.get(namespace, "done"), what="the khjob cache")
    assert CheckReaper(services).reap_once() == []
    assert cr_names(cluster, namespace, "khjobs") == {"done"}


def test_a_check_reaper_stops_promptly_and_a_new_one_takes_over(
        cluster: TestCluster, namespace: str, make_services: MakeServices) -> None:
    services = make_services(maxCompletedPodCount=0)
    slow = CheckReaper(services, interval=3600.0)
    slow.start()
    slow.stop()
    slow.stop()  # idempotent
    slow.join(30)  # an hour-long interval: only the stop event can end the wait
    assert not slow.is_alive()

    make_pod(cluster, namespace, "dns-s0", "dns", "Succeeded", finished_ago=100)
    wait_for(lambda: cached_phases(services).get("dns-s0") == "Succeeded", what="the pod cache")
    fresh = CheckReaper(services)
    fresh.start()
    try:
        wait_for(lambda: not pod_names(cluster, namespace), what="the new reaper to delete the pod")
    finally:
        fresh.stop()
        fresh.join(5)
    assert not fresh.is_alive()


# --- the state reaper -----------------------------------------------------------------------------------


def test_the_state_reaper_removes_khstates_without_a_khcheck_or_khjob(
        cluster: TestCluster, namespace: str, make_services: MakeServices) -> None:
    services = make_services()
    cluster.request("POST", khc(namespace), khcheck("withcheck", interval=None, timeout="2m"))
    make_job(cluster, namespace, "withjob", "Completed")
    for name in ("withcheck", "withjob", "orphan"):
        make_state(cluster, namespace, name)
    wait_for(lambda: len(services.khstates.list()) == 3 and len(services.khchecks.list()) == 1
             and len(services.khjobs.list()) == 1, what="the caches")
    reaper = StateReaper(services)
    reaper.start()
    try:
        wait_for(lambda: "orphan" not in cr_names(cluster, namespace, "khstates"), what="the orphan to go")
        cluster.request("DELETE", khc(namespace, "withcheck"))  # its state becomes an orphan
        wait_for(lambda: cr_names(cluster, namespace, "khstates") == {"withjob"}, what="the second orphan to go")
    finally:
        reaper.stop()
        reaper.join(5)
    assert not reaper.is_alive()
    assert cr_names(cluster, namespace, "khjobs") == {"withjob"}


def test_a_khcheck_the_cache_has_not_seen_yet_keeps_its_state(
        cluster: TestCluster, namespace: str, make_services: MakeServices,
        monkeypatch: pytest.MonkeyPatch) -> None:
    services = make_services()
    cluster.request("POST", khc(namespace), khcheck("lagging", interval=None, timeout="2m"))
    make_job(cluster, namespace, "lagging-job", "Running")
    for name in ("lagging", "lagging-job", "orphan"):
        make_state(cluster, namespace, name)
    wait_for(lambda: len(services.khstates.list()) == 3, what="the khstate cache")
    monkeypatch.setattr(services.khchecks, "list", lambda: [])  # the caches lag behind the API
    monkeypatch.setattr(services.khjobs, "list", lambda: [])

    deleted = StateReaper(services).reap_once()

    assert [d.name for d in deleted] == ["orphan"]
    assert cr_names(cluster, namespace, "khstates") == {"lagging", "lagging-job"}


def test_a_khstate_recreated_since_the_cache_saw_it_is_not_deleted(
        cluster: TestCluster, namespace: str, make_services: MakeServices,
        monkeypatch: pytest.MonkeyPatch) -> None:
    services = make_services()
    old = make_state(cluster, namespace, "reborn")
    wait_for(lambda: services.khstates.get(namespace, "reborn"), what="the khstate cache")
    services.resources.delete(KHSTATES, namespace, "reborn")
    new = make_state(cluster, namespace, "reborn")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    monkeypatch.setattr(services.khstates, "list", lambda: [old])  # the cache still holds the first one

    assert StateReaper(services).reap_once() == []
    got = cluster.request("GET", khs(namespace, "reborn"))
    assert got["metadata"]["uid"] == new["metadata"]["uid"]


def test_the_state_reaper_waits_for_its_caches_before_judging(
        cluster: TestCluster, namespace: str, make_services: MakeServices) -> None:
    services = make_services()
    make_state(cluster, namespace, "orphan")
    wait_for(lambda: services.khstates.get(namespace, "orphan"), what="the khstate cache")
    services.khchecks.synced.clear()  # as if the khcheck cache were still listing
    assert StateReaper(services).reap_once() == []
    assert cr_names(cluster, namespace, "khstates") == {"orphan"}
    with pytest.raises(urllib.error.HTTPError):
        cluster.request("GET", khc(namespace, "orphan"))
