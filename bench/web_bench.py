"""HTTP API figures: status page throughput against a bare Flask baseline, latency, reports per second.

`python -m bench.web_bench` prints figures and asserts nothing. Loopback only; every loop is bounded.

1. `GET /` with N checks (default 1,000) in the cache, served by our app the way the daemon serves it
   (daemon/server.py's http_settings: our worker class, httpworker.py, its threads and keep-alive),
   against a bare gunicorn+Flask app returning the same bytes on stock gthread with the same thread
   count and keep-alive, measured in the same run: R rounds (default 5), each S seconds (default 5)
   per server in turns of T seconds (default 1) that alternate between them, so that the drifting
   load of a shared machine weighs on both alike. C concurrent keep-alive clients (default 50), ten
   from each loopback address (the worker caps connections per address). Figures per round:
   requests/s, p50/p99 latency, the server process's CPU use (near 100% means the server, not the
   client, was the limit) and per request, and the ratio; then the median ratio (target >= 0.95).
   The cache is fed from dicts here; no API server. `--only-status` runs this part alone (~1 min).
   Measured on 2 cores shared with other jobs: before the worker's fixes the median ratio was 0.80
   and 0.82 in two runs (our worker spent ~25% more CPU per request than stock gthread: the head
   parsed twice, Python's timeout-mode writes, a GIL-releasing call or two more on the main loop,
   gunicorn's settings read through Config.__getattr__); after them 1.03, 1.12 and 1.07.
2. `GET /api/checks` with N checks (default 1,000), each with a full history (24 entries): requests/s
   and p99 at C concurrent keep-alive clients (default 20), our app on our worker as above over caches
   fed from dicts. The entries' JSON is prepared by checkview.ViewCache when the caches change, so a
   request joins prepared bytes; the figure says what that costs at the page's real size.
3. Validated reports per second (target >= 300/s): a real API server (testbed/), K checker pods
   created through it and set Running with their own loopback IPs, our app on our worker with real
   services; each client reports for its own pod from the pod's address (half by header, half by IP),
   so every report is looked up in the pod cache and stored through the API server.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask, Response
from gunicorn.app.base import BaseApplication

import kuberhealthy.base.config
from kuberhealthy.daemon.server import HTTP_THREADS, KEEPALIVE, http_settings
from kuberhealthy.daemon.services import Services
from kuberhealthy.kube import KHCHECKS, KHSTATES, Kube
from kuberhealthy.records.history import RunFacts, RunRecord, apply_run
from kuberhealthy.web import create_app
from testbed.cluster.apiserver import cleanup, start_cluster
from testbed.cluster.builders import checker_pod, khs, khstate, pods_path
from testbed.cluster.crds import install_crds
from testbed.cluster.loopback import free_port, pod_ip
from testbed.cluster.objects import create_namespace, set_pod_status
from testbed.fakes import FakeServices, fake_config
from testbed.stats import cpu_seconds, percentile

HOST = "127.0.0.1"
CLIENTS_PER_SOURCE = 10  # well under the worker's PER_SOURCE cap
CLOSED = 0  # the "status" of a request whose connection the server closed unanswered


# --- servers (run in a child process: `python -m bench.web_bench --serve KIND ...`) -------------------

class _Gunicorn(BaseApplication):
    """One gunicorn server in this process: the daemon's HTTP settings (our worker) for our app, or
    stock gthread with the same thread count and keep-alive for the bare baseline."""

    def __init__(self, factory: Callable[[], Any], port: int, threads: int, stock: bool = False) -> None:
        self.factory, self.port, self.threads, self.stock = factory, port, threads, stock
        super().__init__()

    def load_config(self) -> None:
        settings = http_settings(self.cfg.settings)
        if self.stock:
            settings["worker_class"] = "gthread"
        settings.update({"bind": [f"{HOST}:{self.port}"], "threads": self.threads, "errorlog": "-",
                         "loglevel": "warning"})
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return self.factory()


def stub_services(checks: int, history: int = 0) -> FakeServices:
    """Services over the in-memory fakes holding `checks` khstates (with `history` entries each, and then a
    khcheck each): what create_app reads, without an API server."""
    services = FakeServices(config=fake_config(pod_name="kh-bench-0"))
    states = fake_khstates(checks)
    if history:
        add_history(states, history)
        for check in fake_khchecks(states):
            services.api.put(KHCHECKS, check)
    for state in states:
        services.api.put(KHSTATES, state)
    return services


def fake_khstates(n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        ns = f"team-{i % 20:02d}"
        failing = i % 10 == 0
        out.append({"metadata": {"namespace": ns, "name": f"check-{i:04d}", "resourceVersion": str(i + 1)},
                    "spec": {"OK": not failing, "Errors": [f"check {i} failed: <timeout> & retry"] if failing else [],
                             "RunDuration": f"{1 + i % 7}.{i % 1000:03d}s", "Namespace": ns, "Node": f"node-{i % 5}",
                             "LastRun": "2024-05-01T12:00:00Z", "AuthoritativePod": "kh-bench-0",
                             "uuid": str(uuid.UUID(int=i))}})
    return out


def add_history(states: list[dict[str, Any]], entries: int) -> None:
    """`entries` runs of history on each khstate (one failure in five, with an error and a log tail)."""
    now = time.time()
    made: dict[bool, dict[str, Any]] = {}
    for failing in (False, True):
        spec: dict[str, Any] = {}
        for i in range(entries):
            start = now - (entries - i) * 600
            if failing and i % 5 == 4:
                record = RunRecord.failed(RunFacts(str(uuid.UUID(int=i)), start, 2.5, "node-1", f"check-pod-{i}"),
                                          "timed out waiting for checker pod to report in",
                                          [f"Check execution error: run {i} timed out"], logs="line\n" * 40)
            else:
                record = RunRecord.reported(RunFacts(str(uuid.UUID(int=i)), start, 1.2, "node-1", f"check-pod-{i}"),
                                            {"OK": True, "Errors": []})
            spec.update(apply_run(spec, record, entries, start + 2))
        made[failing] = spec
    for state in states:
        state["spec"].update(json.loads(json.dumps(made[not state["spec"]["OK"]])))


def fake_khchecks(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"metadata": {"namespace": s["metadata"]["namespace"], "name": s["metadata"]["name"],
                          "resourceVersion": s["metadata"]["resourceVersion"], "uid": str(uuid.uuid4())},
             "spec": {"runInterval": "10m", "timeout": "1m",
                      "podSpec": {"containers": [{"name": "main", "image": "kh-sim/ok"}]}}} for s in states]


def ours_factory(checks: int, history: int = 0) -> Callable[[], Any]:
    def make() -> Any:
        return create_app(stub_services(checks, history))
    return make


def bare_factory(page_file: str) -> Callable[[], Any]:
    def make() -> Any:
        page = Path(page_file).read_bytes()
        app = Flask("bare")

        @app.route("/")
        def index() -> Response:
            return Response(page, content_type="application/json")
        return app
    return make


def reports_factory(kubeconfig: str, namespace: str) -> Callable[[], Any]:
    def make() -> Any:
        config = kuberhealthy.base.config.from_mapping({"targetNamespace": namespace},
                                                  {"POD_NAME": "kh-bench-0", "POD_NAMESPACE": namespace})
        services = Services(config, Kube.connect(kubeconfig))
        services.start_caches()
        services.wait_synced(30)
        return create_app(services)
    return make


# --- load generation -------------------------------------------------------------------------------

async def _client(port: int, request: bytes, until: float, latencies: list[float], statuses: dict[int, int],
                  source_ip: str | None) -> None:
    reader, writer = await asyncio.open_connection(HOST, port, local_addr=(source_ip, 0) if source_ip else None)
    try:
        while time.monotonic() < until:
            start = time.perf_counter()
            writer.write(request)
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                statuses[CLOSED] = statuses.get(CLOSED, 0) + 1  # the server closed it: counted, not retried
                break
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - start)
            statuses[status] = statuses.get(status, 0) + 1
            if b"connection: close" in head.lower():
                break
    finally:
        writer.close()


def spread(request: bytes, clients: int) -> list[tuple[bytes, str | None]]:
    """`clients` connections sending `request`, CLIENTS_PER_SOURCE from each loopback address: the
    daemon's worker closes the oldest connection of a source past its per-source cap."""
    return [(request, f"127.0.0.{2 + i // CLIENTS_PER_SOURCE}") for i in range(clients)]


def load(port: int, requests: list[tuple[bytes, str | None]], seconds: float) -> tuple[list[float], dict[int, int]]:
    """One keep-alive connection per (request bytes, source IP), each looping until the time is up."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}

    async def main() -> None:
        until = time.monotonic() + seconds
        await asyncio.gather(*(_client(port, req, until, latencies, statuses, ip) for req, ip in requests))
    asyncio.run(main())
    return latencies, statuses


def worker_pids(arbiter: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(arbiter)], capture_output=True, text=True, check=False).stdout
    return [int(p) for p in out.split()]


def start_server(args: list[str], port: int, ready_path: str = "/healthz",
                 limit: float = 60, module: str = "bench.web_bench") -> subprocess.Popen[bytes]:
    """`python -m <module> --serve ARGS --port PORT`, once it answers `ready_path`."""
    proc = subprocess.Popen([sys.executable, "-m", module, "--serve", *args, "--port", str(port)])
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}{ready_path}", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.1)
    proc.terminate()
    raise RuntimeError(f"server {args} did not come up")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


class Sample:
    """Load runs on one server, summed: requests answered 200 and not, time, the worker's CPU, latencies."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc, self.port = proc, port
        self.ok = self.errors = 0
        self.statuses: dict[int, int] = {}
        self.elapsed = self.cpu = 0.0
        self.latencies: list[float] = []

    def run(self, requests: list[tuple[bytes, str | None]], seconds: float) -> None:
        workers = worker_pids(self.proc.pid)
        cpu0 = cpu_seconds(workers)
        t0 = time.monotonic()
        latencies, statuses = load(self.port, requests, seconds)
        self.elapsed += time.monotonic() - t0
        self.cpu += cpu_seconds(workers) - cpu0
        self.latencies += latencies
        self.ok += statuses.get(200, 0)
        self.errors += sum(v for k, v in statuses.items() if k != 200)
        for status, count in statuses.items():
            self.statuses[status] = self.statuses.get(status, 0) + count

    def figures(self) -> dict[str, float]:
        return {"rps": self.ok / self.elapsed if self.elapsed else 0.0,
                "p50": (percentile(self.latencies, 50) or 0.0) * 1000,
                "p99": (percentile(self.latencies, 99) or 0.0) * 1000,
                "cpu": self.cpu / self.elapsed * 100 if self.elapsed else 0.0,
                "cpu_us": self.cpu / self.ok * 1e6 if self.ok else 0.0, "errors": self.errors,
                **{f"status {k}": v for k, v in sorted(self.statuses.items()) if k != 200}}


def measure(proc: subprocess.Popen[bytes], port: int, requests: list[tuple[bytes, str | None]],
            seconds: float) -> dict[str, float]:
    load(port, requests[:4], 0.5)  # warm-up
    sample = Sample(proc, port)
    sample.run(requests, seconds)
    return sample.figures()


def measure_turns(servers: dict[str, tuple[subprocess.Popen[bytes], int]], requests: list[tuple[bytes, str | None]],
                  seconds: float, turn: float, reverse: bool) -> dict[str, dict[str, float]]:
    """`seconds` of load on each server, in turns of `turn` seconds that alternate between them (the
    first turn's server alternating too): the machine's load, which drifts over seconds on a shared
    host, weighs on each alike."""
    samples = {name: Sample(proc, port) for name, (proc, port) in servers.items()}
    names = list(servers)[::-1] if reverse else list(servers)
    for i in range(max(1, round(seconds / turn))):
        for name in names if i % 2 == 0 else names[::-1]:
            samples[name].run(requests, turn)
    return {name: sample.figures() for name, sample in samples.items()}


def show(label: str, m: dict[str, float]) -> None:
    which = ", ".join(f"{k[7:] if k != f'status {CLOSED}' else 'closed'} x{v:.0f}" for k, v in m.items()
                      if k.startswith("status "))
    print(f"  {label:<26} {m['rps']:8.0f} req/s   p50 {m['p50']:7.1f} ms   p99 {m['p99']:7.1f} ms   "
          f"server CPU {m['cpu']:4.0f}% ({m['cpu_us']:5.0f} us/req)   non-200 {m['errors']:.0f}"
          + (f" ({which})" if which else ""), flush=True)


# --- the two benchmarks ----------------------------------------------------------------------------

def status_page_bench(checks: int, clients: int, seconds: float, rounds: int, threads: int,
                      turn: float = 1.0) -> list[float]:
    """Our app on our worker against bare Flask on stock gthread; returns the per-round ratios."""
    print(f"GET / with {checks} checks, {clients} keep-alive clients; kuberhealthy on its own worker "
          f"(daemon/server.py's settings), bare Flask on stock gthread; 1 worker x{threads} threads, "
          f"keep-alive {KEEPALIVE} s; {rounds} rounds of {seconds:.0f} s per server, in alternating turns of "
          f"{turn:g} s", flush=True)
    request = f"GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode()
    reqs = spread(request, clients)
    ours_port, bare_port = free_port(), free_port()
    ours = start_server(["ours", "--checks", str(checks), "--threads", str(threads)], ours_port)
    bare = None
    try:
        with urllib.request.urlopen(f"http://{HOST}:{ours_port}/", timeout=10) as r:
            page = r.read()
        print(f"  page size {len(page)} bytes", flush=True)
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            f.write(page)
        bare = start_server(["bare", "--page", f.name, "--threads", str(threads)], bare_port, ready_path="/")
        ratios, ours_all = [], []
        servers = {"bare": (bare, bare_port), "ours": (ours, ours_port)}
        for port in (bare_port, ours_port):
            load(port, reqs[:4], 0.5)  # warm-up
        for i in range(rounds):
            got = measure_turns(servers, reqs, seconds, turn, reverse=i % 2 == 1)
            ratio = got["ours"]["rps"] / got["bare"]["rps"] if got["bare"]["rps"] else 0.0
            show(f"round {i + 1} bare Flask", got["bare"])
            show(f"round {i + 1} kuberhealthy", got["ours"])
            print(f"  round {i + 1} ratio {ratio:.3f}", flush=True)
            ratios.append(ratio)
            ours_all.append(got["ours"])
        print(f"  ratio kuberhealthy / bare: median {statistics.median(ratios):.3f} (rounds: "
              f"{', '.join(f'{r:.3f}' for r in ratios)}; target >= 0.95)")
        p50, p99 = (statistics.median(m[k] for m in ours_all) for k in ("p50", "p99"))
        print(f"  kuberhealthy latency at {clients} clients: p50 {p50:.1f} ms, p99 {p99:.1f} ms (round medians)",
              flush=True)
        os.unlink(f.name)
        return ratios
    finally:
        stop_server(ours)
        if bare is not None:
            stop_server(bare)


def api_checks_bench(checks: int, history: int, clients: int, seconds: float, threads: int) -> None:
    print(f"GET /api/checks with {checks} checks x {history} history entries, {clients} keep-alive clients, "
          f"kuberhealthy on its own worker x{threads} threads, {seconds:.0f}s", flush=True)
    port = free_port()
    proc = start_server(["api", "--checks", str(checks), "--history", str(history), "--threads", str(threads)], port)
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/api/checks", timeout=60) as r:
            doc = json.loads(r.read())
            size = int(r.headers["Content-Length"])
        assert len(doc["checks"]) == checks and all(len(e["history"]) == history for e in doc["checks"])
        print(f"  page size {size} bytes ({size / checks / 1024:.1f} KiB per check)", flush=True)
        request = f"GET /api/checks HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode()
        m = measure(proc, port, spread(request, clients), seconds)
        show("/api/checks", m)
        print(f"  /api/checks: {m['rps']:.0f} requests/s, p99 {m['p99']:.1f} ms at {clients} clients "
              f"({m['rps'] * size / 1e6:.0f} MB/s)", flush=True)
    finally:
        stop_server(proc)


def reports_bench(pods: int, seconds: float, threads: int) -> None:
    print(f"POST /externalCheckStatus: {pods} pods each reporting in a loop (half by header, half by IP), "
          f"real API server, {seconds:.0f}s", flush=True)
    cluster = start_cluster()
    proc = None
    try:
        install_crds(cluster)
        ns = create_namespace(cluster, "bench")
        reqs: list[tuple[bytes, str | None]] = []
        for i in range(pods):
            run, name, ip = str(uuid.uuid4()), f"check-{i:03d}", pod_ip()
            cluster.request("POST", khs(ns), khstate(name, OK=True, Errors=[], RunDuration="", Namespace=ns, Node="",
                                                     AuthoritativePod="kh-bench-0", uuid=run))
            pod = f"{name}-{i}"
            cluster.request("POST", pods_path(ns), checker_pod(pod, name, run))
            set_pod_status(cluster, ns, pod, "Running", ip)
            body = json.dumps({"OK": False, "Errors": [f"bench failure {i}"]} if i % 3 == 0
                              else {"OK": True, "Errors": []}).encode()
            header = f"kh-run-uuid: {run}\r\n" if i % 2 == 0 else ""
            reqs.append((f"POST /externalCheckStatus HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
                         f"{header}Content-Length: {len(body)}\r\n\r\n".encode() + body, ip))
        port = free_port()
        proc = start_server(["reports", "--kubeconfig", str(cluster.kubeconfig), "--namespace", ns,
                             "--threads", str(threads)], port, ready_path="/readyz")
        api_pids = [p.pid for p in cluster.procs.values()]
        api0 = cpu_seconds(api_pids)
        t0 = time.monotonic()
        m = measure(proc, port, reqs, seconds)
        api_cpu = (cpu_seconds(api_pids) - api0) / (time.monotonic() - t0) * 100
        show("validated reports", m)
        print(f"  API server + etcd CPU {api_cpu:.0f}% (of {os.cpu_count()} CPUs x 100%)", flush=True)
        print(f"  validated reports per second: {m['rps']:.0f} (target >= 300)", flush=True)
    finally:
        if proc is not None:
            stop_server(proc)
        cleanup(cluster)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--serve", choices=["ours", "bare", "reports", "api"], help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--page", help=argparse.SUPPRESS)
    p.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    p.add_argument("--namespace", help=argparse.SUPPRESS)
    p.add_argument("--checks", type=int, default=1000, help="khstates in the cache for GET / (default 1000)")
    p.add_argument("--clients", type=int, default=50, help="concurrent keep-alive clients (default 50)")
    p.add_argument("--seconds", type=float, default=5.0, help="length of each measurement (default 5)")
    p.add_argument("--rounds", type=int, default=5, help="rounds for GET / (default 5), each --seconds per server")
    p.add_argument("--turn", type=float, default=1.0, help="GET /: seconds per turn, alternating servers (default 1)")
    p.add_argument("--threads", type=int, default=HTTP_THREADS, help=f"server threads (default {HTTP_THREADS})")
    p.add_argument("--pods", type=int, default=50, help="reporting pods for the reports bench (default 50)")
    p.add_argument("--history", type=int, default=24, help="history entries per check for /api/checks (default 24)")
    p.add_argument("--api-clients", type=int, default=20, help="clients for the /api/checks bench (default 20)")
    p.add_argument("--skip-reports", action="store_true", help="leave out the reports bench (part 3)")
    p.add_argument("--only-status", action="store_true", help="only the status page bench (part 1)")
    args = p.parse_args(argv)
    if args.serve == "ours":
        _Gunicorn(ours_factory(args.checks), args.port, args.threads).run()
    elif args.serve == "bare":
        _Gunicorn(bare_factory(args.page), args.port, args.threads, stock=True).run()
    elif args.serve == "api":
        _Gunicorn(ours_factory(args.checks, args.history), args.port, args.threads).run()
    elif args.serve == "reports":
        _Gunicorn(reports_factory(args.kubeconfig, args.namespace), args.port, args.threads).run()
    else:
        status_page_bench(args.checks, args.clients, args.seconds, args.rounds, args.threads, args.turn)
        if args.only_status:
            return 0
        api_checks_bench(args.checks, args.history, args.api_clients, args.seconds, args.threads)
        if not args.skip_reports:
            reports_bench(args.pods, args.seconds * 2, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
