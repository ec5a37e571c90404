"""Checks run by the installed chart on the real node: every example in examples/checks, a shell checker
that reports with the checkclient command line, a v2-style curl checker (no `kh-run-uuid` header: found
by its source address), and a hostNetwork checker. Their results in the khstates and on `/` through the
Service's ClusterIP (kube-proxy) and `kubectl port-forward`; the report paths over the real CNI; the log
tail of a failed run read through the real kubelet."""
from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.node.e2e import E2E, daemon_logs, example_objects, metric, newest_run, poll
from testbed.node.images import example_names

FAIL_REASON = "the e2e shell check fails on purpose"
LOG_LINE = "e2e log line before failing"
CURL_FAIL_REASON = "the e2e curl check fails on purpose"


GOOD = ["shell-ok", "curl-ok", "hostnet-ok"]
FAILING = {"shell-fail": FAIL_REASON, "curl-fail": CURL_FAIL_REASON}


@pytest.fixture(name="checks", scope="module")
def checks_fixture(kh: E2E) -> Iterator[dict[str, dict[str, Any]]]:
    """Every check of this module created at once; their first recorded runs, by khcheck name."""
    shell, curl = "localhost/kh-e2e/shell-check:e2e", "localhost/kh-e2e/curl-check:e2e"
    objs: list[dict[str, Any]] = []
    for name in example_names():
        objs += example_objects(kh, name)
    objs += [
        kh.khcheck("shell-ok", kh.pod_spec(shell, {"MODE": "ok"})),
        kh.khcheck("shell-fail", kh.pod_spec(shell, {"MODE": "fail", "FAIL_REASON": FAIL_REASON,
                                                      "LOG_LINE": LOG_LINE})),
        kh.khcheck("curl-ok", kh.pod_spec(curl, {"MODE": "ok"})),
        kh.khcheck("curl-fail", kh.pod_spec(curl, {"MODE": "fail", "FAIL_REASON": CURL_FAIL_REASON})),
        kh.khcheck("hostnet-ok", kh.pod_spec(shell, {"MODE": "ok"}, hostNetwork=True,
                                             dnsPolicy="ClusterFirstWithHostNet")),
    ]
    kh.apply(*objs)
    names = [o["metadata"]["name"] for o in objs if o["kind"] == "KuberhealthyCheck"]
    runs: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 240  # all run at once: one deadline for all
    for name in names:
        try:
            runs[name] = newest_run(kh, name, timeout=max(5.0, deadline - time.monotonic()))
        except AssertionError as e:  # that check's tests fail with this; the others still run
            runs[name] = {"missing": str(e)}
    yield runs
    for name in ("curl-ok", "curl-fail", "shell-fail", "hostnet-ok"):  # kept: the examples, shell-ok
        kh.delete("khcheck", name, kh.checks_namespace)


def test_every_example_check_and_the_good_test_checks_end_ok(kh: E2E, checks: dict[str, dict[str, Any]]) -> None:
    for name in [f"example-{n}" for n in example_names()] + GOOD:
        state = kh.khstate(name)
        assert state is not None
        assert checks[name]["OK"] is True, (name, checks[name])
        assert state["OK"] is True and state["Errors"] == [], (name, state)
        assert state["Node"] and state["AuthoritativePod"], state


def test_failing_checks_end_failed_with_the_errors_they_reported(kh: E2E, checks: dict[str, dict[str, Any]]) -> None:
    for name, reason in FAILING.items():
        state = kh.khstate(name)
        assert state is not None
        assert checks[name]["OK"] is False and checks[name]["outcome"] == "reported", checks[name]
        assert state["OK"] is False and state["Errors"] == [reason], state


def _assert_status_page(status: dict[str, Any], kh: E2E) -> None:
    details = status["CheckDetails"]
    assert status["OK"] is False
    for name in GOOD:
        assert details[f"{kh.checks_namespace}/{name}"]["OK"] is True, details.get(f"{kh.checks_namespace}/{name}")
    for name, reason in FAILING.items():
        entry = details[f"{kh.checks_namespace}/{name}"]
        assert entry["OK"] is False and entry["Errors"] == [reason], entry
        assert reason in status["Errors"]
    assert status["CurrentMaster"] == kh.leader()


def test_the_status_page_metrics_and_dashboard_answer_through_the_cluster_ip_and_through_port_forward(
        kh: E2E, checks: dict[str, dict[str, Any]]) -> None:
    bases = {"ClusterIP": f"http://{kh.cluster_ip}"}
    with kh.port_forward() as forwarded:
        bases["port-forward"] = forwarded
        for how, base in bases.items():
            status = kh.http("/", base).json()
            _assert_status_page(status, kh)
            metrics = kh.http("/metrics", base)
            assert metrics.status_code == 200, how
            ns = kh.checks_namespace
            assert metric(metrics.text, "kuberhealthy_check", check=f"{ns}/shell-fail") == 0.0, how
            assert metric(metrics.text, "kuberhealthy_check", check=f"{ns}/shell-ok") == 1.0, how
            dashboard = kh.http("/dashboard", base)
            assert dashboard.status_code == 200 and "shell-fail" in dashboard.text, how


def _report_line(logs: str, check: str, pod: str, kh: E2E) -> str:
    pattern = rf"report \S+ for {re.escape(kh.checks_namespace)}/{re.escape(check)} from pod " \
              rf"{re.escape(kh.checks_namespace)}/{re.escape(pod)} \(([^)]*)\): stored"
    found = re.search(pattern, logs)
    assert found, f"no stored report of {check} from {pod} in the daemons' logs"
    return found.group(1)


def test_a_v2_style_curl_report_without_the_uuid_header_is_found_by_its_pod_ip_as_the_source(
        kh: E2E, checks: dict[str, dict[str, Any]]) -> None:
    pod_name = checks["curl-ok"]["pod"]
    pod = kh.get("pod", pod_name, kh.checks_namespace)
    assert pod is not None, "the curl checker pod is gone before its IP was read"
    pod_ip = pod["status"]["podIP"]

    how = _report_line(daemon_logs(kh), "curl-ok", pod_name, kh)

    assert how == f"status.podIP=={pod_ip},status.phase==Running"  # the source address was the pod's own IP


def test_the_projected_token_the_real_kubelet_mounts_identifies_the_shell_checker(
        kh: E2E, checks: dict[str, dict[str, Any]]) -> None:
    how = _report_line(daemon_logs(kh), "shell-ok", checks["shell-ok"]["pod"], kh)

    assert how == "token"
    assert "token not reviewed" not in daemon_logs(kh)


def test_a_host_network_checker_reports_through_the_service(kh: E2E, checks: dict[str, dict[str, Any]]) -> None:
    pod = kh.get("pod", checks["hostnet-ok"]["pod"], kh.checks_namespace)
    if pod is not None:
        assert pod["spec"]["hostNetwork"] is True
        assert pod["status"]["podIP"] == pod["status"]["hostIP"]

    assert checks["hostnet-ok"]["OK"] is True and checks["hostnet-ok"]["outcome"] == "reported"
    assert _report_line(daemon_logs(kh), "hostnet-ok", checks["hostnet-ok"]["pod"], kh) == "token"


def test_the_log_tail_of_a_failed_run_is_read_through_the_real_kubelet(
        kh: E2E, checks: dict[str, dict[str, Any]]) -> None:
    run = checks["shell-fail"]
    assert LOG_LINE in run.get("logs", ""), run
    assert "shell-check: mode=fail" in run["logs"]
    api = kh.http(f"/api/checks/{kh.checks_namespace}/shell-fail").json()
    (entry,) = api["checks"]
    assert LOG_LINE in entry["history"][0]["logs"]  # exposeLogs: true in these tests


def test_a_good_check_keeps_recording_ok_runs(kh: E2E, checks: dict[str, dict[str, Any]]) -> None:
    second = newest_run(kh, "shell-ok", seen=frozenset({checks["shell-ok"]["uuid"]}), timeout=120)
    assert second["OK"] is True
    state = poll(lambda: kh.khstate("shell-ok"), 10, "the khstate")
    assert state["consecutiveFailures"] == 0 and state["successCount"] >= 2
