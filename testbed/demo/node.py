"""`make demo-node`: the demo on the real single node — the image built here, the chart installed with
helm, checkers in real containers — with the same live summary as `make demo`.

Root only (the real node: hack/node/node.sh, testbed/README.md "A real node"). Starts the node (or uses
the one already running), builds and loads the images (cached when unchanged), installs the chart (2
replicas, the bundled upstream checks off: their images cannot be pulled here), creates every example
in examples/checks plus a failing and a never-ending shell checker, port-forwards the Service to
loopback, prints the dashboard's URL and refreshes the summary until Ctrl-C (or --seconds). Then it
uninstalls the release, deletes its namespaces and stops the node (unless --keep-node, or the node
was running before).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from testbed.demo.local import follow
from testbed.node.e2e import E2E, chart_values, example_objects, helm_binary, import_images, kubectl_from_env
from testbed.node.images import build_all, example_names
from testbed.node.realnode import NODE_SH, RealNode, RealNodeError
from testbed.tools.helm import Helm

SHELL = "localhost/kh-e2e/shell-check:e2e"
FAIL_REASON = "the demo's check fails on purpose"


def _node() -> tuple[RealNode, bool]:
    """The real node, and whether this demo started it (and so stops it)."""
    if RealNode.unavailable():
        subprocess.run(["bash", str(NODE_SH), "build"], check=False, timeout=1800)
    reason = RealNode.unavailable()
    if reason:
        raise RealNodeError(reason)
    try:
        running = RealNode.attach()
        running.status()  # raises unless it is up and Ready
        return running, False
    except (RealNodeError, OSError):
        return RealNode.start(), True


def _checks(kh: E2E) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = []
    for name in example_names():
        objs += example_objects(kh, name)
    objs += [
        kh.khcheck("shell-ok", kh.pod_spec(SHELL, {"MODE": "ok"}), run_interval="30s"),
        kh.khcheck("shell-fail", kh.pod_spec(SHELL, {"MODE": "fail", "FAIL_REASON": FAIL_REASON}), run_interval="45s"),
        kh.khcheck("never-exits", kh.pod_spec(SHELL, {"MODE": "sleep"}), run_interval="2m", timeout="40s"),
    ]
    return objs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=0, help="stop after this many seconds (0 = until Ctrl-C)")
    p.add_argument("--keep-node", action="store_true", help="leave the node (and the release) running")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("make demo-node needs root (the real node runs containerd and a kubelet); make demo needs none")
        return 2
    work = Path(tempfile.mkdtemp(prefix="kh-demo-node-"))
    print("Starting the real node (containerd, kubelet, kube-proxy) ...", flush=True)
    try:
        node, started = _node()
    except (RealNodeError, subprocess.TimeoutExpired) as e:
        print(f"The real node cannot start here: {e}")
        return 2
    binary = helm_binary()
    if binary is None:
        print("no helm binary (bash hack/tools.sh could not fetch it)")
        return 2
    kh = E2E(kubectl_bin=kubectl_from_env(node.env), kubeconfig=Path(node.kubeconfig), helm=Helm(binary, work))
    try:
        print(f"Building and loading the images (log: {work / 'build.log'}) ...", flush=True)
        built = build_all(work, work / "build.log")
        import_images(node, sorted(set(built.tars.values())))
        kh.values = chart_values(built.image("daemon"))
        if kh.installed():
            kh.uninstall()
        kh.create_namespaces()
        print("helm install ...", flush=True)
        kh.install()
        kh.find_cluster_ip()
        kh.await_ready()
        kh.apply(*_checks(kh))
        with kh.port_forward() as url:
            print(f"\nDashboard:    {url}/dashboard   (kubectl port-forward svc/kuberhealthy -n {kh.namespace})")
            print(f"Status JSON:  {url}/   Checks API: {url}/api/checks   Metrics: {url}/metrics")
            print(f"Pods:         KUBECONFIG={node.kubeconfig} kubectl get pods -n {kh.checks_namespace} -w")
            print("Ctrl-C stops everything.\n", flush=True)
            follow(url, args.seconds)
    except KeyboardInterrupt:
        print("\nStopping ...", flush=True)
    finally:
        if not args.keep_node:
            kh.uninstall()
            for ns in (kh.checks_namespace, kh.namespace):
                kh.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false", check=False)
            if started:
                node.stop()
    print("Stopped." if not args.keep_node else f"Left running: KUBECONFIG={node.kubeconfig}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
