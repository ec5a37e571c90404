"""`make attack` scenario "slow": stalled connections against a real daemon process
(docs/interface.md#under-hostile-clients: a connection gets a thread only once its whole request is buffered).

For each kind of slow client, CONNS connections are held for HOLD seconds from many loopback source
addresses (bound before connect), each re-opened as soon as the daemon closes it:
  head  sends `GET /healthz HTTP/1.1`, a Host header, and stops before the empty line
  body  sends a report's headers with `Content-Length: 100` and a body of `{`
  drip  sends a whole request one byte every 4 s
  mix   all three at once from only four addresses (50 each: past the per-source cap of 32)
Meanwhile `/healthz`, `/readyz`, `/` and `/status` (the status page, switched on here) are probed in
turn, each on a fresh connection with a 5 s timeout, and a check whose simulated checker reports
genuinely runs every 2 s. Target: probe p99 <= 1000 ms with every probe answered 200; every genuine
report accepted, and no run recorded as failed.

With `tls` (`python -m bench.attack --tls`) the daemon also serves HTTPS (a throw-away certificate) and
the attack and the probes go to its HTTPS listener (each probe with its own handshake); head, body and
drip first complete their handshake, and two kinds stall the handshake itself:
  handshake  opens TCP and sends nothing
  hello      sends half of a TLS ClientHello and stops
  mix        head, body, drip and handshake at once from four addresses
The genuine reports still come over HTTP (the simulated checkers speak plain HTTP): they show that
what the HTTPS listener suffers does not reach the rest of the daemon.
"""
from __future__ import annotations

import http.client
import selectors
import socket
import ssl
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.attack.table import Row, ms
from bench.attack.target import create_check, label, report_path, state_spec
from kuberhealthy.base.threads import BackgroundThread
from testbed.clients.tlscert import client_context, client_hello, self_signed
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.crds import install_crds
from testbed.cluster.loopback import free_port
from testbed.cluster.objects import create_namespace
from testbed.daemons.process import DaemonProcess
from testbed.sim.kubelet import SimKubelet
from testbed.sim.records import Outcome
from testbed.stats import percentile
from testbed.wait import wait_for

CONNS = 200
HOLD = 40.0  # seconds each kind is held
DRIP_EVERY = 4.0  # seconds between the drip's bytes
SOURCES = [f"127.0.0.{i}" for i in range(2, 61)]
FEW_SOURCES = [f"127.0.0.{i}" for i in range(61, 65)]
PROBES = ("/healthz", "/readyz", "/", "/status")
PROBE_TIMEOUT = 5.0
P99_TARGET_MS = 1000.0
CHECK = "genuine"
HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
BODY = (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n{")  # % the report endpoint attacked (target.py)
DRIP = b"GET /healthz HTTP/1.1\r\nHost: x\r\nUser-Agent: a-very-slow-client\r\n\r\n"
KINDS: dict[str, tuple[str, list[str], list[str]]] = {  # kind: (what, kinds of its connections, sources)
    "head": ("stop inside the headers", ["head"], SOURCES),
    "body": ("headers + Content-Length 100, body `{`, stop", ["body"], SOURCES),
    "drip": ("one byte every 4 s", ["drip"], SOURCES),
    "mix": ("all three kinds from 4 addresses (50 each)", ["head", "body", "drip"], FEW_SOURCES),
}
TLS_KINDS = {  # on the HTTPS listener: head, body and drip after their handshake, and these
    **{kind: KINDS[kind] for kind in ("head", "body", "drip")},
    "handshake": ("TCP open, no TLS handshake", ["handshake"], SOURCES),
    "hello": ("half a TLS ClientHello, stop", ["hello"], SOURCES),
    "mix": ("head, body, drip, no handshake from 4 addresses (50 each)", ["head", "body", "drip", "handshake"],
            FEW_SOURCES),
}


@dataclass
class _Held:
    sock: socket.socket
    kind: str
    opened: float
    sent: int = 0
    next_drip: float = 0.0
    answered: bool = False


class Attacker(BackgroundThread):
    """Holds `count` slow connections to `port` (kinds and sources in turn), re-opening closed ones; with
    `tls`, over TLS (or stalled in its handshake)."""

    def __init__(self, port: int, kinds: list[str], sources: list[str], count: int = CONNS,
                 tls: ssl.SSLContext | None = None) -> None:
        super().__init__("attack-slow")
        self.port, self.kinds, self.sources, self.count, self.tls = port, kinds, sources, count, tls
        self.hello = client_hello(tls) if tls is not None else b""
        self.lifetimes: list[float] = []  # open -> closed by the daemon, seconds
        self.answered = 0  # closed connections that got any answer bytes first
        self.open_failures = 0

    def _open(self, sel: selectors.BaseSelector, i: int) -> None:
        kind = self.kinds[i % len(self.kinds)]
        s = socket.socket()
        try:
            s.bind((self.sources[i % len(self.sources)], 0))
            s.settimeout(5)
            s.connect(("127.0.0.1", self.port))
            if kind == "hello":
                s.sendall(self.hello[:len(self.hello) // 2])
            elif kind != "handshake":
                if self.tls is not None:
                    s = self.tls.wrap_socket(s, server_hostname="localhost")
                body = BODY % report_path().encode()
                s.sendall({"head": HEAD, "body": body, "drip": DRIP[:1]}[kind])
        except OSError:
            s.close()
            self.open_failures += 1
            return
        s.setblocking(False)
        now = time.monotonic()
        held = _Held(s, kind, now, sent=1, next_drip=now + DRIP_EVERY)
        sel.register(s, selectors.EVENT_READ, (i, held))

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        for i in range(self.count):
            self._open(sel, i)
        while not self._stop.is_set():
            for key, _ in sel.select(0.2):
                i, held = key.data
                try:
                    data = held.sock.recv(65536)
                except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    continue  # nothing yet (TLS: a record that held no data, e.g. a session ticket)
                except OSError:
                    data = b""
                if data:
                    held.answered = True
                    continue
                self._closed(sel, held)
                self._open(sel, i)
            now = time.monotonic()
            for key in list(sel.get_map().values()):
                i, held = key.data
                if held.kind == "drip" and now >= held.next_drip and held.sent < len(DRIP):
                    try:
                        held.sock.send(DRIP[held.sent:held.sent + 1])
                        held.sent += 1
                        held.next_drip = now + DRIP_EVERY
                    except OSError:
                        self._closed(sel, held)
                        self._open(sel, i)
        for key in list(sel.get_map().values()):
            key.data[1].sock.close()
        sel.close()

    def _closed(self, sel: selectors.BaseSelector, held: _Held) -> None:
        sel.unregister(held.sock)
        held.sock.close()
        self.lifetimes.append(time.monotonic() - held.opened)
        self.answered += held.answered


class Prober(BackgroundThread):
    """Probes PROBES in turn, each on a fresh connection (with `tls`, HTTPS); keeps (milliseconds, status
    or error)."""

    def __init__(self, port: int, tls: ssl.SSLContext | None = None) -> None:
        super().__init__("attack-probe")
        self.port, self.tls = port, tls
        self.results: list[tuple[float, str]] = []
        self.paths: list[str] = []  # the path of each result

    def _run(self) -> None:
        i = 0
        while not self._stop.wait(0.05):
            path = PROBES[i % len(PROBES)]
            i += 1
            t0 = time.monotonic()
            c = (http.client.HTTPConnection("127.0.0.1", self.port, timeout=PROBE_TIMEOUT) if self.tls is None else
                 http.client.HTTPSConnection("localhost", self.port, timeout=PROBE_TIMEOUT, context=self.tls))
            try:
                c.request("GET", path)
                r = c.getresponse()
                r.read()
                outcome = str(r.status)
            except OSError as e:
                outcome = type(e).__name__
            finally:
                c.close()
            self.results.append(((time.monotonic() - t0) * 1000, outcome))
            self.paths.append(path)

    def latencies(self, path: str) -> list[float]:
        """The latencies of the probes of `path` (milliseconds)."""
        return [t for (t, _), p in zip(self.results, self.paths, strict=False) if p == path]


def _false_fails(cluster: TestCluster, ns: str, stop: threading.Event, seen: list[str]) -> None:
    """Polls the check's state: any recorded failure is a genuine run that false-failed."""
    uuids: set[str] = set()
    while not stop.wait(0.5):
        spec = state_spec(cluster, ns, CHECK)
        if spec.get("OK") is False and str(spec.get("uuid")) not in uuids:
            uuids.add(str(spec.get("uuid")))
            seen.append(f"run {spec.get('uuid')}: {'; '.join(spec.get('Errors') or [])}")


@dataclass
class _Target:
    """The listener under attack: its port, and with TLS the client context and the kinds tried there."""
    port: int
    tls: ssl.SSLContext | None = None

    @property
    def kinds(self) -> dict[str, tuple[str, list[str], list[str]]]:
        return KINDS if self.tls is None else TLS_KINDS

    @property
    def scenario(self) -> str:
        return label("slow" if self.tls is None else "slow-tls")


def _phase(kind: str, daemon: DaemonProcess, sim: SimKubelet, cluster: TestCluster, ns: str, to: _Target) -> Row:
    what, kinds, sources = to.kinds[kind]
    before = set(sim.report_results)
    failed: list[str] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_false_fails, args=(cluster, ns, stop, failed), daemon=True)
    attacker = Attacker(to.port, kinds, sources, tls=to.tls)
    attacker.start()
    time.sleep(1.0)  # the connections are open before the probes start
    prober = Prober(to.port, to.tls)
    prober.start()
    watcher.start()
    time.sleep(HOLD)
    for t in (prober, attacker):
        t.stop()
        t.join(10)
    time.sleep(3.0)  # reports under way finish
    stop.set()
    watcher.join(5)
    reports = [r for k, r in sim.report_results.items() if k not in before and r.outcome is not None
               and r.outcome is not Outcome.CANCELLED]
    accepted = [r for r in reports if r.outcome is Outcome.ACCEPTED]
    first_try = [r for r in accepted if r.attempts == 1]
    latencies = [ms for ms, _ in prober.results]
    bad = [o for _, o in prober.results if o != "200"]
    probe_p99 = percentile(latencies, 99)
    life = attacker.lifetimes
    answered = (f"closed after p50 {statistics.median(life):.1f} s, max {max(life):.1f} s "
                f"({len(life)} closed, {attacker.answered} answered)" if life else "never closed")
    ok = (probe_p99 is not None and not bad and probe_p99 <= P99_TARGET_MS and bool(reports)
          and len(accepted) == len(reports) and not failed)
    notes = [f"{kind}: {len(prober.results)} probes, {len(bad)} not 200 ({sorted(set(bad))}), "
             f"p50 {statistics.median(latencies):.0f} ms, max {max(latencies):.0f} ms; "
             f"{len(accepted)}/{len(reports)} genuine reports accepted ({len(first_try)} at the first attempt); "
             f"failed runs: {failed or 'none'}; attacker connect failures: {attacker.open_failures}",
             f"{kind}: probe p99 by path: "
             + ", ".join(f"{path} {ms(percentile(prober.latencies(path), 99))} ms" for path in PROBES)]
    target = f"probes p99 <= {P99_TARGET_MS:.0f} ms, all 200; all genuine accepted"
    return Row(to.scenario, f"{CONNS} x {what}, {HOLD:.0f} s, {len(sources)} sources", answered, probe_p99,
               f"{len(accepted)}/{len(reports)}", target, ok, notes)


def run(cluster: TestCluster, workdir: Path, tls: bool = False) -> list[Row]:
    """The attack on the daemon's HTTP listener, or (`tls`) on its HTTPS listener."""
    workdir.mkdir(parents=True, exist_ok=True)
    install_crds(cluster)  # idempotent: __main__ starts a bare test bed
    ns = create_namespace(cluster, "atk-slow")
    sim = SimKubelet(str(cluster.kubeconfig), nodes=3, namespace=ns, signing_key=cluster.sa_key)
    sim.start()
    settings: dict[str, object] = {"targetNamespace": ns, "enableForceMaster": True, "logLevel": "info",
                                   "statusPage": {"enabled": True}}
    if tls:
        cert, key = self_signed(workdir / "tls")
        settings.update(tlsCertFile=str(cert), tlsKeyFile=str(key), listenAddressTLS=f"127.0.0.1:{free_port()}")
    daemon = DaemonProcess(cluster, workdir, "kh-slow", ns, settings)
    target = (_Target(int(str(settings["listenAddressTLS"]).rpartition(":")[2]), client_context(cert)) if tls
              else _Target(daemon.port))
    try:
        create_check(cluster, ns, CHECK, "kh-sim/ok", "2s", timeout="30s")
        daemon.start().wait_serving()
        wait_for(lambda: state_spec(cluster, ns, CHECK).get("OK") is True, 60, what="a first good run")
        rows = []
        for kind in target.kinds:
            rows.append(_phase(kind, daemon, sim, cluster, ns, target))
            print(f"   {rows[-1].tried}: {rows[-1].answered}; probe p99 {ms(rows[-1].probe_p99_ms)} ms; "
                  f"genuine {rows[-1].genuine}", flush=True)
            for n in rows[-1].notes:
                print(f"      {n}", flush=True)
        tracebacks = daemon.log().count("Traceback")
        if tracebacks:
            rows[-1].notes.append(f"{tracebacks} tracebacks in the daemon's log ({daemon.log_path})")
            rows[-1].ok = False
        return rows
    finally:
        daemon.stop()
        sim.stop()
