"""Uptime over time, black-box: the console script, leading, runs a passing and a failing khcheck on the
simulated kubelet; `/api/checks` then says each one's `windows` (1h, 24h, 7d, 30d; percentiles for 24h
and 7d), `GET /api/checks/<ns>/<name>/timeline` gives the buckets (400 naming 24h, 7d and 30d for another
window, 404 for an unknown check), and `/metrics` carries kuberhealthy_check_uptime_ratio per window in
both label styles, promtool-clean."""
from __future__ import annotations

from typing import Any

import requests

from testbed.clients.formats import parse_metrics, promtool_check
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khc, khcheck
from testbed.pytest_plugin import Daemons
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

WINDOWS = ("1h", "24h", "7d", "30d")


def entries(url: str, ns: str) -> dict[str, dict[str, Any]]:
    resp = requests.get(f"{url}/api/checks?namespace={ns}", timeout=10)
    assert resp.status_code == 200, resp.text
    return {e["name"]: e for e in resp.json()["checks"]}


def ran_twice(url: str, ns: str) -> dict[str, dict[str, Any]] | None:
    found = entries(url, ns)
    done = all(e["successCount"] + e["failureCount"] >= 2 and e["currentRun"] is None for e in found.values())
    return found if len(found) == 2 and done else None


def ratios(text: str) -> dict[tuple[str, str], float]:
    return {(labels["check"], labels["window"]): value for name, labels, value in parse_metrics(text)
            if name == "kuberhealthy_check_uptime_ratio"}


def test_windows_timeline_and_the_uptime_ratio_follow_the_runs(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, daemons: Daemons) -> None:
    ns = namespace
    for name, image in (("up", "kh-sim/ok"), ("down", "kh-sim/fail")):
        cluster.request("POST", khc(ns), khcheck(name, image, interval="2s", timeout="20s"))
    daemon = daemons("kh-uptime-0", {"targetNamespace": ns, "enableForceMaster": True}).start().wait_serving()
    found = wait_for(lambda: ran_twice(daemon.url, ns), timeout=90, interval=0.3, what="two runs of each check")
    up, down = found["up"]["windows"], found["down"]["windows"]
    assert set(up) == set(down) == set(WINDOWS)
    for window in WINDOWS:
        assert up[window]["uptime"] == 1.0 and down[window]["uptime"] == 0.0, window
        assert 0 < up[window]["coverage"] <= 1, window
    for window in ("24h", "7d"):
        assert all(isinstance(up[window][p], (int, float)) and up[window][p] >= 0
                   for p in ("durationP50", "durationP95", "durationP99")), up[window]
    assert "durationP50" not in up["1h"] and "durationP50" not in up["30d"]

    day = requests.get(f"{daemon.url}/api/checks/{ns}/down/timeline?window=24h", timeout=10)
    assert day.status_code == 200 and day.headers["content-type"].startswith("application/json")
    doc = day.json()
    assert (doc["namespace"], doc["name"], doc["window"], len(doc["buckets"])) == (ns, "down", "24h", 24)
    assert doc["buckets"][-1]["failed"] >= 2 and doc["buckets"][-1]["ok"] == 0
    assert len(requests.get(f"{daemon.url}/api/checks/{ns}/up/timeline?window=30d", timeout=10).json()["buckets"]) == 30
    for query in ("", "?window=1h", "?window=24H"):
        refused = requests.get(f"{daemon.url}/api/checks/{ns}/up/timeline{query}", timeout=10)
        assert refused.status_code == 400 and refused.headers["content-type"].startswith("text/plain"), query
        assert all(w in refused.text for w in ("24h", "7d", "30d")), refused.text
    assert requests.get(f"{daemon.url}/api/checks/{ns}/nope/timeline?window=7d", timeout=10).status_code == 404

    text = requests.get(f"{daemon.url}/metrics", timeout=10).text
    got = ratios(text)
    assert {w for c, w in got if c == f"{ns}/up"} == set(WINDOWS)
    assert got[(f"{ns}/up", "30d")] == 1.0 and got[(f"{ns}/down", "1h")] == 0.0
    checked = promtool_check(text)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_v3_style_labels_the_uptime_ratio_with_the_check_s_name(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, daemons: Daemons) -> None:
    ns = namespace
    cluster.request("POST", khc(ns), khcheck("up", "kh-sim/ok", interval="1h", timeout="20s"))
    daemon = daemons("kh-uptime-v3", {"targetNamespace": ns, "enableForceMaster": True,
                                      "metricsStyle": "v3"}).start().wait_serving()

    def measured() -> dict[tuple[str, str], float] | None:
        got = ratios(requests.get(f"{daemon.url}/metrics", timeout=10).text)
        return got if got else None
    got = wait_for(measured, timeout=90, interval=0.3, what="the check's uptime ratio")
    assert set(got) == {("up", w) for w in WINDOWS} and set(got.values()) == {1.0}
