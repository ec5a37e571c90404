"""Which config changes apply live, which need a rebuild of the caches, which only a restart applies."""
from __future__ import annotations

from kuberhealthy.base.config import from_mapping
from kuberhealthy.daemon.reconfigure import needs_rebuild, needs_restart

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
                {"promMetricsConfig": {"errorLabelMaxLength": 10}}, {"enableForceMaster": True}):
        new = from_mapping(raw, ENV)
        assert needs_restart(old, new)[1] == []
        assert not needs_rebuild(old, new), raw


def test_a_new_target_namespace_rebuilds_the_caches() -> None:
    assert needs_rebuild(from_mapping({}, ENV), from_mapping({"targetNamespace": "team-a"}, ENV))
