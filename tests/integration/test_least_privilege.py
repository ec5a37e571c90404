"""The daemon runs end to end under the Helm chart's own ServiceAccount and RBAC (no admin rights)."""
from __future__ import annotations

from typing import Any

from kuberhealthy.kube import KHCHECKS, KHJOBS, KHSTATES, LEASES
from kuberhealthy.records.runnow import RUN_NOW_ANNOTATION
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khcheck, khjob
from testbed.daemons.inprocess import InProcessDaemon
from testbed.paths import CHART
from testbed.sim.kubelet import SimKubelet
from testbed.tools.helm import Helm
from testbed.wait import wait_for

NO_BUNDLED_CHECKS = [f"check.{c}.enabled=false" for c in (
    "daemonset", "deployment", "dnsInternal", "dnsExternal", "podRestarts", "podStatus", "networkConnection")]


def test_the_daemon_elects_itself_and_runs_a_check_with_only_the_chart_s_permissions(
        helm: Helm, cluster: TestCluster, namespace: str, kubelet: SimKubelet) -> None:
    args = ["install", "kuberhealthy", str(CHART), "--namespace", namespace, "--skip-crds",
            "--set", f"targetNamespace={namespace}"]
    for v in NO_BUNDLED_CHECKS:
        args += ["--set", v]
    helm.run(*args, kubeconfig=cluster.kubeconfig)
    sa_kubeconfig = cluster.sa_kubeconfig(namespace, "kuberhealthy")
    cluster.request("POST", KHCHECKS.path(namespace),
                    khcheck("rbac-probe", "kh-sim/fail", env={"SIM_ERRORS": "as expected"}))
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
        assert "error: as expected" in spec["history"][0]["logs"]  # the log tail, read with the chart's pods/log
        cluster.request("POST", KHJOBS.path(namespace), khjob("rbac-job", phase=None))
        wait_for(lambda: cluster.request("GET", KHJOBS.path(namespace, "rbac-job"))["spec"].get("phase")
                 == "Completed", 60, what="the khjob completed under the chart's RBAC")

        # Run now: the daemon removes the annotation (patch on khchecks) and raises Events (create, patch).
        cluster.request("PATCH", KHCHECKS.path(namespace, "rbac-probe"),
                        {"metadata": {"annotations": {RUN_NOW_ANNOTATION: "now"}}},
                        content_type="application/merge-patch+json")
        wait_for(lambda: RUN_NOW_ANNOTATION not in (cluster.request("GET", KHCHECKS.path(namespace, "rbac-probe"))
                                                   ["metadata"].get("annotations") or {}),
                 60, what="the run-now annotation removed under the chart's RBAC")
        wait_for(lambda: {"CheckFailed", "CheckRunRequested"} <= {
            e["reason"] for e in cluster.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]},
            60, what="Events raised under the chart's RBAC")
    finally:
        daemon.stop()
    lease = cluster.request("GET", LEASES.path(namespace, "kuberhealthy"))
    assert lease["spec"].get("holderIdentity") in (None, "")  # released on stop
    helm.run("uninstall", "kuberhealthy", "--no-hooks", "--namespace", namespace, kubeconfig=cluster.kubeconfig,
             check=False)
