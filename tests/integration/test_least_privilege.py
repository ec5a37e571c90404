"""The daemon runs end to end under the Helm chart's own ServiceAccount and RBAC (no admin rights); and
the chart's rules for Kuberhealthy v3's HealthChecks and Lease allow exactly what the daemon does with
them, nothing more."""
from __future__ import annotations

import urllib.error
from typing import Any

from kuberhealthy.kube import KHCHECKS, KHJOBS, KHSTATES, LEASES
from kuberhealthy.records.runnow import RUN_NOW_ANNOTATION
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khcheck, khjob
from testbed.cluster.objects import create_namespace
from testbed.daemons.inprocess import InProcessDaemon
from testbed.paths import CHART
from testbed.sim.kubelet import SimKubelet
from testbed.tools.helm import Helm
from testbed.wait import wait_for

NO_BUNDLED_CHECKS = [f"check.{c}.enabled=false" for c in (
    "daemonset", "deployment", "dnsInternal", "dnsExternal", "podRestarts", "podStatus", "networkConnection")]
V3_LEASE = "kuberhealthy-controller"  # Kuberhealthy v3's leader-election Lease, in the daemon's namespace
MERGE_PATCH = "application/merge-patch+json"


def install_chart(helm: Helm, cluster: TestCluster, namespace: str, *values: str) -> None:
    args = ["install", "kuberhealthy", str(CHART), "--namespace", namespace, "--skip-crds"]
    for v in (*NO_BUNDLED_CHECKS, *values):
        args += ["--set", v]
    helm.run(*args, kubeconfig=cluster.kubeconfig)


def test_the_daemon_elects_itself_and_runs_a_check_with_only_the_chart_s_permissions(
        helm: Helm, cluster: TestCluster, namespace: str, kubelet: SimKubelet) -> None:
    install_chart(helm, cluster, namespace, f"targetNamespace={namespace}")
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


def hc(ns: str, name: str = "", sub: str = "") -> str:
    path = f"/apis/kuberhealthy.github.io/v2/namespaces/{ns}/healthchecks"
    return path + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


def answer(cluster: TestCluster, token: str, method: str, path: str, body: Any = None,
           content_type: str = "application/json") -> int:
    """The HTTP status the API server gives this ServiceAccount token for the request."""
    try:
        cluster.request(method, path, body, token=token, content_type=content_type)
    except urllib.error.HTTPError as e:
        return e.code
    return 200


def test_the_chart_lets_the_daemon_watch_patch_and_write_the_status_of_healthchecks_and_only_read_v3_s_lease(
        helm: Helm, cluster: TestCluster, namespace: str) -> None:
    ns, other = namespace, create_namespace(cluster)
    install_chart(helm, cluster, ns)  # cluster-wide: HealthChecks in every namespace
    token = cluster.mint_token(ns, "kuberhealthy")
    check = {"apiVersion": "kuberhealthy.github.io/v2", "kind": "HealthCheck",
             "metadata": {"name": "rbac-hc", "finalizers": ["kuberhealthy.io/healthcheck"]},
             "spec": {"runInterval": "1m", "podSpec": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    for where in (ns, other):
        cluster.request("POST", hc(where), check)
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": V3_LEASE},
             "spec": {"holderIdentity": "kuberhealthy-v3-abc12", "leaseDurationSeconds": 15}}
    for where in (ns, other):
        cluster.request("POST", LEASES.path(where), lease)
    cluster.request("POST", LEASES.path(ns), {**lease, "metadata": {"name": "someone-elses"}})

    wait_for(lambda: answer(cluster, token, "GET", hc(other, "rbac-hc")) == 200, 30, what="the chart's RBAC in force")
    wrong: list[tuple[str, str, int]] = []

    def expect(code: int, method: str, path: str, body: Any = None, content_type: str = "application/json") -> None:
        got = answer(cluster, token, method, path, body, content_type)
        if got != code:
            wrong.append((method, path, got))

    # What the daemon does: watch HealthChecks everywhere, patch their metadata (the run-now annotation;
    # the run binding where the CRD prunes it from the status; v3's finalizer), write their status.
    expect(200, "GET", hc(other, "rbac-hc"))
    expect(200, "GET", "/apis/kuberhealthy.github.io/v2/healthchecks")  # list, every namespace
    expect(200, "GET", hc(other) + "?watch=1&timeoutSeconds=1")
    expect(200, "PATCH", hc(other, "rbac-hc"), {"metadata": {"annotations": {"comcast.github.io/run-now": None}}},
           MERGE_PATCH)
    expect(200, "GET", hc(other, "rbac-hc", "status"))
    current = cluster.request("GET", hc(other, "rbac-hc"))
    expect(200, "PUT", hc(other, "rbac-hc", "status"),
           {**current, "status": {"ok": True, "errors": [], "runBinding": {"uuid": "u"}}})
    expect(200, "PATCH", hc(other, "rbac-hc", "status"), {"status": {"ok": False}}, MERGE_PATCH)
    expect(200, "PATCH", hc(other, "rbac-hc"), {"metadata": {"finalizers": None}}, MERGE_PATCH)
    expect(200, "GET", LEASES.path(ns, V3_LEASE))
    # What it never does: make, replace or delete a HealthCheck; touch v3's Lease; read other Leases.
    expect(403, "POST", hc(other), {**check, "metadata": {"name": "made-by-the-daemon"}})
    expect(403, "PUT", hc(other, "rbac-hc"), cluster.request("GET", hc(other, "rbac-hc")))
    expect(403, "DELETE", hc(other, "rbac-hc"))
    expect(403, "DELETE", hc(other))  # deletecollection
    expect(403, "PUT", LEASES.path(ns, V3_LEASE), cluster.request("GET", LEASES.path(ns, V3_LEASE)))
    expect(403, "PATCH", LEASES.path(ns, V3_LEASE), {"spec": {"holderIdentity": "kuberhealthy-abc12"}}, MERGE_PATCH)
    expect(403, "DELETE", LEASES.path(ns, V3_LEASE))
    expect(403, "GET", LEASES.path(ns) + f"?fieldSelector=metadata.name%3D{V3_LEASE}")  # list: get only
    expect(403, "GET", LEASES.path(ns, "someone-elses"))
    expect(403, "GET", LEASES.path(other, V3_LEASE))  # only in its own namespace
    assert wrong == []
    stored = cluster.request("GET", hc(other, "rbac-hc"))
    assert stored["status"] == {"ok": False, "errors": [], "runBinding": {"uuid": "u"}}
    assert "finalizers" not in stored["metadata"]
    assert cluster.request("GET", LEASES.path(ns, V3_LEASE))["spec"]["holderIdentity"] == "kuberhealthy-v3-abc12"
    cluster.request("PATCH", hc(ns, "rbac-hc"), {"metadata": {"finalizers": None}}, content_type=MERGE_PATCH)
    helm.run("uninstall", "kuberhealthy", "--no-hooks", "--namespace", ns, kubeconfig=cluster.kubeconfig,
             check=False)
