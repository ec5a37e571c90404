"""The daemon as users run it: leader election across processes, per-check reconcile, shutdown, config errors."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from kuberhealthy.daemon.server import _dual_stack
from kuberhealthy.kube import KHCHECKS, KHSTATES, LEASES
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import MERGE_PATCH, khcheck
from testbed.cluster.objects import lease_holder as holder_of
from testbed.cluster.objects import state_spec
from testbed.cluster.podmonitor import LivePodMonitor
from testbed.daemons.inprocess import InProcessDaemon
from testbed.daemons.process import DaemonProcess, console_script
from testbed.paths import REPO
from testbed.pytest_plugin import Daemons
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

LEASE = "kh-test"
FAST_ELECTION = {"leaseName": LEASE, "leaseDuration": "6s", "renewDeadline": "4s", "retryPeriod": "1s"}


@pytest.fixture
def daemon_settings() -> dict[str, Any]:
    return {"stateReaperInterval": "500ms", "checkChangeDebounce": "1s"}


def lease_holder(cluster: TestCluster, ns: str) -> str:
    return holder_of(cluster, ns, LEASE) or ""


def completed_by(cluster: TestCluster, ns: str, name: str) -> str:
    """Who recorded the last completed run (RunDuration is written at its end), or ""."""
    spec = state_spec(cluster, ns, name)
    return str(spec.get("AuthoritativePod") or "") if spec.get("RunDuration") else ""


def authoritative(cluster: TestCluster, ns: str, name: str) -> str:
    return str(state_spec(cluster, ns, name).get("AuthoritativePod") or "")


Replicas = Callable[[str, str | None], DaemonProcess]


@pytest.fixture
def replicas(namespace: str, kubelet: SimKubelet, daemons: Daemons) -> Replicas:
    """`replicas(name, report_to)`: a daemon process electing itself with FAST_ELECTION, reporting to
    `report_to` (another replica's URL) or to itself."""
    def make(name: str, report_to: str | None) -> DaemonProcess:
        p = daemons(name, {"targetNamespace": namespace, "leaderElection": FAST_ELECTION})
        if report_to is not None:
            p.set_reporting_url(report_to + "/externalCheckStatus")
        return p
    return make


@pytest.mark.parametrize("how", ["kill9", "sigterm"])
def test_one_replica_leads_and_a_standby_takes_over_without_ever_running_a_check_twice(
        cluster: TestCluster, namespace: str, replicas: Replicas, how: str) -> None:
    cluster.request("POST", KHCHECKS.path(namespace), khcheck("pulse", interval="2s"))
    monitor = LivePodMonitor(str(cluster.kubeconfig), namespace).start()
    try:
        b = replicas("kh-b", None)  # every report goes to kh-b, the replica that survives in both scenarios
        a = replicas("kh-a", b.url)
        a.start()
        wait_for(lambda: lease_holder(cluster, namespace) == "kh-a", 60, what="kh-a leads")
        b.start()
        wait_for(lambda: authoritative(cluster, namespace, "pulse") == "kh-a", 60, what="kh-a runs the check")
        assert lease_holder(cluster, namespace) == "kh-a"
        if how == "kill9":
            a.kill9()
        else:
            a.signal(signal.SIGTERM)
            assert a.wait(60) == 0
            holder = lease_holder(cluster, namespace)
            assert holder in ("", "kh-b"), f"lease not released: {holder}"
        wait_for(lambda: lease_holder(cluster, namespace) == "kh-b", 60, what="kh-b takes the lease")
        wait_for(lambda: authoritative(cluster, namespace, "pulse") == "kh-b", 60, what="kh-b runs the check")
        state = cluster.request("GET", KHSTATES.path(namespace, "pulse"))["spec"]
        wait_for(lambda: cluster.request("GET", KHSTATES.path(namespace, "pulse"))["spec"]["uuid"] != state["uuid"],
                 60, what="another run by kh-b")
    finally:
        monitor.stop()
    assert monitor.max_live["pulse"] == 1, f"two live checker pods at once: {dict(monitor.max_live)}"
    assert len(monitor.creators) >= 2


def test_editing_one_check_restarts_only_that_check(cluster: TestCluster, namespace: str,
                                                    daemon: InProcessDaemon) -> None:
    cluster.request("POST", KHCHECKS.path(namespace), khcheck("edited", interval="1s"))
    cluster.request("POST", KHCHECKS.path(namespace), khcheck("steady", "kh-sim/slow", "1s", env={"SIM_DELAY": "0.5"}))
    ctl = daemon.services.controller
    wait_for(lambda: {f"{namespace}/edited", f"{namespace}/steady"} <= set(ctl.workers), what="both checks running")
    steady, edited = ctl.workers[f"{namespace}/steady"], ctl.workers[f"{namespace}/edited"]
    wait_for(lambda: steady.runs >= 1, what="a steady run")
    cluster.request("PATCH", KHCHECKS.path(namespace, "edited"), {"spec": {"runInterval": "3s"}},
                    content_type=MERGE_PATCH)
    wait_for(lambda: ctl.workers.get(f"{namespace}/edited") not in (None, edited), what="edited restarted")
    assert ctl.workers[f"{namespace}/steady"] is steady and steady.is_alive()
    assert ctl.workers[f"{namespace}/edited"].spec.run_interval == 3
    runs = steady.runs
    wait_for(lambda: steady.runs > runs, what="steady keeps running")


def test_deleting_a_check_stops_it_and_its_khstate_is_reaped(cluster: TestCluster, namespace: str,
                                                              daemon: InProcessDaemon) -> None:
    cluster.request("POST", KHCHECKS.path(namespace), khcheck("doomed", interval="1s"))
    wait_for(lambda: authoritative(cluster, namespace, "doomed"), what="doomed ran")
    cluster.request("DELETE", KHCHECKS.path(namespace, "doomed"))
    wait_for(lambda: f"{namespace}/doomed" not in daemon.services.controller.workers, what="worker stopped")
    wait_for(lambda: daemon.services.khstates.get(namespace, "doomed") is None, what="khstate reaped")


def test_checks_added_in_a_burst_are_reconciled_at_most_once_per_debounce(
        cluster: TestCluster, namespace: str, daemon: InProcessDaemon) -> None:
    ctl = daemon.services.controller
    cluster.request("POST", KHCHECKS.path(namespace), khcheck("first", interval="1h"))
    wait_for(lambda: f"{namespace}/first" in ctl.workers, what="first started")
    t_first = time.monotonic()
    reconciles = ctl.reconciles
    cluster.request("POST", KHCHECKS.path(namespace), khcheck("second", interval="1h"))
    cluster.request("POST", KHCHECKS.path(namespace), khcheck("third", interval="1h"))
    wait_for(lambda: {f"{namespace}/second", f"{namespace}/third"} <= set(ctl.workers), what="burst started")
    assert time.monotonic() - t_first >= 0.9  # the debounce (1s) spaced the reconciliations
    assert ctl.reconciles - reconciles <= 2


def run_cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([console_script(), *args], cwd=REPO, capture_output=True,
                          check=False, text=True, timeout=60, env=dict(os.environ, **(env or {})))


@pytest.mark.parametrize(("yaml_text", "key"), [
    ("maxCheckPodAge: forever\n", "maxCheckPodAge"),
    ("listenAddress: nowhere\n", "listenAddress"),
    ("leaderElection:\n  renewDeadline: 1m\n", "leaderElection.leaseDuration"),
    ("logLevel: [1, 2\n", "not valid YAML"),
])
def test_a_bad_config_value_stops_start_up_with_one_line_naming_the_key(tmp_path: Path, yaml_text: str,
                                                                        key: str) -> None:
    f = tmp_path / "kh.yaml"
    f.write_text(yaml_text)
    out = run_cli(["--config", str(f)])
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and lines[0].startswith("kuberhealthy: error:")


def test_a_missing_kubeconfig_stops_start_up_with_one_line(tmp_path: Path) -> None:
    f = tmp_path / "kh.yaml"
    f.write_text("listenAddress: 127.0.0.1:0\n")
    out = run_cli(["--config", str(f)], {"KUBECONFIG": str(tmp_path / "missing"), "KUBERNETES_SERVICE_HOST": ""})
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "KUBECONFIG" in out.stderr


def test_help_documents_every_flag() -> None:
    out = run_cli(["--help"])
    assert out.returncode == 0
    for flag in ("--config", "-c", "--debug", "-d", "--kubeconfig", "--version"):
        assert flag in out.stdout


def test_a_core_thread_that_dies_brings_the_daemon_to_a_stop(cluster: TestCluster, namespace: str,
                                                              daemon: InProcessDaemon) -> None:
    class Crash(BaseException):  # what no loop top catches: the thread ends
        pass

    def crash(*_: object, **__: object) -> bool:
        raise Crash()

    cache = daemon.services.khstates
    assert not daemon.services.fatal.is_set()
    cache._watch = crash  # type: ignore[method-assign]  # the next watch of this cache ends its thread
    cache._relist = crash  # type: ignore[method-assign]
    if cache._stream is not None:
        daemon.services.kube.shutdown_stream(cache._stream)  # end the current watch now
    assert daemon.services.fatal.wait(30)
    assert daemon.services.deaths.names() == [cache.name]


def test_sigterm_removes_the_running_checker_pod_and_releases_the_lease(
        cluster: TestCluster, namespace: str, replicas: Replicas) -> None:
    cluster.request("POST", KHCHECKS.path(namespace), khcheck("stuck", "kh-sim/hang-silent", "1h", timeout="5m"))
    a = replicas("kh-a", None).start()
    pods = f"/api/v1/namespaces/{namespace}/pods"
    wait_for(lambda: [p for p in cluster.request("GET", pods)["items"]
                      if p.get("status", {}).get("phase") == "Running"], 60, what="a running checker pod")
    a.signal(signal.SIGTERM)
    assert a.wait(60) == 0
    assert cluster.request("GET", pods)["items"] == []
    assert lease_holder(cluster, namespace) == ""
    assert "Released Lease" in a.log()


@pytest.fixture
def slow_stopping_leader(cluster: TestCluster, namespace: str, replicas: Replicas) -> Iterator[DaemonProcess]:
    """A leader that has completed a run and whose graceful stop takes seconds: its InfluxDB accepts
    connections but never answers, so the forwarder's flush blocks during the stop."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        cluster.request("POST", KHCHECKS.path(namespace), khcheck("pulse", "kh-sim/ok", "1h"))
        a = replicas("kh-a", None)
        a.settings.update(enableInflux=True, influxURL=f"http://127.0.0.1:{silent.getsockname()[1]}", influxDB="kh")
        a.write_config()
        a.start()
        wait_for(lambda: completed_by(cluster, namespace, "pulse") == "kh-a", 60, what="a completed run")
        yield a


def test_a_second_sigterm_exits_at_once(slow_stopping_leader: DaemonProcess) -> None:
    a = slow_stopping_leader  # the second signal deterministically arrives during the slow stop
    a.signal(signal.SIGTERM)
    wait_for(lambda: "Handling signal: term" in a.log(), 30, what="the first signal handled")
    a.signal(signal.SIGTERM)
    assert a.wait(60) == 1  # the graceful path exits 0; the second signal ends the process at once


def test_a_bare_port_serves_ipv4_and_ipv6_callers(namespace: str, daemons: Daemons) -> None:
    p = daemons("kh-dual", {"targetNamespace": namespace, "enableForceMaster": True})
    p.settings["listenAddress"] = f":{p.port}"
    p.write_config()
    p.start().wait_serving("/healthz")  # over IPv4
    if _dual_stack():
        assert requests.get(f"http://[::1]:{p.port}/healthz", timeout=5).status_code == 200


def test_a_changed_config_file_is_applied_without_a_restart_and_a_bad_one_is_ignored(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, daemons: Daemons) -> None:
    cluster.request("POST", KHCHECKS.path(namespace), khcheck("pulse", "kh-sim/ok", "1s"))
    p = daemons("kh-reload", {"targetNamespace": namespace, "enableForceMaster": True}).start()
    wait_for(lambda: authoritative(cluster, namespace, "pulse") == "kh-reload", 60, what="a first run")
    p.config_path.write_text(yaml.safe_dump({**p.settings, "maxCompletedPodCount": 1}))
    wait_for(lambda: "changed; applying it" in p.log(), 60, what="the reload")
    uuid_after = cluster.request("GET", KHSTATES.path(namespace, "pulse"))["spec"]["uuid"]
    wait_for(lambda: cluster.request("GET", KHSTATES.path(namespace, "pulse"))["spec"]["uuid"] != uuid_after,
             60, what="runs continue on the new config")
    p.config_path.write_text("maxCheckPodAge: forever\n")
    wait_for(lambda: "keeping the running config" in p.log(), 60, what="the bad file to be refused")
    assert p.proc is not None and p.proc.poll() is None
    assert requests.get(p.url + "/healthz", timeout=5).status_code == 200


def test_a_config_reload_keeps_the_lease_and_the_running_checks_and_defers_restart_only_keys(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, daemons: Daemons) -> None:
    cluster.request("POST", KHCHECKS.path(namespace), khcheck("steady", "kh-sim/slow", "2s", env={"SIM_DELAY": "1"}))
    p = daemons("kh-live", {"targetNamespace": namespace, "leaderElection": FAST_ELECTION, "logLevel": "info"})
    p.start()
    wait_for(lambda: lease_holder(cluster, namespace) == "kh-live", 60, what="leadership")
    wait_for(lambda: completed_by(cluster, namespace, "steady") == "kh-live", 60, what="a first run")
    before = cluster.request("GET", LEASES.path(namespace, LEASE))["spec"]
    changed = {**p.settings, "maxCompletedPodCount": 1, "logLevel": "debug",
               "leaderElection": {**FAST_ELECTION, "retryPeriod": "2s"}, "listenAddress": "127.0.0.1:1"}
    p.config_path.write_text(yaml.safe_dump(changed))
    wait_for(lambda: "Applied the new config live" in p.log(), 60, what="the live reload")
    log = p.log()
    assert "leaderElection changed; it takes effect after a restart" in log
    assert "listenAddress changed; it takes effect after a restart" in log
    assert "Not leading" not in log and "Released Lease" not in log  # leadership never handed over
    after = cluster.request("GET", LEASES.path(namespace, LEASE))["spec"]
    assert after["holderIdentity"] == "kh-live"
    assert (after["acquireTime"], after.get("leaseTransitions")) == (before["acquireTime"],
                                                                     before.get("leaseTransitions"))
    uuid_now = cluster.request("GET", KHSTATES.path(namespace, "steady"))["spec"]["uuid"]
    wait_for(lambda: cluster.request("GET", KHSTATES.path(namespace, "steady"))["spec"]["uuid"] != uuid_now,
             60, what="runs continue")
    assert f"Check {namespace}/steady changed: restarting" not in p.log()
    assert requests.get(p.url + "/healthz", timeout=5).status_code == 200  # still on the old address


def test_the_web_server_keeps_answering_until_the_checks_have_stopped(slow_stopping_leader: DaemonProcess) -> None:
    # The status page and report endpoint stay up through the slow stop, and only then the process
    # exits (docs/interface.md#shutdown's order).
    a = slow_stopping_leader
    a.signal(signal.SIGTERM)
    wait_for(lambda: "Stopping services" in a.log(), 30, what="the stop to begin")
    assert requests.get(a.url + "/healthz", timeout=5).status_code == 200
    assert requests.get(a.url + "/", timeout=5).status_code == 200
    assert a.wait(90) == 0


def test_core_threads_ended_by_a_stop_are_not_taken_for_a_crash(cluster: TestCluster, namespace: str) -> None:
    # The supervisor may look just as stop() ends the threads (it did, and killed a config reload).
    d = InProcessDaemon(cluster, namespace).start()
    d.stop()
    assert not d.services.controller.is_alive()  # the core threads really are gone
    assert d.services.check_deaths() is False
    assert not d.services.fatal.is_set()
