"""The chart's pods under the Pod Security Standards: every pod `helm template` renders (the daemon's
Deployment, the uninstall hook's Job, the helm test pod, and the checker podSpec of every bundled check),
with the default values and with every `enabled` switch of values.yaml on, judged against the restricted
profile by testbed/cluster/podsecurity.py (proven rule by rule in tests/unit/test_pod_security.py), and
so is the checker pod the daemon builds from each bundled check. helm comes from `bash hack/tools.sh`
(or $KH_HELM, or PATH); without it these tests skip.
"""
from __future__ import annotations

from typing import Any

import pytest
import yaml

from kuberhealthy.records.checkpod import Claimed, build_pod
from kuberhealthy.records.checkspec import CheckSpec
from testbed.cluster.podsecurity import BASELINE, PodOf, holds_containers, judge, pods_of
from testbed.paths import CHART
from testbed.tools.helm import Helm

DAEMON_PODS = {"Deployment/kuberhealthy", "Job/kuberhealthy-stop-release", "Pod/kuberhealthy-test"}
DEFAULT_CHECKS = {"daemonset", "deployment", "dns-status-internal"}
ALL_CHECKS = DEFAULT_CHECKS | {"dns-status-external", "pod-restarts", "pod-status", "network-connection-check"}


def _switches(values: Any, path: str = "") -> list[str]:
    """`<path>.enabled=true` for every `enabled` key of the values, however deep."""
    found = []
    if isinstance(values, dict):
        for key, value in values.items():
            here = f"{path}.{key}" if path else key
            found += [f"{here}=true"] if key == "enabled" else _switches(value, here)
    return found


SWITCHES = tuple(_switches(yaml.safe_load((CHART / "values.yaml").read_text())))
# Every optional part of the chart: each switch on, and the settings that add volumes, env or roles to pods.
EVERYTHING_ON = (
    *SWITCHES, "check.podRestarts.allNamespaces=true", "check.podStatus.allNamespaces=true", "targetNamespace=apps",
    "tls.secretName=kh-tls", "influx.passwordSecret=kh-influx", "config.enableInflux=true",
    "config.influxURL=http://influxdb:8086", "deployment.extraVolumes[0].name=ca",
    "deployment.extraVolumes[0].configMap.name=corp-ca", "deployment.extraVolumeMounts[0].name=ca",
    "deployment.extraVolumeMounts[0].mountPath=/etc/ssl/corp", "deployment.envFrom[0].secretRef.name=kh-env",
    "check.daemonset.serviceAccountName=own-sa", "imagePullSecrets[0].name=pull",
    "check.dnsInternal.nodeSelector.kubernetes\\.io/os=linux", "tolerations.master=true",
)
VARIATIONS = {
    "defaults": (),
    "every switch on": EVERYTHING_ON,
    # v2.8's chart key does nothing here (NOTES.txt says so): it cannot take the profile away
    "a v2 values file asking for an Unconfined seccomp profile": ("securityContext.seccompProfile.type=Unconfined",),
}


def _pods(helm: Helm, *values: str) -> dict[str, PodOf]:
    objs = helm.template(*values)
    pods = {p.where: p for o in objs for p in pods_of(o)}
    assert len(pods) == sum(len(pods_of(o)) for o in objs)  # no two of one name
    unseen = [f"{o['kind']}/{o['metadata']['name']}" for o in objs if holds_containers(o) and not pods_of(o)]
    assert unseen == [], "objects that make pods the judge did not look at"
    return pods


def _refusals(pod: PodOf, level: str = "restricted") -> list[str]:
    return [str(v) for v in judge(pod.spec, pod.annotations, level)]


def test_the_switches_are_read_from_the_values_file() -> None:
    assert {"securityContext.enabled=true", "uninstallHook.enabled=true", "check.networkConnection.enabled=true",
            "grafana.dashboards.enabled=true", "prometheus.serviceMonitor.enabled=true",
            "networkPolicy.enabled=true"} <= set(SWITCHES)


@pytest.mark.parametrize("values", VARIATIONS.values(), ids=VARIATIONS.keys())
def test_every_pod_the_chart_renders_meets_the_restricted_profile(helm: Helm, values: tuple[str, ...]) -> None:
    pods = _pods(helm, *values)
    checks = ALL_CHECKS if values == EVERYTHING_ON else DEFAULT_CHECKS
    assert set(pods) == DAEMON_PODS | {f"KuberhealthyCheck/{c}" for c in checks}
    assert {where: _refusals(pod) for where, pod in pods.items()} == {where: [] for where in pods}


def test_every_pod_of_the_chart_names_a_non_root_user_so_the_kubelet_can_hold_its_image_to_run_as_non_root(
        helm: Helm) -> None:
    for where, pod in _pods(helm, *EVERYTHING_ON).items():
        psc = pod.spec.get("securityContext") or {}
        assert psc.get("runAsNonRoot") is True and psc.get("runAsUser", 0) > 0, where


def test_with_the_security_context_off_the_bundled_checks_carry_none_and_meet_only_baseline(helm: Helm) -> None:
    pods = _pods(helm, *EVERYTHING_ON, "securityContext.enabled=false")
    for where, pod in pods.items():
        if where in DAEMON_PODS:
            assert _refusals(pod) == [], where  # the daemon's own pods keep theirs
            continue
        assert "securityContext" not in pod.spec, where
        assert all("securityContext" not in c for c in pod.spec["containers"]), where
        assert _refusals(pod, BASELINE) == [], where
        assert {v.rule for v in judge(pod.spec, pod.annotations)} == {
            "allowPrivilegeEscalation", "runAsNonRoot", "seccompProfile_restricted", "capabilities_restricted"}, where


def test_the_checker_pods_the_daemon_builds_from_the_bundled_checks_meet_the_restricted_profile(helm: Helm) -> None:
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "kuberhealthy-abc", "uid": "u", "controller": True}
    checks = [o for o in helm.template(*EVERYTHING_ON) if o["kind"] == "KuberhealthyCheck"]
    assert {c["metadata"]["name"] for c in checks} == ALL_CHECKS
    for check in checks:
        pod = build_pod(CheckSpec.of(check), "run-1", 1_700_000_000.0, "http://kuberhealthy.kh.svc/externalCheckStatus",
                        owner, claimed=Claimed(run_key="secret"))
        refusals = [str(v) for v in judge(pod["spec"], pod["metadata"]["annotations"])]
        assert refusals == [], check["metadata"]["name"]
