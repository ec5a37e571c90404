"""Which checker pods, khjobs and khstates the reapers choose, given lists and a time: no I/O."""
from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from kuberhealthy.base import config as khconfig
from kuberhealthy.control.reaper import (
    MIN_CHECK_POD_AGE,
    Limits,
    khjobs_to_reap,
    orphan_states,
    pod_finished_at,
    pods_to_reap,
)

NOW = 1_700_000_000.0


def ts(seconds_ago: float) -> str:
    t = dt.datetime.fromtimestamp(NOW - seconds_ago, dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, phase: str, created_ago: float, finished_ago: float | None = None, check: str = "dns",
        namespace: str = "ns", **extra_meta: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if finished_ago is not None:
        status["containerStatuses"] = [{"name": "main", "state": {"terminated": {
            "exitCode": 0 if phase == "Succeeded" else 1, "finishedAt": ts(finished_ago)}}}]
    elif phase == "Running":
        status["containerStatuses"] = [{"name": "main", "state": {"running": {"startedAt": ts(created_ago)}}}]
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                         "creationTimestamp": ts(created_ago), "labels": {"kuberhealthy-check-name": check},
                         **extra_meta},
            "status": status}


def names(doomed: list[Any]) -> list[str]:
    return sorted(d.name for d in doomed)


LIMITS = Limits(max_completed_pods=2, max_error_pods=1, max_pod_age=3600.0, max_khjob_age=900.0)


def test_only_the_newest_succeeded_pods_of_a_check_are_kept() -> None:
    pods = [pod(f"s{i}", "Succeeded", created_ago=1000 - i * 100, finished_ago=990 - i * 100) for i in range(5)]
    doomed = pods_to_reap(pods, NOW, LIMITS)
    assert names(doomed) == ["s0", "s1", "s2"]
    assert all(d.uid == f"uid-{d.name}" and "maxCompletedPodCount" in d.reason for d in doomed)


def test_failed_pods_have_their_own_count() -> None:
    pods = [pod(f"f{i}", "Failed", created_ago=500 - i * 100, finished_ago=490 - i * 100) for i in range(3)]
    pods += [pod(f"s{i}", "Succeeded", created_ago=450 - i * 100, finished_ago=440 - i * 100) for i in range(2)]
    assert names(pods_to_reap(pods, NOW, LIMITS)) == ["f0", "f1"]


def test_counts_are_per_check_and_per_namespace() -> None:
    pods = [pod("a1", "Succeeded", 500, 490, check="a"), pod("a2", "Succeeded", 400, 390, check="a"),
            pod("b1", "Succeeded", 500, 490, check="b"), pod("b2", "Succeeded", 400, 390, check="b"),
            pod("x1", "Succeeded", 500, 490, check="a", namespace="other"),
            pod("a3", "Succeeded", 300, 290, check="a")]
    assert names(pods_to_reap(pods, NOW, LIMITS)) == ["a1"]


def test_pending_and_running_pods_are_never_touched_however_old() -> None:
    pods = [pod("p", "Pending", created_ago=10 * 86400), pod("r", "Running", created_ago=10 * 86400),
            pod("u", "Unknown", created_ago=10 * 86400)]
    assert pods_to_reap(pods, NOW, Limits(0, 0, 60.0, 300.0)) == []


def test_a_finished_pod_older_than_the_max_age_goes_even_within_the_count() -> None:
    pods = [pod("old", "Succeeded", created_ago=7300, finished_ago=7200),
            pod("young", "Failed", created_ago=200, finished_ago=100)]
    doomed = pods_to_reap(pods, NOW, Limits(4, 4, 3600.0, 900.0))
    assert names(doomed) == ["old"] and "maxCheckPodAge" in doomed[0].reason


def test_a_pod_that_just_finished_is_kept_even_beyond_the_count() -> None:
    pods = [pod("s0", "Succeeded", created_ago=100, finished_ago=MIN_CHECK_POD_AGE - 1),
            pod("s1", "Succeeded", created_ago=50, finished_ago=5)]
    assert pods_to_reap(pods, NOW, Limits(0, 0, 3600.0, 900.0)) == []


def test_a_zero_count_removes_every_settled_finished_pod() -> None:
    pods = [pod("s", "Succeeded", 100, 60), pod("f", "Failed", 100, 60)]
    assert names(pods_to_reap(pods, NOW, Limits(0, 0, 3600.0, 900.0))) == ["f", "s"]


def test_pods_created_in_the_same_second_are_ranked_by_finish_time() -> None:
    pods = [pod("late", "Succeeded", created_ago=500, finished_ago=100),
            pod("early", "Succeeded", created_ago=500, finished_ago=300),
            pod("middle", "Succeeded", created_ago=500, finished_ago=200)]
    assert names(pods_to_reap(pods, NOW, LIMITS)) == ["early"]


def test_pods_already_being_deleted_or_without_a_check_label_are_left_alone() -> None:
    deleting = pod("d", "Succeeded", 500, 490, deletionTimestamp=ts(1))
    unlabelled = pod("u", "Succeeded", 500, 490)
    unlabelled["metadata"]["labels"] = {"app": "kuberhealthy-check"}
    assert pods_to_reap([deleting, unlabelled], NOW, Limits(0, 0, 60.0, 300.0)) == []


def test_the_finish_time_is_the_last_container_to_finish() -> None:
    p = pod("p", "Failed", 500, 400)
    p["status"]["containerStatuses"].append({"name": "side", "state": {"terminated": {"finishedAt": ts(100)}}})
    assert pod_finished_at(p) == NOW - 100


def test_without_terminated_containers_the_finish_time_falls_back_to_conditions_then_creation() -> None:
    p = pod("p", "Failed", created_ago=900)
    p["status"]["containerStatuses"] = [{"name": "main", "state": {"waiting": {"reason": "ContainerCreating"}}}]
    p["status"]["conditions"] = [{"type": "Ready", "lastTransitionTime": ts(300)},
                                 {"type": "PodScheduled", "lastTransitionTime": ts(800)}]
    assert pod_finished_at(p) == NOW - 300
    del p["status"]["conditions"]
    assert pod_finished_at(p) == NOW - 900


def job(name: str, phase: str, created_ago: float, namespace: str = "ns") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                         "creationTimestamp": ts(created_ago)}, "spec": {"phase": phase}}


def test_only_completed_khjobs_older_than_the_max_age_are_reaped() -> None:
    jobs = [job("old-done", "Completed", 1000), job("new-done", "Completed", 800),
            job("old-running", "Running", 5000), job("old-new", "", 5000)]
    doomed = khjobs_to_reap(jobs, NOW, LIMITS)
    assert names(doomed) == ["old-done"] and doomed[0].uid == "uid-old-done"


def test_the_limits_are_the_configured_values_without_v2s_hidden_floors() -> None:
    cfg = khconfig.from_mapping({"maxCheckPodAge": "1s", "maxKHJobAge": "1m", "maxCompletedPodCount": 0,
                                 "maxErrorPodCount": 7}, {"POD_NAME": "p"})
    assert Limits.from_config(cfg) == Limits(0, 7, 1.0, 60.0)


def test_a_small_max_age_removes_a_pod_that_finished_a_moment_ago() -> None:
    pods = [pod("s0", "Succeeded", created_ago=10, finished_ago=3)]
    assert names(pods_to_reap(pods, NOW, Limits(4, 4, 1.0, 900.0))) == ["s0"]
    cfg = khconfig.from_mapping({"maxCheckPodAge": "2h", "maxKHJobAge": "1h"}, {"POD_NAME": "p"})
    assert Limits.from_config(cfg) == Limits(4, 4, 7200.0, 3600.0)


def state(name: str, namespace: str = "ns", **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", **meta}, "spec": {}}


@pytest.mark.parametrize(("checks", "jobs", "expected"), [
    (set(), set(), ["a", "b"]),
    ({"ns/a"}, set(), ["b"]),
    (set(), {"ns/b"}, ["a"]),
    ({"other/a"}, {"other/b"}, ["a", "b"]),  # same name in another namespace does not count
])
def test_khstates_without_a_khcheck_or_khjob_of_the_same_key_are_orphans(
        checks: set[str], jobs: set[str], expected: list[str]) -> None:
    assert names(orphan_states([state("a"), state("b")], checks, jobs)) == expected


def test_a_khstate_already_being_deleted_is_not_chosen_again() -> None:
    assert orphan_states([state("a", deletionTimestamp=ts(1))], set(), set()) == []
