"""A fault bed: the real test bed, the simulated kubelet, the daemon as real processes, observers, and
the faults of docs/interface.md#under-faults (an API server that restarts, freezes, lags or is
unreachable), each measured from the outside.

Used by bench/faults_bench.py (`make faults`, the full scenarios) and tests/integration/test_faults.py (short
regression versions); verdict.evaluate(bed, ...) turns what the bed observed into an Outcome. Every
checker reports OK, so an OK:false khstate write is a false alarm. The evidence comes from the
observers in observe.py (audit log, pod watch, HTTP polls), never from the product's own state.
Everything a scenario produced stays in its work dir: the daemon logs (`<replica>.log`), the API
server log and audit log (`cluster/`), `bed.log` (simulated kubelet, observers) and `timeline.txt`.

It does not judge performance beyond the "within N seconds" promises of docs/interface.md#under-faults.
"""
from __future__ import annotations

import logging
import signal
import time
import urllib.error
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.cluster.apiserver import ADMIN_TOKEN, TestCluster, kubeconfig_text, start_cluster
from testbed.cluster.builders import khc, khcheck
from testbed.cluster.crds import install_crds
from testbed.cluster.objects import create_namespace, lease_holder
from testbed.daemons.process import DaemonProcess
from testbed.faults.observe import AuditTail, EndpointPoller, PodObserver, StatusPageFailures
from testbed.faults.tcpproxy import TcpProxy
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

RECOVERY_LIMIT = 60.0  # seconds: "a good run again at its first due time" (#under-faults), short intervals

logger = logging.getLogger(__name__)

LEASE_NAME = "kuberhealthy"


@dataclass
class BedSettings:
    """What the bed runs. Intervals and timeouts are Go durations, as in a khcheck."""

    checks: int = 12
    interval: str = "12s"
    timeout: str = "30s"
    delays: tuple[float, ...] = (1.0, 1.5, 2.0)  # SIM_DELAY of kh-sim/slow, cycled over the checks
    replicas: int = 1
    api_via_proxy: bool = False  # the daemons reach the API server through a TcpProxy (the stall fault)
    reports_via_service: bool = False  # checker pods report through a proxy to any live replica
    force_master: bool = True  # enableForceMaster (one replica); False: Lease election (always with 2+)
    daemon_settings: dict[str, Any] = field(default_factory=dict)
    log_level: int = logging.DEBUG  # of the simulator and observers, in bed.log (pytest shows it on failure)


class FaultBed:
    """start() builds everything and waits for a good run of every check; stop() tears it all down
    (always call it: it thaws a frozen API server and ends every process and thread it started)."""

    def __init__(self, workdir: Path, settings: BedSettings | None = None, namespace: str = "faults") -> None:
        self.workdir = workdir
        self.s = settings or BedSettings()
        self.ns = namespace
        self.cluster: TestCluster | None = None
        self.api_proxy: TcpProxy | None = None
        self.service: TcpProxy | None = None
        self.sim: SimKubelet | None = None
        self.pods: PodObserver | None = None
        self.audit: AuditTail | None = None
        self.daemons: dict[str, DaemonProcess] = {}
        self.killed: set[str] = set()
        self.pollers: dict[str, tuple[EndpointPoller, EndpointPoller]] = {}
        self.status_failures = StatusPageFailures()
        self.checks = [f"{namespace}/c{i:02d}" for i in range(1, self.s.checks + 1)]
        self.t_start = time.time()
        self.timeline: list[tuple[float, str]] = []
        self._log_handler: logging.Handler | None = None
        self._log_saved: tuple[int, bool] = (logging.NOTSET, True)

    # --- set-up -------------------------------------------------------------------------------------

    def mark(self, what: str) -> float:
        now = time.time()
        self.timeline.append((now, what))
        logger.info("timeline: %s", what)
        return now

    def start(self, warmup_timeout: float = 120.0) -> FaultBed:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._log_handler = logging.FileHandler(self.workdir / "bed.log")
        self._log_handler.setFormatter(
            logging.Formatter("%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s"))
        # The simulator's and observers' logs go to bed.log, not to the console (pytest still captures them).
        ours = logging.getLogger("testbed")
        self._log_saved = (ours.level, ours.propagate)
        ours.addHandler(self._log_handler)
        ours.setLevel(self.s.log_level)
        ours.propagate = False
        self.cluster = c = start_cluster(workdir=self.workdir / "cluster")
        install_crds(c)
        create_namespace(c, name=self.ns)
        self.audit = AuditTail(c.audit_log, self.ns)
        self.pods = PodObserver(c.server, ADMIN_TOKEN, self.ns).start()
        self.sim = SimKubelet(str(c.kubeconfig), nodes=3, namespace=self.ns).start()
        kubeconfig = c.kubeconfig
        if self.s.api_via_proxy:
            self.api_proxy = TcpProxy(("127.0.0.1", c.api_port)).start()
            kubeconfig = self.workdir / "kubeconfig-via-proxy"
            kubeconfig.write_text(kubeconfig_text(f"https://127.0.0.1:{self.api_proxy.port}", ADMIN_TOKEN, self.ns))
        names = [f"kh-{chr(ord('a') + i)}" for i in range(self.s.replicas)]
        forced = self.s.force_master and self.s.replicas == 1
        for name in names:
            settings = {"targetNamespace": self.ns, "enableForceMaster": forced, **self.s.daemon_settings}
            self.daemons[name] = DaemonProcess(c, self.workdir, name, self.ns, settings, kubeconfig=kubeconfig)
        if self.s.reports_via_service:
            self.service = TcpProxy(*[("127.0.0.1", d.port) for d in self.daemons.values()]).start()
        for d in self.daemons.values():
            target = f"http://127.0.0.1:{self.service.port}" if self.service else d.url
            d.set_reporting_url(target + "/externalCheckStatus")
        for i, name in enumerate(names):
            self.daemons[name].start()
            self.daemons[name].wait_serving("/healthz")
            if i == 0 and not forced:
                wait_for(lambda: self.leader() == names[0], 60, interval=0.25, what=f"{names[0]} to take the Lease")
        for i, check in enumerate(self.checks):
            name = check.split("/", 1)[1]
            delay = self.s.delays[i % len(self.s.delays)]
            c.request("POST", khc(self.ns), khcheck(name, "kh-sim/slow", self.s.interval, self.s.timeout,
                                                    env={"SIM_DELAY": str(delay)}))
        self.mark("checks created")
        missing = self.wait_good_runs(self.t_start, warmup_timeout)
        if missing:
            raise RuntimeError(f"warm-up: no good run within {warmup_timeout}s for {missing}; see {self.workdir}")
        self.mark("warm-up done: every check has a good run")
        for name, d in self.daemons.items():
            self.pollers[name] = (EndpointPoller(d.url + "/", on_body=self.status_failures).start(),
                                  EndpointPoller(d.url + "/healthz").start())
        return self

    # --- what the scenarios ask -----------------------------------------------------------------------

    def leader(self) -> str:
        assert self.cluster is not None
        try:
            return lease_holder(self.cluster, self.ns, LEASE_NAME) or ""
        except (urllib.error.URLError, OSError, ValueError):  # the API server is down or frozen
            return ""

    def first_good_after(self, since: float) -> dict[str, float]:
        assert self.audit is not None
        self.audit.poll()
        good = self.audit.good_runs()
        out: dict[str, float] = {}
        for check in self.checks:
            after = [t for t in good.get(check, []) if t >= since]
            if after:
                out[check] = min(after)
        return out

    def wait_good_runs(self, since: float, limit: float) -> list[str]:
        """Wait until every check has a good run written at or after `since`; the ones still missing."""
        deadline = time.monotonic() + limit
        while True:
            missing = [c for c in self.checks if c not in self.first_good_after(since)]
            if not missing or time.monotonic() > deadline:
                return missing
            time.sleep(0.5)

    def wait_mid_runs(self, limit: float = 20.0, at_least: int = 2) -> bool:
        """Wait until at least `at_least` checker pods are live, so a fault hits runs in flight."""
        assert self.pods is not None
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.pods.live_now() >= at_least:
                return True
            time.sleep(0.1)
        return False

    def observe_recovery(self, fault_end: float, settle: float, limit: float = RECOVERY_LIMIT + 15) -> None:
        """Keep observing until every check recorded a good run after fault_end and `settle` seconds
        have passed (late failures of runs caught by the fault show up within their timeout), or until
        `limit` seconds after fault_end."""
        end_by = fault_end + max(limit, settle)
        while time.time() < end_by:
            recovered = not [c for c in self.checks if c not in self.first_good_after(fault_end)]
            if recovered and time.time() >= fault_end + settle:
                break
            time.sleep(0.5)

    def kill_daemon(self, name: str) -> None:
        """SIGKILL one replica (its process group); its HTTP polls end here, as it is meant to be gone."""
        for p in self.pollers.get(name, ()):
            p.stop()
        self.killed.add(name)
        self.daemons[name].kill9()

    def rewrite_config(self, name: str, changes: dict[str, Any]) -> None:
        d = self.daemons[name]
        for key, value in changes.items():
            if isinstance(value, dict):
                d.settings.setdefault(key, {}).update(value)
            else:
                d.settings[key] = value
        d.write_config()

    # --- tear-down ------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop everything started, in reverse order; each step runs even if an earlier one failed."""
        steps: list[tuple[str, Any]] = []
        for name, pair in self.pollers.items():
            for p in pair:
                steps.append((f"poller {name}", p.stop))
        if self.cluster is not None:
            steps.append(("thaw", self.cluster.thaw))
        if self.api_proxy is not None:
            steps.append(("resume proxy", self.api_proxy.resume))
        for d in self.daemons.values():
            steps.append((f"daemon {d.name}", d.stop))
        if self.service is not None:
            steps.append(("service proxy", self.service.stop))
        if self.sim is not None:
            steps.append(("simulated kubelet", self.sim.stop))
        if self.pods is not None:
            steps.append(("pod observer", self.pods.stop))
        if self.api_proxy is not None:
            steps.append(("API proxy", self.api_proxy.stop))
        if self.cluster is not None:
            steps.append(("cluster", self.cluster.stop))
        for what, fn in steps:
            try:
                fn()
            except Exception:  # keep tearing down; the log says what failed
                logger.exception("tear-down of %s failed", what)
        self._write_timeline()
        if self._log_handler is not None:
            ours = logging.getLogger("testbed")
            ours.removeHandler(self._log_handler)
            ours.setLevel(self._log_saved[0])
            ours.propagate = self._log_saved[1]
            self._log_handler.close()

    def _write_timeline(self) -> None:
        lines = [f"{time.strftime('%H:%M:%S', time.localtime(t))}.{int(t % 1 * 1000):03d} {what}"
                 for t, what in self.timeline]
        (self.workdir / "timeline.txt").write_text("\n".join(lines) + "\n")


# --- the faults (each returns (fault start, fault end) as time.time()) -------------------------------

def _other_writers(bed: FaultBed) -> None:
    """While the API server is down, etcd moves on (other writers of a real cluster): after the
    restart every watch resumed from an old resourceVersion gets 410 Gone and must re-list."""
    assert bed.cluster is not None
    bed.mark(f"etcd revision advanced to {bed.cluster.advance_etcd_revision(3)} behind the API server's back")


def _api_down(bed: FaultBed, down: float, sig: signal.Signals, how: str) -> tuple[float, float]:
    """End the API server with `sig`, keep it down `down` seconds, start it again on the same etcd/port."""
    assert bed.cluster is not None
    t0 = bed.mark(f"fault: {how} the API server")
    bed.cluster.stop_apiserver(sig)
    _other_writers(bed)
    time.sleep(max(0.0, down - (time.time() - t0)))
    bed.mark("fault: starting the API server again")
    bed.cluster.start_apiserver()
    return t0, bed.mark("fault over: API server ready")


def fault_api_kill(bed: FaultBed, down: float) -> tuple[float, float]:
    """SIGKILL the API server mid-runs, start it again `down` seconds later on the same etcd/port."""
    return _api_down(bed, down, signal.SIGKILL, "SIGKILL")


def fault_api_stop(bed: FaultBed, down: float) -> tuple[float, float]:
    """Stop the API server gracefully (SIGTERM) and keep it down for `down` seconds."""
    return _api_down(bed, down, signal.SIGTERM, "SIGTERM")


def fault_api_freeze(bed: FaultBed, seconds: float) -> tuple[float, float]:
    """SIGSTOP the API server for `seconds`: connections stay open, nothing answers."""
    assert bed.cluster is not None
    t0 = bed.mark("fault: SIGSTOP the API server")
    bed.cluster.freeze()
    try:
        time.sleep(seconds)
    finally:
        bed.cluster.thaw()
    return t0, bed.mark("fault over: API server thawed (SIGCONT)")


def fault_proxy_stall(bed: FaultBed, seconds: float, blackhole_old: bool = True) -> tuple[float, float]:
    """The path between the daemons and the API server goes silent for `seconds`; then new connections
    work while (with blackhole_old) the old ones stay silent for good."""
    assert bed.api_proxy is not None
    t0 = bed.mark("fault: proxy to the API server stalls")
    bed.api_proxy.stall()
    try:
        time.sleep(seconds)
    finally:
        bed.api_proxy.resume(blackhole_old=blackhole_old)
    old = " (old ones stay silent)" if blackhole_old else ""
    return t0, bed.mark(f"fault over: proxy forwards new connections{old}")


def fault_leader_kill(bed: FaultBed) -> tuple[float, float]:
    """SIGKILL the replica holding the Lease; a standby must take over."""
    leader = bed.leader()
    if leader not in bed.daemons:
        raise RuntimeError(f"no replica of ours holds the Lease (holder {leader!r})")
    t0 = bed.mark(f"fault: SIGKILL the leader {leader}")
    bed.kill_daemon(leader)
    return t0, t0


def fault_config_reload(bed: FaultBed, gap: float = 8.0) -> tuple[float, float]:
    """Rewrite every replica's config file twice, `gap` seconds apart, with harmless changes."""
    t0 = bed.mark("fault: config rewritten (maxCheckPodAge 48h, errorLabelMaxLength 200)")
    for name in bed.daemons:
        bed.rewrite_config(name, {"maxCheckPodAge": "48h", "promMetricsConfig": {"errorLabelMaxLength": 200}})
    time.sleep(gap)
    for name in bed.daemons:
        bed.rewrite_config(name, {"maxCheckPodAge": "24h", "promMetricsConfig": {"errorLabelMaxLength": 100}})
    return t0, bed.mark("fault over: config rewritten again (maxCheckPodAge 24h, errorLabelMaxLength 100)")
