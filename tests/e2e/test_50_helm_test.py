"""`helm test` on the real node: the chart's test pod (the daemon's own image running `kuberhealthy
check-service`) reaches the Service through the address the kubelet put in its environment, with no
cluster DNS on this node, and passes; with no daemon behind the Service it fails, saying what it saw."""
from __future__ import annotations

import re
import subprocess

from testbed.node.e2e import E2E, RELEASE, poll

TEST_POD = "kuberhealthy-test"


def _helm_test(kh: E2E) -> subprocess.CompletedProcess[str]:
    return kh.helm.run("test", RELEASE, "--namespace", kh.namespace, "--logs", "--timeout", "3m",
                       kubeconfig=kh.kubeconfig, check=False)


def _pod_line(kh: E2E) -> str:
    lines = kh.logs(TEST_POD, kh.namespace).strip().splitlines()
    assert len(lines) == 1, lines  # one line, no traceback
    return lines[0]


def test_helm_test_passes_through_the_services_cluster_ip_without_dns(kh: E2E) -> None:
    proc = _helm_test(kh)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert TEST_POD in proc.stdout and "Succeeded" in proc.stdout, proc.stdout
    line = _pod_line(kh)
    # the ClusterIP and port from KUBERHEALTHY_SERVICE_HOST/PORT: no name was resolved
    assert re.fullmatch(rf"kuberhealthy check-service: http://{re.escape(kh.cluster_ip)}:80 passed: "
                        r"/readyz 200, / OK=(true|false), \d+ checks \(attempt \d+\)", line), line
    assert line in proc.stdout  # --logs shows it too
    pod = kh.get("pod", TEST_POD, kh.namespace)  # kept for its log (before-hook-creation)
    assert pod["status"]["phase"] == "Succeeded"
    (status,) = pod["status"]["containerStatuses"]
    assert status["state"]["terminated"]["exitCode"] == 0

    # A second run replaces the pod (before-hook-creation) and passes again.
    again = _helm_test(kh)
    assert again.returncode == 0, again.stdout + again.stderr
    assert kh.get("pod", TEST_POD, kh.namespace)["metadata"]["uid"] != pod["metadata"]["uid"]


def test_helm_test_fails_with_one_line_when_no_daemon_answers_behind_the_service(kh: E2E) -> None:
    replicas = len(kh.daemon_pods())
    kh.kubectl("scale", "deployment/kuberhealthy", "-n", kh.namespace, "--replicas=0")
    try:
        poll(lambda: not kh.daemon_pods(live_only=False), 180, "the daemon pods to be gone")
        proc = _helm_test(kh)
        assert proc.returncode != 0, proc.stdout
        line = _pod_line(kh)
        assert line.startswith(f"kuberhealthy check-service: http://{kh.cluster_ip}:80 failed: no answer ("), line
        pod = kh.get("pod", TEST_POD, kh.namespace)
        assert pod["status"]["phase"] == "Failed"
        assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 1
    finally:
        kh.kubectl("scale", "deployment/kuberhealthy", "-n", kh.namespace, f"--replicas={replicas or 2}")
        kh.await_ready(replicas or 2)
