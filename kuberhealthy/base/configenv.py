"""The environment's part of the settings: Kuberhealthy v3's variables and what they mean in our config.

Kuberhealthy v3 is configured by environment variables only. Those that mean one of our keys (ENV_KEYS,
KH_CHECK_REPORT_URL, KH_LEADER_ELECTION_ENABLED) win over the file, so a v3 Deployment's env works here
unchanged; set but empty counts as unset, as in v3.

This module puts those variables into the document config.py parses, each value marked with the variable
it came from so that an error about it names the variable, not the key; and it makes the checks that
look at both sources at once: the report URLs (a v3 base URL or v2's whole one), the pod's identity, the
HTTPS certificate and key given together. It parses no key of the file and holds no default: config.py
does both (with name_of and parse_bool from here), and imports this module, never the reverse.
"""
from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

from kuberhealthy.base.errors import ConfigError

logger = logging.getLogger(__name__)

# Environment variables that mean one of our keys (`section.key` for a nested one): set and not empty,
# each wins over the file. Kuberhealthy v3's, and two of ours.
ENV_KEYS = {
    "KH_LISTEN_ADDRESS": "listenAddress",
    "KH_LISTEN_ADDRESS_TLS": "listenAddressTLS",
    "KH_TLS_CERT_FILE": "tlsCertFile",
    "KH_TLS_KEY_FILE": "tlsKeyFile",
    "KH_LOG_LEVEL": "logLevel",
    "KH_TARGET_NAMESPACE": "targetNamespace",
    "KH_DEFAULT_RUN_INTERVAL": "healthCheckDefaults.runInterval",
    "KH_DEFAULT_CHECK_TIMEOUT": "healthCheckDefaults.timeout",
    "KH_MAX_JOB_AGE": "maxKHJobAge",
    "KH_MAX_CHECK_POD_AGE": "maxCheckPodAge",
    "KH_MAX_COMPLETED_POD_COUNT": "maxCompletedPodCount",
    "KH_MAX_ERROR_POD_COUNT": "maxErrorPodCount",
    "KH_LEADER_ELECTION_NAME": "leaderElection.leaseName",
    "KH_LEADER_ELECTION_LEASE_DURATION": "leaderElection.leaseDuration",
    "KH_LEADER_ELECTION_RENEW_DEADLINE": "leaderElection.renewDeadline",
    "KH_LEADER_ELECTION_RETRY_PERIOD": "leaderElection.retryPeriod",
    "KH_PROM_SUPPRESS_ERROR_LABEL": "promMetricsConfig.suppressErrorLabel",
    "KH_PROM_ERROR_LABEL_MAX_LENGTH": "promMetricsConfig.errorLabelMaxLength",
    "KH_PROM_LABEL_ALLOWLIST": "promMetricsConfig.labelAllowlist",
    "KH_PROM_LABEL_DENYLIST": "promMetricsConfig.labelDenylist",
    "KH_PROM_LABEL_VALUE_MAX_LENGTH": "promMetricsConfig.labelValueMaxLength",
    "KH_INFLUX_PASSWORD": "influxPassword",  # ours: the chart fills it from a Secret
    "CHECK_REAPER_RUN_INTERVAL": "checkReaperRunInterval",  # ours
}
REPORT_BASE_ENV = "KH_CHECK_REPORT_URL"  # v3's: a base URL; both report URLs are made from it
V2_REPORT_URL_ENV = "KH_EXTERNAL_REPORTING_URL"  # ours: v2's whole URL, wins over everything for v2's
ELECTION_ENABLED_ENV = "KH_LEADER_ELECTION_ENABLED"  # false: this replica leads alone (enableForceMaster)
ELECTION_NAMESPACE_ENV = "KH_LEADER_ELECTION_NAMESPACE"  # ours is POD_NAMESPACE, always
UNSUPPORTED_ENV = ("KH_ERROR_POD_RETENTION_TIME", "KH_TERMINATION_GRACE_PERIOD")  # v3's, no equivalent here
V2_REPORT_PATH = "externalCheckStatus"  # the last path segment of v2's report URL
V3_REPORT_PATH = "/check"  # v3's check client accepts no other path
GO_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
            "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}  # ParseBool's


class _FromEnv(str):
    """A value read from an environment variable: an error about it names the variable, not the key."""

    var: str

    def __new__(cls, value: str, var: str) -> _FromEnv:
        self = super().__new__(cls, value)
        self.var = var
        return self


def name_of(raw: Mapping[str, Any], key: str, prefix: str = "") -> str:
    """What an error about raw[key] names: the environment variable its value came from, else the key."""
    value = raw.get(key)
    return value.var if isinstance(value, _FromEnv) else prefix + key


def parse_bool(value: str) -> bool | None:
    """true or false in any case (the file's spelling); from a variable, also Go's ParseBool's (1, t,
    TRUE, ...: what v3 takes). None when it is neither."""
    spelled = {"true": True, "false": False}.get(value.strip().lower())
    return GO_BOOLS.get(value, spelled) if isinstance(value, _FromEnv) else spelled


def with_env(raw: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The document with every set variable of ENV_KEYS in place of its key (nested sections copied)."""
    out = dict(raw)
    for var, path in ENV_KEYS.items():
        value = env.get(var)
        if not value:  # empty is unset, as in v3: its chart sets "" for what it leaves alone
            continue
        section, _, key = path.rpartition(".")
        target = out
        if section:
            inner = out.get(section)
            if inner is not None and not isinstance(inner, Mapping):
                continue  # the file's section is wrong: its own error names it
            target = out[section] = dict(inner or {})
        target[key] = _FromEnv(value, var)
    enabled = env.get(ELECTION_ENABLED_ENV)
    if enabled:
        # v3 without leader election: every replica runs every check, no Lease. Ours is enableForceMaster.
        elect = parse_bool(_FromEnv(enabled, ELECTION_ENABLED_ENV))
        if elect is None:
            raise ConfigError(ELECTION_ENABLED_ENV, f"expected true or false, got {enabled!r}")
        out["enableForceMaster"] = not elect
    for var in UNSUPPORTED_ENV:
        if env.get(var):
            logger.warning("Ignoring %s: v3's setting has no equivalent here", var)
    return out


def pod_identity(env: Mapping[str, str], default_namespace: str) -> tuple[str, str]:
    """(name, namespace) of this replica's pod: POD_NAME (else the hostname) and POD_NAMESPACE."""
    namespace = env.get("POD_NAMESPACE") or default_namespace
    name = env.get("POD_NAME") or socket.gethostname()
    if env.get(ELECTION_NAMESPACE_ENV, namespace) not in ("", namespace):
        logger.warning("Ignoring %s=%s: the Lease is in this pod's namespace, %s", ELECTION_NAMESPACE_ENV,
                       env[ELECTION_NAMESPACE_ENV], namespace)
    return name, namespace


def http_url(url: str, name: str) -> SplitResult:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise ConfigError(name, f"invalid URL {url!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(name, f"expected an http(s) URL, got {url!r}")
    return parts


def reporting_urls(env: Mapping[str, str], pod_namespace: str, file_url: Callable[[], str]) -> tuple[str, str]:
    """The report URLs given to checker pods: (v2's, for khchecks; v3's, for HealthChecks).

    v2's is KH_EXTERNAL_REPORTING_URL, else KH_CHECK_REPORT_URL + /externalCheckStatus, else the key
    externalCheckReportingURL (`file_url()`, read only when neither variable is set), else the Service's
    URL. v3's is KH_CHECK_REPORT_URL + /check; else, when v2's URL was given (the variable or the key),
    that URL with a last path segment externalCheckStatus replaced by check, or with the path /check when
    its path ends otherwise (query and fragment dropped); else the Service's URL. The Service's is http://kuberhealthy.<POD_NAMESPACE>.svc.cluster.local.
    KH_CHECK_REPORT_URL is a base: a trailing / is dropped, and a path ending in /check or
    /externalCheckStatus is an error (v3 refuses the first too).
    """
    service = f"http://kuberhealthy.{pod_namespace}.svc.cluster.local"
    base = env.get(REPORT_BASE_ENV, "")
    if base:
        base = base.strip().rstrip("/")
        parts = http_url(base, REPORT_BASE_ENV)
        if parts.query or parts.fragment or parts.path.endswith((V3_REPORT_PATH, "/" + V2_REPORT_PATH)):
            raise ConfigError(REPORT_BASE_ENV, f"expected a base URL such as {service} (no /check, no "
                              f"/{V2_REPORT_PATH}, no query: each is added by kind), got {env[REPORT_BASE_ENV]!r}")
    v2_given, name = env.get(V2_REPORT_URL_ENV, ""), V2_REPORT_URL_ENV
    if not v2_given and not base:
        name = "externalCheckReportingURL"
        v2_given = file_url()
    v2 = v2_given or f"{base or service}/{V2_REPORT_PATH}"
    if not v2.startswith(("http://", "https://")):
        raise ConfigError(name, f"expected an http(s) URL, got {v2!r}")
    if base or not v2_given:
        return v2, (base or service) + V3_REPORT_PATH
    parts = http_url(v2, name)
    head, _, last = parts.path.rstrip("/").rpartition("/")
    path = f"{head}{V3_REPORT_PATH}" if last == V2_REPORT_PATH else V3_REPORT_PATH
    v3 = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    if path != V3_REPORT_PATH:
        logger.warning("HealthCheck pods report to %s (made from %s): v3's check client accepts only the "
                       "path %s; set %s to a base URL to change it", v3, name, V3_REPORT_PATH, REPORT_BASE_ENV)
    return v2, v3


def check_tls_pair(raw: Mapping[str, Any], cert: str, key: str) -> None:
    """HTTPS needs both the certificate (tlsCertFile) and its key (tlsKeyFile), or neither."""
    if bool(cert) != bool(key):
        env_of = {path: var for var, path in ENV_KEYS.items()}
        given, missing = ("tlsCertFile", "tlsKeyFile") if cert else ("tlsKeyFile", "tlsCertFile")
        raise ConfigError(name_of(raw, given), f"{name_of(raw, given)} is set but {missing} ({env_of[missing]}) is "
                          "not: HTTPS needs both the certificate and its private key")


def check_tls_port(raw: Mapping[str, Any], cert: str, tls: tuple[str, int], http: tuple[str, int]) -> None:
    """HTTPS, when on (a certificate is given), cannot listen where HTTP does."""
    host, port = tls
    if cert and port == http[1] != 0 and (host == http[0] or "" in (host, http[0])):
        raise ConfigError(name_of(raw, "listenAddressTLS"), f"HTTPS cannot listen on the port of HTTP "
                          f"({name_of(raw, 'listenAddress')}), {port}")
