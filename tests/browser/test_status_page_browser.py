"""The status page (`/status`) in headless chromium against a real daemon on the test bed: groups from the
label kuberhealthy.io/status-group with their states in words, every check of both kinds with its state and
its 30-day bar (history seeded through the state objects: the khstates' spec.rollups, a HealthCheck's
status.rollups), error texts (this daemon has showErrors on), readable in the light and the dark theme,
at a desktop's and a phone's width, nothing loaded from another origin, never a console error.
Screenshots of both widths are kept (their paths are printed; KH_SCREENSHOT_DIR sets where)."""
from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests

from testbed.clients.browser import INSTALL, color_scheme, console_errors, low_contrast, screenshot, shots_dir
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import MERGE_PATCH, container, hcs, khc, khcheck, khs
from testbed.cluster.objects import create_namespace
from testbed.daemons.process import DaemonProcess
from testbed.fakes.world import days_of_runs
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

pytest.importorskip("selenium", reason=f"browser tests need selenium: {INSTALL}")
from selenium.webdriver.common.by import By

GROUP = "kuberhealthy.io/status-group"
ERROR = "upstream 10.0.0.7:443 refused <TLS>"
# name: (kind, image, group, 30 days oldest first: o OK, d degraded, f failing, p paused, - no data)
CHECKS: dict[str, tuple[str, str, str | None, str]] = {
    "api-gateway": ("khcheck", "kh-sim/ok", "public-apis", "o" * 30),
    "dns": ("khcheck", "kh-sim/ok", "network", "o" * 12 + "d" + "o" * 10 + "pp" + "o" * 5),
    "ingress": ("healthcheck", "kh-sim/fail", "network", "o" * 20 + "d" + "o" * 6 + "fff"),
    "disk": ("khcheck", "kh-sim/ok", "storage", "o" * 8 + "f" + "o" * 21),
    "web": ("khcheck", "kh-sim/ok", None, "-" * 20 + "o" * 10),
}


@dataclass
class Bed:
    cluster: TestCluster
    namespace: str
    daemon: DaemonProcess

    @property
    def url(self) -> str:
        return self.daemon.url


def _create(cluster: TestCluster, ns: str, name: str, kind: str, image: str, group: str | None) -> None:
    env = {"SIM_ERRORS": ERROR} if image == "kh-sim/fail" else None
    if kind == "khcheck":
        body = khcheck(name, image, "1h", timeout="20s", env=env)
        path = khc(ns)
    else:
        body = {"apiVersion": "kuberhealthy.github.io/v2", "kind": "HealthCheck", "metadata": {"name": name},
                "spec": {"runInterval": "1h", "timeout": "20s",
                         "podSpec": {"spec": {"containers": [container(image, env=env)], "restartPolicy": "Never"}}}}
        path = hcs(ns)
    if group is not None:
        body["metadata"]["labels"] = {GROUP: group}
    cluster.request("POST", path, body)


def _settled(bed: Bed) -> bool:
    checks = requests.get(bed.url + f"/api/checks?namespace={bed.namespace}", timeout=5).json()["checks"]
    states = {c["name"]: c["state"] for c in checks if c["currentRun"] is None}
    return states == {n: ("failing" if c[1] == "kh-sim/fail" else "ok") for n, c in CHECKS.items()}


@pytest.fixture(name="status_bed", scope="module")
def status_bed_fixture(browser_missing: None, cluster: TestCluster, tmp_path_factory: pytest.TempPathFactory
                       ) -> Iterator[Bed]:
    ns = create_namespace(cluster, "status-page")
    kubelet = SimKubelet(str(cluster.kubeconfig), nodes=2, namespace=ns)
    kubelet.start()
    daemon = DaemonProcess(cluster, tmp_path_factory.mktemp("status-page"), "kh-status-0", ns,
                           {"targetNamespace": ns, "enableForceMaster": True, "logLevel": "info",
                            "statusPage": {"enabled": True, "showErrors": True}})
    try:
        for name, (kind, image, group, _) in CHECKS.items():
            _create(cluster, ns, name, kind, image, group)
        daemon.start().wait_serving()
        bed = Bed(cluster, ns, daemon)
        wait_for(lambda: _settled(bed), timeout=90, interval=0.3, what="every check's first run over")
        now = time.time()
        for name, (kind, _, _, days) in CHECKS.items():
            if kind == "khcheck":
                cluster.request("PATCH", khs(ns, name), {"spec": {"rollups": days_of_runs(days, now)}},
                                content_type=MERGE_PATCH)
            else:
                cluster.request("PATCH", hcs(ns, name) + "/status", {"status": {"rollups": days_of_runs(days, now)}},
                                content_type=MERGE_PATCH)
        wait_for(lambda: "no finished runs" not in requests.get(bed.url + "/status", timeout=5).text.split(
            'class="chart daybar"', 1)[1][:400], timeout=30, interval=0.5, what="the seeded history on /status")
        yield bed
    finally:
        daemon.stop()
        kubelet.stop()
        for path in (khc, khs, hcs):  # leave no failing check behind for later tests
            for obj in cluster.request("GET", path(ns))["items"]:
                cluster.request("DELETE", path(ns, obj["metadata"]["name"]))


def _groups(driver: Any) -> list[tuple[str, str]]:
    got = driver.execute_script("""
        return Array.from(document.querySelectorAll('section.group')).map(s =>
            [s.querySelector('.gname').textContent, s.querySelector('.gstate').textContent.trim()]);""")
    return [(str(a), str(b)) for a, b in got]


def _checks(driver: Any) -> list[tuple[str, str, str]]:
    got = driver.execute_script("""
        return Array.from(document.querySelectorAll('li.check')).map(li =>
            [li.querySelector('.name').textContent, li.querySelector('.state').textContent.trim(),
             li.querySelector('svg.daybar').getAttribute('aria-label')]);""")
    return [(str(a), str(b), str(c)) for a, b, c in got]


def test_the_status_page_shows_groups_states_and_30_day_bars_for_both_kinds(status_bed: Bed, driver: Any) -> None:
    driver.get(status_bed.url + "/status")
    assert driver.title == "Status: 1 of 5 checks failing"
    assert driver.find_element(By.ID, "headline").text == "\u2717 1 of 5 checks failing"
    assert _groups(driver) == [("network", "\u2717 1 of 2 checks failing"), ("public-apis", "\u2713 OK"),
                               ("storage", "\u2713 OK"), ("Other", "\u2713 OK")]
    checks = _checks(driver)
    assert [(n, s) for n, s, _ in checks] == [("dns", "\u2713 OK"), ("ingress", "\u2717 Failing"),
                                              ("api-gateway", "\u2713 OK"), ("disk", "\u2713 OK"), ("web", "\u2713 OK")]
    labels = {n: label for n, _, label in checks}
    assert labels["api-gateway"].startswith("api-gateway (") and "30 OK" in labels["api-gateway"]
    assert "1 degraded" in labels["dns"] and "2 paused" in labels["dns"]
    assert "3 failing" in labels["ingress"] and "1 degraded" in labels["ingress"]
    assert "20 no data" in labels["web"]
    assert ERROR in driver.find_element(By.CSS_SELECTOR, "li.s-failing .errors").text  # showErrors is on
    seg = driver.find_element(By.CSS_SELECTOR, "li.check svg.daybar title")
    assert re.match(r"\d{4}-\d\d-\d\d\b.*uptime 100 %", seg.get_attribute("textContent"))  # a day's tooltip
    # nothing but the daemon's own origin, and nothing to press
    urls = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name);")
    assert urls and all(str(u).startswith(status_bed.url + "/") for u in urls), urls
    assert driver.find_elements(By.CSS_SELECTOR, "a, button, form, script") == []
    screenshot(driver, shots_dir() / "status-page-desktop.png")


def test_all_text_has_at_least_4_5_to_1_contrast_in_the_light_and_the_dark_theme(status_bed: Bed, driver: Any) -> None:
    try:
        for scheme in ("light", "dark"):
            color_scheme(driver, scheme)
            driver.get(status_bed.url + "/status")
            assert low_contrast(driver) == [], scheme
        screenshot(driver, shots_dir() / "status-page-desktop-dark.png")
    finally:
        color_scheme(driver, "light")


def test_on_a_phone_the_page_fits_the_width_and_keeps_every_bar_whole(status_bed: Bed, phone: Any) -> None:
    console_errors(phone)
    phone.get(status_bed.url + "/status")
    width = phone.execute_script("return document.documentElement.clientWidth;")
    assert phone.execute_script("return document.documentElement.scrollWidth;") <= width
    bars = phone.execute_script("""
        return Array.from(document.querySelectorAll('svg.daybar')).map(s => s.getBoundingClientRect().width);""")
    assert len(bars) == len(CHECKS) and all(0.7 * width <= w <= width for w in bars), (bars, width)
    assert _checks(phone)[1][:2] == ("ingress", "\u2717 Failing")
    screenshot(phone, shots_dir() / "status-page-phone.png")
    assert console_errors(phone) == []
