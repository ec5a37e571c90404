"""The /metrics families: v2's names, labels and values, and text that `promtool check metrics` accepts (in
both label styles, with the checks' extra labels: test_metrics_v3.py tests what they say)."""
from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from kuberhealthy.base.config import PromMetrics
from kuberhealthy.web.status.metrics import duration_seconds, error_label, make_registry
from kuberhealthy.web.status.page import StatusSummary, details_of, summarize
from tests.unit.metrics_support import Row, metrics_config, row
from tests.unit.metrics_support import scrape as scrape_all

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def khstate(ns: str, name: str, job: bool = False, **spec: Any) -> Any:
    obj = {"metadata": {"namespace": ns, "name": name, "resourceVersion": "1"},
           "spec": {"Namespace": ns, "AuthoritativePod": "kh-0", **spec}}
    return details_of(obj, job)


def nasty_summary() -> StatusSummary:
    entries = [
        khstate("default", "ok-check", OK=True, Errors=[], RunDuration="1.5s"),
        khstate("default", "bad-check", OK=False, Errors=['said "no"', "line one\nline two", "back\\slash"],
                RunDuration="2m3.25s"),
        khstate("other", "odd-duration", OK=False, Errors=["x"], RunDuration="soon"),
        khstate("other", "never-timed", OK=True, Errors=[]),
        khstate("other", "unicode", OK=False, Errors=["é ☃ \u2028 {}=,"], RunDuration="10ms"),
        khstate("jobs", "job-a", job=True, OK=False, Errors=["a", "b"], RunDuration="1h"),
        khstate("jobs", "job-b", job=True, OK=True, Errors=[], RunDuration="0s"),
    ]
    return summarize(sorted(entries, key=lambda d: d.key))


def scrape(summary: StatusSummary, master: str = "kh-0", config: PromMetrics | None = None) -> str:
    registry = make_registry(lambda: summary, lambda: master, config or PromMetrics())
    return generate_latest(registry).decode("utf-8")


def samples(text: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name] = [(s.labels, s.value) for s in fam.samples]
    return out


def promtool(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True,
                          timeout=60, check=False)


def test_the_v2_families_carry_v2s_labels_and_values() -> None:
    got = samples(scrape(nasty_summary()))
    assert got["kuberhealthy_running"] == [({"current_master": "kh-0"}, 1.0)]
    assert got["kuberhealthy_cluster_state"] == [({}, 0.0)]
    checks = {lab["check"]: (lab, v) for lab, v in got["kuberhealthy_check"]}
    assert checks["default/ok-check"] == (
        {"check": "default/ok-check", "namespace": "default", "status": "1", "error": ""}, 1.0)
    lab, value = checks["default/bad-check"]
    assert value == 0.0 and lab["status"] == "0"
    assert lab["error"] == "said 'no'|line one\nline two|back\\slash"
    durations = {lab["check"]: v for lab, v in got["kuberhealthy_check_duration_seconds"]}
    assert durations == {"default/bad-check": 123.25, "default/ok-check": 1.5, "other/never-timed": 0.0,
                         "other/odd-duration": 0.0, "other/unicode": 0.01}
    jobs = {lab["check"]: (lab, v) for lab, v in got["kuberhealthy_job"]}
    assert jobs["jobs/job-a"] == ({"check": "jobs/job-a", "namespace": "jobs", "status": "0", "error": "a|b"}, 0.0)
    assert {lab["check"]: v for lab, v in got["kuberhealthy_job_duration_seconds"]} == {
        "jobs/job-a": 3600.0, "jobs/job-b": 0.0}


def test_help_texts_are_v2s() -> None:
    text = scrape(nasty_summary())
    for line in ("# HELP kuberhealthy_running Shows if kuberhealthy is running error free",
                 "# HELP kuberhealthy_cluster_state Shows the status of the cluster",
                 "# HELP kuberhealthy_check Shows the status of a Kuberhealthy check",
                 "# HELP kuberhealthy_check_duration_seconds Shows the check run duration of a Kuberhealthy check",
                 "# HELP kuberhealthy_job Shows the status of a Kuberhealthy job",
                 "# HELP kuberhealthy_job_duration_seconds Shows the job run duration of a Kuberhealthy job"):
        assert line in text.splitlines()
    v2 = ("kuberhealthy_running", "kuberhealthy_cluster_state", "kuberhealthy_check",
          "kuberhealthy_check_duration_seconds", "kuberhealthy_job", "kuberhealthy_job_duration_seconds")
    for name in v2:
        assert f"# TYPE {name} gauge" in text.splitlines()
    assert text.count("# TYPE ") == len(v2) + 1  # and v3's run-duration histogram (test_metrics_v3.py)


def test_a_healthy_cluster_reports_state_one() -> None:
    summary = summarize([khstate("a", "x", OK=True, Errors=[])])
    assert samples(scrape(summary))["kuberhealthy_cluster_state"] == [({}, 1.0)]


@pytest.mark.skipif(not shutil.which("promtool") and not __import__("os").path.exists(PROMTOOL),
                    reason="promtool not installed (hack/tools.sh installs it)")
def test_promtool_accepts_a_scrape_with_failures_quotes_and_newlines() -> None:
    for config in (PromMetrics(), PromMetrics(suppress_error_label=True),
                   PromMetrics(error_label_max_length=5)):
        result = promtool(scrape(nasty_summary(), master='kh-"0"\n', config=config))
        assert result.returncode == 0, result.stdout + result.stderr


def labelled_rows() -> list[Row]:
    """The nasty summary's checks and jobs as the JSON API's cache has them, some with severity and category
    labels (one value with quotes, a backslash and a newline, as a hand-edited object could carry), one
    with none, and counters."""
    return [row("ok-check", "default", labels={"kuberhealthy.io/severity": "critical",
                                                "kuberhealthy.io/category": "kube-inf"}, successCount=7,
                lastOK="2024-05-01T11:50:00Z"),
            row("bad-check", "default", labels={"kuberhealthy.io/severity": 'say "x" \\ \n'}, failureCount=3,
                consecutiveFailures=3),
            row("odd-duration", "other", paused={"until": "2024-05-01T13:00:00Z", "reason": ""}),
            row("never-timed", "other", kind="healthcheck", key="other/hc:never-timed",
                labels={"kuberhealthy.io/category": "é ☃"}),
            row("job-a", "jobs", kind="job", labels={"kuberhealthy.io/severity": "page"})]


@pytest.mark.skipif(not shutil.which("promtool") and not __import__("os").path.exists(PROMTOOL),
                    reason="promtool not installed (hack/tools.sh installs it)")
@pytest.mark.parametrize("style", ["v2", "v3"])
def test_promtool_accepts_either_style_with_severity_and_category_labels_and_every_family(style: str) -> None:
    for prom in ({}, {"suppress_error_label": True}, {"label_allowlist": ("team", "severity")},
                 {"label_denylist": ("severity", "category")}, {"label_value_max_length": 3}):
        text = scrape_all(nasty_summary(), labelled_rows(), metrics_config(style, **prom), leader=True)
        assert "kuberhealthy_check_success_total" in text and "kuberhealthy_controller_leader" in text
        result = promtool(text)
        assert result.returncode == 0, f"{prom}: {result.stdout}{result.stderr}"


@pytest.mark.skipif(not shutil.which("promtool") and not __import__("os").path.exists(PROMTOOL),
                    reason="promtool not installed (hack/tools.sh installs it)")
def test_promtool_accepts_an_empty_scrape() -> None:
    result = promtool(scrape(summarize([]), master=""))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_error_label_can_be_suppressed() -> None:
    got = samples(scrape(nasty_summary(), config=PromMetrics(suppress_error_label=True)))
    assert all("error" not in lab for lab, _ in got["kuberhealthy_check"] + got["kuberhealthy_job"])
    assert {"check", "namespace", "status"} == set(got["kuberhealthy_check"][0][0])


def test_the_error_label_is_cut_to_a_byte_length_on_a_character_boundary() -> None:
    cfg = PromMetrics(error_label_max_length=4)
    assert error_label(("ab", "cd"), cfg) == "ab|c"
    assert error_label(("é☃",), PromMetrics(error_label_max_length=4)) == "é"  # é is 2 bytes, ☃ is 3
    assert error_label(('q"q',), PromMetrics()) == "q'q"
    assert error_label(None, cfg) == ""


def test_durations_parse_like_go() -> None:
    assert duration_seconds("") == 0.0
    assert duration_seconds("1m30s") == 90.0
    assert duration_seconds("250ms") == 0.25
    assert duration_seconds("garbage") == 0.0


def test_openmetrics_is_served_to_scrapers_that_ask_for_it() -> None:
    registry = make_registry(nasty_summary, lambda: "kh-0", PromMetrics())
    text = generate_openmetrics(registry).decode("utf-8")  # type: ignore[no-untyped-call]  # unannotated upstream
    assert text.endswith("# EOF\n") and 'kuberhealthy_check{check="default/ok-check"' in text


def test_the_collector_reads_the_summary_at_each_scrape() -> None:
    current = {"s": summarize([khstate("a", "x", OK=True, Errors=[])])}
    registry = make_registry(lambda: current["s"], lambda: "m", PromMetrics())
    assert samples(generate_latest(registry).decode())["kuberhealthy_cluster_state"] == [({}, 1.0)]
    current["s"] = summarize([khstate("a", "x", OK=False, Errors=["e"])])
    assert samples(generate_latest(registry).decode())["kuberhealthy_cluster_state"] == [({}, 0.0)]
