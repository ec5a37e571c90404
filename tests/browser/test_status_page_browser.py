"""The status page (`/status`) in headless chromium against a real daemon on the test bed: groups from the
label kuberhealthy.io/status-group with their states in words, every check of both kinds with its state and
its 30-day bar (history seeded through the state objects: the khstates' spec.rollups, a HealthCheck's
status.rollups), error texts (this daemon has showErrors on), readable in the light and the dark theme,
at a desktop's and a phone's width, nothing loaded from another origin, never a console error.
Screenshots of both widths are kept (their paths are printed; KH_SCREENSHOT_DIR sets where)."""
from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from kuberhealthy.records import rollcodec, rollups
from testbed.clients import browser
from testbed.clients.browser import INSTALL, PHONE, color_scheme, console_errors, low_contrast
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import container, khc, khcheck, khs
from testbed.cluster.objects import create_namespace
from testbed.daemons.process import DaemonProcess
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

pytest.importorskip("selenium", reason=f"browser tests need selenium: {INSTALL}")
from selenium.webdriver.common.by import By

GROUP = "kuberhealthy.io/status-group"
HC_API = "/apis/kuberhealthy.github.io/v2"
ERROR = "upstream 10.0.0.7:443 refused <TLS>"
# name: (kind, image, group, 30 days oldest first: o OK, d degraded, f failing, p paused, - no data)
CHECKS: dict[str, tuple[str, str, str | None, str]] = {
    "api-gateway": ("khcheck", "kh-sim/ok", "public-apis", "o" * 30),
    "dns": ("khcheck", "kh-sim/ok", "network", "o" * 12 + "d" + "o" * 10 + "pp" + "o" * 5),
    "ingress": ("healthcheck", "kh-sim/fail", "network", "o" * 20 + "d" + "o" * 6 + "fff"),
    "disk": ("khcheck", "kh-sim/ok", "storage", "o" * 8 + "f" + "o" * 21),
    "web": ("khcheck", "kh-sim/ok", None, "-" * 20 + "o" * 10),
}


def hc_path(ns: str, name: str | None = None) -> str:
    base = f"{HC_API}/namespaces/{ns}/healthchecks"
    return f"{base}/{name}" if name else base


def seeded(days: str, now: float) -> dict[str, Any]:
    """The rollup of hourly runs following `days` (see CHECKS), the last day ending now."""
    r = rollups.empty()
    start = (int(now // 86400) - len(days) + 1) * 86400
    for d, mark in enumerate(days):
        for h in range(24):
            at = start + d * 86400 + h * 3600 + 60
            if at > now or mark == "-":
                continue
            if mark == "p":
                r = rollups.paused(r, at - 60, at + 3540)
                continue
            failed = (mark == "d" and h == 5) or (mark == "f" and h % 2 == 0)
            r = rollups.record(r, at, rollups.FAILED if failed else rollups.OK, 0.4 + (h % 5) * 0.1, interval=3600)
    return rollcodec.serialize(r)


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
        path = hc_path(ns)
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
        merge = "application/merge-patch+json"
        for name, (kind, _, _, days) in CHECKS.items():
            if kind == "khcheck":
                cluster.request("PATCH", khs(ns, name), {"spec": {"rollups": seeded(days, now)}}, content_type=merge)
            else:
                cluster.request("PATCH", hc_path(ns, name) + "/status", {"status": {"rollups": seeded(days, now)}},
                                content_type=merge)
        wait_for(lambda: "no finished runs" not in requests.get(bed.url + "/status", timeout=5).text.split(
            'class="chart daybar"', 1)[1][:400], timeout=30, interval=0.5, what="the seeded history on /status")
        yield bed
    finally:
        daemon.stop()
        kubelet.stop()
        for path in (khc, khs, hc_path):  # leave no failing check behind for later tests
            for obj in cluster.request("GET", path(ns))["items"]:
                cluster.request("DELETE", path(ns, obj["metadata"]["name"]))


@pytest.fixture(name="phone", scope="module")
def phone_fixture(browser_missing: None) -> Iterator[Any]:
    d = browser.chrome(*PHONE)
    try:
        yield d
    finally:
        d.quit()


def _shots() -> Path:
    where = Path(os.environ.get("KH_SCREENSHOT_DIR") or "/tmp/kh-screenshots")
    where.mkdir(parents=True, exist_ok=True)
    return where


def _full_page_shot(driver: Any, path: Path) -> None:
    width = driver.execute_script("return window.innerWidth;")
    height = driver.execute_script("return document.documentElement.scrollHeight;")
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})
    try:
        assert driver.save_screenshot(str(path))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    print(f"screenshot: {path}")


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
    _full_page_shot(driver, _shots() / "status-page-desktop.png")


def test_all_text_has_at_least_4_5_to_1_contrast_in_the_light_and_the_dark_theme(status_bed: Bed, driver: Any) -> None:
    try:
        for scheme in ("light", "dark"):
            color_scheme(driver, scheme)
            driver.get(status_bed.url + "/status")
            assert low_contrast(driver) == [], scheme
        _full_page_shot(driver, _shots() / "status-page-desktop-dark.png")
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
    _full_page_shot(phone, _shots() / "status-page-phone.png")
    assert console_errors(phone) == []
