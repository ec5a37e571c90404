"""The benches with HealthChecks beside khchecks: bench.scale --mix / --versus-mix (bench/scalemix.py and the
instruments in bench/scaleprobe.py), make faults --mix (bench/faultmix.py) and make attack --kind healthcheck
(bench/attack/target.py): their pure parts."""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import scalemix
from bench.attack import target
from bench.faultmix import MixAuditTail, kind_of
from bench.faults_bench import alarms_by_kind
from bench.scaleprobe import (
    KIND_HEALTHCHECK,
    KIND_KHCHECK,
    PodLog,
    StateLog,
    audit_since,
    healthcheck_version,
    owner_counter,
)
from bench.scalereport import false_failures, sim_figures
from testbed.clients.rawhttp import REPORT_PATH
from testbed.cluster.apiserver import AUDIT_POLICY
from testbed.faults.observe import Failure
from testbed.faults.verdict import Outcome

T0 = 1_796_119_200.0  # 2026-12-01T10:00:00Z


def audit(verb: str, resource: str, name: str = "", subresource: str = "", body: dict[str, Any] | None = None,
          ns: str = "scale", second: int = 1) -> str:
    ref: dict[str, Any] = {"resource": resource, "namespace": ns}
    if name:
        ref["name"] = name
    if subresource:
        ref["subresource"] = subresource
    e: dict[str, Any] = {"stage": "ResponseComplete", "verb": verb, "userAgent": "kuberhealthy/1.0", "objectRef": ref,
                         "responseStatus": {"code": 200},
                         "requestReceivedTimestamp": f"2026-12-01T10:00:{second:02d}.000000Z",
                         "stageTimestamp": f"2026-12-01T10:00:{second:02d}.000000Z"}
    if body is not None:
        e["requestObject"] = body
    return json.dumps(e, separators=(",", ":")) + "\n"


# --- bench.scale --mix ------------------------------------------------------------------------------------

def test_a_mixed_size_runs_half_healthchecks_and_khchecks_take_the_odd_one() -> None:
    assert scalemix.split(51, mix=True) == {KIND_KHCHECK: 26, KIND_HEALTHCHECK: 25}
    assert scalemix.split(50, mix=False) == {KIND_KHCHECK: 50, KIND_HEALTHCHECK: 0}


def test_a_healthcheck_carries_the_khchecks_pod_spec_under_podspec_spec() -> None:
    pod = {"containers": [{"name": "main", "image": "kh-sim/ok"}]}
    hc = scalemix.healthcheck("scale-hc-0001", pod, "60s", "30s")
    assert hc["apiVersion"] == "kuberhealthy.github.io/v2" and hc["kind"] == "HealthCheck"
    assert hc["spec"] == {"runInterval": "60s", "timeout": "30s", "podSpec": {"spec": pod}}
    assert scalemix.hcs_path("ns", "x") == "/apis/kuberhealthy.github.io/v2/namespaces/ns/healthchecks/x"


def test_requests_to_healthchecks_and_their_status_count_for_healthchecks_and_pods_by_their_name(
        tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(audit("update", "healthchecks", "scale-hc-0001", "status")
                   + audit("get", "healthchecks", "scale-hc-0001")
                   + audit("create", "pods", "scale-hc-0001-abcde") + audit("create", "pods", "scale-0001-abcde")
                   + audit("update", "khstates", "scale-0001") + audit("create", "events", "scale-hc-0001.17f")
                   + audit("get", "leases", "kuberhealthy") + audit("list", "pods"))
    counts = audit_since(owner_counter(scalemix.HC_PREFIX), log, (0, 0), T0, T0 + 60, "kuberhealthy/")
    assert counts == {"healthcheck update healthchecks/status": 1, "healthcheck get healthchecks": 1,
                      "healthcheck create pods": 1, "khcheck create pods": 1, "khcheck update khstates": 1,
                      "healthcheck create events": 1, "shared get leases": 1, "shared list pods": 1}
    total, owners = scalemix.api_by_owner(counts)
    assert total["create pods"] == 2 and sum(owners[KIND_HEALTHCHECK].values()) == 4


def test_a_healthcheck_status_without_a_result_is_no_failure_and_a_failed_one_is_a_false_failure() -> None:
    states = StateLog(healthcheck_version)

    def hc(rv: str, **status: Any) -> dict[str, Any]:
        return {"metadata": {"name": "scale-hc-0001", "resourceVersion": rv}, "status": status}
    states.on_event("ADDED", hc("1"), 1.0)  # created: no status yet
    states.on_event("MODIFIED", hc("2", ok=False, lastRunUnix=0, currentUUID="u1"), 2.0)  # claimed
    assert states.completed_first_run() == 0
    states.on_event("MODIFIED", hc("3", ok=True, errors=[], lastRunUnix=1700, runDuration=5_000_000), 3.0)
    assert states.completed_first_run() == 1
    assert false_failures(states.snapshot(), "scale", 0.0, 10.0)["results"] == 0
    states.on_event("MODIFIED", hc("4", ok=False, errors=["scale/scale-hc-0001: timed out"], lastRunUnix=1760), 4.0)
    ff = false_failures(states.snapshot(), "scale", 0.0, 10.0)
    assert ff["results"] == 1 and ff["checks"] == 1 and ff["reasons"] == [("<check>: timed out", 1)]


def test_a_checker_pod_labelled_healthcheck_counts_as_a_healthchecks_run() -> None:
    pods = PodLog()
    pods.on_event("ADDED", {"metadata": {"uid": "1", "name": "scale-hc-0001-x", "labels": {
        "kuberhealthy-check-name": "scale-hc-0001", "healthcheck": "scale-hc-0001"}}}, 1.0)
    pods.on_event("ADDED", {"metadata": {"uid": "2", "name": "scale-0001-x", "labels": {
        "kuberhealthy-check-name": "scale-0001"}}}, 2.0)
    assert list(pods.by_check(KIND_HEALTHCHECK)) == ["scale-hc-0001"]
    assert list(pods.by_check(KIND_KHCHECK)) == ["scale-0001"]
    assert len(pods.by_check()) == 2


def _lag(p99: float) -> dict[str, Any]:
    return {"p50": 0.0, "p99": p99, "max": p99, "overdue_at_end": 0}


def test_the_figures_split_per_kind_and_the_shared_requests_are_shown_apart() -> None:
    owners = {KIND_KHCHECK: Counter({"update khstates": 30, "create pods": 10}),
              KIND_HEALTHCHECK: Counter({"update healthchecks/status": 33, "create pods": 11}),
              "shared": Counter({"get leases": 7})}
    ff = {k: {"results": 0, "in_window": 0, "checks": 0, "reasons": []} for k in scalemix.KINDS}
    figures = scalemix.kind_figures({KIND_KHCHECK: 5, KIND_HEALTHCHECK: 5}, {KIND_KHCHECK: 10, KIND_HEALTHCHECK: 11},
                                    owners, ff, {k: _lag(0.01) for k in scalemix.KINDS})
    assert figures[KIND_KHCHECK]["api_per_run"] == 4.0 and figures[KIND_HEALTHCHECK]["api_per_run"] == 4.0
    assert figures["shared"]["api_per_run"] == pytest.approx(7 / 21, abs=0.01)
    lines = scalemix.kind_lines({"by_kind": figures})
    assert [line.split(":")[0].strip() for line in lines] == [
        "- khcheck", "- healthcheck", "- shared (lists, Leases, ...)"]
    assert scalemix.kind_lines({"by_kind": {KIND_KHCHECK: figures[KIND_KHCHECK]}}) == []


def row(runs: int, daemon_seconds: float, lag_p99: float, failures: int = 0) -> dict[str, Any]:
    return {"n": 50, "runs": runs, "cpu": {"daemon_seconds": daemon_seconds}, "lag": {"p99": lag_p99},
            "api": {"per_run": 4.3}, "mem": {"peak_pss_mb": 74.0}, "status_page": {"p99": 0.01},
            "false_failures": {"results": failures}, "sim": {"refused_total": 0}}


def test_the_mix_is_held_to_khchecks_alone_cpu_per_run_within_ten_percent_and_as_few_false_failures() -> None:
    c = scalemix.compare(row(100, 1.0, 0.02), row(100, 1.08, 0.03))
    assert c["cpu_ratio"] == pytest.approx(1.08) and c["met"] == {
        "false failures": True, "schedule lag": True, "CPU per run": True}
    worse = scalemix.compare(row(100, 1.0, 0.02), row(100, 1.2, 1.5, failures=1))
    assert worse["met"] == {"false failures": False, "schedule lag": False, "CPU per run": False}
    text = "\n".join(scalemix.compare_lines(50, worse, {}))
    assert "| daemon CPU per run | 10.0 ms | 12.0 ms | 1.20x |" in text and "MISS CPU per run" in text


def test_a_side_that_could_not_be_measured_is_not_compared() -> None:
    c = scalemix.compare({"n": 50, "error": "boom"}, row(100, 1.0, 0.02))
    assert c == {"error": "boom"} and scalemix.compare_lines(50, c, {}) == ["50 checks: not compared: boom"]


# --- make faults --mix ----------------------------------------------------------------------------------------

def hc_write(name: str, second: int, **status: Any) -> str:
    return audit("update", "healthchecks", name, "status", ns="faults", second=second,
                 body={"metadata": {"name": name}, "status": status})


def test_the_test_beds_audit_policy_records_healthcheck_status_writes_with_their_bodies() -> None:
    assert '"healthchecks", "healthchecks/status"' in AUDIT_POLICY and "khstates" in AUDIT_POLICY
    assert AUDIT_POLICY.rstrip().endswith("- level: Metadata") and AUDIT_POLICY.count("- level: Metadata") == 1


def test_a_healthchecks_status_writes_are_read_as_results_good_runs_and_false_alarms(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(hc_write("h01", 1, ok=False, lastRunUnix=0, runBinding={"uuid": "u1"})  # claimed, no result
                   + hc_write("h01", 2, ok=True, errors=[], lastRunUnix=T0 + 2,
                              runBinding={"uuid": "u1", "finishedUUID": "u1"})
                   + hc_write("h01", 3, ok=False, errors=["faults/h01: timed out"], lastRunUnix=T0 + 3,
                              runBinding={"uuid": "u2", "finishedUUID": "u2"}))
    tail = MixAuditTail(log, "faults")
    assert len(tail.poll()) == 3
    assert tail.good_runs() == {"faults/h01": [T0 + 2]}
    failures = tail.failures()
    assert [(f.check, f.errors, f.uuid) for f in failures] == [("faults/h01", ("faults/h01: timed out",), "u2")]


def test_false_alarms_are_told_apart_by_kind() -> None:
    def failure(check: str) -> tuple[Failure, str]:
        return Failure(check, "", ("x",), "u", 0.0, "audit"), "pod"
    o = Outcome("api-kill", false_alarms=[failure("faults/c01"), failure("faults/h02"), failure("faults/h03")],
                bed_failures=[failure("faults/h01")])
    assert alarms_by_kind(o) == "kh 1, hc 2 (+1 bed)"
    assert kind_of("faults/h01") == "healthcheck" and kind_of("faults/c01") == "khcheck"


# --- make attack --kind healthcheck -----------------------------------------------------------------------

@pytest.fixture
def healthchecks() -> Iterator[None]:
    target.choose_kind(target.HEALTHCHECK)
    target.choose(target.V3_REPORT_PATH)
    try:
        yield
    finally:
        target.choose_kind(target.KHCHECK)
        target.choose(REPORT_PATH)


def test_the_attacks_genuine_checks_can_be_healthchecks_named_so_in_the_table(healthchecks: None) -> None:
    body = target.check_body("flood-a", interval="2s", env={"SIM_DELAY": "1"})
    assert body["kind"] == "HealthCheck" and body["spec"]["runInterval"] == "2s"
    assert body["spec"]["podSpec"]["spec"]["containers"][0]["env"] == [{"name": "SIM_DELAY", "value": "1"}]
    assert target.check_path("ns", "a") == "/apis/kuberhealthy.github.io/v2/namespaces/ns/healthchecks/a"
    assert target.label("flood") == "flood /check (HealthChecks)"


def test_by_default_the_attacks_genuine_checks_are_khchecks() -> None:
    assert target.check_body("a")["kind"] == "KuberhealthyCheck" and target.label("flood") == "flood"
    with pytest.raises(ValueError):
        target.choose_kind("khjob")


def test_a_report_cut_by_its_pods_end_is_not_counted_unanswered_and_a_5xx_that_was_retried_is_counted_apart() -> None:
    def pod(n: int, outcome: str, statuses: list[int], error: str | None = None) -> dict[str, Any]:
        status = statuses[-1] if statuses else None
        return {"key": f"ns/p{n}", "uid": f"u{n}", "seen": 10.0, "report": {
            "status": status, "statuses": statuses, "outcome": outcome, "error": error, "response_body": ""}}
    stats = {"final": True, "pods": [
        pod(1, "accepted", [503, 200]),
        pod(2, "cancelled", [], "RemoteDisconnected: Remote end closed connection without response"),
        pod(3, "deadline", [], "ConnectionRefusedError: refused"),
        pod(4, "rejected", [400]),
    ]}
    figures = sim_figures(stats, PodLog(), 0.0, 100.0, 0.0)
    assert figures["cut_by_pod_end"] == 1 and figures["unanswered"] == 1
    assert figures["retried_after_5xx"] == 1 and figures["answered_5xx"] == 0
    assert figures["refused_total"] == 1
