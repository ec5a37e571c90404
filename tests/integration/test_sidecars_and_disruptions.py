"""Checks that survive the clusters people run: sidecars that never exit and disruptions, on the real API
server with the simulated kubelet writing the status shapes a 1.29+ kubelet writes (`kh-sim/sidecar`
containers and native sidecars; SIM_DISRUPT). Every rule holds for khchecks and HealthChecks alike: the
tests that go through the daemon run for both kinds."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import requests

from kuberhealthy.kube import EVENTS, HEALTHCHECKS, KHCHECKS, KHSTATES, PODS, Obj, Resources
from kuberhealthy.records.checkpod import SIDECARS_ANNOTATION
from kuberhealthy.run.runner import Outcome, Runner, RunResult
from testbed.daemons.inprocess import InProcessDaemon, check_spec, ran, state_of
from testbed.wait import wait_for

KINDS = ("khcheck", "healthcheck")
REPORT_TIMEOUT = "timed out waiting for checker pod to report in"
PROXY = {"name": "istio-proxy", "image": "kh-sim/sidecar"}


def checker(image: str = "kh-sim/ok", **env: str) -> dict[str, Any]:
    return {"name": "main", "image": image, "env": [{"name": k, "value": v} for k, v in env.items()]}


def create(res: Resources, kind: str, ns: str, name: str, containers: list[dict[str, Any]],
           timeout: str = "30s", annotations: dict[str, str] | None = None, **pod_spec: Any) -> None:
    """A check of `kind` whose pod has these containers (and pod annotations), run once an hour."""
    spec: dict[str, Any] = {"containers": containers, **pod_spec}
    if kind == "healthcheck":
        pod: dict[str, Any] = {"spec": {**spec, "restartPolicy": "Never"}}
        if annotations:
            pod["metadata"] = {"annotations": annotations}
        res.create(HEALTHCHECKS, ns, {"apiVersion": HEALTHCHECKS.api_version, "kind": "HealthCheck",
                                      "metadata": {"name": name},
                                      "spec": {"runInterval": "1h", "timeout": timeout, "podSpec": pod}})
    else:
        body: dict[str, Any] = {"runInterval": "1h", "timeout": timeout, "podSpec": spec}
        if annotations:
            body["extraAnnotations"] = annotations
        res.create(KHCHECKS, ns, {"apiVersion": KHCHECKS.api_version, "kind": "KuberhealthyCheck",
                                  "metadata": {"name": name}, "spec": body})


def outcome(res: Resources, kind: str, ns: str, name: str) -> Callable[[], dict[str, Any]]:
    """The check's first judged run: {"ok", "errors", "history"} whichever kind keeps it; {} until then
    (for wait_for)."""
    if kind == "healthcheck":
        def hc() -> dict[str, Any]:
            status = ran(res, ns, name)()
            return {} if status is None else {"ok": status["ok"], "errors": status["errors"],
                                              "history": status.get("history") or []}
        return hc

    def kh() -> dict[str, Any]:
        items, _ = res.list(KHSTATES, ns)
        spec = next((i["spec"] for i in items if i["metadata"]["name"] == name), None)
        if not spec or not spec.get("history") or spec.get("uuid") != spec["history"][0]["uuid"]:
            return {}
        return {"ok": spec["OK"], "errors": spec["Errors"], "history": spec["history"]}
    return kh


def pods_of(res: Resources, ns: str) -> list[Obj]:
    return res.list(PODS, ns)[0]


def seconds(duration: str) -> float:
    return float(duration[:-2]) / 1000 if duration.endswith("ms") else float(duration.rstrip("s"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_check_beside_a_sidecar_that_never_exits_records_ok_runs_and_its_pod_is_ended(
        daemon: InProcessDaemon, namespace: str, res: Resources, kind: str) -> None:
    create(res, kind, namespace, "meshed", [checker(SIM_DELAY="0.5"), PROXY], timeout="60s")
    result = wait_for(outcome(res, kind, namespace, "meshed"), timeout=60, what="the run")
    assert result["ok"] is True and result["errors"] == []
    assert seconds(result["history"][0]["duration"]) < 30  # within seconds, not at the 60 s timeout
    wait_for(lambda: not pods_of(res, namespace), timeout=30, what="the pod the sidecar kept alive ended")


@pytest.mark.parametrize("kind", KINDS)
def test_a_sidecar_named_only_in_the_pod_annotation_does_not_hold_the_run(
        daemon: InProcessDaemon, namespace: str, res: Resources, kind: str) -> None:
    agent = {"name": "vault-agent", "image": "kh-sim/sidecar"}
    create(res, kind, namespace, "annotated", [checker(), agent], timeout="60s",
           annotations={SIDECARS_ANNOTATION: "log-shipper,vault-agent"})
    result = wait_for(outcome(res, kind, namespace, "annotated"), timeout=60, what="the run")
    assert result["ok"] is True and seconds(result["history"][0]["duration"]) < 30
    wait_for(lambda: not pods_of(res, namespace), timeout=30, what="the pod ended")


@pytest.mark.parametrize("kind", KINDS)
def test_a_checker_that_crashes_beside_a_sidecar_fails_with_its_own_exit_not_at_the_timeout(
        daemon: InProcessDaemon, namespace: str, res: Resources, kind: str) -> None:
    create(res, kind, namespace, "crashing", [PROXY, checker("kh-sim/crash")], timeout="60s")
    result = wait_for(outcome(res, kind, namespace, "crashing"), timeout=60, what="the failed run")
    entry = result["history"][0]
    assert result["errors"] == [f"Check execution error: {namespace}/crashing: {REPORT_TIMEOUT}",
                                f"checker pod {entry['pod']} container main exited 1"]
    assert seconds(entry["duration"]) < 30
    wait_for(lambda: not pods_of(res, namespace), timeout=30, what="the pod ended")


def test_a_checker_that_reported_and_never_exits_beside_a_sidecar_still_times_out_waiting_for_exit(
        daemon: InProcessDaemon, namespace: str) -> None:
    check = check_spec(namespace, "kh-sim/hang", timeout="4s", containers=[checker("kh-sim/hang"), PROXY])
    result = Runner(daemon.services, check, threading.Event()).run()
    assert result.outcome is Outcome.FAILED
    assert state_of(daemon, namespace).errors == (
        f"Check execution error: {namespace}/probe: timed out waiting for pod to exit",)


@pytest.mark.parametrize("kind", KINDS)
def test_a_native_sidecar_the_kubelet_stops_neither_holds_nor_decides_the_run(
        daemon: InProcessDaemon, namespace: str, res: Resources, kind: str) -> None:
    """An init container with restartPolicy Always (the 1.20 server drops the field from the pod: the
    daemon knows it from the check's podSpec); the sim stops it after the checker, exit 143."""
    create(res, kind, namespace, "native", [checker()], timeout="60s",
           initContainers=[{"name": "proxy", "image": "kh-sim/sidecar", "restartPolicy": "Always"}])
    result = wait_for(outcome(res, kind, namespace, "native"), timeout=60, what="the run")
    assert result["ok"] is True and result["errors"] == []
    create(res, kind, namespace, "native-silent", [checker("kh-sim/silent")], timeout="60s",
           initContainers=[{"name": "proxy", "image": "kh-sim/sidecar", "restartPolicy": "Always"}])
    failed = wait_for(outcome(res, kind, namespace, "native-silent"), timeout=60, what="the failed run")
    assert failed["errors"][1] == f"checker pod {failed['history'][0]['pod']} container main exited 0 without reporting"


def disruption_events(res: Resources, ns: str) -> list[str]:
    items, _ = res.list(EVENTS, ns, field_selector="reason=CheckPodDisrupted")
    return [e["message"] for e in items]


def skipped(daemon: InProcessDaemon, reason: str) -> float:
    text = requests.get(daemon.url + "/metrics", timeout=5).text
    line = next((x for x in text.splitlines()
                 if x.startswith(f'kuberhealthy_runs_skipped_total{{reason="{reason}"}}')), "x 0")
    return float(line.split()[-1])


@pytest.mark.parametrize("mode,reason", [("eviction", "EvictionByEvictionAPI"), ("preemption", "PreemptionByScheduler"),
                                         ("taint", "DeletionByTaintManager"), ("pressure", "TerminationByKubelet"),
                                         ("shutdown", "TerminationByKubelet")])
def test_a_checker_pod_the_cluster_disrupts_before_it_reports_skips_the_run_with_an_event(
        daemon: InProcessDaemon, namespace: str, res: Resources, mode: str, reason: str) -> None:
    before = skipped(daemon, "pod-disrupted")
    check = check_spec(namespace, "kh-sim/hang-silent", timeout="60s", env={"SIM_DISRUPT": mode})
    result = Runner(daemon.services, check, threading.Event()).run()
    assert result.outcome is Outcome.SKIPPED and result.skip_reason == "pod-disrupted"
    assert state_of(daemon, namespace).errors == ()
    assert skipped(daemon, "pod-disrupted") == before + 1
    [message] = wait_for(lambda: disruption_events(res, namespace), timeout=30, what="the Event")
    assert f"(1 in a row): {reason}" in message


def test_a_checker_pod_disrupted_after_it_reported_keeps_its_result(
        daemon: InProcessDaemon, namespace: str) -> None:
    check = check_spec(namespace, "kh-sim/hang", timeout="60s",
                       env={"SIM_DISRUPT": "pressure", "SIM_DISRUPT_AFTER": "2"})
    result = Runner(daemon.services, check, threading.Event()).run()
    assert result.outcome is Outcome.REPORTED
    s = state_of(daemon, namespace)
    assert s.ok is True and s.errors == () and s.node


def test_three_disrupted_runs_in_a_row_fail_the_third_so_a_checker_evicted_for_its_own_limits_alerts(
        daemon: InProcessDaemon, namespace: str) -> None:
    check = check_spec(namespace, "kh-sim/hang-silent", timeout="60s", env={"SIM_DISRUPT": "pressure"})
    results: list[RunResult] = []
    for _ in range(3):
        results.append(Runner(daemon.services, check, threading.Event()).run())  # the evicted pod stays
    assert [r.outcome for r in results] == [Outcome.SKIPPED, Outcome.SKIPPED, Outcome.FAILED]
    [error] = state_of(daemon, namespace).errors
    assert error.startswith(f"Check execution error: {namespace}/probe: checker pod disrupted 3 times in a row: "
                            "TerminationByKubelet: The node was low on resource: memory.")


def test_the_daemon_keeps_what_it_decides_on_in_its_pod_cache(daemon: InProcessDaemon, namespace: str,
                                                              res: Resources) -> None:
    """The cache's slim pods keep the sidecars annotation and the DisruptionTarget condition."""
    check = check_spec(namespace, "kh-sim/hang-silent", timeout="60s", env={"SIM_DISRUPT": "pressure"},
                       extraAnnotations={SIDECARS_ANNOTATION: "vault-agent"})
    Runner(daemon.services, check, threading.Event()).run()
    pod = next(p for p in pods_of(res, namespace))
    cached = wait_for(lambda: daemon.services.pods.get(namespace, pod["metadata"]["name"]), what="the cached pod")
    assert cached["metadata"]["annotations"][SIDECARS_ANNOTATION] == "vault-agent"
    assert any(c.get("type") == "DisruptionTarget" for c in cached["status"]["conditions"])
