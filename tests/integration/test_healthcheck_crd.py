"""The HealthCheck CRD (kuberhealthy.github.io/v2, Kuberhealthy v3's API) on a real API server: served
under v3's names with a status subresource; every manifest in the shapes v3 documents and tests with is
stored as written, status included; Go durations are taken and anything else refused, as is a podSpec
without containers; our own status fields are kept beside v3's. And with v3's own CRD installed in its
place (tests/fixtures/v3/healthcheck-crd.yaml), the API server drops our status fields, which a dry run
of a status write shows.

The schema's structure and its generation: tests/unit/test_crd_schema.py."""
from __future__ import annotations

import copy
import json
import urllib.error
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.cluster.apiserver import TestCluster

GROUP = "kuberhealthy.github.io"
API_VERSION = f"{GROUP}/v2"
CRD_NAME = f"healthchecks.{GROUP}"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "v3"
V3_STATUS_KEYS = {"ok", "errors", "runDuration", "namespace", "currentUUID", "lastRunUnix", "successCount",
                  "failureCount", "lastOKUnix", "lastFailureUnix", "additionalMetadata"}  # v3's CRD has these
OUR_STATUS_KEYS = {"node", "history", "runBinding", "tokenBinding"}


def hc(ns: str, name: str | None = None) -> str:
    base = f"/apis/{API_VERSION}/namespaces/{ns}/healthchecks"
    return f"{base}/{name}" if name else base


def healthcheck(name: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"runInterval": "1m", "timeout": "30s",
                            "podSpec": {"spec": {"containers": [{"name": "main", "image": "kh-sim/ok"}],
                                                 "restartPolicy": "Never"}}}
    body.update(spec)
    return {"apiVersion": API_VERSION, "kind": "HealthCheck", "metadata": {"name": name}, "spec": body}


def refusal(cluster: TestCluster, method: str, path: str, body: dict[str, Any]) -> tuple[int, str]:
    """(status, message) of a request the API server should refuse; (200, "") if it took it."""
    try:
        cluster.request(method, path, body)
    except urllib.error.HTTPError as e:
        return e.code, str(json.loads(e.read() or b"{}").get("message", ""))
    return 200, ""


def full_status(ns: str) -> dict[str, Any]:
    """A status with every field of v3's and of ours set."""
    return {"ok": False, "errors": ["boom"], "consecutiveFailures": 2, "runDuration": 1_234_000_000, "namespace": ns,
            "currentUUID": "", "lastRunUnix": 1714557600, "successCount": 5, "failureCount": 2,
            "lastOKUnix": 1714550000, "lastFailureUnix": 1714557601, "additionalMetadata": "x",
            "node": "node-1",
            "history": [{"uuid": "u2", "start": "2024-05-01T10:00:00Z", "duration": "1.234s", "OK": False,
                         "errors": ["boom"], "node": "node-1", "pod": "c-2", "outcome": "reported"},
                        {"uuid": "u1", "start": "2024-05-01T09:59:00Z", "duration": "0s", "OK": None,
                         "errors": [], "outcome": "skipped"}],
            "runBinding": {"uuid": "u3", "pod": "c-3", "keySha256": "ab" * 32, "authoritativePod": "kh-0",
                           "reportedUUID": "u2", "finishedUUID": "u2"},
            "tokenBinding": {"generation": 1}}


def write_status(cluster: TestCluster, ns: str, name: str, status: dict[str, Any],
                 dry_run: bool = False) -> dict[str, Any]:
    """PUT the status subresource (the object as read, with this status); returns what the API server
    stored (or, with dry_run, would store)."""
    obj = cluster.request("GET", hc(ns, name))
    obj["status"] = status
    return dict(cluster.request("PUT", hc(ns, name) + "/status" + ("?dryRun=All" if dry_run else ""), obj))


# --- served as v3 names it ------------------------------------------------------------------------------

def test_the_healthcheck_crd_is_namespaced_v2_with_v3_s_names_and_a_status_subresource(cluster: TestCluster) -> None:
    crd = cluster.request("GET", f"{CRDS}/{CRD_NAME}")
    assert crd["spec"]["group"] == GROUP and crd["spec"]["scope"] == "Namespaced"
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["singular"]) == ("HealthCheck", "healthchecks", "healthcheck")
    assert names["shortNames"] == ["hc"]
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v2" and version["served"] is True and version["storage"] is True
    assert version["subresources"] == {"status": {}}
    resources = {r["name"]: r for r in cluster.request("GET", f"/apis/{API_VERSION}")["resources"]}
    assert resources["healthchecks"]["namespaced"] is True and resources["healthchecks"]["shortNames"] == ["hc"]
    assert "healthchecks/status" in resources


def test_the_table_shows_ok_interval_timeout_failures_and_age_and_the_error_only_when_wide(
        cluster: TestCluster, namespace: str) -> None:
    cluster.request("POST", hc(namespace), healthcheck("tabled"))
    write_status(cluster, namespace, "tabled", {"ok": False, "errors": ["it broke"], "consecutiveFailures": 3})
    status, raw = cluster.get_raw(hc(namespace), accept="application/json;as=Table;v=v1;g=meta.k8s.io")
    assert status == 200
    table = json.loads(raw)
    columns = [(c["name"], c["priority"]) for c in table["columnDefinitions"]]
    assert columns == [("Name", 0), ("OK", 0), ("RunInterval", 0), ("Timeout", 0), ("Failures", 0),
                       ("ErrorMessage", 1), ("Age", 0)]
    assert table["rows"][0]["cells"][:6] == ["tabled", False, "1m", "30s", 3, "it broke"]


# --- what v3 users write is taken as written --------------------------------------------------------------

def v3_manifests() -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((FIXTURES / "healthchecks.yaml").read_text()) if d]
    assert len(docs) >= 6 and all(d["kind"] == "HealthCheck" and d["apiVersion"] == API_VERSION for d in docs)
    return docs


@pytest.mark.parametrize("manifest", v3_manifests(), ids=lambda d: d["metadata"]["name"])
def test_a_manifest_in_a_shape_v3_documents_is_stored_as_written_status_included(
        cluster: TestCluster, namespace: str, manifest: dict[str, Any]) -> None:
    obj = copy.deepcopy(manifest)
    obj["metadata"]["namespace"] = namespace
    status = obj.pop("status", None)
    try:
        stored = cluster.request("POST", hc(namespace), obj)
    except urllib.error.HTTPError as e:
        pytest.fail(f"refused ({e.code}): {e.read()[:600]!r}")
    assert stored["spec"] == json.loads(json.dumps(manifest["spec"]))
    if status is not None:
        status["namespace"] = namespace
        assert write_status(cluster, namespace, obj["metadata"]["name"], status)["status"] == status
        assert cluster.request("GET", hc(namespace, obj["metadata"]["name"]))["status"] == status


GO_DURATIONS = ["0", "+0", "-0", "0s", "1ns", "1us", "1\u00b5s", "1\u03bcs", "1ms", "1s", "45s", "1m", "1h", "2h45m",
                "1h2m3s4ms5us6ns", "1.5h", ".5s", "1.s", "300ms", "-1.5h", "+90s", "1h1h", "", None]
NOT_DURATIONS = ["forever", "10", "1d", "1S", "5 minutes", "1m 30s", "s", ".s", ".", "00", "1e3s", "--1s", "1h-1m"]


@pytest.mark.parametrize("field", ["runInterval", "timeout"])
def test_every_go_duration_is_taken_and_anything_else_refused_with_the_field_named(
        cluster: TestCluster, namespace: str, field: str) -> None:
    wrong = []
    for i, text in enumerate(GO_DURATIONS):  # "" and null: the default
        status, message = refusal(cluster, "POST", hc(namespace) + "?dryRun=All",
                                  healthcheck(f"ok{i}", **{field: text}))
        if status != 200:
            wrong.append((text, status, message[:200]))
    for i, text in enumerate(NOT_DURATIONS):
        status, message = refusal(cluster, "POST", hc(namespace) + "?dryRun=All",
                                  healthcheck(f"bad{i}", **{field: text}))
        if status != 422 or f"spec.{field}" not in message:
            wrong.append((text, status, message[:200]))
    assert wrong == []


POD_SPECS_WITHOUT_CONTAINERS: list[tuple[str, dict[str, Any], str]] = [
    ("no podSpec", {"podSpec": None}, "spec.podSpec"),
    ("an empty podSpec", {"podSpec": {}}, "spec.podSpec.spec"),
    ("v2's podSpec, not under spec", {"podSpec": {"containers": [{"name": "main", "image": "i"}]}},
     "spec.podSpec.spec"),
    ("no containers", {"podSpec": {"spec": {"restartPolicy": "Never"}}}, "spec.podSpec.spec.containers"),
    ("an empty list of containers", {"podSpec": {"spec": {"containers": []}}}, "spec.podSpec.spec.containers"),
    ("containers as a string", {"podSpec": {"spec": {"containers": "main"}}}, "spec.podSpec.spec.containers"),
    ("a container without a name", {"podSpec": {"spec": {"containers": [{"image": "i"}]}}},
     "spec.podSpec.spec.containers"),
]


@pytest.mark.parametrize(("what", "spec", "field"), POD_SPECS_WITHOUT_CONTAINERS,
                         ids=[c[0] for c in POD_SPECS_WITHOUT_CONTAINERS])
def test_a_pod_spec_without_containers_is_refused_with_the_field_named(
        cluster: TestCluster, namespace: str, what: str, spec: dict[str, Any], field: str) -> None:
    obj = healthcheck("nocontainers", **spec)
    if spec.get("podSpec", {}) is None:
        del obj["spec"]["podSpec"]
    status, message = refusal(cluster, "POST", hc(namespace) + "?dryRun=All", obj)
    assert status == 422, what
    assert field in message, message[:400]


def test_a_healthcheck_without_a_spec_is_refused(cluster: TestCluster, namespace: str) -> None:
    obj = healthcheck("nospec")
    del obj["spec"]
    status, message = refusal(cluster, "POST", hc(namespace) + "?dryRun=All", obj)
    assert status == 422 and "spec" in message


# --- our status fields beside v3's ------------------------------------------------------------------------

def test_our_crd_keeps_every_status_field_of_v3_s_and_of_ours_through_the_status_subresource(
        cluster: TestCluster, namespace: str) -> None:
    cluster.request("POST", hc(namespace), healthcheck("keeps"))
    status = full_status(namespace)
    assert write_status(cluster, namespace, "keeps", status, dry_run=True)["status"] == status
    assert write_status(cluster, namespace, "keeps", status)["status"] == status
    stored = cluster.request("GET", hc(namespace, "keeps"))
    assert stored["status"] == status and stored["metadata"]["generation"] == 1  # status writes leave the spec's
    assert set(status) == V3_STATUS_KEYS | {"consecutiveFailures"} | OUR_STATUS_KEYS


def test_a_create_or_an_update_of_the_object_itself_never_sets_the_status(cluster: TestCluster, namespace: str) -> None:
    obj = healthcheck("nostatus")
    obj["status"] = full_status(namespace)
    assert "status" not in cluster.request("POST", hc(namespace), obj)
    current = cluster.request("GET", hc(namespace, "nostatus"))
    current["status"] = full_status(namespace)
    assert "status" not in cluster.request("PUT", hc(namespace, "nostatus"), current)


def test_a_wrongly_typed_status_field_is_refused(cluster: TestCluster, namespace: str) -> None:
    cluster.request("POST", hc(namespace), healthcheck("typed"))
    obj = cluster.request("GET", hc(namespace, "typed"))
    for bad, field in (({"runDuration": "1.2s"}, "status.runDuration"), ({"ok": "yes"}, "status.ok"),
                       ({"tokenBinding": {"generation": -1}}, "status.tokenBinding.generation")):
        obj["status"] = bad
        status, message = refusal(cluster, "PUT", hc(namespace, "typed") + "/status?dryRun=All", obj)
        assert status == 422 and field in message, (bad, status, message[:300])


# --- with v3's own CRD in place of ours -------------------------------------------------------------------

def test_with_v3_s_own_crd_installed_our_status_fields_are_dropped_and_a_dry_run_shows_it(
        cluster: TestCluster, namespace: str, v3_crd: None) -> None:
    check = healthcheck("under-v3", podSpec={"metadata": {"labels": {"team": "sre"}},
                                             "spec": {"containers": [{"name": "main", "image": "kh-sim/ok"}]}})
    stored = cluster.request("POST", hc(namespace), check)
    assert stored["spec"]["podSpec"]["metadata"] == {}  # v3's CRD drops the checker pod's labels too
    status = full_status(namespace)
    v3_only = {k: v for k, v in status.items() if k in V3_STATUS_KEYS}
    # The dry run a daemon can make at start: what a status write would keep, nothing written.
    assert write_status(cluster, namespace, "under-v3", status, dry_run=True)["status"] == v3_only
    assert "status" not in cluster.request("GET", hc(namespace, "under-v3"))
    assert write_status(cluster, namespace, "under-v3", status)["status"] == v3_only
    assert cluster.request("GET", hc(namespace, "under-v3"))["status"] == v3_only
    # What v3's CRD accepts that ours refuses: a duration no Go program can parse (v3 cannot read it either).
    loose = healthcheck("loose", runInterval="forever")
    assert refusal(cluster, "POST", hc(namespace) + "?dryRun=All", loose)[0] == 200
