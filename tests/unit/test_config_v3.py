"""Kuberhealthy v3's environment variables: each means one of our keys and wins over the file; a bad
value is an error naming the variable; v3's log levels and report base URL are translated."""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kuberhealthy.base import config, configenv
from kuberhealthy.base.config import Config, from_mapping, load
from kuberhealthy.base.errors import ConfigError

ENV = {"POD_NAME": "kh-0", "POD_NAMESPACE": "health"}
README = Path(__file__).resolve().parents[2] / "README.md"
SERVICE = "http://kuberhealthy.health.svc.cluster.local"


def env(**more: str) -> dict[str, str]:
    return {**ENV, **more}


def error(raw: dict[str, Any], environ: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        from_mapping(raw, environ)
    return err.value


# --- each variable wins over its key ---------------------------------------------------------------------

Case = tuple[str, dict[str, Any], str, Callable[[Config], object], object]
WINS: list[Case] = [
    ("KH_LISTEN_ADDRESS", {"listenAddress": ":8080"}, "127.0.0.1:9000",
     lambda c: (c.listen_host, c.listen_port), ("127.0.0.1", 9000)),
    ("KH_LISTEN_ADDRESS_TLS", {"listenAddressTLS": ":8443"}, ":9443", lambda c: c.listen_tls_port, 9443),
    ("KH_LOG_LEVEL", {"logLevel": "info"}, "debug", lambda c: c.log_level, "debug"),
    ("KH_TARGET_NAMESPACE", {"targetNamespace": "team-a"}, "team-b", lambda c: c.target_namespace, "team-b"),
    ("KH_DEFAULT_RUN_INTERVAL", {"healthCheckDefaults": {"runInterval": "5m"}}, "2m",
     lambda c: c.healthcheck_run_interval, 120),
    ("KH_DEFAULT_CHECK_TIMEOUT", {"healthCheckDefaults": {"timeout": "1m"}}, "45s",
     lambda c: c.healthcheck_timeout, 45),
    ("KH_MAX_JOB_AGE", {"maxKHJobAge": "1h"}, "2h", lambda c: c.max_khjob_age, 7200),
    ("KH_MAX_CHECK_POD_AGE", {"maxCheckPodAge": "1h"}, "36h", lambda c: c.max_check_pod_age, 36 * 3600),
    ("KH_MAX_COMPLETED_POD_COUNT", {"maxCompletedPodCount": 4}, "1", lambda c: c.max_completed_pod_count, 1),
    ("KH_MAX_ERROR_POD_COUNT", {"maxErrorPodCount": 4}, "0", lambda c: c.max_error_pod_count, 0),
    ("KH_LEADER_ELECTION_NAME", {"leaderElection": {"leaseName": "kh"}}, "kh-v3",
     lambda c: c.leader_election.lease_name, "kh-v3"),
    ("KH_LEADER_ELECTION_LEASE_DURATION", {"leaderElection": {"leaseDuration": "20s"}}, "30s",
     lambda c: c.leader_election.lease_duration, 30),
    ("KH_LEADER_ELECTION_RENEW_DEADLINE", {"leaderElection": {"renewDeadline": "5s"}}, "12s",
     lambda c: c.leader_election.renew_deadline, 12),
    ("KH_LEADER_ELECTION_RETRY_PERIOD", {"leaderElection": {"retryPeriod": "2s"}}, "1s",
     lambda c: c.leader_election.retry_period, 1),
    ("KH_PROM_SUPPRESS_ERROR_LABEL", {"promMetricsConfig": {"suppressErrorLabel": False}}, "true",
     lambda c: c.prom_metrics.suppress_error_label, True),
    ("KH_PROM_ERROR_LABEL_MAX_LENGTH", {"promMetricsConfig": {"errorLabelMaxLength": 10}}, "200",
     lambda c: c.prom_metrics.error_label_max_length, 200),
    ("KH_PROM_LABEL_ALLOWLIST", {"promMetricsConfig": {"labelAllowlist": ["severity"]}}, "category, team",
     lambda c: c.prom_metrics.label_allowlist, ("category", "team")),
    ("KH_PROM_LABEL_DENYLIST", {"promMetricsConfig": {"labelDenylist": []}}, "severity",
     lambda c: c.prom_metrics.label_denylist, ("severity",)),
    ("KH_PROM_LABEL_VALUE_MAX_LENGTH", {"promMetricsConfig": {"labelValueMaxLength": 256}}, "0",
     lambda c: c.prom_metrics.label_value_max_length, 0),
    ("KH_TLS_CERT_FILE", {"tlsCertFile": "/file.crt", "tlsKeyFile": "/file.key"}, "/env.crt",
     lambda c: (c.tls_cert_file, c.tls_key_file), ("/env.crt", "/file.key")),
    ("KH_TLS_KEY_FILE", {"tlsCertFile": "/file.crt", "tlsKeyFile": "/file.key"}, "/env.key",
     lambda c: (c.tls_cert_file, c.tls_key_file), ("/file.crt", "/env.key")),
    ("KH_INFLUX_PASSWORD", {"influxPassword": "file"}, "env", lambda c: c.influx_password, "env"),
    ("CHECK_REAPER_RUN_INTERVAL", {"checkReaperRunInterval": "1m"}, "5s", lambda c: c.check_reaper_run_interval, 5),
]


@pytest.mark.parametrize(("var", "raw", "value", "read", "want"), WINS, ids=[case[0] for case in WINS])
def test_each_variable_wins_over_the_key_it_means(var: str, raw: dict[str, Any], value: str,
                                                  read: Callable[[Config], object], want: object) -> None:
    assert read(from_mapping(raw, ENV)) != want  # the file's value holds without the variable
    assert read(from_mapping(raw, env(**{var: value}))) == want
    if not var.startswith("KH_TLS_"):  # (one TLS file alone is an error: see below)
        assert read(from_mapping({}, env(**{var: value}))) == want  # and with no key in the file at all


def test_the_table_of_variables_names_every_key_it_maps_to() -> None:
    assert {case[0] for case in WINS} == set(configenv.ENV_KEYS)
    assert set(configenv.ENV_KEYS.values()) <= {f"{section}.{key}" for section in config._KNOWN_KEYS
                                             for key in ("runInterval", "timeout", "leaseName", "leaseDuration",
                                                         "renewDeadline", "retryPeriod", "suppressErrorLabel",
                                                         "errorLabelMaxLength", "labelAllowlist", "labelDenylist",
                                                         "labelValueMaxLength")} | config._KNOWN_KEYS


def test_the_environments_names_are_still_importable_from_config_where_they_were_first() -> None:
    names = ("ENV_KEYS", "REPORT_BASE_ENV", "V2_REPORT_URL_ENV", "ELECTION_ENABLED_ENV", "ELECTION_NAMESPACE_ENV",
             "UNSUPPORTED_ENV", "V2_REPORT_PATH", "V3_REPORT_PATH", "GO_BOOLS")
    assert {name: getattr(config, name) is getattr(configenv, name) for name in names} == dict.fromkeys(names, True)
    assert set(names) <= set(config.__all__)  # (mypy --strict sees only what __all__ names)


@pytest.mark.parametrize("var", sorted(configenv.ENV_KEYS))
def test_a_variable_set_to_nothing_counts_as_unset_as_in_v3(var: str) -> None:
    assert from_mapping({}, env(**{var: ""})) == from_mapping({}, ENV)


def test_the_variables_are_read_from_the_process_environment_when_a_file_is_loaded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "kh.yaml"
    f.write_text("logLevel: info\ntargetNamespace: from-file\n")
    monkeypatch.setenv("KH_LOG_LEVEL", "trace")
    monkeypatch.setenv("KH_TARGET_NAMESPACE", "from-env")
    c = load(str(f))
    assert (c.log_level, c.target_namespace) == ("debug", "from-env")


# --- log levels ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("given", "level"), [
    ("trace", "debug"), ("debug", "debug"), ("info", "info"), ("warn", "warning"), ("warning", "warning"),
    ("error", "error"), ("fatal", "error"), ("panic", "error"), ("WARN", "warning"), ("Trace", "debug"),
])
def test_v3s_log_levels_become_the_nearest_of_ours_from_the_variable_and_the_file(given: str, level: str) -> None:
    assert from_mapping({}, env(KH_LOG_LEVEL=given)).log_level == level
    assert from_mapping({"logLevel": given}, ENV).log_level == level


# --- the report URLs ----------------------------------------------------------------------------------------

def test_without_any_setting_both_report_urls_are_the_services() -> None:
    c = from_mapping({}, ENV)
    assert (c.external_check_reporting_url, c.v3_reporting_url) == (
        f"{SERVICE}/externalCheckStatus", f"{SERVICE}/check")


@pytest.mark.parametrize("base", ["http://kh.monitoring:8080", "http://kh.monitoring:8080/", " http://kh.monitoring:8080//"])
def test_the_report_base_url_gives_each_kind_its_path_and_wins_over_the_key(base: str) -> None:
    c = from_mapping({"externalCheckReportingURL": "http://file/externalCheckStatus"}, env(KH_CHECK_REPORT_URL=base))
    assert c.external_check_reporting_url == "http://kh.monitoring:8080/externalCheckStatus"
    assert c.v3_reporting_url == "http://kh.monitoring:8080/check"


def test_v2s_whole_url_variable_still_wins_for_khchecks_over_the_base() -> None:
    c = from_mapping({}, env(KH_CHECK_REPORT_URL="https://base", KH_EXTERNAL_REPORTING_URL="http://v2/externalCheckStatus"))
    assert (c.external_check_reporting_url, c.v3_reporting_url) == ("http://v2/externalCheckStatus", "https://base/check")


@pytest.mark.parametrize(("given", "v3"), [
    ("http://kh.example/externalCheckStatus", "http://kh.example/check"),
    ("https://kh.example:8443/externalCheckStatus/", "https://kh.example:8443/check"),
    ("http://kh.example/report", "http://kh.example/check"),
    ("http://kh.example:8080", "http://kh.example:8080/check"),
    ("http://kh.example/externalCheckStatus?via=proxy#x", "http://kh.example/check"),
])
def test_v3s_url_is_made_from_v2s_when_only_v2s_is_given(given: str, v3: str) -> None:
    from_file = from_mapping({"externalCheckReportingURL": given}, ENV)
    assert (from_file.external_check_reporting_url, from_file.v3_reporting_url) == (given, v3)
    assert from_mapping({}, env(KH_EXTERNAL_REPORTING_URL=given)).v3_reporting_url == v3


def test_a_v3_url_whose_path_is_not_exactly_check_is_kept_but_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    c = from_mapping({"externalCheckReportingURL": "http://proxy/kh/externalCheckStatus"}, ENV)
    assert c.v3_reporting_url == "http://proxy/kh/check"
    assert "only the path /check" in caplog.text and "KH_CHECK_REPORT_URL" in caplog.text
    caplog.clear()
    from_mapping({"externalCheckReportingURL": "http://kh/externalCheckStatus"}, ENV)
    assert caplog.text == ""


@pytest.mark.parametrize("base", ["http://kh/check", "http://kh/check/", "http://kh/externalCheckStatus",
                                  "kh.monitoring", "ftp://kh", "http://kh?x=1", "http://kh:99999", "/"])
def test_a_report_base_url_that_is_no_base_url_is_an_error_naming_the_variable(base: str) -> None:
    err = error({}, env(KH_CHECK_REPORT_URL=base))
    assert err.key == "KH_CHECK_REPORT_URL" and "KH_CHECK_REPORT_URL" in str(err)


def test_a_bad_v2_url_from_the_environment_is_an_error_naming_the_variable() -> None:
    assert error({}, env(KH_EXTERNAL_REPORTING_URL="kh/externalCheckStatus")).key == "KH_EXTERNAL_REPORTING_URL"


# --- leader election ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "forced"), [("false", True), ("0", True), ("F", True), ("FALSE", True),
                                               ("true", False), ("1", False), ("T", False), ("True", False)])
def test_leader_election_disabled_means_this_replica_always_leads_and_enabled_means_it_elects(
        value: str, forced: bool) -> None:
    assert from_mapping({}, env(KH_LEADER_ELECTION_ENABLED=value)).enable_force_master is forced
    assert from_mapping({"enableForceMaster": not forced},  # the variable wins over the key, either way
                        env(KH_LEADER_ELECTION_ENABLED=value)).enable_force_master is forced


def test_a_lease_namespace_other_than_the_pods_is_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    assert from_mapping({}, env(KH_LEADER_ELECTION_NAMESPACE="elsewhere")) == from_mapping({}, ENV)
    assert "KH_LEADER_ELECTION_NAMESPACE" in caplog.text and "health" in caplog.text
    caplog.clear()
    from_mapping({}, env(KH_LEADER_ELECTION_NAMESPACE="health"))
    assert caplog.text == ""


def test_a_lease_timing_that_contradicts_another_names_both_settings() -> None:
    err = error({"leaderElection": {"leaseDuration": "15s"}}, env(KH_LEADER_ELECTION_RENEW_DEADLINE="20s"))
    assert err.key == "leaderElection.leaseDuration" and "KH_LEADER_ELECTION_RENEW_DEADLINE" in str(err)
    err = error({}, env(KH_LEADER_ELECTION_LEASE_DURATION="5s"))
    assert err.key == "KH_LEADER_ELECTION_LEASE_DURATION" and "leaderElection.renewDeadline" in str(err)


# --- settings v3 has and we do not ---------------------------------------------------------------------------

@pytest.mark.parametrize("var", ["KH_ERROR_POD_RETENTION_TIME", "KH_TERMINATION_GRACE_PERIOD"])
def test_a_v3_setting_without_an_equivalent_is_ignored_with_a_warning(var: str,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    assert from_mapping({}, env(**{var: "5m"})) == from_mapping({}, ENV)
    assert var in caplog.text


# --- bad values ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("var", "value"), [
    ("KH_LISTEN_ADDRESS", "8080"), ("KH_LISTEN_ADDRESS_TLS", "[::1]"), ("KH_LOG_LEVEL", "loud"),
    ("KH_DEFAULT_RUN_INTERVAL", "10"), ("KH_DEFAULT_RUN_INTERVAL", "0s"), ("KH_DEFAULT_CHECK_TIMEOUT", "soon"),
    ("KH_MAX_JOB_AGE", "-1h"), ("KH_MAX_CHECK_POD_AGE", "72"), ("KH_MAX_COMPLETED_POD_COUNT", "-1"),
    ("KH_MAX_ERROR_POD_COUNT", "two"), ("KH_LEADER_ELECTION_LEASE_DURATION", "1x"),
    ("KH_LEADER_ELECTION_RENEW_DEADLINE", "0s"), ("KH_LEADER_ELECTION_RETRY_PERIOD", "often"),
    ("KH_LEADER_ELECTION_ENABLED", "sometimes"), ("KH_PROM_SUPPRESS_ERROR_LABEL", "yes"),
    ("KH_PROM_ERROR_LABEL_MAX_LENGTH", "-3"), ("KH_PROM_LABEL_ALLOWLIST", "severity,kuberhealthy.io/team"),
    ("KH_PROM_LABEL_DENYLIST", "9lives"), ("KH_PROM_LABEL_VALUE_MAX_LENGTH", "long"),
    ("KH_TLS_CERT_FILE", "/tls/tls.crt"), ("KH_TLS_KEY_FILE", "/tls/tls.key"),
    ("CHECK_REAPER_RUN_INTERVAL", "0s"),
])
def test_a_bad_value_from_the_environment_is_an_error_naming_the_variable(var: str, value: str) -> None:
    err = error({}, env(**{var: value}))
    assert err.key == var and var in str(err)


def test_a_certificate_without_its_key_names_both_settings() -> None:
    err = error({}, env(KH_TLS_CERT_FILE="/tls/tls.crt"))
    assert "KH_TLS_CERT_FILE" in str(err) and "tlsKeyFile" in str(err) and "KH_TLS_KEY_FILE" in str(err)
    err = error({"tlsKeyFile": "/tls/tls.key"}, ENV)
    assert err.key == "tlsKeyFile" and "tlsCertFile" in str(err) and "KH_TLS_CERT_FILE" in str(err)


def test_https_may_not_listen_on_the_port_of_http() -> None:
    tls = {"tlsCertFile": "/c", "tlsKeyFile": "/k"}
    assert error(tls, env(KH_LISTEN_ADDRESS_TLS=":8080")).key == "KH_LISTEN_ADDRESS_TLS"
    assert error({**tls, "listenAddress": "127.0.0.1:8443"}, ENV).key == "listenAddressTLS"
    assert from_mapping({**tls, "listenAddress": "127.0.0.1:8443", "listenAddressTLS": "127.0.0.2:8443"},
                        ENV).listen_tls_port == 8443  # two addresses, one port: no clash
    assert from_mapping({"listenAddressTLS": ":8080"}, ENV).listen_tls_port == 8080  # without TLS: unused


# --- label lists ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("given", "want"), [
    ("severity, category,severity,,", ("severity", "category")), (["team", " team "], ("team",)),
    ([], ()), ("", ()),
])
def test_a_label_list_is_a_list_or_a_comma_separated_string_without_blanks_or_repeats(
        given: object, want: tuple[str, ...]) -> None:
    assert from_mapping({"promMetricsConfig": {"labelAllowlist": given}}, ENV).prom_metrics.label_allowlist == want


# --- the README ----------------------------------------------------------------------------------------------

def test_the_readmes_table_of_variables_names_every_variable_the_config_reads() -> None:
    text = README.read_text(encoding="utf-8")
    body = text[text.index("\n## Configure\n"):text.index("\n## Checks\n")]
    rows = [line for line in body.splitlines() if line.startswith("| `") and "|---" not in line]
    named = {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split(" | ")[0])}
    truth = set(configenv.ENV_KEYS) | {configenv.REPORT_BASE_ENV, configenv.V2_REPORT_URL_ENV,
                                       configenv.ELECTION_ENABLED_ENV, configenv.ELECTION_NAMESPACE_ENV,
                                       *configenv.UNSUPPORTED_ENV, "POD_NAME", "POD_NAMESPACE"}
    assert named == truth
