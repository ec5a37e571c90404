"""The Helm chart.

`helm lint` and `helm template` check what the chart renders; every rendered object is validated against
the Kubernetes OpenAPI schemas of the test bed's version (the schema its API server publishes) and of a
current version (kubernetes-validate's), and by the API server's server-side dry-run; a real `helm
install` into the test API server checks that it applies, and then the chart's ServiceAccount is used
for real API calls to prove that its RBAC allows what the daemon does and nothing the daemon has no
business doing. The Grafana dashboard's queries are checked against a real daemon's /metrics.

helm comes from `bash hack/tools.sh` (or $KH_HELM, or PATH); without it the helm tests skip. The image
and the Dockerfile are tested in test_image.py.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import re
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kuberhealthy.base import config as kh_config
from kuberhealthy.base.errors import ConfigError
from kuberhealthy.kube import KHCHECKS, KHJOBS, KHSTATES
from kuberhealthy.records import checkpod
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import API_VERSION, checker_pod, khc, khcheck, khjob, khs, khstate
from testbed.cluster.crds import load_crds
from testbed.cluster.objects import create_namespace, delete_quietly
from testbed.daemons.inprocess import InProcessDaemon
from testbed.node.e2e import chart_values
from testbed.paths import CHART, REPO
from testbed.sim.kubelet import SimKubelet
from testbed.tools.helm import Helm
from testbed.wait import wait_for

GROUP_PATH = f"/apis/{API_VERSION}"
RBAC_KINDS = ("Role", "ClusterRole")


# --- helm --------------------------------------------------------------------------------------------

def find(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def config_file(objs: list[dict[str, Any]], name: str = "kuberhealthy") -> dict[str, Any]:
    cm = one(objs, "ConfigMap", name)
    doc = yaml.safe_load(cm["data"]["kuberhealthy.yaml"])
    assert isinstance(doc, dict)
    return doc


def bound_to_daemon(objs: list[dict[str, Any]], kind: str, sa: str = "kuberhealthy") -> list[dict[str, Any]]:
    """Bindings of the given kind whose subjects include the daemon's ServiceAccount."""
    return [b for b in find(objs, kind)
            if any(s.get("kind") == "ServiceAccount" and s.get("name") == sa for s in b.get("subjects") or [])]


# Value sets that switch on every optional branch of the chart.
VARIATIONS = {
    "defaults": (),
    "target namespace": ("targetNamespace=apps",),
    "prometheus with service monitor and rule": (
        "prometheus.enabled=true", "prometheus.serviceMonitor.enabled=true", "prometheus.prometheusRule.enabled=true"),
    "every bundled check, cluster-wide": (
        "check.dnsExternal.enabled=true", "check.podRestarts.enabled=true", "check.podStatus.enabled=true",
        "check.networkConnection.enabled=true", "check.podRestarts.allNamespaces=true",
        "check.podStatus.allNamespaces=true"),
    "single replica, renamed, hard anti-affinity": (
        "deployment.replicas=1", "config.enableForceMaster=true", "nameOverride=kh-canary",
        "deployment.podAntiAffinity=hard", "tolerations.master=true", "securityContext.enabled=false"),
    "grafana dashboard, influx password from a secret": (
        "grafana.dashboards.enabled=true", "grafana.dashboards.annotations.grafana_folder=Kuberhealthy",
        "influx.passwordSecret=kh-influx", "config.enableInflux=true", "config.influxURL=http://influxdb:8086",
        "config.influxDB=kuberhealthy", "config.influxUsername=kuberhealthy"),
    "tuned probes, extra env from secrets, volumes, topology spread": (
        "deployment.livenessProbe.failureThreshold=6", "deployment.readinessProbe.periodSeconds=10",
        "deployment.startupProbe.tcpSocket.port=http",
        "deployment.extraEnv[0].name=KH_EXTERNAL_REPORTING_URL",
        "deployment.extraEnv[0].valueFrom.configMapKeyRef.name=kh-urls",
        "deployment.extraEnv[0].valueFrom.configMapKeyRef.key=reporting",
        "deployment.envFrom[0].secretRef.name=kh-env", "deployment.envFrom[0].prefix=KH_",
        "deployment.extraVolumes[0].name=ca", "deployment.extraVolumes[0].configMap.name=corp-ca",
        "deployment.extraVolumeMounts[0].name=ca", "deployment.extraVolumeMounts[0].mountPath=/etc/ssl/corp",
        "deployment.extraVolumeMounts[0].readOnly=true",
        "deployment.topologySpreadConstraints[0].maxSkew=1",
        "deployment.topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
        "deployment.topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway"),
    "network policy with namespaces and node addresses": (
        "networkPolicy.enabled=true", "networkPolicy.allowedNamespaces={monitoring,ingress-nginx}",
        "networkPolicy.allowedCIDRs={10.0.0.0/24,fd00::/64}", "config.trustedOrigins={https://kh.example.com}"),
    "https listener from a secret, v3 metrics and check defaults": (
        "tls.secretName=kh-tls", "tls.port=8443", "config.metricsStyle=v3", "checkReaper.logLevel=trace",
        "config.healthCheckDefaults.runInterval=5m", "config.healthCheckDefaults.timeout=1m",
        "config.promMetricsConfig.labelAllowlist={team,severity}", "config.promMetricsConfig.labelValueMaxLength=64"),
}


# --- lint and render -----------------------------------------------------------------------------------

@pytest.mark.parametrize("values", VARIATIONS.values(), ids=VARIATIONS.keys())
def test_the_chart_passes_strict_helm_lint(helm: Helm, values: tuple[str, ...]) -> None:
    args = ["lint", "--strict", str(CHART)]
    for v in values:
        args += ["--set", v]
    proc = helm.run(*args)
    assert "0 chart(s) failed" in proc.stdout


def test_the_default_render_runs_two_hardened_replicas_with_the_contract_probes_and_env(helm: Helm) -> None:
    objs = helm.template()
    dep = one(objs, "Deployment", "kuberhealthy")
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]

    assert spec["replicas"] == 2
    assert spec["selector"]["matchLabels"] == {"app": "kuberhealthy"}  # as v2: upgrades keep the selector
    assert pod["serviceAccountName"] == "kuberhealthy"
    assert pod["terminationGracePeriodSeconds"] == 60
    assert container["args"][:2] == ["--config", "/etc/config/kuberhealthy.yaml"]
    assert "command" not in container  # the image's ENTRYPOINT (kuberhealthy) runs
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}

    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"

    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/etc/config"]]["configMap"]["name"] == "kuberhealthy"
    assert "emptyDir" in volumes[mounts["/tmp"]]  # the only writable path

    psc, csc = pod["securityContext"], container["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0
    assert csc["readOnlyRootFilesystem"] is True
    assert csc["allowPrivilegeEscalation"] is False
    assert csc["capabilities"]["drop"] == ["ALL"]

    svc = one(objs, "Service", "kuberhealthy")
    assert svc["spec"]["selector"] == {"app": "kuberhealthy"}
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]

    pdb = one(objs, "PodDisruptionBudget", "kuberhealthy-pdb")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == {"app": "kuberhealthy"}
    one(objs, "ServiceAccount", "kuberhealthy")


# A values file as a Kuberhealthy v2 (Go) chart user would have it: same key names and shapes.
V2_VALUES = """
checkReaper:
  logLevel: error
  maxKHJobAge: 30m
  maxCheckPodAge: 24h
  maxCompletedPodCount: 2
  maxErrorPodCount: 3
prometheus:
  enabled: true
  name: prometheus
  serviceMonitor:
    enabled: true
    release: kube-prometheus-stack
    additionalLabels: {}
    endpoints:
      interval: 30s
      bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
    namespace: monitoring
imageRegistry: {}
image:
  registry: registry.example.com
  repository: kuberhealthy-python
  tag:
resources:
  requests: {cpu: 400m, memory: 300Mi}
  limits: {cpu: 2, memory: 1Gi}
podDisruptionBudget:
  enabled: true
  minAvailable: 1
  maxUnavailable:
tolerations:
  master: true
deployment:
  replicas: 3
  maxSurge: 0
  maxUnavailable: 1
  imagePullPolicy: Always
  nodeSelector: {kubernetes.io/os: linux}
  podAnnotations: {team: sre}
  env:
    CHECK_REAPER_RUN_INTERVAL: "45s"
  command:
  - /app/kuberhealthy
  affinity: {}
  podAntiAffinity: hard
securityContext:
  enabled: true
  runAsNonRoot: true
  runAsUser: 999
  fsGroup: 999
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
podSecurityPolicy:
  enabled: false
service:
  externalPort: 80
  type: ClusterIP
  annotations: {}
check:
  daemonset:
    serviceAccountName:
    enabled: true
    runInterval: 15m
    timeout: 12m
    image: {registry: kuberhealthy, repository: daemonset-check, tag: v3.3.0}
    extraEnvs: {}
    nodeSelector: {}
    tolerations:
    resources: {requests: {cpu: 10m, memory: 50Mi}}
  dnsInternal:
    enabled: false
  storage:
    enabled: false
    storageClass: [""]
"""


def test_a_kuberhealthy_v2_values_file_still_renders_with_its_settings(helm: Helm, tmp_path: Path) -> None:
    values = tmp_path / "v2-values.yaml"
    values.write_text(V2_VALUES)
    objs = helm.template(extra=("--values", str(values)))
    helm.run("lint", "--strict", str(CHART), "--values", str(values))

    cfg = config_file(objs)
    assert (cfg["logLevel"], cfg["maxKHJobAge"], cfg["maxCheckPodAge"]) == ("error", "30m", "24h")
    assert (cfg["maxCompletedPodCount"], cfg["maxErrorPodCount"]) == (2, 3)
    dep = one(objs, "Deployment", "kuberhealthy")
    pod = dep["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert dep["spec"]["replicas"] == 3
    assert container["image"] == "registry.example.com/kuberhealthy-python:0.1.0"
    assert "command" not in container  # v2's /app/kuberhealthy does not exist in this image
    assert {"name": "CHECK_REAPER_RUN_INTERVAL", "value": "45s"} in container["env"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert dep["spec"]["template"]["metadata"]["annotations"] == {"team": "sre"}
    assert any(t["key"] == "node-role.kubernetes.io/master" for t in pod["tolerations"])
    assert "requiredDuringSchedulingIgnoredDuringExecution" in pod["affinity"]["podAntiAffinity"]
    assert one(objs, "ServiceMonitor", "kuberhealthy")["metadata"]["namespace"] == "monitoring"
    assert {c["metadata"]["name"] for c in find(objs, "KuberhealthyCheck")} == {"daemonset", "deployment"}


def test_a_single_replica_gets_no_disruption_budget_that_would_block_node_drains(helm: Helm) -> None:
    assert find(helm.template("deployment.replicas=1"), "PodDisruptionBudget") == []


def test_extra_env_and_args_reach_the_container_but_cannot_replace_the_pod_identity(helm: Helm) -> None:
    objs = helm.template("deployment.env.KH_EXTERNAL_REPORTING_URL=http://kh.example/externalCheckStatus",
                         "deployment.env.POD_NAME=spoofed", "deployment.args={--debug}")
    (container,) = one(objs, "Deployment", "kuberhealthy")["spec"]["template"]["spec"]["containers"]
    names = [e["name"] for e in container["env"]]
    assert names.count("POD_NAME") == 1
    env = {e["name"]: e for e in container["env"]}
    assert "valueFrom" in env["POD_NAME"]
    assert env["KH_EXTERNAL_REPORTING_URL"]["value"] == "http://kh.example/externalCheckStatus"
    assert container["args"] == ["--config", "/etc/config/kuberhealthy.yaml", "--debug"]


def test_the_config_map_holds_a_config_file_the_daemon_accepts_without_warnings(
        helm: Helm, caplog: pytest.LogCaptureFixture) -> None:
    cfg = config_file(helm.template())
    assert set(cfg) >= {"listenAddress", "logLevel", "maxKHJobAge", "maxCheckPodAge", "maxCompletedPodCount",
                        "maxErrorPodCount", "targetNamespace", "leaderElection", "enableForceMaster",
                        "enableInflux", "checkReaperRunInterval", "stateReaperInterval", "promMetricsConfig"}
    assert cfg["listenAddress"] == ":8080"
    assert cfg["leaderElection"]["leaseName"] == "kuberhealthy"
    assert "externalCheckReportingURL" not in cfg  # the daemon's default already names this Service

    with caplog.at_level(logging.WARNING, logger="kuberhealthy.base.config"):
        loaded = kh_config.from_mapping(cfg, environ={"POD_NAMESPACE": "monitoring", "POD_NAME": "kh-0"})
    assert [r.getMessage() for r in caplog.records] == []
    assert loaded.listen_port == 8080
    assert loaded.max_check_pod_age == 72 * 3600
    assert loaded.leader_election.lease_duration == 15
    assert loaded.external_check_reporting_url == \
        "http://kuberhealthy.monitoring.svc.cluster.local/externalCheckStatus"


def test_values_reach_the_config_file_with_their_types_intact(helm: Helm) -> None:
    cfg = config_file(helm.template(
        "checkReaper.logLevel=debug", "checkReaper.maxCheckPodAge=1h30m", "checkReaper.maxErrorPodCount=0",
        "targetNamespace=apps", "leaderElection.leaseName=kh-lease", "config.enableInflux=true",
        "config.influxURL=http://influx:8086", "config.influxDB=kh", "config.influxPassword=p: w#1",
        "config.promMetricsConfig.errorLabelMaxLength=100"))
    loaded = kh_config.from_mapping(cfg, environ={"POD_NAMESPACE": "monitoring"})
    assert loaded.log_level == "debug"
    assert loaded.max_check_pod_age == 5400
    assert loaded.max_error_pod_count == 0
    assert loaded.target_namespace == "apps"
    assert loaded.leader_election.lease_name == "kh-lease"
    assert loaded.enable_influx and loaded.influx_url == "http://influx:8086" and loaded.influx_db == "kh"
    assert loaded.influx_password == "p: w#1"  # YAML-special characters survive
    assert loaded.prom_metrics.error_label_max_length == 100


def test_a_renamed_service_or_port_points_checker_pods_at_the_right_url(helm: Helm) -> None:
    renamed = config_file(helm.template("nameOverride=kh-canary", "service.externalPort=8081"), "kh-canary")
    assert renamed["externalCheckReportingURL"] == \
        "http://kh-canary.monitoring.svc.cluster.local:8081/externalCheckStatus"
    explicit = config_file(helm.template("config.externalCheckReportingURL=https://kh.example/externalCheckStatus"))
    assert explicit["externalCheckReportingURL"] == "https://kh.example/externalCheckStatus"


def test_force_master_with_several_replicas_is_refused(helm: Helm) -> None:
    proc = helm.run("template", "kh", str(CHART), "--set", "config.enableForceMaster=true", check=False)
    assert proc.returncode != 0
    assert "enableForceMaster" in proc.stderr


def test_v3s_settings_reach_the_config_file_and_the_daemon_reads_them(helm: Helm) -> None:
    objs = helm.template(*VARIATIONS["https listener from a secret, v3 metrics and check defaults"])
    cfg = config_file(objs)
    env = {e["name"]: e["value"] for e in _container(objs)["env"] if "value" in e}
    loaded = kh_config.from_mapping(cfg, environ={"POD_NAMESPACE": "monitoring", **env})
    assert loaded.metrics_style == "v3"
    assert loaded.log_level == "debug"  # v3's trace is our debug
    assert (loaded.healthcheck_run_interval, loaded.healthcheck_timeout) == (300, 60)
    assert loaded.prom_metrics.label_allowlist == ("team", "severity")
    assert loaded.prom_metrics.label_value_max_length == 64
    defaults = kh_config.from_mapping(config_file(helm.template()), environ={"POD_NAMESPACE": "monitoring"})
    assert defaults == kh_config.from_mapping({}, environ={"POD_NAMESPACE": "monitoring",
                                                            "POD_NAME": defaults.pod_name})


def test_the_https_listener_is_off_by_default_and_a_secret_turns_it_on_end_to_end(helm: Helm) -> None:
    off = helm.template()
    assert [p["name"] for p in _container(off)["ports"]] == ["http"]
    assert [p["name"] for p in one(off, "Service", "kuberhealthy")["spec"]["ports"]] == ["http"]
    assert not {"KH_TLS_CERT_FILE", "KH_TLS_KEY_FILE"} & {e["name"] for e in _container(off)["env"]}

    on = helm.template("tls.secretName=kh-tls")
    pod = one(on, "Deployment", "kuberhealthy")["spec"]["template"]["spec"]
    container = _container(on)
    assert {"name": "https", "containerPort": 8443, "protocol": "TCP"} in container["ports"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == "kh-tls"
    assert {i["key"] for i in volume["secret"]["items"]} == {"tls.crt", "tls.key"}
    assert volume["secret"]["defaultMode"] == 0o440  # the pod's group (fsGroup) reads it, nobody else
    assert {"name": "tls", "mountPath": "/etc/tls", "readOnly": True} in container["volumeMounts"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["KH_TLS_CERT_FILE"], env["KH_TLS_KEY_FILE"]) == ("/etc/tls/tls.crt", "/etc/tls/tls.key")
    assert {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"} in \
        one(on, "Service", "kuberhealthy")["spec"]["ports"]
    # The daemon, given the rendered file and env, listens for HTTPS on the container port the Service targets.
    loaded = kh_config.from_mapping(config_file(on), environ={"POD_NAMESPACE": "monitoring", **env})
    assert (loaded.tls_cert_file, loaded.tls_key_file) == ("/etc/tls/tls.crt", "/etc/tls/tls.key")
    assert loaded.listen_tls_port == 8443 and loaded.listen_port == 8080

    moved = helm.template("tls.secretName=kh-tls", "tls.port=8443")
    assert [p["port"] for p in one(moved, "Service", "kuberhealthy")["spec"]["ports"]] == [80, 8443]
    # Files of the user's own volume, named in config, open the same ports without the chart's volume.
    own = helm.template("config.tlsCertFile=/etc/ssl/kh/tls.crt", "config.tlsKeyFile=/etc/ssl/kh/tls.key")
    assert [p["name"] for p in _container(own)["ports"]] == ["http", "https"]
    assert [p["name"] for p in one(own, "Service", "kuberhealthy")["spec"]["ports"]] == ["http", "https"]
    own_pod = one(own, "Deployment", "kuberhealthy")["spec"]["template"]["spec"]
    assert "tls" not in {v["name"] for v in own_pod["volumes"]}


def test_https_values_that_contradict_each_other_are_refused(helm: Helm) -> None:
    assert "leave them empty" in _refused(helm, "--set", "tls.secretName=kh-tls",
                                          "--set", "config.tlsCertFile=/etc/ssl/kh/tls.crt")
    assert "tls.port and service.externalPort are both 80" in _refused(
        helm, "--set", "tls.secretName=kh-tls", "--set", "tls.port=80")
    assert 'the volume name "tls" is the chart\'s own' in _refused(
        helm, "--set", "tls.secretName=kh-tls", "--set", "deployment.extraVolumes[0].name=tls",
        "--set", "deployment.extraVolumes[0].emptyDir.medium=Memory")
    helm.template("deployment.extraVolumes[0].name=tls", "deployment.extraVolumes[0].emptyDir.medium=Memory")
    assert "listenAddressTLS" in _refused(helm, "--set", "config.listenAddressTLS=:9443")  # the container port
    assert "secretName" in _refused(helm, "--set", "tls.secretName=Not_A_Name")
    env = {e["name"]: e for e in _container(helm.template(
        "tls.secretName=kh-tls", "deployment.env.KH_TLS_CERT_FILE=/elsewhere"))["env"]}
    assert env["KH_TLS_CERT_FILE"]["value"] == "/etc/tls/tls.crt"  # the chart's own, as the pod identity


def test_a_bad_duration_is_refused_by_the_values_schema(helm: Helm) -> None:
    proc = helm.run("template", "kh", str(CHART), "--set-string", "checkReaper.maxKHJobAge=15 minutes", check=False)
    assert proc.returncode != 0
    assert "maxKHJobAge" in proc.stderr


@pytest.mark.parametrize("values", VARIATIONS.values(), ids=VARIATIONS.keys())
def test_no_rendered_rbac_rule_uses_a_wildcard(helm: Helm, values: tuple[str, ...]) -> None:
    roles = [o for o in helm.template(*values) if o["kind"] in RBAC_KINDS]
    assert roles
    for role in roles:
        assert "aggregationRule" not in role
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule, role["metadata"]["name"]
            for key in ("verbs", "resources", "apiGroups", "resourceNames"):
                for item in rule.get(key) or []:
                    assert "*" not in item, f"{role['kind']}/{role['metadata']['name']} {key}: {item!r}"


def _rules_by_resource(role: dict[str, Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                out.setdefault(f"{group}/{res}", set()).update(rule["verbs"])
    return out


DAEMON_CHECK_RULES = {
    "comcast.github.io/khchecks": {"get", "list", "watch", "patch"},  # patch: the run-now annotation
    "comcast.github.io/khjobs": {"get", "list", "watch", "patch", "delete"},
    "comcast.github.io/khstates": {"get", "list", "watch", "create", "update", "delete"},
    "/pods": {"get", "list", "watch", "create", "delete"},
    "/pods/eviction": {"create"},
    "/pods/log": {"get"},  # a failed checker's log tail for its history entry
    "/events": {"create", "patch", "list"},  # Events on checks, repeats counted by a patch; a check's listed
    # for GET /api/events
    # HealthChecks: watched; metadata patched (run-now annotation, run binding where the CRD prunes the
    # status's, v3's finalizer); state written through the status subresource. Never created or deleted.
    "kuberhealthy.github.io/healthchecks": {"get", "list", "watch", "patch"},
    "kuberhealthy.github.io/healthchecks/status": {"get", "update", "patch"},
}
LEASE_RULES = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["kuberhealthy"],
     "verbs": ["get", "list", "watch", "update"]},
    # v3's Lease: read only (while v3's controller holds it, no HealthCheck runs here)
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["kuberhealthy-controller"],
     "verbs": ["get"]},
]
TOKEN_REVIEW_RULES = {"authentication.k8s.io/tokenreviews": {"create"}}


def cluster_roles_of_daemon(objs: list[dict[str, Any]]) -> dict[str, dict[str, set[str]]]:
    """The rules of every ClusterRole bound to the daemon, by ClusterRole name."""
    return {b["roleRef"]["name"]: _rules_by_resource(one(objs, "ClusterRole", b["roleRef"]["name"]))
            for b in bound_to_daemon(objs, "ClusterRoleBinding")}


def test_by_default_the_daemon_gets_exactly_its_check_rules_cluster_wide(helm: Helm) -> None:
    objs = helm.template()
    assert cluster_roles_of_daemon(objs) == {"kuberhealthy-monitoring": DAEMON_CHECK_RULES,
                                             "kuberhealthy-monitoring-tokenreviews": TOKEN_REVIEW_RULES}
    (rb,) = bound_to_daemon(objs, "RoleBinding")
    lease_role = one(objs, "Role", rb["roleRef"]["name"])
    assert lease_role["metadata"]["namespace"] == "monitoring"
    assert lease_role["rules"] == LEASE_RULES


def test_with_a_target_namespace_the_daemon_gets_a_role_there_and_a_cluster_role_only_for_token_reviews(
        helm: Helm) -> None:
    objs = helm.template("targetNamespace=apps")
    # Only TokenReviews cluster-wide: they are not namespaced.
    assert cluster_roles_of_daemon(objs) == {"kuberhealthy-monitoring-tokenreviews": TOKEN_REVIEW_RULES}
    bindings = {b["metadata"]["namespace"]: b for b in bound_to_daemon(objs, "RoleBinding")}
    assert set(bindings) == {"apps", "monitoring"}
    check_role = one(objs, "Role", bindings["apps"]["roleRef"]["name"])
    assert check_role["metadata"]["namespace"] == "apps"
    assert _rules_by_resource(check_role) == DAEMON_CHECK_RULES
    # In its own namespace only its Lease (it reads its own pod only when checks run beside it).
    own = [r for r in find(objs, "Role") if r["metadata"]["namespace"] == "monitoring"
           and r["metadata"]["name"] == bindings["monitoring"]["roleRef"]["name"]]
    assert own[0]["rules"] == LEASE_RULES
    # The bundled checks follow the daemon into the target namespace.
    assert {c["metadata"]["namespace"] for c in find(objs, "KuberhealthyCheck")} == {"apps"}
    assert config_file(objs)["targetNamespace"] == "apps"


def test_prometheus_values_render_scrape_annotations_or_a_service_monitor(helm: Helm) -> None:
    annotated = helm.template("prometheus.enabled=true")
    svc = one(annotated, "Service", "kuberhealthy")
    assert svc["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert svc["metadata"]["annotations"]["prometheus.io/port"] == "8080"
    assert find(annotated, "ServiceMonitor") == []

    objs = helm.template("prometheus.enabled=true", "prometheus.serviceMonitor.enabled=true",
                         "prometheus.serviceMonitor.additionalLabels.team=sre")
    sm = one(objs, "ServiceMonitor", "kuberhealthy")
    assert sm["metadata"]["namespace"] == "monitoring"
    assert sm["metadata"]["labels"]["team"] == "sre"
    assert sm["spec"]["selector"]["matchLabels"] == {"app": "kuberhealthy"}
    assert sm["spec"]["namespaceSelector"]["matchNames"] == ["monitoring"]
    assert sm["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]
    assert "annotations" not in one(objs, "Service", "kuberhealthy")["metadata"]

    assert find(helm.template(), "ServiceMonitor") == []


def test_the_prometheus_rule_alerts_per_check_on_repeated_failures_and_on_staleness(helm: Helm) -> None:
    assert find(helm.template("prometheus.enabled=true"), "PrometheusRule") == []
    objs = helm.template("prometheus.enabled=true", "prometheus.prometheusRule.enabled=true",
                         "prometheus.prometheusRule.consecutiveFailures=5",
                         "prometheus.prometheusRule.staleIntervals=4")
    rules = {r["alert"]: r for g in one(objs, "PrometheusRule", "kuberhealthy")["spec"]["groups"] for r in g["rules"]}
    assert {"KuberhealthyError", "ClusterUnhealthy", "KuberhealthyCheckFailing"} <= set(rules)  # v2's, kept
    # Scoped to this release's scrape job and namespace; the rules' behaviour is in test_alert_rules.py.
    sel = '{job="kuberhealthy", namespace="monitoring"}'
    failing = rules["KuberhealthyCheckFailingRepeatedly"]["expr"]
    # (and whatever they add for paused checks: test_alert_rules.py tests that)
    assert failing.startswith(f"max by (check) (kuberhealthy_check_consecutive_failures{sel}) >= 5")
    stale = " ".join(rules["KuberhealthyCheckStale"]["expr"].split())
    assert stale.startswith(f"time() - max by (check) (kuberhealthy_check_last_success_timestamp_seconds{sel}) "
                            f"> 4 * max by (check) (kuberhealthy_check_interval_seconds{sel})")
    assert rules["KuberhealthyError"]["expr"] == f"absent(up{sel} == 1)"
    renamed = helm.template("prometheus.enabled=true", "prometheus.prometheusRule.enabled=true",
                            "prometheus.prometheusRule.job=kubernetes-service-endpoints", namespace="kh")
    expr = one(renamed, "PrometheusRule", "kuberhealthy")["spec"]["groups"][0]["rules"][0]["expr"]
    assert expr == 'absent(up{job="kubernetes-service-endpoints", namespace="kh"} == 1)'
    assert "{{ $labels.check }}" in rules["KuberhealthyCheckStale"]["annotations"]["description"]


def test_the_bundled_checks_render_as_valid_khchecks_with_their_own_service_accounts(helm: Helm) -> None:
    objs = helm.template(*VARIATIONS["every bundled check, cluster-wide"])
    checks = {c["metadata"]["name"]: c for c in find(objs, "KuberhealthyCheck")}
    assert set(checks) == {"daemonset", "deployment", "dns-status-internal", "dns-status-external",
                           "pod-restarts", "pod-status", "network-connection-check"}
    accounts = {sa["metadata"]["name"] for sa in find(objs, "ServiceAccount")}
    for name, check in checks.items():
        pod = check["spec"]["podSpec"]
        assert pod["containers"] and all(c.get("image") for c in pod["containers"]), name
        assert re.fullmatch(r"(\d+(ms|s|m|h))+", check["spec"]["runInterval"]), name
        if "serviceAccountName" in pod:
            assert pod["serviceAccountName"] in accounts, name
        for container in pod["containers"]:
            env_names = [e["name"] for e in container.get("env") or []]
            assert len(env_names) == len(set(env_names)), f"{name}: duplicate env {env_names}"
    # allNamespaces binds the cluster-wide roles to the account in the release namespace.
    for crb in find(objs, "ClusterRoleBinding"):
        assert all(s["namespace"] == "monitoring" for s in crb["subjects"])


def test_the_network_policy_is_off_by_default(helm: Helm) -> None:
    assert find(helm.template(), "NetworkPolicy") == []


def test_the_network_policy_admits_port_8080_from_checker_pods_listed_namespaces_and_cidrs(helm: Helm) -> None:
    objs = helm.template("networkPolicy.enabled=true", "networkPolicy.allowedNamespaces={monitoring,ingress-nginx}",
                         "networkPolicy.allowedCIDRs={10.0.0.0/24,fd00::/64}")
    policy = one(objs, "NetworkPolicy", "kuberhealthy")["spec"]
    pod_labels = one(objs, "Deployment", "kuberhealthy")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": 8080, "protocol": "TCP"}]
    container = one(objs, "Deployment", "kuberhealthy")["spec"]["template"]["spec"]["containers"][0]
    assert [p["containerPort"] for p in container["ports"]] == [8080]
    checkers, namespaces, *blocks, helm_test = rule["from"]
    # every checker pod carries this label (records/checkpod.py), whichever namespace its check is in
    assert checkers == {"namespaceSelector": {}, "podSelector": {"matchLabels": {
        checkpod.APP_LABEL: checkpod.APP_LABEL_VALUE}}}
    assert namespaces == {"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["monitoring", "ingress-nginx"]}]}}
    assert blocks == [{"ipBlock": {"cidr": "10.0.0.0/24"}}, {"ipBlock": {"cidr": "fd00::/64"}}]
    # the chart's own `helm test` pod, in the release namespace only (no namespaceSelector)
    test_pod = one(objs, "Pod", "kuberhealthy-test")
    assert helm_test == {"podSelector": {"matchLabels": {
        k: test_pod["metadata"]["labels"][k] for k in ("app.kubernetes.io/name", "app.kubernetes.io/component")}}}

    only_checkers = one(helm.template("networkPolicy.enabled=true"), "NetworkPolicy", "kuberhealthy")["spec"]
    assert only_checkers["ingress"][0]["from"] == [checkers, helm_test]


def test_a_network_policy_value_that_is_no_cidr_or_no_key_is_refused_by_the_values_schema(helm: Helm) -> None:
    for bad in ("networkPolicy.allowedCIDRs={10.0.0.1}", "networkPolicy.allowedNamespaces={Not_A_Name}",
                "networkPolicy.allowedPorts={80}"):
        proc = helm.run("template", "kh", str(CHART), "--set", bad, check=False)
        assert proc.returncode != 0 and "networkPolicy" in proc.stderr, bad


def test_include_crds_renders_the_three_v2_crds_and_v3_s_healthchecks(helm: Helm) -> None:
    crds = find(helm.template(extra=("--include-crds",)), "CustomResourceDefinition")
    assert {c["metadata"]["name"] for c in crds} == {
        "khchecks.comcast.github.io", "khstates.comcast.github.io", "khjobs.comcast.github.io",
        "healthchecks.kuberhealthy.github.io"}
    assert find(helm.template(), "CustomResourceDefinition") == []


# --- the values schema: closed, config generated from config.py, v2's keys accepted and named ----------------

SCHEMA = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
# Maps and Kubernetes objects the chart copies as they are: the schema leaves them open on purpose.
FREE_BY_NATURE = {"global", "resources", "nodeSelector", "podAnnotations", "affinity", "annotations", "httpGet",
                  "tcpSocket", "exec", "grpc", "valueFrom", "configMapRef", "secretRef"}


def _chart_schema_module() -> Any:
    spec = importlib.util.spec_from_file_location("chart_schema", REPO / "hack" / "chart_schema.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _refused(helm: Helm, *args: str) -> str:
    proc = helm.run("template", "kh", str(CHART), *args, check=False)
    assert proc.returncode != 0, f"helm template {' '.join(args)} rendered"
    return proc.stderr


@pytest.mark.parametrize(("value", "where", "key"), [
    ("notAValue=1", "''", "notAValue"),
    ("deployment.notAValue=1", "'/deployment'", "notAValue"),
    ("config.notAKey=1", "'/config'", "notAKey"),
    ("config.leaderElection.leaseTime=15s", "'/config/leaderElection'", "leaseTime"),
    ("check.dnsInternal.imageTag=v1", "'/check/dnsInternal'", "imageTag"),
    ("prometheus.serviceMonitor.interval=30s", "'/prometheus/serviceMonitor'", "interval"),
    ("deployment.livenessProbe.periodSecond=5", "'/deployment/livenessProbe'", "periodSecond"),
    ("securityContext.runAsUsr=1000", "'/securityContext'", "runAsUsr"),
    ("image.tga=v1", "'/image'", "tga"),
])
def test_a_misspelt_value_is_refused_with_the_key_and_where_it_is_named(
        helm: Helm, value: str, where: str, key: str) -> None:
    stderr = _refused(helm, "--set", value)
    assert f"at {where}: additional properties '{key}' not allowed" in stderr, stderr


def test_global_values_and_every_key_of_values_yaml_are_accepted(helm: Helm) -> None:
    helm.template("global.imageRegistry=registry.example.com", "global.storageClass=fast")
    helm.run("lint", "--strict", str(CHART), "--values", str(CHART / "values.yaml"))


def test_every_object_in_the_schema_is_closed_except_the_maps_free_by_nature() -> None:
    open_nodes: list[str] = []

    def walk(node: Any, path: str) -> None:
        if not isinstance(node, dict):
            return
        kinds = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
        name = path.rsplit(".", 1)[-1]
        if "object" in kinds and node.get("additionalProperties") is not False and name not in FREE_BY_NATURE \
                and "additionalProperties" not in node and not path.endswith("[]"):
            open_nodes.append(path)
        for key, sub in (node.get("properties") or {}).items():
            walk(sub, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], path + "[]")
        for key, sub in (node.get("definitions") or {}).items():
            walk(sub, f"#{key}")
    walk(SCHEMA, "")
    assert open_nodes == []


def test_the_schemas_config_keys_are_exactly_the_daemons_config_keys_with_their_types() -> None:
    config = SCHEMA["properties"]["config"]
    assert list(config["properties"]) == sorted(kh_config._KNOWN_KEYS, key=list(config["properties"]).index)
    assert set(config["properties"]) == kh_config._KNOWN_KEYS
    assert config == _chart_schema_module().config_schema(), "run: python hack/chart_schema.py"
    assert config["properties"]["logLevel"]["enum"] == [*kh_config.LOG_LEVELS, *kh_config.V3_LOG_LEVELS]
    assert config["properties"]["reportAuth"]["enum"] == list(kh_config.REPORT_AUTHS)
    assert config["properties"]["metricsStyle"]["enum"] == list(kh_config.METRICS_STYLES)
    assert set(config["properties"]["leaderElection"]["properties"]) == {
        "leaseName", "leaseDuration", "renewDeadline", "retryPeriod"}
    assert list(config["properties"]["promMetricsConfig"]["properties"]) == [
        "suppressErrorLabel", "errorLabelMaxLength", "labelAllowlist", "labelDenylist", "labelValueMaxLength"]
    assert list(config["properties"]["healthCheckDefaults"]["properties"]) == ["runInterval", "timeout"]
    assert config["properties"]["listenAddressTLS"]["enum"] == [":8443"]  # the chart's https container port


def _with_keys(source: str, *keys: str) -> str:
    """config.py's source with more keys at the end of _KNOWN_KEYS."""
    added = re.sub(r"(_KNOWN_KEYS = \{[^}]*?),?\n\}", lambda m: m[1] + ", " + ", ".join(f'"{k}"' for k in keys)
                   + ",\n}", source, count=1)
    assert added != source
    return added


def test_the_generator_follows_a_new_config_key_and_stops_on_one_it_cannot_type() -> None:
    gen = _chart_schema_module()
    source = (REPO / "kuberhealthy" / "base" / "config.py").read_text(encoding="utf-8")
    added = _with_keys(source, "pausedLimit", "newFlag", "adminAddress", "teamLabels", "probes")
    calls = ('    _duration(raw, "pausedLimit", 1.0)\n    _bool(raw, "newFlag", False)\n'
             '    _address(raw, "adminAddress", ":9090")\n    _labels(raw, "teamLabels", (), "")\n'
             '    pr_raw, q = _section(raw, "probes", "every, grace"), "probes."\n'
             '    _duration(pr_raw, "every", 1.0, q)\n    _int(pr_raw, "grace", 1, q)\n')
    added = added.replace("    return Config(\n", calls + "    return Config(\n", 1)
    props = gen.config_schema(added)["properties"]
    assert props["newFlag"] == {"type": "boolean"}
    assert props["pausedLimit"]["pattern"] == gen.DURATION["pattern"]
    assert props["adminAddress"] == gen.ADDRESS
    assert props["teamLabels"] == props["promMetricsConfig"]["properties"]["labelAllowlist"]
    assert props["probes"] == {"type": "object", "additionalProperties": False, "properties": {
        "every": gen.DURATION, "grace": {"type": "integer", "minimum": 0}}}
    untyped = _with_keys(source, "mystery")
    with pytest.raises(SystemExit, match="mystery"):
        gen.config_schema(untyped)


def test_the_generator_takes_log_levels_from_the_check_and_the_aliases_looked_up_first() -> None:
    gen = _chart_schema_module()
    source = (REPO / "kuberhealthy" / "base" / "config.py").read_text(encoding="utf-8")
    more = re.sub(r"V3_LOG_LEVELS = \{", 'V3_LOG_LEVELS = {"critical": "error", ', source, count=1)
    assert more != source
    assert gen.config_schema(more)["properties"]["logLevel"]["enum"] == [
        *kh_config.LOG_LEVELS, "critical", *kh_config.V3_LOG_LEVELS]


def _schema_accepts(schema: dict[str, Any], value: Any) -> bool:
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return False
    return True


@pytest.mark.parametrize("value", [
    ":8080", "0.0.0.0:8443", "[::1]:8443", "[::]:0", "localhost:65535", ":00080", "::1:8080",
    "8080", ":", ":65536", ":99999", "[::1]8080", "host:port", ":-1"])
def test_listen_addresses_are_refused_by_the_schema_exactly_when_the_daemon_refuses_them(value: str) -> None:
    try:
        kh_config.parse_listen_address(value)
        daemon_accepts = True
    except ValueError:
        daemon_accepts = False
    assert _schema_accepts(_chart_schema_module().ADDRESS, value) is daemon_accepts


@pytest.mark.parametrize("value", [
    ["team", "severity"], [], "team,severity", "team, severity ,", "", "_x1", None,
    ["a-b"], "a-b", "1st", ["team", 1], "team;tier", {"team": True}])
def test_label_lists_are_refused_by_the_schema_exactly_when_the_daemon_refuses_them(value: Any) -> None:
    schema = SCHEMA["properties"]["config"]["properties"]["promMetricsConfig"]["properties"]["labelAllowlist"]
    try:
        kh_config.from_mapping({"promMetricsConfig": {"labelAllowlist": value}}, environ={})
        daemon_accepts = True
    except ConfigError:
        daemon_accepts = False
    assert _schema_accepts(schema, value) is daemon_accepts


@pytest.mark.parametrize("level", [*kh_config.LOG_LEVELS, *kh_config.V3_LOG_LEVELS, "critical", "INFO"])
def test_check_reaper_log_level_takes_the_daemons_levels_and_v3s_spellings(helm: Helm, level: str) -> None:
    try:
        kh_config.from_mapping({"logLevel": level}, environ={})
        daemon_accepts = True
    except ConfigError:
        daemon_accepts = False
    proc = helm.run("template", "kh", str(CHART), "--set", f"checkReaper.logLevel={level}", check=False)
    # The schema is stricter than the daemon about case: the chart's values are written in lower case.
    assert (proc.returncode == 0) is (daemon_accepts and level == level.lower()), proc.stderr


@pytest.mark.parametrize(("value", "good"), [
    ("90s", True), ("1m30s", True), ("1.5h", True), (".5s", True), ("500ms", True), ("10µs", True),
    ("10us", True), ("10", False), ("15 minutes", False), ("-1m", False), ("1d", False)])
def test_config_durations_are_refused_by_the_schema_exactly_when_the_daemon_refuses_them(
        helm: Helm, value: str, good: bool) -> None:
    args = ("template", "kh", str(CHART), "--set-string", f"config.stateReaperInterval={value}")
    proc = helm.run(*args, check=False)
    assert (proc.returncode == 0) is good, proc.stderr
    daemon_accepts = True
    try:
        kh_config.from_mapping({"stateReaperInterval": value}, environ={})
    except ConfigError:
        daemon_accepts = False
    assert daemon_accepts is good


def _notes(helm: Helm, *args: str) -> str:
    """NOTES.txt as `helm install` prints it (a client-side dry run: no cluster)."""
    out = helm.run("install", "kh", str(CHART), "--namespace", "monitoring", "--dry-run=client", *args).stdout
    return out.split("NOTES:", 1)[1]


V2_ONLY_VALUES = V2_VALUES + """
imageURL: docker.io/kuberhealthy/kuberhealthy:v2.7.1
stateMetadata: {team: sre}
"""


def test_a_v2_values_file_renders_and_the_notes_name_each_setting_it_ignores(helm: Helm, tmp_path: Path) -> None:
    values = tmp_path / "v2.yaml"
    doc = yaml.safe_load(V2_ONLY_VALUES)
    doc["prometheus"]["grafanaDashboard"] = {"enabled": True, "label": "grafana_dashboard", "labelValue": "1"}
    doc["prometheus"]["prometheusRule"] = {"enabled": False, "release": "prometheus-operator",
                                           "rules": {"additionalAnnotations": {}, "additionalLabels": {"a": "b"}}}
    doc["securityContext"]["seccompProfile"] = {"type": "RuntimeDefault"}
    values.write_text(yaml.safe_dump(doc))
    helm.run("lint", "--strict", str(CHART), "--values", str(values))
    notes = _notes(helm, "--values", str(values))
    warning = notes.split("WARNING: these values are Kuberhealthy v2 chart settings that this chart ignores:", 1)[1]
    named = [line.split(":", 1)[0][2:] for line in warning.strip().splitlines() if line.startswith("- ")]
    assert named == ["check.storage", "imageURL", "podSecurityPolicy", "prometheus.grafanaDashboard",
                     "prometheus.prometheusRule.rules", "securityContext.seccompProfile", "stateMetadata"]
    assert "- prometheus.grafanaDashboard: use grafana.dashboards" in warning
    assert "WARNING" not in _notes(helm)  # the chart's own defaults name nothing
    assert "helm test kh --namespace monitoring --logs" in notes


def test_the_notes_warn_when_the_image_is_v2s_go_daemon(helm: Helm) -> None:
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    notes = _notes(helm, "--set", "image.registry=docker.io", "--set", "image.repository=kuberhealthy/kuberhealthy")
    assert f"WARNING: image docker.io/kuberhealthy/kuberhealthy:{app_version} is Kuberhealthy v2's Go daemon" in notes
    v271 = _notes(helm, "--set", "image.registry=kuberhealthy", "--set", "image.repository=kuberhealthy",
                  "--set", "image.tag=v2.7.1")
    assert "kuberhealthy/kuberhealthy:v2.7.1 is Kuberhealthy v2's Go daemon" in v271


def test_the_default_image_is_the_published_one_and_the_tag_follows_the_charts_app_version(helm: Helm) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    (container,) = one(helm.template(), "Deployment", "kuberhealthy")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"ghcr.io/kuberhealthy-py/kuberhealthy:{chart['appVersion']}"
    # the e2e install replaces every part of the reference with the image built and imported there
    overridden = {v.split("=", 1)[0] for v in chart_values("localhost/kh-e2e/daemon:e2e")}
    assert {"image.registry", "image.repository", "image.tag"} <= overridden


# --- probes, env, volumes, topology ------------------------------------------------------------------------

def _container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = one(objs, "Deployment", "kuberhealthy")["spec"]["template"]["spec"]["containers"]
    return container


def test_probe_values_are_merged_over_the_charts_probes_and_a_handler_replaces_its_http_get(helm: Helm) -> None:
    default = _container(helm.template())
    assert default["livenessProbe"] == {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10,
                                        "timeoutSeconds": 3, "failureThreshold": 3}
    assert default["startupProbe"]["failureThreshold"] == 30
    assert default["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}

    tuned = _container(helm.template(*VARIATIONS["tuned probes, extra env from secrets, volumes, topology spread"]))
    assert tuned["livenessProbe"] == {**default["livenessProbe"], "failureThreshold": 6}
    assert tuned["readinessProbe"] == {**default["readinessProbe"], "periodSeconds": 10}
    assert tuned["startupProbe"] == {"tcpSocket": {"port": "http"}, "periodSeconds": 2, "timeoutSeconds": 2,
                                     "failureThreshold": 30}


def test_extra_env_takes_value_from_and_wins_over_env_but_not_over_the_pod_identity(helm: Helm) -> None:
    container = _container(helm.template(
        *VARIATIONS["tuned probes, extra env from secrets, volumes, topology spread"],
        "deployment.env.KH_EXTERNAL_REPORTING_URL=http://shadowed/externalCheckStatus",
        "deployment.env.CHECK_REAPER_RUN_INTERVAL=45s",
        "deployment.extraEnv[1].name=POD_NAME", "deployment.extraEnv[1].value=spoofed"))
    env = container["env"]
    names = [e["name"] for e in env]
    assert len(names) == len(set(names)), names
    by_name = {e["name"]: e for e in env}
    assert by_name["KH_EXTERNAL_REPORTING_URL"] == {"name": "KH_EXTERNAL_REPORTING_URL", "valueFrom": {
        "configMapKeyRef": {"name": "kh-urls", "key": "reporting"}}}
    assert by_name["CHECK_REAPER_RUN_INTERVAL"]["value"] == "45s"  # deployment.env keeps working
    assert by_name["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert container["envFrom"] == [{"secretRef": {"name": "kh-env"}, "prefix": "KH_"}]
    assert "envFrom" not in _container(helm.template())


def test_extra_volumes_are_mounted_beside_the_charts_own_and_cannot_take_their_names(helm: Helm) -> None:
    objs = helm.template(*VARIATIONS["tuned probes, extra env from secrets, volumes, topology spread"])
    pod = one(objs, "Deployment", "kuberhealthy")["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["config", "tmp", "ca"]
    assert pod["volumes"][2] == {"name": "ca", "configMap": {"name": "corp-ca"}}
    assert pod["containers"][0]["volumeMounts"][2] == {"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": True}
    stderr = _refused(helm, "--set", "deployment.extraVolumes[0].name=tmp",
                      "--set", "deployment.extraVolumes[0].emptyDir.medium=Memory")
    assert 'the volume name "tmp" is the chart\'s own' in stderr
    assert "mountPath" in _refused(helm, "--set", "deployment.extraVolumeMounts[0].name=ca")


def test_topology_spread_constraints_select_the_daemons_pods_unless_they_say_otherwise(helm: Helm) -> None:
    objs = helm.template(*VARIATIONS["tuned probes, extra env from secrets, volumes, topology spread"],
                         "deployment.topologySpreadConstraints[1].maxSkew=2",
                         "deployment.topologySpreadConstraints[1].topologyKey=kubernetes.io/hostname",
                         "deployment.topologySpreadConstraints[1].whenUnsatisfiable=DoNotSchedule",
                         "deployment.topologySpreadConstraints[1].labelSelector.matchLabels.tier=monitoring")
    pod = one(objs, "Deployment", "kuberhealthy")["spec"]["template"]["spec"]
    zone, host = pod["topologySpreadConstraints"]
    assert zone == {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {"app": "kuberhealthy"}}}
    assert host["labelSelector"] == {"matchLabels": {"tier": "monitoring"}}
    assert "topologySpreadConstraints" not in one(helm.template(), "Deployment", "kuberhealthy")["spec"]["template"][
        "spec"]
    assert "maxSkew" in _refused(helm, "--set", "deployment.topologySpreadConstraints[0].topologyKey=zone")


def test_the_service_monitor_takes_v2_8s_relabelings_and_target_labels(helm: Helm) -> None:
    objs = helm.template("prometheus.enabled=true", "prometheus.serviceMonitor.enabled=true",
                         "prometheus.serviceMonitor.targetLabels={team}",
                         "prometheus.serviceMonitor.endpoints.metricRelabelings[0].action=labeldrop",
                         "prometheus.serviceMonitor.endpoints.metricRelabelings[0].regex=pod",
                         "prometheus.serviceMonitor.endpoints.relabelings[0].targetLabel=cluster",
                         "prometheus.serviceMonitor.endpoints.relabelings[0].replacement=prod")
    spec = one(objs, "ServiceMonitor", "kuberhealthy")["spec"]
    assert spec["targetLabels"] == ["team"]
    (endpoint,) = spec["endpoints"]
    assert endpoint["metricRelabelings"] == [{"action": "labeldrop", "regex": "pod"}]
    assert endpoint["relabelings"] == [{"targetLabel": "cluster", "replacement": "prod"}]


# --- the helm test hook -------------------------------------------------------------------------------------

def test_the_helm_test_pod_runs_check_service_from_the_daemons_image_hardened_and_without_dns(helm: Helm) -> None:
    objs = helm.template("deployment.imagePullPolicy=Never", "imagePullSecrets[0].name=pull",
                         "deployment.nodeSelector.kubernetes\\.io/os=linux")
    pod = one(objs, "Pod", "kuberhealthy-test")
    assert pod["metadata"]["annotations"] == {"helm.sh/hook": "test",
                                              "helm.sh/hook-delete-policy": "before-hook-creation"}
    spec = pod["spec"]
    (container,) = spec["containers"]
    daemon = one(objs, "Deployment", "kuberhealthy")["spec"]["template"]["spec"]
    assert container["image"] == daemon["containers"][0]["image"]
    assert container["imagePullPolicy"] == "Never"
    assert spec["imagePullSecrets"] == [{"name": "pull"}] and spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert "command" not in container  # the image's entrypoint: kuberhealthy
    assert container["args"] == ["check-service", "--host-env", "KUBERHEALTHY_SERVICE_HOST",
                                 "--port-env", "KUBERHEALTHY_SERVICE_PORT", "--timeout", "60"]
    assert spec["enableServiceLinks"] is True  # the kubelet's Service variables are its only way in
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in spec  # no RBAC: it only speaks HTTP
    psc, csc = spec["securityContext"], container["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] == 999
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert csc == {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                   "capabilities": {"drop": ["ALL"]}}
    # never an endpoint of the Service it tests
    selector = one(objs, "Service", "kuberhealthy")["spec"]["selector"]
    assert not selector.items() <= pod["metadata"]["labels"].items()


def test_the_helm_test_pod_names_the_variables_the_kubelet_makes_from_a_renamed_service(helm: Helm) -> None:
    objs = helm.template("nameOverride=kh-canary")
    service = one(objs, "Service", "kh-canary")["metadata"]["name"]
    prefix = service.upper().replace("-", "_")  # the kubelet's rule for Service environment variables
    args = one(objs, "Pod", "kh-canary-test")["spec"]["containers"][0]["args"]
    assert args[1:5] == ["--host-env", f"{prefix}_SERVICE_HOST", "--port-env", f"{prefix}_SERVICE_PORT"]
    assert prefix == "KH_CANARY"


# --- OpenAPI schemas: the test bed's Kubernetes and a current one ---------------------------------------------

# No schema for the Prometheus operator's kinds is available offline (their CRDs are installed nowhere here):
# their version is the one the operator's CRDs serve.
OPERATOR_KINDS = {"ServiceMonitor": "monitoring.coreos.com/v1", "PrometheusRule": "monitoring.coreos.com/v1"}
NO_SCHEMA = set(OPERATOR_KINDS)
CURRENT_K8S = kubernetes_validate.latest_version()  # the newest Kubernetes kubernetes-validate has schemas for
CHECK_KINDS = ("KuberhealthyCheck", "KuberhealthyJob")


def _why(obj: dict[str, Any], e: Exception) -> str:
    where = "/".join(str(p) for p in getattr(e, "absolute_path", ()))
    message = str(getattr(e, "message", "") or e).splitlines()[0]
    return f"{obj['kind']}/{obj['metadata']['name']} at {where or '.'}: {message}"


def _nullable_as_null_type(schema: Any) -> Any:
    """A CRD's OpenAPI v3 schema as JSON schema: `nullable: true` becomes a "null" type."""
    if isinstance(schema, dict):
        out = {k: _nullable_as_null_type(v) for k, v in schema.items() if k != "nullable"}
        if schema.get("nullable") and isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        return out
    if isinstance(schema, list):
        return [_nullable_as_null_type(v) for v in schema]
    return schema


def _crd_schema(kind: str) -> dict[str, Any]:
    (crd,) = [c for c in load_crds() if c["spec"]["names"]["kind"] == kind]
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    return dict(_nullable_as_null_type(version["schema"]["openAPIV3Schema"]))


def _checker_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """A khcheck's or khjob's podSpec as the Pod the daemon creates from it (the CRD keeps it open)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": obj["metadata"]["name"]},
            "spec": obj["spec"]["podSpec"]}


def _schema_problems(objs: list[dict[str, Any]]) -> list[str]:
    """Why each object does not match the current Kubernetes' schemas: strict, so an unknown field fails, and an
    apiVersion the current Kubernetes no longer serves (or a kind it never had there) has no schema at all."""
    problems = []
    for obj in objs:
        if obj["kind"] in NO_SCHEMA:
            if obj["apiVersion"] != OPERATOR_KINDS[obj["kind"]]:
                problems.append(f"{obj['kind']}/{obj['metadata']['name']} at apiVersion: {obj['apiVersion']}, "
                                f"not {OPERATOR_KINDS[obj['kind']]}")
            continue
        try:
            if obj["kind"] in CHECK_KINDS:
                jsonschema.validate(obj, _crd_schema(obj["kind"]))
                kubernetes_validate.validate(_checker_pod(obj), CURRENT_K8S, strict=True)
            else:
                kubernetes_validate.validate(obj, CURRENT_K8S, strict=True)
        except (jsonschema.ValidationError, kubernetes_validate.SchemaNotFoundError) as e:
            problems.append(_why(obj, e))
    return problems


@pytest.mark.parametrize("values", VARIATIONS.values(), ids=VARIATIONS.keys())
def test_every_rendered_object_matches_the_openapi_schema_of_a_current_kubernetes(
        helm: Helm, values: tuple[str, ...]) -> None:
    objs = helm.template(*values, extra=("--kube-version", CURRENT_K8S))
    assert _schema_problems(objs) == []
    assert [o for o in objs if o["kind"] not in NO_SCHEMA]


def test_strict_schema_validation_catches_a_misspelt_field() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
                  "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
                      "metadata": {"labels": {"a": "b"}},
                      "spec": {"containers": [{"name": "c", "image": "i", "securityContex": {}}]}}}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, CURRENT_K8S, strict=True)


class ServedSchemas:
    """The OpenAPI v2 document an API server publishes, made strict (no unknown fields), per kind."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.definitions: dict[str, Any] = document["definitions"]
        for schema in self.definitions.values():
            self._strict(schema)
        # Types whose wire form the v2 document cannot express as JSON schema.
        self.definitions["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = {"type": ["integer", "string"]}
        self.definitions["io.k8s.apimachinery.pkg.api.resource.Quantity"] = {"type": ["string", "number"]}
        self.by_kind: dict[tuple[str, str], str] = {}
        for name, schema in self.definitions.items():
            for gvk in schema.get("x-kubernetes-group-version-kind") or []:
                api_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
                self.by_kind[(api_version, gvk["kind"])] = name

    def _strict(self, schema: Any) -> None:
        if isinstance(schema, list):
            for item in schema:
                self._strict(item)
            return
        if not isinstance(schema, dict):
            return
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        for value in schema.values():
            self._strict(value)

    def validate(self, obj: dict[str, Any]) -> None:
        name = self.by_kind.get((obj["apiVersion"], obj["kind"]))
        if name is None:
            raise jsonschema.ValidationError(f"{obj['apiVersion']} {obj['kind']} is not served by this API server")
        jsonschema.Draft4Validator({"$ref": f"#/definitions/{name}", "definitions": self.definitions}).validate(obj)


@pytest.fixture(scope="module")
def served_schemas(cluster: TestCluster) -> ServedSchemas:
    def published() -> ServedSchemas | None:  # CRDs reach /openapi/v2 some seconds after they are created
        schemas = ServedSchemas(cluster.request("GET", "/openapi/v2"))
        wanted = {("comcast.github.io/v1", kind) for kind in CHECK_KINDS}
        return schemas if wanted <= set(schemas.by_kind) else None
    return wait_for(published, 90, 1, what="the CRDs' schemas in /openapi/v2")


@pytest.mark.parametrize("values", [v for k, v in VARIATIONS.items() if "prometheus" not in k],
                         ids=[k for k in VARIATIONS if "prometheus" not in k])
def test_every_rendered_object_matches_the_openapi_schema_the_test_beds_api_server_publishes(
        helm: Helm, cluster: TestCluster, namespace: str, served_schemas: ServedSchemas,
        values: tuple[str, ...]) -> None:
    # Rendered against the live API server, so its capabilities decide (policy/v1beta1 PDBs on 1.20).
    args = ["template", "kh", str(CHART), "--namespace", namespace, "--dry-run=server"]
    for v in values:
        args += ["--set", v]
    objs = [d for d in yaml.safe_load_all(helm.run(*args, kubeconfig=cluster.kubeconfig).stdout) if d]
    assert {o["apiVersion"] for o in objs if o["kind"] == "PodDisruptionBudget"} <= {"policy/v1beta1"}
    assert _served_problems(served_schemas, objs) == []


def _served_problems(served_schemas: ServedSchemas, objs: list[dict[str, Any]]) -> list[str]:
    """Each object (and a check's checker pod) against the schemas the test bed's API server publishes."""
    problems = []
    for obj in objs:
        try:
            served_schemas.validate(obj)
            if obj["kind"] in CHECK_KINDS:
                served_schemas.validate(_checker_pod(obj))
        except jsonschema.ValidationError as e:
            problems.append(_why(obj, e))
    return problems


def test_the_served_schemas_are_strict_enough_to_catch_a_misspelt_field(served_schemas: ServedSchemas) -> None:
    with pytest.raises(jsonschema.ValidationError, match="imagePullPolisy"):
        served_schemas.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {
            "containers": [{"name": "c", "image": "i", "imagePullPolisy": "Always"}]}})


# --- Every optional template on: nothing the newest Kubernetes removed, what the test bed's serves --------------

# The keys of values.yaml that switch a part of the chart on, wherever they sit: a new switch is covered as it
# is added (and a template no switch turns on fails the first test below).
SWITCH_KEYS = ("enabled", "allNamespaces")


def _switches(values: dict[str, Any], path: str = "") -> Iterator[str]:
    for key, value in values.items():
        if isinstance(value, dict):
            yield from _switches(value, f"{path}{key}.")
        elif key in SWITCH_KEYS and isinstance(value, bool):
            yield f"{path}{key}"


ALL_ON = tuple(f"{key}=true" for key in _switches(yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))))


def _render_all_on(helm: Helm, kube_version: str) -> tuple[list[dict[str, Any]], set[str]]:
    """Every switch on and the CRDs included, for `kube_version`: the objects, and the chart's files they came
    from."""
    args = ["template", "kh", str(CHART), "--namespace", "monitoring", "--include-crds", "--kube-version",
            kube_version]
    for value in ALL_ON:
        args += ["--set", value]
    out = helm.run(*args).stdout
    return [d for d in yaml.safe_load_all(out) if d], set(re.findall(r"^# Source: [^/]+/(.+)$", out, re.MULTILINE))


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def test_the_switches_found_in_values_yaml_turn_on_every_template_of_the_chart(helm: Helm) -> None:
    assert {"prometheus.enabled=true", "prometheus.serviceMonitor.enabled=true", "grafana.dashboards.enabled=true",
            "prometheus.prometheusRule.enabled=true", "networkPolicy.enabled=true", "podDisruptionBudget.enabled=true",
            "uninstallHook.enabled=true", "check.networkConnection.enabled=true",
            "check.podStatus.allNamespaces=true"} <= set(ALL_ON)
    _, sources = _render_all_on(helm, CURRENT_K8S)
    files = {str(p.relative_to(CHART)) for p in CHART.glob("templates/**/*.yaml")} | \
        {str(p.relative_to(CHART)) for p in CHART.glob("crds/*.yaml")}
    assert files - sources == set()


def test_with_every_switch_on_every_object_is_in_an_api_version_the_newest_kubernetes_serves(helm: Helm) -> None:
    objs, _ = _render_all_on(helm, CURRENT_K8S)
    assert _schema_problems(objs) == []
    assert {o["kind"] for o in objs} >= {"PodDisruptionBudget", "NetworkPolicy", "Job", "Pod", "ClusterRole",
                                         "CustomResourceDefinition", "ServiceMonitor", "PrometheusRule"}


def test_with_every_switch_on_the_render_for_the_test_beds_kubernetes_takes_what_it_serves_only_where_needed(
        helm: Helm, cluster: TestCluster, served_schemas: ServedSchemas) -> None:
    version = str(cluster.request("GET", "/version")["gitVersion"])
    assert version.startswith("v1.20.")
    old, _ = _render_all_on(helm, version)
    assert _served_problems(served_schemas, [o for o in old if o["kind"] not in NO_SCHEMA]) == []

    # The chart picks an older version (on .Capabilities) only where this server lacks the current one.
    newest = {_key(o): o["apiVersion"] for o in _render_all_on(helm, CURRENT_K8S)[0]}
    switched = {_key(o): (o["apiVersion"], newest[_key(o)]) for o in old if o["apiVersion"] != newest[_key(o)]}
    assert switched == {("PodDisruptionBudget", "kuberhealthy-pdb"): ("policy/v1beta1", "policy/v1")}
    assert ("policy/v1", "PodDisruptionBudget") not in served_schemas.by_kind


REMOVED: list[dict[str, Any]] = [
    {"apiVersion": "extensions/v1beta1", "kind": "Ingress", "metadata": {"name": "old-ingress"},
     "spec": {"backend": {"serviceName": "kuberhealthy", "servicePort": 80}}},
    {"apiVersion": "policy/v1beta1", "kind": "PodSecurityPolicy", "metadata": {"name": "old-psp"},
     "spec": {"seLinux": {"rule": "RunAsAny"}, "runAsUser": {"rule": "MustRunAsNonRoot"},
              "supplementalGroups": {"rule": "RunAsAny"}, "fsGroup": {"rule": "RunAsAny"}}},
    {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "old-pdb"},
     "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "kuberhealthy"}}}},
    {"apiVersion": "batch/v1beta1", "kind": "CronJob", "metadata": {"name": "old-cronjob"},
     "spec": {"schedule": "@hourly", "jobTemplate": {"spec": {"template": {"spec": {
         "restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}}},
    {"apiVersion": "monitoring.coreos.com/v1alpha1", "kind": "ServiceMonitor", "metadata": {"name": "old-sm"}},
]


def test_the_schema_check_refuses_objects_in_api_versions_that_were_removed() -> None:
    problems = _schema_problems(REMOVED)
    assert [p.split(" ")[0] for p in problems] == [f"{o['kind']}/{o['metadata']['name']}" for o in REMOVED]
    assert all(o["apiVersion"] in p for p, o in zip(problems, REMOVED, strict=True))


# --- the Grafana dashboard --------------------------------------------------------------------------------------

DASHBOARD = CHART / "dashboards" / "kuberhealthy.json"
# Words of PromQL (and of Grafana's label_values) that are not metric names.
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "count_values", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "group", "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
    "offset", "vector", "scalar", "rate", "irate", "increase", "delta", "idelta", "deriv", "abs", "absent",
    "ceil", "floor", "round", "clamp", "clamp_min", "clamp_max", "label_replace", "label_join", "time",
    "timestamp", "changes", "resets", "sort", "sort_desc", "histogram_quantile", "avg_over_time",
    "min_over_time", "max_over_time", "sum_over_time", "count_over_time", "last_over_time", "absent_over_time",
    "predict_linear", "inf", "nan",
}


# Series Prometheus itself writes for every target (KuberhealthyError's `up`), not the daemon.
PROMETHEUS_SERIES = {"up"}


def _metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana label_values query) selects."""
    text = expr.strip()
    label_values = re.fullmatch(r"label_values\((.*?)(,\s*[A-Za-z_][A-Za-z0-9_]*)?\)", text, re.S)
    if label_values:
        text = label_values.group(1) if label_values.group(2) else ""  # label_values(label): no metric
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)  # label lists
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\$\{?\w+\}?", "", text)  # dashboard variables
    text = re.sub(r"\b\d+(\.\d+)?([eE][+-]?\d+)?\b", "", text)  # numbers
    return {w for w in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text) if w.lower() not in PROMQL_WORDS}


def _dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    queries: list[str] = []

    def panels(items: list[dict[str, Any]]) -> None:
        for panel in items:
            queries.extend(t["expr"] for t in panel.get("targets") or [] if t.get("expr"))
            panels(panel.get("panels") or [])  # panels inside a collapsed row
    panels(dashboard["panels"])
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var["query"]
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def _rule_queries(helm: Helm) -> list[str]:
    objs = helm.template("prometheus.enabled=true", "prometheus.prometheusRule.enabled=true")
    rule = one(objs, "PrometheusRule", "kuberhealthy")
    return [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]


def test_the_metric_name_reader_finds_metrics_and_skips_labels_functions_and_variables() -> None:
    assert _metric_names('sum by (check) (rate(a_total{b="c}d", e=~"$f"}[5m])) / on(g) h_x or vector(0)') == {
        "a_total", "h_x"}
    assert _metric_names("label_values(kuberhealthy_check{namespace=~\"$namespace\"}, check)") == {
        "kuberhealthy_check"}
    assert _metric_names("label_values(namespace)") == set()
    assert _metric_names("count(up == 1e3) > 0.5") == {"up"}


def test_the_grafana_dashboard_is_off_by_default_and_a_sidecar_config_map_when_enabled(helm: Helm) -> None:
    assert [o for o in find(helm.template(), "ConfigMap") if "grafana" in o["metadata"]["name"]] == []
    objs = helm.template("grafana.dashboards.enabled=true", "grafana.dashboards.namespace=grafana",
                         "grafana.dashboards.annotations.grafana_folder=Kuberhealthy")
    cm = one(objs, "ConfigMap", "kuberhealthy-grafana-dashboard")
    assert cm["metadata"]["namespace"] == "grafana"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"  # the sidecar's default label
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Kuberhealthy"}
    (name,) = cm["data"]
    assert name.endswith(".json")
    dashboard = json.loads(cm["data"][name])
    assert dashboard == json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["uid"] and dashboard["panels"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert all(p["datasource"]["uid"] == "${datasource}" for p in dashboard["panels"])

    relabelled = helm.template("grafana.dashboards.enabled=true", "grafana.dashboards.label=team_dashboards",
                               "grafana.dashboards.labelValue=yes", "nameOverride=kh-canary")
    labels = one(relabelled, "ConfigMap", "kh-canary-grafana-dashboard")["metadata"]["labels"]
    assert labels["team_dashboards"] == "yes" and "grafana_dashboard" not in labels


def test_every_metric_the_dashboard_and_alert_rules_query_is_in_a_real_daemons_scrape(
        helm: Helm, cluster: TestCluster, namespace: str, kubelet: SimKubelet) -> None:
    used: set[str] = set()
    for query in _dashboard_queries(json.loads(DASHBOARD.read_text())) + _rule_queries(helm):
        names = _metric_names(query)
        assert names, f"no metric in {query!r}"
        used |= names

    cluster.request("POST", KHCHECKS.path(namespace), khcheck("scraped", interval="1m"))
    cluster.request("POST", KHJOBS.path(namespace), khjob("scraped-job"))
    daemon = InProcessDaemon(cluster, namespace).start()
    try:
        def ran(name: str) -> bool:
            try:
                return bool(cluster.request("GET", KHSTATES.path(namespace, name))["spec"].get("RunDuration"))
            except urllib.error.HTTPError:
                return False
        wait_for(lambda: ran("scraped") and ran("scraped-job"), 60, 0.1, what="a check run and a job run")
        scrape = requests.get(f"{daemon.url}/metrics", timeout=10)
    finally:
        daemon.stop()
    assert scrape.status_code == 200
    exported = {s.name for family in text_string_to_metric_families(scrape.text) for s in family.samples}
    exported |= PROMETHEUS_SERIES
    assert used - exported == set(), f"queried but not exported: {sorted(used - exported)}"


# --- the InfluxDB password from a Secret -------------------------------------------------------------------------

def test_the_influx_password_comes_from_the_named_secret_and_never_reaches_the_config_map(helm: Helm) -> None:
    objs = helm.template(*VARIATIONS["grafana dashboard, influx password from a secret"],
                         "deployment.env.KH_INFLUX_PASSWORD=plain-text")
    (container,) = one(objs, "Deployment", "kuberhealthy")["spec"]["template"]["spec"]["containers"]
    env = [e for e in container["env"] if e["name"] == "KH_INFLUX_PASSWORD"]
    assert env == [{"name": "KH_INFLUX_PASSWORD",
                    "valueFrom": {"secretKeyRef": {"name": "kh-influx", "key": "password"}}}]
    cfg = config_file(objs)
    assert cfg["enableInflux"] is True and cfg["influxPassword"] == ""
    assert "plain-text" not in json.dumps(objs)
    loaded = kh_config.from_mapping(cfg, environ={"POD_NAMESPACE": "monitoring", "KH_INFLUX_PASSWORD": "pw"})
    assert loaded.influx_password == "pw"

    keyed = helm.template("influx.passwordSecret=kh-influx", "influx.passwordSecretKey=influx-password")
    (container,) = one(keyed, "Deployment", "kuberhealthy")["spec"]["template"]["spec"]["containers"]
    assert {"name": "KH_INFLUX_PASSWORD",
            "valueFrom": {"secretKeyRef": {"name": "kh-influx", "key": "influx-password"}}} in container["env"]

    (container,) = one(helm.template(), "Deployment", "kuberhealthy")["spec"]["template"]["spec"]["containers"]
    assert "KH_INFLUX_PASSWORD" not in [e["name"] for e in container["env"]]
    # Without a Secret, deployment.env may still set it (the user's choice).
    plain = helm.template("deployment.env.KH_INFLUX_PASSWORD=pw")
    (container,) = one(plain, "Deployment", "kuberhealthy")["spec"]["template"]["spec"]["containers"]
    assert {"name": "KH_INFLUX_PASSWORD", "value": "pw"} in container["env"]


def test_a_password_in_the_config_map_beside_the_secret_fails_the_render(helm: Helm) -> None:
    proc = helm.run("template", "kh", str(CHART), "--set", "influx.passwordSecret=kh-influx",
                    "--set", "config.influxPassword=hunter2", check=False)
    assert proc.returncode != 0
    assert "influx.passwordSecret" in proc.stderr and "ConfigMap" in proc.stderr


# --- a real install, and the ServiceAccount's privileges -------------------------------------------------

@dataclass
class Installed:
    namespace: str
    other: str  # a second namespace, to show what the daemon may do outside its own
    token: str  # the chart ServiceAccount's token


class API:
    """Raw requests as some identity; returns (status, body) and never raises on HTTP errors."""

    def __init__(self, cluster: TestCluster, token: str) -> None:
        self.server = cluster.server
        self.token = token
        self.ctx = ssl.create_default_context()
        self.ctx.check_hostname = False
        self.ctx.verify_mode = ssl.CERT_NONE

    def __call__(self, method: str, path: str, body: Any = None, merge: bool = False) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", "application/merge-patch+json" if merge else "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.ctx) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")
        try:
            return status, json.loads(raw) if raw else None
        except json.JSONDecodeError:  # a watch stream: several JSON documents
            return status, raw.decode(errors="replace")

    def can(self, verb: str, resource: str, group: str = "", namespace: str = "", name: str = "",
            subresource: str = "") -> bool:
        """A SelfSubjectAccessReview: what the API server's authorizer says about this identity."""
        attrs = {"verb": verb, "resource": resource, "group": group, "namespace": namespace, "name": name,
                 "subresource": subresource}
        status, body = self("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                            {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                             "spec": {"resourceAttributes": attrs}})
        assert status == 201, body
        return bool(body["status"]["allowed"])


def _token_of(kubeconfig: Path) -> str:
    doc = yaml.safe_load(kubeconfig.read_text())
    return str(doc["users"][0]["user"]["token"])


@pytest.fixture(scope="module")
def installed(helm: Helm, cluster: TestCluster) -> Iterator[Installed]:
    """The chart installed once (defaults, CRDs skipped: the session installed them) for this module."""
    ns = create_namespace(cluster, "kh-chart")
    proc = helm.run("install", "kuberhealthy", str(CHART), "--namespace", ns, "--skip-crds",
                    kubeconfig=cluster.kubeconfig)
    assert "STATUS: deployed" in proc.stdout
    token = _token_of(cluster.sa_kubeconfig(ns, "kuberhealthy"))
    other = create_namespace(cluster, "kh-other")
    try:
        yield Installed(namespace=ns, other=other, token=token)
    finally:
        helm.run("uninstall", "kuberhealthy", "--no-hooks", "--namespace", ns, kubeconfig=cluster.kubeconfig,
                 check=False)
        # Leave no khchecks behind for a daemon started by a later test to pick up.
        delete_quietly(cluster, khc(other, "elsewhere"), khc(other, "keep-me"))


def _khstate(name: str) -> dict[str, Any]:
    return khstate(name, OK=True, Errors=[], RunDuration="1s", Namespace="x", Node="node-1",
                   AuthoritativePod="kuberhealthy-0", uuid=str(uuid.uuid4()))


def _khcheck(name: str) -> dict[str, Any]:
    return khcheck(name, "busybox", interval="1m")


def _pod(name: str) -> dict[str, Any]:
    return checker_pod(name, None, None, image="busybox")


# Where each kind the chart renders is created (policy/v1beta1: the test API server is Kubernetes 1.20).
KIND_PATHS = {
    "ConfigMap": ("/api/v1", "configmaps"), "Service": ("/api/v1", "services"),
    "ServiceAccount": ("/api/v1", "serviceaccounts"), "Deployment": ("/apis/apps/v1", "deployments"),
    "PodDisruptionBudget": ("/apis/policy/v1beta1", "poddisruptionbudgets"),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles"),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings"),
    "KuberhealthyCheck": (GROUP_PATH, "khchecks"), "Job": ("/apis/batch/v1", "jobs"),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies"), "Pod": ("/api/v1", "pods"),
}


@pytest.mark.parametrize("values", [v for k, v in VARIATIONS.items() if "prometheus" not in k],
                         ids=[k for k in VARIATIONS if "prometheus" not in k])
def test_every_rendered_object_passes_the_api_servers_validation(
        helm: Helm, cluster: TestCluster, namespace: str, values: tuple[str, ...]) -> None:
    values = tuple(f"targetNamespace={namespace}" if v.startswith("targetNamespace=") else v for v in values)
    for obj in helm.template(*values, namespace=namespace):
        prefix, plural = KIND_PATHS[obj["kind"]]
        if obj["kind"] == "PodDisruptionBudget":
            obj["apiVersion"] = "policy/v1beta1"
        ns = obj["metadata"].get("namespace")
        path = f"{prefix}/namespaces/{ns}/{plural}" if ns else f"{prefix}/{plural}"
        try:
            cluster.request("POST", path + "?dryRun=All", obj)
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{obj['kind']}/{obj['metadata']['name']}: {e.read().decode()}") from None


def test_helm_install_creates_the_daemon_its_service_account_rbac_and_config(
        installed: Installed, cluster: TestCluster) -> None:
    ns = installed.namespace
    dep = cluster.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/kuberhealthy")
    assert dep["spec"]["replicas"] == 2
    svc = cluster.request("GET", f"/api/v1/namespaces/{ns}/services/kuberhealthy")
    assert svc["spec"]["ports"][0]["port"] == 80
    cluster.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/kuberhealthy")
    cm = cluster.request("GET", f"/api/v1/namespaces/{ns}/configmaps/kuberhealthy")
    kh_config.from_mapping(yaml.safe_load(cm["data"]["kuberhealthy.yaml"]), environ={"POD_NAMESPACE": ns})
    cluster.request("GET", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/kuberhealthy-{ns}")
    crb = cluster.request("GET", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kuberhealthy-{ns}")
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": "kuberhealthy", "namespace": ns}]
    cluster.request("GET", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles/kuberhealthy")
    cluster.request("GET", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings/kuberhealthy")
    pdbs = cluster.request("GET", f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets")
    assert [p["metadata"]["name"] for p in pdbs["items"]] == ["kuberhealthy-pdb"]
    checks = cluster.request("GET", f"{GROUP_PATH}/namespaces/{ns}/khchecks")
    assert {c["metadata"]["name"] for c in checks["items"]} == {"daemonset", "deployment", "dns-status-internal"}


def test_the_service_account_can_list_and_watch_khchecks_and_khjobs_in_every_namespace(
        installed: Installed, cluster: TestCluster) -> None:
    cluster.request("POST", f"{GROUP_PATH}/namespaces/{installed.other}/khchecks", _khcheck("elsewhere"))
    api = API(cluster, installed.token)
    status, body = api("GET", f"{GROUP_PATH}/khchecks")
    assert status == 200
    assert (installed.other, "elsewhere") in {(c["metadata"]["namespace"], c["metadata"]["name"])
                                              for c in body["items"]}
    rv = body["metadata"]["resourceVersion"]
    status, _ = api("GET", f"{GROUP_PATH}/khchecks?watch=1&timeoutSeconds=1&resourceVersion={rv}")
    assert status == 200
    assert api("GET", f"{GROUP_PATH}/khjobs")[0] == 200
    assert api.can("watch", "khjobs", "comcast.github.io")
    assert api.can("patch", "khjobs", "comcast.github.io", installed.other)
    assert api.can("delete", "khjobs", "comcast.github.io", installed.other)  # the reaper removes completed jobs


def test_the_service_account_can_create_update_and_delete_khstates(installed: Installed, cluster: TestCluster) -> None:
    api = API(cluster, installed.token)
    base = f"{GROUP_PATH}/namespaces/{installed.other}/khstates"
    status, created = api("POST", base, _khstate("state-check"))
    assert status == 201, created
    created["spec"]["OK"] = False
    created["spec"]["Errors"] = ["boom"]
    status, updated = api("PUT", f"{base}/state-check", created)
    assert status == 200, updated
    assert updated["spec"]["Errors"] == ["boom"]
    assert api("GET", f"{GROUP_PATH}/khstates")[0] == 200
    assert api("DELETE", f"{base}/state-check")[0] == 200


def test_the_service_account_can_annotate_khchecks_read_checker_logs_raise_events_and_review_tokens(
        installed: Installed, cluster: TestCluster) -> None:
    cluster.request("POST", khc(installed.other, "annotated"), _khcheck("annotated"))
    api = API(cluster, installed.token)
    try:
        status, body = api("PATCH", f"{GROUP_PATH}/namespaces/{installed.other}/khchecks/annotated",
                           {"metadata": {"annotations": {"comcast.github.io/run-now": "x"}}}, merge=True)
        assert status == 200, body
        assert api.can("get", "pods", "", installed.other, subresource="log")
        for verb in ("create", "patch"):
            assert api.can(verb, "events", "", installed.other)
        assert api.can("create", "tokenreviews", "authentication.k8s.io")
        assert api.can("list", "events", "", installed.other)  # a check's Events, for GET /api/events
        assert not api.can("get", "events", "", installed.other)  # never one by name
    finally:
        delete_quietly(cluster, khc(installed.other, "annotated"))


def test_the_service_account_can_create_evict_and_delete_checker_pods(
        installed: Installed, cluster: TestCluster) -> None:
    api = API(cluster, installed.token)
    base = f"/api/v1/namespaces/{installed.other}/pods"
    for name in ("checker-a", "checker-b"):
        status, body = api("POST", base, _pod(name))
        assert status == 201, body
    status, body = api("POST", f"{base}/checker-a/eviction",
                       {"apiVersion": "policy/v1beta1", "kind": "Eviction",
                        "metadata": {"name": "checker-a", "namespace": installed.other}})
    assert status == 201, body
    assert api("DELETE", f"{base}/checker-b")[0] == 200
    assert api("GET", "/api/v1/pods")[0] == 200  # the pod watch is cluster-wide


def test_the_service_account_can_create_read_and_renew_only_its_own_lease(
        installed: Installed, cluster: TestCluster) -> None:
    api = API(cluster, installed.token)
    base = f"/apis/coordination.k8s.io/v1/namespaces/{installed.namespace}/leases"
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "kuberhealthy"},
             "spec": {"holderIdentity": "kuberhealthy-0", "leaseDurationSeconds": 15}}
    status, body = api("POST", base, lease)
    assert status == 201, body
    status, body = api("GET", f"{base}/kuberhealthy")
    assert status == 200
    body["spec"]["holderIdentity"] = "kuberhealthy-1"
    status, body = api("PUT", f"{base}/kuberhealthy", body)
    assert status == 200, body
    assert body["spec"]["holderIdentity"] == "kuberhealthy-1"

    # Listing and watching only when the request names it (the elector's watch, leader.py).
    named = "fieldSelector=metadata.name%3Dkuberhealthy"
    status, body = api("GET", f"{base}?{named}")
    assert status == 200, body
    assert [i["metadata"]["name"] for i in body["items"]] == ["kuberhealthy"]
    assert api("GET", f"{base}?{named}&watch=true&timeoutSeconds=1")[0] == 200

    # Nothing else about Leases: not another Lease, not listing, not deleting, not other namespaces.
    assert not api.can("get", "leases", "coordination.k8s.io", installed.namespace, "someone-elses-lease")
    assert not api.can("update", "leases", "coordination.k8s.io", installed.namespace, "someone-elses-lease")
    assert api("GET", base)[0] == 403
    assert api("GET", f"{base}?fieldSelector=metadata.name%3Dsomeone-elses-lease")[0] == 403
    assert api("DELETE", f"{base}/kuberhealthy")[0] == 403
    assert api("POST", f"/apis/coordination.k8s.io/v1/namespaces/{installed.other}/leases", lease)[0] == 403


def test_the_service_account_cannot_read_secrets_delete_khchecks_or_create_deployments(
        installed: Installed, cluster: TestCluster) -> None:
    cluster.request("POST", f"{GROUP_PATH}/namespaces/{installed.other}/khchecks", _khcheck("keep-me"))
    api = API(cluster, installed.token)

    assert api("GET", "/api/v1/secrets")[0] == 403
    assert api("GET", f"/api/v1/namespaces/{installed.namespace}/secrets")[0] == 403
    assert api("DELETE", f"{GROUP_PATH}/namespaces/{installed.other}/khchecks/keep-me")[0] == 403
    cluster.request("GET", f"{GROUP_PATH}/namespaces/{installed.other}/khchecks/keep-me")  # still there
    assert api("POST", f"{GROUP_PATH}/namespaces/{installed.other}/khchecks", _khcheck("mine"))[0] == 403
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nope"},
                  "spec": {"selector": {"matchLabels": {"a": "b"}},
                           "template": {"metadata": {"labels": {"a": "b"}},
                                        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
    assert api("POST", f"/apis/apps/v1/namespaces/{installed.namespace}/deployments", deployment)[0] == 403


@pytest.mark.parametrize(("verb", "resource", "group", "subresource"), [
    ("get", "secrets", "", ""),
    ("list", "configmaps", "", ""),
    ("update", "pods", "", ""),
    ("patch", "pods", "", ""),
    ("deletecollection", "pods", "", ""),
    ("get", "pods", "", "exec"),
    ("create", "pods", "", "exec"),
    ("list", "nodes", "", ""),
    ("create", "khchecks", "comcast.github.io", ""),
    ("delete", "khchecks", "comcast.github.io", ""),
    ("update", "khchecks", "comcast.github.io", ""),
    ("update", "khjobs", "comcast.github.io", ""),
    ("patch", "khstates", "comcast.github.io", ""),
    ("deletecollection", "khstates", "comcast.github.io", ""),
    ("create", "deployments", "apps", ""),
    ("create", "serviceaccounts", "", "token"),
    ("bind", "clusterroles", "rbac.authorization.k8s.io", ""),
    ("escalate", "roles", "rbac.authorization.k8s.io", ""),
    ("impersonate", "serviceaccounts", "", ""),
])
def test_the_service_account_is_denied_what_the_daemon_never_does(
        installed: Installed, cluster: TestCluster, verb: str, resource: str, group: str, subresource: str) -> None:
    api = API(cluster, installed.token)
    for ns in ("", installed.namespace, installed.other):
        assert not api.can(verb, resource, group, ns, subresource=subresource), (verb, resource, subresource, ns)


def test_helm_upgrade_rewrites_the_config_file_without_rolling_the_pods(
        helm: Helm, installed: Installed, cluster: TestCluster) -> None:
    ns = installed.namespace
    before = cluster.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/kuberhealthy")
    helm.run("upgrade", "kuberhealthy", str(CHART), "--namespace", ns, "--set", "checkReaper.logLevel=debug",
             kubeconfig=cluster.kubeconfig)
    cm = cluster.request("GET", f"/api/v1/namespaces/{ns}/configmaps/kuberhealthy")
    assert yaml.safe_load(cm["data"]["kuberhealthy.yaml"])["logLevel"] == "debug"
    # The daemon re-reads the mounted file, so a config change must not restart (and re-elect) it.
    after = cluster.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/kuberhealthy")
    assert after["metadata"]["generation"] == before["metadata"]["generation"]


def test_with_a_target_namespace_the_service_account_reaches_only_that_namespace(
        helm: Helm, cluster: TestCluster, namespace: str) -> None:
    target = create_namespace(cluster, "kh-target")
    elsewhere = create_namespace(cluster, "kh-elsewhere")
    helm.run("install", "kuberhealthy", str(CHART), "--namespace", namespace, "--skip-crds",
             "--set", f"targetNamespace={target}", kubeconfig=cluster.kubeconfig)
    try:
        api = API(cluster, _token_of(cluster.sa_kubeconfig(namespace, "kuberhealthy")))
        status, body = api("GET", f"{GROUP_PATH}/namespaces/{target}/khchecks")
        assert status == 200
        assert {c["metadata"]["name"] for c in body["items"]} == {"daemonset", "deployment", "dns-status-internal"}
        assert api("POST", f"{GROUP_PATH}/namespaces/{target}/khstates", _khstate("s"))[0] == 201
        assert api("POST", f"/api/v1/namespaces/{target}/pods", _pod("checker"))[0] == 201

        assert api("GET", f"{GROUP_PATH}/khchecks")[0] == 403
        assert api("GET", f"{GROUP_PATH}/namespaces/{elsewhere}/khchecks")[0] == 403
        assert api("POST", f"/api/v1/namespaces/{elsewhere}/pods", _pod("checker"))[0] == 403
        assert not api.can("list", "pods", "", namespace)
        assert api.can("update", "leases", "coordination.k8s.io", namespace, "kuberhealthy")
    finally:
        helm.run("uninstall", "kuberhealthy", "--no-hooks", "--namespace", namespace, kubeconfig=cluster.kubeconfig,
                 check=False)
        delete_quietly(cluster, khs(target, "s"), f"/api/v1/namespaces/{target}/pods/checker")


# --- the pre-delete hook that stops the daemons before Helm removes their RBAC --------------------------

def test_the_uninstall_hook_stops_the_daemon_with_a_role_that_can_only_scale_it_and_list_pods(helm: Helm) -> None:
    objs = helm.template(namespace="kh")
    hooked = [o for o in objs if (o["metadata"].get("annotations") or {}).get("helm.sh/hook") == "pre-delete"]
    assert sorted(o["kind"] for o in hooked) == ["Job", "Role", "RoleBinding", "ServiceAccount"]
    job = one(objs, "Job", "kuberhealthy-stop-release")
    weights = {o["kind"]: int(o["metadata"]["annotations"]["helm.sh/hook-weight"]) for o in hooked}
    assert weights["Job"] > weights["Role"] == weights["RoleBinding"] == weights["ServiceAccount"]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][:5] == ["stop-release", "--namespace", "kh", "--deployment", "kuberhealthy"]
    assert container["image"] == one(objs, "Deployment", "kuberhealthy")["spec"]["template"]["spec"][
        "containers"][0]["image"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["serviceAccountName"] == "kuberhealthy-stop-release" and pod["restartPolicy"] == "Never"
    role = one(objs, "Role", "kuberhealthy-stop-release")
    assert _rules_by_resource(role) == {"apps/deployments": {"get", "patch"}, "/pods": {"list"}}
    assert [r.get("resourceNames") for r in role["rules"] if "deployments" in r["resources"]] == [["kuberhealthy"]]
    binding = one(objs, "RoleBinding", "kuberhealthy-stop-release")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kuberhealthy-stop-release", "namespace": "kh"}]


def test_the_uninstall_hook_can_be_turned_off(helm: Helm) -> None:
    objs = helm.template("uninstallHook.enabled=false", namespace="kh")
    assert not [o for o in objs if "stop-release" in o["metadata"]["name"]]
