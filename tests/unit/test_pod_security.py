"""Pod Security Standards: the judge (testbed/cluster/podsecurity.py) proven rule by rule, then the example
checks and the checker pod the daemon builds judged by it. The chart's pods are judged in
tests/integration/test_pod_security.py (helm renders them)."""
from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kuberhealthy.records.checkpod import Claimed, build_pod
from kuberhealthy.records.checkspec import CheckSpec
from testbed.cluster.podsecurity import (
    BASELINE,
    BASELINE_RULES,
    RESTRICTED,
    RESTRICTED_RULES,
    RULES,
    PodOf,
    holds_containers,
    judge,
    pods_of,
)
from testbed.paths import REPO

EXAMPLES = REPO / "examples" / "checks"
OWNER = {"apiVersion": "v1", "kind": "Pod", "name": "kuberhealthy-abc", "uid": "u-owner", "controller": True}


def restricted_pod() -> dict[str, Any]:
    """A PodSpec that meets the restricted profile, with a volume of every kind the daemon and the chart use."""
    return {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": [{"name": "init", "image": "i", "securityContext": {
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
        "containers": [{"name": "main", "image": "m", "ports": [{"containerPort": 8080}],
                        "livenessProbe": {"httpGet": {"path": "/", "port": 8080}},
                        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}}],
        "volumes": [{"name": "c", "configMap": {"name": "x"}}, {"name": "t", "emptyDir": {}},
                    {"name": "s", "secret": {"secretName": "x"}},
                    {"name": "p", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}],
    }


Change = Callable[[dict[str, Any], dict[str, str]], None]


def _set(path: str, value: Any) -> Change:
    """A change setting a dotted path under the pod spec (`containers.0.securityContext.privileged`)."""
    def change(pod: dict[str, Any], _: dict[str, str]) -> None:
        node: Any = pod
        *parents, last = path.split(".")
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        node[last] = value
    return change


def _delete(path: str) -> Change:
    def change(pod: dict[str, Any], _: dict[str, str]) -> None:
        node: Any = pod
        *parents, last = path.split(".")
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        del node[last]
    return change


def _annotate(key: str, value: str) -> Change:
    def change(_: dict[str, Any], annotations: dict[str, str]) -> None:
        annotations[key] = value
    return change


def _add_volume(volume: dict[str, Any]) -> Change:
    def change(pod: dict[str, Any], _: dict[str, str]) -> None:
        pod["volumes"].append(volume)
    return change


def _on_each_container_instead_of_the_pod(**settings: Any) -> Change:
    """Moves pod-level settings onto every container (the profile accepts either)."""
    def change(pod: dict[str, Any], _: dict[str, str]) -> None:
        for key in settings:
            del pod["securityContext"][key]
        for c in [*pod["initContainers"], *pod["containers"]]:
            c["securityContext"].update(settings)
    return change


def _add_container(key: str, container: dict[str, Any]) -> Change:
    def change(pod: dict[str, Any], _: dict[str, str]) -> None:
        pod.setdefault(key, []).append(container)
    return change


C = "containers.0.securityContext"
# id -> (the change to the restricted pod, the rules broken at baseline, the rules broken at restricted).
FIXTURES: dict[str, tuple[Change, set[str], set[str]]] = {
    "hostProcess on the pod": (_set("securityContext.windowsOptions.hostProcess", True),
                               {"hostProcess"}, {"hostProcess"}),
    "hostProcess on a container": (_set(f"{C}.windowsOptions.hostProcess", True), {"hostProcess"}, {"hostProcess"}),
    "hostNetwork": (_set("hostNetwork", True), {"hostNamespaces"}, {"hostNamespaces"}),
    "hostPID": (_set("hostPID", True), {"hostNamespaces"}, {"hostNamespaces"}),
    "hostIPC": (_set("hostIPC", True), {"hostNamespaces"}, {"hostNamespaces"}),
    "a privileged container": (_set(f"{C}.privileged", True), {"privileged"}, {"privileged"}),
    "SYS_ADMIN added": (_set(f"{C}.capabilities.add", ["SYS_ADMIN"]),
                        {"capabilities_baseline"}, {"capabilities_baseline", "capabilities_restricted"}),
    "CHOWN added (baseline's default set)": (_set(f"{C}.capabilities.add", ["CHOWN"]), set(),
                                             {"capabilities_restricted"}),
    "ALL not dropped": (_set(f"{C}.capabilities.drop", ["NET_RAW"]), set(), {"capabilities_restricted"}),
    "a hostPath volume": (_add_volume({"name": "h", "hostPath": {"path": "/var/run"}}),
                          {"hostPathVolumes"}, {"hostPathVolumes", "restrictedVolumes"}),
    "an nfs volume": (_add_volume({"name": "n", "nfs": {"server": "s", "path": "/"}}), set(), {"restrictedVolumes"}),
    "a volume of an unknown source": (_add_volume({"name": "u", "someDriver": {}}), set(), {"restrictedVolumes"}),
    "a hostPort": (_set("containers.0.ports.0.hostPort", 8080), {"hostPorts"}, {"hostPorts"}),
    "an unconfined AppArmor annotation": (_annotate("container.apparmor.security.beta.kubernetes.io/main",
                                                    "unconfined"), {"appArmorProfile"}, {"appArmorProfile"}),
    "an Unconfined AppArmor profile on the pod": (_set("securityContext.appArmorProfile.type", "Unconfined"),
                                                  {"appArmorProfile"}, {"appArmorProfile"}),
    "an Unconfined AppArmor profile on a container": (_set(f"{C}.appArmorProfile.type", "Unconfined"),
                                                      {"appArmorProfile"}, {"appArmorProfile"}),
    "an SELinux type of the host": (_set("securityContext.seLinuxOptions.type", "spc_t"),
                                    {"seLinuxOptions"}, {"seLinuxOptions"}),
    "an SELinux user on a container": (_set(f"{C}.seLinuxOptions.user", "system_u"),
                                       {"seLinuxOptions"}, {"seLinuxOptions"}),
    "an SELinux role on a container": (_set(f"{C}.seLinuxOptions.role", "sysadm_r"),
                                       {"seLinuxOptions"}, {"seLinuxOptions"}),
    "an Unmasked /proc": (_set(f"{C}.procMount", "Unmasked"), {"procMount"}, {"procMount"}),
    "an Unconfined seccomp profile on a container": (
        _set(f"{C}.seccompProfile.type", "Unconfined"),
        {"seccompProfile_baseline"}, {"seccompProfile_baseline", "seccompProfile_restricted"}),
    "an Unconfined seccomp profile on the pod": (
        _set("securityContext.seccompProfile.type", "Unconfined"),
        {"seccompProfile_baseline"}, {"seccompProfile_baseline", "seccompProfile_restricted"}),
    "no seccomp profile": (_delete("securityContext.seccompProfile"), set(), {"seccompProfile_restricted"}),
    "an unsafe sysctl": (_set("securityContext.sysctls", [{"name": "kernel.msgmax", "value": "65536"}]),
                         {"sysctls"}, {"sysctls"}),
    "a probe's host": (_set("containers.0.livenessProbe.httpGet.host", "10.0.0.1"),
                       {"hostProbesAndHostLifecycle"}, {"hostProbesAndHostLifecycle"}),
    "a lifecycle hook's host": (_set("containers.0.lifecycle.preStop.tcpSocket", {"host": "10.0.0.1", "port": 1}),
                                {"hostProbesAndHostLifecycle"}, {"hostProbesAndHostLifecycle"}),
    "privilege escalation unset": (_delete(f"{C}.allowPrivilegeEscalation"), set(), {"allowPrivilegeEscalation"}),
    "privilege escalation allowed in an init container": (
        _set("initContainers.0.securityContext.allowPrivilegeEscalation", True), set(), {"allowPrivilegeEscalation"}),
    "runAsNonRoot unset": (_delete("securityContext.runAsNonRoot"), set(), {"runAsNonRoot"}),
    "runAsNonRoot false on a container": (_set(f"{C}.runAsNonRoot", False), set(), {"runAsNonRoot"}),
    "runAsNonRoot false on the pod": (_set("securityContext.runAsNonRoot", False), set(), {"runAsNonRoot"}),
    "runAsUser 0 on a container": (_set(f"{C}.runAsUser", 0), set(), {"runAsUser"}),
    "runAsUser 0 on the pod": (_set("securityContext.runAsUser", 0), set(), {"runAsUser"}),
    "an ephemeral container without a securityContext": (
        _add_container("ephemeralContainers", {"name": "debug", "image": "busybox"}), set(),
        {"allowPrivilegeEscalation", "capabilities_restricted"}),
}

# Changes the profile allows: each keeps the restricted pod admitted.
ALLOWED: dict[str, Change] = {
    "NET_BIND_SERVICE added": _set(f"{C}.capabilities.add", ["NET_BIND_SERVICE"]),
    "seccomp on each container instead of the pod": _on_each_container_instead_of_the_pod(
        seccompProfile={"type": "Localhost", "localhostProfile": "p.json"}),
    "runAsNonRoot on each container instead of the pod": _on_each_container_instead_of_the_pod(runAsNonRoot=True),
    "a runtime/default AppArmor annotation": _annotate("container.apparmor.security.beta.kubernetes.io/main",
                                                       "runtime/default"),
    "a localhost AppArmor annotation": _annotate("container.apparmor.security.beta.kubernetes.io/main",
                                                 "localhost/k8s-apparmor-example"),
    "a RuntimeDefault AppArmor profile": _set(f"{C}.appArmorProfile.type", "RuntimeDefault"),
    "SELinux type container_t": _set("securityContext.seLinuxOptions", {"type": "container_t", "level": "s0:c1"}),
    "procMount Default": _set(f"{C}.procMount", "Default"),
    "hostPort 0": _set("containers.0.ports.0.hostPort", 0),
    "safe sysctls": _set("securityContext.sysctls", [{"name": "net.ipv4.tcp_syncookies", "value": "1"},
                                                     {"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]),
    "hostNetwork false": _set("hostNetwork", False),
    "a csi volume": _add_volume({"name": "csi", "csi": {"driver": "d"}}),
    "an ephemeral volume": _add_volume({"name": "e", "ephemeral": {"volumeClaimTemplate": {}}}),
    "a persistentVolumeClaim": _add_volume({"name": "pvc", "persistentVolumeClaim": {"claimName": "c"}}),
    "a downwardAPI volume": _add_volume({"name": "d", "downwardAPI": {"items": []}}),
    "an image volume": _add_volume({"name": "i", "image": {"reference": "r"}}),
}


def _changed(change: Change) -> tuple[dict[str, Any], dict[str, str]]:
    pod, annotations = restricted_pod(), {"kuberhealthy.comcast.github.io/run-key": "k"}
    change(pod, annotations)
    return pod, annotations


def _rules(spec: dict[str, Any], annotations: dict[str, str] | None = None, level: str = RESTRICTED) -> set[str]:
    return {v.rule for v in judge(spec, annotations, level)}


# --- the judge ----------------------------------------------------------------------------------------------

def test_the_restricted_pod_of_these_fixtures_is_admitted_at_both_levels() -> None:
    assert judge(restricted_pod(), {}) == []
    assert judge(restricted_pod(), {}, BASELINE) == []


@pytest.mark.parametrize("name", FIXTURES)
def test_a_pod_breaking_one_control_is_refused_under_that_controls_name_and_no_other(name: str) -> None:
    change, baseline, restricted = FIXTURES[name]
    pod, annotations = _changed(change)
    assert _rules(pod, annotations, BASELINE) == baseline
    assert _rules(pod, annotations, RESTRICTED) == restricted


def test_every_rule_has_a_fixture_that_breaks_it_alone_at_its_own_level() -> None:
    alone = {rule for _, baseline, _ in FIXTURES.values() if len(baseline) == 1 for rule in baseline}
    alone |= {rule for _, baseline, restricted in FIXTURES.values() if not baseline and len(restricted) == 1
              for rule in restricted}
    assert alone == set(RULES) == set(BASELINE_RULES) | set(RESTRICTED_RULES)


@pytest.mark.parametrize("name", ALLOWED)
def test_what_the_profile_allows_is_admitted(name: str) -> None:
    pod, annotations = _changed(ALLOWED[name])
    assert judge(pod, annotations) == []


def test_a_refusal_names_the_container_and_the_field() -> None:
    pod, _ = _changed(_delete(f"{C}.allowPrivilegeEscalation"))
    (violation,) = judge(pod)
    assert str(violation) == ("allowPrivilegeEscalation: containers[main]: "
                              "securityContext.allowPrivilegeEscalation must be false")


def test_an_unknown_level_is_an_error() -> None:
    with pytest.raises(ValueError, match="privileged"):
        judge(restricted_pod(), level="privileged")


def test_the_pods_of_workloads_cron_jobs_pods_and_checks_of_both_apis_are_found_with_their_annotations() -> None:
    spec = restricted_pod()
    template = {"metadata": {"annotations": {"a": "1"}}, "spec": spec}
    objs = [
        {"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": template}},
        {"kind": "Job", "metadata": {"name": "j"}, "spec": {"template": template}},
        {"kind": "CronJob", "metadata": {"name": "c"}, "spec": {"jobTemplate": {"spec": {"template": template}}}},
        {"kind": "Pod", "metadata": {"name": "p", "annotations": {"a": "1"}}, "spec": spec},
        {"kind": "KuberhealthyCheck", "metadata": {"name": "k"},
         "spec": {"podSpec": spec, "extraAnnotations": {"a": "1"}}},
        {"kind": "KuberhealthyJob", "metadata": {"name": "kj"},
         "spec": {"podSpec": spec, "extraAnnotations": {"a": 1}}},
        {"kind": "HealthCheck", "metadata": {"name": "h"}, "spec": {"podSpec": template}},
    ]
    found = [p for o in objs for p in pods_of(o)]
    assert [p.where for p in found] == ["Deployment/d", "Job/j", "CronJob/c", "Pod/p", "KuberhealthyCheck/k",
                                        "KuberhealthyJob/kj", "HealthCheck/h"]
    assert all(p.spec == spec and p.annotations == {"a": "1"} for p in found)
    assert pods_of({"kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}}) == []
    assert holds_containers({"kind": "Rollout", "spec": {"template": template}})  # a kind pods_of does not know
    assert not holds_containers({"kind": "ConfigMap", "data": {"containers": "text"}})


# --- the example checks ---------------------------------------------------------------------------------------

def _example_docs() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, doc) for path in sorted(EXAMPLES.rglob("*.y*ml")) if path.suffix in (".yaml", ".yml")
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def _example_pods() -> list[PodOf]:
    return [p for _, doc in _example_docs() for p in pods_of(doc)]


def test_every_manifest_in_the_examples_that_makes_a_pod_is_found() -> None:
    docs = _example_docs()
    assert {path.parent.name for path, _ in docs} == {"dns-check", "http-check", "pod-restarts-check"}
    makers = [doc for _, doc in docs if holds_containers(doc)]
    assert len(makers) == len(_example_pods()) == 3
    assert all(pods_of(doc) for doc in makers)


@pytest.mark.parametrize("pod", _example_pods(), ids=lambda p: p.where)
def test_every_example_check_meets_the_restricted_profile(pod: PodOf) -> None:
    assert [str(v) for v in judge(pod.spec, pod.annotations)] == []


@pytest.mark.parametrize("pod", _example_pods(), ids=lambda p: p.where)
def test_every_example_names_a_non_root_user_so_the_kubelet_can_hold_it_to_run_as_non_root(pod: PodOf) -> None:
    pod_user = (pod.spec.get("securityContext") or {}).get("runAsUser")
    for c in pod.spec["containers"]:
        assert ((c.get("securityContext") or {}).get("runAsUser") or pod_user or 0) > 0, c["name"]


# --- the checker pod the daemon builds ----------------------------------------------------------------------

def _built(check: CheckSpec) -> dict[str, Any]:
    return build_pod(check, "run-1", 1_700_000_000.0, "http://kuberhealthy.kh.svc/externalCheckStatus", OWNER,
                     claimed=Claimed(run_key="secret"))


def _khcheck(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> CheckSpec:
    return CheckSpec.of({"metadata": {"namespace": "kh", "name": "c", "uid": "u"},
                         "spec": {"runInterval": "1m", "timeout": "1m", "podSpec": spec,
                                  "extraAnnotations": annotations or {}}})


def _healthcheck(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> CheckSpec:
    return CheckSpec.of_healthcheck({"metadata": {"namespace": "kh", "name": "c", "uid": "u"},
                                     "spec": {"podSpec": {"metadata": {"annotations": annotations or {}},
                                                          "spec": spec}}}, 600.0, 30.0)


@pytest.mark.parametrize("pod", _example_pods(), ids=lambda p: p.where)
@pytest.mark.parametrize("kind", [_khcheck, _healthcheck], ids=["khcheck", "healthcheck"])
def test_the_checker_pod_the_daemon_builds_from_an_example_meets_the_restricted_profile(
        pod: PodOf, kind: Callable[..., CheckSpec]) -> None:
    built = _built(kind(copy.deepcopy(dict(pod.spec))))
    assert built["spec"]["volumes"] and built["spec"]["containers"][0]["env"]  # the daemon's token and env went in
    assert [str(v) for v in judge(built["spec"], built["metadata"]["annotations"])] == []


@pytest.mark.parametrize("name", [*FIXTURES, *ALLOWED])
@pytest.mark.parametrize("kind", [_khcheck, _healthcheck], ids=["khcheck", "healthcheck"])
def test_the_daemon_adds_nothing_the_profile_forbids_and_hides_nothing_it_forbids(
        name: str, kind: Callable[..., CheckSpec]) -> None:
    pod, annotations = _changed(FIXTURES[name][0] if name in FIXTURES else ALLOWED[name])
    built = _built(kind(copy.deepcopy(pod), annotations))
    for level in (BASELINE, RESTRICTED):
        assert _rules(built["spec"], built["metadata"]["annotations"], level) == _rules(pod, annotations, level)
