"""HealthChecks (Kuberhealthy v3's kind) run by the daemon: real API server, simulated kubelet, reports over
real HTTP to `/check`, state in the HealthCheck's status. The same machinery as khchecks: where a test
holds for both kinds it runs for both."""
from __future__ import annotations

import time

from kuberhealthy.base.errors import NotFound
from kuberhealthy.kube import EVENTS, HEALTHCHECKS, KHCHECKS, KHSTATES, LEASES, PODS, Obj, Resources
from kuberhealthy.records import hcstate, khstate
from kuberhealthy.records.checkpod import RUN_ID_LABEL, V3_CHECK_LABEL
from kuberhealthy.records.kinds import V3_FINALIZER
from kuberhealthy.records.v3lease import V3_LEASE_NAME
from testbed.daemons.inprocess import InProcessDaemon, healthcheck, khstate_done, ran, status_of
from testbed.daemons.inprocess import khcheck_obj as khcheck
from testbed.wait import wait_for

V3_API = HEALTHCHECKS.api_version


def events(res: Resources, ns: str, kind: str, name: str) -> list[Obj]:
    items, _ = res.list(EVENTS, ns, field_selector=f"involvedObject.kind={kind},involvedObject.name={name}")
    return items


def test_a_healthcheck_runs_and_its_result_lands_in_its_status_with_v3_s_names_and_units(
        daemon: InProcessDaemon, namespace: str, res: Resources) -> None:
    res.create(HEALTHCHECKS, namespace, healthcheck("probe"))
    status = wait_for(ran(res, namespace, "probe"), timeout=60, what="the HealthCheck's first run")
    assert status["ok"] is True and status["errors"] == [] and status["successCount"] == 1
    assert status["failureCount"] == 0 and status["consecutiveFailures"] == 0
    assert isinstance(status["runDuration"], int) and status["runDuration"] > 0  # nanoseconds, as Go's
    assert abs(status["lastRunUnix"] - time.time()) < 120 and status["lastOKUnix"] == status["lastRunUnix"]
    assert status["namespace"] == namespace and status["currentUUID"] == ""
    binding = status["runBinding"]  # ours, beside v3's fields
    assert binding["finishedUUID"] == binding["uuid"] and binding["pod"].startswith("probe-")
    assert [(e["OK"], e["uuid"]) for e in status["history"]] == [(True, binding["uuid"])]
    assert not res.list(KHSTATES, namespace)[0], "a HealthCheck has no khstate"


def test_a_healthcheck_s_checker_pod_carries_v3_s_labels_and_annotations_and_reports_to_check(
        daemon: InProcessDaemon, namespace: str, res: Resources) -> None:
    res.create(HEALTHCHECKS, namespace, healthcheck("labelled", image="kh-sim/hang-silent", timeout="30s"))
    pod = wait_for(lambda: next(iter(res.list(PODS, namespace)[0]), None), what="the checker pod")
    meta = pod["metadata"]
    run = meta["labels"][RUN_ID_LABEL]
    assert meta["labels"][V3_CHECK_LABEL] == "labelled" and meta["labels"]["kh-run-uuid"] == run
    assert meta["annotations"]["kh-run-uuid"] == run and meta["annotations"]["createdBy"] == "kuberhealthy"
    assert meta["annotations"]["kuberhealthyCheckName"] == "labelled"
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["KH_REPORTING_URL"] == f"{daemon.url}/check"


def test_a_failing_healthcheck_records_its_errors_and_raises_an_event_on_the_healthcheck(
        daemon: InProcessDaemon, namespace: str, res: Resources) -> None:
    res.create(HEALTHCHECKS, namespace, healthcheck("failing", image="kh-sim/fail", env={"SIM_ERRORS": "dns slow"}))
    status = wait_for(ran(res, namespace, "failing"), timeout=60, what="the failed run")
    assert status["ok"] is False and status["errors"] == ["dns slow"] and status["consecutiveFailures"] == 1
    assert status["failureCount"] == 1 and status["lastFailureUnix"] > 0 and status["lastOKUnix"] == 0
    found = wait_for(lambda: [e for e in events(res, namespace, "HealthCheck", "failing")
                              if e["reason"] == "CheckFailed"], what="the CheckFailed Event")
    assert found[0]["message"] == "dns slow"
    assert found[0]["involvedObject"]["apiVersion"] == V3_API


def test_a_healthcheck_that_never_reports_fails_with_v2_s_error_naming_the_check(
        daemon: InProcessDaemon, namespace: str, res: Resources) -> None:
    res.create(HEALTHCHECKS, namespace, healthcheck("silent", image="kh-sim/hang-silent", timeout="3s"))
    status = wait_for(ran(res, namespace, "silent"), timeout=60, what="the timed-out run")
    assert status["errors"] == [f"Check execution error: {namespace}/silent: timed out waiting for checker pod "
                                "to report in"]


def test_a_khcheck_and_a_healthcheck_of_one_name_both_run_each_with_its_own_state(
        daemon: InProcessDaemon, namespace: str, res: Resources) -> None:
    res.create(KHCHECKS, namespace, khcheck("twin", image="kh-sim/fail"))
    res.create(HEALTHCHECKS, namespace, healthcheck("twin"))
    status = wait_for(ran(res, namespace, "twin"), timeout=60, what="the HealthCheck's run")
    state = wait_for(khstate_done(res, namespace, "twin"), timeout=60, what="the khcheck's run")
    assert status["ok"] is True and khstate.Spec.of(state).ok is False
    assert status["runBinding"]["uuid"] != khstate.Spec.of(state).uuid


def test_a_single_run_only_healthcheck_runs_once_and_keeps_its_result(
        daemon: InProcessDaemon, namespace: str, res: Resources) -> None:
    res.create(HEALTHCHECKS, namespace, healthcheck("once", interval="2s", singleRunOnly=True))
    wait_for(ran(res, namespace, "once"), timeout=60, what="the one run")
    time.sleep(6)  # three intervals: no second run
    status = status_of(res, namespace, "once")
    assert status["successCount"] == 1 and status["ok"] is True
    assert len(res.list(PODS, namespace)[0]) <= 1


def test_a_healthcheck_v3_s_crd_takes_but_that_cannot_run_is_not_run_and_an_event_names_the_field(
        daemon: InProcessDaemon, namespace: str, res: Resources, v3_crd: None) -> None:
    # Our CRD refuses a bad duration itself (test_healthcheck_crd.py); v3's takes any string.
    res.create(HEALTHCHECKS, namespace, healthcheck("forever", interval="forever"))
    refused = wait_for(lambda: [e for e in events(res, namespace, "HealthCheck", "forever")
                                if e["reason"] == "SpecInvalid"], timeout=30, what="the SpecInvalid Event")
    assert refused[0]["message"].startswith("not run: spec.runInterval: 'forever' is not a duration")
    assert not res.list(PODS, namespace)[0]


def test_a_healthcheck_runs_under_v3_s_own_crd_which_prunes_our_fields_and_says_once_what_is_lost(
        daemon: InProcessDaemon, namespace: str, res: Resources, v3_crd: None) -> None:
    res.create(HEALTHCHECKS, namespace, healthcheck("pruned"))
    status = wait_for(ran(res, namespace, "pruned"), timeout=60, what="the run under v3's CRD")
    assert status["ok"] is True and "runBinding" not in status and "history" not in status
    # the binding's annotations are a second write, after the status's: wait for it, not for the status alone
    def bound() -> dict[str, str] | None:
        annotations = res.get(HEALTHCHECKS, namespace, "pruned")["metadata"].get("annotations") or {}
        return annotations if khstate.FINISHED_UUID in annotations else None
    annotations = wait_for(bound, what="the run binding in the HealthCheck's annotations")
    assert annotations[hcstate.RUN_UUID_ANNOTATION] == annotations[khstate.FINISHED_UUID]
    wait_for(lambda: [e for e in events(res, namespace, "HealthCheck", "pruned") if e["reason"] == "StateNotKept"],
             what="the StateNotKept Event")


def test_while_v3_s_controller_holds_its_lease_no_healthcheck_runs_and_khchecks_do(
        daemon: InProcessDaemon, namespace: str, res: Resources) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    res.create(LEASES, namespace, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                   "metadata": {"name": V3_LEASE_NAME},
                                   "spec": {"holderIdentity": "kuberhealthy-v3-abc", "leaseDurationSeconds": 6,
                                            "renewTime": now}})
    time.sleep(1)  # the daemon's watch sees the Lease
    res.create(HEALTHCHECKS, namespace, healthcheck("held"))
    res.create(KHCHECKS, namespace, khcheck("free"))
    wait_for(khstate_done(res, namespace, "free"), timeout=60, what="the khcheck's run")
    assert not status_of(res, namespace, "held").get("successCount")
    # v3 stops renewing: its Lease expires and the HealthCheck runs here
    wait_for(ran(res, namespace, "held"), timeout=60, what="the HealthCheck's run once the Lease expired")


def test_a_deleted_healthcheck_with_v3_s_finalizer_goes_after_its_pods(
        daemon: InProcessDaemon, namespace: str, res: Resources) -> None:
    body = healthcheck("final", image="kh-sim/hang-silent", timeout="60s")
    body["metadata"]["finalizers"] = [V3_FINALIZER]
    res.create(HEALTHCHECKS, namespace, body)
    wait_for(lambda: res.list(PODS, namespace)[0], what="its checker pod")
    # a pod upstream v3 left behind: only v3's label
    res.create(PODS, namespace, {"apiVersion": "v1", "kind": "Pod",
                                 "metadata": {"name": "final-v3", "labels": {V3_CHECK_LABEL: "final"}},
                                 "spec": {"containers": [{"name": "c", "image": "kh-sim/hang"}]}})
    res.delete(HEALTHCHECKS, namespace, "final")

    def gone() -> bool:
        try:
            res.get(HEALTHCHECKS, namespace, "final")
        except NotFound:
            return True
        return False
    wait_for(gone, timeout=60, what="the HealthCheck gone, its finalizer removed")
    assert not [p for p in res.list(PODS, namespace)[0] if not p["metadata"].get("deletionTimestamp")]
