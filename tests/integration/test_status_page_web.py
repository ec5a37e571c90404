"""`GET /status` on the real API server, with the in-process daemon running a khcheck and a HealthCheck
on the simulated kubelet: both labelled into one group by kuberhealthy.io/status-group, a third check
without the label in the default group. Their 30-day history is seeded through the state objects (the
khstate's spec.rollups, the HealthCheck's status.rollups through its status subresource), as the run's
own write keeps it; the page shows each check's state, its bar and uptime, error texts only once
showErrors is switched on, and is served as prepared bytes with an ETag over real HTTP. And the chart's
values statusPage.enabled and .showErrors reach the daemon's config file."""
from __future__ import annotations

import dataclasses
import gzip
import re
import time
from typing import Any

import pytest
import requests
import yaml

from kuberhealthy.base.config import StatusPage, from_mapping
from kuberhealthy.kube import HEALTHCHECKS, KHCHECKS, KHSTATES, Resources
from kuberhealthy.records import rollcodec, rollups
from testbed.daemons.inprocess import InProcessDaemon, healthcheck, khstate_done, ran
from testbed.daemons.inprocess import khcheck_obj as khcheck
from testbed.tools.helm import Helm
from testbed.wait import wait_for

GROUP = "kuberhealthy.io/status-group"
ERROR = "upstream <refused>"  # the failing HealthCheck's error text


@pytest.fixture
def daemon_settings() -> dict[str, Any]:
    return {"statusPage": {"enabled": True}}


def seeded(fail_every: int) -> dict[str, Any]:
    """30 days of hourly runs up to now (the last a second ago, so today has runs at any hour), every
    `fail_every`-th failed (0: none), as the state object keeps it."""
    now = time.time()
    r = rollups.empty()
    for i in range(30 * 24):
        failed = fail_every and i % fail_every == fail_every - 1
        r = rollups.record(r, now - 1 - (30 * 24 - 1 - i) * 3600, rollups.FAILED if failed else rollups.OK, 0.8,
                           interval=3600)
    return rollcodec.serialize(r)


def labelled(obj: dict[str, Any], group: str) -> dict[str, Any]:
    obj["metadata"]["labels"] = {GROUP: group}
    return obj


def bars(html: str) -> dict[str, str]:
    """Each daybar's accessible name, by the check it names."""
    return {m.split(" ", 1)[0]: m for m in re.findall(r'<svg[^>]*class="chart daybar"[^>]*aria-label="([^"]*)"', html)}


def test_the_status_page_groups_both_kinds_and_shows_their_seeded_30_days(
        daemon: InProcessDaemon, namespace: str, res: Resources) -> None:
    ns = namespace
    res.create(KHCHECKS, ns, labelled(khcheck("dns"), "network"))
    res.create(HEALTHCHECKS, ns, labelled(healthcheck("ingress", image="kh-sim/fail",
                                                      env={"SIM_ERRORS": ERROR}), "network"))
    res.create(KHCHECKS, ns, khcheck("web"))
    for name in ("dns", "web"):
        wait_for(khstate_done(res, ns, name), timeout=60, what=f"{name}'s first run")
    wait_for(ran(res, ns, "ingress"), timeout=60, what="the HealthCheck's first run")

    # 30 days of history, seeded through the state objects (after the runs: nothing writes them again)
    res.merge_patch(KHSTATES, ns, "dns", {"spec": {"rollups": seeded(0)}})
    res.merge_patch(HEALTHCHECKS.status(), ns, "ingress", {"status": {"rollups": seeded(3)}})
    assert res.get(KHSTATES, ns, "dns")["spec"].get("rollups"), "the khstate CRD pruned spec.rollups"
    assert res.get(HEALTHCHECKS, ns, "ingress")["status"].get("rollups"), "the CRD pruned status.rollups"

    def page() -> str | None:
        resp = requests.get(daemon.url + "/status", timeout=10)
        assert resp.status_code == 200
        shown = bars(resp.text)
        return resp.text if "uptime 100 %" in shown.get("dns", "") and "uptime 6" in shown.get("ingress", "") \
            else None
    html = wait_for(page, timeout=30, interval=0.5, what="the seeded history on /status")
    assert html is not None
    groups = re.findall(r'<span class="gname">([^<]*)</span>\s*<span class="gstate">.*?</span> ([^<]*)</span>', html)
    assert groups == [("network", "1 of 2 checks failing"), ("Other", "OK")]
    names = re.findall(r'<span class="name">([^<]*)</span>', html)
    assert names == ["dns", "ingress", "web"]
    shown = bars(html)
    assert re.search(r"uptime 6[67]\.\d\d %", shown["ingress"]), shown["ingress"]
    assert "last 30 days" in shown["web"]  # no history yet: a bar of days without data
    assert "refused" not in html  # no error text by default

    daemon.services.config = dataclasses.replace(daemon.services.config,
                                                 status_page=StatusPage(enabled=True, show_errors=True))
    shown_errors = requests.get(daemon.url + "/status", timeout=10).text
    assert "upstream &lt;refused&gt;" in shown_errors

    # prepared bytes over real HTTP: ETag and 304, gzip, HEAD
    first = requests.get(daemon.url + "/status", headers={"Accept-Encoding": "gzip"}, timeout=10, stream=True)
    raw = first.raw.read()
    assert first.headers["Content-Encoding"] == "gzip" and gzip.decompress(raw).decode() == shown_errors
    etag = first.headers["ETag"]
    again = requests.get(daemon.url + "/status", headers={"If-None-Match": etag}, timeout=10)
    assert again.status_code == 304 and again.content == b""
    head = requests.head(daemon.url + "/status", timeout=10)
    assert head.status_code == 200 and head.headers["ETag"] == etag

    daemon.services.config = dataclasses.replace(daemon.services.config, status_page=StatusPage())
    assert requests.get(daemon.url + "/status", timeout=10).status_code == 404


def test_the_charts_status_page_values_reach_the_config_file_and_the_daemon_reads_them(helm: Helm) -> None:
    def status_page(*values: str) -> StatusPage:
        cm = next(o for o in helm.template(*values)
                  if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "kuberhealthy")
        raw = yaml.safe_load(cm["data"]["kuberhealthy.yaml"])
        return from_mapping(raw, {"POD_NAME": "kh-0", "POD_NAMESPACE": "monitoring"}).status_page

    assert status_page() == StatusPage(enabled=False, show_errors=False)
    assert status_page("statusPage.enabled=true") == StatusPage(enabled=True, show_errors=False)
    assert status_page("statusPage.enabled=true", "config.statusPage.showErrors=true") == StatusPage(True, True)
