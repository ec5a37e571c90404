"""`python -m bench.floor`: what each operation a check run needs costs a bare Python process on this machine,
and their sum per run: the floor under the daemon's CPU per run (bench.versus), whatever its logic.

A run of a check makes the daemon do some I/O that the contract fixes, however clever the rest is: create the
checker pod, write the check's khstate (v2's contract stores the claim and the report; we also record the run's
duration and node: 3 writes), take the checker's report POST on a new connection, and hear of all of it back on
its watches (the pod's events as the kubelet moves it, the echo of each khstate write). The harness of
bench.scale adds its `GET /` polls (2 a second; 0.48 per run at 250 checks and a 60 s interval). This bench
does each of those alone, with nothing of the product's logic around it, and prints the CPU each costs:

  api    pod create, khstate replace (30 days of rollups, ~9 KB), pod delete: the product's own HTTP client
         (kube/client.py: keep-alive TLS, json encode and decode) against a real API server (testbed/);
         the calling thread's CPU (time.thread_time) per request
  watch  pod and khstate events read from a watch by the same client and json-decoded, nothing else;
         the reading thread's CPU per event (the pod events as the API server sends them: managedFields in)
  serve  a report POST on a new connection, as a checker sends it, and `GET /` (our page bytes for --checks
         checks) on a kept connection, served by bare gunicorn + Flask (stock gthread, the daemon's thread
         count), which decodes the report's JSON and answers 200; the server's CPU per request (/proc)

Per run: each CPU times its count per run (--per-run, defaults from bench.scale at 250 checks: 1 create, 3
writes, 0.12 other requests counted as deletes, 5 pod events, 3 khstate events, 1 report, 0.48 `GET /`).
`/metrics` and everything the daemon decides are left out, so the sum is a floor, not an estimate. Beside
it, not in it: a thread hand-off (one thread wakes another over a threading.Event), what each of the
daemon's time slices per run (bench.scale) costs the kernel at least, beyond the work done in it. With
`--old-ms X` (the older commit's CPU per run from bench.versus, same machine) it prints the floor as a share
of X beside the 0.6x target. It reports and asserts nothing.

Usage: python -m bench.floor [--runs 300] [--reports 2000] [--checks 250] [--old-ms 11.0]
"""
from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from flask import Flask, Response, request

from bench.web_bench import HOST, Sample, _Gunicorn, spread, start_server, stop_server, stub_services, worker_pids
from kuberhealthy.base.errors import Unreachable
from kuberhealthy.daemon.server import HTTP_THREADS
from kuberhealthy.kube import KHSTATES, PODS
from kuberhealthy.kube.client import Kube
from kuberhealthy.kube.reflector import Reflector, Selection
from kuberhealthy.records import uptime
from kuberhealthy.records.checkpod import CHECK_POD_STORAGE
from kuberhealthy.web import create_app
from testbed.cluster.apiserver import start_cluster
from testbed.cluster.builders import khs, pods_path
from testbed.cluster.crds import install_crds
from testbed.cluster.objects import create_namespace
from testbed.fakes.world import khstate_of, month_of_runs
from testbed.stats import CLK_TCK, cpu_seconds

PER_RUN = {"create pod": 1.0, "replace khstate": 3.0, "delete pod": 0.12, "pod event": 5.0,
           "khstate event": 3.0, "report POST (new connection)": 1.0, "GET / (kept connection)": 0.48}
REPORT = json.dumps({"OK": True, "Errors": []}).encode()


# --- the bare server (a child process: python -m bench.floor --serve --port P --page F) --------------------

def bare_app(page_file: str) -> Callable[[], Any]:
    def make() -> Any:
        page = Path(page_file).read_bytes()
        app = Flask("floor")

        @app.route("/")
        def index() -> Response:
            return Response(page, content_type="application/json")

        @app.route("/externalCheckStatus", methods=["POST"])
        def report() -> Response:
            body = json.loads(request.get_data())
            return Response(b"" if isinstance(body, dict) else b"?", status=200)

        @app.route("/healthz")
        def healthz() -> Response:
            return Response(b"ok")
        return app
    return make


# --- the API side --------------------------------------------------------------------------------------

def pod_body(name: str) -> dict[str, Any]:
    """A checker pod about the size of ours: labels, annotations, one container with the reporting env."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "labels": {"kuberhealthy-check-name": "floor", "kuberhealthy-run-id": str(uuid.uuid4())},
        "annotations": {"comcast.github.io/check-name": "floor", "kuberhealthy.comcast.github.io/run-key": "x" * 64}},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "floor", "image": "kh-sim/ok", "imagePullPolicy": "IfNotPresent",
            "env": [{"name": n, "value": v} for n, v in (
                ("KH_REPORTING_URL", "http://kuberhealthy.kuberhealthy.svc.cluster.local/externalCheckStatus"),
                ("KH_RUN_UUID", str(uuid.uuid4())), ("KH_CHECK_RUN_DEADLINE", str(int(time.time()) + 300)),
                ("KH_POD_NAMESPACE", "floor"))],
            "resources": {"requests": {"cpu": "10m", "memory": "50Mi"}, "limits": {"memory": "100Mi"}}}]}}


def pod_status(ip: str) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "10.0.0.1", "startTime": now,
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                           for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
            "containerStatuses": [{"name": "floor", "ready": True, "restartCount": 0, "image": "kh-sim/ok",
                                   "imageID": "sha256:" + "0" * 64, "containerID": "containerd://" + "1" * 64,
                                   "started": True, "state": {"running": {"startedAt": now}}}]}


class Watcher(threading.Thread):
    """Reads one watch and json-decodes each event; its own CPU while it does."""

    def __init__(self, kube: Kube, path: str) -> None:
        super().__init__(name=f"floor-watch-{path.rsplit('/', 1)[-1]}", daemon=True)
        self.kube, self.path = kube, path
        self.events, self.cpu, self.ready = 0, 0.0, threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        listed = self.kube.request("GET", self.path)
        since = listed["metadata"]["resourceVersion"]
        raw = self.kube.open_stream(self.path, {"watch": "true", "resourceVersion": since, "timeoutSeconds": 600}, 630)
        self.ready.set()
        start = time.thread_time()
        try:
            for line in self.kube.iter_lines(raw):
                if json.loads(line).get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    self.events += 1
                    self.cpu = time.thread_time() - start
                if self.stop.is_set():
                    break
        except Unreachable:
            if not self.stop.is_set():  # the namespace's deletion at the end closes the stream
                raise
        finally:
            self.kube.shutdown_stream(raw)


def thread_cpu(name: str) -> float:
    """CPU seconds so far of this process's thread of that name (/proc: in clock ticks)."""
    native_id = next(t.native_id for t in threading.enumerate() if t.name == name)
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def api_figures(kube: Kube, ns: str, runs: int) -> dict[str, float]:
    """CPU per operation (seconds) of the API requests and watch events, `runs` times each cycle; beside the
    bare watches, the daemon's own caches of the same objects (kube/reflector.py with the pod cache's
    storage, no listeners), for comparison."""
    watchers = [Watcher(kube, pods_path(ns)), Watcher(kube, khs(ns))]
    for w in watchers:
        w.start()
        w.ready.wait(30)
    ours = [Reflector(kube, PODS, Selection(ns), storage=CHECK_POD_STORAGE), Reflector(kube, KHSTATES, Selection(ns))]
    for r in ours:
        r.start()
        r.synced.wait(30)
    ours_cpu0 = [thread_cpu(r.name) for r in ours]
    state = kube.request("POST", khs(ns), body=khstate_of("floor", ns, **{uptime.FIELD: month_of_runs(time.time())}))
    cpu = {"create pod": 0.0, "replace khstate": 0.0, "delete pod": 0.0}
    for i in range(runs):
        name = f"floor-{i:05d}"
        t = time.thread_time()
        kube.request("POST", pods_path(ns), body=pod_body(name))
        cpu["create pod"] += time.thread_time() - t
        pod = kube.request("GET", pods_path(ns, name))
        pod["status"] = pod_status(f"10.1.{i // 250}.{i % 250 + 1}")
        kube.request("PUT", pods_path(ns, name) + "/status", body=pod)  # the kubelet's part: not counted
        for n in range(3):
            state["spec"]["LastRun"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            state["spec"]["RunDuration"] = f"{i}.{n}s"
            t = time.thread_time()
            state = kube.request("PUT", khs(ns, "floor"), body=state)
            cpu["replace khstate"] += time.thread_time() - t
        t = time.thread_time()
        kube.request("DELETE", pods_path(ns, name), body={"gracePeriodSeconds": 0})
        cpu["delete pod"] += time.thread_time() - t
    want = (3 * runs, 3 * runs + 1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(w.events < n for w, n in zip(watchers, want, strict=True)):
        time.sleep(0.2)
    for w in watchers:
        w.stop.set()
    ours_cpu = [thread_cpu(r.name) - c0 for r, c0 in zip(ours, ours_cpu0, strict=True)]
    for r in ours:
        r.stop()
    out = {k: v / runs for k, v in cpu.items()}
    out["pod event, the daemon's cache"] = ours_cpu[0] / max(1, watchers[0].events)
    out["khstate event, the daemon's cache"] = ours_cpu[1] / max(1, watchers[1].events)
    out["replace khstate"] /= 3
    out["pod event"] = watchers[0].cpu / max(1, watchers[0].events)
    out["khstate event"] = watchers[1].cpu / max(1, watchers[1].events)
    return out


def handoff_cpu(rounds: int = 20000) -> float:
    """CPU (both threads, process time) of one wake-up handed from a thread to a waiting one over a
    threading.Event and back, per hand-off: what a watch event that wakes a check's thread, or a request
    the HTTP main loop gives to a pool thread, costs on this machine beyond the work itself."""
    ping, pong = threading.Event(), threading.Event()

    def answer() -> None:
        for _ in range(rounds):
            ping.wait()
            ping.clear()
            pong.set()
    other = threading.Thread(target=answer, name="floor-handoff", daemon=True)
    other.start()
    start = time.process_time()
    for _ in range(rounds):
        ping.set()
        pong.wait()
        pong.clear()
    spent = time.process_time() - start
    other.join()
    return spent / (2 * rounds)


# --- the serving side -------------------------------------------------------------------------------------

def post_once(port: int) -> int:
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        conn.request("POST", "/externalCheckStatus", body=REPORT,
                     headers={"Content-Type": "application/json", "kh-run-uuid": str(uuid.uuid4())})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def serve_figures(checks: int, reports: int, threads: int, port: int) -> dict[str, float]:
    page = create_app(stub_services(checks)).test_client().get("/").data
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        f.write(page)
    proc = start_server(["--page", f.name, "--threads", str(threads)], port, module="bench.floor")
    try:
        workers = worker_pids(proc.pid)
        for _ in range(50):
            post_once(port)  # warm-up
        before = cpu_seconds(workers)
        with ThreadPoolExecutor(max_workers=4) as pool:
            statuses = list(pool.map(lambda _: post_once(port), range(reports)))
        posted = cpu_seconds(workers) - before
        sample = Sample(proc, port)
        sample.run(spread(b"GET / HTTP/1.1\r\nHost: floor\r\n\r\n", 10), 5.0)
        got = sample.figures()
    finally:
        stop_server(proc)
        Path(f.name).unlink(missing_ok=True)
    ok = sum(1 for s in statuses if s == 200)
    return {"report POST (new connection)": posted / max(1, ok), "GET / (kept connection)": got["cpu_us"] / 1e6,
            "page bytes": float(len(page))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--page", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=18931, help="the bare server's port")
    ap.add_argument("--threads", type=int, default=HTTP_THREADS)
    ap.add_argument("--runs", type=int, default=300, help="cycles of create, status, 3 writes, delete (default 300)")
    ap.add_argument("--reports", type=int, default=2000, help="report POSTs (default 2000)")
    ap.add_argument("--checks", type=int, default=250, help="checks on the `GET /` page (default 250)")
    ap.add_argument("--old-ms", type=float, default=None, help="the older commit's CPU per run (bench.versus)")
    args = ap.parse_args(argv)
    if args.serve:
        _Gunicorn(bare_app(args.page), args.port, args.threads, stock=True).run()
        return 0
    cluster = start_cluster(workdir=Path(tempfile.mkdtemp(prefix="kh-floor-")))
    try:
        install_crds(cluster)
        ns = create_namespace(cluster, "floor")
        kube = Kube.connect(str(cluster.kubeconfig))
        per_op = api_figures(kube, ns, args.runs)
    finally:
        cluster.stop()
    served = serve_figures(args.checks, args.reports, args.threads, args.port)
    page_bytes = served.pop("page bytes")
    per_op.update(served)
    print(f"bench.floor: {args.runs} API cycles, {args.reports} report POSTs, `GET /` of {args.checks} checks "
          f"({page_bytes / 1024:.0f} KiB)\n")
    print("| operation | CPU each | per run | CPU per run |\n|---|---|---|---|")
    total = 0.0
    for op, count in PER_RUN.items():
        total += per_op[op] * count
        print(f"| {op} | {per_op[op] * 1e6:.0f} µs | {count:g} | {per_op[op] * count * 1e3:.2f} ms |")
    print(f"| **floor per run** | | | **{total * 1e3:.2f} ms** |")
    for op in ("pod event, the daemon's cache", "khstate event, the daemon's cache"):
        print(f"\nbeside: {op} (kube/reflector.py, no listeners) {per_op[op] * 1e6:.0f} µs each, "
              f"{per_op[op] / max(per_op[op.split(',')[0]], 1e-9):.1f}x the bare decode")
    handoff = handoff_cpu()
    print(f"\nbeside: a thread hand-off (threading.Event, woken and back to waiting) {handoff * 1e6:.1f} µs of CPU; "
          f"bench.scale's time slices per run times this is what its threads' wake-ups cost beyond the floor")
    if args.old_ms:
        target = 0.6 * args.old_ms
        print(f"\nfloor / old ({args.old_ms:.2f} ms per run) = {total * 1e3 / args.old_ms:.2f}x; "
              f"the 0.6x target is {target:.2f} ms, {target - total * 1e3:+.2f} ms above the floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
