"""The simulated kubelet against the real test API server: binding, status, reports and their retries,
deletion, exec, and its watch across an API server that restarts or freezes."""
from __future__ import annotations

import ipaddress
import itertools
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import container, pods_path
from testbed.cluster.objects import get_or_none
from testbed.sim import kubelet as kubelet_module
from testbed.sim.behaviours import Behaviour, behaviour_for_image
from testbed.sim.kubelet import SimKubelet
from testbed.sim.rawapi import RawApi, SimApiError
from testbed.sim.receiver import Answer, ReportReceiver
from testbed.sim.records import Outcome
from testbed.sim.retry import retry_after_seconds
from testbed.wait import wait_for

DEADLINE = 30.0


def make_pod(cluster: TestCluster, namespace: str, name: str, image: str,
             env: Mapping[str, str] | list[dict[str, Any]] | None = None, *, command: list[str] | None = None,
             host_node: str | None = None) -> dict[str, Any]:
    """A pod of one container; `env` as names and values, or as the container's env entries (valueFrom...);
    `host_node`: on the host network of that node (bound to it)."""
    c = container(image, env=env if isinstance(env, Mapping) else None)
    c["env"] += env if isinstance(env, list) else []
    if command:
        c["command"] = command
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [c]}
    if host_node:
        spec.update(hostNetwork=True, nodeName=host_node)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}
    return dict(cluster.request("POST", pods_path(namespace), body))


def get_pod(cluster: TestCluster, namespace: str, name: str) -> dict[str, Any] | None:
    pod: dict[str, Any] | None = get_or_none(cluster, pods_path(namespace, name))
    return pod


def phase_is(cluster: TestCluster, namespace: str, name: str, phase: str) -> dict[str, Any] | None:
    pod = get_pod(cluster, namespace, name)
    return pod if pod and pod.get("status", {}).get("phase") == phase else None


def wait_phase(cluster: TestCluster, namespace: str, name: str, phase: str) -> dict[str, Any]:
    pod = wait_for(lambda: phase_is(cluster, namespace, name, phase), DEADLINE, what=f"{name} {phase}")
    assert pod is not None
    return pod


def state_of(pod: dict[str, Any]) -> dict[str, Any]:
    return dict(pod["status"]["containerStatuses"][0]["state"])


def waiting_reason(cluster: TestCluster, namespace: str, name: str) -> str:
    pod = get_pod(cluster, namespace, name) or {}
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    return str(statuses[0].get("state", {}).get("waiting", {}).get("reason", ""))


def report_env(receiver: ReportReceiver, run_uuid: str, **extra: str) -> dict[str, str]:
    return {"KH_REPORTING_URL": receiver.url, "KH_RUN_UUID": run_uuid, **extra}


def deadline_in(seconds: float) -> str:
    """A KH_CHECK_RUN_DEADLINE value (unix seconds, as the daemon writes it) `seconds` from now."""
    return str(int(time.time() + seconds))


Scripted = Callable[..., ReportReceiver]


@pytest.fixture
def scripted() -> Iterator[Scripted]:
    """Start ReportReceivers with a script of answers; all are stopped after the test."""
    started: list[ReportReceiver] = []

    def start(*script: Answer | int) -> ReportReceiver:
        r = ReportReceiver(script=script).start()
        started.append(r)
        return r
    yield start
    for r in started:
        r.stop()


def test_images_name_behaviours_and_anything_else_is_a_pull_error() -> None:
    assert behaviour_for_image("kh-sim/ok") is Behaviour.OK
    assert behaviour_for_image("kh-sim/hang-silent:v1") is Behaviour.HANG_SILENT
    assert behaviour_for_image("registry.local:5000/kh-sim/exec@sha256:abc") is Behaviour.EXEC
    assert behaviour_for_image("kh-sim/nope") is Behaviour.PULL_ERROR
    assert behaviour_for_image("not-kh-sim/ok") is Behaviour.PULL_ERROR
    assert behaviour_for_image("busybox") is Behaviour.PULL_ERROR


def test_a_pod_is_bound_runs_with_a_loopback_ip_and_reports_from_that_ip(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver) -> None:
    run_uuid = str(uuid.uuid4())
    make_pod(cluster, namespace, "checker-a", "kh-sim/hang", report_env(receiver, run_uuid))
    make_pod(cluster, namespace, "checker-b", "kh-sim/hang", report_env(receiver, str(uuid.uuid4())))
    pods = [wait_phase(cluster, namespace, n, "Running") for n in ("checker-a", "checker-b")]
    ips = [p["status"]["podIP"] for p in pods]
    assert len(set(ips)) == 2
    node_ips = dict(kubelet.nodes)
    for pod, ip in zip(pods, ips, strict=True):
        addr = ipaddress.ip_address(ip)
        assert addr.is_loopback and ip != "127.0.0.1"
        assert pod["status"]["podIPs"] == [{"ip": ip}]
        assert pod["spec"]["nodeName"] in node_ips
        assert pod["status"]["hostIP"] == node_ips[pod["spec"]["nodeName"]]
        assert "running" in state_of(pod) and pod["status"]["startTime"]
        assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"

    got = wait_for(lambda: receiver.from_ip(ips[0]), DEADLINE, what="report from checker-a's IP")
    assert len(got) == 1
    assert got[0].body == b'{"OK": true, "Errors": []}'
    assert got[0].headers["kh-run-uuid"] == run_uuid
    assert got[0].headers["content-type"] == "application/json"
    assert got[0].path == "/externalCheckStatus"
    report = wait_for(lambda: kubelet.report_results.get(f"{namespace}/checker-a"), DEADLINE, what="result")
    assert report is not None and report.status == 200 and report.attempts == 1
    assert report.response_body == "ok\n"
    record = kubelet.record(namespace, "checker-a")
    assert record is not None and record.report is report
    assert record.seen and record.bound and record.running and record.reported
    assert record.seen <= record.bound <= record.running <= record.reported
    assert record.exited is None and phase_is(cluster, namespace, "checker-a", "Running")


def test_an_ok_pod_reports_and_then_succeeds_with_exit_code_0(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver) -> None:
    make_pod(cluster, namespace, "ok", "kh-sim/ok", report_env(receiver, "u-1"))
    pod = wait_phase(cluster, namespace, "ok", "Succeeded")
    term = state_of(pod)["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed" and term["finishedAt"]
    assert len(receiver.from_ip(pod["status"]["podIP"])) == 1
    record = kubelet.record(namespace, "ok")
    assert record is not None and record.exit_code == 0
    assert record.reported is not None and record.exited is not None and record.reported <= record.exited


def test_a_failing_check_reports_its_errors_and_still_exits_0(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver) -> None:
    make_pod(cluster, namespace, "fail", "kh-sim/fail",
             report_env(receiver, "u-2", SIM_ERRORS="disk full|dns down"))
    pod = wait_phase(cluster, namespace, "fail", "Succeeded")
    (got,) = receiver.from_ip(pod["status"]["podIP"])
    assert json.loads(got.body) == {"OK": False, "Errors": ["disk full", "dns down"]}


def test_the_uuid_header_is_left_out_when_sim_no_uuid_header_is_set(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver) -> None:
    make_pod(cluster, namespace, "noheader", "kh-sim/ok", report_env(receiver, "u-3", SIM_NO_UUID_HEADER="1"))
    pod = wait_phase(cluster, namespace, "noheader", "Succeeded")
    (got,) = receiver.from_ip(pod["status"]["podIP"])
    assert "kh-run-uuid" not in got.headers
    assert got.body == b'{"OK": true, "Errors": []}'


def test_an_unknown_image_waits_with_err_image_pull_then_image_pull_back_off(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet) -> None:
    make_pod(cluster, namespace, "badimage", "registry.invalid/nothing:1")
    wait_for(lambda: waiting_reason(cluster, namespace, "badimage") in ("ErrImagePull", "ImagePullBackOff"),
             DEADLINE, what="ErrImagePull")
    wait_for(lambda: waiting_reason(cluster, namespace, "badimage") == "ImagePullBackOff",
             DEADLINE, what="ImagePullBackOff")
    pod = get_pod(cluster, namespace, "badimage")
    assert pod is not None and pod["status"]["phase"] == "Pending" and pod["spec"]["nodeName"]


def test_a_crashing_pod_ends_failed_with_exit_code_1_without_reporting(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver) -> None:
    make_pod(cluster, namespace, "crash", "kh-sim/crash", report_env(receiver, "u-4"))
    pod = wait_phase(cluster, namespace, "crash", "Failed")
    term = state_of(pod)["terminated"]
    assert term["exitCode"] == 1 and term["reason"] == "Error"
    assert receiver.received == [] and kubelet.report_results == {}


def test_a_slow_pod_reports_after_its_delay_and_a_pending_delay_holds_it_in_container_creating(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver) -> None:
    make_pod(cluster, namespace, "slow", "kh-sim/slow",
             report_env(receiver, "u-5", SIM_DELAY="0.5", SIM_PENDING_DELAY="1.5"))
    wait_for(lambda: waiting_reason(cluster, namespace, "slow") == "ContainerCreating",
             DEADLINE, what="ContainerCreating")
    wait_phase(cluster, namespace, "slow", "Succeeded")
    record = kubelet.record(namespace, "slow")
    assert record is not None and record.bound and record.running and record.reported
    assert record.running - record.bound >= 1.5
    assert record.reported - record.running >= 0.5


def test_deleting_a_running_pod_makes_it_disappear(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet) -> None:
    make_pod(cluster, namespace, "victim", "kh-sim/hang-silent")
    wait_phase(cluster, namespace, "victim", "Running")
    cluster.request("DELETE", pods_path(namespace, "victim"))
    wait_for(lambda: get_pod(cluster, namespace, "victim") is None, DEADLINE, what="pod gone")
    record = kubelet.record(namespace, "victim")
    assert record is not None and record.terminating is not None and record.exited is None
    wait_for(lambda: record.deleted is not None, DEADLINE, what="record marks the pod deleted")


def test_evicting_a_running_pod_makes_it_disappear(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver) -> None:
    make_pod(cluster, namespace, "evictee", "kh-sim/hang", report_env(receiver, "u-6"))
    wait_phase(cluster, namespace, "evictee", "Running")
    cluster.request("POST", pods_path(namespace, "evictee") + "/eviction",
                    {"apiVersion": "policy/v1beta1", "kind": "Eviction",
                     "metadata": {"name": "evictee", "namespace": namespace}})
    wait_for(lambda: get_pod(cluster, namespace, "evictee") is None, DEADLINE, what="evicted pod gone")


def test_host_network_pods_share_their_node_ip_and_report_from_it(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver) -> None:
    node, node_ip = kubelet.nodes[0]
    for name in ("hostnet-a", "hostnet-b"):
        make_pod(cluster, namespace, name, "kh-sim/hang", report_env(receiver, name), host_node=node)
    pods = [wait_phase(cluster, namespace, n, "Running") for n in ("hostnet-a", "hostnet-b")]
    assert [p["status"]["podIP"] for p in pods] == [node_ip, node_ip]
    wait_for(lambda: len(receiver.from_ip(node_ip)) == 2, DEADLINE, what="two reports from the node IP")
    got = receiver.from_ip(node_ip)
    assert sorted(r.headers["kh-run-uuid"] for r in got) == ["hostnet-a", "hostnet-b"]


def test_exec_runs_the_real_command_with_the_pod_env(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet) -> None:
    script = ("import json, os, sys; "
              "print(json.dumps({k: os.environ.get(k) for k in "
              "('KH_RUN_UUID', 'MY_NS', 'MY_NAME', 'MY_IP', 'KH_SIM_POD_IP')})); "
              "print('to stderr', file=sys.stderr); sys.exit(3)")
    field_env = [{"name": n, "valueFrom": {"fieldRef": {"fieldPath": p}}}
                 for n, p in (("MY_NS", "metadata.namespace"), ("MY_NAME", "metadata.name"),
                              ("MY_IP", "status.podIP"))]
    make_pod(cluster, namespace, "exec", "kh-sim/exec", [{"name": "KH_RUN_UUID", "value": "u-7"}, *field_env],
             command=[sys.executable, "-c", script])
    pod = wait_phase(cluster, namespace, "exec", "Failed")
    assert state_of(pod)["terminated"]["exitCode"] == 3
    record = kubelet.record(namespace, "exec")
    assert record is not None and record.exit_code == 3
    ip = pod["status"]["podIP"]
    assert json.loads(record.stdout) == {"KH_RUN_UUID": "u-7", "MY_NS": namespace, "MY_NAME": "exec",
                                         "MY_IP": ip, "KH_SIM_POD_IP": ip}
    assert record.stderr.strip() == "to stderr"


def test_a_report_to_a_closed_port_is_retried_until_the_runs_deadline_and_the_pod_still_exits(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet) -> None:
    dead = ReportReceiver()
    url = dead.url
    dead.stop()  # never started; the port is closed now
    make_pod(cluster, namespace, "lonely", "kh-sim/ok",
             {"KH_REPORTING_URL": url, "KH_RUN_UUID": "u-8", "KH_CHECK_RUN_DEADLINE": deadline_in(3)})
    wait_phase(cluster, namespace, "lonely", "Succeeded")
    report = kubelet.report_results[f"{namespace}/lonely"]
    assert report.status is None and report.error and report.attempts > 1
    assert report.outcome is Outcome.DEADLINE and report.statuses == []
    record = kubelet.record(namespace, "lonely")
    assert record is not None and record.running is not None and record.reported is not None
    assert 1.0 < record.reported - record.running < 6.0  # retried until the deadline, then given up


@pytest.mark.parametrize("status", [503, 429])
def test_a_report_answered_503_or_429_with_retry_after_is_retried_after_that_wait_and_then_accepted(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, scripted: Scripted, status: int) -> None:
    busy = Answer(status, b"control plane away\n", headers={"Retry-After": "1"})
    receiver = scripted(busy, busy)  # then the default 200
    make_pod(cluster, namespace, "patient", "kh-sim/ok",
             report_env(receiver, "u-11", KH_CHECK_RUN_DEADLINE=deadline_in(60)))
    pod = wait_phase(cluster, namespace, "patient", "Succeeded")
    report = kubelet.report_results[f"{namespace}/patient"]
    assert report.outcome is Outcome.ACCEPTED and report.ok
    assert report.attempts == 3 and report.statuses == [status, status, 200]
    assert report.status == 200 and report.response_body == "ok\n" and report.error is None
    got = receiver.from_ip(pod["status"]["podIP"])
    assert len(got) == 3 and {r.headers["kh-run-uuid"] for r in got} == {"u-11"}
    assert {r.body for r in got} == {b'{"OK": true, "Errors": []}'}
    gaps = [b.at - a.at for a, b in itertools.pairwise(got)]
    assert all(1.0 <= g < 3.0 for g in gaps), gaps  # Retry-After: 1 honoured, plus a little jitter


def test_a_report_answered_400_is_final_and_not_retried(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, scripted: Scripted) -> None:
    receiver = scripted(Answer(400, b"bad report\n"))  # a retry would get 200
    make_pod(cluster, namespace, "rejected", "kh-sim/ok",
             report_env(receiver, "u-12", KH_CHECK_RUN_DEADLINE=deadline_in(60)))
    pod = wait_phase(cluster, namespace, "rejected", "Succeeded")
    report = kubelet.report_results[f"{namespace}/rejected"]
    assert report.outcome is Outcome.REJECTED and not report.ok
    assert report.attempts == 1 and report.statuses == [400] and report.status == 400
    assert report.response_body == "bad report\n"
    assert len(receiver.from_ip(pod["status"]["podIP"])) == 1


@pytest.mark.parametrize("answer", [
    Answer(503, headers={"Retry-After": "30"}),  # the pod is deleted while it waits to retry
    Answer(200, delay=30),  # the pod is deleted while its attempt waits for the answer
], ids=["between-attempts", "waiting-for-the-answer"])
def test_a_report_under_way_stops_at_once_when_its_pod_is_deleted(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, scripted: Scripted, answer: Answer) -> None:
    receiver = scripted(answer)
    make_pod(cluster, namespace, "doomed", "kh-sim/ok",
             report_env(receiver, "u-13", KH_CHECK_RUN_DEADLINE=deadline_in(120)))
    wait_for(lambda: receiver.received, DEADLINE, what="the first report attempt")
    cluster.request("DELETE", pods_path(namespace, "doomed"))
    wait_for(lambda: get_pod(cluster, namespace, "doomed") is None, DEADLINE, what="pod gone")
    record = kubelet.record(namespace, "doomed")
    assert record is not None
    report = wait_for(lambda: record.report, DEADLINE, what="the report to end")
    assert report is not None
    assert report.outcome is Outcome.CANCELLED and report.attempts == 1 and not report.ok
    assert record.terminating is not None and report.at is not None
    assert report.at - record.terminating < 1.0
    assert record.exited is None and len(receiver.received) == 1


def test_retry_after_accepts_seconds_and_http_dates_and_ignores_anything_else() -> None:
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds(" 0 ") == 0.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0
    for junk in (None, "", "soon", "inf", "nan"):
        assert retry_after_seconds(junk) is None


def test_a_status_write_that_fails_in_transport_is_retried_and_the_pod_runs_to_the_end(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver,
        monkeypatch: pytest.MonkeyPatch) -> None:
    real_call = RawApi.call
    failures: list[str] = []

    def flaky(self: RawApi, method: str, path: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if path.endswith("/pods/flaky/status") and len(failures) < 2:
            failures.append(path)
            raise SimApiError(0, "ReadTimeoutError: read timed out (simulated)")
        return real_call(self, method, path, *args, **kwargs)

    monkeypatch.setattr(RawApi, "call", flaky)
    make_pod(cluster, namespace, "flaky", "kh-sim/ok", report_env(receiver, "u-14"))
    pod = wait_phase(cluster, namespace, "flaky", "Succeeded")
    assert len(failures) == 2
    assert state_of(pod)["terminated"]["exitCode"] == 0
    record = kubelet.record(namespace, "flaky")
    assert record is not None and record.api_retries == 2 and record.errors == []
    assert record.report is not None and record.report.ok


def test_a_status_write_answered_with_a_final_4xx_is_not_retried(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, monkeypatch: pytest.MonkeyPatch) -> None:
    real_call = RawApi.call
    calls: list[str] = []

    def invalid(self: RawApi, method: str, path: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if path.endswith("/pods/refused/status"):
            calls.append(path)
            raise SimApiError(422, '{"reason": "Invalid"}')
        return real_call(self, method, path, *args, **kwargs)

    monkeypatch.setattr(RawApi, "call", invalid)
    make_pod(cluster, namespace, "refused", "kh-sim/ok")
    record = wait_for(lambda: kubelet.record(namespace, "refused"), DEADLINE, what="the pod adopted")
    assert record is not None
    wait_for(lambda: record.errors, DEADLINE, what="the failed write recorded")
    assert len(calls) == 1 and record.api_retries == 0 and "422" in record.errors[0]
    assert record.running is None


def test_the_kubelet_hands_its_pool_size_to_the_api_connection_pool(cluster: TestCluster, namespace: str) -> None:
    with SimKubelet(str(cluster.kubeconfig), nodes=1, namespace=namespace, pool_size=7) as sim:
        assert sim._api is not None
        assert sim._api._client.rest_client.pool_manager.connection_pool_kw["maxsize"] == 7
    assert SimKubelet(str(cluster.kubeconfig)).pool_size == 128


@pytest.mark.parametrize("image", ["kh-sim/hang", "kh-sim/exec"])
def test_stopping_the_kubelet_stops_running_pods_and_joins_every_thread(
        cluster: TestCluster, namespace: str, image: str) -> None:
    before = set(threading.enumerate())
    sim = SimKubelet(str(cluster.kubeconfig), namespace=namespace).start()
    try:
        make_pod(cluster, namespace, "busy", image, {"KH_REPORTING_URL": "http://127.0.0.1:9/x"},
                 command=[sys.executable, "-c", "import time; time.sleep(600)"])
        wait_phase(cluster, namespace, "busy", "Running")
    finally:
        sim.stop()
    leaked = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    assert leaked == []
    record = sim.record(namespace, "busy")
    assert record is not None and record.exited is None


def test_a_cluster_wide_kubelet_drives_pods_and_resumes_after_its_watch_connection_drops(
        cluster: TestCluster, namespace: str, receiver: ReportReceiver) -> None:
    with SimKubelet(str(cluster.kubeconfig), nodes=2) as sim:
        make_pod(cluster, namespace, "first", "kh-sim/ok", report_env(receiver, "u-9"))
        wait_phase(cluster, namespace, "first", "Succeeded")
        wait_for(lambda: sim._stream.open, DEADLINE, what="an open watch")
        sim._stream.cut()  # as if the connection to the API server dropped
        make_pod(cluster, namespace, "second", "kh-sim/ok", report_env(receiver, "u-10"))
        pod = wait_phase(cluster, namespace, "second", "Succeeded")
        assert pod["spec"]["nodeName"] in dict(sim.nodes)
    assert sorted(r.headers["kh-run-uuid"] for r in receiver.received) == ["u-10", "u-9"]


def test_the_kubelet_keeps_driving_pods_across_an_api_server_restart(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver) -> None:
    make_pod(cluster, namespace, "before", "kh-sim/ok", report_env(receiver, "u-15", SIM_PENDING_DELAY="2"))
    wait_for(lambda: waiting_reason(cluster, namespace, "before") == "ContainerCreating",
             DEADLINE, what="ContainerCreating")
    cluster.restart_apiserver(down_seconds=3)  # the Running write falls into the outage
    pod = wait_phase(cluster, namespace, "before", "Succeeded")
    assert state_of(pod)["terminated"]["exitCode"] == 0
    record = kubelet.record(namespace, "before")
    assert record is not None and record.api_retries >= 1 and record.errors == []
    # the watch came back (re-listing if its resourceVersion expired) and drives new pods
    make_pod(cluster, namespace, "after", "kh-sim/ok", report_env(receiver, "u-16"))
    wait_phase(cluster, namespace, "after", "Succeeded")
    assert sorted(r.headers["kh-run-uuid"] for r in receiver.received) == ["u-15", "u-16"]


def test_a_watch_stream_gone_silent_on_a_frozen_api_server_is_dropped_and_resumed(
        cluster: TestCluster, namespace: str, receiver: ReportReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    assert kubelet_module.WATCH_SECONDS < kubelet_module.WATCH_READ_TIMEOUT <= 40
    # the same rule, scaled down: the server would end a healthy stream after 2 s; silence for 3 s is a fault
    monkeypatch.setattr(kubelet_module, "WATCH_SECONDS", 2)
    monkeypatch.setattr(kubelet_module, "WATCH_READ_TIMEOUT", 3.0)
    monkeypatch.setattr(kubelet_module, "WATCH_CONNECT_TIMEOUT", 2.0)
    with SimKubelet(str(cluster.kubeconfig), nodes=1, namespace=namespace) as sim:
        wait_for(lambda: sim._stream.open, DEADLINE, what="an open watch")
        cluster.freeze()
        try:
            stuck_at = sim.watch_requests
            # Only the client's timeouts can end a request to a frozen server. Two new requests: the first
            # may follow a stream the server ended just before the freeze; the second cannot.
            wait_for(lambda: sim.watch_requests >= stuck_at + 2, 20, what="the silent watch dropped and retried")
        finally:
            cluster.thaw()
        make_pod(cluster, namespace, "thawed", "kh-sim/ok", report_env(receiver, "u-17"))
        wait_phase(cluster, namespace, "thawed", "Succeeded")
