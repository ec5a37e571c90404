"""Leader takeover times with two real daemon processes. Prints figures; asserts nothing.

For kill -9 and for SIGTERM of the leader: seconds from the signal until the standby holds the Lease,
and until the standby's first checker pod exists. Election settings are the defaults (leaseDuration
15s, renewDeadline 10s, retryPeriod 2s) unless --fast. Expected: kill -9 ≈ leaseDuration + up to one
retryPeriod; SIGTERM ≈ up to one retryPeriod (the leader releases the Lease).

Usage: python -m bench.takeover_bench [--fast]
"""
from __future__ import annotations

import argparse
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from testbed.cluster.apiserver import TestCluster, cleanup, start_cluster
from testbed.cluster.builders import CHECK_LABEL, khc, khcheck, khs, lease_path, pods_path
from testbed.cluster.crds import install_crds
from testbed.cluster.objects import create_namespace, get_or_none
from testbed.daemons.process import DaemonProcess
from testbed.sim.kubelet import SimKubelet


def get(cluster: TestCluster, path: str) -> dict[str, Any]:
    return dict(get_or_none(cluster, path) or {})


def poll(fn: Any, limit: float = 120) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if fn():
            return time.monotonic()
        time.sleep(0.02)
    raise TimeoutError("condition not reached")


def scenario(cluster: TestCluster, how: str, election: dict[str, str], work: Path) -> tuple[float, float]:
    ns = create_namespace(cluster, "takeover")
    cluster.request("POST", khc(ns), khcheck("pulse", interval="1s"))
    kubelet = SimKubelet(str(cluster.kubeconfig), nodes=2, namespace=ns).start()
    b = DaemonProcess(cluster, work, f"{ns}-b", ns, {"targetNamespace": ns, "leaderElection": election})
    a = DaemonProcess(cluster, work, f"{ns}-a", ns, {"targetNamespace": ns, "leaderElection": election})
    for p in (a, b):
        p.set_reporting_url(b.url + "/externalCheckStatus")
    lease = lease_path(ns, election["leaseName"])
    try:
        a.start()
        poll(lambda: get(cluster, lease).get("spec", {}).get("holderIdentity") == a.name)
        b.start()
        state = khs(ns, "pulse")
        poll(lambda: get(cluster, state).get("spec", {}).get("AuthoritativePod") == a.name)
        time.sleep(2)  # b's caches are synced and it is contending
        t0 = time.monotonic()
        if how == "kill -9":
            a.kill9()
        else:
            a.signal(signal.SIGTERM)
        t_lease = poll(lambda: get(cluster, lease).get("spec", {}).get("holderIdentity") == b.name)
        pods = pods_path(ns) + f"?labelSelector={CHECK_LABEL}%3Dpulse"
        seen = {p["metadata"]["name"] for p in get(cluster, pods).get("items", [])}
        t_pod = poll(lambda: any(p["metadata"]["name"] not in seen for p in get(cluster, pods).get("items", [])))
        return t_lease - t0, t_pod - t0
    finally:
        a.stop()
        b.stop()
        kubelet.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fast", action="store_true", help="leaseDuration 6s, renewDeadline 4s, retryPeriod 1s")
    args = ap.parse_args()
    election = ({"leaseName": "kh", "leaseDuration": "6s", "renewDeadline": "4s", "retryPeriod": "1s"} if args.fast
                else {"leaseName": "kh", "leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "2s"})
    cluster = start_cluster()
    try:
        install_crds(cluster)
        work = Path(tempfile.mkdtemp(prefix="kh-takeover-"))
        print(f"election: {election}")
        for how in ("SIGTERM", "kill -9"):
            lease_s, pod_s = scenario(cluster, how, election, work)
            print(f"{how:<8} leader → standby holds the Lease after {lease_s:.2f}s, "
                  f"runs its first check pod after {pod_s:.2f}s")
    finally:
        cleanup(cluster)


if __name__ == "__main__":
    main()
