"""What every replica says about a paused check (records/pause.py, docs/interface.md#pausing-a-check), over the fakes:
`/` keeps v2's shape and the check's CheckDetails entry but leaves it out of the top-level OK and Errors and of
kuberhealthy_cluster_state; `/api/checks` shows `paused: {until, reason}` and the pause's end as nextRun;
`kuberhealthy_check_paused` is 1|0; no HTTP route runs (or resumes) it; the dashboard shows the pause and the `kubectl
annotate` commands. When the pause's time passes, each of them says so at its next read, without any cache change."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from kuberhealthy.base.times import format_time
from kuberhealthy.kube import KHCHECKS, KHSTATES, Obj
from kuberhealthy.records import pause
from kuberhealthy.web.entries import ViewCache
from kuberhealthy.web.status.page import StatusCache
from testbed.fakes import NS, POD_NAME, FakeServices, khcheck, khstate_of

HOUR = 3600.0
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def check(services: FakeServices, name: str, ok: bool, paused_for: float | None = None, reason: str = "",
          wall: float | None = None) -> Obj:
    """A khcheck that ran (OK or failing "<name> is broken"), paused for `paused_for` seconds from `wall`."""
    obj = khcheck(name)
    if paused_for is not None:
        now = time.time() if wall is None else wall
        obj["metadata"]["annotations"] = {pause.PAUSED_UNTIL: format_time(now + paused_for),
                                          pause.PAUSED_REASON: reason}
    services.api.put(KHCHECKS, obj)
    last = (time.time() if wall is None else wall) - 60
    services.api.put(KHSTATES, khstate_of(name, OK=ok, Errors=[] if ok else [f"{name} is broken"],
                                          LastRun=format_time(last), RunDuration="1s", AuthoritativePod=POD_NAME))
    return obj


def entry(client: FlaskClient, name: str) -> dict[str, Any]:
    resp = client.get(f"/api/checks/{NS}/{name}")
    assert resp.status_code == 200
    (found,) = resp.get_json()["checks"]
    return dict(found)


def families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_the_status_page_keeps_a_paused_failing_check_s_entry_but_not_its_errors_in_the_top_level_ok(
        fake_services: FakeServices, client: FlaskClient) -> None:
    check(fake_services, "dns", ok=False, paused_for=HOUR, reason="upstream DNS migration")
    check(fake_services, "web", ok=True)
    doc = json.loads(client.get("/").data)
    assert list(doc) == ["OK", "Errors", "CheckDetails", "JobDetails", "CurrentMaster"]  # v2's shape
    assert doc["OK"] is True and doc["Errors"] == []
    assert doc["CheckDetails"][f"{NS}/dns"]["OK"] is False
    assert doc["CheckDetails"][f"{NS}/dns"]["Errors"] == ["dns is broken"]
    assert json.loads(client.get(f"/?namespace={NS}").data)["OK"] is True  # the filtered page too
    check(fake_services, "web", ok=False)  # a failing check that is not paused still counts
    doc = json.loads(client.get("/").data)
    assert doc["OK"] is False and doc["Errors"] == ["web is broken"]


def test_the_api_shows_the_pause_and_its_end_as_the_next_run_and_null_when_not_paused(
        fake_services: FakeServices, client: FlaskClient) -> None:
    obj = check(fake_services, "dns", ok=False, paused_for=HOUR, reason="upstream DNS migration")
    check(fake_services, "web", ok=True)
    until = obj["metadata"]["annotations"][pause.PAUSED_UNTIL]
    dns = entry(client, "dns")
    assert dns["paused"] == {"until": until, "reason": "upstream DNS migration"} and dns["nextRun"] == until
    assert dns["state"] == "failing"  # the last result is kept
    assert entry(client, "web")["paused"] is None
    listed = {c["name"]: c for c in client.get("/api/checks").get_json()["checks"]}
    assert listed["dns"]["paused"]["until"] == until and listed["web"]["paused"] is None


def test_the_paused_metric_is_one_for_a_paused_check_and_zero_otherwise_and_the_cluster_state_ignores_it(
        fake_services: FakeServices, client: FlaskClient) -> None:
    check(fake_services, "dns", ok=False, paused_for=HOUR)
    check(fake_services, "web", ok=True)
    text = client.get("/metrics").get_data(as_text=True)
    got = families(text)
    paused = {labels["check"]: (labels, value) for labels, value in got["kuberhealthy_check_paused"]}
    assert paused[f"{NS}/dns"] == ({"check": f"{NS}/dns", "namespace": NS}, 1.0)
    assert paused[f"{NS}/web"] == ({"check": f"{NS}/web", "namespace": NS}, 0.0)
    assert got["kuberhealthy_cluster_state"] == [({}, 1.0)]
    assert {labels["check"]: v for labels, v in got["kuberhealthy_check"]}[f"{NS}/dns"] == 0.0  # still exported
    if not Path(PROMTOOL).is_file():
        pytest.skip("promtool not found: run `bash hack/tools.sh`")
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_http_route_runs_a_paused_check_the_answer_names_the_annotation(
        fake_services: FakeServices, client: FlaskClient) -> None:
    check(fake_services, "dns", ok=False, paused_for=HOUR)
    resp = client.post(f"/api/checks/{NS}/dns/run")
    assert resp.status_code == 409 and pause.PAUSED_UNTIL in resp.get_data(as_text=True)
    assert fake_services.api.made("merge_patch", KHCHECKS) == []


def test_when_the_pause_s_time_passes_the_page_and_the_api_count_the_check_again_at_their_next_read(
        fake_services: FakeServices) -> None:
    clock = fake_services.clock
    check(fake_services, "dns", ok=False, paused_for=90, wall=clock.wall())
    status = StatusCache(fake_services.khstates, fake_services.khjobs, fake_services.khchecks,
                         wall=clock.wall).attach()
    views = ViewCache(fake_services.khchecks, fake_services.khjobs, fake_services.khstates, fake_services.pods,
                      expose_logs=lambda: False, wall=clock.wall).attach()
    assert status.summary().ok is True
    (before,) = views.one(NS, "dns")
    assert before.view["paused"] is not None
    clock.advance(91)  # nothing in any cache changes
    assert status.summary().ok is False and status.summary().errors == ("dns is broken",)
    assert json.loads(status.page("kh-0"))["OK"] is False
    (after,) = views.one(NS, "dns")
    assert after.view["paused"] is None and after.version != before.version  # the dashboard sees the row change
    assert after.view["nextRun"] == format_time(clock.wall() - 91 - 60 + 3600)  # LastRun + runInterval again


def test_the_check_page_shows_the_pause_and_the_command_that_ends_it(
        fake_services: FakeServices, client: FlaskClient) -> None:
    obj = check(fake_services, "dns", ok=False, paused_for=HOUR, reason="upstream <DNS> migration")
    html = client.get(f"/dashboard/{NS}/dns").get_data(as_text=True)
    until = obj["metadata"]["annotations"][pause.PAUSED_UNTIL]
    assert f"Paused until <time datetime=\"{until}\">" in html
    assert "upstream &lt;DNS&gt; migration" in html  # escaped: annotations are anyone's text
    assert f"kubectl -n {NS} annotate khcheck dns {pause.PAUSED_UNTIL}- {pause.PAUSED_REASON}-" in html


def test_a_check_page_of_a_check_not_paused_gives_the_command_that_pauses_it(
        fake_services: FakeServices, client: FlaskClient) -> None:
    check(fake_services, "web", ok=True)
    html = client.get(f"/dashboard/{NS}/web").get_data(as_text=True)
    assert f"kubectl -n {NS} annotate khcheck web {pause.PAUSED_UNTIL}=" in html
    assert f"{pause.PAUSED_REASON}=&#39;&lt;why&gt;&#39; --overwrite" in html
    assert "Paused until" not in html


def test_the_overview_marks_a_paused_row_and_its_banner_leaves_the_paused_check_out_of_the_failures(
        fake_services: FakeServices, client: FlaskClient) -> None:
    check(fake_services, "dns", ok=False, paused_for=HOUR, reason="migration")
    check(fake_services, "web", ok=True)
    html = client.get("/dashboard").get_data(as_text=True)
    assert 'class="b b-paused"' in html and "migration" in html
    assert "No failures (1 paused)" in html
    check(fake_services, "web", ok=False)
    live = client.get("/dashboard/live").get_json()
    assert live["banner"]["headline"] == "1 of 2 failing (1 paused)" and live["banner"]["paused"] == 1
