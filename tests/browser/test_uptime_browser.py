"""The dashboard's uptime pictures in headless chromium against a real daemon on the test bed: the overview's
30-day bars and sparklines for both kinds, a check page's outcome timelines and duration plots with their
p95, a phone's width, the colours-off reading (chromium's achromatopsia emulation), contrast in both
themes, nothing loaded from another origin, never a console error. The history is seeded through the state
objects (khstate spec.rollups, HealthCheck status.rollups, as the run's own write leaves them).
Screenshots are kept (their paths are printed): KH_SCREENSHOT_DIR, default /tmp/kh-screenshots, under
dashboard-uptime/."""
from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests

from testbed.clients.browser import INSTALL, PHONE, color_scheme, console_errors, low_contrast, screenshot, shots_dir
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import MERGE_PATCH, container, hcs, khc, khcheck, khs
from testbed.cluster.objects import create_namespace
from testbed.daemons.process import DaemonProcess
from testbed.fakes.world import days_of_runs
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

pytest.importorskip("selenium", reason=f"browser tests need selenium: {INSTALL}")
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

SHOTS = "dashboard-uptime"  # screenshots go to this folder of shots_dir()
# name: (kind, image, 30 days oldest first: o OK, d degraded, f failing, p paused, - no data, s slow)
CHECKS: dict[str, tuple[str, str, str]] = {
    "alpha-ok": ("khcheck", "kh-sim/ok", "o" * 9 + "d" + "o" * 8 + "pp" + "o" * 6 + "ss" + "oo"),
    "bravo-fail": ("khcheck", "kh-sim/fail", "-" * 10 + "o" * 15 + "d" + "o" + "fff"),
    "gamma-hc": ("healthcheck", "kh-sim/ok", "o" * 4 + "f" + "o" * 25),
}


@dataclass
class Bed:
    cluster: TestCluster
    namespace: str
    daemon: DaemonProcess

    @property
    def url(self) -> str:
        return self.daemon.url

    def page(self, name: str) -> str:
        kind = CHECKS[name][0]
        return f"{self.url}/dashboard/{self.namespace}/{name}" + ("?kind=healthcheck" if kind == "healthcheck" else "")


def _create(cluster: TestCluster, ns: str, name: str, kind: str, image: str) -> None:
    env = {"SIM_ERRORS": "upstream refused <TLS>"} if image == "kh-sim/fail" else None
    if kind == "khcheck":
        cluster.request("POST", khc(ns), khcheck(name, image, "1h", timeout="20s", env=env))
        return
    cluster.request("POST", hcs(ns), {
        "apiVersion": "kuberhealthy.github.io/v2", "kind": "HealthCheck", "metadata": {"name": name},
        "spec": {"runInterval": "1h", "timeout": "20s",
                 "podSpec": {"spec": {"containers": [container(image, env=env)], "restartPolicy": "Never"}}}})


def _settled(bed: Bed) -> bool:
    checks = requests.get(bed.url + f"/api/checks?namespace={bed.namespace}", timeout=5).json()["checks"]
    states = {c["name"]: c["state"] for c in checks if c["currentRun"] is None}
    return states == {n: ("failing" if c[1] == "kh-sim/fail" else "ok") for n, c in CHECKS.items()}


def _seeded_shown(bed: Bed) -> bool:
    page = requests.get(bed.url + "/dashboard", timeout=5).text
    return page.count("seg-failing") >= 2 and "pause" in page and "30 no data" not in page


@pytest.fixture(name="up_bed", scope="module")
def up_bed_fixture(browser_missing: None, cluster: TestCluster, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[Bed]:
    ns = create_namespace(cluster, "uptime-ui")
    kubelet = SimKubelet(str(cluster.kubeconfig), nodes=2, namespace=ns)
    kubelet.start()
    daemon = DaemonProcess(cluster, tmp_path_factory.mktemp("uptime-ui"), "kh-uptime-0", ns,
                           {"targetNamespace": ns, "enableForceMaster": True, "logLevel": "info"})
    try:
        for name, (kind, image, _) in CHECKS.items():
            _create(cluster, ns, name, kind, image)
        daemon.start().wait_serving()
        bed = Bed(cluster, ns, daemon)
        wait_for(lambda: _settled(bed), timeout=90, interval=0.3, what="every check's first run over")
        now = time.time()
        for name, (kind, _, days) in CHECKS.items():
            if kind == "khcheck":
                cluster.request("PATCH", khs(ns, name), {"spec": {"rollups": seeded(days, now)}},
                                content_type=MERGE_PATCH)
            else:
                cluster.request("PATCH", hcs(ns, name) + "/status", {"status": {"rollups": seeded(days, now)}},
                                content_type=MERGE_PATCH)
        wait_for(lambda: _seeded_shown(bed), timeout=30, interval=0.5, what="the seeded history on the dashboard")
        yield bed
    finally:
        daemon.stop()
        kubelet.stop()
        for path in (khc, khs, hcs):  # leave no failing check behind for later tests
            for obj in cluster.request("GET", path(ns))["items"]:
                cluster.request("DELETE", path(ns, obj["metadata"]["name"]))


def seeded(days: str, now: float) -> dict[str, Any]:
    """The rollup of half-hourly runs following `days` (see CHECKS), the last day ending now; the second run of
    an hour is slower, so a p95 stands above its p50."""
    return days_of_runs(days, now, runs=((0, 1.0), (1800, 1.8)), interval=1800)


def _shot(driver: Any, name: str, full: bool = True) -> None:
    screenshot(driver, shots_dir(SHOTS) / name, full)


def _bars(driver: Any) -> dict[str, dict[str, Any]]:
    """Per overview row: its bar's name, segment count, states, the first tooltip, and its sparkline's name."""
    got = driver.execute_script("""
        const out = {};
        for (const tr of document.querySelectorAll('#checks tr[data-id]')) {
          const bar = tr.querySelector('svg.daybar'), spark = tr.querySelector('svg.spark');
          out[tr.dataset.id] = {name: bar.getAttribute('aria-label'), role: bar.getAttribute('role'),
            titles: Array.from(bar.querySelectorAll('title')).map(t => t.textContent),
            states: Array.from(bar.querySelectorAll('g.seg')).flatMap(g =>
                Array.from(g.querySelectorAll('path')).map(() => g.getAttribute('class').slice(8))),
            spark: spark ? spark.getAttribute('aria-label') : null,
            shown: bar.getBoundingClientRect().width > 100};
        }
        return out;""")
    return dict(got)


def _own_origin_only(driver: Any, url: str) -> None:
    urls = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name);")
    assert all(str(u).startswith(url + "/") for u in urls), urls


def test_the_overview_shows_a_30_day_bar_and_a_sparkline_for_each_check_of_both_kinds(up_bed: Bed,
                                                                                     driver: Any) -> None:
    driver.get(up_bed.url + "/dashboard")
    ns = up_bed.namespace
    bars = _bars(driver)
    assert set(bars) == {f"check:{ns}/alpha-ok", f"check:{ns}/bravo-fail", f"healthcheck:{ns}/gamma-hc"}
    for row_id, bar in bars.items():
        assert bar["role"] == "img" and len(bar["titles"]) == 30 and len(bar["states"]) == 30 and bar["shown"]
        assert bar["spark"] and "durations of the last 1 run" in bar["spark"], row_id
    alpha, bravo, gamma = (bars[f"check:{ns}/alpha-ok"], bars[f"check:{ns}/bravo-fail"],
                           bars[f"healthcheck:{ns}/gamma-hc"])
    assert alpha["name"].startswith(f"{ns}/alpha-ok: last 30 days, uptime ")
    assert "1 degraded" in alpha["name"] and "2 paused" in alpha["name"]
    assert "3 failing" in bravo["name"] and "10 no data" in bravo["name"]
    assert gamma["name"].startswith(f"HealthCheck {ns}/gamma-hc: last 30 days") and "1 failing" in gamma["name"]
    assert any(re.fullmatch(r"\d{4}-\d\d-\d\d UTC: failing; uptime 50.00 %; runs 24 OK, 24 failed, 0 skipped; "
                            r"p50 [\d.]+ m?s, p95 [\d.]+ m?s", t) for t in bravo["titles"]), bravo["titles"]
    legend = driver.find_element(By.CSS_SELECTOR, ".legend-line svg.legend")
    assert [t.text for t in legend.find_elements(By.TAG_NAME, "text")] == [
        "OK", "degraded", "failing", "paused", "no data"]
    _own_origin_only(driver, up_bed.url)
    _shot(driver, "overview-bars.png", full=False)


def test_a_check_page_plots_its_outcomes_and_durations_over_24h_and_7d_with_the_p95(up_bed: Bed,
                                                                                    driver: Any) -> None:
    for name in ("alpha-ok", "gamma-hc"):
        driver.get(up_bed.page(name))
        charts = driver.execute_script("""
            return Array.from(document.querySelectorAll('.uptime svg.chart')).map(s => [
                s.getAttribute('class'), s.getAttribute('aria-label'), s.querySelectorAll('g.seg path').length,
                s.querySelectorAll('.p95-window').length, s.querySelectorAll('polyline.p50').length,
                Array.from(s.querySelectorAll('text')).map(t => t.textContent)]);""")
        kinds = [c[0] for c in charts]
        assert kinds == ["chart daybar", "chart legend", "chart timeline", "chart timeline", "chart durplot",
                         "chart durplot"], kinds
        named = f"HealthCheck {up_bed.namespace}/{name}" if name == "gamma-hc" else f"{up_bed.namespace}/{name}"
        daybar, _, t24, t7, p24, p7 = charts
        assert daybar[2] == 30 and t24[2] == 24 and t7[2] == 168
        for timeline, window in ((t24, "24h"), (t7, "7d")):
            assert timeline[1].startswith(f"{named}: outcomes per hour over {window}")
        for plot, window in ((p24, "24h"), (p7, "7d")):
            assert plot[1].startswith(f"{named}: run durations per hour over {window}, p50 and p95; window p95 ")
            assert plot[3] == 2 and plot[4] >= 1  # the p95 level line (and its legend sample); the p50 line
            assert "duration" in plot[5] and f"time (UTC), {window}" in plot[5]
            assert any(t.startswith(f"p95 over {window}: ") for t in plot[5])
        rows = driver.find_elements(By.CSS_SELECTOR, ".uptime table.windows tbody tr")
        assert [r.find_element(By.TAG_NAME, "th").text for r in rows] == ["1h", "24h", "7d", "30d"]
        assert all(("(OK)" in r.text or "(degraded)" in r.text or "(failing)" in r.text or "no finished run" in r.text)
                   for r in rows)  # the state in words beside the figure
        _own_origin_only(driver, up_bed.url)
    driver.get(up_bed.page("alpha-ok"))
    _shot(driver, "check-page-plots.png")


def test_on_a_phone_the_bars_and_plots_fit_without_scrolling_the_page_sideways(up_bed: Bed, phone: Any) -> None:
    console_errors(phone)
    width, height = PHONE  # emulated exactly: a headless window is never narrower than 500 px
    for page, shot in ((up_bed.url + "/dashboard", "phone-overview.png"), (up_bed.page("alpha-ok"), "phone-check.png")):
        phone.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                              {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": True})
        try:
            phone.get(page)
            assert phone.execute_script("return document.documentElement.clientWidth;") == width
            assert phone.execute_script("return document.documentElement.scrollWidth;") <= width, page
            right = phone.execute_script("""
                return Math.max(...Array.from(document.querySelectorAll('svg.daybar')).map(
                    s => s.getBoundingClientRect().right));""")
            assert right <= width, page  # every 30-day bar whole on screen
            full = phone.execute_script("return document.documentElement.scrollHeight;")
            phone.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                  {"width": width, "height": full, "deviceScaleFactor": 1, "mobile": True})
            assert phone.save_screenshot(str(shots_dir(SHOTS) / shot))
            print(f"screenshot: {shots_dir(SHOTS) / shot}")
        finally:
            phone.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert console_errors(phone) == []


def test_with_colours_off_a_failing_day_still_differs_from_an_ok_day(up_bed: Bed, driver: Any) -> None:
    """Achromatopsia (no colour at all): the failing days are taller and hatched, the degraded notched, the
    paused a short pause sign, the days without data outlines; the screenshots show it."""
    driver.execute_cdp_cmd("Emulation.setEmulatedVisionDeficiency", {"type": "achromatopsia"})
    try:
        driver.get(up_bed.url + "/dashboard")
        looks = driver.execute_script("""
            const out = {};
            for (const g of document.querySelectorAll('#checks svg.daybar g.seg')) {
              const p = g.querySelector('path'), box = p.getBBox(), cs = getComputedStyle(p);
              out[g.getAttribute('class').slice(8)] = {h: box.height, w: box.width, fill: cs.fill,
                                                       stroke: cs.stroke, d: p.getAttribute('d').length};
            }
            out.hatched = document.querySelectorAll('#checks svg.daybar path.hatch').length;
            return out;""")
        ok, failing, paused, nodata = looks["ok"], looks["failing"], looks["paused"], looks["nodata"]
        assert failing["h"] > ok["h"] > paused["h"] and looks["hatched"] >= 1
        assert nodata["fill"] == "none" and nodata["stroke"] != "none"
        assert looks["degraded"]["d"] != ok["d"]  # the notch
        _shot(driver, "overview-grayscale.png", full=False)
        driver.get(up_bed.page("alpha-ok"))
        _shot(driver, "check-page-grayscale.png")
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedVisionDeficiency", {"type": "none"})


def test_the_pictures_keep_text_at_4_5_to_1_contrast_in_the_light_and_the_dark_theme(up_bed: Bed,
                                                                                     driver: Any) -> None:
    try:
        for scheme in ("light", "dark"):
            color_scheme(driver, scheme)
            for page in (up_bed.url + "/dashboard", up_bed.page("alpha-ok")):
                driver.get(page)
                assert low_contrast(driver) == [], (scheme, page)
            if scheme == "dark":
                _shot(driver, "check-page-dark.png")
    finally:
        color_scheme(driver, "light")


def test_without_javascript_the_pictures_are_there_all_the_same(up_bed: Bed, no_js_driver: Any) -> None:
    no_js_driver.get(up_bed.url + "/dashboard")
    assert len(no_js_driver.find_elements(By.CSS_SELECTOR, "#checks svg.daybar")) == len(CHECKS)
    no_js_driver.get(up_bed.page("bravo-fail"))
    assert len(no_js_driver.find_elements(By.CSS_SELECTOR, ".uptime svg.durplot")) == 2


def test_a_bar_changes_in_place_when_its_checks_rollup_changes(up_bed: Bed, driver: Any) -> None:
    driver.get(up_bed.url + "/dashboard")
    row_id = f"check:{up_bed.namespace}/alpha-ok"
    before = _bars(driver)[row_id]["name"]
    marker = driver.execute_script("document.body.dataset.kept = 'yes'; return 1;")  # gone if the page reloads
    assert marker == 1
    path = khs(up_bed.namespace, "alpha-ok")
    up_bed.cluster.request("PATCH", path, {"spec": {"rollups": seeded("o" * 27 + "fff", time.time())}},
                           content_type=MERGE_PATCH)
    try:
        WebDriverWait(driver, 30, poll_frequency=0.3).until(lambda d: "3 failing" in _bars(d)[row_id]["name"])
        assert driver.execute_script("return document.body.dataset.kept;") == "yes"  # live, not reloaded
    finally:
        up_bed.cluster.request("PATCH", path, {"spec": {"rollups": seeded(CHECKS["alpha-ok"][2], time.time())}},
                               content_type=MERGE_PATCH)
    assert "3 failing" not in before
