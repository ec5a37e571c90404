"""Memory per kept checker pod in the pod cache: the whole object versus what the transform keeps.

A real checker pod is built with the product's own build_pod() from a khcheck like the chart's
bundled ones, run to Succeeded by the simulated kubelet on the real test API server, and read back
(managedFields included, as a watch delivers it). Memory is what tracemalloc counts for decoding the
JSON into Python objects, so it is the cache's real cost, not the wire size. Prints figures.

Usage: python -m bench.cache_bench [--pods N]
"""
from __future__ import annotations

import argparse
import json
import time
import tracemalloc
import uuid
from typing import Any

from kuberhealthy.kube.reflector import drop_managed_fields
from kuberhealthy.records.checkpod import build_pod, slim_pod
from kuberhealthy.records.checkspec import CheckSpec
from testbed.cluster.apiserver import cleanup, start_cluster
from testbed.cluster.builders import pods_path
from testbed.cluster.crds import install_crds
from testbed.cluster.objects import create_namespace
from testbed.sim.kubelet import SimKubelet

POD_SPEC: dict[str, Any] = {
    "serviceAccountName": "deployment-sa",
    "containers": [{
        "name": "main", "image": "kh-sim/ok", "imagePullPolicy": "IfNotPresent",
        "env": [{"name": "CHECK_DEPLOYMENT_REPLICAS", "value": "4"},
                {"name": "CHECK_DEPLOYMENT_ROLLING_UPDATE", "value": "true"},
                {"name": "CHECK_IMAGE", "value": "nginxinc/nginx-unprivileged:1.17.8"}],
        "resources": {"requests": {"cpu": "25m", "memory": "15Mi"}, "limits": {"cpu": "40m", "memory": "30Mi"}},
        "securityContext": {"runAsUser": 999, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True},
    }],
    "tolerations": [{"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"}],
}


def measure(make: Any, n: int) -> int:
    """Bytes held by n objects made by make()."""
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    kept = [make() for _ in range(n)]
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(s.size_diff for s in after.compare_to(before, "filename"))
    del kept
    return int(size / n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=200, help="objects decoded per measurement")
    args = ap.parse_args()
    cluster = start_cluster()
    try:
        install_crds(cluster)
        ns = create_namespace(cluster, "bench")
        check = CheckSpec.of({"metadata": {"namespace": ns, "name": "deployment"},
                              "spec": {"runInterval": "10m", "timeout": "15m", "podSpec": POD_SPEC,
                                       "extraLabels": {"team": "sre"}}})
        with SimKubelet(str(cluster.kubeconfig), nodes=1, namespace=ns):
            body = build_pod(check, str(uuid.uuid4()), time.time(), "http://127.0.0.1:9/externalCheckStatus")
            cluster.request("POST", pods_path(ns), body)
            name = body["metadata"]["name"]
            deadline = time.monotonic() + 30
            pod: dict[str, Any] = {}
            while time.monotonic() < deadline:
                pod = cluster.request("GET", pods_path(ns, name))
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    break
                time.sleep(0.2)
        raw = json.dumps(pod)
        full = measure(lambda: json.loads(raw), args.pods)
        no_mf = measure(lambda: drop_managed_fields(json.loads(raw)), args.pods)
        slim_raw = json.dumps(slim_pod(drop_managed_fields(json.loads(raw))))
        # What the cache keeps: the transform's output (the decoded whole object is freed at once).
        slim = measure(lambda: slim_pod(drop_managed_fields(json.loads(raw))), args.pods)
        print(f"checker pod ({(pod.get('status') or {}).get('phase')}): {len(raw)} bytes of JSON, "
              f"{len(slim_raw)} kept by the transform")
        print(f"  memory per cached pod: whole {full / 1024:.1f} KiB, without managedFields {no_mf / 1024:.1f} KiB, "
              f"slim {slim / 1024:.1f} KiB ({full / max(1, slim):.1f}x less)")
        kept = 1000 * 9  # 1,000 checks x (1 live + 4 Succeeded + 4 Failed kept by the reaper)
        print(f"  1,000 checks x 9 kept pods: whole {full * kept / 2**20:.0f} MiB, slim {slim * kept / 2**20:.0f} MiB")
    finally:
        cleanup(cluster)


if __name__ == "__main__":
    main()
