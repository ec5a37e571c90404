"""The dashboard in headless chromium against a real daemon on the test bed (tests/browser/conftest.py):
states, errors and log tails, run now without a reload, the filter and its URL, live updates in place,
the same table without JavaScript, a phone's width, `/` for browsers with dashboardAtRoot, and never a
console error (the autouse fixture reads the browser's log after every test)."""
from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from testbed.clients.browser import INSTALL, PHONE, color_scheme, console_errors, low_contrast
from testbed.cluster.builders import khc, khcheck
from testbed.cluster.objects import delete_quietly

pytest.importorskip("selenium", reason=f"browser tests need selenium: {INSTALL}")
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

WAIT = 30.0  # seconds for anything the page should show by itself (it polls every 5 s)


def rows(driver: Any, visible_only: bool = False) -> list[tuple[str, str]]:
    """(row id, state) of the overview's rows in document order, read in one go (the script may be
    swapping rows in meanwhile)."""
    got = driver.execute_script("""
        return Array.from(document.querySelectorAll('#checks tr[data-id]'))
            .filter(tr => !arguments[0] || tr.getClientRects().length > 0)
            .map(tr => [tr.dataset.id, tr.dataset.st]);""", visible_only)
    return [(str(i), str(s)) for i, s in got]


def row(driver: Any, bed: Any, name: str) -> Any:
    return driver.find_element(By.CSS_SELECTOR, f'tr[data-id="check:{bed.namespace}/{name}"]')


def until(driver: Any, fn: Any, timeout: float = WAIT) -> Any:
    return WebDriverWait(driver, timeout, poll_frequency=0.2,
                         ignored_exceptions=(StaleElementReferenceException,)).until(fn)


def test_the_overview_lists_every_check_with_its_state_failing_first(bed: Any, driver: Any) -> None:
    driver.get(bed.url + "/dashboard")
    ns = bed.namespace
    assert rows(driver) == [(f"check:{ns}/bravo-fail", "failing"), (f"check:{ns}/echo-hang", "never-run"),
                            (f"check:{ns}/alpha-ok", "ok"), (f"check:{ns}/delta-run", "ok")]
    assert row(driver, bed, "alpha-ok").find_element(By.CSS_SELECTOR, ".b-ok").text == "OK"
    assert row(driver, bed, "bravo-fail").find_element(By.CSS_SELECTOR, ".b-failing").text == "Failing"
    icon = driver.execute_script("return getComputedStyle(arguments[0], '::before').content;",
                                 row(driver, bed, "bravo-fail").find_element(By.CSS_SELECTOR, ".b"))
    assert "\u2717" in icon  # a shape as well as a colour
    hang = row(driver, bed, "echo-hang").find_element(By.TAG_NAME, "td").text
    assert "Never run" in hang and "Running" in hang  # its first run is in flight
    assert driver.find_element(By.ID, "headline").text == "1 of 4 failing"
    assert driver.find_element(By.ID, "master").text == "kh-browser-0"
    strip = row(driver, bed, "alpha-ok").find_element(By.CSS_SELECTOR, ".strip")
    assert strip.text == "\u2713" and strip.get_attribute("aria-label") == "last 1 run: 1 passed; newest passed"


def test_a_failing_check_shows_its_error_and_on_its_page_the_log_tail(bed: Any, driver: Any) -> None:
    driver.get(bed.url + "/dashboard")
    failing = row(driver, bed, "bravo-fail")
    errors = bed.checks()["bravo-fail"]["errors"]
    assert len(errors) == 2 and failing.find_element(By.CSS_SELECTOR, ".err").text == f"{errors[0]} (+1 more)"
    failing.find_element(By.LINK_TEXT, "bravo-fail").click()
    until(driver, lambda d: d.current_url.endswith(f"/dashboard/{bed.namespace}/bravo-fail"))
    shown = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "ul.errors li")]
    assert shown[:2] == errors and "inode table <full>" in errors  # the last run's (then the history row's)
    summary = driver.find_element(By.CSS_SELECTOR, ".history details summary")
    summary.click()
    tail = driver.find_element(By.CSS_SELECTOR, ".history details pre")
    assert tail.is_displayed() and tail.text.strip(), "the failed run's log tail (exposeLogs is on)"


def test_run_now_adds_a_history_entry_without_reloading_the_page(bed: Any, driver: Any) -> None:
    driver.get(f"{bed.url}/dashboard/{bed.namespace}/delta-run")
    driver.execute_script("window.khNotReloaded = true;")
    before = len(driver.find_elements(By.CSS_SELECTOR, ".history tbody tr"))
    button = driver.find_element(By.ID, "run-now")
    assert button.is_displayed() and button.text == "Run now"
    button.click()
    until(driver, lambda d: "Run requested" in d.find_element(By.ID, "run-msg").text, 10)
    until(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".history tbody tr")) == before + 1)
    assert driver.execute_script("return window.khNotReloaded === true;"), "the page was reloaded"
    assert bed.checks()["delta-run"]["successCount"] == before + 1


def test_run_now_while_a_run_is_in_flight_is_answered_politely(bed: Any, driver: Any) -> None:
    driver.get(f"{bed.url}/dashboard/{bed.namespace}/echo-hang")
    driver.find_element(By.ID, "run-now").click()
    message = until(driver, lambda d: d.find_element(By.ID, "run-msg").text.startswith("A run is") and
                    d.find_element(By.ID, "run-msg"), 10)
    assert "already in flight" in message.text and "bad" not in str(message.get_attribute("class"))
    assert driver.find_element(By.CSS_SELECTOR, "#live-check .current").text.startswith("Running, pod ")
    # chromium logs every 4xx answer; this one was expected (and is all there is)
    assert [e.endswith("/echo-hang/run - Failed to load resource: the server responded with a status of 409 "
                       "(CONFLICT)") for e in console_errors(driver)] == [True]


def test_the_filter_applies_as_you_type_and_a_link_keeps_it(bed: Any, driver: Any) -> None:
    driver.get(bed.url + "/dashboard")
    box = driver.find_element(By.ID, "f-q")
    box.send_keys("97%")  # an error text matches too
    until(driver, lambda d: len(rows(d, visible_only=True)) == 1)
    assert rows(driver, visible_only=True) == [(f"check:{bed.namespace}/bravo-fail", "failing")]
    assert driver.find_element(By.ID, "f-count").text == "Showing 1 of 4"
    shared = driver.current_url
    assert shared.endswith("/dashboard?q=97%25")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)  # as a person does (an input event; WebElement.clear() sends none)
    until(driver, lambda d: len(rows(d, visible_only=True)) == 4)
    driver.get(bed.url + "/dashboard?state=ok")
    assert [i for i, _ in rows(driver, visible_only=True)] == [f"check:{bed.namespace}/alpha-ok",
                                                              f"check:{bed.namespace}/delta-run"]
    driver.get(shared)  # the shared link, rendered by the server with the filter applied
    assert rows(driver, visible_only=True) == [(f"check:{bed.namespace}/bravo-fail", "failing")]
    assert driver.find_element(By.ID, "f-q").get_attribute("value") == "97%"


def test_the_overview_updates_in_place_when_checks_come_and_go(bed: Any, driver: Any) -> None:
    driver.get(bed.url + "/dashboard")
    driver.execute_script("window.khNotReloaded = true;")
    new = f"check:{bed.namespace}/foxtrot-new"
    bed.cluster.request("POST", khc(bed.namespace), khcheck("foxtrot-new", "kh-sim/ok", interval="1h"))
    try:
        until(driver, lambda d: any(i == new and s == "ok" for i, s in rows(d)))
        assert driver.find_element(By.ID, "headline").text == "1 of 5 failing"
    finally:
        delete_quietly(bed.cluster, khc(bed.namespace, "foxtrot-new"))
    until(driver, lambda d: all(i != new for i, _ in rows(d)))
    assert driver.execute_script("return window.khNotReloaded === true;"), "the page was reloaded"


def test_without_javascript_the_page_shows_the_same_table(bed: Any, driver: Any, no_js_driver: Any) -> None:
    driver.get(bed.url + "/dashboard")
    no_js_driver.get(bed.url + "/dashboard")

    def table(d: Any) -> list[list[str]]:
        """State, name, duration, failures, history strip, first error of each row (not the ticking times)."""
        out = []
        for tr in d.find_elements(By.CSS_SELECTOR, "#checks tr[data-id]"):
            cells = tr.find_elements(By.CSS_SELECTOR, "td")
            out.append([cells[0].text, tr.find_element(By.TAG_NAME, "th").text, *(c.text for c in cells[3:])])
        return out
    assert table(no_js_driver) == table(driver) and len(table(driver)) == 4
    no_js_driver.get(f"{bed.url}/dashboard/{bed.namespace}/delta-run")
    assert not no_js_driver.find_element(By.ID, "run-now").is_displayed()  # it needs the script
    assert "annotate khcheck delta-run" in no_js_driver.find_element(By.CSS_SELECTOR, ".actions").text


def test_on_a_phone_the_overview_fits_the_width_and_keeps_state_name_and_error(bed: Any, driver: Any) -> None:
    driver.set_window_size(*PHONE)
    try:
        driver.get(bed.url + "/dashboard")
        width = driver.execute_script("return document.documentElement.clientWidth;")
        assert driver.execute_script("return document.documentElement.scrollWidth;") <= width
        failing = row(driver, bed, "bravo-fail")
        first = bed.checks()["bravo-fail"]["errors"][0]
        assert "Failing" in failing.text and "bravo-fail" in failing.text and first in failing.text
    finally:
        driver.set_window_size(1280, 900)


def test_all_text_has_at_least_4_5_to_1_contrast_in_the_light_and_the_dark_theme(bed: Any, driver: Any) -> None:
    pages = ("/dashboard", f"/dashboard/{bed.namespace}/bravo-fail", f"/dashboard/{bed.namespace}/echo-hang")
    try:
        for scheme in ("light", "dark"):
            color_scheme(driver, scheme)
            for page in pages:
                driver.get(bed.url + page)
                for details in driver.find_elements(By.CSS_SELECTOR, "details"):
                    driver.execute_script("arguments[0].open = true;", details)
                assert driver.execute_script("return matchMedia('(prefers-color-scheme: dark)').matches;") == (
                    scheme == "dark")
                assert low_contrast(driver) == [], (scheme, page)
    finally:
        color_scheme(driver, "light")


def test_the_keyboard_reaches_the_skip_link_first_and_the_filter_by_label(bed: Any, driver: Any) -> None:
    driver.get(bed.url + "/dashboard")
    driver.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    assert driver.switch_to.active_element.text == "Skip to content"
    label = driver.find_element(By.CSS_SELECTOR, "label[for=f-q]")
    label.click()
    assert driver.switch_to.active_element.get_attribute("id") == "f-q"


def test_with_dashboard_at_root_a_browser_gets_the_dashboard_and_format_json_the_v2_page(bed: Any,
                                                                                          driver: Any) -> None:
    driver.get(bed.url + "/")
    assert driver.find_element(By.ID, "headline").text == "1 of 4 failing"
    driver.find_element(By.LINK_TEXT, "Status JSON").click()
    until(driver, lambda d: d.current_url.endswith("/?format=json"))
    page = json.loads(driver.find_element(By.TAG_NAME, "pre").text)
    assert page["OK"] is False and {f"{bed.namespace}/{n}" for n in ("alpha-ok", "bravo-fail", "delta-run")
                                    } <= set(page["CheckDetails"])
    plain = requests.get(bed.url + "/", timeout=5)  # curl-like: */*
    assert plain.headers["Content-Type"] == "application/json" and "Accept" in plain.headers["Vary"]
