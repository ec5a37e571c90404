"""Container logs of simulated checkers, read as any client reads them: `GET pods/<pod>/log` on the real
API server, which proxies the request over TLS to the simulated kubelet at the node's InternalIP and
daemonEndpoints port (testbed/sim/logs.py)."""
from __future__ import annotations

import re
import urllib.parse
from typing import Any

from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import container, pods_path
from testbed.sim import logs
from testbed.sim.kubelet import SimKubelet
from testbed.sim.receiver import ReportReceiver
from testbed.wait import wait_for

DEADLINE = 30.0


def make_pod(cluster: TestCluster, namespace: str, name: str, image: str, env: dict[str, str],
             sidecar: bool = False) -> None:
    containers = [container(image, env=env)] + ([container("kh-sim/ok", name="sidecar")] if sidecar else [])
    cluster.request("POST", pods_path(namespace), {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
        "spec": {"restartPolicy": "Never", "containers": containers}})


def phase(cluster: TestCluster, namespace: str, name: str) -> str:
    return str((cluster.request("GET", pods_path(namespace, name)).get("status") or {}).get("phase", ""))


def pod_log(cluster: TestCluster, namespace: str, name: str, **query: Any) -> tuple[int, str]:
    """What `kubectl logs` gets: (status, text)."""
    path = pods_path(namespace, name) + "/log"
    if query:
        path += "?" + urllib.parse.urlencode(query)
    status, body = cluster.get_raw(path)
    return status, body.decode()


def test_a_checker_s_log_is_served_through_the_api_server_with_tail_lines_limit_bytes_and_timestamps(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver) -> None:
    script = "connecting to db.example\nquery took 3.2s\nerror: too slow"
    make_pod(cluster, namespace, "scripted", "kh-sim/fail",
             {"KH_REPORTING_URL": receiver.url, "SIM_LOG": script, "SIM_LOG_LINES": "3"})
    wait_for(lambda: phase(cluster, namespace, "scripted") == "Succeeded", DEADLINE, what="the pod done")

    status, text = pod_log(cluster, namespace, "scripted")
    filler = logs.filler(3)
    assert status == 200 and text == "\n".join(filler + script.split("\n")) + "\n"
    assert pod_log(cluster, namespace, "scripted", tailLines=2) == (200, "query took 3.2s\nerror: too slow\n")
    # limitBytes counts from the start of the tail, as the kubelet's reader does: the last line may be cut
    assert pod_log(cluster, namespace, "scripted", tailLines=2, limitBytes=20) == (200, "query took 3.2s\nerro")
    status, stamped = pod_log(cluster, namespace, "scripted", tailLines=1, timestamps="true")
    assert status == 200 and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z error: too slow\n", stamped)

    asked = [r for r in kubelet.log_requests if r.pod == f"{namespace}/scripted"]
    assert len(asked) == 4 and {r.status for r in asked} == {200}
    record = kubelet.record(namespace, "scripted")
    assert record is not None and asked[0].node_ip == dict(kubelet.nodes)[record.node]
    assert asked[1].query["tailLines"] == "2" and record.log.text() == text


def test_without_sim_log_a_checker_prints_a_line_per_step_and_its_errors(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, receiver: ReportReceiver) -> None:
    make_pod(cluster, namespace, "chatty", "kh-sim/fail",
             {"KH_REPORTING_URL": receiver.url, "SIM_ERRORS": "disk full|dns down"})
    make_pod(cluster, namespace, "crashy", "kh-sim/crash", {})
    for name in ("chatty", "crashy"):
        wait_for(lambda n=name: phase(cluster, namespace, n) in ("Succeeded", "Failed"), DEADLINE, what=f"{name} done")
    record = kubelet.record(namespace, "chatty")
    assert record is not None
    _, text = pod_log(cluster, namespace, "chatty")
    assert text.split("\n") == [f"kh-sim/fail: checking {namespace}/chatty on {record.node}", "error: disk full",
                                "error: dns down", f"reporting failure to {receiver.url}",
                                "report accepted: HTTP 200", ""]
    _, crashed = pod_log(cluster, namespace, "crashy")
    assert crashed.endswith("\npanic: simulated crash\n")


def test_logs_are_refused_as_a_kubelet_refuses_them_before_the_start_for_other_containers_and_once_gone(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet) -> None:
    make_pod(cluster, namespace, "creating", "kh-sim/hang-silent", {"SIM_PENDING_DELAY": "60"}, sidecar=True)
    wait_for(lambda: kubelet.record(namespace, "creating") and kubelet.record(namespace, "creating").waiting_reason
             == "ContainerCreating", DEADLINE, what="ContainerCreating")
    status, text = pod_log(cluster, namespace, "creating", container="main")
    assert status == 400 and "is waiting to start: ContainerCreating" in text
    status, text = pod_log(cluster, namespace, "creating")  # two containers: the API server wants a name
    assert status == 400 and "a container name must be specified" in text
    status, text = pod_log(cluster, namespace, "creating", container="nope")
    assert status == 400 and "is not valid" in text

    make_pod(cluster, namespace, "quiet", "kh-sim/hang-silent", {}, sidecar=True)
    wait_for(lambda: phase(cluster, namespace, "quiet") == "Running", DEADLINE, what="Running")
    assert pod_log(cluster, namespace, "quiet", container="sidecar") == (200, "")
    assert pod_log(cluster, namespace, "quiet", container="main", previous="true")[0] == 400

    cluster.request("DELETE", pods_path(namespace, "quiet"))
    wait_for(lambda: pod_log(cluster, namespace, "quiet", container="main")[0] == 404, DEADLINE, what="gone")
