"""One check run, end to end: real API server, simulated kubelet, reports over real HTTP from pod IPs."""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import requests

from kuberhealthy.kube import KHSTATES, PODS
from kuberhealthy.records import khstate
from kuberhealthy.records.checkpod import RUN_KEY_ANNOTATION, run_key_sha256
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.records.khstate import RUN_KEY_SHA256, RUN_POD
from kuberhealthy.run.runner import Outcome, Phase, Runner
from testbed.cluster.builders import checker_pod
from testbed.daemons.inprocess import InProcessDaemon, check_spec, state_of
from testbed.wait import wait_for


def run(d: InProcessDaemon, check: CheckSpec, stop: threading.Event | None = None) -> Any:
    return Runner(d.services, check, stop or threading.Event()).run()


def test_a_passing_check_records_ok_with_duration_node_and_uuid(daemon: InProcessDaemon, namespace: str) -> None:
    result = run(daemon, check_spec(namespace, "kh-sim/ok"))
    assert result.outcome is Outcome.REPORTED and result.phase is Phase.DONE
    s = state_of(daemon, namespace)
    assert s.ok is True and s.errors == ()
    assert s.uuid == result.run_uuid and s.node.startswith("sim-node-") and s.last_run
    assert s.run_duration.endswith("s") and s.authoritative_pod == "kh-test-0"


def test_a_failing_check_records_its_errors_and_they_show_on_the_status_page(
        daemon: InProcessDaemon, namespace: str) -> None:
    result = run(daemon, check_spec(namespace, "kh-sim/fail", env={"SIM_ERRORS": "disk full|dns slow"}))
    assert result.outcome is Outcome.REPORTED
    s = state_of(daemon, namespace)
    assert s.ok is False and s.errors == ("disk full", "dns slow")
    page = wait_for(lambda: (p := requests.get(daemon.url + "/", timeout=5).json())
                    and f"{namespace}/probe" in p["CheckDetails"] and p, what="status page entry")
    assert page["OK"] is False and "disk full" in page["Errors"]


def test_a_check_that_never_reports_times_out_waiting_for_the_report(daemon: InProcessDaemon, namespace: str) -> None:
    result = run(daemon, check_spec(namespace, "kh-sim/hang-silent", timeout="3s"))
    assert result.outcome is Outcome.FAILED and result.phase is Phase.REPORT
    s = state_of(daemon, namespace)
    assert s.errors == (f"Check execution error: {namespace}/probe: timed out waiting for checker pod to report in",)
    wait_for(lambda: not daemon.services.resources.list(PODS, namespace)[0], what="pod evicted")


def test_a_checker_that_crashes_without_reporting_fails_without_waiting_for_the_timeout(
        daemon: InProcessDaemon, namespace: str) -> None:
    t0 = time.monotonic()
    result = run(daemon, check_spec(namespace, "kh-sim/crash", timeout="60s"))
    assert result.outcome is Outcome.FAILED and time.monotonic() - t0 < 50
    # v2's reason first (alerts match on it), recorded as soon as the pod ended rather than at the deadline;
    # then why, from the pod's status
    assert state_of(daemon, namespace).errors == (
        f"Check execution error: {namespace}/probe: timed out waiting for checker pod to report in",
        f"checker pod {result.pod} container main exited 1")


def test_a_checker_that_never_exits_times_out_waiting_for_the_pod_to_exit(
        daemon: InProcessDaemon, namespace: str) -> None:
    result = run(daemon, check_spec(namespace, "kh-sim/hang", timeout="3s"))
    assert result.outcome is Outcome.FAILED and result.phase is Phase.EXIT
    assert state_of(daemon, namespace).errors == (
        f"Check execution error: {namespace}/probe: timed out waiting for pod to exit",)


def test_an_image_that_cannot_be_pulled_fails_the_run_at_once(daemon: InProcessDaemon, namespace: str) -> None:
    result = run(daemon, check_spec(namespace, "registry.invalid/nope:1", timeout="60s"))
    assert result.outcome is Outcome.FAILED and result.phase is Phase.START
    assert state_of(daemon, namespace).errors == (
        f"Check execution error: {namespace}/probe: error when waiting for pod to start: ErrImagePull",)


def test_a_pod_that_never_leaves_pending_times_out_as_not_running(daemon: InProcessDaemon, namespace: str) -> None:
    result = run(daemon, check_spec(namespace, "kh-sim/ok", timeout="2s", env={"SIM_PENDING_DELAY": "30"}))
    assert result.outcome is Outcome.FAILED and result.phase is Phase.START
    assert state_of(daemon, namespace).errors == (
        f"Check execution error: {namespace}/probe: failed to see pod running within timeout",)


def test_a_checker_pod_deleted_before_reporting_skips_the_run_quietly(
        daemon: InProcessDaemon, namespace: str) -> None:
    before = state_or_none(daemon, namespace)
    box: dict[str, Any] = {}
    t = threading.Thread(target=lambda: box.update(r=run(daemon, check_spec(namespace, "kh-sim/hang-silent",
                                                                      timeout="60s"))))
    t.start()
    pod = wait_for(lambda: running_pod(daemon, namespace), what="running checker pod")
    daemon.services.resources.delete(PODS, namespace, pod["metadata"]["name"])
    t.join(60)
    assert box["r"].outcome is Outcome.SKIPPED
    s = state_of(daemon, namespace)
    assert s.errors == () and s.ok is True and before is None


def test_an_earlier_checker_pod_still_running_is_removed_before_the_new_one_starts(
        daemon: InProcessDaemon, namespace: str) -> None:
    old = daemon.services.resources.create(PODS, namespace, checker_pod(
        "probe-1", "probe", "old-run", image="kh-sim/hang-silent", annotate=False, env_uuid=None))
    wait_for(lambda: (daemon.services.pods.get(namespace, "probe-1") or {}).get("status", {}).get("phase")
             == "Running", what="old pod running")
    result = run(daemon, check_spec(namespace, "kh-sim/ok"))
    assert result.outcome is Outcome.REPORTED
    assert daemon.services.pods.get(namespace, old["metadata"]["name"]) is None


def test_stopping_a_check_mid_run_ends_the_run_and_removes_its_pod(daemon: InProcessDaemon, namespace: str) -> None:
    stop = threading.Event()
    box: dict[str, Any] = {}
    t = threading.Thread(target=lambda: box.update(r=run(daemon, check_spec(namespace, "kh-sim/hang-silent",
                                                                      timeout="60s"), stop)))
    t.start()
    wait_for(lambda: running_pod(daemon, namespace), what="running checker pod")
    stop.set()
    daemon.services.notifier.notify_all()
    t.join(30)
    assert box["r"].outcome is Outcome.STOPPED
    wait_for(lambda: not daemon.services.resources.list(PODS, namespace)[0], what="pod removed")
    assert state_of(daemon, namespace).errors == ()


def test_two_runs_have_different_uuids_and_the_first_can_no_longer_report(
        daemon: InProcessDaemon, namespace: str) -> None:
    first = run(daemon, check_spec(namespace, "kh-sim/ok"))
    second = run(daemon, check_spec(namespace, "kh-sim/ok"))
    assert first.run_uuid != second.run_uuid
    assert state_of(daemon, namespace).uuid == second.run_uuid
    with pytest.raises(khstate.StaleReport):
        khstate.record_report(khstate.RunWrite(daemon.services.resources, namespace, "probe", first.run_uuid, "x"),
                              True, [])


def test_the_created_pod_carries_every_injected_env_var_label_and_annotation(
        daemon: InProcessDaemon, namespace: str) -> None:
    check = check_spec(namespace, "kh-sim/ok", env={"KH_RUN_UUID": "user-value", "OWN": "1"},
                 extraLabels={"team": "sre"}, extraAnnotations={"note": "x"})
    result = run(daemon, check)
    pod = daemon.services.resources.get(PODS, namespace, result.pod)  # as created (the cache keeps less)
    meta, pspec = pod["metadata"], pod["spec"]
    assert meta["name"].startswith("probe-") and meta["name"][len("probe-"):].isdigit()
    assert meta["labels"] == {"kuberhealthy-run-id": result.run_uuid, "kuberhealthy-check-name": "probe",
                              "app": "kuberhealthy-check", "team": "sre"}
    run_key = meta["annotations"].pop(RUN_KEY_ANNOTATION)  # the run's secret: its claim holds the hash
    assert meta["annotations"] == {"comcast.github.io/check-name": "probe", "note": "x"}
    state = daemon.services.resources.get(KHSTATES, namespace, "probe")
    assert state["metadata"]["annotations"][RUN_POD] == result.pod
    assert state["metadata"]["annotations"][RUN_KEY_SHA256] == run_key_sha256(run_key)
    assert pspec["restartPolicy"] == "Never"
    env = {e["name"]: e for e in pspec["containers"][0]["env"]}
    assert env["KH_RUN_UUID"]["value"] == result.run_uuid and env["OWN"]["value"] == "1"
    assert env["KH_REPORTING_URL"]["value"] == daemon.url + "/externalCheckStatus"
    assert int(env["KH_CHECK_RUN_DEADLINE"]["value"]) - time.time() < 25
    assert env["KH_POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_a_pod_spec_without_an_image_is_a_run_error_not_a_crash(daemon: InProcessDaemon, namespace: str) -> None:
    result = run(daemon, check_spec(namespace, ""))
    assert result.outcome is Outcome.FAILED and result.phase is Phase.VALIDATE
    assert "has no image" in state_of(daemon, namespace).errors[0]


def running_pod(d: InProcessDaemon, ns: str) -> dict[str, Any] | None:
    for p in d.services.pods.list():
        if p["metadata"]["namespace"] == ns and p.get("status", {}).get("phase") == "Running":
            return p
    return None


def state_or_none(d: InProcessDaemon, ns: str) -> Any:
    return d.services.khstates.get(ns, "probe")


def test_a_khstate_whose_last_run_advances_for_this_run_counts_as_its_report(
        daemon: InProcessDaemon, namespace: str) -> None:
    """Another writer (not our report handler) moving LastRun for the current uuid completes the run."""
    box: dict[str, Any] = {}
    t = threading.Thread(target=lambda: box.update(r=run(daemon, check_spec(
        namespace, "kh-sim/silent", timeout="60s", env={"SIM_DELAY": "3"}))))
    t.start()
    wait_for(lambda: running_pod(daemon, namespace), what="running checker pod")

    def write_report(cur: dict[str, Any] | None) -> dict[str, Any] | None:
        assert cur is not None
        cur["spec"].update(OK=False, Errors=["written elsewhere"], LastRun="2099-01-01T00:00:00Z")
        return cur
    daemon.services.resources.update_with_retry(KHSTATES, namespace, "probe", write_report)
    t.join(60)
    assert box["r"].outcome is Outcome.REPORTED
    assert state_of(daemon, namespace).errors == ("written elsewhere",)
