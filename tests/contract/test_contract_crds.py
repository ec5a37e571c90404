"""docs/interface.md#custom-resources: the three custom resources as the API server serves them (from the chart's
CRD files), and Kuberhealthy v3's HealthCheck beside them."""
from __future__ import annotations

import json
import ssl
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.cluster.apiserver import ADMIN_TOKEN, TestCluster
from testbed.cluster.builders import GROUP, khc, khcheck, khj, khjob, khs, khstate
from testbed.cluster.objects import create_namespace
from testbed.paths import CRD_DIR

V3_GROUP = "kuberhealthy.github.io"
V3_STATUS = {"ok": "boolean", "errors": "array", "consecutiveFailures": "integer", "runDuration": "integer",
             "namespace": "string", "currentUUID": "string", "lastRunUnix": "integer", "successCount": "integer",
             "failureCount": "integer", "lastOKUnix": "integer", "lastFailureUnix": "integer",
             "additionalMetadata": "string"}
EXPECTED = {
    "khchecks": ("KuberhealthyCheck", "khc", ["runInterval", "timeout", "podSpec", "extraLabels", "extraAnnotations"]),
    "khstates": ("KuberhealthyState", "khs", ["OK", "Errors", "RunDuration", "Namespace", "Node", "LastRun",
                                              "AuthoritativePod", "uuid"]),
    "khjobs": ("KuberhealthyJob", "khj", ["phase", "timeout", "podSpec", "extraLabels", "extraAnnotations"]),
}


def crd(cluster: TestCluster, plural: str) -> dict[str, Any]:
    return cluster.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}")


def v1(obj: dict[str, Any]) -> dict[str, Any]:
    versions = [v for v in obj["spec"]["versions"] if v["name"] == "v1"]
    assert len(versions) == 1
    return versions[0]


def test_the_chart_ships_the_three_crds_and_v3_s_healthchecks_as_yaml() -> None:
    found: dict[str, str] = {}
    for path in sorted(Path(CRD_DIR).glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                found[doc["spec"]["names"]["plural"]] = doc["spec"]["group"]
    assert found == {**{p: GROUP for p in EXPECTED}, "healthchecks": V3_GROUP}


@pytest.mark.parametrize("plural", list(EXPECTED))
def test_each_crd_is_namespaced_v1_with_its_kind_and_short_name(cluster: TestCluster, plural: str) -> None:
    kind, short, _ = EXPECTED[plural]
    obj = crd(cluster, plural)
    assert obj["spec"]["group"] == GROUP
    assert obj["spec"]["scope"] == "Namespaced"
    assert obj["spec"]["names"]["kind"] == kind
    assert obj["spec"]["names"]["plural"] == plural
    assert short in obj["spec"]["names"].get("shortNames", [])
    ver = v1(obj)
    assert ver["served"] is True and ver["storage"] is True


def test_discovery_lists_the_short_names(cluster: TestCluster) -> None:
    res = {r["name"]: r for r in cluster.request("GET", f"/apis/{GROUP}/v1")["resources"]}
    for plural, (kind, short, _) in EXPECTED.items():
        assert plural in res
        assert res[plural]["namespaced"] is True
        assert res[plural]["kind"] == kind
        assert short in res[plural].get("shortNames", [])


def test_khstates_print_ok_and_last_run(cluster: TestCluster) -> None:
    cols = {c["name"]: c["jsonPath"] for c in v1(crd(cluster, "khstates")).get("additionalPrinterColumns", [])}
    assert cols.get("OK") == ".spec.OK"
    assert cols.get("LastRun") == ".spec.LastRun"


def test_the_server_side_table_shows_ok_and_last_run_for_khstates(cluster: TestCluster) -> None:
    ns = create_namespace(cluster, "ccrd")
    cluster.request("POST", khs(ns), khstate("tabled", OK=True, Errors=[], RunDuration="1s", Namespace=ns, Node="n",
                                             LastRun="2024-05-01T10:00:00Z", AuthoritativePod="p", uuid="u"))
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(cluster.server + khs(ns))
    req.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
    req.add_header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
    with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
        table = json.loads(resp.read())
    names = [c["name"] for c in table["columnDefinitions"]]
    assert "OK" in names and "LastRun" in names
    row = table["rows"][0]["cells"]
    assert row[names.index("OK")] in (True, "true")


@pytest.mark.parametrize("plural", list(EXPECTED))
def test_each_crd_schema_names_the_spec_fields_of_the_contract(cluster: TestCluster, plural: str) -> None:
    _, _, fields = EXPECTED[plural]
    spec = v1(crd(cluster, plural))["schema"]["openAPIV3Schema"]["properties"]["spec"]
    props = spec.get("properties", {})
    missing = [f for f in fields if f not in props]
    assert not missing or spec.get("x-kubernetes-preserve-unknown-fields"), f"{plural} spec lacks {missing}"


def test_resources_keep_every_contract_field_through_the_api(cluster: TestCluster) -> None:
    ns = create_namespace(cluster, "ccrd")
    check = khcheck("keep", interval="90s", timeout="1m30s", extraLabels={"a": "b"}, extraAnnotations={"c": "d"})
    check["spec"]["podSpec"]["containers"][0].update({"command": ["/bin/true"], "resources": {"limits": {"cpu": "1"}}})
    check["spec"]["podSpec"]["serviceAccountName"] = "checker"
    got = cluster.request("POST", khc(ns), check)["spec"]
    assert got == check["spec"]
    job = khjob("keepj", timeout="2m")
    job["spec"].update({"extraLabels": {"a": "b"}, "extraAnnotations": {"c": "d"}})
    got = cluster.request("POST", khj(ns), job)["spec"]
    assert got == job["spec"]
    st = {"OK": False, "Errors": ["x", "y"], "RunDuration": "1.234s", "Namespace": ns, "Node": "node-1",
          "LastRun": "2024-05-01T10:00:00Z", "AuthoritativePod": "kh-0", "uuid": "3f1c"}
    got = cluster.request("POST", khs(ns), khstate("keeps", **st))["spec"]
    assert got == st


def test_healthchecks_are_served_as_v3_names_them_with_v3_s_spec_and_status_fields(cluster: TestCluster) -> None:
    obj = cluster.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/healthchecks.{V3_GROUP}")
    names = obj["spec"]["names"]
    assert obj["spec"]["scope"] == "Namespaced"
    assert (names["kind"], names["plural"], names["singular"]) == ("HealthCheck", "healthchecks", "healthcheck")
    assert "hc" in names.get("shortNames", [])
    (ver,) = [v for v in obj["spec"]["versions"] if v["name"] == "v2"]
    assert ver["served"] is True and ver["storage"] is True and "status" in ver.get("subresources", {})
    schema = ver["schema"]["openAPIV3Schema"]["properties"]
    spec = schema["spec"]["properties"]
    assert {"singleRunOnly", "runInterval", "timeout", "extraAnnotations", "extraLabels", "podSpec"} <= set(spec)
    assert {"metadata", "spec"} <= set(spec["podSpec"]["properties"])
    status = schema["status"]["properties"]
    assert {k: status[k]["type"] for k in V3_STATUS} == V3_STATUS
    assert status["runDuration"]["format"] == "int64"  # nanoseconds, as Go's time.Duration


def test_a_healthcheck_keeps_its_spec_and_its_status_through_the_api(cluster: TestCluster) -> None:
    ns = create_namespace(cluster, "ccrd")
    path = f"/apis/{V3_GROUP}/v2/namespaces/{ns}/healthchecks"
    spec = {"singleRunOnly": False, "runInterval": "90s", "timeout": "30s", "extraLabels": {"a": "b"},
            "extraAnnotations": {"c": "d"},
            "podSpec": {"metadata": {"labels": {"e": "f"}, "annotations": {"g": "h"}},
                        "spec": {"containers": [{"name": "main", "image": "i", "command": ["/bin/true"]}],
                                 "restartPolicy": "Never"}}}
    created = cluster.request("POST", path, {"apiVersion": f"{V3_GROUP}/v2", "kind": "HealthCheck",
                                             "metadata": {"name": "keep"}, "spec": spec})
    assert created["spec"] == spec
    status = {"ok": True, "errors": [], "consecutiveFailures": 0, "runDuration": 1500000000, "namespace": ns,
              "currentUUID": "", "lastRunUnix": 1714557600, "successCount": 1, "failureCount": 0,
              "lastOKUnix": 1714557601, "lastFailureUnix": 0, "additionalMetadata": ""}
    created["status"] = status
    assert cluster.request("PUT", f"{path}/keep/status", created)["status"] == status
