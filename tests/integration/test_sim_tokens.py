"""The simulated kubelet mints projected ServiceAccount tokens through the TokenRequest API, as a kubelet
does, and its checkers send them (or a bad one) from the address SIM_REPORT_FROM names."""
from __future__ import annotations

import json
import sys
from typing import Any

from kuberhealthy.records.checkpod import TOKEN_AUDIENCE as AUDIENCE
from kuberhealthy.records.checkpod import TOKEN_DIR as MOUNT
from kuberhealthy.records.checkpod import TOKEN_PATH as INSIDE
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import TOKEN_FILE_ENV, container, pods_path
from testbed.cluster.loopback import outside_ip
from testbed.sim.kubelet import SimKubelet
from testbed.sim.receiver import ReportReceiver
from testbed.wait import wait_for

TOKENREVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"


def token_pod(cluster: TestCluster, namespace: str, name: str, image: str, env: dict[str, str],
              *, account: str = "checker", command: list[str] | None = None) -> dict[str, Any]:
    """A pod with a projected token volume (audience kuberhealthy) and KH_REPORT_TOKEN_FILE, as the daemon
    makes them (checkpod.py)."""
    c = container(image, env={**env, TOKEN_FILE_ENV: INSIDE})
    c["volumeMounts"] = [{"name": "report-token", "mountPath": MOUNT, "readOnly": True}]
    if command:
        c["command"] = command
    spec = {"restartPolicy": "Never", "serviceAccountName": account, "containers": [c],
            "volumes": [{"name": "report-token", "projected": {"sources": [{"serviceAccountToken": {
                "audience": AUDIENCE, "expirationSeconds": 600, "path": "token"}}]}}]}
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    return dict(cluster.request("POST", pods_path(namespace), body))


def review(cluster: TestCluster, token: str) -> dict[str, Any]:
    answer: dict[str, Any] = cluster.request("POST", TOKENREVIEWS, {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": token, "audiences": [AUDIENCE]}})
    return dict(answer["status"])


def bearer_from(receiver: ReportReceiver, ip: str) -> str:
    got = wait_for(lambda: receiver.from_ip(ip), 30, what=f"a report from {ip}")
    header = got[0].headers.get("authorization", "")
    assert header.startswith("Bearer "), header
    return header[len("Bearer "):]


def test_a_pod_with_a_projected_token_gets_one_bound_to_it_and_sends_it_with_sim_token_file(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver) -> None:
    pod = token_pod(cluster, namespace, "with-token", "kh-sim/ok",
                    {"KH_REPORTING_URL": receiver.url, "KH_RUN_UUID": "u-1", "SIM_TOKEN": "file"})
    record = wait_for(lambda: (r := kubelet.record(namespace, "with-token")) and r.report and r, 30,
                      what="the report")
    token = bearer_from(receiver, record.pod_ip)
    assert open(record.token_files[INSIDE], encoding="utf-8").read() == token
    status = review(cluster, token)
    assert status["authenticated"] is True and status["audiences"] == [AUDIENCE]
    user = status["user"]
    assert user["username"] == f"system:serviceaccount:{namespace}:checker"  # created: it did not exist
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == ["with-token"]
    assert user["extra"]["authentication.kubernetes.io/pod-uid"] == [pod["metadata"]["uid"]]
    assert record.errors == [] and record.report is not None and record.report.bearer


def test_by_default_a_simulated_checker_sends_no_token_and_a_pod_without_the_volume_gets_none(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver) -> None:
    token_pod(cluster, namespace, "v2-client", "kh-sim/ok", {"KH_REPORTING_URL": receiver.url, "KH_RUN_UUID": "u"})
    plain = container("kh-sim/ok", env={"KH_REPORTING_URL": receiver.url, "KH_RUN_UUID": "u", "SIM_TOKEN": "file"})
    cluster.request("POST", pods_path(namespace), {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "no-volume", "namespace": namespace}, "spec": {"restartPolicy": "Never", "containers": [plain]}})
    wait_for(lambda: len(receiver.received) == 2, 30, what="two reports")
    assert [r.headers.get("authorization") for r in receiver.received] == [None, None]
    with_volume, without = kubelet.record(namespace, "v2-client"), kubelet.record(namespace, "no-volume")
    assert with_volume is not None and list(with_volume.token_files) == [INSIDE]
    assert without is not None and without.token_files == {} and without.errors == []


def test_exec_mode_hands_the_real_program_the_token_file_path(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet) -> None:
    script = ("import json, os; p = os.environ['KH_REPORT_TOKEN_FILE']; "
              "print(json.dumps({'path': p, 'token': open(p).read()}))")
    token_pod(cluster, namespace, "exec", "kh-sim/exec", {"KH_RUN_UUID": "u"}, command=[sys.executable, "-c", script])
    record = wait_for(lambda: (r := kubelet.record(namespace, "exec")) and r.exit_code is not None and r, 30,
                      what="the program to exit")
    assert record.exit_code == 0, record.stderr
    out = json.loads(record.stdout)
    assert out["path"] == record.token_files[INSIDE] != INSIDE
    assert review(cluster, out["token"])["authenticated"] is True


def test_garbage_wrong_audience_and_expired_tokens_fail_review_each_for_its_own_reason(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver) -> None:
    for mode in ("garbage", "wrong-audience", "expired"):
        token_pod(cluster, namespace, mode, "kh-sim/ok",
                  {"KH_REPORTING_URL": receiver.url, "KH_RUN_UUID": "u", "SIM_TOKEN": mode})
    wait_for(lambda: len(receiver.received) == 3, 30, what="three reports")
    reasons = {}
    for mode in ("garbage", "wrong-audience", "expired"):
        record = kubelet.record(namespace, mode)
        assert record is not None and record.errors == []
        status = review(cluster, bearer_from(receiver, record.pod_ip))
        assert status.get("authenticated") is not True
        reasons[mode] = status.get("error", "")
    assert "invalid for the target audiences" in reasons["wrong-audience"], reasons
    assert "expired" in reasons["expired"].lower(), reasons
    assert reasons["garbage"], reasons


def test_sim_report_from_sends_from_the_node_address_or_any_loopback_address(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver) -> None:
    stranger = outside_ip(7)
    for name, source in (("snat", "node"), ("stranger", stranger)):
        token_pod(cluster, namespace, name, "kh-sim/ok",
                  {"KH_REPORTING_URL": receiver.url, "KH_RUN_UUID": name, "SIM_REPORT_FROM": source})
    wait_for(lambda: len(receiver.received) == 2, 30, what="two reports")
    by_uuid = {r.headers["kh-run-uuid"]: r.client_ip for r in receiver.received}
    snat = kubelet.record(namespace, "snat")
    assert snat is not None
    assert by_uuid == {"snat": dict(kubelet.nodes)[snat.node], "stranger": stranger}
