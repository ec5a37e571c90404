"""docs/interface.md#custom-resources, #checker-pods, #runs and #influxdb on a leader (enableForceMaster) running
real checks.

One daemon for the module, with the simulated kubelet driving its namespace. Its own pod exists (so
checker pods get an ownerReference), another replica holds the Lease (enableForceMaster bypasses it),
the config file's reporting URL is wrong and KH_EXTERNAL_REPORTING_URL is right (the env var wins), and
InfluxDB forwarding goes to a fake InfluxDB that keeps every line.
"""
from __future__ import annotations

import base64
import re
import urllib.error
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests

from testbed.clients.formats import parse_go_duration, parse_metrics, parse_rfc3339, promtool_check, split_line_protocol
from testbed.clients.rawhttp import get_json
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import MERGE_PATCH, container, khc, khcheck, khj, khjob, pods_path
from testbed.cluster.objects import (
    NODE_ELSEWHERE,
    checker_pods,
    create_checker_pod,
    create_lease,
    create_namespace,
    lease_holder,
    state_spec,
)
from testbed.daemons.process import DaemonProcess
from testbed.sim.kubelet import SimKubelet
from testbed.tools.fakeinflux import FakeInflux
from testbed.wait import wait_for

DAEMON = "kh-runner"
HOLD = "contract.example.com/hold"

ERR_RUNNING = "failed to see pod running within timeout"
ERR_REPORT = "timed out waiting for checker pod to report in"
ERR_EXIT = "timed out waiting for pod to exit"
ERR_CLEANUP = "failed to see pod cleanup within timeout"
ERR_PULL = "error when waiting for pod to start: ErrImagePull"


@dataclass
class Env:
    cluster: TestCluster
    ns: str
    other_ns: str
    daemon: DaemonProcess
    kubelet: SimKubelet
    influx: FakeInflux
    controller_pod: dict[str, Any]
    audit_offset: int
    rejected: dict[str, int]  # khchecks the API server refused, by name -> status code


CHECKS: dict[str, dict[str, Any]] = {
    "okc": khcheck("okc", interval="2s", timeout="30s", containers=[
        container("kh-sim/ok", "main", {"KH_REPORTING_URL": "http://user.example/nope", "KH_RUN_UUID": "user-value",
                                        "USER_VAR": "kept"}),
        container("kh-sim/ok", "side", {"KH_POD_NAMESPACE": "user-ns"})],
        extraLabels={"team": "sre"}, extraAnnotations={"example.com/note": "hello"}),
    "failc": khcheck("failc", "kh-sim/fail", interval="2s", env={"SIM_ERRORS": "boom one|boom two"}),
    "slowc": khcheck("slowc", "kh-sim/slow", interval="1h", env={"SIM_DELAY": "2"}),
    "pendc": khcheck("pendc", "kh-sim/ok", interval="1h", timeout="2s", env={"SIM_PENDING_DELAY": "3600"}),
    "silentc": khcheck("silentc", "kh-sim/hang-silent", interval="1h", timeout="2s"),
    "hangc": khcheck("hangc", "kh-sim/hang", interval="1h", timeout="2s"),
    "cleanc": khcheck("cleanc", "kh-sim/ok", interval="1h", timeout="3s"),
    "pullc": khcheck("pullc", "registry.invalid/no-such-image:1", interval="1h", timeout="10m"),
    "deletedc": khcheck("deletedc", "kh-sim/hang-silent", interval="2s", timeout="10m"),
    "deftc": khcheck("deftc", "kh-sim/ok", interval=None, timeout=None),
    "initc": khcheck("initc", "kh-sim/ok", interval="1h"),
    "labelc": khcheck("labelc", "kh-sim/ok", interval="1h",
                      extraLabels={"app": "mine", "kuberhealthy-run-id": "hijack", "kuberhealthy-check-name": "x"},
                      extraAnnotations={"comcast.github.io/check-name": "x"}),
    "ipc": khcheck("ipc", "kh-sim/ok", interval="1h", env={"SIM_NO_UUID_HEADER": "1"}),
    "badintc": khcheck("badintc", "kh-sim/ok", interval="often", timeout="30s"),
    "emptyc": khcheck("emptyc", interval="1s"),
    "noimgc": khcheck("noimgc", interval="1s", containers=[{"name": "noimage"}]),
}
CHECKS["emptyc"]["spec"]["podSpec"] = {"containers": []}
CHECKS["initc"]["spec"]["podSpec"]["initContainers"] = [container("kh-sim/ok", "init", {"KH_RUN_UUID": "user"})]
CHECKS["labelc"]["spec"]["podSpec"]["restartPolicy"] = "Always"


@pytest.fixture(scope="module")
def env(cluster: TestCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    ns = create_namespace(cluster, "crun")
    other = create_namespace(cluster, "cother")
    offset = cluster.audit_offset()
    controller_pod = cluster.request("POST", pods_path(ns), {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": DAEMON},
        "spec": {"nodeName": NODE_ELSEWHERE, "containers": [{"name": "kh", "image": "example.invalid/kh:1"}]}})
    create_lease(cluster, ns, "kuberhealthy", "someone-else", 3600)
    # an old checker pod of "cleanc" that cannot go away (finalizer): the run must give up waiting for it
    create_checker_pod(cluster, ns, "cleanc-old", check="cleanc", run_uuid=str(uuid.uuid4()), finalizers=[HOLD])
    rejected: dict[str, int] = {}
    for name, body in CHECKS.items():
        try:
            cluster.request("POST", khc(ns), body)
        except urllib.error.HTTPError as e:
            rejected[name] = e.code
    job = khjob("jobc", "kh-sim/ok", timeout="45s")
    job["spec"].update({"extraLabels": {"jobteam": "ops"}, "extraAnnotations": {"example.com/job": "yes"}})
    cluster.request("POST", khj(ns), job)
    cluster.request("POST", khj(ns), khjob("jobrun", "kh-sim/hang-silent", timeout="10m"))
    cluster.request("POST", khj(ns), khjob("donejob", "kh-sim/ok", phase="Completed"))
    cluster.request("POST", khc(other), khcheck("elsewhere", "kh-sim/ok", interval="1s"))
    kubelet = SimKubelet(str(cluster.kubeconfig), nodes=3, namespace=ns).start()
    influx = FakeInflux().start()
    daemon = DaemonProcess(cluster, tmp_path_factory.mktemp("runs"), DAEMON, ns, {
        "targetNamespace": ns, "enableForceMaster": True,
        "enableInflux": True, "influxURL": influx.url, "influxDB": "khdb",
        "influxUsername": "u", "influxPassword": "p",
        "checkReaperRunInterval": "1h", "stateReaperInterval": "1h",
        "externalCheckReportingURL": "http://config-loses.invalid/externalCheckStatus"})
    daemon.env["KH_EXTERNAL_REPORTING_URL"] = f"{daemon.url}/externalCheckStatus"
    try:
        daemon.start().wait_serving()
        yield Env(cluster, ns, other, daemon, kubelet, influx, controller_pod, offset, rejected)
    finally:
        daemon.stop()
        try:
            cluster.request("PATCH", pods_path(ns, "cleanc-old"), {"metadata": {"finalizers": None}},
                            content_type=MERGE_PATCH)
            cluster.request("DELETE", pods_path(ns, "cleanc-old") + "?gracePeriodSeconds=0")
        except urllib.error.HTTPError:
            pass
        kubelet.stop()
        influx.stop()


def pods_of(e: Env, check: str) -> list[dict[str, Any]]:
    return checker_pods(e.cluster, e.ns, check)


def state(e: Env, name: str) -> dict[str, Any]:
    return state_spec(e.cluster, e.ns, name)


def ts(s: str) -> float:
    return parse_rfc3339(s).timestamp()


def env_of(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in c.get("env") or []}


def first_pod(e: Env, check: str) -> dict[str, Any]:
    def some() -> dict[str, Any]:
        pods = [p for p in pods_of(e, check) if p["metadata"]["name"] != "cleanc-old"]
        assert pods, f"no {check} pod yet"
        return pods[0]
    return wait_for(some, 60, what=f"a checker pod of {check}")


def completed_state(e: Env, name: str, timeout: float = 60) -> dict[str, Any]:
    def done() -> dict[str, Any]:
        s = state(e, name)
        assert s.get("LastRun") and s.get("AuthoritativePod") and s.get("RunDuration"), s
        return s
    return wait_for(done, timeout, what=f"a completed run of {name}")


# --- checker pods ----------------------------------------------------------------------------------

def test_checker_pods_are_named_after_the_check_and_the_unix_second_and_never_restart(env: Env) -> None:
    pod = first_pod(env, "okc")
    m = re.fullmatch(r"okc-(\d+)", pod["metadata"]["name"])
    assert m, pod["metadata"]["name"]
    created = ts(pod["metadata"]["creationTimestamp"])
    assert abs(int(m.group(1)) - created) <= 2, (m.group(1), pod["metadata"]["creationTimestamp"])
    assert pod["metadata"]["namespace"] == env.ns
    assert pod["spec"]["restartPolicy"] == "Never"


def test_checker_pods_carry_the_v2_labels_and_annotation_plus_the_extras(env: Env) -> None:
    pod = first_pod(env, "okc")
    labels = pod["metadata"].get("labels") or {}
    assert labels.get("kuberhealthy-check-name") == "okc"
    assert labels.get("app") == "kuberhealthy-check"
    assert re.fullmatch(r"[0-9a-f-]{36}", labels.get("kuberhealthy-run-id", "")), labels
    assert labels.get("team") == "sre"
    ann = pod["metadata"].get("annotations") or {}
    assert ann.get("comcast.github.io/check-name") == "okc"
    assert ann.get("example.com/note") == "hello"


def test_every_container_gets_the_kh_env_replacing_user_values(env: Env) -> None:
    pod = first_pod(env, "okc")
    run_id = pod["metadata"]["labels"]["kuberhealthy-run-id"]
    created = ts(pod["metadata"]["creationTimestamp"])
    assert [c["name"] for c in pod["spec"]["containers"]] == ["main", "side"]
    for c in pod["spec"]["containers"]:
        names = [v["name"] for v in c.get("env") or []]
        assert len(names) == len(set(names)), f"duplicate env names in {c['name']}: {names}"
        ev = env_of(c)
        assert ev["KH_REPORTING_URL"].get("value") == env.daemon.url + "/externalCheckStatus", \
            "KH_EXTERNAL_REPORTING_URL must win over externalCheckReportingURL"
        assert ev["KH_RUN_UUID"].get("value") == run_id
        deadline = int(ev["KH_CHECK_RUN_DEADLINE"]["value"])
        assert abs(deadline - (created + 30)) <= 3, (deadline, created)
        assert ev["KH_POD_NAMESPACE"].get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace"
        assert "value" not in ev["KH_POD_NAMESPACE"] or not ev["KH_POD_NAMESPACE"]["value"]
    assert env_of(pod["spec"]["containers"][0])["USER_VAR"].get("value") == "kept"


def test_init_containers_get_the_kh_env_too(env: Env) -> None:
    """Probe of "Env on every container" for init containers (they are containers of the pod too)."""
    pod = first_pod(env, "initc")
    run_id = pod["metadata"]["labels"]["kuberhealthy-run-id"]
    init = env_of(pod["spec"]["initContainers"][0])
    assert init.get("KH_RUN_UUID", {}).get("value") == run_id, init
    assert init.get("KH_REPORTING_URL", {}).get("value") == env.daemon.url + "/externalCheckStatus"
    assert "KH_CHECK_RUN_DEADLINE" in init and "KH_POD_NAMESPACE" in init


def test_extras_cannot_replace_the_contract_labels_annotation_or_restart_policy(env: Env) -> None:
    pod = first_pod(env, "labelc")
    labels, ann = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels["app"] == "kuberhealthy-check"
    assert labels["kuberhealthy-check-name"] == "labelc"
    assert labels["kuberhealthy-run-id"] == env_of(pod["spec"]["containers"][0])["KH_RUN_UUID"]["value"]
    assert ann["comcast.github.io/check-name"] == "labelc"
    assert pod["spec"]["restartPolicy"] == "Never"
    s = completed_state(env, "labelc")
    assert s["OK"] is True


def test_the_default_timeout_is_5m_in_the_run_deadline(env: Env) -> None:
    pod = first_pod(env, "deftc")
    created = ts(pod["metadata"]["creationTimestamp"])
    deadline = int(env_of(pod["spec"]["containers"][0])["KH_CHECK_RUN_DEADLINE"]["value"])
    assert abs(deadline - (created + 300)) <= 3, (deadline, created)


def test_checker_pods_are_owned_by_the_controller_pod_when_it_exists(env: Env) -> None:
    pod = first_pod(env, "okc")
    refs = pod["metadata"].get("ownerReferences") or []
    assert len(refs) == 1, refs
    ref = refs[0]
    assert ref["kind"] == "Pod" and ref["apiVersion"] == "v1"
    assert ref["name"] == DAEMON and ref["uid"] == env.controller_pod["metadata"]["uid"]


# --- runs and khstates ---------------------------------------------------------------------------------

def test_a_successful_run_records_ok_duration_node_and_authoritative_pod(env: Env) -> None:
    s = completed_state(env, "slowc")
    assert s["OK"] is True and s["Errors"] == []
    assert s["Namespace"] == env.ns
    assert s["AuthoritativePod"] == DAEMON
    parse_rfc3339(s["LastRun"])
    dur = parse_go_duration(s["RunDuration"])
    assert dur >= 2.0, f"RunDuration {s['RunDuration']} is shorter than the checker's 2s delay"
    pods = [p for p in pods_of(env, "slowc") if p["metadata"]["labels"]["kuberhealthy-run-id"] == s["uuid"]]
    assert len(pods) == 1, "the khstate uuid is not the run's"
    assert s["Node"] == pods[0]["spec"]["nodeName"]
    assert s["Node"].startswith("sim-node-")


def test_last_run_is_absent_before_the_first_report(env: Env) -> None:
    def started() -> dict[str, Any]:
        s = state(env, "deletedc")
        assert s.get("uuid"), s
        return s
    s = wait_for(started, 60, what="deletedc's run uuid in its khstate")
    assert "LastRun" not in s or s["LastRun"] is None, s


def test_the_run_uuid_is_in_the_khstate_while_its_silent_pod_runs(env: Env) -> None:
    """deletedc's pods never report: the khstate's uuid can only have been written by the run itself."""
    def matches() -> bool:
        live = [p for p in pods_of(env, "deletedc") if "deletionTimestamp" not in p["metadata"]]
        assert len(live) == 1, f"{len(live)} live deletedc pods"
        run_id = live[0]["metadata"]["labels"]["kuberhealthy-run-id"]
        assert env_of(live[0]["spec"]["containers"][0])["KH_RUN_UUID"]["value"] == run_id
        assert state(env, "deletedc").get("uuid") == run_id
        return True
    wait_for(matches, 60, what="deletedc's khstate uuid == its live pod's run id")


def test_a_failing_check_records_its_errors_everywhere(env: Env) -> None:
    def failed() -> dict[str, Any]:
        s = state(env, "failc")
        assert s.get("LastRun") and s.get("OK") is False, s
        return s
    s = wait_for(failed, 60, what="failc's failure")
    assert s["Errors"] == ["boom one", "boom two"]
    body = get_json(env.daemon.url)
    assert body["OK"] is False
    assert body["CheckDetails"][f"{env.ns}/failc"]["Errors"] == ["boom one", "boom two"]
    assert {"boom one", "boom two"} <= set(body["Errors"])
    text = requests.get(env.daemon.url + "/metrics", timeout=30).text
    series = [lab for n, lab, _ in parse_metrics(text)
              if n == "kuberhealthy_check" and lab.get("check") == f"{env.ns}/failc"]
    assert len(series) == 1 and series[0]["error"] == "boom one|boom two", series


@pytest.mark.parametrize(("check", "reason"), [
    ("pendc", ERR_RUNNING), ("silentc", ERR_REPORT), ("hangc", ERR_EXIT), ("cleanc", ERR_CLEANUP), ("pullc", ERR_PULL),
])
def test_a_failed_run_records_one_v2_execution_error(env: Env, check: str, reason: str) -> None:
    expected = f"Check execution error: {env.ns}/{check}: {reason}"

    def errored() -> dict[str, Any]:
        s = state(env, check)
        assert s.get("Errors"), s
        return s
    s = wait_for(errored, 60, what=f"{check}'s run error")
    assert s["Errors"] == [expected]
    assert s["OK"] is False


def test_an_image_pull_error_fails_the_run_long_before_its_timeout(env: Env) -> None:
    """pullc's timeout is 10m; the error must come as soon as the pod shows ErrImagePull."""
    def errored() -> list[str]:
        return state(env, "pullc").get("Errors") or []
    errs = wait_for(errored, 60, what="pullc's run error")
    assert errs == [f"Check execution error: {env.ns}/pullc: {ERR_PULL}"]


def test_timed_out_checker_pods_are_evicted(env: Env) -> None:
    s = wait_for(lambda: state(env, "silentc").get("Errors"), 60, what="silentc timed out")
    assert s
    wait_for(lambda: not [p for p in pods_of(env, "silentc") if "deletionTimestamp" not in p["metadata"]], 30,
             what="silentc's pod removed")

    def evicted() -> list[dict[str, Any]]:
        return [ev for ev in env.cluster.audit_events_since(env.audit_offset)
                if (ev.get("objectRef") or {}).get("subresource") == "eviction"
                and (ev.get("objectRef") or {}).get("namespace") == env.ns
                and (ev.get("objectRef") or {}).get("name", "").startswith("silentc-")
                and (ev.get("responseStatus") or {}).get("code") in (200, 201)]
    wait_for(evicted, 30, what="a successful eviction of silentc's pod")


def test_a_checker_pod_deleted_by_someone_else_skips_the_run_without_an_error(env: Env) -> None:
    def running() -> dict[str, Any]:
        found = [p for p in pods_of(env, "deletedc")
                 if p.get("status", {}).get("phase") == "Running" and "deletionTimestamp" not in p["metadata"]]
        assert found, "no running deletedc pod"
        return found[0]
    pod = wait_for(running, 60, what="a running deletedc pod")
    uid = pod["metadata"]["uid"]
    env.cluster.request("DELETE", pods_path(env.ns, pod["metadata"]["name"]))

    def next_run() -> bool:
        return any(p["metadata"]["uid"] != uid and "deletionTimestamp" not in p["metadata"]
                   for p in pods_of(env, "deletedc"))
    wait_for(next_run, 60, what="the next deletedc run")
    s = state(env, "deletedc")
    assert not s.get("Errors"), f"a skipped run recorded an error: {s}"


def test_a_bad_run_interval_falls_back_to_the_default_and_logs_an_error(env: Env) -> None:
    if "badintc" in env.rejected:  # the CRD's duration pattern refuses it (a stored one falls back: test_crds.py)
        assert env.rejected["badintc"] == 422
        return
    first_pod(env, "badintc")  # the check still runs
    log = env.daemon.log()
    lines = [ln for ln in log.splitlines() if "badintc" in ln and ("often" in ln or "runInterval" in ln)]
    assert any("ERROR" in ln for ln in lines), "no error logged for runInterval 'often':\n" + "\n".join(lines[:10])


def test_a_check_without_containers_or_images_never_gets_a_checker_pod(env: Env) -> None:
    # let the daemon do a few rounds of everything first
    completed_state(env, "slowc")
    okc_runs = len({p["metadata"]["uid"] for p in pods_of(env, "okc")})
    wait_for(lambda: len({p["metadata"]["uid"] for p in pods_of(env, "okc")}) >= okc_runs + 2, 60,
             what="two more okc runs")
    for name in ("emptyc", "noimgc"):
        if name in env.rejected:
            continue
        assert pods_of(env, name) == [], f"{name} got a checker pod"


def test_only_the_target_namespace_is_watched(env: Env) -> None:
    completed_state(env, "slowc")
    okc_runs = len({p["metadata"]["uid"] for p in pods_of(env, "okc")})
    wait_for(lambda: len({p["metadata"]["uid"] for p in pods_of(env, "okc")}) >= okc_runs + 2, 60,
             what="two more okc runs")
    assert env.cluster.request("GET", pods_path(env.other_ns))["items"] == []


def test_force_master_runs_checks_without_taking_the_lease(env: Env) -> None:
    completed_state(env, "okc")
    assert lease_holder(env.cluster, env.ns, "kuberhealthy") == "someone-else"


def test_current_master_is_the_lease_holder_even_beside_a_forced_master(env: Env) -> None:
    """docs/interface.md#status-page: CurrentMaster is the Lease holder; here that is someone-else, not the
    forced master."""
    completed_state(env, "okc")
    assert get_json(env.daemon.url)["CurrentMaster"] == "someone-else"


# --- khjobs -----------------------------------------------------------------------------------------------

def test_a_khjob_runs_once_and_its_result_is_shown_under_job_details(env: Env) -> None:
    def completed() -> dict[str, Any]:
        job = env.cluster.request("GET", khj(env.ns, "jobc"))
        assert job["spec"].get("phase") == "Completed", job["spec"].get("phase")
        return job
    wait_for(completed, 60, what="jobc Completed")
    s = completed_state(env, "jobc")
    assert s["OK"] is True and s["Errors"] == []
    body = get_json(env.daemon.url)
    assert f"{env.ns}/jobc" in body["JobDetails"]
    assert f"{env.ns}/jobc" not in body["CheckDetails"]
    made = [k for k in env.kubelet.records if k.startswith(f"{env.ns}/jobc-")]
    assert len(made) == 1, made
    text = requests.get(env.daemon.url + "/metrics", timeout=30).text
    assert any(n == "kuberhealthy_job" and any("jobc" in v for v in lab.values()) for n, lab, _ in parse_metrics(text))
    assert any(n == "kuberhealthy_job_duration_seconds" and any("jobc" in v for v in lab.values())
               for n, lab, _ in parse_metrics(text))


def test_a_khjob_s_checker_pod_gets_its_extras_labels_and_deadline(env: Env) -> None:
    pod = first_pod(env, "jobc")
    assert re.fullmatch(r"jobc-\d+", pod["metadata"]["name"])
    labels, ann = pod["metadata"].get("labels") or {}, pod["metadata"].get("annotations") or {}
    assert labels.get("jobteam") == "ops" and labels.get("app") == "kuberhealthy-check"
    assert labels.get("kuberhealthy-check-name") == "jobc" and labels.get("kuberhealthy-run-id")
    assert ann.get("example.com/job") == "yes" and ann.get("comcast.github.io/check-name") == "jobc"
    assert pod["spec"]["restartPolicy"] == "Never"
    ev = env_of(pod["spec"]["containers"][0])
    assert ev["KH_RUN_UUID"]["value"] == labels["kuberhealthy-run-id"]
    created = ts(pod["metadata"]["creationTimestamp"])
    assert abs(int(ev["KH_CHECK_RUN_DEADLINE"]["value"]) - (created + 45)) <= 3


def test_a_running_khjob_shows_phase_running(env: Env) -> None:
    first_pod(env, "jobrun")
    wait_for(lambda: env.cluster.request("GET", khj(env.ns, "jobrun"))["spec"].get("phase") == "Running", 30,
             what="jobrun in phase Running")


def test_a_khjob_created_completed_never_runs(env: Env) -> None:
    wait_for(lambda: env.cluster.request("GET", khj(env.ns, "jobc"))["spec"].get("phase") == "Completed", 60,
             what="jobc Completed")
    assert not [k for k in env.kubelet.records if k.startswith(f"{env.ns}/donejob-")]
    assert env.cluster.request("GET", khj(env.ns, "donejob"))["spec"]["phase"] == "Completed"


def test_a_check_created_while_the_daemon_runs_is_picked_up(env: Env) -> None:
    env.cluster.request("POST", khc(env.ns), khcheck("latec", "kh-sim/ok", interval="1h"))
    s = completed_state(env, "latec")
    assert s["OK"] is True


def test_a_checker_pod_reporting_without_the_uuid_header_is_identified_by_its_ip(env: Env) -> None:
    s = completed_state(env, "ipc")
    assert s["OK"] is True and s["Errors"] == []
    recs = [r for k, r in env.kubelet.records.items() if k.startswith(f"{env.ns}/ipc-")]
    assert recs and recs[0].report is not None and recs[0].report.uuid_header is None
    assert recs[0].report.status == 200


# --- HTTP endpoints on the leader-----------------------------------------------------------------------------

def test_the_leader_s_metrics_pass_promtool_with_real_runs(env: Env) -> None:
    completed_state(env, "okc")
    completed_state(env, "jobc")
    text = requests.get(env.daemon.url + "/metrics", timeout=30).text
    lint = promtool_check(text)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    samples = parse_metrics(text)
    dur = [(lab, v) for n, lab, v in samples if n == "kuberhealthy_check_duration_seconds"
           and lab.get("check") == f"{env.ns}/slowc"]
    if state(env, "slowc").get("LastRun"):
        assert dur and dur[0][1] >= 2.0


def test_the_status_page_shows_the_leader_s_runs(env: Env) -> None:
    completed_state(env, "okc")
    body = get_json(env.daemon.url)
    assert list(body) == ["OK", "Errors", "CheckDetails", "JobDetails", "CurrentMaster"]
    d = body["CheckDetails"][f"{env.ns}/okc"]
    assert list(d) == ["OK", "Errors", "RunDuration", "Namespace", "Node", "LastRun", "AuthoritativePod", "uuid"]
    assert d["AuthoritativePod"] == DAEMON and d["Namespace"] == env.ns
    parse_go_duration(d["RunDuration"])


# --- InfluxDB ------------------------------------------------------------------------------------------

def influx_points(e: Env, measurement: str) -> list[tuple[dict[str, list[str]], dict[str, str], dict[str, str], int]]:
    out = []
    for i, (q, batch) in enumerate(list(e.influx.batches)):
        for line in batch:
            m, tags, fields = split_line_protocol(line)
            if m == measurement:
                out.append((q, tags, fields, i))
    return out


def field_number(v: str) -> float:
    return float(v[:-1] if v.endswith("i") else v)


def test_each_run_sends_one_batch_of_status_and_duration_to_influx(env: Env) -> None:
    ns = env.ns
    status_pts = wait_for(lambda: influx_points(env, f"okc.{ns}"), 60, what="okc points in InfluxDB")
    dur_pts = wait_for(lambda: influx_points(env, f"RunDuration.okc.{ns}"), 30, what="okc RunDuration points")
    q, tags, fields, batch = status_pts[0]
    assert q.get("db") == ["khdb"], q
    assert field_number(fields["value"]) == 1
    assert tags.get("KuberhealthyPod") == DAEMON
    assert tags.get("Namespace") == ns and tags.get("Name") == "okc"
    assert tags.get("Errors", "") == ""
    assert any(b == batch for _, _, _, b in dur_pts), "status and RunDuration were not sent in one batch"
    auth = env.influx.auth[batch]
    creds = ("u", "p") if q.get("u") == ["u"] and q.get("p") == ["p"] else None
    if auth and auth.startswith("Basic "):
        user, _, pw = base64.b64decode(auth[6:]).decode().partition(":")
        creds = (user, pw)
    assert creds == ("u", "p"), f"influxUsername/influxPassword not sent: query {q}, Authorization {auth!r}"
    assert field_number(dur_pts[0][2]["value"]) >= 0


def test_influx_points_of_a_failing_check_carry_value_0_and_comma_joined_errors(env: Env) -> None:
    ns = env.ns

    def failing() -> list[Any]:
        return [p for p in influx_points(env, f"failc.{ns}") if field_number(p[2]["value"]) == 0]
    pts = wait_for(failing, 60, what="failc points")
    assert pts[0][1].get("Errors") == "boom one,boom two"
    assert pts[0][1].get("Name") == "failc"


def test_influx_gets_the_real_run_duration_in_seconds(env: Env) -> None:
    pts = wait_for(lambda: influx_points(env, f"RunDuration.slowc.{env.ns}"), 60, what="slowc duration point")
    assert field_number(pts[0][2]["value"]) >= 2.0

