"""Config loading and validation: defaults, env overrides, errors that name the key."""
import ast
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from kuberhealthy.base import config, configenv
from kuberhealthy.base.config import Config, from_mapping, load, parse_listen_address
from kuberhealthy.base.errors import ConfigError
from kuberhealthy.records import history

ENV = {"POD_NAME": "kh-0", "POD_NAMESPACE": "health"}
CONFIG_SOURCES = (Path(config.__file__), Path(configenv.__file__))  # the file's keys; the environment's part
# From the environment; "" means "work it out".
RESOLVED_AT_LOAD = {"pod_name", "external_check_reporting_url", "v3_reporting_url"}


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
    assert c.metrics_style == "v2" and (c.healthcheck_run_interval, c.healthcheck_timeout) == (600, 30)
    assert c.prom_metrics.label_allowlist == ("severity", "category") and c.prom_metrics.label_denylist == ()
    assert c.prom_metrics.label_value_max_length == 256
    assert c.v3_reporting_url == "http://kuberhealthy.health.svc.cluster.local/check"
    assert (c.tls_cert_file, c.tls_key_file, c.listen_tls_host, c.listen_tls_port) == ("", "", "", 8443)
    assert (c.status_page.enabled, c.status_page.show_errors) == (False, False)


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
        "promMetricsConfig": {"suppressErrorLabel": True, "errorLabelMaxLength": 50,
                              "labelAllowlist": ["severity"], "labelDenylist": ["category"], "labelValueMaxLength": 9},
        "metricsStyle": "v3", "healthCheckDefaults": {"runInterval": "5m", "timeout": "1m"},
        "tlsCertFile": "/tls/tls.crt", "tlsKeyFile": "/tls/tls.key", "listenAddressTLS": "127.0.0.1:9443",
        "sidecarContainers": ["vault-agent", " log-shipper", "vault-agent"],
        "statusPage": {"enabled": True, "showErrors": "true"},
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
    assert (c.prom_metrics.label_allowlist, c.prom_metrics.label_denylist, c.prom_metrics.label_value_max_length) == (
        ("severity",), ("category",), 9)
    assert c.metrics_style == "v3" and (c.healthcheck_run_interval, c.healthcheck_timeout) == (300, 60)
    assert (c.tls_cert_file, c.tls_key_file, c.listen_tls_host, c.listen_tls_port) == (
        "/tls/tls.crt", "/tls/tls.key", "127.0.0.1", 9443)
    assert c.sidecar_containers == ("vault-agent", "log-shipper")
    assert (c.status_page.enabled, c.status_page.show_errors) == (True, True)
    assert from_mapping({"sidecarContainers": "a, b"}, ENV).sidecar_containers == ("a", "b")


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
    ({"metricsStyle": "v4"}, "metricsStyle"),
    ({"healthCheckDefaults": "10m"}, "healthCheckDefaults"),
    ({"healthCheckDefaults": {"runInterval": 600}}, "healthCheckDefaults.runInterval"),
    ({"healthCheckDefaults": {"timeout": "0s"}}, "healthCheckDefaults.timeout"),
    ({"promMetricsConfig": {"labelAllowlist": [1]}}, "promMetricsConfig.labelAllowlist"),
    ({"promMetricsConfig": {"labelDenylist": ["kuberhealthy.io/severity"]}}, "promMetricsConfig.labelDenylist"),
    ({"promMetricsConfig": {"labelValueMaxLength": -1}}, "promMetricsConfig.labelValueMaxLength"),
    ({"listenAddressTLS": "8443"}, "listenAddressTLS"),
    ({"tlsCertFile": "/tls/tls.crt"}, "tlsCertFile"),
    ({"tlsKeyFile": "/tls/tls.key"}, "tlsKeyFile"),
    ({"tlsCertFile": "/c", "tlsKeyFile": "/k", "listenAddressTLS": ":8080"}, "listenAddressTLS"),
    ({"externalCheckReportingURL": "kuberhealthy/externalCheckStatus"}, "externalCheckReportingURL"),
    ({"sidecarContainers": ["Istio_Proxy"]}, "sidecarContainers"),
    ({"sidecarContainers": {"istio-proxy": True}}, "sidecarContainers"),
    ({"statusPage": True}, "statusPage"),
    ({"statusPage": {"enabled": "on"}}, "statusPage.enabled"),
    ({"statusPage": {"showErrors": 1}}, "statusPage.showErrors"),
])
def test_a_bad_value_is_an_error_that_names_its_key(raw: dict[str, Any], key: str) -> None:
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


# --- each default written once: the dataclass field's default ------------------------------------------------

def _declared_defaults(cls: type, prefix: str = "") -> dict[str, Any]:
    """Every field's default as the dataclass declares it, nested dataclasses flattened (`leader_election.x`)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        value = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[operator]
        if dataclasses.is_dataclass(value):
            out |= _declared_defaults(type(value), f"{prefix}{f.name}.")
        else:
            out[prefix + f.name] = value
    return out


def _flattened(obj: object, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        out |= _flattened(value, f"{prefix}{f.name}.") if dataclasses.is_dataclass(value) else {prefix + f.name: value}
    return out


def test_an_empty_config_gives_every_field_exactly_the_default_its_dataclass_declares() -> None:
    declared = _declared_defaults(Config)
    parsed = _flattened(from_mapping({}, {}))
    assert len(declared) > 30 and set(parsed) == set(declared)  # the walk sees every field, nested ones too
    differing = {k: (parsed[k], declared[k]) for k in declared
                 if k not in RESOLVED_AT_LOAD and parsed[k] != declared[k]}
    assert differing == {}


def _config_tree() -> ast.Module:
    """config.py and configenv.py as one module: the top-level statements of both."""
    trees = [ast.parse(p.read_text(encoding="utf-8")) for p in CONFIG_SOURCES]
    return ast.Module(body=[node for tree in trees for node in tree.body], type_ignores=[])


def _parser_defaults(tree: ast.Module) -> list[ast.expr]:
    """The `default` argument of every call to one of config.py's parsers (a module function with a
    parameter named `default`: _bool, _str, _int, _duration, _choice, _rate, _positive_int, _origins)."""
    positions = {f.name: [a.arg for a in f.args.args].index("default") for f in tree.body
                 if isinstance(f, ast.FunctionDef) and "default" in [a.arg for a in f.args.args]}
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in positions:
            at = positions[node.func.id]
            found += [kw.value for kw in node.keywords if kw.arg == "default"] + node.args[at:at + 1]
    return found


def test_every_parser_default_is_read_from_the_dataclass_and_never_written_as_a_literal() -> None:
    tree = _config_tree()
    # _DEFAULT, local names that hold a part of it (le_default = _DEFAULT.leader_election), and a parser's
    # own `default` handed on to another (_positive_int calls _int).
    aliases = {"_DEFAULT", "default"} | {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign)
                              for t in ast.walk(n.targets[0]) if isinstance(t, ast.Name)
                              and any(isinstance(v, ast.Name) and v.id == "_DEFAULT" for v in ast.walk(n.value))}
    defaults = _parser_defaults(tree)
    assert len(defaults) > 30  # the walk sees the parser calls
    literal = [ast.unparse(d) for d in defaults
               if not {n.id for n in ast.walk(d) if isinstance(n, ast.Name)} & aliases
               or any(isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) for n in ast.walk(d))]
    assert literal == []


def test_no_default_value_is_written_a_second_time_in_the_code_of_config_py_or_configenv_py() -> None:
    """`or "kuberhealthy"`, `_int(raw, "historyLength", 24)`: a field's default written again in a function."""
    tree = _config_tree()
    wanted = {v for v in _declared_defaults(Config).values()
              if isinstance(v, (int, float, str)) and not isinstance(v, bool) and v not in (0, "")}
    compared = {id(c) for n in ast.walk(tree) if isinstance(n, ast.Compare) for c in n.comparators}  # == "warn"
    written = []
    for func in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        for node in ast.walk(func):
            value: object = None
            if isinstance(node, ast.Constant) and id(node) not in compared:
                value = node.value
            elif isinstance(node, ast.BinOp) and all(isinstance(n, (ast.Constant, ast.BinOp, ast.operator))
                                                     for n in ast.walk(node)):
                value = eval(compile(ast.Expression(node), "<default>", "eval"))  # 15 * 60.0
            if not isinstance(value, bool) and value in wanted:
                written.append(f"{func.name}: {ast.unparse(node)}")
    assert 24 in wanted and "kuberhealthy" in wanted  # the walk sees the defaults
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert {"from_mapping", "with_env", "reporting_urls", "pod_identity"} <= functions  # and both modules
    assert written == []


def test_the_history_length_default_is_the_config_keys_default() -> None:
    assert history.HISTORY_LENGTH == from_mapping({}, ENV).history_length == Config.history_length
