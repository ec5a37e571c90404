"""Settings: the YAML config file (camelCase keys as in Kuberhealthy v2) plus environment overrides.

Everything is validated at load time into frozen dataclasses, so a bad value stops start-up with a
message naming the key (or the environment variable the value came from) instead of failing later in a
thread. This module reads files and parses each key; it never talks to the API, and it does not read
the TLS files it names (the server does). The environment's part (Kuberhealthy v3's variables, which
win over the file, and the checks that span both) is configenv.py's.

Each default is written once, as the dataclass field's default: the parser reads an absent key's value
from `_DEFAULT` (a Config with every default), never from a literal of its own, and other modules that
need a default (records/history.py's history length) read it from the dataclass too.
"""
from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml

from kuberhealthy.base.configenv import (
    ELECTION_ENABLED_ENV,
    ELECTION_NAMESPACE_ENV,
    ENV_KEYS,
    GO_BOOLS,
    REPORT_BASE_ENV,
    UNSUPPORTED_ENV,
    V2_REPORT_PATH,
    V2_REPORT_URL_ENV,
    V3_REPORT_PATH,
    check_tls_pair,
    check_tls_port,
    http_url,
    name_of,
    parse_bool,
    pod_identity,
    reporting_urls,
    with_env,
)
from kuberhealthy.base.durations import parse_duration
from kuberhealthy.base.errors import ConfigError

logger = logging.getLogger(__name__)

DEFAULT_CONFIG_PATH = "/etc/config/kuberhealthy.yaml"
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class LeaderElection:
    lease_name: str = "kuberhealthy"
    lease_duration: float = 15.0  # seconds a lease is valid without renewal
    renew_deadline: float = 10.0  # seconds the leader keeps trying to renew before it steps down
    retry_period: float = 2.0  # seconds between acquire/renew attempts


@dataclass(frozen=True)
class PromMetrics:
    suppress_error_label: bool = False
    error_label_max_length: int = 0  # 0 = no truncation
    # Names of a check's labels kuberhealthy.io/<name> that become metric labels <name>, as v3 (empty: v3's two).
    label_allowlist: tuple[str, ...] = ("severity", "category")
    label_denylist: tuple[str, ...] = ()  # wins over the allowlist
    label_value_max_length: int = 256  # characters kept of such a label's value (0 = no cut)


@dataclass(frozen=True)
class StatusPage:
    """`GET /status`: the read-only page for people outside the team."""

    enabled: bool = False  # off: /status answers 404
    show_errors: bool = False  # a failing check's error texts on the page (they may name internal hosts)


@dataclass(frozen=True)
class Config:
    listen_host: str = ""  # "" = all interfaces
    listen_port: int = 8080
    enable_force_master: bool = False
    log_level: str = "info"
    enable_influx: bool = False
    influx_url: str = ""
    influx_username: str = ""
    influx_password: str = field(default="", repr=False)
    influx_db: str = ""
    external_check_reporting_url: str = ""  # resolved: never empty after load()
    max_khjob_age: float = 15 * 60.0  # seconds
    max_check_pod_age: float = 72 * 3600.0  # seconds
    max_completed_pod_count: int = 4
    max_error_pod_count: int = 4
    target_namespace: str = ""  # "" = all namespaces
    leader_election: LeaderElection = field(default_factory=LeaderElection)
    check_change_debounce: float = 10.0  # seconds
    state_reaper_interval: float = 60.0  # seconds
    check_reaper_run_interval: float = 30.0  # seconds
    prom_metrics: PromMetrics = field(default_factory=PromMetrics)
    pod_name: str = ""  # this replica's identity (POD_NAME, default hostname)
    pod_namespace: str = "kuberhealthy"  # POD_NAMESPACE
    # Report authenticity (docs/interface.md#report-authenticity)
    report_source_check: str = "warn"  # warn | enforce | off: header-path reports from elsewhere than the pod/node
    report_auth: str = "token-or-uuid"  # token-or-uuid | token (a projected ServiceAccount token is required)
    report_rate_limit: float = 20.0  # reports per second per source address (sustained)
    report_rate_burst: int = 200  # reports per source address in a burst
    # History, run now, dashboard (docs/interface.md#history-and-counters)
    history_length: int = 24  # runs kept in each khstate's history (0 = off)
    capture_logs: bool = True  # keep the log tail of failed runs in their history entry
    expose_logs: bool = False  # show those log tails on the unauthenticated JSON API and dashboard
    enable_run_api: bool = True  # POST /api/checks/<ns>/<name>/run
    dashboard_at_root: bool = False  # browsers asking for HTML at / get the dashboard
    trusted_origins: frozenset[str] = frozenset()  # origins (scheme://host[:port]) that may request runs cross-site
    # Kuberhealthy v3's API beside v2's
    metrics_style: str = "v2"  # v2 | v3: the label style and catalog of /metrics
    healthcheck_run_interval: float = 600.0  # seconds: a HealthCheck's runInterval when it sets none
    healthcheck_timeout: float = 30.0  # seconds: a HealthCheck's timeout when it sets none
    v3_reporting_url: str = ""  # resolved: never empty after load(); KH_REPORTING_URL of HealthCheck pods
    tls_cert_file: str = ""  # PEM certificate (chain) of the HTTPS listener; "" = no HTTPS
    tls_key_file: str = ""  # its private key (set with tls_cert_file or not at all)
    listen_tls_host: str = ""  # "" = all interfaces
    listen_tls_port: int = 8443
    # Modern clusters
    sidecar_containers: tuple[str, ...] = ()  # container names that never end a checker pod (a mesh's proxy)
    # Uptime over time
    status_page: StatusPage = field(default_factory=StatusPage)


_DEFAULT = Config()  # what an absent key means: the parser below takes every default from here

_KNOWN_KEYS = {
    "listenAddress", "enableForceMaster", "logLevel", "enableInflux", "influxURL", "influxUsername",
    "influxPassword", "influxDB", "externalCheckReportingURL", "maxKHJobAge", "maxCheckPodAge",
    "maxCompletedPodCount", "maxErrorPodCount", "targetNamespace", "leaderElection", "checkChangeDebounce",
    "stateReaperInterval", "checkReaperRunInterval", "promMetricsConfig",
    "reportSourceCheck", "reportAuth", "reportRateLimit", "reportRateBurst",
    "historyLength", "captureLogs", "exposeLogs", "enableRunAPI", "dashboardAtRoot", "trustedOrigins",
    "metricsStyle", "healthCheckDefaults", "tlsCertFile", "tlsKeyFile", "listenAddressTLS", "sidecarContainers",
    "statusPage",
}
REPORT_SOURCE_CHECKS = ("warn", "enforce", "off")
REPORT_AUTHS = ("token-or-uuid", "token")
METRICS_STYLES = ("v2", "v3")
V3_LOG_LEVELS = {"trace": "debug", "warn": "warning", "fatal": "error", "panic": "error"}  # logrus's, ours

LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")  # Prometheus's label names
CONTAINER_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a DNS label: what a container may be named

# The environment's names (configenv.py's) among them: written here first, they stay importable from here.
__all__ = ["DEFAULT_CONFIG_PATH", "ELECTION_ENABLED_ENV", "ELECTION_NAMESPACE_ENV", "ENV_KEYS", "GO_BOOLS",
           "LABEL_NAME", "LOG_LEVELS", "METRICS_STYLES", "REPORT_AUTHS", "REPORT_BASE_ENV", "REPORT_SOURCE_CHECKS",
           "UNSUPPORTED_ENV", "V2_REPORT_PATH", "V2_REPORT_URL_ENV", "V3_LOG_LEVELS", "V3_REPORT_PATH", "Config",
           "LeaderElection", "PromMetrics", "StatusPage", "from_mapping", "load", "parse_listen_address"]


def _bool(raw: Mapping[str, Any], key: str, default: bool, prefix: str = "") -> bool:
    if key not in raw or raw[key] is None:
        return default
    v = raw[key]
    if isinstance(v, bool):
        return v
    parsed = parse_bool(v) if isinstance(v, str) else None
    if parsed is not None:
        return parsed
    raise ConfigError(name_of(raw, key, prefix), f"expected true or false, got {v!r}")


def _str(raw: Mapping[str, Any], key: str, default: str, prefix: str = "") -> str:
    if key not in raw or raw[key] is None:
        return default
    v = raw[key]
    if isinstance(v, (str, int, float)) and not isinstance(v, bool):
        return str(v)
    raise ConfigError(prefix + key, f"expected a string, got {v!r}")


def _int(raw: Mapping[str, Any], key: str, default: int, prefix: str = "") -> int:
    if key not in raw or raw[key] is None:
        return default
    v = raw[key]
    if isinstance(v, str) and v.strip().isascii() and v.strip().lstrip("-").isdigit():  # "²".isdigit() is true
        v = int(v.strip())
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ConfigError(name_of(raw, key, prefix), f"expected a whole number >= 0, got {raw[key]!r}")
    return v


def _choice(raw: Mapping[str, Any], key: str, choices: tuple[str, ...], default: str) -> str:
    value = _str(raw, key, default).strip()
    if value not in choices:
        raise ConfigError(key, f"expected one of {', '.join(choices)}, got {raw.get(key)!r}")
    return value


def _rate(raw: Mapping[str, Any], key: str, default: float) -> float:
    v = raw.get(key, default)
    if isinstance(v, str):
        try:
            v = float(v.strip())
        except ValueError:
            raise ConfigError(key, f"expected a number of requests per second > 0, got {raw.get(key)!r}") from None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
        raise ConfigError(key, f"expected a number of requests per second > 0, got {raw.get(key)!r}")
    return float(v)


def _duration(raw: Mapping[str, Any], key: str, default: float, prefix: str = "", positive: bool = True) -> float:
    value: Any = raw.get(key)
    source = name_of(raw, key, prefix)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(source, f"expected a duration such as 90s or 1m30s, got {value!r}")
    try:
        # A bare number is not a Go duration (ParseDuration("10") fails: missing unit); only 0 is.
        seconds = parse_duration(str(value))
    except ValueError:
        raise ConfigError(source, f"invalid duration {value!r} (use Go syntax: 500ms, 90s, 1m30s, 1h)") from None
    if positive and seconds <= 0:
        raise ConfigError(source, f"must be greater than zero, got {value!r}")
    return seconds


def _labels(raw: Mapping[str, Any], key: str, default: tuple[str, ...], prefix: str) -> tuple[str, ...]:
    """A list of label names, or one string of them separated by commas (v3's form); blanks and repeats
    are dropped, the order kept."""
    value = raw.get(key)
    if value is None:
        return default
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ConfigError(name_of(raw, key, prefix), f"expected a list of label names, got {value!r}")
    names = tuple(dict.fromkeys(item.strip() for item in items if item.strip()))
    for name in names:
        if not LABEL_NAME.fullmatch(name):
            raise ConfigError(name_of(raw, key, prefix), f"{name!r} is not a label name ([a-zA-Z_][a-zA-Z0-9_]*)")
    return names


def _section(raw: Mapping[str, Any], key: str, keys: str) -> Mapping[str, Any]:
    value = raw.get(key) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"expected a mapping with {keys}")
    return value


def _address(raw: Mapping[str, Any], key: str, default: str) -> tuple[str, int]:
    try:
        return parse_listen_address(_str(raw, key, default))
    except ValueError:
        raise ConfigError(name_of(raw, key), f"expected host:port or :port, got {raw.get(key)!r}") from None


def parse_listen_address(value: str) -> tuple[str, int]:
    """`host:port`, `:port` or `[v6]:port` → (host, port). Raises ValueError."""
    text = value.strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ValueError(value)
    else:
        host, sep, port = text.rpartition(":")
        if not sep:
            raise ValueError(value)
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(value)
    return host, int(port)


def _log_level(raw: Mapping[str, Any]) -> str:
    """Ours (debug, info, warning, error), or v3's (logrus's) mapped to the nearest of ours."""
    given = _str(raw, "logLevel", _DEFAULT.log_level).strip().lower()
    level = V3_LOG_LEVELS.get(given, given)
    if level not in LOG_LEVELS:
        levels = ", ".join((*LOG_LEVELS, *V3_LOG_LEVELS))
        raise ConfigError(name_of(raw, "logLevel"), f"expected one of {levels}, got {raw.get('logLevel')!r}")
    return level


def _tls(raw: Mapping[str, Any], http: tuple[str, int]) -> tuple[str, str, str, int]:
    """(certificate file, key file, host, port) of the HTTPS listener: both files or neither."""
    cert = _str(raw, "tlsCertFile", _DEFAULT.tls_cert_file).strip()
    key = _str(raw, "tlsKeyFile", _DEFAULT.tls_key_file).strip()
    check_tls_pair(raw, cert, key)
    host, port = _address(raw, "listenAddressTLS", f"{_DEFAULT.listen_tls_host}:{_DEFAULT.listen_tls_port}")
    check_tls_port(raw, cert, (host, port), http)
    return cert, key, host, port


def from_mapping(raw: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Config:
    """Validate a parsed config document (plus environment) into a Config."""
    env = os.environ if environ is None else environ
    if not isinstance(raw, Mapping):
        raise ConfigError("<root>", "the config file must be a YAML mapping of keys to values")
    for key in raw:
        if key not in _KNOWN_KEYS:
            logger.warning("Ignoring unknown config key %r", key)
    raw = with_env(raw, env)
    host, port = _address(raw, "listenAddress", f"{_DEFAULT.listen_host}:{_DEFAULT.listen_port}")

    le_raw = _section(raw, "leaderElection", "leaseName, leaseDuration, ...")
    p, le_default = "leaderElection.", _DEFAULT.leader_election
    le = LeaderElection(
        lease_name=_str(le_raw, "leaseName", le_default.lease_name, p),
        lease_duration=_duration(le_raw, "leaseDuration", le_default.lease_duration, p),
        renew_deadline=_duration(le_raw, "renewDeadline", le_default.renew_deadline, p),
        retry_period=_duration(le_raw, "retryPeriod", le_default.retry_period, p),
    )
    if not le.lease_name:
        raise ConfigError(name_of(le_raw, "leaseName", p), "must not be empty")
    for longer, shorter, ok in (("leaseDuration", "renewDeadline", le.lease_duration > le.renew_deadline),
                                ("renewDeadline", "retryPeriod", le.renew_deadline > le.retry_period)):
        if not ok:
            raise ConfigError(name_of(le_raw, longer, p), f"must be greater than {name_of(le_raw, shorter, p)}")

    pm_raw = _section(raw, "promMetricsConfig", "suppressErrorLabel, errorLabelMaxLength, labelAllowlist, ...")
    p, pm_default = "promMetricsConfig.", _DEFAULT.prom_metrics
    pm = PromMetrics(
        suppress_error_label=_bool(pm_raw, "suppressErrorLabel", pm_default.suppress_error_label, p),
        error_label_max_length=_int(pm_raw, "errorLabelMaxLength", pm_default.error_label_max_length, p),
        label_allowlist=_labels(pm_raw, "labelAllowlist", pm_default.label_allowlist, p),
        label_denylist=_labels(pm_raw, "labelDenylist", pm_default.label_denylist, p),
        label_value_max_length=_int(pm_raw, "labelValueMaxLength", pm_default.label_value_max_length, p),
    )
    hc_raw, p = _section(raw, "healthCheckDefaults", "runInterval, timeout"), "healthCheckDefaults."
    sp_raw, sp_p, sp_default = _section(raw, "statusPage", "enabled, showErrors"), "statusPage.", _DEFAULT.status_page
    status_page = StatusPage(enabled=_bool(sp_raw, "enabled", sp_default.enabled, sp_p),
                             show_errors=_bool(sp_raw, "showErrors", sp_default.show_errors, sp_p))

    pod_name, pod_namespace = pod_identity(env, _DEFAULT.pod_namespace)
    reporting_url, v3_reporting_url = reporting_urls(
        env, pod_namespace, lambda: _str(raw, "externalCheckReportingURL", _DEFAULT.external_check_reporting_url))
    tls_cert_file, tls_key_file, tls_host, tls_port = _tls(raw, (host, port))

    enable_influx = _bool(raw, "enableInflux", _DEFAULT.enable_influx)
    influx_url = _str(raw, "influxURL", _DEFAULT.influx_url)
    if enable_influx:
        http_url(influx_url, "influxURL")
        if not _str(raw, "influxDB", _DEFAULT.influx_db).strip():
            raise ConfigError("influxDB", "enableInflux is true but no database is named")

    return Config(
        listen_host=host,
        listen_port=port,
        enable_force_master=_bool(raw, "enableForceMaster", _DEFAULT.enable_force_master),
        log_level=_log_level(raw),
        enable_influx=enable_influx,
        influx_url=influx_url,
        influx_username=_str(raw, "influxUsername", _DEFAULT.influx_username),
        # Never logged: the field has repr=False, and no message names its value.
        influx_password=_str(raw, "influxPassword", _DEFAULT.influx_password),
        influx_db=_str(raw, "influxDB", _DEFAULT.influx_db),
        external_check_reporting_url=reporting_url,
        max_khjob_age=_duration(raw, "maxKHJobAge", _DEFAULT.max_khjob_age),
        max_check_pod_age=_duration(raw, "maxCheckPodAge", _DEFAULT.max_check_pod_age),
        max_completed_pod_count=_int(raw, "maxCompletedPodCount", _DEFAULT.max_completed_pod_count),
        max_error_pod_count=_int(raw, "maxErrorPodCount", _DEFAULT.max_error_pod_count),
        target_namespace=_str(raw, "targetNamespace", _DEFAULT.target_namespace),
        leader_election=le,
        check_change_debounce=_duration(raw, "checkChangeDebounce", _DEFAULT.check_change_debounce,
                                        positive=False),
        state_reaper_interval=_duration(raw, "stateReaperInterval", _DEFAULT.state_reaper_interval),
        check_reaper_run_interval=_duration(raw, "checkReaperRunInterval", _DEFAULT.check_reaper_run_interval),
        prom_metrics=pm,
        pod_name=pod_name,
        pod_namespace=pod_namespace,
        report_source_check=_choice(raw, "reportSourceCheck", REPORT_SOURCE_CHECKS, _DEFAULT.report_source_check),
        report_auth=_choice(raw, "reportAuth", REPORT_AUTHS, _DEFAULT.report_auth),
        report_rate_limit=_rate(raw, "reportRateLimit", _DEFAULT.report_rate_limit),
        report_rate_burst=_positive_int(raw, "reportRateBurst", _DEFAULT.report_rate_burst),
        history_length=_int(raw, "historyLength", _DEFAULT.history_length),
        capture_logs=_bool(raw, "captureLogs", _DEFAULT.capture_logs),
        expose_logs=_bool(raw, "exposeLogs", _DEFAULT.expose_logs),
        enable_run_api=_bool(raw, "enableRunAPI", _DEFAULT.enable_run_api),
        dashboard_at_root=_bool(raw, "dashboardAtRoot", _DEFAULT.dashboard_at_root),
        trusted_origins=_origins(raw, "trustedOrigins", _DEFAULT.trusted_origins),
        metrics_style=_choice(raw, "metricsStyle", METRICS_STYLES, _DEFAULT.metrics_style),
        healthcheck_run_interval=_duration(hc_raw, "runInterval", _DEFAULT.healthcheck_run_interval, p),
        healthcheck_timeout=_duration(hc_raw, "timeout", _DEFAULT.healthcheck_timeout, p),
        v3_reporting_url=v3_reporting_url,
        tls_cert_file=tls_cert_file,
        tls_key_file=tls_key_file,
        listen_tls_host=tls_host,
        listen_tls_port=tls_port,
        sidecar_containers=_container_names(raw, "sidecarContainers", _DEFAULT.sidecar_containers),
        status_page=status_page,
    )


def _container_names(raw: Mapping[str, Any], key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """A list of container names, or one string of them separated by commas; blanks and repeats dropped."""
    value = raw.get(key)
    if value is None:
        return default
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ConfigError(key, f"expected a list of container names such as [istio-proxy], got {value!r}")
    names = tuple(dict.fromkeys(item.strip() for item in items if item.strip()))
    for name in names:
        if not CONTAINER_NAME.fullmatch(name):
            raise ConfigError(key, f"{name!r} is not a container name (a DNS label: lower case letters, "
                              "digits and '-', at most 63)")
    return names


def _origins(raw: Mapping[str, Any], key: str, default: frozenset[str]) -> frozenset[str]:
    """A list of origins as browsers send them in `Origin` (`https://kh.example.com`, `http://host:8080`):
    a scheme and a host, no path, query or fragment (the rules of Go's AddTrustedOrigin). Kept in lower
    case, the form browsers serialise an origin in."""
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, list):
        raise ConfigError(key, f"expected a list of origins such as https://kh.example.com, got {value!r}")
    out = set()
    for item in value:
        if not isinstance(item, str):
            raise ConfigError(key, f"expected origins such as https://kh.example.com, got {item!r}")
        origin = item.strip().lower()
        try:
            parts = urlsplit(origin)
            parts.port  # noqa: B018 - raises ValueError for a bad port
        except ValueError:
            raise ConfigError(key, f"invalid origin {item!r}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
            raise ConfigError(key, f"invalid origin {item!r}: expected http(s)://host[:port]")
        if parts.path or parts.query or parts.fragment or "?" in origin or "#" in origin:
            raise ConfigError(key, f"invalid origin {item!r}: a path, query or fragment is not allowed "
                              "(an origin is scheme://host[:port], no trailing slash)")
        out.add(f"{parts.scheme}://{parts.netloc}")
    return frozenset(out)


def _positive_int(raw: Mapping[str, Any], key: str, default: int) -> int:
    value = _int(raw, key, default)
    if value < 1:
        raise ConfigError(key, f"must be at least 1, got {raw.get(key)!r}")
    return value


def load(path: str | None, environ: Mapping[str, str] | None = None) -> Config:
    """Load and validate the config file. A missing *default* file means all defaults."""
    file = path or DEFAULT_CONFIG_PATH
    try:
        with open(file, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        if path is None:
            logger.info("No config file at %s; using defaults", file)
            return from_mapping({}, environ)
        raise ConfigError("--config", f"config file {file} does not exist") from None
    except OSError as e:
        raise ConfigError("--config", f"cannot read {file}: {e.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError("<file>", f"{file} is not valid YAML{where}") from None
    return from_mapping(raw or {}, environ)
