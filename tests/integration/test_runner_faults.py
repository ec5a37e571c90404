"""A run under control-plane trouble: transient API errors are retried, never recorded as check failures;
a pod stuck Terminating does not block the next run; a run the API made impossible is skipped, and one
whose requests find every connection of the client busy is skipped at once, not retried."""
from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

import pytest

from kuberhealthy.base.errors import NoFreeConnection, ServerError, Unreachable
from kuberhealthy.kube import KHJOBS, KHSTATES, PODS
from kuberhealthy.kube.client import IN_FLIGHT
from kuberhealthy.outputs.runstats import SKIP_API
from kuberhealthy.records import khstate
from kuberhealthy.run.runner import Outcome, Runner
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import MERGE_PATCH, checker_pod, khjob
from testbed.daemons.inprocess import InProcessDaemon, check_spec, state_of
from testbed.fakes.readouts import skipped_count
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for


def flaky(fn: Callable[..., Any], failures: int, error: Exception) -> Callable[..., Any]:
    """fn, failing its first `failures` calls with `error` (as an API server that restarts would)."""
    box = {"left": failures}

    def call(*a: Any, **k: Any) -> Any:
        if box["left"] > 0:
            box["left"] -= 1
            raise error
        return fn(*a, **k)
    return call


def test_api_errors_at_claim_create_and_record_are_retried_and_the_run_succeeds(
        daemon: InProcessDaemon, namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    res = daemon.services.resources
    monkeypatch.setattr(res, "replace", flaky(res.replace, 2, Unreachable("PUT: connection refused")))
    monkeypatch.setattr(res, "create", flaky(res.create, 1, ServerError("POST: 503", status=503)))
    result = Runner(daemon.services, check_spec(namespace, "kh-sim/ok"), threading.Event()).run()
    assert result.outcome is Outcome.REPORTED, result
    s = state_of(daemon, namespace)
    assert s.ok is True and s.errors == () and s.run_duration


def test_a_run_the_api_server_makes_impossible_is_skipped_not_failed(
        daemon: InProcessDaemon, namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    Runner(daemon.services, check_spec(namespace, "kh-sim/ok"), threading.Event()).run()  # a good result first
    res = daemon.services.resources
    monkeypatch.setattr(res, "create", flaky(res.create, 10**6, Unreachable("POST: connection refused")))
    result = Runner(daemon.services, check_spec(namespace, "kh-sim/ok", timeout="3s"), threading.Event()).run()
    assert result.outcome is Outcome.SKIPPED and result.skip_reason == SKIP_API
    s = state_of(daemon, namespace)
    assert s.ok is True and s.errors == ()  # the last real result stands
    assert skipped_count(daemon.services.stats, SKIP_API) == 1


HELD = 15  # seconds the API server holds each of the requests that take every connection slot


def all_slots_taken(daemon: InProcessDaemon) -> bool:
    try:
        daemon.services.kube.request("GET", "/version", timeout=0.2)
    except NoFreeConnection:
        return True
    return False


def test_a_run_whose_requests_find_every_connection_busy_is_skipped_after_one_attempt(
        daemon: InProcessDaemon, namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's own requests queued ahead of the run's (each held HELD s by the API server): retrying
    would only queue again, and a run that got through late would add a pod to a control plane already
    behind. Skipped (not failed), one request attempted and none sent, nothing written."""
    kube = daemon.services.kube
    hold = {"watch": "true", "timeoutSeconds": str(HELD)}  # one body that ends after HELD s
    holders = futures.ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="test-slot-holder")
    try:
        for _ in range(IN_FLIGHT):
            holders.submit(kube.request, "GET", PODS.path(namespace), query=hold, timeout=HELD + 10)
        wait_for(lambda: all_slots_taken(daemon), 10, what="every request slot of the client taken")
        attempts: list[str] = []
        request_bytes = kube.request_bytes

        def counted(method: str, path: str, **kw: Any) -> bytes:
            if threading.current_thread() is threading.main_thread():  # the run's, not the holders'
                attempts.append(f"{method} {path}")
            return request_bytes(method, path, **kw)
        monkeypatch.setattr(kube, "request_bytes", counted)
        result = Runner(daemon.services, check_spec(namespace, "kh-sim/ok", timeout="60s"), threading.Event()).run()
    finally:
        holders.shutdown(wait=True)
    assert result.outcome is Outcome.SKIPPED and result.skip_reason == SKIP_API, result
    assert len(attempts) == 1, attempts
    assert daemon.services.pods.by_index("check", f"{namespace}/probe") == []


def test_a_checker_pod_stuck_terminating_does_not_block_the_next_run(
        cluster: TestCluster, daemon: InProcessDaemon, namespace: str) -> None:
    # A pod on a node that is gone: deleted, but nobody ever confirms it (no kubelet): Terminating forever.
    lost = checker_pod("probe-1", "probe", "old-run", annotate=False, env_uuid=None, node_name="lost-node")
    cluster.request("POST", PODS.path(namespace), lost)
    cluster.request("PATCH", PODS.path(namespace, "probe-1", "status"), {"status": {"phase": "Running"}},
                    content_type=MERGE_PATCH)
    cluster.request("DELETE", PODS.path(namespace, "probe-1"), {"gracePeriodSeconds": 300})
    wait_for(lambda: (daemon.services.pods.get(namespace, "probe-1") or {}).get("metadata", {})
             .get("deletionTimestamp"), what="the lost pod Terminating in the cache")
    first = Runner(daemon.services, check_spec(namespace, "kh-sim/ok", timeout="3s"), threading.Event()).run()
    assert first.outcome is Outcome.FAILED  # reported once, with v2's reason
    assert state_of(daemon, namespace).errors == (
        f"Check execution error: {namespace}/probe: failed to see pod cleanup within timeout",)
    for _ in range(2):
        result = Runner(daemon.services, check_spec(namespace, "kh-sim/ok"), threading.Event()).run()
        assert result.outcome is Outcome.REPORTED, result
    assert state_of(daemon, namespace).ok is True
    assert len(daemon.services.stuck_terminating) == 1


def test_a_khjob_left_running_by_a_previous_leader_is_run_again(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet) -> None:
    cluster.request("POST", KHJOBS.path(namespace), khjob("orphaned", phase="Running"))
    d = InProcessDaemon(cluster, namespace).start()
    try:
        wait_for(lambda: cluster.request("GET", KHJOBS.path(namespace, "orphaned"))["spec"].get("phase")
                 == "Completed", 60, what="the orphaned job finished by the new leader")
        s = khstate.Spec.of(cluster.request("GET", KHSTATES.path(namespace, "orphaned")))
        assert s.ok is True and s.last_run
    finally:
        d.stop()
