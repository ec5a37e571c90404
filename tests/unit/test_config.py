"""Config loading and validation: defaults, env overrides, errors that name the key."""
from pathlib import Path

import pytest

from kuberhealthy.base.config import from_mapping, load, parse_listen_address
from kuberhealthy.base.errors import ConfigError

ENV = {"POD_NAME": "kh-0", "POD_NAMESPACE": "health"}


def test_an_empty_config_gives_the_documented_defaults() -> None:
    c = from_mapping({}, ENV)
    assert (c.listen_host, c.listen_port) == ("", 8080)
    assert c.enable_force_master is False and c.log_level == "info"
    assert c.max_khjob_age == 900 and c.max_check_pod_age == 72 * 3600
    assert c.max_completed_pod_count == 4 and c.max_error_pod_count == 4
    assert c.leader_election.lease_name == "kuberhealthy"
    assert (c.leader_election.lease_duration, c.leader_election.renew_deadline,
            c.leader_election.retry_period) == (15, 10, 2)
    assert c.check_change_debounce == 10 and c.state_reaper_interval == 60 and c.check_reaper_run_interval == 30
    assert c.external_check_reporting_url == "http://kuberhealthy.health.svc.cluster.local/externalCheckStatus"
    assert c.pod_name == "kh-0" and c.pod_namespace == "health"


def test_every_key_is_read_from_its_camel_case_name() -> None:
    c = from_mapping({
        "listenAddress": "127.0.0.1:9000", "enableForceMaster": True, "logLevel": "debug",
        "enableInflux": True, "influxURL": "http://127.0.0.1:8086", "influxUsername": "u", "influxPassword": "p",
        "influxDB": "kh", "externalCheckReportingURL": "http://kh.example/externalCheckStatus",
        "maxKHJobAge": "1h", "maxCheckPodAge": "2h", "maxCompletedPodCount": 1, "maxErrorPodCount": 2,
        "targetNamespace": "team-a",
        "leaderElection": {"leaseName": "kh-lease", "leaseDuration": "30s", "renewDeadline": "20s",
                           "retryPeriod": "1s"},
        "checkChangeDebounce": "0s", "stateReaperInterval": "5m", "checkReaperRunInterval": "45s",
        "promMetricsConfig": {"suppressErrorLabel": True, "errorLabelMaxLength": 50},
    }, ENV)
    assert (c.listen_host, c.listen_port, c.enable_force_master, c.log_level) == ("127.0.0.1", 9000, True, "debug")
    assert (c.enable_influx, c.influx_url, c.influx_username, c.influx_password, c.influx_db) == (
        True, "http://127.0.0.1:8086", "u", "p", "kh")
    assert c.external_check_reporting_url == "http://kh.example/externalCheckStatus"
    assert (c.max_khjob_age, c.max_check_pod_age, c.max_completed_pod_count, c.max_error_pod_count) == (
        3600, 7200, 1, 2)
    assert c.target_namespace == "team-a" and c.leader_election.lease_name == "kh-lease"
    assert c.check_change_debounce == 0 and c.state_reaper_interval == 300 and c.check_reaper_run_interval == 45
    assert c.prom_metrics.suppress_error_label and c.prom_metrics.error_label_max_length == 50


def test_the_reporting_url_env_var_wins_over_the_config_key() -> None:
    c = from_mapping({"externalCheckReportingURL": "http://a/x"}, {**ENV, "KH_EXTERNAL_REPORTING_URL": "http://b/y"})
    assert c.external_check_reporting_url == "http://b/y"


def test_the_reaper_interval_env_var_is_accepted() -> None:
    assert from_mapping({}, {**ENV, "CHECK_REAPER_RUN_INTERVAL": "5s"}).check_reaper_run_interval == 5


def test_the_influx_password_env_var_wins_over_the_config_key_and_is_never_shown(
        caplog: pytest.LogCaptureFixture) -> None:
    raw = {"enableInflux": True, "influxURL": "http://127.0.0.1:8086", "influxDB": "kh", "influxUsername": "kh",
           "influxPassword": "from-the-file", "surpriseKey": 1}
    with caplog.at_level("DEBUG"):
        c = from_mapping(raw, {**ENV, "KH_INFLUX_PASSWORD": "s3cret-from-env"})
    assert c.influx_password == "s3cret-from-env"
    assert "s3cret-from-env" not in repr(c) and "s3cret-from-env" not in caplog.text
    assert from_mapping(raw, ENV).influx_password == "from-the-file"
    assert from_mapping(raw, {**ENV, "KH_INFLUX_PASSWORD": ""}).influx_password == "from-the-file"  # empty: unset
    assert from_mapping({}, {**ENV, "KH_INFLUX_PASSWORD": "p"}).influx_password == "p"  # no key in the file at all


@pytest.mark.parametrize(("raw", "key"), [
    ({"maxKHJobAge": "soon"}, "maxKHJobAge"),
    ({"listenAddress": "8080"}, "listenAddress"),
    ({"listenAddress": ":99999"}, "listenAddress"),
    ({"logLevel": "loud"}, "logLevel"),
    ({"enableForceMaster": "yes please"}, "enableForceMaster"),
    ({"maxCompletedPodCount": -1}, "maxCompletedPodCount"),
    ({"leaderElection": {"leaseDuration": "5s"}}, "leaderElection.leaseDuration"),
    ({"leaderElection": {"retryPeriod": "x"}}, "leaderElection.retryPeriod"),
    ({"promMetricsConfig": {"errorLabelMaxLength": "long"}}, "promMetricsConfig.errorLabelMaxLength"),
    ({"enableInflux": True, "influxURL": "nowhere", "influxDB": "kh"}, "influxURL"),
    ({"enableInflux": True, "influxURL": "http://influx:99999", "influxDB": "kh"}, "influxURL"),
    ({"enableInflux": True, "influxURL": "http://influx:8086"}, "influxDB"),
    ({"checkReaperRunInterval": "0s"}, "checkReaperRunInterval"),
    ({"maxKHJobAge": 10}, "maxKHJobAge"),
    ({"maxCheckPodAge": "1.5"}, "maxCheckPodAge"),
])
def test_a_bad_value_is_an_error_that_names_its_key(raw: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        from_mapping(raw, ENV)
    assert err.value.key == key and key in str(err.value)


def test_an_unknown_key_is_only_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    from_mapping({"someFutureKey": 1}, ENV)
    assert "someFutureKey" in caplog.text


def test_unparsable_yaml_is_an_error_with_its_position(tmp_path: Path) -> None:
    f = tmp_path / "kh.yaml"
    f.write_text("listenAddress: [unclosed\n")
    with pytest.raises(ConfigError) as err:
        load(str(f), ENV)
    assert "not valid YAML" in str(err.value) and "line" in str(err.value)


def test_a_missing_explicit_file_is_an_error_but_a_missing_default_is_not(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load(str(tmp_path / "nope.yaml"), ENV)


@pytest.mark.parametrize(("text", "want"), [(":8080", ("", 8080)), ("0.0.0.0:80", ("0.0.0.0", 80)),
                                            ("[::1]:8080", ("::1", 8080))])
def test_listen_addresses_parse_like_go(text: str, want: tuple[str, int]) -> None:
    assert parse_listen_address(text) == want
