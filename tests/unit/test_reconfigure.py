"""Which config changes apply live, which need a rebuild of the caches, which only a restart applies."""
from __future__ import annotations

import dataclasses
from typing import Any, cast

import pytest

from kuberhealthy.base.config import Config, from_mapping
from kuberhealthy.daemon import reconfigure
from kuberhealthy.daemon.reconfigure import needs_rebuild, needs_restart
from kuberhealthy.daemon.services import Services

ENV = {"POD_NAME": "kh-0", "POD_NAMESPACE": "kuberhealthy"}


def test_listen_address_and_leader_election_changes_are_kept_at_their_running_values() -> None:
    old = from_mapping({"listenAddress": ":8080"}, ENV)
    new = from_mapping({"listenAddress": ":9090", "leaderElection": {"leaseName": "other"}, "logLevel": "debug"},
                       ENV)
    applied, names = needs_restart(old, new)
    assert names == ["leaderElection", "listenAddress"]
    assert applied.listen_port == 8080 and applied.leader_election == old.leader_election
    assert applied.log_level == "debug"  # everything else is applied


def test_ordinary_keys_apply_live_without_rebuilding_the_caches() -> None:
    old = from_mapping({}, ENV)
    for raw in ({"maxCheckPodAge": "1h"}, {"logLevel": "debug"}, {"checkReaperRunInterval": "5s"},
                {"externalCheckReportingURL": "http://x/externalCheckStatus"},
                {"promMetricsConfig": {"errorLabelMaxLength": 10}}, {"enableForceMaster": True},
                {"healthCheckDefaults": {"runInterval": "1m"}}, {"promMetricsConfig": {"labelDenylist": ["severity"]}},
                {"statusPage": {"enabled": True, "showErrors": True}}):
        new = from_mapping(raw, ENV)
        assert needs_restart(old, new)[1] == []
        assert not needs_rebuild(old, new), raw


def test_a_new_target_namespace_rebuilds_the_caches() -> None:
    assert needs_rebuild(from_mapping({}, ENV), from_mapping({"targetNamespace": "team-a"}, ENV))


# --- every key has a class; the keys of Kuberhealthy v3's API ------------------------------------------------

def test_every_config_field_is_classified_exactly_once() -> None:
    classes = [tuple(reconfigure.RESTART_KEYS), reconfigure.REBUILD_KEYS, reconfigure.CHECK_KEYS,
               reconfigure.INFLUX_KEYS, reconfigure.REAPER_KEYS, reconfigure.ELECTOR_KEYS, reconfigure.LIVE_KEYS]
    named = [key for keys in classes for key in keys]
    assert sorted(named) == sorted(f.name for f in dataclasses.fields(Config))


def test_the_https_listener_and_its_files_are_kept_at_their_running_values() -> None:
    tls = {"tlsCertFile": "/tls/a.crt", "tlsKeyFile": "/tls/a.key"}
    old = from_mapping(tls, ENV)
    new = from_mapping({"tlsCertFile": "/tls/b.crt", "tlsKeyFile": "/tls/b.key", "listenAddressTLS": ":9443"}, ENV)
    applied, names = needs_restart(old, new)
    assert names == ["listenAddressTLS", "tlsCertFile", "tlsKeyFile"]
    assert (applied.tls_cert_file, applied.tls_key_file, applied.listen_tls_port) == ("/tls/a.crt", "/tls/a.key", 8443)
    assert not needs_rebuild(old, new)


def test_a_new_metrics_style_rebuilds_the_services_and_with_them_the_web_app() -> None:
    assert needs_rebuild(from_mapping({}, ENV), from_mapping({"metricsStyle": "v3"}, ENV))


class _Controller:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def restart_checks(self) -> None:
        self.calls.append("checks")

    def restart_leader_parts(self) -> None:
        self.calls.append("reapers")


class _Services:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.controller = _Controller()
        self.influx = None
        self.elector = None


@pytest.mark.parametrize(("raw", "restarted"), [
    ({"externalCheckReportingURL": "http://kh.example/externalCheckStatus"}, ["checks"]),  # v3's URL changes too
    ({"healthCheckDefaults": {"runInterval": "1m"}}, ["checks"]),
    ({"healthCheckDefaults": {"timeout": "10s"}}, ["checks"]),
    ({"promMetricsConfig": {"labelAllowlist": ["severity"], "labelDenylist": ["category"],
                            "labelValueMaxLength": 9}}, []),  # read at each scrape
    ({"maxCheckPodAge": "1h"}, ["reapers"]),
    ({"statusPage": {"enabled": True, "showErrors": True}}, []),  # read at each request of /status
])
def test_a_changed_key_restarts_only_what_it_feeds(raw: dict[str, Any], restarted: list[str]) -> None:
    old, new = from_mapping({}, ENV), from_mapping(raw, ENV)
    services = _Services(old)
    assert reconfigure.reconfigure(cast(Services, services), new) == restarted
    assert services.config is new and services.controller.calls == restarted


def test_only_the_v3_report_url_changing_restarts_the_checks() -> None:
    old = from_mapping({}, ENV)
    new = dataclasses.replace(old, v3_reporting_url="http://elsewhere/check")
    services = _Services(old)
    assert reconfigure.reconfigure(cast(Services, services), new) == ["checks"]
