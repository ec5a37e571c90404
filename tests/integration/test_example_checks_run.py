"""The example checks, run for real by the simulated kubelet as local processes with the pod's env,
report through the checker client's kh-run-uuid header and show on the status page."""
from __future__ import annotations

import http.server
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from kuberhealthy.kube import KHCHECKS, PODS
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import checker_pod, khcheck
from testbed.daemons.inprocess import InProcessDaemon
from testbed.paths import REPO
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for


class _Target(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def target() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Target)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/healthz"
    server.shutdown()
    t.join(10)


@pytest.fixture
def kubelet_nodes() -> int:
    """One node: every hostNetwork pod shares its IP."""
    return 1


def example(name: str, script: str, env: dict[str, str], host_network: bool = False) -> dict[str, Any]:
    body = khcheck(name, "kh-sim/exec", interval="1h", timeout="60s",
                   env={"PYTHONPATH": str(REPO / "kuberhealthy"), **env})
    body["spec"]["podSpec"]["containers"][0]["command"] = [
        sys.executable, str(REPO / "examples" / "checks" / script / "check.py")]
    if host_network:
        body["spec"]["podSpec"]["hostNetwork"] = True
    return body


def details(d: InProcessDaemon, key: str) -> dict[str, Any] | None:
    page = requests.get(d.url + "/", timeout=5).json()
    entry = page["CheckDetails"].get(key)
    return entry if entry and entry.get("RunDuration") else None


def test_the_http_example_check_reports_success_through_the_header_path(
        cluster: TestCluster, namespace: str, daemon: InProcessDaemon, target: str,
        kubelet: SimKubelet) -> None:
    cluster.request("POST", KHCHECKS.path(namespace), example("http", "http-check", {"CHECK_URL": target}))
    entry = wait_for(lambda: details(daemon, f"{namespace}/http"), 60, what="the http check's result")
    assert entry["OK"] is True and entry["Errors"] == []
    (rec,) = [r for r in kubelet.records.values() if r.name.startswith("http-")]
    assert rec.exit_code == 0, rec.stderr


def test_the_dns_example_check_reports_a_failure_with_its_reason(
        cluster: TestCluster, namespace: str, daemon: InProcessDaemon) -> None:
    cluster.request("POST", KHCHECKS.path(namespace), example(
        "dns", "dns-check", {"HOSTNAME": "localhost", "EXPECTED_ADDRESS": "127.0.0.99"}))
    entry = wait_for(lambda: details(daemon, f"{namespace}/dns"), 60, what="the dns check's result")
    assert entry["OK"] is False and len(entry["Errors"]) == 1 and "127.0.0.99" in entry["Errors"][0]


def test_a_host_network_check_sharing_its_ip_with_other_pods_is_still_identified(
        cluster: TestCluster, namespace: str, daemon: InProcessDaemon, target: str) -> None:
    # Two other checker pods on the same node and network namespace: the source IP alone is ambiguous.
    for i in range(2):
        daemon.services.resources.create(PODS, namespace, checker_pod(
            f"decoy-{i}", f"decoy-{i}", f"decoy-{i}", image="kh-sim/hang-silent", annotate=False, env_uuid=None,
            host_network=True))
    wait_for(lambda: all((daemon.services.pods.get(namespace, f"decoy-{i}") or {}).get("status", {}).get("phase")
                         == "Running" for i in range(2)), 30, what="decoys running")
    cluster.request("POST", KHCHECKS.path(namespace),
                    example("hostnet", "http-check", {"CHECK_URL": target}, host_network=True))
    entry = wait_for(lambda: details(daemon, f"{namespace}/hostnet"), 60, what="the hostNetwork check's result")
    assert entry["OK"] is True
    ips = {(daemon.services.pods.get(namespace, f"decoy-{i}") or {}).get("status", {}).get("podIP") for i in range(2)}
    assert len(ips) == 1  # the decoys really share one IP
