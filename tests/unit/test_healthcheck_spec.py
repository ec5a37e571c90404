"""A HealthCheck (Kuberhealthy v3's kind) read into a CheckSpec, and the checker pod built from it."""
from __future__ import annotations

from typing import Any

import pytest
import yaml

from kuberhealthy.records.checkpod import build_pod
from kuberhealthy.records.checkspec import KIND_HEALTHCHECK, KIND_KHCHECK, CheckSpec, SpecProblem
from testbed.paths import REPO

V3_URL = "http://kuberhealthy.kuberhealthy.svc.cluster.local/check"
TEN_MINUTES, THIRTY_SECONDS = 600.0, 30.0


def healthcheck(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"podSpec": {"spec": {"containers": [{"name": "main", "image": "kh-sim/ok"}]}}}
    body.update(spec)
    return {"apiVersion": "kuberhealthy.github.io/v2", "kind": "HealthCheck",
            "metadata": {"namespace": "ns", "name": "dns", "uid": "u-1"}, "spec": body}


def of(obj: dict[str, Any]) -> CheckSpec:
    return CheckSpec.of_healthcheck(obj, TEN_MINUTES, THIRTY_SECONDS)


def test_an_unset_or_empty_interval_and_timeout_take_the_configured_defaults() -> None:
    for value in (None, ""):
        spec = of(healthcheck(runInterval=value, timeout=value))
        assert (spec.run_interval, spec.timeout) == (TEN_MINUTES, THIRTY_SECONDS)
    spec = of(healthcheck(runInterval="2m", timeout="45s"))
    assert (spec.run_interval, spec.timeout) == (120.0, 45.0)
    assert CheckSpec.of_healthcheck(healthcheck(), 60.0, 5.0).timeout == 5.0


def test_the_pods_spec_is_podspec_spec_and_its_metadata_the_pods_labels_and_annotations() -> None:
    spec = of(healthcheck(podSpec={"metadata": {"labels": {"team": "net"}, "annotations": {"a": "b"}},
                                   "spec": {"containers": [{"name": "c", "image": "img"}]}},
                          extraLabels={"x": "1"}, extraAnnotations={"y": "2"}))
    assert spec.kind == KIND_HEALTHCHECK and spec.key == "ns/dns" and spec.uid == "u-1"
    assert spec.pod_spec == {"containers": [{"name": "c", "image": "img"}]}
    assert spec.pod_labels == (("team", "net"),) and spec.pod_annotations == (("a", "b"),)
    assert spec.extra_labels == (("x", "1"),) and spec.extra_annotations == (("y", "2"),)
    assert not spec.single_run_only and of(healthcheck(singleRunOnly=True)).single_run_only


def test_a_khcheck_is_still_a_khcheck_with_no_pod_metadata() -> None:
    spec = CheckSpec.of({"metadata": {"namespace": "ns", "name": "dns"},
                         "spec": {"podSpec": {"containers": [{"name": "c", "image": "img"}]}}})
    assert spec.kind == KIND_KHCHECK and spec.pod_labels == () and not spec.single_run_only


@pytest.mark.parametrize(("spec", "field"), [
    ({"runInterval": "often"}, "spec.runInterval"),
    ({"runInterval": "-1m"}, "spec.runInterval"),
    ({"timeout": "0s"}, "spec.timeout"),
    ({"timeout": "30"}, "spec.timeout"),
    ({"podSpec": {"containers": [{"name": "c", "image": "img"}]}}, "spec.podSpec.spec"),
    ({"podSpec": None}, "spec.podSpec.spec"),
    ({"podSpec": {"metadata": [], "spec": {}}}, "spec.podSpec.metadata"),
    ({"podSpec": {"metadata": {"labels": {"a": 1}}, "spec": {}}}, "spec.podSpec.metadata.labels"),
    ({"extraLabels": ["a"]}, "spec.extraLabels"),
    ({"singleRunOnly": "yes"}, "spec.singleRunOnly"),
], ids=["interval-words", "interval-negative", "timeout-zero", "timeout-no-unit", "v2-podspec", "no-podspec",
        "metadata-list", "label-number", "labels-list", "single-run-string"])
def test_a_value_that_cannot_be_run_with_is_a_problem_naming_its_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecProblem) as e:
        of(healthcheck(**spec))
    assert e.value.field == field and str(e.value).startswith(field + ": ")


def test_a_healthcheck_without_a_spec_is_a_problem() -> None:
    obj = healthcheck()
    del obj["spec"]
    with pytest.raises(SpecProblem, match=r"^spec: missing"):
        of(obj)


def test_every_healthcheck_of_the_v3_fixtures_is_read_without_a_problem() -> None:
    docs = [d for d in yaml.safe_load_all((REPO / "tests/fixtures/v3/healthchecks.yaml").read_text()) if d]
    assert docs
    for doc in docs:
        spec = of(doc)
        assert spec.pod_spec.get("containers"), doc["metadata"]["name"]


def test_a_healthchecks_pod_carries_v3s_labels_and_annotations_beside_ours() -> None:
    spec = of(healthcheck(podSpec={"metadata": {"labels": {"team": "net", "healthcheck": "theirs"},
                                                "annotations": {"note": "n"}},
                                   "spec": {"containers": [{"name": "c", "image": "img"}]}},
                          extraLabels={"x": "1", "app": "mine"}))
    pod = build_pod(spec, "run-1", 1e9, V3_URL)
    assert pod["metadata"]["labels"] == {
        "team": "net", "x": "1", "app": "kuberhealthy-check", "kuberhealthy-run-id": "run-1",
        "kuberhealthy-check-name": "dns", "healthcheck": "dns", "kh-run-uuid": "run-1"}
    assert pod["metadata"]["annotations"] == {
        "note": "n", "comcast.github.io/check-name": "dns", "kh-run-uuid": "run-1", "createdBy": "kuberhealthy",
        "kuberhealthyCheckName": "dns"}
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["KH_REPORTING_URL"] == V3_URL and env["KH_RUN_UUID"] == "run-1"
    assert pod["spec"]["restartPolicy"] == "Never"


def test_a_khchecks_pod_carries_none_of_v3s_names() -> None:
    spec = CheckSpec.of({"metadata": {"namespace": "ns", "name": "dns"},
                         "spec": {"podSpec": {"containers": [{"name": "c", "image": "img"}]}}})
    meta = build_pod(spec, "run-1", 1e9, "http://kh/externalCheckStatus")["metadata"]
    assert not {"healthcheck", "kh-run-uuid"} & set(meta["labels"])
    assert not {"kh-run-uuid", "createdBy", "kuberhealthyCheckName"} & set(meta["annotations"])
