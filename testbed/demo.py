"""`make demo`: a local API server, sample checks, the simulated kubelet and the daemon, with a live summary.

Starts everything on loopback, prints the status page URL, refreshes a one-screen summary of the
checks every few seconds, and stops everything on Ctrl-C (or after --seconds).
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.harness.cluster import cleanup, start_cluster
from tests.harness.crds import install_crds
from tests.harness.daemon import DaemonProcess
from tests.sim.kubelet import SimKubelet

NS = "kuberhealthy"
CHECKS = [
    ("dns-resolution", "kh-sim/ok", "15s", {}),
    ("http-frontend", "kh-sim/slow", "20s", {"SIM_DELAY": "1.5"}),
    ("pod-restarts", "kh-sim/fail", "30s",
     {"SIM_ERRORS": "pod web-7f9c restarted 12 times|pod db-0 in CrashLoopBackOff"}),
    ("storage-check", "kh-sim/silent", "45s", {}),
    ("image-pull", "registry.invalid/missing:1.0", "60s", {}),
]


def khcheck(name: str, image: str, interval: str, env: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "comcast.github.io/v1", "kind": "KuberhealthyCheck", "metadata": {"name": name},
            "spec": {"runInterval": interval, "timeout": "8s", "podSpec": {"containers": [
                {"name": "main", "image": image, "env": [{"name": k, "value": v} for k, v in env.items()]}]}}}


def summary(url: str) -> str:
    try:
        with urllib.request.urlopen(url + "/", timeout=5) as resp:
            page = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as e:
        return f"  (status page not answering yet: {e})"
    lines = [f"  overall OK={page['OK']}  master={page['CurrentMaster'] or '-'}  checks={len(page['CheckDetails'])}"]
    for key, d in sorted(page["CheckDetails"].items()):
        errs = "; ".join(d.get("Errors") or [])
        lines.append(f"  {'OK  ' if d['OK'] else 'FAIL'} {key:<34} last={d.get('LastRun', '-'):<21} "
                     f"took={d.get('RunDuration') or '-':<12} {errs[:70]}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=float, default=0, help="stop after this many seconds (0 = until Ctrl-C)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kh-demo-"))
    print("Starting etcd + kube-apiserver on loopback ...", flush=True)
    cluster = start_cluster(workdir=work / "cluster")
    kubelet = None
    daemon = None
    try:
        install_crds(cluster)
        cluster.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": NS}})
        for name, image, interval, env in CHECKS:
            cluster.request("POST", f"/apis/comcast.github.io/v1/namespaces/{NS}/khchecks",
                            khcheck(name, image, interval, env))
        kubelet = SimKubelet(str(cluster.kubeconfig), nodes=3)
        kubelet.start()
        daemon = DaemonProcess(cluster, work, "kuberhealthy-demo-0", NS,
                               {"enableForceMaster": True, "logLevel": "info"})
        daemon.set_reporting_url(daemon.url + "/externalCheckStatus")
        daemon.start()
        print(f"\nAPI server:   {cluster.server}   (KUBECONFIG={cluster.kubeconfig})")
        print(f"Status page:  {daemon.url}/")
        print(f"Metrics:      {daemon.url}/metrics")
        print(f"Daemon log:   {daemon.log_path}")
        print("Ctrl-C stops everything.\n", flush=True)
        stop_at = time.monotonic() + args.seconds if args.seconds else None
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        while stop_at is None or time.monotonic() < stop_at:
            print(time.strftime("%H:%M:%S"), "\n" + summary(daemon.url), flush=True)
            time.sleep(5)
    except KeyboardInterrupt:
        print("\nStopping ...", flush=True)
    finally:
        if daemon is not None:
            daemon.stop()
        if kubelet is not None:
            kubelet.stop()
        cleanup(cluster)
    print("Stopped.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
