"""The daemon runs end to end under the Helm chart's own ServiceAccount and RBAC (no admin rights)."""
from __future__ import annotations

from typing import Any

from kuberhealthy.kube import KHCHECKS, KHJOBS, KHSTATES, LEASES
from tests.harness.cluster import TestCluster
from tests.harness.daemon import InProcessDaemon
from tests.harness.helm import CHART, Helm
from tests.harness.wait import wait_for

NO_BUNDLED_CHECKS = [f"check.{c}.enabled=false" for c in (
    "daemonset", "deployment", "dnsInternal", "dnsExternal", "podRestarts", "podStatus", "networkConnection")]


def test_the_daemon_elects_itself_and_runs_a_check_with_only_the_chart_s_permissions(
        helm: Helm, cluster: TestCluster, namespace: str, kubelet: Any) -> None:
    args = ["install", "kuberhealthy", str(CHART), "--namespace", namespace, "--skip-crds",
            "--set", f"targetNamespace={namespace}"]
    for v in NO_BUNDLED_CHECKS:
        args += ["--set", v]
    helm.run(*args, kubeconfig=cluster.kubeconfig)
    sa_kubeconfig = cluster.sa_kubeconfig(namespace, "kuberhealthy")
    cluster.request("POST", KHCHECKS.path(namespace), {
        "apiVersion": "comcast.github.io/v1", "kind": "KuberhealthyCheck", "metadata": {"name": "rbac-probe"},
        "spec": {"runInterval": "1h", "timeout": "30s",
                 "podSpec": {"containers": [{"name": "main", "image": "kh-sim/fail",
                                             "env": [{"name": "SIM_ERRORS", "value": "as expected"}]}]}}})
    daemon = InProcessDaemon(cluster, namespace, {"enableForceMaster": False, "stateReaperInterval": "1s",
                                                  "checkReaperRunInterval": "1s"},
                             pod_name="kuberhealthy-abc12", kubeconfig=sa_kubeconfig).start()
    try:
        wait_for(daemon.services.is_leader, 30, what="leadership via the Lease")
        lease = cluster.request("GET", LEASES.path(namespace, "kuberhealthy"))
        assert lease["spec"]["holderIdentity"] == "kuberhealthy-abc12"

        def reported() -> dict[str, Any] | None:
            spec = cluster.request("GET", KHSTATES.path(namespace, "rbac-probe"))["spec"]
            return spec if spec.get("RunDuration") else None
        spec = wait_for(reported, 60, what="a recorded run")
        assert spec["OK"] is False and spec["Errors"] == ["as expected"] and spec["Node"]
        cluster.request("POST", KHJOBS.path(namespace), {
            "apiVersion": "comcast.github.io/v1", "kind": "KuberhealthyJob", "metadata": {"name": "rbac-job"},
            "spec": {"timeout": "30s", "podSpec": {"containers": [{"name": "main", "image": "kh-sim/ok"}]}}})
        wait_for(lambda: cluster.request("GET", KHJOBS.path(namespace, "rbac-job"))["spec"].get("phase")
                 == "Completed", 60, what="the khjob completed under the chart's RBAC")
    finally:
        daemon.stop()
    lease = cluster.request("GET", LEASES.path(namespace, "kuberhealthy"))
    assert lease["spec"].get("holderIdentity") in (None, "")  # released on stop
    helm.run("uninstall", "kuberhealthy", "--namespace", namespace, kubeconfig=cluster.kubeconfig, check=False)
