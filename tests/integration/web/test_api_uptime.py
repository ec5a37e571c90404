"""Uptime over time through the real API server and a real HTTP server: a khcheck's khstate `spec.rollups` and a
HealthCheck's `status.rollups` (seeded as the daemon keeps them: rollups.record() over an injected time range,
packed by rollcodec.serialize(), written through the API) come back as `windows` on /api/checks, as buckets on
/api/checks/<ns>/<name>/timeline and as kuberhealthy_check_uptime_ratio on /metrics."""
from __future__ import annotations

import json
import time
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from kuberhealthy.daemon.services import Services
from kuberhealthy.kube import HEALTHCHECKS
from kuberhealthy.records import rollcodec, rollups
from testbed.clients.formats import promtool_check
from testbed.clients.rawhttp import assert_one_line_plain_text, request
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import MERGE_PATCH, khc, khcheck
from testbed.daemons.inprocess import PodMaker, WebServer, healthcheck, wait_cached
from testbed.wait import wait_for

HOUR = 3600.0
DAY = 24 * HOUR
INTERVAL = 600.0  # a run every 10 minutes
WINDOWS = {"1h": HOUR, "24h": DAY, "7d": 7 * DAY, "30d": 30 * DAY}


def every_third_fails(now: float, span: float) -> dict[str, Any]:
    """The stored rollup of `span` seconds of runs every INTERVAL up to `now`, every third one failed."""
    rollup, t, i = rollups.empty(), now - span + INTERVAL / 2, 0
    while t <= now:
        i += 1
        rollup = rollups.record(rollup, t, rollups.FAILED if i % 3 == 0 else rollups.OK, 1.0 + i % 5,
                                interval=INTERVAL)
        t += INTERVAL
    return rollcodec.serialize(rollup)


def hcs(ns: str, name: str = "") -> str:
    return f"/apis/{HEALTHCHECKS.api_version}/namespaces/{ns}/healthchecks" + (f"/{name}" if name else "")


def get_json(server: WebServer, path: str) -> Any:
    answer = request(server, "GET", path)
    assert answer.status == 200, (path, answer.status, answer.text)
    return json.loads(answer.text)


def seed(cluster: TestCluster, services: Services, maker: PodMaker, now: float) -> None:
    ns = maker.namespace
    cluster.request("POST", khc(ns), khcheck("thirds", interval="10m"))
    maker.khstate("thirds", "u-1", LastRun="2024-05-01T12:00:00Z", RunDuration="3s",
                  rollups=every_third_fails(now, 40 * DAY))
    cluster.request("POST", khc(ns), khcheck("fresh"))
    wait_cached(services, ns, "thirds", lambda o: "rollups" in o["spec"])
    hc = healthcheck("probe", interval="10m")
    hc["metadata"]["namespace"] = ns
    cluster.request("POST", hcs(ns), hc)
    cluster.request("PATCH", hcs(ns, "probe") + "/status",
                    {"status": {"ok": True, "errors": [], "lastRunUnix": int(now), "namespace": ns,
                                "rollups": every_third_fails(now, 2 * DAY)}}, content_type=MERGE_PATCH)
    wait_for(lambda: "rollups" in ((services.healthchecks.get(ns, "probe") or {}).get("status") or {}), 15,
             what="the HealthCheck's rollups in the cache")
    wait_for(lambda: services.khchecks.get(ns, "fresh") is not None, 15, what="the khcheck fresh in the cache")


def test_a_check_that_fails_every_third_run_shows_two_thirds_in_every_window_of_both_kinds(
        cluster: TestCluster, server: WebServer, maker: PodMaker, services: Services) -> None:
    now = time.time()
    seed(cluster, services, maker, now)
    listed = get_json(server, f"/api/checks?namespace={maker.namespace}")["checks"]
    entries = {(e["name"], e["kind"]): e for e in listed}
    thirds, probe, fresh = entries[("thirds", "check")], entries[("probe", "healthcheck")], entries[("fresh", "check")]
    for window, seconds in WINDOWS.items():
        one_run = 1 / (seconds / INTERVAL)  # "± one run" of the window's runs
        assert abs(thirds["windows"][window]["uptime"] - 2 / 3) <= one_run + 1e-9, (window, thirds["windows"])
        # spanned up to the last run: the minutes of the current hour before its first run are not (yet)
        assert thirds["windows"][window]["coverage"] >= 1 - INTERVAL / seconds - 1e-9, window
        assert fresh["windows"][window] == {"uptime": None, "coverage": 0.0, **(
            {"durationP50": None, "durationP95": None, "durationP99": None} if window in ("24h", "7d") else {})}
    for window in ("1h", "24h"):
        assert abs(probe["windows"][window]["uptime"] - 2 / 3) <= 1 / (WINDOWS[window] / INTERVAL) + 1e-9, window
    assert 47 / 168 <= probe["windows"]["7d"]["coverage"] <= 49 / 168  # two days of seven, give or take an hour
    assert 1.0 * 0.98 <= thirds["windows"]["24h"]["durationP50"] <= 5.0 * 1.02
    assert thirds["windows"]["7d"]["durationP99"] == get_json(
        server, f"/api/checks/{maker.namespace}/thirds")["checks"][0]["windows"]["7d"]["durationP99"]


def test_the_timeline_route_answers_buckets_400_and_404_through_a_real_server(
        cluster: TestCluster, server: WebServer, maker: PodMaker, services: Services) -> None:
    now = time.time()
    seed(cluster, services, maker, now)
    ns = maker.namespace
    day = get_json(server, f"/api/checks/{ns}/thirds/timeline?window=24h")
    assert (day["namespace"], day["name"], day["window"], len(day["buckets"])) == (ns, "thirds", "24h", 24)
    ok, failed = sum(b["ok"] for b in day["buckets"]), sum(b["failed"] for b in day["buckets"])
    # 23 whole hours of 6 runs, and the current hour's runs so far
    assert abs(failed / (ok + failed) - 1 / 3) <= 1 / (ok + failed) and ok + failed >= 23 * HOUR / INTERVAL
    month = get_json(server, f"/api/checks/{ns}/thirds/timeline?window=30d")["buckets"]
    assert len(month) == 30 and [b["start"] for b in month] == sorted(b["start"] for b in month)
    week = get_json(server, f"/api/checks/{ns}/hc:probe/timeline?window=7d")["buckets"]
    assert len(week) == 168 and 46 <= sum(b["coverage"] for b in week) <= 50  # two days of hourly buckets
    for path in (f"/api/checks/{ns}/thirds/timeline", f"/api/checks/{ns}/thirds/timeline?window=90d"):
        refused = request(server, "GET", path)
        assert refused.status == 400 and all(w in refused.text for w in ("24h", "7d", "30d")), refused
        assert_one_line_plain_text(refused)
    unknown = request(server, "GET", f"/api/checks/{ns}/nope/timeline?window=24h")
    assert unknown.status == 404
    assert_one_line_plain_text(unknown)


def test_metrics_say_the_uptime_ratio_per_window_and_nothing_for_a_check_without_runs(
        cluster: TestCluster, server: WebServer, maker: PodMaker, services: Services) -> None:
    seed(cluster, services, maker, time.time())
    answer = request(server, "GET", "/metrics")
    assert answer.status == 200
    ratios = {(s.labels["check"], s.labels["window"]): s.value for f in text_string_to_metric_families(answer.text)
              for s in f.samples if s.name == "kuberhealthy_check_uptime_ratio"}
    ns = maker.namespace
    assert {c for c, _ in ratios} == {f"{ns}/thirds", f"{ns}/probe"}  # none for `fresh`
    assert {w for c, w in ratios if c == f"{ns}/thirds"} == set(WINDOWS)
    assert abs(ratios[(f"{ns}/thirds", "30d")] - 2 / 3) < 0.001
    checked = promtool_check(answer.text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
