"""The Pod Security Standards as a judge of pod specs: what the PodSecurity admission of a namespace labelled
`pod-security.kubernetes.io/enforce: restricted` (or `baseline`), version `latest`, would refuse.

Written from the standards' page on kubernetes.io (Concepts > Security > Pod Security Standards): each rule
is one control of the page, named by the id the admission controller gives it (`runAsNonRoot`,
`seccompProfile_restricted`, ...), so a refusal here reads like the API server's. The test bed's API server
(1.20) has no PodSecurity admission, so the chart, the examples and the checker pods the daemon builds are
judged here instead, from their manifests.

Pure: a pod's spec and annotations in, the broken rules out. Every rule broken is reported: where the
admission controller lets a restricted rule stand in for its baseline twin (restrictedVolumes for
hostPathVolumes, seccompProfile_restricted for seccompProfile_baseline, capabilities_restricted for
capabilities_baseline), both are named here. Stricter than the admission in two corners it relaxes:
Windows pods (`spec.os.name: windows`) and pods in a user namespace (`hostUsers: false`) are judged as any
other pod.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

BASELINE = "baseline"
RESTRICTED = "restricted"
LEVELS = (BASELINE, RESTRICTED)

# Baseline: capabilities a container may add (the container runtime's default set).
BASELINE_CAPABILITIES = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                                   "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
# Restricted: the one capability a container may add, after dropping ALL.
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
# Baseline: the "safe" sysctls (namespaced, isolated from other pods on the node), as of the newest version.
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
APPARMOR_TYPES = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
SECCOMP_TYPES = frozenset({"RuntimeDefault", "Localhost"})
# Restricted: the volume sources a pod may use (inline; anything else is refused, hostPath included).
VOLUME_SOURCES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image",
                            "persistentVolumeClaim", "projected", "secret"})
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")

# Rule ids, by level (restricted includes every baseline rule).
BASELINE_RULES = ("hostProcess", "hostNamespaces", "privileged", "capabilities_baseline", "hostPathVolumes",
                  "hostPorts", "appArmorProfile", "seLinuxOptions", "procMount", "seccompProfile_baseline",
                  "sysctls", "hostProbesAndHostLifecycle")
RESTRICTED_RULES = ("restrictedVolumes", "allowPrivilegeEscalation", "runAsNonRoot", "runAsUser",
                    "seccompProfile_restricted", "capabilities_restricted")


@dataclass(frozen=True)
class Violation:
    rule: str  # the admission controller's id of the control
    detail: str  # what breaks it, naming the pod field or the container

    def __str__(self) -> str:
        return f"{self.rule}: {self.detail}"


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(`<list>[<name>]`, container) for every container of the spec, init and ephemeral ones included."""
    for key in CONTAINER_LISTS:
        for i, item in enumerate(_list(spec.get(key))):
            c = _map(item)
            yield f"{key}[{c.get('name') or i}]", c


def _csc(container: Mapping[str, Any]) -> Mapping[str, Any]:
    return _map(container.get("securityContext"))


# --- baseline --------------------------------------------------------------------------------------------

def _host_process(spec: Mapping[str, Any], _: Mapping[str, str]) -> Iterator[str]:
    if _map(_map(spec.get("securityContext")).get("windowsOptions")).get("hostProcess"):
        yield "spec.securityContext.windowsOptions.hostProcess is true"
    for where, c in containers(spec):
        if _map(_csc(c).get("windowsOptions")).get("hostProcess"):
            yield f"{where}: securityContext.windowsOptions.hostProcess is true"


def _host_namespaces(spec: Mapping[str, Any], _: Mapping[str, str]) -> Iterator[str]:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            yield f"spec.{field} is true"


def _privileged(spec: Mapping[str, Any], _: Mapping[str, str]) -> Iterator[str]:
    for where, c in containers(spec):
        if _csc(c).get("privileged"):
            yield f"{where}: securityContext.privileged is true"


def _added_capabilities(c: Mapping[str, Any]) -> list[str]:
    return [str(cap) for cap in _list(_map(_csc(c).get("capabilities")).get("add"))]


def _capabilities_baseline(spec: Mapping[str, Any], _: Mapping[str, str]) -> Iterator[str]:
    for where, c in containers(spec):
        extra = [cap for cap in _added_capabilities(c) if cap not in BASELINE_CAPABILITIES]
        if extra:
            yield f"{where}: adds capabilities {extra} beyond the default set"


def _host_path_volumes(spec: Mapping[str, Any], _: Mapping[str, str]) -> Iterator[str]:
    for v in _list(spec.get("volumes")):
        if _map(v).get("hostPath") is not None:
            yield f"volume {_map(v).get('name')!r} is a hostPath"


def _host_ports(spec: Mapping[str, Any], _: Mapping[str, str]) -> Iterator[str]:
    for where, c in containers(spec):
        ports = [_map(p).get("hostPort") for p in _list(c.get("ports"))]
        if any(ports):
            yield f"{where}: hostPort {[p for p in ports if p]}"


def _app_armor(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    pod_type = _map(_map(spec.get("securityContext")).get("appArmorProfile")).get("type")
    if pod_type is not None and pod_type not in APPARMOR_TYPES:
        yield f"spec.securityContext.appArmorProfile.type is {pod_type!r}"
    for where, c in containers(spec):
        profile = _csc(c).get("appArmorProfile")
        if profile is not None and _map(profile).get("type") not in APPARMOR_TYPES:
            yield f"{where}: securityContext.appArmorProfile.type is {_map(profile).get('type')!r}"
    for key, value in annotations.items():
        if key.startswith(APPARMOR_ANNOTATION) and value and value != "runtime/default" \
                and not str(value).startswith("localhost/"):
            yield f"annotation {key}={value!r}"


def _bad_selinux(options: Any) -> list[str]:
    opts = _map(options)
    bad = []
    if str(opts.get("type") or "") not in SELINUX_TYPES:
        bad.append(f"type {opts.get('type')!r}")
    bad += [f"{field} set" for field in ("user", "role") if opts.get(field)]
    return bad


def _selinux(spec: Mapping[str, Any], _: Mapping[str, str]) -> Iterator[str]:
    bad = _bad_selinux(_map(spec.get("securityContext")).get("seLinuxOptions"))
    if bad:
        yield f"spec.securityContext.seLinuxOptions: {', '.join(bad)}"
    for where, c in containers(spec):
        bad = _bad_selinux(_csc(c).get("seLinuxOptions"))
        if bad:
            yield f"{where}: securityContext.seLinuxOptions: {', '.join(bad)}"


def _proc_mount(spec: Mapping[str, Any], _: Mapping[str, str]) -> Iterator[str]:
    for where, c in containers(spec):
        mount = _csc(c).get("procMount")
        if mount is not None and mount != "Default":
            yield f"{where}: securityContext.procMount is {mount!r}"


def _seccomp_type(sc: Mapping[str, Any]) -> Any:
    profile = sc.get("seccompProfile")
    return None if profile is None else _map(profile).get("type")


def _seccomp_baseline(spec: Mapping[str, Any], _: Mapping[str, str]) -> Iterator[str]:
    if _seccomp_type(_map(spec.get("securityContext"))) == "Unconfined":
        yield "spec.securityContext.seccompProfile.type is Unconfined"
    for where, c in containers(spec):
        if _seccomp_type(_csc(c)) == "Unconfined":
            yield f"{where}: securityContext.seccompProfile.type is Unconfined"


def _sysctls(spec: Mapping[str, Any], _: Mapping[str, str]) -> Iterator[str]:
    for s in _list(_map(spec.get("securityContext")).get("sysctls")):
        name = _map(s).get("name")
        if name not in SAFE_SYSCTLS:
            yield f"spec.securityContext.sysctls: {name!r} is not a safe sysctl"


def _host_probes(spec: Mapping[str, Any], _: Mapping[str, str]) -> Iterator[str]:
    for where, c in containers(spec):
        handlers = {probe: _map(c.get(probe)) for probe in ("livenessProbe", "readinessProbe", "startupProbe")}
        lifecycle = _map(c.get("lifecycle"))
        handlers.update({f"lifecycle.{hook}": _map(lifecycle.get(hook)) for hook in ("postStart", "preStop")})
        for name, handler in handlers.items():
            for kind in ("httpGet", "tcpSocket"):
                host = _map(handler.get(kind)).get("host")
                if host:
                    yield f"{where}: {name}.{kind}.host is {host!r}"


# --- restricted ------------------------------------------------------------------------------------------

def _restricted_volumes(spec: Mapping[str, Any], _: Mapping[str, str]) -> Iterator[str]:
    for item in _list(spec.get("volumes")):
        v = _map(item)
        sources = {k for k, val in v.items() if k != "name" and val is not None}
        if not sources & VOLUME_SOURCES:
            yield f"volume {v.get('name')!r} uses {sorted(sources) or ['no source']}"


def _allow_privilege_escalation(spec: Mapping[str, Any], _: Mapping[str, str]) -> Iterator[str]:
    for where, c in containers(spec):
        if _csc(c).get("allowPrivilegeEscalation") is not False:
            yield f"{where}: securityContext.allowPrivilegeEscalation must be false"


def _run_as_non_root(spec: Mapping[str, Any], _: Mapping[str, str]) -> Iterator[str]:
    pod = _map(spec.get("securityContext")).get("runAsNonRoot")
    if pod is False:
        yield "spec.securityContext.runAsNonRoot is false"
    for where, c in containers(spec):
        own = _csc(c).get("runAsNonRoot")
        if own is False:
            yield f"{where}: securityContext.runAsNonRoot is false"
        elif own is None and pod is not True:
            yield f"{where}: runAsNonRoot must be true on the pod or the container"


def _run_as_user(spec: Mapping[str, Any], _: Mapping[str, str]) -> Iterator[str]:
    if _map(spec.get("securityContext")).get("runAsUser") == 0:
        yield "spec.securityContext.runAsUser is 0"
    for where, c in containers(spec):
        if _csc(c).get("runAsUser") == 0:
            yield f"{where}: securityContext.runAsUser is 0"


def _seccomp_restricted(spec: Mapping[str, Any], _: Mapping[str, str]) -> Iterator[str]:
    pod = _seccomp_type(_map(spec.get("securityContext")))
    if pod is not None and pod not in SECCOMP_TYPES:
        yield f"spec.securityContext.seccompProfile.type is {pod!r}"
    for where, c in containers(spec):
        own = _seccomp_type(_csc(c))
        if own is not None and own not in SECCOMP_TYPES:
            yield f"{where}: securityContext.seccompProfile.type is {own!r}"
        elif own is None and pod not in SECCOMP_TYPES:
            yield f"{where}: seccompProfile.type must be RuntimeDefault or Localhost on the pod or the container"


def _capabilities_restricted(spec: Mapping[str, Any], _: Mapping[str, str]) -> Iterator[str]:
    for where, c in containers(spec):
        drop = [str(cap) for cap in _list(_map(_csc(c).get("capabilities")).get("drop"))]
        if "ALL" not in drop:
            yield f"{where}: securityContext.capabilities.drop must include ALL"
        extra = [cap for cap in _added_capabilities(c) if cap not in RESTRICTED_CAPABILITIES]
        if extra:
            yield f"{where}: adds capabilities {extra} (only NET_BIND_SERVICE may be added)"


RULES = {
    "hostProcess": _host_process, "hostNamespaces": _host_namespaces, "privileged": _privileged,
    "capabilities_baseline": _capabilities_baseline, "hostPathVolumes": _host_path_volumes,
    "hostPorts": _host_ports, "appArmorProfile": _app_armor, "seLinuxOptions": _selinux,
    "procMount": _proc_mount, "seccompProfile_baseline": _seccomp_baseline, "sysctls": _sysctls,
    "hostProbesAndHostLifecycle": _host_probes,
    "restrictedVolumes": _restricted_volumes, "allowPrivilegeEscalation": _allow_privilege_escalation,
    "runAsNonRoot": _run_as_non_root, "runAsUser": _run_as_user, "seccompProfile_restricted": _seccomp_restricted,
    "capabilities_restricted": _capabilities_restricted,
}
assert set(RULES) == set(BASELINE_RULES) | set(RESTRICTED_RULES)


def judge(spec: Mapping[str, Any], annotations: Mapping[str, str] | None = None,
          level: str = RESTRICTED) -> list[Violation]:
    """Every rule of `level` the pod breaks ([] = admitted). `spec` is a PodSpec; `annotations` the pod's
    (AppArmor's annotations are the only ones judged)."""
    if level not in LEVELS:
        raise ValueError(f"level {level!r}: one of {LEVELS}")
    rules = BASELINE_RULES + (RESTRICTED_RULES if level == RESTRICTED else ())
    return [Violation(rule, detail) for rule in rules for detail in RULES[rule](spec, annotations or {})]


# --- where manifests keep their pods ----------------------------------------------------------------------

@dataclass(frozen=True)
class PodOf:
    """A pod some manifest makes: `where` names the object (`Kind/name`), `spec` its PodSpec, `annotations` the
    pod's."""

    where: str
    spec: Mapping[str, Any]
    annotations: Mapping[str, str]


TEMPLATE_KINDS = ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "ReplicationController", "Job")
CHECK_KINDS = ("KuberhealthyCheck", "KuberhealthyJob")


def pods_of(obj: Mapping[str, Any]) -> list[PodOf]:
    """The pods an object makes: a Pod itself, a workload's pod template (a CronJob's job template's), a
    khcheck's or khjob's `spec.podSpec`, a HealthCheck's `spec.podSpec.spec` (with `.metadata`)."""
    kind, spec = str(obj.get("kind") or ""), _map(obj.get("spec"))
    where = f"{kind}/{_map(obj.get('metadata')).get('name')}"
    if kind == "Pod":
        return [PodOf(where, spec, _map(_map(obj.get("metadata")).get("annotations")))]
    template: Mapping[str, Any] | None = None
    if kind in TEMPLATE_KINDS:
        template = _map(spec.get("template"))
    elif kind == "CronJob":
        template = _map(_map(_map(spec.get("jobTemplate")).get("spec")).get("template"))
    elif kind == "HealthCheck":
        template = _map(spec.get("podSpec"))
    # a check's extraAnnotations land on its pods too
    extra = {str(k): str(v) for k, v in _map(spec.get("extraAnnotations")).items()}
    if template is not None:
        annotations = dict(_map(_map(template.get("metadata")).get("annotations")))
        if kind == "HealthCheck":
            annotations.update(extra)
        return [PodOf(where, _map(template.get("spec")), annotations)]
    if kind in CHECK_KINDS:
        return [PodOf(where, _map(spec.get("podSpec")), extra)]
    return []


def holds_containers(value: Any) -> bool:
    """Whether a `containers` list sits anywhere in the value: an object that makes pods of a kind pods_of does
    not know would show it."""
    if isinstance(value, Mapping):
        return isinstance(value.get("containers"), list) or any(holds_containers(v) for v in value.values())
    if isinstance(value, list):
        return any(holds_containers(v) for v in value)
    return False
