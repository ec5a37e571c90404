"""HealthChecks in what the web app shows, on the real API server with the in-process daemon running them on
the simulated kubelet: `/`, `/json`, `/api/checks?kind=healthcheck` and `/metrics` in both label styles, for a
khcheck and a HealthCheck of one name (two checks) and for a migrated pair (one check, under the khcheck's
key)."""
from __future__ import annotations

import dataclasses
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from kuberhealthy.kube import HEALTHCHECKS, KHCHECKS, Resources
from kuberhealthy.records import migration
from testbed.daemons.inprocess import InProcessDaemon, healthcheck, khstate_done, ran
from testbed.daemons.inprocess import khcheck_obj as khcheck
from testbed.wait import wait_for
from tests.unit.metrics_support import promtool


def get(daemon: InProcessDaemon, path: str) -> Any:
    resp = requests.get(daemon.url + path, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()


def checks_of(text: str, family: str) -> dict[tuple[str, str], dict[str, str]]:
    return {(s.labels["check"], s.labels["namespace"]): dict(s.labels)
            for f in text_string_to_metric_families(text) for s in f.samples if s.name == family}


def test_a_khcheck_beside_a_same_named_healthcheck_and_a_migrated_pair_show_as_the_contract_says(
        daemon: InProcessDaemon, namespace: str, res: Resources) -> None:
    ns = namespace
    # two checks of one name: the khcheck fails, the HealthCheck passes
    res.create(KHCHECKS, ns, khcheck("twin", image="kh-sim/fail"))
    res.create(HEALTHCHECKS, ns, healthcheck("twin"))
    # a khcheck that ran (and failed), then migrated: its HealthCheck (passing) runs in its place
    created = res.create(KHCHECKS, ns, khcheck("moved", image="kh-sim/fail"))
    wait_for(khstate_done(res, ns, "moved"), timeout=60, what="the khcheck's run before the migration")
    marked = healthcheck("moved")
    marked["metadata"]["annotations"] = {migration.MIGRATED_FROM: created["metadata"]["uid"]}
    res.create(HEALTHCHECKS, ns, marked)
    res.merge_patch(KHCHECKS, ns, "moved", {"metadata": {"annotations": {migration.MIGRATED_TO: "moved"}}})
    wait_for(ran(res, ns, "twin"), timeout=60, what="the HealthCheck twin's run")
    wait_for(khstate_done(res, ns, "twin"), timeout=60, what="the khcheck twin's run")
    moved = wait_for(ran(res, ns, "moved"), timeout=60, what="the migrated HealthCheck's run")

    def status_page() -> dict[str, Any] | None:
        page: dict[str, Any] = get(daemon, f"/?namespace={ns}")
        return page if len(page["CheckDetails"]) == 3 else None
    page = wait_for(status_page, timeout=30, what="three checks on /")
    assert page is not None and moved is not None
    details = page["CheckDetails"]
    assert sorted(details) == [f"{ns}/hc:twin", f"{ns}/moved", f"{ns}/twin"]
    assert details[f"{ns}/twin"]["OK"] is False and details[f"{ns}/hc:twin"]["OK"] is True
    assert details[f"{ns}/moved"]["OK"] is True  # the HealthCheck's result, not the khcheck's last failure
    assert details[f"{ns}/moved"]["uuid"] == moved["runBinding"]["uuid"]

    summary = get(daemon, f"/json?namespace={ns}")["CheckDetails"]
    assert sorted(summary) == sorted([f"{ns}/hc:twin", f"{ns}/twin", "moved"])
    assert summary["moved"]["ok"] is True and summary[f"{ns}/twin"]["ok"] is False

    listed = get(daemon, f"/api/checks?namespace={ns}&kind=healthcheck")["checks"]
    assert [(e["name"], e["kind"], e["state"]) for e in listed] == [("moved", "healthcheck", "ok"),
                                                                     ("twin", "healthcheck", "ok")]
    assert [e["kind"] for e in get(daemon, f"/api/checks?namespace={ns}")["checks"]] == [
        "healthcheck", "check", "healthcheck"]  # the migrated khcheck is not listed

    v2 = requests.get(daemon.url + "/metrics", timeout=10).text
    assert {k for k in checks_of(v2, "kuberhealthy_check") if k[1] == ns} == {
        (f"{ns}/twin", ns), (f"{ns}/hc:twin", ns), (f"{ns}/moved", ns)}
    assert checks_of(v2, "kuberhealthy_check")[(f"{ns}/moved", ns)]["status"] == "1"
    assert {k for k in checks_of(v2, "kuberhealthy_check_success_total") if k[1] == ns} == {
        (f"{ns}/twin", ns), (f"{ns}/hc:twin", ns), (f"{ns}/moved", ns)}
    result = promtool(v2)
    assert result.returncode == 0, result.stdout + result.stderr

    daemon.services.config = dataclasses.replace(daemon.services.config, metrics_style="v3")
    v3 = requests.get(daemon.url + "/metrics", timeout=10).text
    for family in ("kuberhealthy_check", "kuberhealthy_check_success_total", "kuberhealthy_check_consecutive_failures"):
        assert {k for k in checks_of(v3, family) if k[1] == ns} == {("twin", ns), ("hc:twin", ns), ("moved", ns)}
    result = promtool(v3)
    assert result.returncode == 0, result.stdout + result.stderr
