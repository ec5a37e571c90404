"""Uptime from real runs: the in-process daemon runs a khcheck and a HealthCheck on the simulated kubelet, each
checker (kh-sim/exec with the real checkclient) failing every third run; the runs' own state writes fill the
rollups, and `/api/checks` shows two thirds in `windows["1h"]` (± one run) with the runs' durations, the
timeline counts the runs and /metrics says the ratio."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from kuberhealthy.kube import HEALTHCHECKS, KHCHECKS, Resources
from testbed.daemons.inprocess import InProcessDaemon, healthcheck, khcheck_obj
from testbed.wait import wait_for

REPO = Path(__file__).resolve().parents[2]
RUNS = 6  # two of them fail
# Counts its runs in a file of the test's own; every third one reports a failure.
SCRIPT = """
import os, pathlib
from kuberhealthy import checkclient
counter = pathlib.Path(os.environ["RUN_COUNTER"])
n = int(counter.read_text() or "0") + 1 if counter.exists() else 1
counter.write_text(str(n))
if n % 3 == 0:
    checkclient.report_failure(["every third run fails (run %d)" % n])
else:
    checkclient.report_success()
"""


def thirds(name: str, counter: Path, obj: dict[str, Any]) -> dict[str, Any]:
    """The check with its checker replaced by SCRIPT."""
    spec = obj["spec"]
    pod = spec["podSpec"]["spec"] if "spec" in spec["podSpec"] else spec["podSpec"]
    container = pod["containers"][0]
    container.update(image="kh-sim/exec", command=[sys.executable, "-c", SCRIPT])
    container["env"] = [{"name": "RUN_COUNTER", "value": str(counter)}, {"name": "PYTHONPATH", "value": str(REPO)}]
    obj["metadata"]["name"] = name
    return obj


def entry(daemon: InProcessDaemon, ns: str, name: str, kind: str) -> dict[str, Any]:
    resp = requests.get(f"{daemon.url}/api/checks/{ns}/{name}?kind={kind}", timeout=10)
    assert resp.status_code == 200, resp.text
    (found,) = resp.json()["checks"]
    return dict(found)


def judged(e: dict[str, Any]) -> int:
    return int(e["successCount"]) + int(e["failureCount"])


def settled(e: dict[str, Any]) -> dict[str, Any] | None:
    """The entry once RUNS runs are over and none is in flight."""
    return e if judged(e) >= RUNS and e["currentRun"] is None else None


def test_a_check_of_either_kind_that_fails_every_third_run_shows_two_thirds_over_the_last_hour(
        daemon: InProcessDaemon, namespace: str, res: Resources, tmp_path: Path) -> None:
    ns = namespace
    res.create(KHCHECKS, ns, thirds("khc-thirds", tmp_path / "khc", khcheck_obj("x", interval="3s", timeout="20s")))
    res.create(HEALTHCHECKS, ns, thirds("hc-thirds", tmp_path / "hc", healthcheck("x", interval="3s", timeout="20s")))
    for name, kind in (("khc-thirds", "check"), ("hc-thirds", "healthcheck")):
        e = wait_for(lambda n=name, k=kind: settled(entry(daemon, ns, n, k)), timeout=120, interval=0.5,
                     what=f"{RUNS} runs of {name}")
        runs = judged(e)
        window = e["windows"]["1h"]
        assert window["uptime"] is not None, e["windows"]
        assert abs(window["uptime"] - e["successCount"] / runs) <= 1 / runs, (window, runs)  # the runs so far
        assert abs(window["uptime"] - 2 / 3) <= 1 / runs + 1e-9, (window, e["successCount"], e["failureCount"])
        assert window["coverage"] > 0
        assert e["windows"]["24h"]["durationP50"] is not None and e["windows"]["24h"]["durationP50"] > 0
        buckets = requests.get(f"{daemon.url}/api/checks/{ns}/{name}/timeline?window=24h&kind={kind}",
                               timeout=10).json()["buckets"]
        assert sum(b["ok"] + b["failed"] for b in buckets) >= runs
        assert sum(b["failed"] for b in buckets) >= runs // 3
    text = requests.get(f"{daemon.url}/metrics", timeout=10).text
    ratios = {s.labels["check"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
              if s.name == "kuberhealthy_check_uptime_ratio" and s.labels["window"] == "1h"}
    assert set(ratios) >= {f"{ns}/khc-thirds", f"{ns}/hc-thirds"}
    assert all(0.4 <= ratios[f"{ns}/{n}"] <= 0.9 for n in ("khc-thirds", "hc-thirds")), ratios
