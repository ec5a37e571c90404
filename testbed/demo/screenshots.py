"""`make screenshots`: the dashboard in headless chromium, light, dark and at a phone's width, into docs/.

Runs the demo (testbed/demo/local.py: the real daemon, the simulated kubelet, its sample checks) until every
sample check has a result (but the one whose first run hangs: it shows "never run"), the quickest has
six runs of history and the slow one is running (about a minute and a half), then writes

    docs/dashboard-light.png   the overview, 1280 px wide, light theme
    docs/dashboard-dark.png    the same with prefers-color-scheme: dark
    docs/dashboard-phone.png   the overview at a phone's width (390 px)
    docs/dashboard-check.png   the failing check's page, light theme

and fails if the browser logged an error. `--out DIR` writes elsewhere.
"""
from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from testbed.clients import browser
from testbed.demo.local import CHECKS, NS, Demo
from testbed.paths import REPO
from testbed.wait import wait_for

HANGING = "cert-expiry"  # its first run is in flight the whole time
SLOW = "backup-verify"
FAILING = "pod-restarts"
QUICKEST = "dns-resolution"
RUNS = 6  # history entries of the quickest check before the pictures
WIDTH = 1280
MAX_HEIGHT = 2400


def _checks(url: str) -> dict[str, dict[str, Any]]:
    with urllib.request.urlopen(url + "/api/checks", timeout=5) as resp:
        return {c["name"]: c for c in json.loads(resp.read())["checks"] if c["kind"] == "check"}


def _ready(url: str) -> bool:
    c = _checks(url)
    return (len(c) == len(CHECKS) and all(c[n]["state"] != "never-run" for n, *_ in CHECKS if n != HANGING)
            and len(c[QUICKEST]["history"]) >= RUNS and c[SLOW]["currentRun"] is not None
            and c[HANGING]["currentRun"] is not None)


def _shoot(driver: Any, url: str, path: Path, width: int, script: str = "") -> None:
    """The whole page (up to MAX_HEIGHT) at this CSS width, after `script` ran in it."""
    driver.set_window_size(width, 900)
    driver.get(url)
    wait_for(lambda: driver.execute_script("return document.readyState") == "complete", 10, what="the page")
    if script:
        driver.execute_script(script)
    height = min(MAX_HEIGHT, int(driver.execute_script("return document.documentElement.scrollHeight;")))
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}})
    path.write_bytes(base64.b64decode(shot["data"]))
    print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path} ({width}x{height})", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=REPO / "docs")
    args = p.parse_args()
    reason = browser.missing()
    if reason:
        print(f"make screenshots needs headless chromium: {reason}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    demo = Demo(Path(tempfile.mkdtemp(prefix="kh-shots-")))
    print("Starting the demo ...", flush=True)
    try:
        demo.start()
        wait_for(lambda: _ready(demo.url), timeout=180, interval=0.5, what="the demo's checks to settle")
        light = browser.chrome(WIDTH, 900)
        dark = browser.chrome(WIDTH, 900)
        phone = browser.chrome(*browser.PHONE)
        try:
            browser.color_scheme(light, "light")
            browser.color_scheme(dark, "dark")
            browser.color_scheme(phone, "light")
            _shoot(light, demo.url + "/dashboard", args.out / "dashboard-light.png", WIDTH)
            _shoot(dark, demo.url + "/dashboard", args.out / "dashboard-dark.png", WIDTH)
            _shoot(phone, demo.url + "/dashboard", args.out / "dashboard-phone.png", browser.PHONE[0])
            _shoot(light, f"{demo.url}/dashboard/{NS}/{FAILING}", args.out / "dashboard-check.png", WIDTH,
                   "const d = document.querySelector('.history details'); if (d) d.open = true;")
            errors = [e for d in (light, dark, phone) for e in browser.console_errors(d)]
        finally:
            for d in (light, dark, phone):
                d.quit()
    finally:
        demo.stop()
    if errors:
        print("browser console errors:\n  " + "\n  ".join(errors), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
