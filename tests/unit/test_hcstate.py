"""A HealthCheck's status as a khstate and back (records/hcstate.py): the state rules written for khstates
hold for HealthChecks through it, with v3's names and units in the status."""
from __future__ import annotations

import copy
import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kuberhealthy.kube import Bounds, Obj, Resource
from kuberhealthy.records import hcstate, khstate
from kuberhealthy.records.history import RunFacts, RunRecord
from kuberhealthy.records.khstate import (
    FINISHED_UUID,
    RUN_POD,
    HistoryWrite,
    RunFinished,
    RunWrite,
    Spec,
    StaleReport,
    claim_run,
    record_report,
    record_result,
)
from testbed.paths import REPO

RUN = "6b2f4c1e-0000-4000-8000-000000000001"
NEXT = "6b2f4c1e-0000-4000-8000-000000000002"


def healthcheck(status: dict[str, Any] | None = None, annotations: dict[str, str] | None = None) -> Obj:
    obj: Obj = {"apiVersion": "kuberhealthy.github.io/v2", "kind": "HealthCheck",
                "metadata": {"name": "dns", "namespace": "ns", "uid": "u-1", "resourceVersion": "7"},
                "spec": {"podSpec": {"spec": {"containers": [{"name": "c", "image": "img"}]}}}}
    if status is not None:
        obj["status"] = status
    if annotations:
        obj["metadata"]["annotations"] = annotations
    return obj


class StatusApi:
    """The one write path of khstate.py (update_with_retry) over a HealthCheck's status, through the view,
    as the daemon's HealthCheck store does it: a write replaces the status, never the spec."""

    def __init__(self, hc: Obj) -> None:
        self.hc = hc
        self.writes = 0

    def update_with_retry(self, res: Resource, namespace: str, name: str,
                          mutate: Callable[[Obj | None], Obj | None], *, hint: Obj | None = None,
                          bounds: Bounds | None = None, stop: threading.Event | None = None) -> Obj | None:
        state = mutate(copy.deepcopy(hcstate.view(self.hc)))
        if state is None:
            return None
        self.hc["status"] = hcstate.status_of(state, self.hc.get("status"))
        self.writes += 1
        return hcstate.view(self.hc)


def write(api: StatusApi, run: str) -> RunWrite:
    return RunWrite(api, "ns", "dns", run, "kuberhealthy-0")  # type: ignore[arg-type]


def test_a_run_claimed_reported_and_recorded_leaves_v3s_fields_in_the_status() -> None:
    api = StatusApi(healthcheck({"additionalMetadata": "kept", "someLaterField": {"x": 1}}))
    claim_run(write(api, RUN), run_pod="dns-1700000000", run_key_sha256="abc")
    status = api.hc["status"]
    assert status["currentUUID"] == RUN and status["runBinding"]["pod"] == "dns-1700000000"
    when = dt.datetime(2026, 12, 2, 10, 0, 5, tzinfo=dt.timezone.utc)
    record_report(write(api, RUN), False, ["dns <broken>"], now=when)
    history = HistoryWrite(lambda spec: RunRecord.reported(RunFacts(RUN, when.timestamp() - 5, 5.25, "node-1",
                                                                    "dns-1700000000"), spec), 24, True,
                           when.timestamp() + 1)
    record_result(write(api, RUN), "5.25s", "node-1", history=history)
    status = api.hc["status"]
    assert status["ok"] is False and status["errors"] == ["dns <broken>"]
    assert status["runDuration"] == 5_250_000_000 and status["lastRunUnix"] == int(when.timestamp())
    assert status["failureCount"] == 1 and status["consecutiveFailures"] == 1 and status["successCount"] == 0
    assert status["lastFailureUnix"] == int(when.timestamp()) + 1 and status["lastOKUnix"] == 0
    assert status["namespace"] == "ns" and status["node"] == "node-1"
    assert status["currentUUID"] == ""  # the run is over
    assert status["runBinding"]["finishedUUID"] == RUN and status["history"][0]["uuid"] == RUN
    assert status["additionalMetadata"] == "kept" and status["someLaterField"] == {"x": 1}
    assert "apiVersion" not in status and api.hc["spec"]["podSpec"]  # the spec untouched


def test_the_report_rules_hold_through_the_view() -> None:
    api = StatusApi(healthcheck())
    claim_run(write(api, RUN), run_pod="dns-1", run_key_sha256="abc")
    with pytest.raises(StaleReport):
        record_report(write(api, NEXT), True, [])
    record_report(write(api, RUN), True, [])
    record_result(write(api, RUN), "1s", "node-1")
    with pytest.raises(RunFinished):  # the run is over: a second report of it is refused
        record_report(write(api, RUN), True, [])
    claim_run(write(api, NEXT), run_pod="dns-2", run_key_sha256="def")
    with pytest.raises(RunFinished):  # an earlier run of the check
        record_report(write(api, RUN), True, [])
    assert api.hc["status"]["currentUUID"] == NEXT


def test_a_status_written_by_upstream_v3_reads_as_its_khstate() -> None:
    docs = [d for d in yaml.safe_load_all((REPO / "tests/fixtures/v3/healthchecks.yaml").read_text()) if d]
    with_status = [d for d in docs if d.get("status")]
    assert with_status
    hc = with_status[0]
    state = hcstate.view(hc)
    spec, status = state["spec"], hc["status"]
    assert spec["OK"] is status["ok"] and spec["Errors"] == status["errors"]
    assert spec["RunDuration"] == "2.5s" and spec["successCount"] == status["successCount"]
    assert spec["LastRun"] == "2024-05-01T10:00:00Z" and "lastFailure" not in spec
    assert state["metadata"]["name"] == hc["metadata"]["name"]
    assert Spec.of(state).namespace == status["namespace"]


def test_a_run_in_flight_under_upstream_v3_is_known_by_its_current_uuid() -> None:
    state = hcstate.view(healthcheck({"ok": True, "errors": [], "currentUUID": RUN}))
    assert Spec.of(state).uuid == RUN and khstate.finished_uuid(state) == ""


def test_where_the_crd_prunes_our_fields_the_binding_lives_in_annotations_and_reads_back() -> None:
    api = StatusApi(healthcheck())
    claim_run(write(api, RUN), run_pod="dns-1", run_key_sha256="abc")
    patch = hcstate.binding_annotations(hcstate.view(api.hc))
    assert patch[RUN_POD] == "dns-1" and patch[hcstate.RUN_UUID_ANNOTATION] == RUN and patch[FINISHED_UUID] is None
    pruned = {k: v for k, v in api.hc["status"].items() if k not in ("runBinding", "tokenBinding", "history", "node")}
    pruned["currentUUID"] = ""
    hc = healthcheck(pruned, {k: v for k, v in patch.items() if v is not None})
    state = hcstate.view(hc)
    assert Spec.of(state).uuid == RUN and khstate.RunClaim.of(state).pod == "dns-1"


def test_a_token_binding_round_trips_and_a_status_of_nonsense_reads_as_no_state() -> None:
    state = hcstate.view(healthcheck({"tokenBinding": {"generation": 3}}))
    assert state["spec"][khstate.TOKEN_BOUND_GENERATION] == 3
    assert hcstate.status_of(state)["tokenBinding"] == {"generation": 3}
    nonsense = hcstate.view(healthcheck({"ok": "yes", "errors": "many", "runDuration": "long", "lastRunUnix": [],
                                         "runBinding": [], "history": {}, "successCount": True}))
    spec = nonsense["spec"]
    assert spec["OK"] is False and spec["RunDuration"] == "" and "LastRun" not in spec and spec["uuid"] == ""
    assert spec["successCount"] == 0 and "history" not in spec and "Errors" not in spec
    assert hcstate.view(healthcheck())["spec"]["Errors"] == []


statuses = st.fixed_dictionaries({
    "ok": st.booleans(),
    "errors": st.lists(st.text(max_size=20), max_size=3),
    "runDuration": st.integers(min_value=0, max_value=10**13).map(lambda ns: ns - ns % 1000),
    "namespace": st.sampled_from(["ns", "other"]),
    "currentUUID": st.sampled_from(["", RUN]),
    "lastRunUnix": st.integers(min_value=0, max_value=4 * 10**9),
    "successCount": st.integers(min_value=0, max_value=10**6),
    "failureCount": st.integers(min_value=0, max_value=10**6),
    "consecutiveFailures": st.integers(min_value=0, max_value=10**3),
    "lastOKUnix": st.integers(min_value=0, max_value=4 * 10**9),
    "lastFailureUnix": st.integers(min_value=0, max_value=4 * 10**9),
    "additionalMetadata": st.text(max_size=10),
})


@given(statuses)
def test_a_v3_status_read_as_a_khstate_and_written_back_is_the_same_status(status: dict[str, Any]) -> None:
    """Nothing is lost in the view: a status v3 wrote comes back field for field (its currentUUID too,
    read as the run in flight)."""
    assert hcstate.status_of(hcstate.view(healthcheck(status)), status) == {
        **status, **({"runBinding": {"uuid": RUN}} if status["currentUUID"] else {})}
