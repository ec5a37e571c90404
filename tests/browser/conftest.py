"""Fixtures of the browser tests: one real daemon on the test bed for the module, its checks run by the
simulated kubelet, and headless chromium (testbed/clients/browser.py) with and without JavaScript.

The checks cover every state the dashboard shows: `alpha-ok` (OK), `bravo-fail` (failing, with errors
and a log tail: the daemon runs with exposeLogs), `delta-run` (OK; the run-now target), and `echo-hang`
(never run: its first run is in flight for the whole module). The daemon also has dashboardAtRoot on.
Skips, with what to install, only when chromium, chromedriver or selenium cannot be found.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests

from testbed.clients import browser
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khc, khcheck, khs
from testbed.cluster.objects import create_namespace
from testbed.daemons.process import DaemonProcess
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

ERRORS = ("disk /var is 97% full", "inode table <full>")  # bravo-fail's
CHECKS = {
    "alpha-ok": ("kh-sim/ok", {}, "20s"),
    "bravo-fail": ("kh-sim/fail", {"SIM_ERRORS": "|".join(ERRORS)}, "20s"),
    "delta-run": ("kh-sim/slow", {"SIM_DELAY": "0.5"}, "20s"),
    "echo-hang": ("kh-sim/hang-silent", {}, "10m"),
}


@dataclass
class Bed:
    cluster: TestCluster
    namespace: str
    daemon: DaemonProcess

    @property
    def url(self) -> str:
        return self.daemon.url

    def checks(self) -> dict[str, dict[str, Any]]:
        body = requests.get(self.url + "/api/checks", timeout=5).json()
        return {c["name"]: c for c in body["checks"] if c["kind"] == "check"}


def _settled(bed: Bed) -> bool:
    c = bed.checks()
    return (len(c) == len(CHECKS) and c["alpha-ok"]["state"] == "ok" and c["bravo-fail"]["state"] == "failing"
            and c["delta-run"]["state"] == "ok" and c["echo-hang"]["currentRun"] is not None
            and all(c[n]["currentRun"] is None for n in ("alpha-ok", "bravo-fail", "delta-run")))


@pytest.fixture(name="browser_missing", scope="session")
def browser_missing_fixture() -> None:
    reason = browser.missing()
    if reason:
        pytest.skip(f"browser tests need headless chromium: {reason}")


@pytest.fixture(name="bed", scope="module")
def bed_fixture(browser_missing: None, cluster: TestCluster, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[Bed]:
    namespace = create_namespace(cluster, "browser")
    kubelet = SimKubelet(str(cluster.kubeconfig), nodes=2, namespace=namespace)
    kubelet.start()
    daemon = DaemonProcess(cluster, tmp_path_factory.mktemp("browser"), "kh-browser-0", namespace,
                           {"targetNamespace": namespace, "enableForceMaster": True, "exposeLogs": True,
                            "dashboardAtRoot": True, "logLevel": "info"})
    try:
        for name, (image, env, timeout) in CHECKS.items():
            cluster.request("POST", khc(namespace), khcheck(name, image, interval="1h", timeout=timeout, env=env))
        daemon.start().wait_serving()
        bed = Bed(cluster, namespace, daemon)
        wait_for(lambda: _settled(bed), timeout=60, interval=0.2, what="every check in its expected state")
        yield bed
    finally:
        daemon.stop()
        kubelet.stop()
        # Leave no failing check behind: later tests (the contract's) run daemons that watch every namespace.
        for path in (khc, khs):
            for obj in cluster.request("GET", path(namespace))["items"]:
                cluster.request("DELETE", path(namespace, obj["metadata"]["name"]))


@pytest.fixture(name="driver", scope="module")
def driver_fixture(browser_missing: None) -> Iterator[Any]:
    d = browser.chrome()
    try:
        yield d
    finally:
        d.quit()


@pytest.fixture(name="phone", scope="module")
def phone_fixture(browser_missing: None) -> Iterator[Any]:
    d = browser.chrome(*browser.PHONE)
    try:
        yield d
    finally:
        d.quit()


@pytest.fixture(name="no_js_driver", scope="module")
def no_js_driver_fixture(browser_missing: None) -> Iterator[Any]:
    d = browser.chrome(javascript=False)
    try:
        yield d
    finally:
        d.quit()


@pytest.fixture(autouse=True)
def no_console_errors(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every browser test fails on a console error (a script error, a failed load, a CSP violation)."""
    drivers = [request.getfixturevalue(n) for n in ("driver", "no_js_driver") if n in request.fixturenames]
    for d in drivers:
        browser.console_errors(d)  # start clean
    yield
    for d in drivers:
        assert browser.console_errors(d) == []
