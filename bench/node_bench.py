"""Figures on the real node beside the simulated test bed. Prints a table; asserts nothing. Root only.

Real node (hack/node/node.sh via testbed.node.realnode.RealNode, the images of testbed.node.images, the chart
installed as the e2e session does it: testbed.node.e2e.chart_values):
  helm install → first OK   from the `helm install` call until the khstate of a good check (applied
                            right after `helm install` returns: its podSpec needs the Service's ClusterIP
                            for hostAliases) records an OK run.
  pod created → Running     per checker pod: its ADDED watch event to the first event with phase
                            Running, both stamped locally as they arrive.
  run overhead              the khstate's RunDuration minus the checker's own work (check.sh MODE=timed
                            logs its start and the moment its report returned), over --runs runs of a
                            check every 10 s; the pod-start share (pod ADDED → check.sh's first line)
                            is shown apart. A checker this short often goes from Pending straight to
                            Succeeded (the kubelet's 1 s runtime poll): those pods show no Running.
  API requests per run      audit-log entries (not watches) with the daemon's User-Agent, per run;
                            both replicas (reports reach either through the Service) and the leader's
                            own (by its pod IP); Lease requests are time-based and counted per second.
  leader failover           the Lease holder's pod deleted (the kubelet's SIGTERM) 3 times: seconds
                            until another replica holds the Lease and until its first checker pod of a
                            check every 1 s (as bench.takeover_bench's), and which replica won.
Simulated (--no-sim skips it): bench.run_bench and bench.takeover_bench, run as they are.

Usage: python -m bench.node_bench [--runs N] [--failovers N] [--no-sim] [--json FILE]
(exit 2: the real node cannot start; the node is always stopped at the end)
"""
from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import requests
import urllib3

from kuberhealthy.base.durations import parse_duration
from kuberhealthy.base.times import parse_time
from kuberhealthy.kube.client import USER_AGENT
from kuberhealthy.records.checkpod import CHECK_NAME_LABEL, RUN_ID_LABEL
from testbed.node.e2e import (
    E2E,
    FINISHED,
    chart_values,
    daemon_logs,
    helm_binary,
    import_images,
    kubectl_from_env,
    poll,
)
from testbed.node.images import PREFIX, TAG, build_all
from testbed.node.realnode import RealNode, RealNodeError
from testbed.stats import percentile
from testbed.tools.helm import Helm

SHELL = f"{PREFIX}/shell-check:{TAG}"
TIMED, PULSE = "bench-timed", "bench-pulse"
NS = "kh-bench"
UA = USER_AGENT.split("/")[0] + "/"
Event = tuple[float, str, dict[str, Any]]  # (local unix time it arrived, ADDED/MODIFIED/DELETED, object)


class Watch(threading.Thread):
    """One API watch, each event stamped with the local time it arrived; reconnects from the last
    resourceVersion. `events` only grows; `changed` is notified on each event."""

    def __init__(self, node: RealNode, path: str, **query: str) -> None:
        super().__init__(name=f"watch {path}", daemon=True)
        self.url, self.query = node.api_url + path, query
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {node.env['ADMIN_TOKEN']}"
        self.session.trust_env = False  # no proxy, and no REQUESTS_CA_BUNDLE overriding `verify`
        self.session.verify = False  # the API server's self-signed certificate, on the host's own bridge
        self.events: list[Event] = []
        self.changed = threading.Condition()
        self.done = threading.Event()

    def run(self) -> None:
        version = ""
        while not self.done.is_set():
            params = dict(self.query, watch="1", **({"resourceVersion": version} if version else {}))
            try:
                with self.session.get(self.url, params=params, stream=True, timeout=(10, 90)) as resp:
                    resp.raise_for_status()
                    for line in resp.iter_lines():
                        if self.done.is_set():
                            return
                        if not line:
                            continue
                        at, event = time.time(), json.loads(line)
                        if event["type"] == "ERROR":  # 410 Gone: start over (repeated ADDEDs are ignored)
                            version = ""
                            break
                        version = event["object"]["metadata"]["resourceVersion"]
                        with self.changed:
                            self.events.append((at, event["type"], event["object"]))
                            self.changed.notify_all()
            except (requests.RequestException, ValueError, KeyError):
                self.done.wait(0.5)

    def wait(self, timeout: float) -> None:
        with self.changed:
            self.changed.wait(timeout)


def pod_times(pods: Watch) -> dict[str, dict[str, Any]]:
    """Per pod name: added, running (first phase Running) and past (first phase past Pending: a checker
    that ends within the kubelet's status sync goes from Pending straight to Succeeded), as local
    arrival times; labels, owner (ownerReference name)."""
    out: dict[str, dict[str, Any]] = {}
    for at, kind, pod in list(pods.events):
        meta = pod["metadata"]
        rec = out.setdefault(meta["name"], {"added": None, "running": None, "past": None, "deleted": None,
                                            "labels": meta.get("labels") or {},
                                            "owner": ((meta.get("ownerReferences") or [{}])[0]).get("name")})
        phase = (pod.get("status") or {}).get("phase")
        if kind == "ADDED" and rec["added"] is None:
            rec["added"] = at
        if rec["running"] is None and phase == "Running":
            rec["running"] = at
        if rec["past"] is None and phase in ("Running", "Succeeded", "Failed"):
            rec["past"] = at
        if kind == "DELETED":
            rec["deleted"] = at
    return out


def finished_runs(states: Watch, name: str) -> list[tuple[float, dict[str, Any]]]:
    """Each recorded run of khstate `name`, once: (arrival, spec), the spec as its run's record left it."""
    out, seen = [], set()
    for at, _, obj in list(states.events):
        spec = obj.get("spec") or {}
        uuid = (obj["metadata"].get("annotations") or {}).get(FINISHED)
        history = spec.get("history") or []
        if obj["metadata"]["name"] == name and uuid and uuid == spec.get("uuid") and uuid not in seen \
                and history and history[0].get("uuid") == uuid:
            seen.add(uuid)
            out.append((at, spec))
    return out


def checker_times(e2e: E2E, pod: str) -> tuple[float, float]:
    """check.sh's start and the return of its report (unix seconds, the host's clock), as MODE=timed
    logged them; NaN when the log lacks them."""
    log = e2e.logs(pod, e2e.namespace, "-c", "main")
    start, end = re.search(r"timed start=([\d.]+)", log), re.search(r"timed end=([\d.]+)", log)
    return (float(start.group(1)) if start else math.nan), (float(end.group(1)) if end else math.nan)


def audit_counts(node: RealNode, since: float, until: float, leader_ip: str) -> dict[str, Any]:
    """The daemon's non-watch requests in (since, until]: all, the leader's, Lease ones, by verb."""
    files = sorted(Path(node.env["AUDIT_LOG"]).parent.glob("audit*.log"))
    events = []
    for f in files:
        for line in f.read_text(errors="replace").splitlines():
            if not line.strip():
                continue
            e = json.loads(line)
            at = parse_time(e.get("requestReceivedTimestamp")) or 0.0
            if since < at <= until and str(e.get("userAgent", "")).startswith(UA) and e.get("verb") != "watch" \
                    and e.get("stage") == "ResponseComplete":
                events.append(e)
    lease = [e for e in events if e["objectRef"].get("resource") == "leases"]
    rest = [e for e in events if e["objectRef"].get("resource") != "leases"]
    verbs: dict[str, int] = {}
    lease_verbs: dict[str, int] = {}
    for e in rest:
        key = f"{e['verb']} {e['objectRef'].get('resource')}"
        verbs[key] = verbs.get(key, 0) + 1
    for e in lease:
        key = f"{e['verb']} ({'leader' if leader_ip in (e.get('sourceIPs') or []) else 'standby'})"
        lease_verbs[key] = lease_verbs.get(key, 0) + 1
    return {"all": len(rest), "leader": sum(1 for e in rest if leader_ip in (e.get("sourceIPs") or [])),
            "lease": len(lease), "verbs": verbs, "lease_verbs": lease_verbs}


def install(node: RealNode, work: Path, pods: Watch, states: Watch) -> tuple[E2E, dict[str, float]]:
    """Images built and loaded, the chart installed; seconds to Ready pods and to the first OK."""
    built = build_all(work, work / "build.log")
    tars = sorted(set(built.tars.values()))
    import_images(node, tars)
    for tar in tars:
        tar.unlink()
    binary = helm_binary()
    if binary is None:
        raise RuntimeError("no helm binary (bash hack/tools.sh could not fetch it)")
    e2e = E2E(kubectl_bin=kubectl_from_env(node.env), kubeconfig=node.kubeconfig, helm=Helm(binary, work / "helm"),
              namespace=NS, checks_namespace=f"{NS}-checks", values=chart_values(built.image("daemon")))
    if e2e.installed():
        e2e.uninstall()
    e2e.create_namespaces()
    pods.start()
    states.start()
    t0 = time.time()
    e2e.install()
    returned = time.time() - t0
    e2e.find_cluster_ip()
    e2e.apply(e2e.khcheck(TIMED, e2e.pod_spec(SHELL, {"MODE": "timed"}), namespace=NS, run_interval="10s"))
    e2e.await_ready(2)
    ready = time.time() - t0
    first = poll(lambda: next((at for at, spec in finished_runs(states, TIMED) if spec.get("OK") is True), None),
                 300, "the first OK run", interval=0.2)
    return e2e, {"returned": returned, "ready": ready, "first_ok": first - t0}


def measure_runs(node: RealNode, e2e: E2E, pods: Watch, states: Watch, n: int) -> dict[str, Any]:
    """N runs after the first OK one: overhead, checker work, pod start, API requests."""
    leader = poll(e2e.leader, 60, "a leader")
    leader_ip = next(p["status"]["podIP"] for p in e2e.daemon_pods() if p["metadata"]["name"] == leader)
    since = finished_runs(states, TIMED)[0][0]
    done: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + n * 10 * 3 + 120
    while len(done) < n and time.monotonic() < deadline:
        states.wait(1.0)
        times = pod_times(pods)
        for at, spec in finished_runs(states, TIMED)[1:]:
            uuid = spec["uuid"]
            pod = next((name for name, r in times.items() if r["labels"].get(RUN_ID_LABEL) == uuid), None)
            if uuid in done or pod is None or len(done) >= n:
                continue
            began, ended = checker_times(e2e, pod)  # now: the reaper keeps only 4 finished pods
            added = times[pod]["added"] or math.nan
            done[uuid] = {"at": at, "duration": parse_duration(spec.get("RunDuration") or "0s"),
                          "work": ended - began, "start": began - added, "pod": pod,
                          "ok": 1.0 if spec.get("OK") else 0.0}
    runs = list(done.values())
    until = max((r["at"] for r in runs), default=since)
    time.sleep(1.0)  # the audit log's last lines
    audit = audit_counts(node, since, until, leader_ip)
    return {"runs": runs, "audit": audit, "seconds": until - since, "leader": leader}


def failover(e2e: E2E, pods: Watch, leases: Watch) -> dict[str, Any]:
    """Delete the Lease holder's pod; seconds until another replica holds the Lease and until the first
    checker pod (of the 1 s check) that replica created."""
    e2e.await_ready(2)
    old = poll(e2e.leader, 60, "a leader")
    standby = next(p["metadata"]["name"] for p in e2e.daemon_pods() if p["metadata"]["name"] != old)
    since = time.time()
    poll(lambda: any(r["owner"] == old and r["past"] and (r["added"] or 0.0) > since for r in pod_times(pods).values()
                     if r["labels"].get(CHECK_NAME_LABEL) == PULSE), 60, "a pulse run under this leader", interval=0.2)
    t0 = time.time()
    e2e.delete("pod", old, e2e.namespace)
    holder: str | None = None
    t_lease = t_pod = None
    end = time.monotonic() + 120
    while time.monotonic() < end and t_pod is None:
        leases.wait(0.5)
        if holder is None:
            for at, _, lease in list(leases.events):
                h = (lease.get("spec") or {}).get("holderIdentity") or ""
                if at > t0 and h not in ("", old):
                    holder, t_lease = h, at - t0
                    break
        if holder is not None:
            firsts = [r["added"] for r in pod_times(pods).values() if r["owner"] == holder and r["added"]
                      and r["added"] > t0 and r["labels"].get(CHECK_NAME_LABEL) == PULSE]
            t_pod = min(firsts) - t0 if firsts else None
    won = "standby" if holder == standby else ("replacement" if holder else "none within 120 s")
    return {"lease": t_lease, "pod": t_pod, "won": won, "t0": t0, "old": old}


def old_pod_gone(f: dict[str, Any], times: dict[str, dict[str, Any]]) -> float | None:
    """Seconds from the failover's delete until the old leader's last checker pod was gone (DELETED)."""
    olds = [r for r in times.values() if r["owner"] == f["old"] and r["labels"].get(CHECK_NAME_LABEL) == PULSE
            and r["added"] and r["added"] < f["t0"]]
    last = max(olds, key=lambda r: float(r["added"]), default=None)
    return float(last["deleted"]) - f["t0"] if last and last["deleted"] else None


def simulated(runs: int) -> dict[str, Any]:
    """bench.run_bench and bench.takeover_bench as they are, their figures parsed from their output."""
    out: dict[str, Any] = {}
    for module, args in (("bench.run_bench", ["--runs", str(runs)]), ("bench.takeover_bench", [])):
        proc = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=1200,
                              check=False)
        out[module] = proc.stdout
        if proc.returncode != 0:
            print(f"{module} exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-2000:]}", file=sys.stderr)
    text = out["bench.run_bench"] + out["bench.takeover_bench"]

    def num(pattern: str, group: int = 1) -> float | None:
        m = re.search(pattern, text, re.M)
        return float(m.group(group)) if m else None

    phase = re.search(r"median time per phase: .*\bstart (\d+)ms", text)
    return {"overhead": num(r"run overhead:\s+median ([\d.]+)s"), "overhead_p95": num(r"run overhead:.*p95 ([\d.]+)s"),
            "work": num(r"checker runtime ([\d.]+)s"), "requests": num(r"API requests per run: ([\d.]+)"),
            "lease_rate": num(r"([\d.]+) Lease reads/s"),
            "start_phase": float(phase.group(1)) / 1000 if phase else None,
            "sigterm": (num(r"^SIGTERM .*after ([\d.]+)s, runs"), num(r"^SIGTERM .*first check pod after ([\d.]+)s")),
            "kill9": (num(r"^kill -9 .*after ([\d.]+)s, runs"), num(r"^kill -9 .*first check pod after ([\d.]+)s"))}


def s(v: float | None) -> str:
    return "n/a" if v is None or math.isnan(v) else f"{v:.2f} s"


def med_p95(values: list[float]) -> str:
    values = [v for v in values if not math.isnan(v)]
    return f"median {statistics.median(values):.2f} s, p95 {percentile(values, 95):.2f} s" if values else "n/a"


def table(real: dict[str, Any], sim: dict[str, Any] | None, n: int) -> str:
    runs = real["runs"]["runs"]
    over = [r["duration"] - r["work"] for r in runs]
    starts = [r["start"] for r in runs]
    rest = [o - st for o, st in zip(over, starts, strict=True)]
    pods = [r for r in real["pod_times"].values() if r["added"] and r["past"]]
    running = [r["running"] - r["added"] for r in pods if r["running"]]
    past = [r["past"] - r["added"] for r in pods]
    audit, secs = real["runs"]["audit"], real["runs"]["seconds"]
    sim = sim or {}
    sg, k9 = sim.get("sigterm", (None, None)), sim.get("kill9", (None, None))
    rows = [
        ("helm install → first OK", f"{s(real['install']['first_ok'])} (helm returned {s(real['install']['returned'])},"
         f" 2 pods Ready {s(real['install']['ready'])})", "n/a (no kubelet runs the daemon)"),
        (f"run overhead ({len(runs)} runs)", med_p95(over),
         f"median {s(sim.get('overhead'))}, p95 {s(sim.get('overhead_p95'))}" if sim else "skipped"),
        ("  of which pod created → checker started", med_p95(starts),
         f"start phase median {s(sim.get('start_phase'))}" if sim else "skipped"),
        ("  the rest (daemon + container start/exit)", med_p95(rest), ""),
        ("checker's own work", med_p95([r["work"] for r in runs]), f"{s(sim.get('work'))} (simulated)" if sim else ""),
        ("pod created → Running (watch events)", f"{med_p95(running)} ({len(running)} of {len(pods)} pods showed"
         f" Running; the rest went from Pending to Succeeded)", "at once (no delay by default)" if sim else "skipped"),
        ("pod created → past Pending (watch events)", f"{med_p95(past)} ({len(past)} pods)",
         f"start phase median {s(sim.get('start_phase'))}" if sim else "skipped"),
        ("API requests per run (no Lease, no watch)",
         f"{audit['all'] / max(1, len(runs)):.1f} (leader alone {audit['leader'] / max(1, len(runs)):.1f})",
         f"{sim.get('requests')}" if sim else "skipped"),
        ("Lease requests, both replicas", f"{audit['lease'] / max(1.0, secs):.2f}/s",
         f"{sim.get('lease_rate')}/s (one process)" if sim else "skipped"),
    ]
    for i, f in enumerate(real["failovers"], 1):
        rows.append((f"failover {i}: Lease taken / first checker pod",
                     f"{s(f['lease'])} / {s(f['pod'])} ({f['won']}; the old leader's last pod gone at"
                     f" {s(f['old_pod_gone'])})",
                     f"SIGTERM {s(sg[0])} / {s(sg[1])}; kill -9 {s(k9[0])} / {s(k9[1])}" if sim and i == 1 else ""))
    width = max(len(r[0]) for r in rows)
    lines = [f"{'figure':<{width}} | real node | simulated", "-" * (width + 40)]
    lines += [f"{a:<{width}} | {b} | {c}" for a, b, c in rows]
    lines.append("API requests per run by verb (both replicas): " + ", ".join(
        f"{k} {v / max(1, len(runs)):.1f}" for k, v in sorted(audit["verbs"].items())))
    lines.append("Lease requests by verb: " + ", ".join(
        f"{k} {v / max(1.0, secs):.2f}/s" for k, v in sorted(audit["lease_verbs"].items())))
    lines.append(f"(real: {n} runs of a check every 10 s after its first OK run; the failovers on a check every 1 s)")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--failovers", type=int, default=3)
    ap.add_argument("--no-sim", action="store_true", help="skip the simulated column")
    ap.add_argument("--json", type=Path, help="also write the raw figures to this file")
    args = ap.parse_args()
    reason = RealNode.unavailable()
    if reason:
        print(f"node_bench: the real node cannot start: {reason}", file=sys.stderr)
        return 2
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    sim = None if args.no_sim else simulated(args.runs)
    try:
        node = RealNode.start()
    except (RealNodeError, subprocess.TimeoutExpired) as e:
        print(f"node_bench: the real node cannot start: {e}", file=sys.stderr)
        return 2  # a failed start has cleaned up after itself (node.sh start's EXIT trap)
    work = Path(tempfile.mkdtemp(prefix="kh-node-bench-"))
    try:
        if not Path(node.env.get("AUDIT_LOG", "/nonexistent")).is_file():  # started before the audit log
            node.stop()
            node = RealNode.start()
        pods = Watch(node, f"/api/v1/namespaces/{NS}/pods")
        states = Watch(node, f"/apis/comcast.github.io/v1/namespaces/{NS}/khstates")
        leases = Watch(node, f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases")
        e2e, installed = install(node, work, pods, states)
        leases.start()
        runs = measure_runs(node, e2e, pods, states, args.runs)
        e2e.kubectl("delete", "khcheck", TIMED, "-n", NS)
        e2e.apply(e2e.khcheck(PULSE, e2e.pod_spec(SHELL, {"MODE": "ok"}), namespace=NS, run_interval="1s"))
        fails = [failover(e2e, pods, leases) for _ in range(args.failovers)]
        e2e.await_ready(2)
        for f in fails:
            f["old_pod_gone"] = old_pod_gone(f, pod_times(pods))
        timed = {k: v for k, v in pod_times(pods).items() if v["labels"].get(CHECK_NAME_LABEL) == TIMED}
        real: dict[str, Any] = {"install": installed, "runs": runs, "failovers": fails, "pod_times": timed}
        for w in (pods, states, leases):
            w.done.set()
        print(table(real, sim, args.runs))
        if args.json:
            real.update(all_pods=pod_times(pods), pulse=e2e.khstate(PULSE, NS), daemon_logs=daemon_logs(e2e))
            args.json.write_text(json.dumps({"real": real, "sim": sim}, indent=1, default=str))
    finally:
        node.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
