"""`helm uninstall` on the real node (last: it ends the release the other modules share). The daemon's
SIGTERM path removes its checker pods, also those in other namespaces, which carry no ownerReference
(garbage collection cannot remove them), although Helm deletes the chart's RBAC and ServiceAccount in
the same moment, before the pods get their SIGTERM: the race is real on every uninstall. What may
remain is what v2 leaves too: the khstates and the Lease (and the user's own khchecks); README.md says
so."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from testbed.node.e2e import E2E, poll
from testbed.paths import REPO

SHELL = "localhost/kh-e2e/shell-check:e2e"


def _running(kh: E2E, check: str, namespace: str) -> dict[str, Any] | None:
    pods = [p for p in kh.checker_pods(check, namespace) if p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")]
    return pods[0] if pods else None


def _removed(kh: E2E, pod: dict[str, Any]) -> bool:
    now = kh.get("pod", pod["metadata"]["name"], pod["metadata"]["namespace"])
    return now is None or now["metadata"]["uid"] != pod["metadata"]["uid"] or bool(
        now["metadata"].get("deletionTimestamp"))


def _follow_log(kh: E2E, pod: str, into: Path) -> subprocess.Popen[bytes]:
    """`kubectl logs -f` of a daemon pod into a file: the log of its shutdown outlives the pod."""
    with open(into / pod, "wb") as out:
        return subprocess.Popen([kh.kubectl_bin, "--kubeconfig", str(kh.kubeconfig), "logs", "-f", "-n", kh.namespace,
                                 pod], stdout=out, stderr=subprocess.STDOUT)


def test_helm_uninstall_removes_the_checker_pods_in_every_namespace_despite_rbac_going_first(
        kh: E2E, tmp_path: Path) -> None:
    sleeping = kh.pod_spec(SHELL, {"MODE": "sleep"})
    kh.apply(kh.khcheck("uninstall-other-ns", sleeping, run_interval="10m", timeout="5m"),
             kh.khcheck("uninstall-own-ns", sleeping, namespace=kh.namespace, run_interval="10m", timeout="5m"))
    other = poll(lambda: _running(kh, "uninstall-other-ns", kh.checks_namespace), 120, "the other-namespace pod")
    own = poll(lambda: _running(kh, "uninstall-own-ns", kh.namespace), 120, "the release-namespace pod")
    assert not other["metadata"].get("ownerReferences")  # only the daemon can remove this one
    assert own["metadata"].get("ownerReferences")

    followers = [_follow_log(kh, p["metadata"]["name"], tmp_path) for p in kh.daemon_pods()]
    try:
        done = kh.uninstall()
        assert done.returncode == 0, done.stderr

        try:
            poll(lambda: _removed(kh, other), 120, "the daemon to remove its checker pod in the other namespace")
        except AssertionError as e:
            logs = "\n".join(f"--- {f.name}\n" + "\n".join(f.read_text().splitlines()[-25:])
                             for f in sorted(tmp_path.iterdir()))
            raise AssertionError(f"{e}\nthe daemons' last log lines:\n{logs}") from None
    finally:
        for f in followers:
            f.terminate()
            f.wait(10)
    poll(lambda: _removed(kh, own), 120, "the checker pod in the release namespace to go")
    poll(lambda: not kh.daemon_pods(live_only=False), 180, "the daemon pods to be gone")
    gone = (("deployment", "kuberhealthy", kh.namespace), ("service", "kuberhealthy", kh.namespace),
            ("configmap", "kuberhealthy", kh.namespace), ("clusterrole", f"kuberhealthy-{kh.namespace}", None))
    for kind, name, ns in gone:
        assert kh.get(kind, name, ns) is None, (kind, name)

    # What stays, as with v2: the khstates and the Lease (its release may lose the race with the RBAC).
    assert kh.khstate("uninstall-other-ns") is not None
    readme = (REPO / "README.md").read_text()
    assert "helm uninstall" in readme and "Lease" in readme
    for name in ("uninstall-other-ns",):
        kh.delete("khcheck", name, kh.checks_namespace)
