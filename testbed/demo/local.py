"""`make demo`: a local API server, sample checks, the simulated kubelet and the daemon, with a live summary.

Starts everything on loopback, prints the dashboard's URL (the daemon runs with dashboardAtRoot and
exposeLogs on), refreshes a one-screen summary of the checks every few seconds, and stops everything
on Ctrl-C (or after --seconds). The sample checks put the dashboard in every state: OK, failing (an
error report, a timeout, an image that cannot be pulled), never run (a first run still in flight),
running (a slow check), and a khjob. `Demo` is the same set-up for other tools (testbed/demo/screenshots.py).
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

from testbed.cluster.apiserver import TestCluster, cleanup, start_cluster
from testbed.cluster.builders import khc, khcheck, khj, khjob
from testbed.cluster.crds import install_crds
from testbed.cluster.objects import create_namespace
from testbed.daemons.process import DaemonProcess
from testbed.sim.kubelet import SimKubelet

NS = "kuberhealthy"
# name, image, runInterval, timeout, env
CHECKS = [
    ("dns-resolution", "kh-sim/ok", "15s", "8s", {}),
    ("http-frontend", "kh-sim/slow", "20s", "8s", {"SIM_DELAY": "1.5"}),
    ("pod-restarts", "kh-sim/fail", "30s", "8s",
     {"SIM_ERRORS": "pod web-7f9c restarted 12 times|pod db-0 in CrashLoopBackOff"}),
    ("storage-check", "kh-sim/silent", "45s", "8s", {}),
    ("image-pull", "registry.invalid/missing:1.0", "60s", "8s", {}),
    ("backup-verify", "kh-sim/slow", "30s", "25s", {"SIM_DELAY": "12"}),  # running much of the time
    ("cert-expiry", "kh-sim/hang-silent", "2h", "1h", {}),  # its first run is in flight for an hour: never run
]
JOBS = [("db-migration-check", "kh-sim/ok")]  # khjobs run once
SETTINGS = {"enableForceMaster": True, "logLevel": "info", "dashboardAtRoot": True, "exposeLogs": True}


class Demo:
    """The demo's parts: start() brings up the API server, the samples, the kubelet and the daemon
    (serving), stop() takes them down again. Single use."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.cluster: TestCluster | None = None
        self.kubelet: SimKubelet | None = None
        self.daemon: DaemonProcess | None = None

    @property
    def url(self) -> str:
        assert self.daemon is not None, "not started"
        return self.daemon.url

    def start(self) -> Demo:
        self.cluster = cluster = start_cluster(workdir=self.work / "cluster")
        install_crds(cluster)
        create_namespace(cluster, name=NS)
        for name, image, interval, timeout, env in CHECKS:
            cluster.request("POST", khc(NS), khcheck(name, image, interval, timeout=timeout, env=env))
        for name, image in JOBS:
            cluster.request("POST", khj(NS), khjob(name, image))
        self.kubelet = SimKubelet(str(cluster.kubeconfig), nodes=3)
        self.kubelet.start()
        self.daemon = DaemonProcess(cluster, self.work, "kuberhealthy-demo-0", NS, dict(SETTINGS)).start()
        self.daemon.wait_serving()
        return self

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()
        if self.kubelet is not None:
            self.kubelet.stop()
        if self.cluster is not None:
            cleanup(self.cluster)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def summary(url: str) -> str:
    """One line per check and job, from the JSON API (the state the dashboard shows)."""
    try:
        checks = _get(url + "/api/checks")["checks"]
        master = _get(url + "/?format=json")["CurrentMaster"]
    except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
        return f"  (not answering yet: {e})"
    failing = sum(1 for c in checks if c["state"] == "failing")
    lines = [f"  dashboard {url}/   {failing} of {len(checks)} failing   master={master or '-'}"]
    for c in checks:
        state = {"ok": "OK  ", "failing": "FAIL", "never-run": "NEW "}.get(c["state"], c["state"])
        running = f"running ({c['currentRun']['phase']})" if c["currentRun"] else ""
        took = f"{c['runDuration']:.2f}s" if c["runDuration"] is not None else "-"
        name = f"{c['namespace']}/{c['name']}" + (" (job)" if c["kind"] == "job" else "")
        lines.append(f"  {state} {name:<38} last={c['lastRun'] or '-':<21} took={took:<8} {running:<18} "
                     f"{'; '.join(c['errors'])[:60]}")
    return "\n".join(lines)


def follow(url: str, seconds: float) -> None:
    """The summary every 5 s until Ctrl-C, SIGTERM (both raise KeyboardInterrupt) or `seconds` (0: none)."""
    stop_at = time.monotonic() + seconds if seconds else None
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    while stop_at is None or time.monotonic() < stop_at:
        print(time.strftime("%H:%M:%S"), "\n" + summary(url), flush=True)
        time.sleep(5)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.demo", description=__doc__)
    p.add_argument("--seconds", type=float, default=0, help="stop after this many seconds (0 = until Ctrl-C)")
    args = p.parse_args()
    demo = Demo(Path(tempfile.mkdtemp(prefix="kh-demo-")))
    print("Starting etcd + kube-apiserver on loopback ...", flush=True)
    try:
        demo.start()
        assert demo.cluster is not None and demo.daemon is not None
        url = demo.url
        print(f"\nDashboard:    {url}/   (open it in a browser; also {url}/dashboard)")
        print(f"Status JSON:  {url}/?format=json   (curl {url}/ gets the JSON too)")
        print(f"Checks API:   {url}/api/checks   OpenAPI: {url}/openapi.json")
        print(f"Metrics:      {url}/metrics")
        print(f"API server:   {demo.cluster.server}   (KUBECONFIG={demo.cluster.kubeconfig})")
        print(f"Daemon log:   {demo.daemon.log_path}")
        print("Ctrl-C stops everything.\n", flush=True)
        follow(url, args.seconds)
    except KeyboardInterrupt:
        print("\nStopping ...", flush=True)
    finally:
        demo.stop()
    print("Stopped.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
