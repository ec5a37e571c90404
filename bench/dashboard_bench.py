"""Dashboard figures: the overview with N checks (default 1,000, 24 history entries and 30 days of uptime
rollups each, every check its own) on the server and in headless chromium, its weight and requests, and
what a live poll costs.

`python -m bench.dashboard_bench` prints figures and asserts nothing (the target: rendered in under 1 s).
The app is the real one (create_app) over the in-memory fakes (testbed/fakes: no API server), served by
a threaded werkzeug server on loopback; the browser is Debian's chromium (testbed/clients/browser.py).

1. Server, the cost of the pictures (web/dashboard/pictures.py), interleaved in one run so the machine's
   noise falls on all alike: GET /dashboard without pictures (the page before them), with every picture
   drawn on each request (nothing kept), and with the pictures kept per check (as served): median
   time, the ratios, and bytes (identity and gzip).
2. Browser, cold cache (median of --loads), without pictures and with them (kept), interleaved: time to
   first byte, first contentful paint, DOMContentLoaded and the load event from navigation start; bytes
   transferred and requests made. Then a warm load (assets from the cache: their URLs are fingerprinted
   and immutable).
3. Polls: the page's own poll while nothing changed (304, no body), after one check changed (only its
   row), and the full snapshot the page never needs after its first paint, with server time.
"""
from __future__ import annotations

import argparse
import copy
import gzip
import logging
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import requests
from flask import Flask

from kuberhealthy.base.times import format_time
from kuberhealthy.kube import KHCHECKS, KHSTATES
from kuberhealthy.records import rollcodec, rollups
from kuberhealthy.web import create_app
from kuberhealthy.web.dashboard import render
from kuberhealthy.web.dashboard import rows as dashview
from kuberhealthy.web.dashboard.pictures import Pictures
from testbed.clients import browser
from testbed.daemons.inprocess import history_keys, serve
from testbed.fakes import POD_NAME, FakeServices, khcheck, khstate_of

NAV = """
const n = performance.getEntriesByType('navigation')[0];
const fcp = performance.getEntriesByName('first-contentful-paint')[0];
const res = performance.getEntriesByType('resource');
return {ttfb: n.responseStart, fcp: fcp ? fcp.startTime : null, dcl: n.domContentLoadedEventEnd,
        load: n.loadEventEnd, rows: document.querySelectorAll('#checks tr[data-id]').length,
        svgs: document.querySelectorAll('#checks svg').length,
        bytes: n.transferSize + res.reduce((a, r) => a + r.transferSize, 0),
        html: n.encodedBodySize, decoded: n.decodedBodySize,
        requests: 1 + res.length, fromNetwork: 1 + res.filter(r => r.transferSize > 0).length};
"""
INTERVAL = 3600  # seconds between the seeded runs (an hourly check: 720 runs in 30 days, ~15 ms to build)
NAMESPACES = 20


def history(now: float, seed: int) -> dict[str, Any]:
    """30 days of an hourly check, as stored: a few bad days, a slow day, a gap on day 9."""
    rnd = random.Random(seed)
    bad = {rnd.randrange(30): rnd.choice((0.02, 0.3)) for _ in range(seed % 4)}
    r = rollups.empty()
    t = now - 30 * 86400
    while t < now:
        day = int((now - t) // 86400)
        failed = rnd.random() < bad.get(day, 0.0)
        r = rollups.record(r, t, "failed" if failed else "ok",
                           rnd.uniform(0.5, 3.0) * (3 if day == seed % 30 else 1), interval=INTERVAL)
        t += INTERVAL if day != 9 else 4 * INTERVAL
    return rollcodec.serialize(r)


def fake_world(checks: int, outcomes: int) -> FakeServices:
    services = FakeServices()
    now = time.time()
    runs = ("o" * 11 + "f") * (outcomes // 12 + 1)
    for i in range(checks):
        ns, name = f"ns-{i % NAMESPACES:02d}", f"check-{i:04d}"
        services.api.put(KHCHECKS, khcheck(name, namespace=ns))
        ok = i % 17 != 0
        services.api.put(KHSTATES, khstate_of(
            name, namespace=ns, OK=ok, Errors=[] if ok else [f"check {i} failed"], LastRun=format_time(now - i % 600),
            RunDuration="1.5s", AuthoritativePod=POD_NAME, Node="node-1",
            **history_keys(runs[i % 12:i % 12 + outcomes], now), rollups=history(now, i)))
    return services


def wire(r: requests.Response) -> int:
    """Body bytes as sent (requests hands back the decoded body)."""
    return int(r.headers.get("Content-Length", len(r.content)))


def median_ms(fn: Any, n: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(n):
        t = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), out


def without_pictures(b: Any, now: float, uptime: Any, pictures: Any) -> dashview.Row:
    return dashview.row(b.view, now)


def switches(app: Flask) -> dict[str, Callable[[], None]]:
    """Ways to serve the overview: without pictures (the page before them), drawing every picture on each
    request (nothing kept), and keeping them per check (as served). The last is what the app does."""
    dash = app.extensions[render.DASHBOARD]
    kept, drawn_row = dash.pictures, render._row

    def switch(row: Callable[..., dashview.Row], pictures: Pictures) -> Callable[[], None]:
        def use() -> None:
            render._row = row
            dash.pictures = pictures
        return use

    return {"no pictures": switch(without_pictures, kept), "drawn each time": switch(drawn_row, Pictures(kept=0)),
            "kept per check": switch(drawn_row, kept)}


def picture_cost(app: Flask, rounds: int) -> None:
    """The overview's server time without pictures, drawing them on every request, and keeping them."""
    client = app.test_client()
    variants = switches(app)
    times: dict[str, list[float]] = {k: [] for k in variants}
    sizes: dict[str, tuple[int, int]] = {}
    try:
        for _ in range(rounds):
            for name, use in variants.items():
                use()
                client.get("/dashboard")  # the variant's first request (kept pictures: drawn once here)
                t = time.perf_counter()
                body = client.get("/dashboard").get_data()
                times[name].append((time.perf_counter() - t) * 1000)
                sizes[name] = (len(body), len(gzip.compress(body, compresslevel=render.GZIP_LEVEL)))
    finally:
        variants["kept per check"]()
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["no pictures"]
    for name, ms in med.items():
        raw, packed = sizes[name]
        print(f"  server  GET /dashboard, {name:15} {ms:6.0f} ms  ({ms / base:4.2f}x)  {raw:>10,} bytes, "
              f"{packed:>9,} gzipped")
    print(f"  server  pictures kept vs drawn each time: {med['kept per check'] / med['drawn each time']:.2f}x "
          f"the time (median of {rounds} interleaved rounds)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checks", type=int, default=1000)
    p.add_argument("--history", type=int, default=24)
    p.add_argument("--loads", type=int, default=5)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--no-browser", action="store_true", help="the server figures only")
    args = p.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    t = time.perf_counter()
    services = fake_world(args.checks, args.history)
    app = create_app(services)
    print(f"{args.checks} checks x {args.history} history entries and 30 days of rollups, {NAMESPACES} "
          f"namespaces (built in {time.perf_counter() - t:.1f} s)")
    picture_cost(app, args.rounds)
    reason = browser.missing()
    if args.no_browser or reason:
        print(f"(browser skipped: {reason or '--no-browser'})")
        return 0
    server = serve(app)
    url = server.url + "/dashboard"
    session = requests.Session()
    try:
        session.get(url)
        for enc in ("identity", "gzip"):
            ms, r = median_ms(lambda e=enc: session.get(url, headers={"Accept-Encoding": e}), 5)
            print(f"  server  GET /dashboard over HTTP ({enc:8}) {ms:6.0f} ms  {wire(r):>9,} bytes on the wire")

        variants = switches(app)
        looks = ("no pictures", "kept per check")
        loads: dict[str, list[dict[str, Any]]] = {k: [] for k in looks}
        driver = browser.chrome(1280, 900)
        try:
            for _ in range(args.loads):  # interleaved: the machine's noise falls on both alike
                for look in looks:
                    variants[look]()
                    driver.execute_cdp_cmd("Network.clearBrowserCache", {})
                    driver.get(url)
                    loads[look].append(driver.execute_script(NAV))
            driver.get(url)  # warm: the assets come from the cache
            warm = driver.execute_script(NAV)
            errors = browser.console_errors(driver)
        finally:
            driver.quit()
            variants["kept per check"]()
        medians = {look: {k: statistics.median([x[k] for x in loads[look] if x[k] is not None] or [float("nan")])
                          for k in ("ttfb", "fcp", "dcl", "load", "bytes")} for look in looks}
        for look in looks:
            med, first = medians[look], loads[look][0]
            print(f"  browser cold load, {look} (median of {args.loads}): first byte {med['ttfb']:.0f} ms, first "
                  f"paint {med['fcp']:.0f} ms, DOMContentLoaded {med['dcl']:.0f} ms, load {med['load']:.0f} ms "
                  f"({'under' if med['load'] < 1000 else 'OVER'} 1 s); {first['rows']} rows, {first['svgs']} SVGs")
            print(f"  weight  {med['bytes']:,.0f} bytes transferred in {first['requests']} requests "
                  f"(page {first['html']:,} bytes gzipped, {first['decoded']:,} decoded; CSS + script the rest)")
        print(f"  browser load with pictures vs without: "
              f"{medians['kept per check']['load'] / medians['no pictures']['load']:.2f}x")
        print(f"  warm    load {warm['load']:.0f} ms, {warm['fromNetwork']} of {warm['requests']} requests "
              f"on the network, {warm['bytes']:,} bytes")
        if errors:
            print(f"  console errors: {errors}")

        live = server.url + "/dashboard/live"
        full_ms, full = median_ms(lambda: session.get(live), 5)
        token = full.json()["token"]
        cond = {"If-None-Match": f'"{token}"'}
        idle_ms, idle = median_ms(lambda: session.get(f"{live}?since={token}", headers=cond), 50)
        state = copy.deepcopy(services.khstates.list()[7])
        state["spec"]["OK"], state["spec"]["Errors"] = False, ["changed for the bench"]
        services.api.put(KHSTATES, state)
        changed = session.get(f"{live}?since={token}", headers=cond)
        delta = changed.json()
        head = sum(len(k) + len(v) + 4 for k, v in idle.headers.items()) + len("HTTP/1.1 304 NOT MODIFIED\r\n")
        print(f"  poll    nothing changed: {idle.status_code}, 0 body bytes (~{head} header bytes), "
              f"{idle_ms:.1f} ms server side")
        print(f"  poll    one check changed: {changed.status_code}, {wire(changed):,} bytes on the wire "
              f"({len(delta['rows'])} row, {len(changed.content):,} bytes of JSON)")
        print(f"  (never polled) the full snapshot: {wire(full):,} bytes on the wire ({len(full.content):,} of JSON), "
              f"{full_ms:.0f} ms")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
