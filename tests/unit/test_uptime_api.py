"""Uptime over time in the JSON API and on /metrics, over the fakes: each entry's `windows` (khchecks, khjobs
and HealthCheck alike, from the rollup in the check's state), windows that move with time while nothing is
written, `GET /api/checks/<ns>/<name>/timeline` and its refusals, and kuberhealthy_check_uptime_ratio.

History is seeded the way the daemon keeps it: rollups.record() over an injected time range, packed by
rollcodec.serialize() into the khstate's spec.rollups or the HealthCheck's status.rollups."""
from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from kuberhealthy.kube import HEALTHCHECKS, KHCHECKS, KHJOBS, KHSTATES, Obj
from kuberhealthy.records import rollcodec, rollups
from kuberhealthy.web import create_app
from kuberhealthy.web.entries import HealthCheckCaches, ViewCache
from kuberhealthy.web.uptime import FRESH, Uptime
from testbed.fakes import NS, POD_NAME, FakeServices, healthcheck, khcheck, khjob, khstate_of
from tests.unit.metrics_support import families, promtool

HOUR = 3600.0
DAY = 24 * HOUR
WINDOWS = ("1h", "24h", "7d", "30d")


def ran(**more: Any) -> dict[str, Any]:
    """A HealthCheck status after one OK run, in v3's names and units (runDuration in nanoseconds)."""
    return {"ok": True, "errors": [], "runDuration": 2_500_000_000, "namespace": NS, "currentUUID": "",
            "lastRunUnix": 1_714_564_800, "successCount": 1, "failureCount": 0, "consecutiveFailures": 0,
            "lastOKUnix": 1_714_564_800, "lastFailureUnix": 0,
            "runBinding": {"uuid": "u-1", "authoritativePod": "probe-abc", "finishedUUID": "u-1"}, **more}


def history(now: float, span: float, interval: float = 600.0, fail_every: int = 3, duration: float = 2.0,
            until: float | None = None) -> dict[str, Any]:
    """The stored rollup of a check run every `interval` seconds for `span` seconds up to `until` (default
    `now`), every `fail_every`-th run failed."""
    end = now if until is None else until
    rollup, t, i = rollups.empty(), end - span + interval / 2, 0
    while t <= end:
        i += 1
        outcome = rollups.FAILED if fail_every and i % fail_every == 0 else rollups.OK
        rollup = rollups.record(rollup, t, outcome, duration, interval=interval)
        t += interval
    return rollcodec.serialize(rollup)


def khstate_with(name: str, value: dict[str, Any] | None) -> Obj:
    spec: dict[str, Any] = {"OK": True, "LastRun": "2024-05-01T12:00:00Z", "RunDuration": "2s",
                            "AuthoritativePod": POD_NAME}
    if value is not None:
        spec["rollups"] = value
    return khstate_of(name, **spec)


def listing(client: FlaskClient, url: str = "/api/checks") -> dict[tuple[str, str], dict[str, Any]]:
    resp = client.get(url)
    assert resp.status_code == 200
    return {(e["name"], e["kind"]): e for e in resp.get_json()["checks"]}


def near(value: Any, expected: float, tolerance: float) -> bool:
    return isinstance(value, float) and abs(value - expected) <= tolerance


# --- windows in the entries --------------------------------------------------------------------------------

def test_every_entry_of_either_kind_says_its_windows_from_the_rollup_in_its_state(
        fake_services: FakeServices, client: FlaskClient) -> None:
    now = time.time()  # the app's windows end at the real now
    s = fake_services
    s.api.put(KHCHECKS, khcheck("dns"))
    s.api.put(KHJOBS, khjob("dns"))
    s.api.put(KHSTATES, khstate_with("dns", history(now, 10 * DAY)))  # 1,440 runs, one in three failed
    s.api.put(HEALTHCHECKS, healthcheck("probe", status=ran(rollups=history(now, 2 * DAY, fail_every=4))))
    entries = listing(client)
    check, job, probe = entries[("dns", "check")], entries[("dns", "job")], entries[("probe", "healthcheck")]
    assert set(check["windows"]) == set(WINDOWS) and job["windows"] == check["windows"]  # one khstate
    for window in WINDOWS:
        assert near(check["windows"][window]["uptime"], 2 / 3, 1 / 6), window  # one run of an hour's six
    assert near(check["windows"]["7d"]["uptime"], 2 / 3, 0.001)
    assert check["windows"]["7d"]["coverage"] == pytest.approx(1.0, abs=0.01)
    assert check["windows"]["30d"]["coverage"] == pytest.approx(10 / 30, abs=0.01)
    for p in ("durationP50", "durationP95", "durationP99"):
        assert check["windows"]["24h"][p] == pytest.approx(2.0, rel=0.02)
        assert p not in check["windows"]["1h"] and p not in check["windows"]["30d"]
    assert near(probe["windows"]["24h"]["uptime"], 3 / 4, 1 / 6)
    assert probe["windows"]["7d"]["coverage"] == pytest.approx(2 / 7, abs=0.01)
    assert (check["uptime"], check["uptime24h"]) == (None, None)  # the kept history's figures stay as they were


def test_an_entry_without_a_rollup_has_every_window_null_and_uncovered(
        fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(KHCHECKS, khcheck("fresh"))
    fake_services.api.put(KHCHECKS, khcheck("old"))
    fake_services.api.put(KHSTATES, khstate_with("old", None))  # a khstate from before rollups
    fake_services.api.put(KHCHECKS, khcheck("junk"))
    fake_services.api.put(KHSTATES, khstate_with("junk", {"v": 1, "hours": "not base64 at all"}))
    for entry in listing(client).values():
        assert set(entry["windows"]) == set(WINDOWS)
        assert all(w["uptime"] is None and w["coverage"] == 0 for w in entry["windows"].values()), entry["name"]
        assert entry["windows"]["24h"]["durationP95"] is None


def test_an_entry_s_body_and_its_view_say_the_same_windows(fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(KHCHECKS, khcheck("dns"))
    fake_services.api.put(KHSTATES, khstate_with("dns", history(time.time(), DAY)))
    resp = client.get(f"/api/checks/{NS}/dns")
    (entry,) = resp.get_json()["checks"]
    assert near(entry["windows"]["24h"]["uptime"], 2 / 3, 1 / 6)
    assert json.loads(resp.get_data()) == {"checks": [entry]}


def views_over(s: FakeServices) -> tuple[ViewCache, Uptime]:
    hc = s.kinds.named("healthcheck")
    assert hc is not None
    uptime = Uptime(s.khstates, hc.states, wall=s.clock.wall, clock=s.clock)
    views = ViewCache(s.khchecks, s.khjobs, s.khstates, s.pods, expose_logs=lambda: False, wall=s.clock.wall,
                      healthchecks=HealthCheckCaches(hc.checks, hc.states), uptime=uptime).attach()
    return views, uptime


@pytest.mark.parametrize("kind", ["check", "healthcheck"])
def test_windows_move_with_time_while_nothing_is_written(fake_services: FakeServices, kind: str) -> None:
    s = fake_services
    now = s.clock.wall()
    value = history(now, 3 * HOUR, fail_every=0)  # OK every 10 minutes for the last three hours
    if kind == "check":
        s.api.put(KHCHECKS, khcheck("dns"))
        s.api.put(KHSTATES, khstate_with("dns", value))
    else:
        s.api.put(HEALTHCHECKS, healthcheck("dns", status=ran(rollups=value)))
    views, _ = views_over(s)
    (first,) = views.one(NS, "dns")
    assert first.view["windows"]["1h"]["uptime"] == 1.0 and views.rebuilt == 1
    s.clock.advance(HOUR / 2)  # past FRESH: every window slides by half an hour
    (later,) = views.one(NS, "dns")
    assert later.view["windows"]["24h"]["coverage"] > first.view["windows"]["24h"]["coverage"]
    s.clock.advance(2 * HOUR)  # the last run is now more than an hour ago
    (after,) = views.one(NS, "dns")
    assert after.view["windows"]["1h"]["uptime"] is None and after.view["windows"]["24h"]["uptime"] == 1.0
    assert views.rebuilt == 1 and views.rewindowed == 2  # the windows alone were taken again
    assert json.loads(after.body)["windows"] == after.view["windows"]
    assert {k: v for k, v in json.loads(after.body).items() if k != "windows"} == \
        {k: v for k, v in json.loads(first.body).items() if k != "windows"}


def test_windows_are_kept_fresh_seconds_and_taken_again_by_the_first_read_after(fake_services: FakeServices) -> None:
    s = fake_services
    s.api.put(KHCHECKS, khcheck("dns"))
    s.api.put(KHSTATES, khstate_with("dns", history(s.clock.wall(), DAY)))
    views, _ = views_over(s)
    (first,) = views.one(NS, "dns")
    s.clock.advance(FRESH / 2 - 1)  # entries built together at start: taken again within the second half
    assert views.one(NS, "dns")[0] is first
    s.clock.advance(FRESH / 2 + 1)
    (second,) = views.one(NS, "dns")
    assert second is not first and views.rewindowed == 1
    s.clock.advance(FRESH - 1)  # after that, every FRESH seconds
    assert views.one(NS, "dns")[0] is second
    s.clock.advance(1)
    assert views.one(NS, "dns")[0] is not second and views.rewindowed == 2 and views.rebuilt == 1


def test_a_write_rebuilds_the_entry_with_the_new_windows_at_once(fake_services: FakeServices) -> None:
    s = fake_services
    now = s.clock.wall()
    s.api.put(KHCHECKS, khcheck("dns"))
    s.api.put(KHSTATES, khstate_with("dns", history(now, DAY, fail_every=0)))
    views, _ = views_over(s)
    assert views.one(NS, "dns")[0].view["windows"]["24h"]["uptime"] == 1.0
    s.api.put(KHSTATES, khstate_with("dns", history(now, DAY, fail_every=2)))
    assert views.one(NS, "dns")[0].view["windows"]["24h"]["uptime"] == pytest.approx(0.5, abs=1 / 6)


def test_an_entry_due_when_a_neighbour_of_its_name_changes_still_gets_new_windows(fake_services: FakeServices) -> None:
    s = fake_services
    s.api.put(KHCHECKS, khcheck("dns"))
    s.api.put(KHSTATES, khstate_with("dns", history(s.clock.wall(), DAY)))
    views, _ = views_over(s)
    (first,) = views.one(NS, "dns")
    s.clock.advance(FRESH)
    s.api.put(KHJOBS, khjob("dns"))  # marks the name changed; the check's own objects are not
    check = {b.view["kind"]: b for b in views.one(NS, "dns")}["check"]
    assert check.version == first.version and check.view["windows"] is not first.view["windows"]
    s.clock.advance(FRESH)
    assert {b.view["kind"]: b for b in views.one(NS, "dns")}["check"] is not check  # still on its schedule
    assert views.rewindowed == 3  # the check twice, the job (built a FRESH later) once


def test_entries_without_a_rollup_are_never_taken_again(fake_services: FakeServices) -> None:
    s = fake_services
    for name in ("a", "b", "c"):
        s.api.put(KHCHECKS, khcheck(name))
    s.api.put(KHSTATES, khstate_with("a", None))
    views, _ = views_over(s)
    built = views.entries()
    for _ in range(5):
        s.clock.advance(FRESH)
        assert views.entries() == built
    assert views.rewindowed == 0 and views.rebuilt == 3


def test_without_uptime_the_entries_say_every_window_null(fake_services: FakeServices) -> None:
    s = fake_services
    s.api.put(KHCHECKS, khcheck("dns"))
    s.api.put(KHSTATES, khstate_with("dns", history(s.clock.wall(), DAY)))
    views = ViewCache(s.khchecks, s.khjobs, s.khstates, s.pods, expose_logs=lambda: False).attach()
    (entry,) = views.one(NS, "dns")
    assert all(w["uptime"] is None for w in entry.view["windows"].values())


# --- the timeline route ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("window", "count", "width"), [("24h", 24, HOUR), ("7d", 168, HOUR), ("30d", 30, DAY)])
def test_the_timeline_gives_the_window_s_buckets_oldest_first(
        fake_services: FakeServices, client: FlaskClient, window: str, count: int, width: float) -> None:
    now = time.time()
    fake_services.api.put(KHCHECKS, khcheck("dns"))
    fake_services.api.put(KHSTATES, khstate_with("dns", history(now, 40 * DAY, interval=HOUR)))
    resp = client.get(f"/api/checks/{NS}/dns/timeline?window={window}")
    assert resp.status_code == 200 and resp.mimetype == "application/json"
    doc = resp.get_json()
    assert (doc["namespace"], doc["name"], doc["window"]) == (NS, "dns", window)
    buckets = doc["buckets"]
    assert len(buckets) == count
    starts = [b["start"] for b in buckets]
    assert starts == sorted(starts) and len(set(starts)) == count
    runs = sum(b["ok"] + b["failed"] for b in buckets)
    full = count * width / HOUR  # one run an hour; the newest bucket is partial
    assert full - width / HOUR - 1 <= runs <= full + 1
    assert sum(b["failed"] for b in buckets) == pytest.approx(runs / 3, abs=1)
    assert {"start", "ok", "failed", "skipped", "paused", "coverage", "durationP50", "durationP95"} <= set(buckets[0])


def test_a_missing_or_other_window_is_a_400_naming_the_three(fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(KHCHECKS, khcheck("dns"))
    for query in ("", "?window=", "?window=1h", "?window=24H", "?window=30d%00", "?windows=24h", "?window=%ff"):
        resp = client.get(f"/api/checks/{NS}/dns/timeline{query}")
        text = resp.get_data(as_text=True)
        assert resp.status_code == 400 and resp.mimetype == "text/plain", query
        assert "24h" in text and "7d" in text and "30d" in text and text.count("\n") == 1, query


def test_the_timeline_of_an_unknown_check_is_a_404_like_the_api_s(client: FlaskClient) -> None:
    timeline = client.get(f"/api/checks/{NS}/nope/timeline?window=24h")
    entry = client.get(f"/api/checks/{NS}/nope")
    assert timeline.status_code == entry.status_code == 404
    assert timeline.get_data() == entry.get_data() and timeline.mimetype == "text/plain"


def test_the_timeline_names_a_healthcheck_as_the_other_routes_do(
        fake_services: FakeServices, client: FlaskClient) -> None:
    now = time.time()
    s = fake_services
    s.api.put(KHCHECKS, khcheck("probe"))
    s.api.put(KHSTATES, khstate_with("probe", history(now, DAY, fail_every=0)))
    s.api.put(HEALTHCHECKS, healthcheck("probe", status=ran(rollups=history(now, DAY, fail_every=1))))

    def failed(url: str) -> int:
        resp = client.get(url)
        assert resp.status_code == 200, url
        return sum(b["failed"] for b in resp.get_json()["buckets"])

    assert failed(f"/api/checks/{NS}/probe/timeline?window=24h") == 0  # the khcheck
    assert failed(f"/api/checks/{NS}/hc:probe/timeline?window=24h") > 20  # the HealthCheck beside it
    assert failed(f"/api/checks/{NS}/probe/timeline?window=24h&kind=healthcheck") > 20
    assert client.get(f"/api/checks/{NS}/probe/timeline?window=24h&kind=job").status_code == 404


def test_a_check_without_rollups_has_a_timeline_of_empty_buckets_and_head_works(
        fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(KHCHECKS, khcheck("dns"))
    buckets = client.get(f"/api/checks/{NS}/dns/timeline?window=7d").get_json()["buckets"]
    assert len(buckets) == 168 and all(b["ok"] == b["failed"] == 0 and b["coverage"] == 0 for b in buckets)
    head = client.head(f"/api/checks/{NS}/dns/timeline?window=30d")
    assert head.status_code == 200 and head.get_data() == b"" and head.mimetype == "application/json"
    assert client.head(f"/api/checks/{NS}/dns/timeline?window=1d").status_code == 400


# --- /metrics ----------------------------------------------------------------------------------------------

def _scrape(s: FakeServices, style: str = "v2") -> str:
    s.config = dataclasses.replace(s.config, metrics_style=style)
    app: Flask = create_app(s, caller_wait=0.0)
    resp = app.test_client().get("/metrics")
    assert resp.status_code == 200
    return resp.get_data(as_text=True)


def _uptime_samples(text: str) -> dict[tuple[str, str], tuple[dict[str, str], float]]:
    return {(labels["check"], labels["window"]): (labels, value)
            for labels, value in families(text).get("kuberhealthy_check_uptime_ratio", [])}


def seeded_for_metrics(s: FakeServices) -> None:
    now = time.time()
    labelled = khcheck("dns")
    labelled["metadata"]["labels"] = {"kuberhealthy.io/severity": "page"}
    s.api.put(KHCHECKS, labelled)
    s.api.put(KHJOBS, khjob("dns"))
    s.api.put(KHSTATES, khstate_with("dns", history(now, 3 * DAY)))
    s.api.put(KHCHECKS, khcheck("idle"))  # ran last 3 hours ago: no 1h sample
    s.api.put(KHSTATES, khstate_with("idle", history(now, DAY, fail_every=0, until=now - 3 * HOUR)))
    s.api.put(KHCHECKS, khcheck("new"))  # no rollup: no sample at all
    s.api.put(HEALTHCHECKS, healthcheck("probe", status=ran(rollups=history(now, DAY, fail_every=4))))


def test_each_check_has_an_uptime_ratio_per_window_that_holds_a_finished_run(fake_services: FakeServices) -> None:
    seeded_for_metrics(fake_services)
    text = _scrape(fake_services)
    got = _uptime_samples(text)
    assert set(got) == {*((f"{NS}/dns", w) for w in WINDOWS), *((f"{NS}/probe", w) for w in WINDOWS),
                        *((f"{NS}/idle", w) for w in ("24h", "7d", "30d"))}
    labels, value = got[(f"{NS}/dns", "7d")]
    assert labels == {"check": f"{NS}/dns", "namespace": NS, "window": "7d", "severity": "page"}
    assert value == pytest.approx(2 / 3, abs=0.01)
    assert got[(f"{NS}/idle", "30d")][1] == 1.0 and got[(f"{NS}/probe", "24h")][1] == pytest.approx(0.75, abs=0.05)
    assert "# TYPE kuberhealthy_check_uptime_ratio gauge" in text
    assert "# HELP kuberhealthy_check_uptime_ratio " in text
    proc = promtool(text)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_v3_style_labels_the_uptime_ratio_with_the_bare_name(fake_services: FakeServices) -> None:
    seeded_for_metrics(fake_services)
    got = _uptime_samples(_scrape(fake_services, "v3"))
    assert {c for c, _ in got} == {"dns", "idle", "probe"}
    assert got[("dns", "1h")][0] == {"check": "dns", "namespace": NS, "window": "1h", "severity": "page"}


def test_without_any_finished_run_the_family_has_no_sample(fake_services: FakeServices) -> None:
    fake_services.api.put(KHCHECKS, khcheck("new"))
    text = _scrape(fake_services)
    assert _uptime_samples(text) == {}
    proc = promtool(text)
    assert proc.returncode == 0, proc.stdout + proc.stderr
