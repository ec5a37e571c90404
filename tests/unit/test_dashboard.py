"""The dashboard through Flask's test client over fake services: the overview, its filter, the live
updates (304 while nothing changed, only the changed rows after), a check page, the assets and their
cache headers, and `/` with and without dashboardAtRoot. The same pages in a real browser against a
real daemon: tests/browser."""
from __future__ import annotations

import gzip
import re
import time
from html.parser import HTMLParser
from typing import Any

import pytest
from flask.testing import FlaskClient

from kuberhealthy.base.times import format_time
from kuberhealthy.kube import HEALTHCHECKS, KHCHECKS, KHJOBS, KHSTATES, PODS
from kuberhealthy.records import rollcodec, rollups
from kuberhealthy.web import charts, create_app
from kuberhealthy.web.dashboard import render as dashpage
from testbed.daemons.inprocess import history_keys
from testbed.fakes import NS, POD_NAME, FakeServices, fake_config, healthcheck, khcheck, khjob, khstate_of

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"


def ran(services: FakeServices, name: str, ok: bool, errors: list[str] | None = None, outcomes: str = "o",
        **spec: Any) -> None:
    now = time.time()
    services.api.put(KHSTATES, khstate_of(name, OK=ok, Errors=errors or [], LastRun=format_time(now - 30),
                                          RunDuration="1.5s", AuthoritativePod=POD_NAME, Node="node-1",
                                          **history_keys(outcomes, now), **spec))


def world(services: FakeServices) -> None:
    services.api.put(KHCHECKS, khcheck("dns", image="example/dns:1"))
    services.api.put(KHCHECKS, khcheck("web", image="example/web:2"))
    services.api.put(KHCHECKS, khcheck("fresh"))
    services.api.put(KHJOBS, khjob("migrate", phase="Completed"))
    services.api.put(KHCHECKS, khcheck("other", namespace="team-b"))
    ran(services, "dns", True, outcomes="oofo")
    ran(services, "web", False, ["connection refused <script>alert(1)</script>", "second"], outcomes="oof")
    ran(services, "other", True, namespace="team-b")


class Rows(HTMLParser):
    """The overview's rows as (id, state, hidden), in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, str, bool]] = []
        self.tags: set[str] = set()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.add(tag)
        self.urls += [v for k, v in attrs if k in ("href", "src", "action") and v]
        if tag == "tr" and a.get("data-id"):
            self.rows.append((str(a["data-id"]), str(a["data-st"]), "hidden" in a))


def rows(html: str) -> Rows:
    parser = Rows()
    parser.feed(html)
    return parser


def test_the_overview_lists_checks_and_jobs_by_namespace_failing_first(client: FlaskClient,
                                                                       fake_services: FakeServices) -> None:
    world(fake_services)
    resp = client.get("/dashboard")
    assert resp.status_code == 200 and resp.mimetype == "text/html"
    page = resp.get_data(as_text=True)
    assert [(i, s) for i, s, _ in rows(page).rows] == [
        (f"check:{NS}/web", "failing"), (f"check:{NS}/fresh", "never-run"), (f"job:{NS}/migrate", "never-run"),
        (f"check:{NS}/dns", "ok"), ("check:team-b/other", "ok")]
    assert "1 of 5 failing" in page and f"<strong id=\"master\">{POD_NAME}</strong>" in page
    assert "connection refused &lt;script&gt;" in page and "<script>alert" not in page  # errors are text
    assert "(+1 more)" in page and "Completed" in page
    assert 'aria-label="last 4 runs: 3 passed, 1 failed; newest passed"' in page


def test_the_filter_in_the_query_string_hides_the_other_rows_without_javascript(client: FlaskClient,
                                                                                 fake_services: FakeServices) -> None:
    world(fake_services)
    page = client.get("/dashboard?q=refused&state=failing").get_data(as_text=True)
    shown = [i for i, _, hidden in rows(page).rows if not hidden]
    assert shown == [f"check:{NS}/web"]
    assert 'value="refused"' in page and '<option value="failing" selected>' in page and "Showing 1 of 5" in page
    page = client.get("/dashboard?ns=team-b").get_data(as_text=True)
    assert [i for i, _, hidden in rows(page).rows if not hidden] == ["check:team-b/other"]


def test_a_poll_while_nothing_changed_is_a_304_without_a_body(client: FlaskClient,
                                                               fake_services: FakeServices) -> None:
    world(fake_services)
    first = client.get("/dashboard/live")
    token = first.get_json()["token"]
    assert first.get_json()["full"] and len(first.get_json()["rows"]) == 5 and first.headers["ETag"] == f'W/"{token}"'
    again = client.get(f"/dashboard/live?since={token}", headers={"If-None-Match": f'"{token}"'})
    assert again.status_code == 304 and again.data == b""


def test_an_empty_or_odd_if_none_match_gets_the_changes_not_a_500(client: FlaskClient,
                                                                  fake_services: FakeServices) -> None:
    world(fake_services)  # found by the schemathesis fuzz (tests/contract/test_openapi_fuzz.py)
    for header in ('""', '"", "", W/"[VN"', "garbage"):
        resp = client.get("/dashboard/live", headers={"If-None-Match": header})
        assert resp.status_code == 200 and resp.get_json()["full"], header
        assert client.get(f"/dashboard/{NS}/web/live", headers={"If-None-Match": header}).status_code == 200
    assert client.get("/dashboard/live", headers={"If-None-Match": "*"}).status_code == 304  # RFC 9110


def test_a_poll_answered_by_another_replica_is_a_304_too_while_nothing_changed(fake_services: FakeServices) -> None:
    world(fake_services)
    replica_a = create_app(fake_services, caller_wait=0.0).test_client()
    replica_b = create_app(fake_services, caller_wait=0.0).test_client()  # its own change log (epoch)
    token = replica_a.get("/dashboard/live").get_json()["token"]
    assert replica_b.get(f"/dashboard/live?since={token}", headers={"If-None-Match": f'"{token}"'}
                         ).status_code == 304
    ran(fake_services, "fresh", True)
    delta = replica_b.get(f"/dashboard/live?since={token}", headers={"If-None-Match": f'"{token}"'}).get_json()
    assert delta["full"] and len(delta["rows"]) == 5  # B cannot tell what A sent: everything


def test_a_poll_after_a_change_carries_only_the_changed_row(client: FlaskClient,
                                                             fake_services: FakeServices) -> None:
    world(fake_services)
    page = client.get("/dashboard").get_data(as_text=True)
    token = re.search(r'data-token="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    ran(fake_services, "fresh", False, ["pod never started"], outcomes="f")
    delta = client.get(f"/dashboard/live?since={token}", headers={"If-None-Match": f'"{token}"'}).get_json()
    assert not delta["full"] and [r["id"] for r in delta["rows"]] == [f"check:{NS}/fresh"]
    assert 'data-st="failing"' in delta["rows"][0]["html"] and delta["rows"][0]["html"].startswith("<tr ")
    assert delta["banner"]["headline"] == "2 of 5 failing" and delta["removed"] == []
    fake_services.api.remove(KHCHECKS, NS, "dns")
    later = client.get(f"/dashboard/live?since={delta['token']}").get_json()
    assert later["removed"] == [f"check:{NS}/dns"] and later["rows"] == []


def test_a_new_master_reaches_the_banner_on_the_next_poll(client: FlaskClient, fake_services: FakeServices) -> None:
    world(fake_services)
    token = client.get("/dashboard/live").get_json()["token"]
    fake_services.master = "kh-other-1"
    delta = client.get(f"/dashboard/live?since={token}", headers={"If-None-Match": f'"{token}"'}).get_json()
    assert delta["banner"]["master"] == "kh-other-1" and delta["rows"] == []


def test_a_check_page_shows_spec_statistics_history_and_errors(client: FlaskClient,
                                                               fake_services: FakeServices) -> None:
    world(fake_services)
    page = client.get(f"/dashboard/{NS}/web").get_data(as_text=True)
    assert "<code>example/web:2</code>" in page and "1 h" in page and "1 min" in page  # interval, timeout
    assert "Consecutive failures" in page and "66.7 %" in page  # 2 of 3 kept runs OK
    assert page.count('<tr class="m-') == 3 and "broken 2" in page and "failed: timed out" in page
    assert "connection refused &lt;script&gt;" in page and 'id="run-now"' in page
    assert "checker said" not in page  # log tails only with exposeLogs


def test_log_tails_show_only_with_expose_logs() -> None:
    services = FakeServices(config=fake_config(expose_logs=True))
    world(services)
    page = create_app(services, caller_wait=0.0).test_client().get(f"/dashboard/{NS}/web").get_data(as_text=True)
    assert "<summary>Log tail</summary><pre>checker said 2</pre>" in page


def test_the_run_now_button_is_left_out_when_the_run_api_is_off() -> None:
    services = FakeServices(config=fake_config(enable_run_api=False))
    world(services)
    page = create_app(services, caller_wait=0.0).test_client().get(f"/dashboard/{NS}/web").get_data(as_text=True)
    assert 'id="run-now"' not in page


def test_a_check_page_live_update_is_304_until_the_check_changes(client: FlaskClient,
                                                                  fake_services: FakeServices) -> None:
    world(fake_services)
    first = client.get(f"/dashboard/{NS}/web/live")
    assert first.status_code == 200 and list(first.get_json()["parts"]) == ["live-check"]
    etag = first.headers["ETag"]
    assert client.get(f"/dashboard/{NS}/web/live", headers={"If-None-Match": etag}).status_code == 304
    ran(fake_services, "web", True, outcomes="ooo")
    changed = client.get(f"/dashboard/{NS}/web/live", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and "b-ok" in changed.get_json()["parts"]["live-check"]


def test_a_job_page_shows_its_phase_and_no_run_now(client: FlaskClient, fake_services: FakeServices) -> None:
    world(fake_services)
    page = client.get(f"/dashboard/{NS}/migrate").get_data(as_text=True)
    assert "<dt>Phase</dt><dd>Completed</dd>" in page and 'id="run-now"' not in page


def test_an_unknown_check_is_a_404_page_and_its_live_url_a_404(client: FlaskClient) -> None:
    resp = client.get(f"/dashboard/{NS}/nothing")
    assert resp.status_code == 404 and "No khcheck, khjob or HealthCheck" in resp.get_data(as_text=True)
    assert client.get(f"/dashboard/{NS}/nothing/live").status_code == 404


def test_no_uuid_of_a_run_in_flight_shows_on_the_dashboard(client: FlaskClient, fake_services: FakeServices) -> None:
    world(fake_services)
    live_uuid = "0f0f0f0f-aaaa-bbbb-cccc-123456789abc"
    state = fake_services.api.peek(KHSTATES, NS, "dns")
    assert state is not None
    state["spec"]["uuid"] = live_uuid
    fake_services.api.put(KHSTATES, state)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dns-1", "namespace": NS, "labels": {
        "kuberhealthy-check-name": "dns", "kuberhealthy-run-id": live_uuid, "app": "kuberhealthy-check"}},
        "spec": {"containers": [{"name": "main", "image": "x"}]}, "status": {"phase": "Running"}}
    fake_services.api.put(PODS, pod)
    for path in ("/dashboard", f"/dashboard/{NS}/dns", f"/dashboard/{NS}/dns/live", "/dashboard/live"):
        assert live_uuid not in client.get(path).get_data(as_text=True), path


def test_pages_load_only_their_own_assets_under_a_strict_content_security_policy(client: FlaskClient,
                                                                                 fake_services: FakeServices) -> None:
    world(fake_services)
    for path in ("/dashboard", f"/dashboard/{NS}/web"):
        resp = client.get(path)
        assert "default-src 'none'" in resp.headers["Content-Security-Policy"]
        parsed = rows(resp.get_data(as_text=True))
        assert [u for u in parsed.urls if "//" in u] == [], "nothing from another origin"
        assert "style" not in parsed.tags  # no inline style (the policy would refuse it)


def test_assets_are_cached_for_a_year_under_their_fingerprint_and_revalidated_otherwise(
        client: FlaskClient) -> None:
    page = client.get("/dashboard").get_data(as_text=True)
    css = re.search(r'href="(/dashboard/_static/dashboard\.css\?v=[0-9a-f]+)"', page)
    js = re.search(r'src="(/dashboard/_static/dashboard\.js\?v=[0-9a-f]+)"', page)
    assert css and js
    for url in (css.group(1), js.group(1)):
        resp = client.get(url)
        assert resp.status_code == 200 and resp.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    plain = client.get("/dashboard/_static/dashboard.css")
    assert plain.headers["Cache-Control"] == "no-cache" and plain.headers.get("ETag")
    assert client.get("/dashboard/_static/dashboard.css", headers={"If-None-Match": plain.headers["ETag"]}
                      ).status_code == 304
    assert client.get("/dashboard/_static/secrets.txt").status_code == 404
    assert client.get("/static/dashboard.css").status_code == 404  # no second, uncached copy
    icon = client.get("/favicon.ico")  # browsers ask for it on the JSON pages too
    assert icon.status_code == 200 and icon.mimetype == "image/svg+xml" and b"<svg" in icon.data


def test_slash_is_the_v2_json_for_every_request_by_default(client: FlaskClient, fake_services: FakeServices) -> None:
    world(fake_services)
    for accept in (BROWSER, "*/*", "application/json", None):
        resp = client.get("/", headers={"Accept": accept} if accept else {})
        assert resp.mimetype == "application/json" and "Vary" not in resp.headers, accept
        assert resp.get_json()["OK"] is False


def test_with_dashboard_at_root_a_browser_gets_the_dashboard_and_everyone_else_the_json() -> None:
    services = FakeServices(config=fake_config(dashboard_at_root=True))
    world(services)
    client = create_app(services, caller_wait=0.0).test_client()
    html = client.get("/", headers={"Accept": BROWSER})
    assert html.mimetype == "text/html" and "Accept" in html.headers["Vary"]
    assert 'href="/?format=json"' in html.get_data(as_text=True)  # the dashboard links to the JSON
    for headers, path in (({"Accept": "*/*"}, "/"), ({}, "/"), ({"Accept": "application/json"}, "/"),
                          ({"Accept": "text/html;q=0.5,application/json"}, "/"),
                          ({"Accept": "text/html,application/json"}, "/"),  # a tie is not a preference
                          ({"Accept": BROWSER}, "/?format=json")):
        resp = client.get(path, headers=headers)
        assert resp.mimetype == "application/json" and "Accept" in resp.headers["Vary"], (headers, path)
        assert set(resp.get_json()) == {"OK", "Errors", "CheckDetails", "JobDetails", "CurrentMaster"}
    assert client.post("/", data=b"{}", headers={"Accept": BROWSER}).status_code == 400


def test_a_large_page_goes_gzipped_to_a_client_that_takes_it(client: FlaskClient, fake_services: FakeServices) -> None:
    for i in range(40):
        fake_services.api.put(KHCHECKS, khcheck(f"check-{i:02d}"))
    plain = client.get("/dashboard")
    zipped = client.get("/dashboard", headers={"Accept-Encoding": "gzip"})
    assert "Content-Encoding" not in plain.headers and "Accept-Encoding" in plain.headers["Vary"]
    assert zipped.headers["Content-Encoding"] == "gzip" and len(zipped.data) < len(plain.data) / 4
    assert gzip.decompress(zipped.data).count(b"<tr data-id=") == 40


# --- uptime pictures (seeded through the state objects: khstate spec.rollups, HealthCheck status.rollups) ------

DAY = 86400


def month_of_runs(now: float, bad_day: int | None = None, every: int = 3600) -> dict[str, Any]:
    """30 days of runs as the run's state write leaves them (rollcodec), failing every other run on
    `bad_day` days back (0: today). The last run is a second before `now`, so today has runs at any hour
    (a month that started at `now` a month ago left today empty from midnight until its first hour)."""
    r = rollups.empty()
    t = now - 1 - (30 * DAY - 2 * every) // every * every
    k = 0
    while t < now:
        bad = bad_day is not None and int((now - t) // DAY) == bad_day and k % 2 == 0
        r = rollups.record(r, t, "failed" if bad else "ok", 1.0 + (k % 5) * 0.5, interval=every)
        t += every
        k += 1
    return rollcodec.serialize(r)


def hc_status(now: float, **more: Any) -> dict[str, Any]:
    return {"ok": True, "errors": [], "runDuration": 1_500_000_000, "namespace": NS, "currentUUID": "",
            "lastRunUnix": int(now - 30), "successCount": 5, "failureCount": 0, "consecutiveFailures": 0,
            "lastOKUnix": int(now - 30), "lastFailureUnix": 0,
            "runBinding": {"uuid": "u-1", "authoritativePod": "probe-abc", "finishedUUID": "u-1"}, **more}


def uptime_world(services: FakeServices) -> float:
    now = time.time()
    world(services)
    state = services.api.peek(KHSTATES, NS, "dns")
    assert state is not None
    state["spec"]["rollups"] = month_of_runs(now, bad_day=2)
    services.api.put(KHSTATES, state)
    services.api.put(HEALTHCHECKS, healthcheck("v3probe", status=hc_status(now, rollups=month_of_runs(now))))
    return now


def svgs(html: str, cls: str) -> list[str]:
    return re.findall(rf'<svg [^>]*class="chart {cls}".*?</svg>', html)


def test_each_overview_row_of_both_kinds_has_its_30_day_bar_and_duration_sparkline(
        client: FlaskClient, fake_services: FakeServices) -> None:
    uptime_world(fake_services)
    page = client.get("/dashboard").get_data(as_text=True)
    assert len(rows(page).rows) == 6
    bars, sparks = svgs(page, "daybar"), svgs(page, "spark")
    assert len(bars) == 6 and len(sparks) == 6  # every row: checks, the job, the HealthCheck
    dns = next(b for b in bars if f'aria-label="{NS}/dns: last 30 days' in b)
    assert dns.count("<title>") == 30 and "seg-failing" in dns
    assert re.search(r"<title>\d{4}-\d\d-\d\d UTC: failing; uptime \d+\.\d\d %; runs \d+ OK, [1-9]\d* failed, "
                     r"0 skipped; p50 [\d.]+ s, p95 [\d.]+ s</title>", dns)
    hc = next(b for b in bars if f'aria-label="HealthCheck {NS}/v3probe: last 30 days' in b)
    assert "seg-failing" not in hc and "30 OK" in hc
    fresh = next(b for b in bars if f'aria-label="{NS}/fresh: last 30 days, no finished runs; 30 no data"' in b)
    assert "seg-nodata" in fresh  # no rollups yet: no error, an empty bar
    assert any(f'aria-label="{NS}/web: durations of the last 3 runs' in s for s in sparks)
    assert "a shape for each state:" in page and 'class="chart legend"' in page  # the shapes in words


def test_the_overview_keeps_each_rows_pictures_until_its_state_or_the_utc_day_changes(
        client: FlaskClient, fake_services: FakeServices, monkeypatch: pytest.MonkeyPatch) -> None:
    now = uptime_world(fake_services)
    drawn: list[str] = []
    real = charts.day_bar

    def counted(days: list[dict[str, Any]], label: str) -> str:
        drawn.append(label)
        return real(days, label)
    monkeypatch.setattr(charts, "day_bar", counted)
    monkeypatch.setattr(dashpage, "_now", lambda: now)
    first = client.get("/dashboard").get_data(as_text=True)
    assert len(drawn) == 6
    assert client.get("/dashboard").get_data(as_text=True) == first and len(drawn) == 6  # nothing drawn again
    state = fake_services.api.peek(KHSTATES, NS, "dns")
    assert state is not None
    state["spec"]["rollups"] = month_of_runs(now, bad_day=0)
    fake_services.api.put(KHSTATES, state)
    client.get("/dashboard")
    assert drawn[6:] == [f"{NS}/dns"]  # only the row whose state changed
    monkeypatch.setattr(dashpage, "_now", lambda: (now // DAY + 1) * DAY + 5)  # just after UTC midnight
    page = client.get("/dashboard").get_data(as_text=True)
    assert len(drawn) == 13  # every bar moved a day
    token = re.search(r'data-token="([^"]+)"', first).group(1)  # type: ignore[union-attr]
    delta = client.get(f"/dashboard/live?since={token}", headers={"If-None-Match": f'"{token}"'}).get_json()
    assert len(delta["rows"]) == 6  # a page held over midnight gets every row's new bar
    assert page != first


def test_a_check_page_shows_the_windows_in_words_the_timelines_and_the_duration_plots_with_their_p95(
        client: FlaskClient, fake_services: FakeServices) -> None:
    uptime_world(fake_services)
    page = client.get(f"/dashboard/{NS}/dns").get_data(as_text=True)
    assert "Uptime and durations" in page
    assert re.search(r"<th scope=\"row\">7d</th><td>9\d\.\d\d % \((degraded|failing)\)</td><td>\d+ %</td>", page)
    assert re.search(r"<th scope=\"row\">24h</th><td>100 % \(OK\)</td><td>\d+ %</td><td>[\d.]+ s</td>", page)
    assert len(svgs(page, "daybar")) == 1
    timelines = svgs(page, "timeline")
    assert len(timelines) == 2 and [t.count("<title>") for t in timelines] == [24, 168]
    assert f'aria-label="{NS}/dns: outcomes per hour over 24h' in timelines[0]
    plots = svgs(page, "durplot")
    assert len(plots) == 2
    for plot, window in zip(plots, ("24h", "7d"), strict=True):
        assert f'aria-label="{NS}/dns: run durations per hour over {window}, p50 and p95; window p95 ' in plot
        assert 'class="p95-window"' in plot and f"p95 over {window}: " in plot and ">duration</text>" in plot
    hc = client.get(f"/dashboard/{NS}/hc:v3probe").get_data(as_text=True)
    assert len(svgs(hc, "durplot")) == 2 and f"HealthCheck {NS}/v3probe: run durations per hour over 7d" in hc


def test_a_check_pages_live_part_carries_its_plots_and_moves_with_the_utc_hour(
        client: FlaskClient, fake_services: FakeServices, monkeypatch: pytest.MonkeyPatch) -> None:
    now = uptime_world(fake_services)
    monkeypatch.setattr(dashpage, "_now", lambda: now)
    first = client.get(f"/dashboard/{NS}/dns/live")
    assert 'class="chart durplot"' in first.get_json()["parts"]["live-check"]
    etag = first.headers["ETag"]
    assert client.get(f"/dashboard/{NS}/dns/live", headers={"If-None-Match": etag}).status_code == 304
    monkeypatch.setattr(dashpage, "_now", lambda: (now // 3600 + 1) * 3600 + 1)
    assert client.get(f"/dashboard/{NS}/dns/live", headers={"If-None-Match": etag}).status_code == 200


def test_a_rollup_edited_into_nonsense_draws_an_empty_bar_not_an_error(client: FlaskClient,
                                                                       fake_services: FakeServices) -> None:
    world(fake_services)
    for i, junk in enumerate(({"v": 1, "hours": "%%%not base64"}, "a string", {"v": 99}, [1, 2])):
        state = fake_services.api.peek(KHSTATES, NS, "dns")
        assert state is not None
        state["spec"]["rollups"] = junk
        state["metadata"]["resourceVersion"] = f"junk-{i}"
        fake_services.api.put(KHSTATES, state)
        for path in ("/dashboard", f"/dashboard/{NS}/dns"):
            resp = client.get(path)
            assert resp.status_code == 200, (junk, path)
            assert f'aria-label="{NS}/dns: last 30 days, no finished runs; 30 no data"' in resp.get_data(as_text=True)


def test_the_uptime_pictures_load_nothing_and_keep_the_content_security_policy(
        client: FlaskClient, fake_services: FakeServices) -> None:
    uptime_world(fake_services)
    for path in ("/dashboard", f"/dashboard/{NS}/dns"):
        resp = client.get(path)
        html = resp.get_data(as_text=True)
        assert resp.headers["Content-Security-Policy"] == dashpage.CSP
        parsed = rows(html)
        assert [u for u in parsed.urls if "//" in u] == [] and "style" not in parsed.tags
        assert " style=" not in html and "url(" not in html and "<script" not in html.replace(
            '<script src="/dashboard/_static/', "")


def test_a_check_pages_plots_are_drawn_once_an_hour_while_its_rollup_stays_the_same(
        client: FlaskClient, fake_services: FakeServices, monkeypatch: pytest.MonkeyPatch) -> None:
    now = uptime_world(fake_services)
    drawn: list[str] = []
    real = charts.duration_plot

    def counted(buckets: Any, label: str, window: str, p95: float | None = None) -> Any:
        drawn.append(window)
        return real(buckets, label, window, p95)
    monkeypatch.setattr(charts, "duration_plot", counted)
    monkeypatch.setattr(dashpage, "_now", lambda: now)
    for _ in range(3):
        assert client.get(f"/dashboard/{NS}/dns").status_code == 200
    assert drawn == ["24h", "7d"]
    monkeypatch.setattr(dashpage, "_now", lambda: (now // 3600 + 1) * 3600 + 1)
    client.get(f"/dashboard/{NS}/dns")
    assert drawn == ["24h", "7d", "24h", "7d"]
