"""Headless chromium driven by selenium, for the dashboard's browser tests, screenshots and bench.

Debian's `chromium` and `chromium-driver` (hack/tools.sh installs them with apt): selenium is given
the driver's path, so selenium-manager never runs and nothing is downloaded at run time. `missing()`
says why a browser cannot be had (tests skip with it); `chrome()` starts one. Nothing here imports
`kuberhealthy`: the browser sees the daemon only over HTTP.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
except ImportError:  # a test extra; missing() says how to get it
    webdriver = None

CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
CHROMEDRIVER = "/usr/bin/chromedriver"
INSTALL = "bash hack/tools.sh (apt-get install chromium chromium-driver) and pip install -e '.[test]' (selenium)"
PHONE = (390, 844)  # CSS pixels of a common phone, portrait


def chromium_path() -> str | None:
    for path in (os.environ.get("KH_CHROMIUM", ""), *CHROMIUM, shutil.which("chromium") or ""):
        if path and os.access(path, os.X_OK):
            return path
    return None


def chromedriver_path() -> str | None:
    path = os.environ.get("KH_CHROMEDRIVER") or CHROMEDRIVER
    return path if os.access(path, os.X_OK) else None


def missing() -> str | None:
    """Why no browser can be started here (None: one can)."""
    if webdriver is None:
        return f"selenium is not installed: {INSTALL}"
    if chromium_path() is None:
        return f"chromium not found (looked at {', '.join(CHROMIUM)}; KH_CHROMIUM overrides): {INSTALL}"
    if chromedriver_path() is None:
        where = os.environ.get("KH_CHROMEDRIVER") or CHROMEDRIVER
        return f"chromedriver not found at {where} (KH_CHROMEDRIVER overrides): {INSTALL}"
    return None


def chrome(width: int = 1280, height: int = 900, *, javascript: bool = True) -> Any:
    """A headless chromium (selenium WebDriver) with its console log readable (console_errors)."""
    reason = missing()
    if reason:
        raise RuntimeError(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = str(chromium_path())
    for arg in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--metrics-recording-only", "--hide-scrollbars", "--force-device-scale-factor=1",
                f"--window-size={width},{height}", "--lang=en-US"):
        options.add_argument(arg)
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # chromium refuses to run its sandbox as root
    if not javascript:
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "OFF"})
    driver = webdriver.Chrome(service=Service(executable_path=str(chromedriver_path())), options=options)
    driver.set_page_load_timeout(30)
    return driver


def color_scheme(driver: Any, scheme: str) -> None:
    """Emulate prefers-color-scheme (`light` or `dark`) for the pages this driver loads from now on."""
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                           {"media": "", "features": [{"name": "prefers-color-scheme", "value": scheme}]})


def console_errors(driver: Any) -> list[str]:
    """SEVERE entries of the browser's console (script errors, failed loads, CSP violations) since the
    last call; reading clears the log."""
    return [str(e.get("message")) for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


# WCAG 2 contrast of every piece of visible text against the background it is painted on (the first
# opaque background up the tree, translucent ones blended in). Returns the pieces below `min`.
CONTRAST_JS = """
const min = arguments[0];
function parse(c) {
  let m = c.match(/^rgba?\\(([\\d.]+),\\s*([\\d.]+),\\s*([\\d.]+)(?:,\\s*([\\d.]+))?\\)$/);
  if (m) return [+m[1], +m[2], +m[3], m[4] === undefined ? 1 : +m[4]];
  m = c.match(/^color\\(srgb ([\\d.]+) ([\\d.]+) ([\\d.]+)(?: \\/ ([\\d.]+))?\\)$/);
  if (m) return [m[1] * 255, m[2] * 255, m[3] * 255, m[4] === undefined ? 1 : +m[4]];
  return null;
}
function over(top, below) {
  const a = top[3];
  return [0, 1, 2].map(i => top[i] * a + below[i] * (1 - a)).concat([1]);
}
function background(el) {
  const layers = [];
  for (let e = el; e; e = e.parentElement) {
    const c = parse(getComputedStyle(e).backgroundColor);
    if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
  }
  let bg = [255, 255, 255, 1];
  if (layers.length && layers[layers.length - 1][3] >= 1) bg = layers.pop();
  while (layers.length) bg = over(layers.pop(), bg);
  return bg;
}
function lum(c) {
  const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
}
const bad = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let n = walker.nextNode(); n; n = walker.nextNode()) {
  const el = n.parentElement;
  if (!n.textContent.trim() || !el || !el.getClientRects().length) continue;
  const style = getComputedStyle(el);
  if (style.visibility === 'hidden' || el.closest('[hidden], [aria-hidden=true], noscript, template')) continue;
  const bg = background(el);
  let fg = parse(style.color);
  if (!fg) continue;
  fg = over(fg, bg);
  const l1 = lum(fg), l2 = lum(bg);
  const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
  if (ratio < min) {
    const text = n.textContent.trim().slice(0, 40);
    bad.push(`${ratio.toFixed(2)}: "${text}" (${style.color} on rgb(${bg.slice(0, 3).map(Math.round)}))`);
  }
}
return bad;
"""


def low_contrast(driver: Any, minimum: float = 4.5) -> list[str]:
    """Visible text on the current page whose contrast is below `minimum` (WCAG AA: 4.5)."""
    found: list[str] = driver.execute_script(CONTRAST_JS, minimum)
    return found


def shots_dir(sub: str = "") -> Path:
    """Where screenshots are kept: KH_SCREENSHOT_DIR (default /tmp/kh-screenshots), then `sub`."""
    where = Path(os.environ.get("KH_SCREENSHOT_DIR") or "/tmp/kh-screenshots") / sub
    where.mkdir(parents=True, exist_ok=True)
    return where


def screenshot(driver: Any, path: Path, full: bool = True) -> None:
    """A screenshot of the page at the window's width: the whole page's height, or (full False) the window's."""
    width = driver.execute_script("return window.innerWidth;")
    height = driver.execute_script("return document.documentElement.scrollHeight;") if full else \
        driver.execute_script("return window.innerHeight;")
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})
    try:
        assert driver.save_screenshot(str(path))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    print(f"screenshot: {path}")
