"""The chart's alert rules, judged by `promtool test rules` against what `helm template` renders.

The input series carry the labels a real scrape through the chart's ServiceMonitor produces: job (the
Service's `app` label, the ServiceMonitor's jobLabel), namespace (the release's, the target's label wins),
instance, pod, service, endpoint and container, and, for the check families, the check's own namespace as
exported_namespace. Each replica exports the same per-check values; the rules must alert once per check
whatever the number of replicas, the error text or a rolling restart, and KuberhealthyError must fire
when no replica is scraped healthy; a paused check (kuberhealthy_check_paused 1) raises no per-check
alert. Series samples are one minute apart (promtool's notation: `1x3` is four samples of 1, `_x3`
three missing ones); `stale` is the marker Prometheus writes when a series leaves a scrape or a target
goes away.

Every test runs in both label styles of config.metricsStyle (the rules and the Grafana dashboard follow
it): the scenarios are written with v2's check label ("<ns>/<name>"), and Scenario turns series,
expected alerts and expected samples into v3's (check="<name>" beside exported_namespace="<ns>") when the
chart was rendered for v3.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.error
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kuberhealthy.kube import KHCHECKS, KHSTATES
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khcheck
from testbed.daemons.inprocess import InProcessDaemon
from testbed.paths import CHART
from testbed.sim.kubelet import SimKubelet
from testbed.tools.helm import Helm
from testbed.wait import wait_for

RELEASE_NS = "monitoring"
JOB = "kuberhealthy"
CHECK = "apps/dns"  # kuberhealthy_check's check label is <ns>/<name> (v2's style; Scenario restyles it for v3)
STYLES = ("v2", "v3")
DASHBOARDS = {"v2": CHART / "dashboards" / "kuberhealthy.json", "v3": CHART / "dashboards" / "kuberhealthy-v3.json"}
Labels = dict[str, str]


def promtool() -> str:
    found = shutil.which("promtool") or "/usr/bin/promtool"
    if not Path(found).is_file():
        pytest.skip("promtool not found: run `bash hack/tools.sh`")
    return found


def render(helm: Helm, style: str, *values: str) -> list[dict[str, Any]]:
    """`helm template` with config.metricsStyle set to `style` (v2: left at its default)."""
    if style == "v2":
        return helm.template(*values, namespace=RELEASE_NS)
    return helm.template(*values, "config.metricsStyle=v3", namespace=RELEASE_NS)


@pytest.fixture(name="rules", scope="module", params=STYLES)
def rules_fixture(request: pytest.FixtureRequest, helm: Helm,
                  tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The rendered PrometheusRule's groups (a Prometheus rule file), the rules by alert name, and the style."""
    objs = render(helm, request.param, "prometheus.enabled=true", "prometheus.serviceMonitor.enabled=true",
                  "prometheus.prometheusRule.enabled=true")
    (rule,) = [o for o in objs if o["kind"] == "PrometheusRule"]
    path = tmp_path_factory.mktemp("rules") / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return {"path": path, "by_name": {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]},
            "style": request.param}


def restyle(labels: Labels, style: str) -> Labels:
    """v2's labels of a check's series, alert or sample in the given style: v3 labels the check by its name
    and its namespace (which a scrape through the ServiceMonitor stores as exported_namespace)."""
    if style == "v2" or "check" not in labels:
        return labels
    namespace, _, name = labels["check"].partition("/")
    return {**labels, "exported_namespace": namespace, "check": name}


def target(pod: str, ip: str, job: str = JOB, namespace: str = RELEASE_NS) -> Labels:
    """The target labels a ServiceMonitor scrape of one daemon replica adds to each of its series."""
    return {"job": job, "namespace": namespace, "instance": f"{ip}:8080", "pod": pod, "service": job,
            "endpoint": "http", "container": "kuberhealthy"}


def per_check(replica: Labels, check: str = CHECK) -> Labels:
    """A per-check series' labels: the check's namespace arrives as exported_namespace."""
    return {**replica, "check": check, "exported_namespace": check.partition("/")[0]}


def check_labels(replica: Labels, error: str = "", ok: bool = True, check: str = CHECK) -> Labels:
    """kuberhealthy_check's (and kuberhealthy_job's) labels, status and error included."""
    return {**per_check(replica, check), "status": "1" if ok else "0", "error": error}


def selector(metric: str, labels: Labels) -> str:
    inner = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{metric}{{{inner}}}"


@dataclass
class Scenario:
    """Input series and the alerts expected at given minutes; run() feeds them to `promtool test rules`."""
    rules: dict[str, Any]
    series: list[dict[str, str]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    promql: list[dict[str, Any]] = field(default_factory=list)  # promql_expr_test entries

    @property
    def style(self) -> str:
        return str(self.rules["style"])

    def add(self, metric: str, labels: Labels, values: str) -> Scenario:
        self.series.append({"series": selector(metric, restyle(labels, self.style)), "values": values})
        return self

    def replica(self, replica: Labels, values: str = "1x20", cluster: str = "1x20") -> Scenario:
        """A replica's `up` and its cluster state (values in promtool notation)."""
        return self.add("up", replica, values).add("kuberhealthy_cluster_state", replica, cluster)

    def expect(self, minute: int, alert: str, *labelsets: Labels, value: str = "") -> Scenario:
        rule = self.rules["by_name"][alert]
        alerts = []
        for extra in (restyle(labels, self.style) for labels in labelsets):
            def label(m: re.Match[str], labels: Labels = extra) -> str:
                return labels.get(m.group(1), "")
            annotations = {k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", label, v).replace("{{ $value }}", value)
                           for k, v in rule.get("annotations", {}).items()}
            alerts.append({"exp_labels": {**rule.get("labels", {}), **extra}, "exp_annotations": annotations})
        self.checks.append({"eval_time": f"{minute}m", "alertname": alert, "exp_alerts": alerts})
        return self

    def quiet(self, *minutes: int, alerts: tuple[str, ...] = ()) -> Scenario:
        """No alert of the given names (all of the chart's by default) at the given minutes."""
        for minute in minutes:
            for alert in alerts or tuple(self.rules["by_name"]):
                self.expect(minute, alert)
        return self

    def run(self, tmp_path: Path) -> None:
        test = {"rule_files": [str(self.rules["path"])], "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": self.series, "alert_rule_test": self.checks,
                               "promql_expr_test": self.promql}]}
        path = tmp_path / "test.yaml"
        path.write_text(yaml.safe_dump(test, sort_keys=False))
        proc = subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True, text=True,
                              timeout=60, check=False)
        assert proc.returncode == 0, f"promtool test rules failed:\n{proc.stdout}\n{proc.stderr}"


A = target("kuberhealthy-7d9f-a", "10.0.0.11")
B = target("kuberhealthy-7d9f-b", "10.0.0.12")
C = target("kuberhealthy-5c4e-c", "10.0.0.13")  # the new ReplicaSet's pods in a rollout
D = target("kuberhealthy-5c4e-d", "10.0.0.14")
FAILING = {"check": CHECK}


def healthy(s: Scenario, replica: Labels, minutes: int = 20) -> Scenario:
    """A replica reporting the check OK, run every minute (its last success follows the clock)."""
    s.replica(replica, f"1x{minutes}", f"1x{minutes}")
    s.add("kuberhealthy_check", check_labels(replica), f"1x{minutes}")
    s.add("kuberhealthy_check_consecutive_failures", per_check(replica), f"0x{minutes}")
    s.add("kuberhealthy_check_last_success_timestamp_seconds", per_check(replica), f"0+60x{minutes}")
    return s.add("kuberhealthy_check_interval_seconds", per_check(replica), f"60x{minutes}")


def failing_on_both(s: Scenario, *errors: tuple[str, str]) -> Scenario:
    """Replicas a and b up, the cluster unhealthy, CHECK failing with these (error, values) series."""
    for r in (A, B):
        s.replica(r, "1x10", "0x10")
        for error, values in errors:
            s.add("kuberhealthy_check", check_labels(r, error, ok=False), values)
    return s


def test_the_rendered_rules_pass_promtool_check_rules(rules: dict[str, Any]) -> None:
    proc = subprocess.run([promtool(), "check", "rules", str(rules["path"])], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {"KuberhealthyError", "ClusterUnhealthy", "KuberhealthyCheckFailing"} <= set(rules["by_name"])  # v2's


def test_a_healthy_cluster_with_two_replicas_fires_nothing(rules: dict[str, Any], tmp_path: Path) -> None:
    s = Scenario(rules)
    healthy(healthy(s, A), B)
    s.quiet(0, 6, 12, 19).run(tmp_path)


def test_a_check_failing_on_one_replica_alerts_after_five_minutes_and_resolves(
        rules: dict[str, Any], tmp_path: Path) -> None:
    # OK at minutes 0-2, failing at 3-13 (a new series: status and error changed), OK again from 14.
    s = Scenario(rules).replica(A, "1x20", "1x2 0x10 1x6")
    s.add("kuberhealthy_check", check_labels(A), "1x2 stale")
    s.add("kuberhealthy_check", check_labels(A, "dns lookup failed", ok=False), "_x3 0x10 stale")
    s.add("kuberhealthy_check", check_labels(A), "_x14 1x6")
    s.quiet(2, alerts=("KuberhealthyCheckFailing", "ClusterUnhealthy"))
    s.expect(7, "KuberhealthyCheckFailing")  # failing since minute 3: pending until minute 8
    s.expect(8, "KuberhealthyCheckFailing", FAILING).expect(8, "ClusterUnhealthy", {})
    s.expect(13, "KuberhealthyCheckFailing", FAILING)
    s.quiet(15, alerts=("KuberhealthyCheckFailing", "ClusterUnhealthy"))
    s.run(tmp_path)


def test_a_check_failing_on_two_replicas_gives_one_alert_and_one_cluster_alert(
        rules: dict[str, Any], tmp_path: Path) -> None:
    s = failing_on_both(Scenario(rules), ("timed out", "0x10"))
    s.expect(4, "KuberhealthyCheckFailing").expect(4, "ClusterUnhealthy")
    s.expect(6, "KuberhealthyCheckFailing", FAILING).expect(6, "ClusterUnhealthy", {})
    s.quiet(6, alerts=("KuberhealthyError",)).run(tmp_path)


def test_a_check_failing_seven_minutes_whose_error_changed_at_minute_three_still_alerts(
        rules: dict[str, Any], tmp_path: Path) -> None:
    s = failing_on_both(Scenario(rules), ("pod never started", "0x2 stale"), ("timed out after 5m0s", "_x3 0x7"))
    s.expect(5, "KuberhealthyCheckFailing", FAILING).expect(7, "KuberhealthyCheckFailing", FAILING)
    s.run(tmp_path)


def test_a_check_s_severity_and_category_labels_neither_split_nor_relabel_its_alerts(
        rules: dict[str, Any], tmp_path: Path) -> None:
    # The check's kuberhealthy.io/category label changes at minute 3: a new series, the same alert.
    s = Scenario(rules)
    for r in (A, B):
        s.replica(r, "1x10", "0x10")
        labels = {**check_labels(r, "timed out", ok=False), "severity": "critical"}
        s.add("kuberhealthy_check", {**labels, "category": "network"}, "0x2 stale")
        s.add("kuberhealthy_check", {**labels, "category": "dns"}, "_x3 0x7")
    s.expect(6, "KuberhealthyCheckFailing", FAILING).run(tmp_path)  # severity: the rule's own (warning)


def test_one_replica_that_still_sees_the_check_ok_raises_no_alert(rules: dict[str, Any], tmp_path: Path) -> None:
    # max by (check): a check alerts only when every replica scraped says it fails, so a replica behind
    # (or ahead) on the khstates cannot raise a false alert.
    s = Scenario(rules).replica(A).replica(B)
    s.add("kuberhealthy_check", check_labels(A, "timed out", ok=False), "0x20")
    s.add("kuberhealthy_check", check_labels(B), "1x20")
    s.quiet(6, 12, alerts=("KuberhealthyCheckFailing",)).run(tmp_path)


def test_a_rolling_restart_neither_holds_nor_interrupts_nor_doubles_alerts(
        rules: dict[str, Any], tmp_path: Path) -> None:
    # Pods a and b are replaced by c (minute 3) and d (minute 5); old series end with a staleness marker.
    failing = "dns lookup failed"
    s = Scenario(rules)
    for old, new, at in ((A, C, 3), (B, D, 5)):
        s.replica(old, f"1x{at - 1} stale", f"0x{at - 1} stale")
        s.add("kuberhealthy_check", check_labels(old, failing, ok=False), f"0x{at - 1} stale")
        s.replica(new, f"_x{at} 1x{14 - at}", f"_x{at} 0x{14 - at}")
        s.add("kuberhealthy_check", check_labels(new, failing, ok=False), f"_x{at} 0x{14 - at}")
    s.expect(4, "KuberhealthyCheckFailing")
    for minute in (5, 6, 10):
        s.expect(minute, "KuberhealthyCheckFailing", FAILING).expect(minute, "ClusterUnhealthy", {})
    s.quiet(3, 5, 6, 10, alerts=("KuberhealthyError",)).run(tmp_path)


def test_a_healthy_rolling_restart_fires_nothing(rules: dict[str, Any], tmp_path: Path) -> None:
    s = Scenario(rules)
    for old, new, at in ((A, C, 3), (B, D, 5)):
        s.replica(old, f"1x{at - 1} stale", f"1x{at - 1} stale")
        s.add("kuberhealthy_check", check_labels(old), f"1x{at - 1} stale")
        s.replica(new, f"_x{at} 1x{14 - at}", f"_x{at} 1x{14 - at}")
        s.add("kuberhealthy_check", check_labels(new), f"_x{at} 1x{14 - at}")
    s.quiet(2, 3, 4, 5, 6, 10, alerts=("KuberhealthyError", "ClusterUnhealthy", "KuberhealthyCheckFailing"))
    s.run(tmp_path)


def test_all_replicas_down_then_gone_fire_kuberhealthy_error_even_beside_another_release(
        rules: dict[str, Any], tmp_path: Path) -> None:
    # Both replicas fail their scrapes from minute 2 (up 0), their targets vanish at minute 5, and
    # another release in another namespace stays up: it must not mask this one.
    other = target("kuberhealthy-0-x", "10.1.0.1", namespace="kuberhealthy-canary")
    s = Scenario(rules).add("up", other, "1x20")
    for r in (A, B):
        s.add("up", r, "1x1 0x3 stale")
    s.quiet(1, alerts=("KuberhealthyError",)).expect(6, "KuberhealthyError")
    s.expect(7, "KuberhealthyError", {}).expect(12, "KuberhealthyError", {}).run(tmp_path)


def test_one_replica_scraped_healthy_keeps_kuberhealthy_error_quiet(rules: dict[str, Any], tmp_path: Path) -> None:
    s = Scenario(rules).add("up", A, "0x20").add("up", B, "1x20")
    s.quiet(6, 12, alerts=("KuberhealthyError",)).run(tmp_path)


def test_repeated_failures_and_staleness_alert_once_per_check_with_two_replicas(
        rules: dict[str, Any], tmp_path: Path) -> None:
    # Minute 0 to 10: 0 to 10 failures in a row; the last success at minute 0, run every minute.
    s = Scenario(rules)
    for r in (A, B):
        s.replica(r, "1x10", "0x10")
        s.add("kuberhealthy_check_consecutive_failures", per_check(r), "0+1x10")
        s.add("kuberhealthy_check_last_success_timestamp_seconds", per_check(r), "0x10")
        s.add("kuberhealthy_check_interval_seconds", per_check(r), "60x10")
    s.quiet(2, alerts=("KuberhealthyCheckFailingRepeatedly",))
    s.expect(3, "KuberhealthyCheckFailingRepeatedly", FAILING, value="3")
    s.quiet(3, alerts=("KuberhealthyCheckStale",))  # 180 s since the last success: not more than 3 intervals
    s.expect(4, "KuberhealthyCheckStale", FAILING).run(tmp_path)


def test_another_release_s_failing_checks_do_not_reach_this_release_s_rules(
        rules: dict[str, Any], tmp_path: Path) -> None:
    other = target("kuberhealthy-0-x", "10.1.0.1", namespace="kuberhealthy-canary")
    s = healthy(Scenario(rules), A).replica(other, "1x20", "0x20")
    s.add("kuberhealthy_check", check_labels(other, "timed out", ok=False), "0x20")
    s.add("kuberhealthy_check_consecutive_failures", per_check(other), "9x20")
    s.quiet(6, 12).run(tmp_path)


PER_CHECK_ALERTS = ("KuberhealthyCheckFailing", "KuberhealthyCheckFailingRepeatedly", "KuberhealthyCheckStale")


def failing_throughout(s: Scenario, replica: Labels, paused: str, cluster: str, minutes: int = 15) -> Scenario:
    """A replica scraped healthy whose CHECK has failed 9 runs in a row since its last success at minute 0,
    with this kuberhealthy_check_paused series (the daemon leaves a paused check out of the cluster state)."""
    s.replica(replica, f"1x{minutes}", cluster)
    s.add("kuberhealthy_check", check_labels(replica, "timed out", ok=False), f"0x{minutes}")
    s.add("kuberhealthy_check_paused", per_check(replica), paused)
    s.add("kuberhealthy_check_consecutive_failures", per_check(replica), f"9x{minutes}")
    s.add("kuberhealthy_check_last_success_timestamp_seconds", per_check(replica), f"0x{minutes}")
    return s.add("kuberhealthy_check_interval_seconds", per_check(replica), f"60x{minutes}")


def test_a_failing_paused_check_raises_no_alert_and_alerts_as_usual_once_the_pause_ends(
        rules: dict[str, Any], tmp_path: Path) -> None:
    # Paused at minutes 0-5 on both replicas; from minute 6 not paused (and counted in the cluster state).
    s = Scenario(rules)
    for r in (A, B):
        failing_throughout(s, r, paused="1x5 0x10", cluster="1x5 0x10")
    s.quiet(3, 5)
    s.expect(6, "KuberhealthyCheckFailingRepeatedly", FAILING, value="9").expect(6, "KuberhealthyCheckStale", FAILING)
    s.expect(10, "KuberhealthyCheckFailing").expect(10, "ClusterUnhealthy")  # pending since minute 6
    s.expect(11, "KuberhealthyCheckFailing", FAILING).expect(11, "ClusterUnhealthy", {})
    s.run(tmp_path)


def test_a_pause_seen_by_one_replica_only_keeps_the_check_s_alerts_quiet(
        rules: dict[str, Any], tmp_path: Path) -> None:
    # Replica b's khcheck cache has not seen the annotation yet: its series says not paused.
    s = failing_throughout(Scenario(rules), A, paused="1x15", cluster="1x15")
    failing_throughout(s, B, paused="0x15", cluster="0x15")
    s.quiet(6, 12, alerts=PER_CHECK_ALERTS).run(tmp_path)


def test_a_pause_of_another_check_does_not_silence_this_one(rules: dict[str, Any], tmp_path: Path) -> None:
    s = failing_throughout(Scenario(rules), A, paused="0x15", cluster="0x15")
    s.add("kuberhealthy_check_paused", per_check(A, "apps/other"), "1x15")
    s.expect(6, "KuberhealthyCheckFailing", FAILING).expect(6, "KuberhealthyCheckFailingRepeatedly", FAILING, value="9")
    s.expect(6, "KuberhealthyCheckStale", FAILING).run(tmp_path)


# --- the Grafana dashboard's panels, on the same series ------------------------------------------------------


def dashboard_queries(style: str) -> dict[str, list[str]]:
    """Each panel's queries by title, with the dashboard's variables at their "All" value (.*)."""
    found: dict[str, list[str]] = {}

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            exprs = [t["expr"] for t in panel.get("targets") or [] if t.get("expr")]
            if exprs:
                found[panel["title"]] = [e.replace("$namespace", ".*").replace("$check", ".*") for e in exprs]
            walk(panel.get("panels") or [])
    walk(json.loads(DASHBOARDS[style].read_text())["panels"])
    return found


def test_the_dashboard_counts_each_check_and_job_once_with_two_replicas_and_a_changed_error(
        rules: dict[str, Any], tmp_path: Path) -> None:
    q = dashboard_queries(rules["style"])
    s = Scenario(rules)
    for r in (A, B):
        s.replica(r, "1x10", "0x10")
        s.add("kuberhealthy_running", {**r, "current_master": A["pod"]}, "1x10")
        s.add("kuberhealthy_check", check_labels(r, "timed out", ok=False), "0x10")
        s.add("kuberhealthy_check", check_labels(r, check="apps/pods"), "1x10")
        s.add("kuberhealthy_job", check_labels(r, "exit 1", ok=False, check="apps/once"), "0x10")
        s.add("kuberhealthy_check_duration_seconds", per_check(r), "2x10")
    # Replica b's view of a third check is behind: it says failing, a says OK. Counted as OK (max).
    s.add("kuberhealthy_check", check_labels(A, check="apps/lagging"), "1x10")
    s.add("kuberhealthy_check", check_labels(B, "old error", ok=False, check="apps/lagging"), "0x10")

    def value(expr: str, *samples: tuple[Labels, float]) -> dict[str, Any]:
        expected = [{"labels": selector("", restyle(labels, s.style)) if labels else "{}", "value": v}
                    for labels, v in samples]
        return {"expr": expr, "eval_time": "5m", "exp_samples": expected}
    tests = [
        value(q["Cluster state"][0], ({}, 0)),
        value(q["Failing checks"][0], ({}, 1)),
        value(q["Failing jobs"][0], ({}, 1)),
        value(q["Checks"][0], ({}, 3)),
        value(q["Replicas"][0], ({}, 2)),
        value(q["Current master"][0], ({"current_master": A["pod"]}, 1)),
        value(q["Check status"][0], ({"check": CHECK}, 0), ({"check": "apps/pods"}, 1), ({"check": "apps/lagging"}, 1)),
        value(q["Check run duration"][0], ({"check": CHECK}, 2)),
        value(q["Failing checks and their errors"][0], ({"check": CHECK, "error": "timed out"}, 0)),
        value(q["Failing checks and their errors"][1], ({"check": "apps/once", "error": "exit 1"}, 0)),
        value(q["Job status"][0], ({"check": "apps/once"}, 0)),
    ]
    s.promql = tests
    s.run(tmp_path)


def test_the_dashboard_s_failing_checks_leave_a_paused_check_out_as_the_alerts_do(
        rules: dict[str, Any], tmp_path: Path) -> None:
    q = dashboard_queries(rules["style"])
    s = Scenario(rules)
    for r in (A, B):
        s.replica(r, "1x10", "0x10")
        s.add("kuberhealthy_check", check_labels(r, "timed out", ok=False), "0x10")
        s.add("kuberhealthy_check", check_labels(r, "refused", ok=False, check="apps/web"), "0x10")
        s.add("kuberhealthy_check_paused", per_check(r), "1x10" if r is A else "0x10")  # b has not seen it yet
        s.add("kuberhealthy_check_paused", per_check(r, "apps/web"), "0x10")
    s.promql = [{"expr": q["Failing checks"][0], "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": 1}]}]
    s.run(tmp_path)


def test_the_dashboard_tells_same_named_checks_of_two_namespaces_apart(rules: dict[str, Any], tmp_path: Path) -> None:
    q = dashboard_queries(rules["style"])
    s = Scenario(rules)
    for r in (A, B):
        s.replica(r, "1x10", "0x10")
        s.add("kuberhealthy_check", check_labels(r, "timed out", ok=False), "0x10")
        s.add("kuberhealthy_check", check_labels(r, check="infra/dns"), "1x10")
    s.promql = [{"expr": q["Checks"][0], "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": 2}]},
                {"expr": q["Failing checks"][0], "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": 1}]}]
    s.run(tmp_path)


# --- each style's rules and dashboard, as the chart renders them -----------------------------------------------

def v3_dashboard(v2: dict[str, Any]) -> dict[str, Any]:
    """The v3-style dashboard: v2's, each check told by its name and namespace label (exported_namespace
    through a scrape) instead of by its "<ns>/<name>" check label. The chart ships the result as
    dashboards/kuberhealthy-v3.json; write_v3_dashboard() rewrites it after a change to kuberhealthy.json."""
    def query(text: str) -> str:
        text = text.replace('check=~"$namespace/.*"', 'exported_namespace=~"$namespace"')
        text = re.sub(r"\b(by|on) \(check([,)])", r"\1 (exported_namespace, check\2", text)
        return text.replace("{{check}}", "{{exported_namespace}}/{{check}}")

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: query(v) if k in ("expr", "legendFormat", "query", "definition") and isinstance(v, str)
                    else walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value
    out: dict[str, Any] = walk(v2)
    out["description"] = v2["description"] + " (metricsStyle v3: checks labelled by name and namespace)"
    for var in out["templating"]["list"]:
        if var["name"] == "namespace":
            var["query"]["query"] = var["definition"] = "label_values(kuberhealthy_check, exported_namespace)"
            var["regex"] = ""
    for panel in out["panels"]:
        for step in panel.get("transformations") or []:
            renames = step.get("options", {}).get("renameByName")
            if renames is not None:
                renames["exported_namespace"] = "Namespace"
    return out


def write_v3_dashboard() -> None:
    DASHBOARDS["v3"].write_text(json.dumps(v3_dashboard(json.loads(DASHBOARDS["v2"].read_text())), indent=2,
                                           ensure_ascii=False) + "\n")


def test_the_v3_dashboard_is_the_v2_dashboard_with_v3s_check_labels() -> None:
    expected = v3_dashboard(json.loads(DASHBOARDS["v2"].read_text()))
    assert json.loads(DASHBOARDS["v3"].read_text()) == expected, (
        "dashboards/kuberhealthy-v3.json is out of step with kuberhealthy.json: run .venv/bin/python -c "
        "'from tests.integration.test_alert_rules import write_v3_dashboard; write_v3_dashboard()'")
    text = DASHBOARDS["v3"].read_text()
    assert "$namespace/" not in text and "by (check" not in text and "on (check" not in text


@pytest.mark.parametrize("style", STYLES)
def test_the_grafana_config_map_carries_the_dashboard_of_the_configured_style(helm: Helm, style: str) -> None:
    objs = render(helm, style, "grafana.dashboards.enabled=true")
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("grafana-dashboard")]
    assert json.loads(cm["data"]["kuberhealthy.json"]) == json.loads(DASHBOARDS[style].read_text())


def test_a_v3_style_rule_alerts_each_of_two_same_named_checks_and_names_its_namespace(
        rules: dict[str, Any], tmp_path: Path) -> None:
    s = Scenario(rules)
    for r in (A, B):
        s.replica(r, "1x10", "0x10")
        for check in (CHECK, "infra/dns"):
            s.add("kuberhealthy_check", check_labels(r, "timed out", ok=False, check=check), "0x10")
    s.expect(6, "KuberhealthyCheckFailing", FAILING, {"check": "infra/dns"}).run(tmp_path)
    description = rules["by_name"]["KuberhealthyCheckFailing"]["annotations"]["description"]
    named = "{{ $labels.check }}" if s.style == "v2" else "{{ $labels.exported_namespace }}/{{ $labels.check }}"
    assert description == f"Kuberhealthy check {named} is failing."


def test_a_real_daemon_in_v3_style_exports_what_the_v3_rules_and_dashboard_query_labelled_as_they_expect(
        helm: Helm, cluster: TestCluster, namespace: str, kubelet: SimKubelet) -> None:
    objs = render(helm, "v3", "prometheus.enabled=true", "prometheus.prometheusRule.enabled=true")
    (rule,) = [o for o in objs if o["kind"] == "PrometheusRule"]
    # Every metric they query is the daemon's (kuberhealthy_*) but `up`, which Prometheus writes itself.
    used = set(re.findall(r"\bkuberhealthy_\w+", json.dumps(rule["spec"]) + DASHBOARDS["v3"].read_text()))
    check = khcheck("scraped", interval="1m")
    check["metadata"]["labels"] = {"kuberhealthy.io/severity": "critical", "kuberhealthy.io/category": "network"}
    cluster.request("POST", KHCHECKS.path(namespace), check)
    daemon = InProcessDaemon(cluster, namespace, settings={"metricsStyle": "v3"}).start()
    try:
        def ran() -> bool:
            try:
                return bool(cluster.request("GET", KHSTATES.path(namespace, "scraped"))["spec"].get("RunDuration"))
            except urllib.error.HTTPError:  # no khstate yet
                return False
        wait_for(ran, 60, 0.1, what="a check run")

        def scraped() -> str | None:
            text = requests.get(f"{daemon.url}/metrics", timeout=10).text
            return text if 'check="scraped"' in text else None
        text = wait_for(scraped, 30, 0.2, what="a scrape that has the check") or ""
    finally:
        daemon.stop()
    parsed = list(text_string_to_metric_families(text))
    samples = [(s.name, s.labels) for f in parsed for s in f.samples]
    exported = {f.name for f in parsed} | {name for name, _ in samples}  # kuberhealthy_job has no job here
    assert used and used - exported == set()
    (labels,) = [lab for name, lab in samples if name == "kuberhealthy_check"]
    assert (labels["check"], labels["namespace"]) == ("scraped", namespace)
    assert (labels["severity"], labels["category"]) == ("critical", "network")
    assert all(lab.get("check") in (None, "scraped") for _, lab in samples)  # no "<ns>/<name>" anywhere
