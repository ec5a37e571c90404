"""Kuberhealthy v3's metrics beside v2's: v3's families in the default (v2) label style, v3's label style
(`metricsStyle: v3`: check="<name>" and namespace on every per-check family, ours included), and the
checks' `kuberhealthy.io/severity` and `kuberhealthy.io/category` labels as metric labels in both. Over the
collectors as the daemon wires them; the real caches' side is at the end (entries.Built)."""
from __future__ import annotations

import json
import logging
import re
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest

from kuberhealthy.kube import KHCHECKS, KHJOBS, KHSTATES
from kuberhealthy.web.entries import ViewCache
from kuberhealthy.web.status.metrics import (
    CheckRow,
    CheckStatsCollector,
    Labelling,
    MetricsSettings,
    extra_label_names,
    make_registry,
)
from kuberhealthy.web.status.page import StatusCache
from testbed.fakes import NS, POD_NAME, FakeServices, khcheck, khjob, khstate_of
from tests.unit.metrics_support import (
    NOW,
    Row,
    by_check,
    families,
    khstate,
    metrics_config,
    promtool,
    row,
    scrape,
    summary_of,
)

SEVERE = {"kuberhealthy.io/severity": "critical", "kuberhealthy.io/category": "network"}
PER_CHECK = ("kuberhealthy_check", "kuberhealthy_check_duration_seconds", "kuberhealthy_check_consecutive_failures",
             "kuberhealthy_check_last_success_timestamp_seconds", "kuberhealthy_check_interval_seconds",
             "kuberhealthy_check_runs_total", "kuberhealthy_check_paused", "kuberhealthy_check_success_total",
             "kuberhealthy_check_failure_total", "kuberhealthy_check_seconds_since_success")
V3_FAMILIES = ("kuberhealthy_check_success_total", "kuberhealthy_check_failure_total",
               "kuberhealthy_check_seconds_since_success", "kuberhealthy_controller_leader",
               "kuberhealthy_check_run_duration_seconds_bucket", "kuberhealthy_check_run_duration_seconds_sum",
               "kuberhealthy_check_run_duration_seconds_count")


def cluster() -> tuple[Any, list[Row]]:
    """Two checks in two namespaces (dns labelled, web not) and a job; dns ran OK 10 minutes ago."""
    summary = summary_of(khstate("apps", "dns", OK=True, Errors=[], RunDuration="2s"),
                         khstate("web", "web", OK=False, Errors=["HTTP 503"], RunDuration="45s"),
                         khstate("apps", "once", job=True, OK=True, Errors=[], RunDuration="1s"))
    rows = [row("dns", "apps", labels={**SEVERE, "team": "core"}, successCount=7, failureCount=2,
                lastOK="2024-05-01T11:50:00Z"),
            row("web", "web", consecutiveFailures=4, failureCount=4, interval=300.0,
                paused={"until": "2024-05-01T13:00:00Z", "reason": "maintenance"}),
            row("once", "apps", kind="job", labels={"kuberhealthy.io/severity": "info"})]
    return summary, rows


def test_without_check_labels_the_default_style_keeps_every_v2_family_and_adds_v3s() -> None:
    summary, rows = cluster()
    rows = [Row(r.view, r.key) for r in rows]  # no labels anywhere
    before = families(scrape(summary, [r.view for r in rows], metrics_config()))  # the wiring of old: bare entries
    after = families(scrape(summary, rows, metrics_config(), leader=True))
    assert {k: v for k, v in after.items() if k in before} == before  # names, labels and values unchanged
    assert set(after) - set(before) == {"kuberhealthy_controller_leader"}
    assert set(V3_FAMILIES) <= set(after)
    assert by_check(after["kuberhealthy_check"])["apps/dns"][0] == {
        "check": "apps/dns", "namespace": "apps", "status": "1", "error": ""}


def test_v3s_families_in_the_default_style_carry_v2s_check_label_and_the_persisted_counters() -> None:
    summary, rows = cluster()
    got = families(scrape(summary, rows, metrics_config(), leader=True))
    dns, web = "apps/dns", "web/web"
    assert by_check(got["kuberhealthy_check_success_total"])[dns][1] == 7
    assert by_check(got["kuberhealthy_check_failure_total"])[dns][1] == 2
    assert by_check(got["kuberhealthy_check_failure_total"])[web][1] == 4
    assert by_check(got["kuberhealthy_check_seconds_since_success"])[dns][1] == 600
    assert by_check(got["kuberhealthy_check_seconds_since_success"])[web][1] == -1  # never ran OK
    assert by_check(got["kuberhealthy_check_seconds_since_success"])[web][0]["namespace"] == "web"
    assert got["kuberhealthy_controller_leader"] == [({}, 1.0)]
    assert "apps/once" not in by_check(got["kuberhealthy_check_success_total"])  # jobs: v2's two families only
    standby = families(scrape(summary, rows, metrics_config(), leader=False))
    assert standby["kuberhealthy_controller_leader"] == [({}, 0.0)]
    assert "kuberhealthy_controller_leader" not in families(scrape(summary, rows))  # no source, no family


def test_the_run_duration_histogram_has_v3s_buckets_and_one_observation_per_check() -> None:
    summary, rows = cluster()
    for style in ("v2", "v3"):
        got = families(scrape(summary, rows, metrics_config(style)))
        buckets = {labels["le"]: value for labels, value in got["kuberhealthy_check_run_duration_seconds_bucket"]}
        assert buckets == {"1": 0, "5": 1, "10": 1, "30": 1, "60": 2, "120": 2, "300": 2, "+Inf": 2}
        assert got["kuberhealthy_check_run_duration_seconds_count"] == [({}, 2.0)]  # the job is not a check
        assert got["kuberhealthy_check_run_duration_seconds_sum"] == [({}, 47.0)]


def test_the_v3_style_labels_every_per_check_family_ours_included_with_name_and_namespace() -> None:
    summary, rows = cluster()
    got = families(scrape(summary, rows, metrics_config("v3"), leader=True))
    for family in PER_CHECK:
        checks = by_check(got[family])
        never_ok = family == "kuberhealthy_check_last_success_timestamp_seconds"  # web has never run OK
        assert set(checks) == ({"dns"} if never_ok else {"dns", "web"}), family
        assert all(labels["namespace"] == {"dns": "apps", "web": "web"}[c] for c, (labels, _) in checks.items())
    assert by_check(got["kuberhealthy_check_paused"])["web"][1] == 1
    assert by_check(got["kuberhealthy_check"])["web"][0] == {
        "check": "web", "namespace": "web", "status": "0", "error": "HTTP 503", "severity": "", "category": ""}
    assert by_check(got["kuberhealthy_job"])["once"][0]["namespace"] == "apps"
    assert by_check(got["kuberhealthy_check_success_total"])["dns"][1] == 7
    assert got["kuberhealthy_running"] == [({"current_master": "kh-0"}, 1.0)]  # ours, no check label: as in v2


def test_severity_and_category_become_labels_of_every_per_check_family_in_both_styles() -> None:
    summary, rows = cluster()
    for style, dns in (("v2", "apps/dns"), ("v3", "dns")):
        got = families(scrape(summary, rows, metrics_config(style), leader=True))
        for family in PER_CHECK:
            labels = by_check(got[family])[dns][0]
            assert (labels["severity"], labels["category"]) == ("critical", "network"), (style, family)
            assert "team" not in labels  # not allow-listed
        job = by_check(got["kuberhealthy_job"])["apps/once" if style == "v2" else "once"][0]
        assert (job["severity"], job["category"]) == ("info", "")
        for family in ("kuberhealthy_running", "kuberhealthy_cluster_state", "kuberhealthy_controller_leader",
                       "kuberhealthy_check_run_duration_seconds_bucket"):
            assert all("severity" not in labels for labels, _ in got[family]), family


def test_a_family_carries_an_extra_label_on_every_series_or_on_none() -> None:
    # Prometheus stores an empty label as no label: the unlabelled check's series are the same ones either way.
    summary, rows = cluster()
    text = scrape(summary, rows, metrics_config())
    assert 'kuberhealthy_check_duration_seconds{category="",check="web/web",namespace="web",severity=""} 45.0' in text
    names: dict[str, set[tuple[str, ...]]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, rest = line.partition("{")
            names.setdefault(name, set()).add(tuple(re.findall(r'(\w+)="', rest)))
    assert all(len(sets) == 1 for sets in names.values()), names
    plain = scrape(summary, [Row(r.view, r.key) for r in rows], metrics_config())
    assert "severity" not in plain and "category" not in plain  # no check labelled: v2's exact label sets


def test_the_allow_list_picks_kuberhealthy_io_labels_the_deny_list_removes_and_values_are_cut() -> None:
    summary, rows = cluster()
    got = families(scrape(summary, rows, metrics_config(label_allowlist=("team", "severity"),
                                                        label_denylist=("severity",))))
    labels = by_check(got["kuberhealthy_check"])["apps/dns"][0]
    assert "severity" not in labels and "category" not in labels
    assert "team" not in labels  # "team" alone is no kuberhealthy.io/ label: nothing carries it
    rows[0].labels["kuberhealthy.io/team"] = "core"
    got = families(scrape(summary, rows, metrics_config(label_allowlist=("team",), label_value_max_length=3)))
    assert by_check(got["kuberhealthy_check_paused"])["apps/dns"][0] == {"check": "apps/dns", "namespace": "apps",
                                                                         "team": "cor"}
    rows[0].labels["kuberhealthy.io/team"] = "é☃xy"  # cut in characters, not bytes
    got = families(scrape(summary, rows, metrics_config(label_allowlist=("team",), label_value_max_length=3)))
    assert by_check(got["kuberhealthy_check"])["apps/dns"][0]["team"] == "é☃x"
    got = families(scrape(summary, rows, metrics_config(label_allowlist=("team",), label_value_max_length=0)))
    assert by_check(got["kuberhealthy_check"])["apps/dns"][0]["team"] == "é☃xy"  # 0: no cut
    empty = families(scrape(summary, rows, metrics_config(label_allowlist=())))  # v3's rule: its two labels
    assert by_check(empty["kuberhealthy_check"])["apps/dns"][0]["severity"] == "critical"


def test_names_that_cannot_be_labels_and_run_uuid_are_dropped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kuberhealthy.web.status.metrics"):
        names = extra_label_names(("owner-team", "__meta", "9lives", "status", "check", "run_uuid", "severity",
                                   "severity", "tier_1"), ())
    assert names == ("severity", "tier_1")
    dropped = " ".join(r.getMessage() for r in caplog.records)
    for name in ("owner-team", "__meta", "9lives", "status", "check", "run_uuid"):
        assert repr(name) in dropped
    summary, rows = cluster()
    rows[0].labels["kuberhealthy.io/run_uuid"] = "6b1c7e0e-live"
    text = scrape(summary, rows, metrics_config("v3", label_allowlist=("run_uuid", "severity")))
    assert "run_uuid" not in text and "6b1c7e0e" not in text


def test_a_healthcheck_counts_as_a_check_under_the_key_it_is_shown_under() -> None:
    # A HealthCheck named like a khcheck of its namespace is shown as <ns>/hc:<name> (the core decides the key).
    summary = summary_of(khstate("apps", "dns", OK=True, Errors=[]))
    rows = [row("dns", "apps"), row("dns", "apps", kind="healthcheck", key="apps/hc:dns", labels=SEVERE,
                                   successCount=3)]
    v2 = families(scrape(summary, rows, metrics_config()))
    assert set(by_check(v2["kuberhealthy_check_success_total"])) == {"apps/dns", "apps/hc:dns"}
    assert by_check(v2["kuberhealthy_check_success_total"])["apps/hc:dns"][0]["severity"] == "critical"
    v3 = families(scrape(summary, rows, metrics_config("v3")))
    assert by_check(v3["kuberhealthy_check_success_total"])["hc:dns"] == (
        {"check": "hc:dns", "namespace": "apps", "severity": "critical", "category": "network"}, 3.0)
    assert by_check(v3["kuberhealthy_check"])["dns"][0]["severity"] == ""  # the khcheck is not labelled


def test_an_entry_that_does_not_say_its_key_is_keyed_by_namespace_and_name() -> None:
    got = families(scrape(summary_of(), [Row(row("dns", "apps").view, "", SEVERE)], metrics_config()))
    assert by_check(got["kuberhealthy_check_paused"])["apps/dns"][0]["severity"] == "critical"


def test_two_entries_under_one_key_give_one_series() -> None:
    rows = [row("dns", "apps", successCount=1), row("dns", "apps", kind="healthcheck", successCount=9)]
    got = families(scrape(summary_of(), rows, metrics_config()))
    assert got["kuberhealthy_check_success_total"] == [({"check": "apps/dns", "namespace": "apps"}, 1.0)]


def test_the_style_follows_the_config_at_each_scrape() -> None:
    summary, rows = cluster()
    current = {"config": metrics_config()}
    registry = make_registry(lambda: summary, lambda: "kh-0", lambda: current["config"], rows=lambda: rows,
                             extra=[CheckStatsCollector(lambda: rows, lambda: current["config"], wall=lambda: NOW)])
    assert "apps/dns" in generate_latest(registry).decode()
    current["config"] = metrics_config("v3")
    text = generate_latest(registry).decode()
    assert "apps/dns" not in text and 'check="dns"' in text
    assert MetricsSettings.of(metrics_config("v4")).style == "v2"  # the config refuses it; metrics fall back


# --- the JSON API's cache gives /metrics each check's key and kuberhealthy.io/ labels ---------------------------

def test_the_entries_keep_the_check_s_kuberhealthy_io_labels_beside_the_entry_not_in_its_json(
        fake_services: FakeServices) -> None:
    obj = khcheck("dns")
    obj["metadata"]["labels"] = {**SEVERE, "app": "dns", "kuberhealthy.io/team": "core"}
    fake_services.api.put(KHCHECKS, obj)
    fake_services.api.put(KHJOBS, khjob("once"))
    views = ViewCache(fake_services.khchecks, fake_services.khjobs, fake_services.khstates, fake_services.pods,
                      expose_logs=lambda: False).attach()
    built = {b.view["kind"]: b for b in views.entries()}
    check: CheckRow = built["check"]  # what /metrics reads
    assert check.key == f"{NS}/dns" and dict(check.labels) == {**SEVERE, "kuberhealthy.io/team": "core"}
    assert built["job"].labels == {}
    assert "labels" not in json.loads(built["check"].body) and "key" not in json.loads(built["check"].body)


def test_the_daemon_s_caches_wired_as_proposed_label_kuberhealthy_check_with_severity(
        fake_services: FakeServices) -> None:
    obj = khcheck("dns")
    obj["metadata"]["labels"] = SEVERE
    fake_services.api.put(KHCHECKS, obj)
    fake_services.api.put(KHSTATES, khstate_of("dns", OK=False, Errors=["NXDOMAIN"], RunDuration="1s",
                                               AuthoritativePod=POD_NAME, successCount=5, failureCount=1))
    fake_services.api.put(KHCHECKS, khcheck("web"))
    views = ViewCache(fake_services.khchecks, fake_services.khjobs, fake_services.khstates, fake_services.pods,
                      expose_logs=lambda: False).attach()
    status = StatusCache(fake_services.khstates, fake_services.khjobs, fake_services.khchecks).attach()
    for style, dns in (("v2", f"{NS}/dns"), ("v3", "dns")):
        config = metrics_config(style)
        registry = make_registry(status.summary, lambda: POD_NAME, config, rows=views.entries, leader=lambda: True,
                                 extra=[CheckStatsCollector(views.entries, config, wall=lambda: NOW)])
        text = generate_latest(registry).decode()
        got = families(text)
        assert by_check(got["kuberhealthy_check"])[dns][0]["severity"] == "critical"
        assert by_check(got["kuberhealthy_check_success_total"])[dns][1] == 5
        assert by_check(got["kuberhealthy_check_paused"])[dns][0]["category"] == "network"
        result = promtool(text)
        assert result.returncode == 0, result.stdout + result.stderr


def test_labelling_without_extra_labels_gives_no_values() -> None:
    lab = Labelling.of(MetricsSettings(extra=()), [row("a", labels=SEVERE)])
    assert lab.names == () and lab.extra("ns/a") == [] and lab.check("ns/a", "ns") == ["ns/a", "ns"]
