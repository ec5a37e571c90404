"""Dashboard figures: the overview with N checks (default 1,000, 24 history entries each) in headless
chromium, its weight and requests, and what a live poll costs.

`python -m bench.dashboard_bench` prints figures and asserts nothing (the target: rendered in under 1 s).
The app is the real one (create_app) over static caches (no API server), served by a threaded werkzeug
server on loopback; the browser is Debian's chromium (testbed/clients/browser.py).

1. Server: GET /dashboard, median of a few, identity and gzip: time and bytes.
2. Browser, cold cache (median of --loads): time to first byte, first contentful paint, DOMContentLoaded
   and the load event from navigation start; bytes transferred and requests made. Then a warm load
   (assets from the cache: their URLs are fingerprinted and immutable).
3. Polls: the page's own poll while nothing changed (304, no body), after one check changed (only its
   row), and the full snapshot the page never needs after its first paint, with server time.
"""
from __future__ import annotations

import argparse
import copy
import logging
import statistics
import sys
import time
from typing import Any

import requests

from bench.web_bench import StaticStore, StubServices
from kuberhealthy.base.times import format_time
from kuberhealthy.web import create_app
from testbed.clients import browser
from testbed.daemons.inprocess import serve

NAV = """
const n = performance.getEntriesByType('navigation')[0];
const fcp = performance.getEntriesByName('first-contentful-paint')[0];
const res = performance.getEntriesByType('resource');
return {ttfb: n.responseStart, fcp: fcp ? fcp.startTime : null, dcl: n.domContentLoadedEventEnd,
        load: n.loadEventEnd, rows: document.querySelectorAll('#checks tr[data-id]').length,
        bytes: n.transferSize + res.reduce((a, r) => a + r.transferSize, 0),
        html: n.encodedBodySize, decoded: n.decodedBodySize,
        requests: 1 + res.length, fromNetwork: 1 + res.filter(r => r.transferSize > 0).length};
"""


class LiveStore(StaticStore):
    """A static store whose objects can be replaced, telling its listeners as a reflector does."""

    def __init__(self, objs: list[dict[str, Any]]) -> None:
        super().__init__(objs)
        self._listeners: list[Any] = []

    def add_listener(self, fn: Any) -> None:
        self._listeners.append(fn)

    def put(self, obj: dict[str, Any]) -> None:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        prev = self._objs.get(key)
        self._objs[key] = obj
        for fn in self._listeners:
            fn("MODIFIED", obj, prev)


def stub(checks: int, history: int) -> StubServices:
    services = StubServices(checks, history)
    now = time.time()
    states = services.khstates.list()
    for i, s in enumerate(states):  # recent results, so the page reads like a live cluster
        s["spec"]["LastRun"] = format_time(now - (i % 600))
    services.khstates = LiveStore(states)
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checks", type=int, default=1000)
    p.add_argument("--history", type=int, default=24)
    p.add_argument("--loads", type=int, default=5)
    args = p.parse_args()
    reason = browser.missing()
    if reason:
        print(f"(skipped: {reason})")
        return 0
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    services = stub(args.checks, args.history)
    app = create_app(services)  # type: ignore[arg-type]
    server = serve(app)
    url = server.url + "/dashboard"
    session = requests.Session()
    try:
        session.get(url)  # builds the entries cache once, as the first request after start does
        namespaces = {s["metadata"]["namespace"] for s in services.khstates.list()}
        print(f"{args.checks} checks x {args.history} history entries, {len(namespaces)} namespaces")
        for enc in ("identity", "gzip"):
            ms, r = median_ms(lambda e=enc: session.get(url, headers={"Accept-Encoding": e}), 5)
            print(f"  server  GET /dashboard ({enc:8}) {ms:6.0f} ms  {wire(r):>9,} bytes on the wire")

        loads = []
        driver = browser.chrome(1280, 900)
        try:
            for _ in range(args.loads):
                driver.execute_cdp_cmd("Network.clearBrowserCache", {})
                driver.get(url)
                loads.append(driver.execute_script(NAV))
            driver.get(url)  # warm: the assets come from the cache
            warm = driver.execute_script(NAV)
            errors = browser.console_errors(driver)
        finally:
            driver.quit()
        med = {k: statistics.median([x[k] for x in loads if x[k] is not None] or [float("nan")])
               for k in ("ttfb", "fcp", "dcl", "load", "bytes")}
        first = loads[0]
        print(f"  browser cold load (median of {args.loads}): first byte {med['ttfb']:.0f} ms, first paint "
              f"{med['fcp']:.0f} ms, DOMContentLoaded {med['dcl']:.0f} ms, load {med['load']:.0f} ms "
              f"({'under' if med['load'] < 1000 else 'OVER'} 1 s); {first['rows']} rows")
        print(f"  weight  {med['bytes']:,.0f} bytes transferred in {first['requests']} requests "
              f"(page {first['html']:,} bytes gzipped, {first['decoded']:,} decoded; CSS + script the rest)")
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
        state["metadata"]["resourceVersion"] = "changed-1"
        state["spec"]["OK"], state["spec"]["Errors"] = False, ["changed for the bench"]
        services.khstates.put(state)
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
