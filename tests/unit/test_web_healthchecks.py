"""HealthChecks everywhere the web app shows checks, through the same code as khchecks: `/`, the JSON API,
/metrics in both label styles, v3's `/json`, run now (v2's and v3's routes), Events and the dashboard.
Over the in-memory fakes: a HealthCheck's state is its `status`, in v3's names and units."""
from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from kuberhealthy.kube import EVENTS, HEALTHCHECKS, KHCHECKS, KHJOBS, KHSTATES, Obj
from kuberhealthy.records import migration
from kuberhealthy.records.pause import PAUSED_UNTIL
from kuberhealthy.records.runnow import RUN_NOW_ANNOTATION
from kuberhealthy.web import create_app
from kuberhealthy.web.entries import HealthCheckCaches, ViewCache
from testbed.fakes import NS, POD_NAME, FakeServices, khcheck, khjob, khstate_of
from tests.unit.metrics_support import families, promtool

LAST = 1_714_564_800  # 2024-05-01T12:00:00Z
LAST_TEXT = "2024-05-01T12:00:00Z"
SEVERE = {"kuberhealthy.io/severity": "critical", "kuberhealthy.io/category": "network"}


def healthcheck(name: str, namespace: str = NS, *, status: dict[str, Any] | None = None,
                labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
                **spec: Any) -> Obj:
    """A HealthCheck as v3's manifests write it (podSpec.spec), with a status when given."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    body: dict[str, Any] = {"podSpec": {"spec": {"containers": [{"name": "main", "image": "kh-sim/v3"}]}}, **spec}
    obj: Obj = {"apiVersion": HEALTHCHECKS.api_version, "kind": "HealthCheck", "metadata": meta, "spec": body}
    if status is not None:
        obj["status"] = status
    return obj


def ran(ok: bool = True, errors: tuple[str, ...] = (), pod: str = "probe-abc", **more: Any) -> dict[str, Any]:
    """A status after one finished run, with v3's names and units (runDuration in nanoseconds)."""
    return {"ok": ok, "errors": list(errors), "runDuration": 2_500_000_000, "namespace": NS, "currentUUID": "",
            "lastRunUnix": LAST, "successCount": 1 if ok else 0, "failureCount": 0 if ok else 1,
            "consecutiveFailures": 0 if ok else 1, "lastOKUnix": LAST if ok else 0,
            "lastFailureUnix": 0 if ok else LAST,
            "runBinding": {"uuid": "u-1", "authoritativePod": pod, "finishedUUID": "u-1"}, **more}


def khstate_ran(name: str, ok: bool = False, errors: tuple[str, ...] = ("khcheck down",)) -> Obj:
    return khstate_of(name, OK=ok, Errors=list(errors), LastRun=LAST_TEXT, RunDuration="1s",
                      AuthoritativePod=POD_NAME)


def page(client: FlaskClient, url: str = "/") -> dict[str, Any]:
    resp = client.get(url)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    answer: dict[str, Any] = json.loads(resp.data)
    return answer


def migrated_pair(services: FakeServices, name: str, hc_status: dict[str, Any]) -> None:
    """A khcheck and the HealthCheck `kuberhealthy migrate to-v3 --in-cluster` made of it, both marked."""
    created = services.api.put(KHCHECKS, khcheck(name))
    services.api.put(KHSTATES, khstate_ran(name))
    uid = created["metadata"]["uid"]
    services.api.put(KHCHECKS, {**khcheck(name), "metadata": {**khcheck(name)["metadata"],
                                                              "annotations": {migration.MIGRATED_TO: name}}})
    services.api.put(HEALTHCHECKS, healthcheck(name, status=hc_status, annotations={migration.MIGRATED_FROM: uid}))


# --- `/` ------------------------------------------------------------------------------------------------

def test_the_status_page_lists_a_healthcheck_in_v2_s_shape_under_its_namespace_and_name(
        fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(HEALTHCHECKS, healthcheck("probe", status=ran(ok=False, errors=("dns down",))))
    fake_services.api.put(HEALTHCHECKS, healthcheck("fresh"))  # never ran: hidden, as a khstate without a pod
    answer = page(client)
    assert list(answer["CheckDetails"]) == [f"{NS}/probe"]
    assert answer["CheckDetails"][f"{NS}/probe"] == {
        "OK": False, "Errors": ["dns down"], "RunDuration": "2.5s", "Namespace": NS, "Node": "",
        "LastRun": LAST_TEXT, "AuthoritativePod": "probe-abc", "uuid": "u-1"}
    assert answer["OK"] is False and answer["Errors"] == ["dns down"]


def test_a_healthcheck_whose_status_v3_wrote_names_no_pod_and_still_shows_as_run(
        fake_services: FakeServices, client: FlaskClient) -> None:
    status = {k: v for k, v in ran().items() if k != "runBinding"}
    fake_services.api.put(HEALTHCHECKS, healthcheck("from-v3", status=status))
    assert page(client)["CheckDetails"][f"{NS}/from-v3"]["OK"] is True
    [entry] = page(client, "/api/checks")["checks"]
    assert entry["state"] == "ok" and entry["lastRun"] == LAST_TEXT


def test_a_khcheck_and_an_unpaired_healthcheck_of_one_name_are_both_listed_the_healthcheck_as_hc(
        fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(KHCHECKS, khcheck("twin"))
    fake_services.api.put(KHSTATES, khstate_ran("twin"))
    fake_services.api.put(HEALTHCHECKS, healthcheck("twin", status=ran()))
    details = page(client)["CheckDetails"]
    assert sorted(details) == [f"{NS}/hc:twin", f"{NS}/twin"]
    assert details[f"{NS}/twin"]["Errors"] == ["khcheck down"] and details[f"{NS}/hc:twin"]["OK"] is True


def test_a_migrated_pair_shows_once_the_healthcheck_s_result_under_the_khcheck_s_key(
        fake_services: FakeServices, client: FlaskClient) -> None:
    migrated_pair(fake_services, "moved", ran(ok=True))
    answer = page(client)
    assert answer["CheckDetails"] == {f"{NS}/moved": {
        "OK": True, "Errors": [], "RunDuration": "2.5s", "Namespace": NS, "Node": "", "LastRun": LAST_TEXT,
        "AuthoritativePod": "probe-abc", "uuid": "u-1"}}
    assert answer["OK"] is True  # the khcheck's stale failure is not counted


def test_a_healthcheck_the_migration_did_not_mark_does_not_hide_a_khcheck_of_its_name(
        fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(KHCHECKS, {**khcheck("squat"), "metadata": {
        **khcheck("squat")["metadata"], "annotations": {migration.MIGRATED_TO: "squat"}}})
    fake_services.api.put(KHSTATES, khstate_ran("squat"))
    fake_services.api.put(HEALTHCHECKS, healthcheck("squat", status=ran(), annotations={
        migration.MIGRATED_FROM: "another-uid"}))
    assert sorted(page(client)["CheckDetails"]) == [f"{NS}/hc:squat", f"{NS}/squat"]


def test_a_single_run_only_healthcheck_is_under_job_details(fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(HEALTHCHECKS, healthcheck("once", singleRunOnly=True, status=ran()))
    answer = page(client)
    assert answer["CheckDetails"] == {} and list(answer["JobDetails"]) == [f"{NS}/once"]


def test_a_paused_healthcheck_keeps_its_entry_but_leaves_the_top_level_ok(
        fake_services: FakeServices, client: FlaskClient) -> None:
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    fake_services.api.put(HEALTHCHECKS, healthcheck("quiet", status=ran(ok=False, errors=("down",)),
                                                    annotations={PAUSED_UNTIL: until}))
    answer = page(client)
    assert answer["OK"] is True and answer["Errors"] == [] and f"{NS}/quiet" in answer["CheckDetails"]
    [entry] = page(client, "/api/checks")["checks"]
    assert entry["paused"]["until"] == until and entry["nextRun"] == until


def test_the_namespace_filter_applies_to_healthchecks(fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(HEALTHCHECKS, healthcheck("a", status=ran()))
    fake_services.api.put(HEALTHCHECKS, healthcheck("b", namespace="other", status=ran(namespace="other")))
    assert list(page(client, "/?namespace=other")["CheckDetails"]) == ["other/b"]


# --- the JSON API ------------------------------------------------------------------------------------------

def test_a_healthcheck_s_entry_has_kind_healthcheck_and_the_healthcheck_defaults(
        fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.config = dataclasses.replace(fake_services.config, healthcheck_run_interval=300.0,
                                               healthcheck_timeout=45.0)
    fake_services.api.put(HEALTHCHECKS, healthcheck("defaults", status=ran()))
    fake_services.api.put(HEALTHCHECKS, healthcheck("set", runInterval="2m", timeout="10s"))
    fake_services.api.put(HEALTHCHECKS, healthcheck("once", singleRunOnly=True, status=ran()))
    entries = {e["name"]: e for e in page(client, "/api/checks")["checks"]}
    assert {e["kind"] for e in entries.values()} == {"healthcheck"}
    assert (entries["defaults"]["interval"], entries["defaults"]["timeout"]) == (300.0, 45.0)
    assert (entries["set"]["interval"], entries["set"]["timeout"]) == (120.0, 10.0)
    assert entries["set"]["state"] == "never-run"
    assert entries["defaults"]["runDuration"] == 2.5 and entries["defaults"]["successCount"] == 1
    assert entries["defaults"]["nextRun"] == "2024-05-01T12:05:00Z" and entries["defaults"]["singleRunOnly"] is False
    assert entries["once"]["interval"] is None and entries["once"]["nextRun"] is None
    assert entries["once"]["singleRunOnly"] is True


def test_kind_picks_one_kind_of_a_same_named_pair_in_the_listing_and_by_name(
        fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(KHCHECKS, khcheck("twin"))
    fake_services.api.put(KHJOBS, khjob("batch"))
    fake_services.api.put(HEALTHCHECKS, healthcheck("twin", status=ran()))
    kinds = [(e["name"], e["kind"]) for e in page(client, "/api/checks")["checks"]]
    assert kinds == [("batch", "job"), ("twin", "check"), ("twin", "healthcheck")]
    assert [e["kind"] for e in page(client, "/api/checks?kind=healthcheck")["checks"]] == ["healthcheck"]
    assert [e["name"] for e in page(client, "/api/checks?kind=check,job")["checks"]] == ["batch", "twin"]
    assert page(client, "/api/checks?kind=nothing")["checks"] == []
    assert [e["kind"] for e in page(client, f"/api/checks/{NS}/twin")["checks"]] == ["check", "healthcheck"]
    assert [e["kind"] for e in page(client, f"/api/checks/{NS}/twin?kind=healthcheck")["checks"]] == ["healthcheck"]
    assert [e["kind"] for e in page(client, f"/api/checks/{NS}/hc:twin")["checks"]] == ["healthcheck"]
    assert client.get(f"/api/checks/{NS}/hc:batch").status_code == 404


def test_a_migrated_khcheck_is_not_listed_its_healthcheck_is(fake_services: FakeServices, client: FlaskClient) -> None:
    migrated_pair(fake_services, "moved", ran())
    assert [(e["name"], e["kind"]) for e in page(client, "/api/checks")["checks"]] == [("moved", "healthcheck")]
    assert client.get(f"/api/checks/{NS}/moved?kind=check").status_code == 404


def test_the_entries_follow_a_khcheck_that_comes_and_goes_beside_a_healthcheck(fake_services: FakeServices) -> None:
    s = fake_services
    hc = s.kinds.named("healthcheck")
    assert hc is not None
    views = ViewCache(s.khchecks, s.khjobs, s.khstates, s.pods, expose_logs=lambda: False,
                      healthchecks=HealthCheckCaches(hc.checks, hc.states)).attach()
    s.api.put(HEALTHCHECKS, healthcheck("probe", status=ran()))
    assert [b.key for b in views.entries()] == [f"{NS}/probe"]
    s.api.put(KHCHECKS, khcheck("probe"))
    assert sorted(b.key for b in views.entries()) == [f"{NS}/hc:probe", f"{NS}/probe"]
    s.api.delete(KHCHECKS, NS, "probe")
    assert [(b.key, b.view["kind"]) for b in views.entries()] == [(f"{NS}/probe", "healthcheck")]


# --- /metrics ------------------------------------------------------------------------------------------------

def _metrics(fake_services: FakeServices, style: str) -> str:
    fake_services.config = dataclasses.replace(fake_services.config, metrics_style=style)
    app = create_app(fake_services, caller_wait=0.0)
    resp = app.test_client().get("/metrics")
    assert resp.status_code == 200
    return resp.get_data(as_text=True)


def _checks_of(text: str, family: str) -> set[tuple[str, str]]:
    return {(labels["check"], labels["namespace"]) for labels, _ in families(text)[family]}


@pytest.fixture
def twins(fake_services: FakeServices) -> FakeServices:
    """A khcheck and a HealthCheck of one name, a migrated pair, a labelled HealthCheck, a singleRunOnly one."""
    fake_services.api.put(KHCHECKS, khcheck("twin"))
    fake_services.api.put(KHSTATES, khstate_ran("twin"))
    fake_services.api.put(HEALTHCHECKS, healthcheck("twin", status=ran()))
    migrated_pair(fake_services, "moved", ran(ok=False, errors=('quote " and | bar',)))
    fake_services.api.put(HEALTHCHECKS, healthcheck("labelled", labels=SEVERE, status=ran()))
    fake_services.api.put(HEALTHCHECKS, healthcheck("once", singleRunOnly=True, status=ran()))
    return fake_services


def test_metrics_label_healthchecks_by_the_key_slash_shows_in_the_default_style(twins: FakeServices) -> None:
    text = _metrics(twins, "v2")
    want = {(f"{NS}/twin", NS), (f"{NS}/hc:twin", NS), (f"{NS}/moved", NS), (f"{NS}/labelled", NS)}
    for family in ("kuberhealthy_check", "kuberhealthy_check_duration_seconds",
                   "kuberhealthy_check_consecutive_failures", "kuberhealthy_check_interval_seconds",
                   "kuberhealthy_check_paused", "kuberhealthy_check_runs_total", "kuberhealthy_check_success_total",
                   "kuberhealthy_check_seconds_since_success"):
        assert _checks_of(text, family) == want, family
    assert _checks_of(text, "kuberhealthy_job") == {(f"{NS}/once", NS)}
    states = {labels["check"]: labels for labels, _ in families(text)["kuberhealthy_check"]}
    assert states[f"{NS}/moved"]["error"] == "quote ' and | bar" and states[f"{NS}/moved"]["status"] == "0"
    assert (states[f"{NS}/labelled"]["severity"], states[f"{NS}/labelled"]["category"]) == ("critical", "network")
    assert states[f"{NS}/twin"]["severity"] == ""
    result = promtool(text)
    assert result.returncode == 0, result.stdout + result.stderr


def test_metrics_label_healthchecks_by_name_and_namespace_in_v3_style(twins: FakeServices) -> None:
    text = _metrics(twins, "v3")
    want = {("twin", NS), ("hc:twin", NS), ("moved", NS), ("labelled", NS)}
    for family in ("kuberhealthy_check", "kuberhealthy_check_consecutive_failures", "kuberhealthy_check_success_total",
                   "kuberhealthy_check_failure_total", "kuberhealthy_check_paused"):
        assert _checks_of(text, family) == want, family
    failed = {labels["check"]: value for labels, value in families(text)["kuberhealthy_check_failure_total"]}
    assert failed["moved"] == 1.0 and failed["twin"] == 0.0
    result = promtool(text)
    assert result.returncode == 0, result.stdout + result.stderr


# --- v3's /json ---------------------------------------------------------------------------------------------

def test_json_lists_both_kinds_keyed_by_name_and_a_same_named_pair_by_namespace(twins: FakeServices) -> None:
    client = create_app(twins, caller_wait=0.0).test_client()
    details = page(client, "/json")["CheckDetails"]
    assert sorted(details) == [f"{NS}/hc:twin", f"{NS}/twin", "labelled", "moved", "once"]
    assert details["moved"]["ok"] is False and details["moved"]["errors"] == ['quote " and | bar']
    assert details[f"{NS}/hc:twin"]["runDuration"] == 2_500_000_000
    assert details["labelled"]["runIntervalSeconds"] == 600 and details["labelled"]["timeoutSeconds"] == 30


# --- run now, Events --------------------------------------------------------------------------------------

def test_v2_s_run_route_runs_a_healthcheck_by_its_name_and_the_hc_key_picks_it_from_a_pair(
        fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(HEALTHCHECKS, healthcheck("solo", status=ran()))
    fake_services.api.put(KHCHECKS, khcheck("twin"))
    fake_services.api.put(HEALTHCHECKS, healthcheck("twin", status=ran()))
    resp = client.post(f"/api/checks/{NS}/solo/run")
    assert resp.status_code == 202 and resp.get_json()["kind"] == "healthcheck"
    assert RUN_NOW_ANNOTATION in fake_services.api.get(HEALTHCHECKS, NS, "solo")["metadata"]["annotations"]
    assert client.post(f"/api/checks/{NS}/twin/run").get_json()["kind"] == "check"
    assert client.post(f"/api/checks/{NS}/hc:twin/run").get_json()["kind"] == "healthcheck"
    assert RUN_NOW_ANNOTATION in fake_services.api.get(HEALTHCHECKS, NS, "twin")["metadata"]["annotations"]


def test_a_migrated_pair_s_name_runs_the_healthcheck(fake_services: FakeServices, client: FlaskClient) -> None:
    migrated_pair(fake_services, "moved", ran())
    resp = client.post(f"/api/checks/{NS}/moved/run")
    assert resp.status_code == 202 and resp.get_json()["kind"] == "healthcheck"
    assert RUN_NOW_ANNOTATION not in (fake_services.api.get(KHCHECKS, NS, "moved")["metadata"].get("annotations") or {})


def test_a_single_run_only_healthcheck_is_not_run_on_request(fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(HEALTHCHECKS, healthcheck("once", singleRunOnly=True, status=ran()))
    resp = client.post(f"/api/run?namespace={NS}&healthcheck=once")
    assert resp.status_code == 409 and "runs once" in resp.get_data(as_text=True)


def test_v3_s_run_route_runs_a_healthcheck(fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(HEALTHCHECKS, healthcheck("probe", status=ran()))
    resp = client.post(f"/api/run?namespace={NS}&healthcheck=probe")
    assert resp.status_code == 202 and resp.get_json()["kind"] == "healthcheck"
    assert client.post(f"/api/run?namespace={NS}&healthcheck=probe").status_code == 409  # already requested


class EventServices(FakeServices):
    def read_check_events(self, namespace: str, kind: str, name: str, limit: int, timeout: float) -> list[Obj]:
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        items, _ = self.api.list(EVENTS, namespace, field_selector=selector)
        return items[:limit]


def test_v3_s_events_route_reads_the_events_about_the_healthcheck() -> None:
    services = EventServices()
    services.api.put(HEALTHCHECKS, healthcheck("probe", status=ran()))
    for kind, message in (("HealthCheck", "the HealthCheck's"), ("KuberhealthyCheck", "a khcheck's")):
        services.api.put(EVENTS, {"apiVersion": "v1", "kind": "Event",
                                  "metadata": {"name": f"probe.{kind.lower()}", "namespace": NS},
                                  "involvedObject": {"kind": kind, "name": "probe", "namespace": NS},
                                  "reason": "CheckFailed", "message": message, "type": "Warning"})
    resp = create_app(services, caller_wait=0.0).test_client().get(f"/api/events?namespace={NS}&healthcheck=probe")
    assert resp.status_code == 200 and [e["message"] for e in json.loads(resp.data)] == ["the HealthCheck's"]


# --- the dashboard ------------------------------------------------------------------------------------------

def test_the_overview_tags_a_healthcheck_and_links_its_own_page(
        fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(KHCHECKS, khcheck("twin"))
    fake_services.api.put(HEALTHCHECKS, healthcheck("twin", status=ran()))
    html = client.get("/dashboard").get_data(as_text=True)
    assert f'href="/dashboard/{NS}/twin?kind=healthcheck"' in html and f'href="/dashboard/{NS}/twin"' in html
    assert '<span class="tag tag-healthcheck">HealthCheck</span>' in html
    assert 'data-id="healthcheck:' in html and 'data-id="check:' in html


def test_a_healthcheck_s_check_page_shows_its_kind_interval_images_and_run_button(
        fake_services: FakeServices, client: FlaskClient) -> None:
    fake_services.api.put(KHCHECKS, khcheck("twin"))
    fake_services.api.put(HEALTHCHECKS, healthcheck("twin", runInterval="2m", status=ran()))
    resp = client.get(f"/dashboard/{NS}/twin?kind=healthcheck")
    html = resp.get_data(as_text=True)
    assert resp.status_code == 200 and 'id="h-healthcheck"' in html and 'id="h-check"' not in html
    assert "<dd>2 min</dd>" in html and "<code>kh-sim/v3</code>" in html
    assert f'data-url="/api/checks/{NS}/twin/run?kind=healthcheck"' in html
    assert f"annotate healthcheck twin {RUN_NOW_ANNOTATION}" in html
    assert f'data-live="/dashboard/{NS}/twin/live?kind=healthcheck"' in html
    live = client.get(f"/dashboard/{NS}/twin/live?kind=healthcheck")
    assert live.status_code == 200 and list(live.get_json()["parts"]) == ["live-healthcheck"]
    both = client.get(f"/dashboard/{NS}/twin").get_data(as_text=True)
    assert 'id="run-now"' in both and 'id="run-now-healthcheck"' in both and both.count('class="run-now"') == 2
    assert client.get(f"/dashboard/{NS}/hc:twin").status_code == 200


def test_a_single_run_only_healthcheck_s_page_has_no_run_button(
        fake_services: FakeServices, app: Flask) -> None:
    fake_services.api.put(HEALTHCHECKS, healthcheck("once", singleRunOnly=True, status=ran()))
    html = app.test_client().get(f"/dashboard/{NS}/once").get_data(as_text=True)
    assert "once (singleRunOnly)" in html and "run-now" not in html
