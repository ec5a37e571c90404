"""`GET /status` through Flask's test client over fake services: off by default (404 like any unknown
URL), the checks of both kinds grouped by their label kuberhealthy.io/status-group with each group's
and check's state in words, error texts only with showErrors, escaping, the 30-day bars from rollups
seeded into the state objects, and the prepared bytes: ETag/304, HEAD, gzip, cache headers, and a build
only when the checks change, the UTC hour turns or showErrors is switched. The page in a real browser:
tests/browser/test_status_page_browser.py."""
from __future__ import annotations

import dataclasses
import gzip
import re
import threading
import time
from collections.abc import Mapping
from html.parser import HTMLParser
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from kuberhealthy.base.config import StatusPage as StatusPageConfig
from kuberhealthy.base.times import format_time
from kuberhealthy.kube import HEALTHCHECKS, KHCHECKS, KHJOBS, KHSTATES, Obj
from kuberhealthy.records import migration, rollcodec, rollups
from kuberhealthy.records.pause import PAUSED_UNTIL
from kuberhealthy.web import create_app, htmlheaders
from kuberhealthy.web.dashboard import render as dashpage
from kuberhealthy.web.entries import ViewCache
from kuberhealthy.web.parts import install, part
from kuberhealthy.web.statuspage import board
from kuberhealthy.web.statuspage.page import MIN_AGE, Key, PreparedStatusPage
from kuberhealthy.web.uptime import Uptime
from testbed.fakes import NS, POD_NAME, FakeClock, FakeServices, fake_config, khcheck, khjob, khstate_of

GROUP = board.GROUP_LABEL
DAY = 86400


def services_with(enabled: bool = True, show_errors: bool = False) -> FakeServices:
    return FakeServices(config=fake_config(status_page=StatusPageConfig(enabled=enabled, show_errors=show_errors)))


def labelled(obj: Obj, group: str | None) -> Obj:
    if group is not None:
        obj["metadata"]["labels"] = {GROUP: group}
    return obj


def seeded(fail_every: int = 0, days: int = 30, now: float | None = None) -> dict[str, Any]:
    """A rollup of hourly runs over `days` days up to `now` (the last a second before it, so today has runs
    at any hour): every `fail_every`-th run failed (0: none)."""
    now = time.time() if now is None else now
    r = rollups.empty()
    start = now - 1 - (int(days * 24) - 1) * 3600
    for i in range(int(days * 24)):
        failed = fail_every and i % fail_every == fail_every - 1
        r = rollups.record(r, start + i * 3600, rollups.FAILED if failed else rollups.OK, 1.5,
                           interval=3600)
    return rollcodec.serialize(r)


def ran(services: FakeServices, name: str, ok: bool, errors: list[str] | None = None, namespace: str = NS,
        **spec: Any) -> None:
    services.api.put(KHSTATES, khstate_of(name, namespace, OK=ok, Errors=errors or [],
                                          LastRun=format_time(time.time() - 30), RunDuration="1.5s",
                                          AuthoritativePod=POD_NAME, **spec))


def hc_status(ok: bool = True, errors: tuple[str, ...] = (), **more: Any) -> dict[str, Any]:
    """A HealthCheck's status after one finished run (v3's names; runDuration in nanoseconds)."""
    return {"ok": ok, "errors": list(errors), "runDuration": 2_000_000_000, "namespace": NS,
            "lastRunUnix": int(time.time()) - 30,
            "runBinding": {"uuid": "u-1", "authoritativePod": "hc-pod", "finishedUUID": "u-1"}, **more}


def healthcheck(name: str, *, status: dict[str, Any] | None = None, labels: dict[str, str] | None = None,
                annotations: dict[str, str] | None = None) -> Obj:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    obj: Obj = {"apiVersion": HEALTHCHECKS.api_version, "kind": "HealthCheck", "metadata": meta,
                "spec": {"podSpec": {"spec": {"containers": [{"name": "main", "image": "kh-sim/v3"}]}}}}
    if status is not None:
        obj["status"] = status
    return obj


def world(services: FakeServices) -> None:
    """Network: dns (OK), ingress (failing, a HealthCheck); storage: disk (OK); no group: web (OK),
    fresh (never ran); a job without a group (not shown) and one with (shown)."""
    services.api.put(KHCHECKS, labelled(khcheck("dns"), "network"))
    ran(services, "dns", True, rollups=seeded())
    services.api.put(HEALTHCHECKS, healthcheck("ingress", labels={GROUP: "network"},
                                               status=hc_status(False, ("upstream 10.0.0.7:443 <refused>",)),))
    services.api.put(KHCHECKS, labelled(khcheck("disk"), "storage"))
    ran(services, "disk", True)
    services.api.put(KHCHECKS, khcheck("web"))
    ran(services, "web", True)
    services.api.put(KHCHECKS, khcheck("fresh"))
    services.api.put(KHJOBS, khjob("migrate", phase="Completed"))
    ran(services, "migrate", True)
    services.api.put(KHJOBS, labelled(khjob("backup", phase="Completed"), "storage"))
    ran(services, "backup", False, ["backup failed"])


class Page(HTMLParser):
    """The page's groups [(name, state class, state words)] and checks [(group, name, state class, words)]."""

    def __init__(self) -> None:
        super().__init__()
        self.groups: list[list[str]] = []
        self.checks: list[list[str]] = []
        self.urls: list[str] = []
        self.tags: set[str] = set()
        self._in: list[str] = []  # the class of each open span/h1/h2 we read text from

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        cls = a.get("class") or ""
        self.tags.add(tag)
        self.urls += [v for k, v in attrs if k in ("href", "src", "action") and v]
        if tag == "section" and cls.startswith("group "):
            self.groups.append(["", cls.split()[1], ""])
        if tag == "li" and cls.startswith("check "):
            self.checks.append([self.groups[-1][0], "", cls.split()[1], ""])
        self._in.append(cls)

    def handle_endtag(self, tag: str) -> None:
        if self._in:
            self._in.pop()

    def handle_data(self, data: str) -> None:
        open_ = set(self._in)  # a state's glyph is a span inside it
        if "gname" in open_:
            self.groups[-1][0] += data
        elif "gstate" in open_:
            self.groups[-1][2] = (self.groups[-1][2] + " " + data.strip()).strip()
        elif "name" in open_ and self.checks:
            self.checks[-1][1] += data
        elif "state" in open_ and self.checks:
            self.checks[-1][3] = (self.checks[-1][3] + " " + data.strip()).strip()


def parse(html: str) -> Page:
    p = Page()
    p.feed(html)
    return p


def client_of(services: FakeServices) -> FlaskClient:
    return create_app(services, caller_wait=0.0).test_client()


# --- off by default --------------------------------------------------------------------------------------

def test_the_page_is_off_by_default_and_answers_404_like_any_unknown_url(client: FlaskClient) -> None:
    assert fake_config().status_page == StatusPageConfig(enabled=False, show_errors=False)
    unknown = client.get("/no-such-page")
    for url in ("/status", "/status/status.css"):
        resp = client.get(url)
        assert resp.status_code == 404 and resp.mimetype == "text/plain"
        assert resp.get_data() == unknown.get_data()
    assert client.head("/status").status_code == 404


def test_switching_the_page_on_and_off_applies_at_the_next_request() -> None:
    services = services_with(enabled=False)
    client = client_of(services)
    assert client.get("/status").status_code == 404
    services.config = dataclasses.replace(services.config, status_page=StatusPageConfig(enabled=True))
    assert client.get("/status").status_code == 200
    services.config = dataclasses.replace(services.config, status_page=StatusPageConfig(enabled=False))
    assert client.get("/status").status_code == 404


# --- what it says ----------------------------------------------------------------------------------------

def test_checks_of_both_kinds_are_grouped_by_their_label_with_the_default_group_last() -> None:
    services = services_with()
    world(services)
    resp = client_of(services).get("/status")
    assert resp.status_code == 200 and resp.mimetype == "text/html"
    page = parse(resp.get_data(as_text=True))
    assert page.groups == [["network", "s-failing", "\u2717 1 of 2 checks failing"],
                           ["storage", "s-failing", "\u2717 1 of 2 checks failing"],
                           [board.DEFAULT_GROUP, "s-unknown", "? 1 of 2 checks without a result yet"]]
    assert page.checks == [
        ["network", "dns", "s-ok", "\u2713 OK"], ["network", "ingress", "s-failing", "\u2717 Failing"],
        ["storage", "backup", "s-failing", "\u2717 Failing"], ["storage", "disk", "s-ok", "\u2713 OK"],
        [board.DEFAULT_GROUP, "fresh", "s-never-run", "? No result yet"], [board.DEFAULT_GROUP, "web", "s-ok",
                                                                           "\u2713 OK"]]
    html = resp.get_data(as_text=True)
    assert "<title>Status: 2 of 6 checks failing</title>" in html and "migrate" not in html  # an unlabelled job


def test_a_group_whose_checks_all_pass_says_all_ok_and_so_does_the_page() -> None:
    services = services_with()
    for name in ("a", "b"):
        services.api.put(KHCHECKS, labelled(khcheck(name), "apis"))
        ran(services, name, True)
    html = client_of(services).get("/status").get_data(as_text=True)
    assert parse(html).groups == [["apis", "s-ok", "\u2713 All OK"]]
    assert 'class="overall s-ok"' in html and "All checks OK" in html


def test_a_paused_check_says_so_and_counts_neither_way() -> None:
    services = services_with()
    until = format_time(time.time() + 3600)
    services.api.put(KHCHECKS, labelled(khcheck("quiet"), "apis"))
    ran(services, "quiet", False, ["down for maintenance"])
    services.api.edit(KHCHECKS, NS, "quiet", lambda o: o["metadata"].setdefault("annotations", {}).update(
        {PAUSED_UNTIL: until}))
    services.api.put(KHCHECKS, labelled(khcheck("live"), "apis"))
    ran(services, "live", True)
    page = parse(client_of(services).get("/status").get_data(as_text=True))
    assert page.groups == [["apis", "s-ok", "\u2713 OK"]]
    assert ["apis", "quiet", "s-paused", "\u2016 Paused"] in page.checks


def test_a_migrated_khcheck_is_not_shown_its_healthcheck_is() -> None:
    services = services_with()
    created = services.api.put(KHCHECKS, labelled(khcheck("probe"), "apis"))
    ran(services, "probe", False, ["old khcheck"])
    services.api.edit(KHCHECKS, NS, "probe", lambda o: o["metadata"].setdefault("annotations", {}).update(
        {migration.MIGRATED_TO: "probe"}))
    services.api.put(HEALTHCHECKS, healthcheck("probe", labels={GROUP: "apis"}, status=hc_status(True),
                                               annotations={migration.MIGRATED_FROM: created["metadata"]["uid"]}))
    page = parse(client_of(services).get("/status").get_data(as_text=True))
    assert page.checks == [["apis", "probe", "s-ok", "\u2713 OK"]]


def test_error_texts_are_hidden_unless_show_errors_and_then_shown_as_text() -> None:
    hidden = services_with()
    world(hidden)
    html = client_of(hidden).get("/status").get_data(as_text=True)
    assert "10.0.0.7" not in html and "backup failed" not in html and 'class="errors"' not in html
    shown = services_with(show_errors=True)
    world(shown)
    html = client_of(shown).get("/status").get_data(as_text=True)
    assert "upstream 10.0.0.7:443 &lt;refused&gt;" in html and "<refused>" not in html
    assert "backup failed" in html and html.count('class="errors"') == 2  # only the failing checks'


def test_group_and_check_names_are_escaped() -> None:
    services = services_with(show_errors=True)
    services.api.put(KHCHECKS, labelled(khcheck("x<img src=y>"), "<script>alert(1)</script>"))
    ran(services, "x<img src=y>", False, ['"><svg onload=alert(2)>'])
    html = client_of(services).get("/status").get_data(as_text=True)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script" not in html
    assert "x&lt;img src=y&gt;" in html and "<img" not in html and "<svg onload" not in html
    assert parse(html).groups[0][0] == "<script>alert(1)</script>"


def test_each_check_has_its_30_day_bar_and_uptime_from_the_rollups_in_its_state() -> None:
    services = services_with()
    services.api.put(KHCHECKS, labelled(khcheck("steady"), "apis"))
    ran(services, "steady", True, rollups=seeded())
    services.api.put(HEALTHCHECKS, healthcheck("flaky", labels={GROUP: "apis"},
                                               status=hc_status(True, rollups=seeded(fail_every=3))))
    html = client_of(services).get("/status").get_data(as_text=True)
    bars = re.findall(r'<svg[^>]*class="chart daybar"[^>]*aria-label="([^"]*)"', html)
    assert len(bars) == 2
    assert re.match(r"flaky \(kh-checks\): last 30 days, uptime 6[67]\.\d\d %; 30 failing$", bars[0]), bars[0]
    assert bars[1].startswith("steady (kh-checks): last 30 days, uptime 100 %")
    assert "30-day uptime 100 %" in html and re.search(r"30-day uptime 6[67]\.\d\d %", html)
    days = [svg.count("<title>") for svg in re.findall(r'<svg[^>]*class="chart daybar".*?</svg>', html)]
    assert days == [30, 30]  # a segment per day, each with its tooltip


def test_a_check_with_less_than_30_days_of_history_says_how_many_days_its_uptime_covers() -> None:
    services = services_with()
    services.api.put(KHCHECKS, khcheck("young"))
    ran(services, "young", True, rollups=seeded(days=10))
    services.api.put(KHCHECKS, khcheck("fresh"))
    ran(services, "fresh", True)
    html = client_of(services).get("/status").get_data(as_text=True)
    assert re.search(r"30-day uptime 100 % \(1[01] days of history\)", html)  # 10 days back touch 11 UTC days
    assert "No finished run in 30 days" in html  # fresh: its run is not in any rollup yet


def test_the_page_has_no_script_form_or_link_and_loads_only_its_own_stylesheet() -> None:
    services = services_with(show_errors=True)
    world(services)
    client = client_of(services)
    resp = client.get("/status")
    page = parse(resp.get_data(as_text=True))
    assert not page.tags & {"script", "form", "a", "button", "img", "iframe"}
    assert len(page.urls) == 1 and page.urls[0].startswith("/status/status.css?v=")
    css = client.get(page.urls[0])
    assert css.status_code == 200 and css.mimetype == "text/css"
    assert "immutable" in css.headers["Cache-Control"]
    assert "run" not in {t.lower() for t in re.findall(r">([^<]+)<", resp.get_data(as_text=True))}
    assert resp.headers["Content-Security-Policy"] == htmlheaders.CSP == dashpage.CSP  # the dashboard's policy
    assert resp.headers["X-Content-Type-Options"] == "nosniff" and resp.headers["Referrer-Policy"] == "no-referrer"


# --- cacheable ---------------------------------------------------------------------------------------------

def test_the_page_is_cacheable_and_a_matching_etag_gets_304_without_a_body() -> None:
    services = services_with()
    world(services)
    client = client_of(services)
    first = client.get("/status")
    etag = first.headers["ETag"]
    assert etag.startswith('W/"') and first.headers["Cache-Control"] == "public, max-age=30"
    assert "Accept-Encoding" in first.headers["Vary"]
    again = client.get("/status", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.data == b"" and again.headers["ETag"] == etag
    assert client.get("/status", headers={"If-None-Match": '"other"'}).status_code == 200
    assert client.get("/status", headers={"If-None-Match": "*"}).status_code == 304
    head = client.head("/status")
    assert head.status_code == 200 and head.data == b"" and head.headers["ETag"] == etag
    assert int(head.headers["Content-Length"]) == len(first.data)


def test_a_client_that_takes_gzip_gets_the_same_page_gzipped_under_the_same_etag() -> None:
    services = services_with()
    world(services)
    client = client_of(services)
    plain = client.get("/status")
    zipped = client.get("/status", headers={"Accept-Encoding": "gzip"})
    assert zipped.headers["Content-Encoding"] == "gzip" and gzip.decompress(zipped.data) == plain.data
    assert zipped.headers["ETag"] == plain.headers["ETag"] and len(zipped.data) < len(plain.data) / 3


def test_odd_methods_and_query_strings_get_4xx_or_the_page_never_5xx() -> None:
    services = services_with()
    client = client_of(services)
    assert client.post("/status", data=b"{}").status_code == 405
    assert client.get("/status?%ff=%zz&a=" + "x" * 5000).status_code == 200
    assert client.get("/status", headers={"If-None-Match": 'W/"\x7f'}).status_code == 200
    assert client.get("/status", headers={"Accept-Encoding": "gzip;q=nonsense"}).status_code == 200


def _clocked(services: FakeServices, clock: FakeClock) -> tuple[Flask, PreparedStatusPage]:
    app = create_app(services, caller_wait=0.0)
    page = PreparedStatusPage(part(ViewCache, app), part(Uptime, app),
                      [services.khchecks, services.khjobs, services.khstates], wall=clock.wall, clock=clock).attach()
    install(app, page)
    return app, page


def test_requests_are_served_prepared_bytes_and_cost_no_api_request() -> None:
    clock = FakeClock(wall=1_800_000_000.0)  # on the hour
    services = services_with()
    world(services)
    app, page = _clocked(services, clock)
    client = app.test_client()
    before = len(services.api.calls)
    bodies = {client.get("/status").data for _ in range(20)}
    assert len(bodies) == 1 and page.builds == 1
    assert services.api.calls[before:] == []


def test_a_change_builds_the_page_again_at_most_once_per_min_age() -> None:
    clock = FakeClock(wall=1_800_000_000.0)
    services = services_with()
    world(services)
    app, page = _clocked(services, clock)
    client = app.test_client()
    etag = client.get("/status").headers["ETag"]
    ran(services, "web", False, ["now broken"])
    clock.advance(1.0)
    assert client.get("/status").headers["ETag"] == etag and page.builds == 1  # built a moment ago
    clock.advance(MIN_AGE)
    changed = client.get("/status")
    assert changed.headers["ETag"] != etag and page.builds == 2
    assert [board.DEFAULT_GROUP, "web", "s-failing", "\u2717 Failing"] in parse(changed.get_data(as_text=True)).checks
    clock.advance(60)
    client.get("/status")
    assert page.builds == 2  # nothing changed since


def test_the_page_is_built_again_when_the_utc_hour_turns_with_the_same_etag_when_nothing_shows_it() -> None:
    clock = FakeClock(wall=1_800_000_000.0 + 3590)
    services = services_with()
    world(services)
    app, page = _clocked(services, clock)
    client = app.test_client()
    etag = client.get("/status").headers["ETag"]
    clock.advance(20)  # into the next hour
    assert client.get("/status").headers["ETag"] == etag and page.builds == 2


def test_switching_show_errors_off_never_serves_the_page_with_errors_again() -> None:
    clock = FakeClock(wall=1_800_000_000.0)
    services = services_with(show_errors=True)
    world(services)
    app, page = _clocked(services, clock)
    client = app.test_client()
    assert "backup failed" in client.get("/status").get_data(as_text=True)
    services.config = dataclasses.replace(services.config, status_page=StatusPageConfig(enabled=True))
    assert "backup failed" not in client.get("/status").get_data(as_text=True)  # at once, MIN_AGE or not
    assert page.builds == 2


# --- board.py, pure --------------------------------------------------------------------------------------

def _item(state: str) -> board.Item:
    return board.Item("check", NS, state, state, ())


def test_a_group_state_is_failing_with_any_failure_ok_when_all_pass_and_unknown_otherwise() -> None:
    ok, bad, new, paused = (_item(s) for s in ("ok", "failing", "never-run", "paused"))
    assert board.standing([ok, bad, new, paused]) == board.Standing("failing", "1 of 3 checks failing")
    assert board.standing([ok, ok, paused]) == board.Standing("ok", "All OK")
    assert board.standing([ok]) == board.Standing("ok", "OK")
    assert board.standing([bad]) == board.Standing("failing", "Failing")
    assert board.standing([ok, new]) == board.Standing("unknown", "1 of 2 checks without a result yet")
    assert board.standing([new]) == board.Standing("unknown", "No results yet")
    assert board.standing([paused]) == board.Standing("unknown", "Paused")


def test_a_blank_group_label_means_the_default_group_and_groups_sort_by_name_ignoring_case() -> None:
    def view(name: str, kind: str = "check") -> dict[str, Any]:
        return {"kind": kind, "namespace": NS, "name": name, "state": "ok", "paused": None, "errors": []}

    got = board.arrange([(view("a"), {GROUP: "  "}), (view("b"), {GROUP: "beta"}), (view("c"), {GROUP: "Alpha"}),
                         (view("d"), {GROUP: board.DEFAULT_GROUP}), (view("j", "job"), {})], show_errors=False)
    assert [(g.name, [i.name for i in g.items]) for g in got.groups] == [
        ("Alpha", ["c"]), ("beta", ["b"]), (board.DEFAULT_GROUP, ["a", "d"])]
    assert board.Board(got.standing, ()).headline == "No checks to show yet"


def test_error_texts_are_cut_to_a_few_of_bounded_length() -> None:
    v = {"kind": "check", "namespace": NS, "name": "n", "state": "failing", "paused": None,
         "errors": ["x" * 1000, " ", *[f"e{i}" for i in range(10)]]}
    errors = board.item(v, show_errors=True).errors
    assert len(errors) == board.ERRORS_SHOWN and len(errors[0]) == board.ERROR_CHARS and errors[1] == "e0"
    assert board.item(v, show_errors=False).errors == ()


class _SlowRenderer:
    """Renders a check as its name and the page as the names joined; page() waits for `go` once set."""

    def __init__(self) -> None:
        self.go: threading.Event | None = None
        self.started = threading.Event()

    def check(self, item: board.Item, days: list[dict[str, Any]]) -> str:
        return f"{item.name}:{item.state}"

    def page(self, b: board.Board, checks: Mapping[Key, str]) -> str:
        self.started.set()
        if self.go is not None:
            assert self.go.wait(10)
        return "|".join(sorted(checks.values()))


def test_while_a_build_runs_other_requests_get_the_last_page_at_once() -> None:
    clock = FakeClock(wall=1_800_000_000.0)
    services = services_with()
    world(services)
    _, page = _clocked(services, clock)
    renderer = _SlowRenderer()
    old = page.prepared(False, renderer)
    ran(services, "web", False, ["now broken"])
    clock.advance(MIN_AGE + 1)
    renderer.go = threading.Event()
    got: list[bytes] = []
    builder = threading.Thread(target=lambda: got.append(page.prepared(False, renderer).body))
    builder.start()
    try:
        assert renderer.started.wait(10)
        assert page.prepared(False, renderer) is old  # not held up by the build under way
    finally:
        renderer.go.set()
        builder.join(10)
    assert got and b"web:failing" in got[0] and page.prepared(False, renderer).body == got[0]
