"""Real failure modes on the real node, each with the reason a Kuberhealthy v2 user would see: a missing
image (ErrImagePull / ImagePullBackOff), a checker killed by its memory limit (OOMKilled), a failing init
container, a checker that never exits, an earlier checker pod held Terminating by a finalizer, and a
checker pod deleted mid-run (skipped: nothing recorded, `runs_skipped_total{reason="pod-deleted"}`)."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from testbed.node.e2e import E2E, history, metric, newest_run, poll

SHELL = "localhost/kh-e2e/shell-check:e2e"
HOLD = "e2e.kuberhealthy.test/hold"  # a finalizer nobody removes but this module


def execution_error(kh: E2E, check: str, reason: str) -> str:
    return f"Check execution error: {kh.checks_namespace}/{check}: {reason}"


@pytest.fixture(name="failing", scope="module")
def failing_fixture(kh: E2E) -> Iterator[None]:
    """Every failing check of this module, created at once (one run each: runInterval 10m)."""
    held = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "held-terminating-old", "namespace": kh.checks_namespace,
                         "labels": {"app": "kuberhealthy-check", "kuberhealthy-check-name": "held-terminating"},
                         "annotations": {"comcast.github.io/check-name": "held-terminating"},
                         "finalizers": [HOLD]},  # evicted by the run, it stays Terminating
            # sleep is PID 1 and ignores SIGTERM: the pod stays Running through its grace period, as a
            # pod on a lost node or one whose finalizer nobody removes stays (a Failed pod held by a
            # finalizer only is finished, and does not hold up the next run)
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 600,
                     "containers": [{"name": "main", "image": SHELL, "imagePullPolicy": "Never",
                                     "env": [{"name": "MODE", "value": "sleep"}]}]}}
    kh.apply(held)
    poll(lambda: (kh.get("pod", "held-terminating-old", kh.checks_namespace) or {}).get("status", {}).get("phase")
         == "Running", 60, "the pod to hold")

    missing = kh.pod_spec("localhost/kh-e2e/no-such-image:e2e")
    missing["containers"][0]["imagePullPolicy"] = "IfNotPresent"  # a pull from localhost: refused at once
    oom = kh.pod_spec(SHELL, {"MODE": "oom"})
    oom["containers"][0]["resources"] = {"requests": {"memory": "32Mi"}, "limits": {"memory": "48Mi"}}
    init = kh.pod_spec(SHELL, {"MODE": "ok"}, initContainers=[{
        "name": "init", "image": SHELL, "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", "echo the init container fails; exit 3"]}])
    kh.apply(
        kh.khcheck("missing-image", missing, run_interval="10m", timeout="45s"),
        kh.khcheck("oom-killed", oom, run_interval="10m", timeout="45s"),
        kh.khcheck("init-fails", init, run_interval="10m", timeout="45s"),
        kh.khcheck("never-exits", kh.pod_spec(SHELL, {"MODE": "sleep"}), run_interval="10m", timeout="25s"),
        kh.khcheck("held-terminating", kh.pod_spec(SHELL, {"MODE": "ok"}), run_interval="10m", timeout="25s"),
    )
    try:
        yield
    finally:
        kh.kubectl("patch", "pod", "held-terminating-old", "-n", kh.checks_namespace, "--type=merge",
                   "-p", '{"metadata":{"finalizers":null}}', check=False)
        kh.kubectl("delete", "pod", "held-terminating-old", "-n", kh.checks_namespace, "--grace-period=0",
                   "--force", "--ignore-not-found", "--wait=false", check=False)
        for name in ("missing-image", "oom-killed", "init-fails", "never-exits", "held-terminating"):
            kh.delete("khcheck", name, kh.checks_namespace)


def failed_run(kh: E2E, check: str) -> dict[str, Any]:
    run = newest_run(kh, check, timeout=180)
    assert run["OK"] is False, run
    state = kh.khstate(check)
    assert state is not None and state["OK"] is False
    return {"run": run, "errors": state["Errors"]}


def test_a_missing_image_fails_the_run_with_err_image_pull(kh: E2E, failing: None) -> None:
    found = failed_run(kh, "missing-image")

    (error,) = found["errors"]
    assert error in (execution_error(kh, "missing-image", "error when waiting for pod to start: ErrImagePull"),
                     execution_error(kh, "missing-image", "error when waiting for pod to start: ImagePullBackOff"))


def test_a_checker_killed_by_its_memory_limit_fails_as_oom_killed(kh: E2E, failing: None) -> None:
    found = failed_run(kh, "oom-killed")
    pod = found["run"]["pod"]

    assert found["errors"] == [
        execution_error(kh, "oom-killed", "timed out waiting for checker pod to report in"),
        f"checker pod {pod} container main: OOMKilled (exit 137)",
    ]


def test_a_failing_init_container_fails_the_run_as_not_reporting(kh: E2E, failing: None) -> None:
    found = failed_run(kh, "init-fails")

    assert found["errors"] == [
        execution_error(kh, "init-fails", "timed out waiting for checker pod to report in"),
        f"checker pod {found['run']['pod']} init container init exited 3",
    ]
    pod = kh.get("pod", found["run"]["pod"], kh.checks_namespace)
    if pod is not None:  # the reaper may have removed it already
        (init,) = pod["status"]["initContainerStatuses"]
        assert init["state"]["terminated"]["exitCode"] == 3


def test_a_checker_that_never_exits_times_out_waiting_for_its_report(kh: E2E, failing: None) -> None:
    found = failed_run(kh, "never-exits")

    assert found["errors"] == [execution_error(kh, "never-exits", "timed out waiting for checker pod to report in")]
    # ... and its pod is removed by the run
    poll(lambda: all(p["metadata"].get("deletionTimestamp") or p["status"].get("phase") in ("Succeeded", "Failed")
                     for p in kh.checker_pods("never-exits")), 60, "the never-exiting pod to be removed")


def test_an_earlier_pod_held_terminating_by_a_finalizer_fails_the_run_waiting_for_its_cleanup(
        kh: E2E, failing: None) -> None:
    """The earlier checker pod is live when the run starts: the run evicts it, the finalizer holds it
    Terminating, and the run must not start a second pod beside it."""
    found = failed_run(kh, "held-terminating")

    held = kh.get("pod", "held-terminating-old", kh.checks_namespace)
    assert held is not None and held["metadata"].get("deletionTimestamp"), "the run did not evict the earlier pod"

    assert found["errors"] == [execution_error(kh, "held-terminating", "failed to see pod cleanup within timeout")]
    live = [p for p in kh.checker_pods("held-terminating") if not p["metadata"].get("deletionTimestamp")]
    assert live == []  # the run never started a second pod beside the Terminating one


def test_a_checker_pod_deleted_mid_run_skips_the_run_as_pod_deleted(kh: E2E) -> None:
    leader_name = poll(kh.leader, 30, "a leader")
    leader = kh.get("pod", leader_name, kh.namespace)
    before = metric(kh.pod_metrics(leader), "kuberhealthy_runs_skipped_total", reason="pod-deleted") or 0.0
    kh.apply(kh.khcheck("deleted-mid-run", kh.pod_spec(SHELL, {"MODE": "sleep"}), run_interval="10m",
                        timeout="3m"))
    try:
        pod = poll(lambda: [p for p in kh.checker_pods("deleted-mid-run") if p["status"].get("phase") == "Running"],
                   90, "the checker pod to run")[0]

        kh.delete("pod", pod["metadata"]["name"], kh.checks_namespace)

        poll(lambda: (metric(kh.pod_metrics(leader), "kuberhealthy_runs_skipped_total", reason="pod-deleted")
                      or 0.0) == before + 1, 120, "the run to be skipped as pod-deleted")
        state = kh.khstate("deleted-mid-run")
        assert state is not None
        assert history(state) == [] and "LastRun" not in state, state  # nothing recorded, no false alarm
    finally:
        kh.delete("khcheck", "deleted-mid-run", kh.checks_namespace)
