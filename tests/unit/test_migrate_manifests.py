"""Moving manifests between v2's khcheck/khjob and v3's HealthCheck (kuberhealthy/records/v3manifests.py,
docs/migrate-manifests.md): the mapping, what is carried in the extra annotations, what is dropped, the
notes, the errors, the output's order, and round trips both ways over generated objects, the
repository's example checks and the chart's bundled checks."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kuberhealthy.kube import Obj
from kuberhealthy.records import v3manifests as m
from testbed.tools.helm import Helm

ROOT = Path(__file__).resolve().parents[2]
POD = {"containers": [{"name": "main", "image": "kh/check:1"}]}
V2_EXTRA_NOTE = "has no place in a HealthCheck; kept in annotation kuberhealthy.github.io/v2-extra"


def text(*objs: Any) -> str:
    return yaml.safe_dump_all(objs, sort_keys=False)


def khcheck(name: str = "probe", namespace: str = "kh", **spec: Any) -> Obj:
    return {"apiVersion": "comcast.github.io/v1", "kind": "KuberhealthyCheck",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def khjob(name: str = "once", namespace: str = "kh", **spec: Any) -> Obj:
    return {**khcheck(name, namespace, **spec), "kind": "KuberhealthyJob"}


def healthcheck(name: str = "probe", namespace: str = "kh", **spec: Any) -> Obj:
    return {"apiVersion": "kuberhealthy.github.io/v2", "kind": "HealthCheck",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def extra(obj: Obj, name: str) -> Any:
    return json.loads(obj["metadata"]["annotations"][name])


Convert = Callable[[str], m.Conversion]


def round_trip(*objs: Obj, there: Convert = m.to_v3, back: Convert = m.from_v3) -> list[Obj]:
    return back(there(text(*objs)).text()).objects


def user_part(obj: Obj) -> Obj:
    """What a conversion keeps of an object: all but what the server (or kubectl) set."""
    out = {k: v for k, v in obj.items() if k != "status"}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in m.SERVER_SET}
    annotations = meta.get("annotations")
    if isinstance(annotations, dict) and m.LAST_APPLIED in annotations:
        meta["annotations"] = {k: v for k, v in annotations.items() if k != m.LAST_APPLIED}
        if not meta["annotations"]:
            del meta["annotations"]
    out["metadata"] = meta
    return out


# --- the mapping ---------------------------------------------------------------------------------------

def test_a_khcheck_becomes_a_healthcheck_with_its_podspec_under_podspec_spec_and_nothing_added() -> None:
    pod = {"containers": [{"name": "main", "image": "kh/check:1", "env": [{"name": "A", "value": "1"}]}],
           "serviceAccountName": "sa"}
    check = khcheck(runInterval="90s", timeout="2m", podSpec=pod, extraLabels={"team": "a"},
                    extraAnnotations={"note": "b"})
    check["metadata"].update(labels={"kuberhealthy.io/severity": "page"}, annotations={"owner": "me"})
    out = m.to_v3(text(check))
    assert out.notes == []
    assert out.objects == [{
        "apiVersion": "kuberhealthy.github.io/v2", "kind": "HealthCheck",
        "metadata": {"name": "probe", "namespace": "kh", "labels": {"kuberhealthy.io/severity": "page"},
                     "annotations": {"owner": "me"}},
        "spec": {"runInterval": "90s", "timeout": "2m", "extraLabels": {"team": "a"},
                 "extraAnnotations": {"note": "b"}, "podSpec": {"spec": pod}}}]


def test_no_default_is_filled_in_and_values_are_carried_as_written() -> None:
    (hc,) = m.to_v3(text(khcheck(runInterval="forever", podSpec={"containers": "main"}))).objects
    assert hc["spec"] == {"runInterval": "forever", "podSpec": {"spec": {"containers": "main"}}}
    (bare,) = m.to_v3(text(khcheck())).objects
    assert bare["spec"] == {}


def test_a_khjob_becomes_a_single_run_healthcheck_and_comes_back_a_khjob() -> None:
    job = khjob(timeout="5m", podSpec=POD)
    out = m.to_v3(text(job))
    assert out.notes == []
    (hc,) = out.objects
    assert hc["spec"] == {"singleRunOnly": True, "timeout": "5m", "podSpec": {"spec": POD}}
    assert m.from_v3(out.text()).objects == [job]


def test_an_unset_timeout_is_left_unset_and_the_defaults_that_differ_are_said() -> None:
    out = m.to_v3(text(khcheck(podSpec=POD), khjob(timeout="", podSpec=POD)))
    assert [o["spec"].get("timeout") for o in out.objects] == [None, ""]
    assert out.notes == ["khcheck kh/probe: spec.timeout is not set: a khcheck's default is 5m0s, a HealthCheck's 30s; "
                         "set it to keep 5m0s",
                         "khjob kh/once: spec.timeout is not set: a khjob's default is 5m0s, a HealthCheck's 30s; "
                         "set it to keep 5m0s"]
    assert m.from_v3(text(healthcheck(podSpec={"spec": POD}))).notes == [
        "HealthCheck kh/probe: spec.timeout is not set: a HealthCheck's default is 30s, a khcheck's 5m0s; "
        "set it to keep 30s"]


def test_a_healthcheck_that_runs_once_becomes_a_khjob_and_one_that_does_not_a_khcheck() -> None:
    job, check = m.from_v3(text(healthcheck("a", singleRunOnly=True, podSpec={"spec": POD}),
                                healthcheck("b", runInterval="1m", podSpec={"spec": POD}))).objects
    assert (job["apiVersion"], job["kind"], job["spec"]) == ("comcast.github.io/v1", "KuberhealthyJob",
                                                             {"podSpec": POD})
    assert (check["kind"], check["spec"]) == ("KuberhealthyCheck", {"runInterval": "1m", "podSpec": POD})


def test_a_khjob_phase_is_carried_in_the_annotation_and_named_only_once_the_job_has_run() -> None:
    fresh, done = (khjob("fresh", phase="", timeout="1m", podSpec=POD),
                   khjob("done", phase="Completed", timeout="1m", podSpec=POD))
    out = m.to_v3(text(fresh, done))
    assert [extra(o, m.V2_EXTRA) for o in out.objects] == [{"spec": {"phase": ""}}, {"spec": {"phase": "Completed"}}]
    assert out.notes == ['khjob kh/done: spec.phase "Completed" has no place in a HealthCheck (a new HealthCheck '
                         'runs once); kept in annotation kuberhealthy.github.io/v2-extra']
    assert m.from_v3(out.text()).objects == [fresh, done]


def test_an_unknown_field_is_named_once_per_object_and_field_and_carried_back() -> None:
    check = {**khcheck(podSpec=POD, timeout="1m", colour="blue", size=3), "data": {"x": 1}}
    out = m.to_v3(text(check))
    assert out.notes == [f"khcheck kh/probe: data {V2_EXTRA_NOTE}", f"khcheck kh/probe: spec.colour {V2_EXTRA_NOTE}",
                         f"khcheck kh/probe: spec.size {V2_EXTRA_NOTE}"]
    (hc,) = out.objects
    assert "colour" not in hc["spec"] and "data" not in hc
    assert extra(hc, m.V2_EXTRA) == {"data": {"x": 1}, "spec": {"colour": "blue", "size": 3}}
    back = m.from_v3(out.text())
    assert back.objects == [check] and back.notes == []


def test_pod_metadata_and_a_run_interval_have_no_place_in_a_khjob_and_are_named_and_carried() -> None:
    hc = healthcheck(singleRunOnly=True, runInterval="1m", timeout="1m",
                     podSpec={"metadata": {"labels": {"a": "b"}}, "spec": POD})
    out = m.from_v3(text(hc))
    assert out.notes == [
        "HealthCheck kh/probe: spec.runInterval has no place in a khjob (a khjob runs once); kept in annotation "
        "kuberhealthy.github.io/v3-extra",
        "HealthCheck kh/probe: spec.podSpec.metadata has no place in a khjob (v2 puts only extraLabels and "
        "extraAnnotations on the checker pod); kept in annotation kuberhealthy.github.io/v3-extra"]
    (job,) = out.objects
    assert job["spec"] == {"timeout": "1m", "podSpec": POD}
    assert extra(job, m.V3_EXTRA) == {"spec": {"runInterval": "1m", "podSpec": {"metadata": {"labels": {"a": "b"}}}}}
    assert m.to_v3(out.text()).objects == [hc]


def test_the_annotation_of_ours_is_consumed_and_an_empty_annotation_map_comes_back_empty() -> None:
    check = khcheck(podSpec=POD, colour="blue")
    check["metadata"]["annotations"] = {}
    (hc,) = m.to_v3(text(check)).objects
    assert set(hc["metadata"]["annotations"]) == {m.V2_EXTRA}
    (back,) = m.from_v3(text(hc)).objects
    assert back == check and m.V2_EXTRA not in back["metadata"]["annotations"]


def test_what_the_server_set_is_dropped_and_named_nowhere() -> None:
    check = khcheck(timeout="1m", podSpec=POD)
    check["metadata"].update(uid="u-1", resourceVersion="42", generation=3, creationTimestamp="2026-01-01T00:00:00Z",
                             managedFields=[{"manager": "kubectl"}], selfLink="/apis/x",
                             annotations={m.LAST_APPLIED: "{}", "keep": "me"})
    check["status"] = {"anything": True}
    out = m.to_v3(text(check))
    assert out.notes == []
    (hc,) = out.objects
    assert hc["metadata"] == {"name": "probe", "namespace": "kh", "annotations": {"keep": "me"}}
    assert "status" not in hc
    stated = healthcheck(timeout="1m", podSpec={"spec": POD})
    stated["status"] = {"ok": True, "lastRunUnix": 1}
    back = m.from_v3(text(stated))
    assert back.objects == [khcheck(timeout="1m", podSpec=POD)] and back.notes == []


def test_where_the_object_sets_a_value_the_annotation_also_holds_the_object_wins_and_that_is_said() -> None:
    hc = healthcheck(timeout="1m", podSpec={"spec": POD})
    hc["metadata"]["annotations"] = {m.V2_EXTRA: json.dumps({"spec": {"timeout": "9m", "phase": "Completed"}})}
    out = m.from_v3(text(hc))
    assert out.objects[0]["spec"] == {"timeout": "1m", "podSpec": POD, "phase": "Completed"}
    assert out.notes == ["HealthCheck kh/probe: spec.timeout in annotation kuberhealthy.github.io/v2-extra ignored: "
                         "the object sets it"]


def test_other_kinds_are_left_out_and_named() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "kh"}}
    other = {**khcheck("later"), "apiVersion": "comcast.github.io/v2"}
    secret = {"kind": "Secret", "metadata": {"name": "s"}}
    out = m.to_v3(text(cm, other, healthcheck("x"), secret, khcheck(timeout="1m")))
    assert len(out.objects) == 1
    assert out.notes == ["skipped ConfigMap kh/c: not a khcheck or khjob",
                         "skipped KuberhealthyCheck kh/later: not a khcheck or khjob (apiVersion comcast.github.io/v2)",
                         "skipped HealthCheck kh/x: not a khcheck or khjob",
                         "skipped Secret s: not a khcheck or khjob"]
    back = m.from_v3(text(cm, khcheck()))
    assert back.objects == [] and back.notes == ["skipped ConfigMap kh/c: not a HealthCheck",
                                                 "skipped KuberhealthyCheck kh/probe: not a HealthCheck"]


def test_a_khcheck_and_a_khjob_of_one_name_are_said_to_become_the_same_healthcheck() -> None:
    out = m.to_v3(text(khcheck("x", timeout="1m"), khjob("x", timeout="1m"), khjob("x", "other", timeout="1m")))
    assert len(out.objects) == 3
    assert out.notes == ["khcheck kh/x and khjob kh/x both become HealthCheck kh/x: the one applied last replaces "
                         "the other"]


def test_a_kubectl_list_gives_its_items_in_order() -> None:
    listed = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
              "items": [khcheck("a"), khjob("b")]}
    assert [o["metadata"]["name"] for o in m.to_v3(text(listed)).objects] == ["a", "b"]


@pytest.mark.parametrize("source, message", [
    ("a: 1\n---\nb: [\n", "document 2 (line 4, column 1): invalid YAML: expected the node content"),
    ("a: 1\n---\n---\nkind: x\n  y: 2\n", "document 3 (line 5, column 4): invalid YAML: mapping values are not"),
    ("- 1\n", "document 1: not a Kubernetes object"),
    ("kind: List\nitems: [3]\n", "document 1, item 1: not a Kubernetes object"),
    ("apiVersion: comcast.github.io/v1\nkind: KuberhealthyCheck\nmetadata: {name: a}\nspec: [1]\n",
     "document 1: khcheck a: spec is not a mapping"),
    ("apiVersion: comcast.github.io/v1\nkind: KuberhealthyCheck\nmetadata: {name: a, annotations: "
     "{kuberhealthy.github.io/v3-extra: '[1'}}\n", "document 1: khcheck a: annotation kuberhealthy.github.io/v3-extra "
     "is not JSON"),
])
def test_input_that_cannot_be_converted_is_an_error_naming_the_document(source: str, message: str) -> None:
    with pytest.raises(m.ManifestError) as e:
        m.to_v3(source)
    assert str(e.value).startswith(message), str(e.value)


def test_a_single_run_only_that_is_no_boolean_is_an_error() -> None:
    with pytest.raises(m.ManifestError, match=r"document 1: HealthCheck kh/probe: spec.singleRunOnly is 'yes'"):
        m.from_v3(text(healthcheck(singleRunOnly="yes")))


def test_an_unquoted_time_stays_the_string_it_was() -> None:
    source = text(khcheck(podSpec=POD)).replace("name: probe", "name: probe\n  annotations: {at: 2026-12-02T06:00:00Z}")
    (hc,) = m.to_v3(source).objects
    assert hc["metadata"]["annotations"] == {"at": "2026-12-02T06:00:00Z"}


def test_the_output_is_multi_document_yaml_in_a_stable_order_and_the_same_every_time() -> None:
    job = khjob(podSpec={"restartPolicy": "Never", "containers": [{"name": "m", "image": "i", "command": ["sh", "-c",
                                                                                                         "a\nb\n"]}]},
                extraLabels={"z": "1", "a": "2"}, timeout="1m", phase="Completed")
    job["metadata"] = {"annotations": {"b": "1"}, "namespace": "kh", "name": "once"}
    first = m.to_v3(text(job, khcheck())).text()
    assert first == m.to_v3(text(job, khcheck())).text()
    assert first.startswith("---\napiVersion: kuberhealthy.github.io/v2\nkind: HealthCheck\nmetadata:\n  name: once\n"
                            "  namespace: kh\n  annotations:\n    b: '1'\n    kuberhealthy.github.io/v2-extra: ")
    assert "spec:\n  singleRunOnly: true\n  timeout: 1m\n  extraLabels:\n    z: '1'\n    a: '2'\n  podSpec:\n" \
           "    spec:\n      restartPolicy: Never\n      containers:\n        - name: m\n" in first
    assert "            - |\n              a\n              b\n" in first
    assert first.count("---\n") == 2 and list(yaml.safe_load_all(first))[1]["kind"] == "HealthCheck"
    assert m.to_v3("").text() == ""


# --- round trips -----------------------------------------------------------------------------------------

def test_the_example_checks_go_to_v3_and_back_unchanged() -> None:
    files = sorted((ROOT / "examples" / "checks").rglob("*.yaml"))
    objs = [d for f in files for d in yaml.safe_load_all(f.read_text()) if d and d.get("kind") == "KuberhealthyCheck"]
    assert len(objs) >= 3
    out = m.to_v3(text(*objs))
    assert out.notes == [] and all(m.V2_EXTRA not in (o["metadata"].get("annotations") or {}) for o in out.objects)
    assert m.from_v3(out.text()).objects == objs


def test_the_charts_bundled_checks_go_to_v3_and_back_unchanged(helm: Helm) -> None:
    values = yaml.safe_load((ROOT / "helm" / "kuberhealthy" / "values.yaml").read_text())
    rendered = helm.template(*(f"check.{name}.enabled=true" for name in values["check"]))
    checks = [o for o in rendered if o.get("kind") == "KuberhealthyCheck"]
    assert len(checks) == len(values["check"])
    out = m.to_v3(text(*checks))
    assert out.notes == []
    assert [o["spec"]["podSpec"]["spec"] for o in out.objects] == [c["spec"]["podSpec"] for c in checks]
    assert m.from_v3(out.text()).objects == checks


# Generated objects: JSON-shaped values, names and annotation keys as Kubernetes would have them or not.
_keys = st.text(max_size=6)
_scalars = (st.none() | st.booleans() | st.integers(-(2 ** 63), 2 ** 63)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
            | st.sampled_from(["yes", "on", "1.5", "0x1f", "~", "2026-12-02T06:00:00Z", "a\nb\n", "x\x85y"]))
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
                     max_leaves=8)
_strings = st.dictionaries(_keys, st.text(max_size=8), max_size=3)
_names = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)
_containers = st.fixed_dictionaries({"name": _names, "image": st.text(max_size=10)},
                                    optional={"command": st.lists(st.text(max_size=10))})
_pods = st.fixed_dictionaries({"containers": st.lists(_containers, max_size=2)}, optional={
    "restartPolicy": st.sampled_from(["Never", "Always"]), "nodeSelector": _strings, "extra": _json})
_server_set = {"uid": st.text(max_size=5), "resourceVersion": st.text(max_size=5), "generation": st.integers(0, 9),
               "creationTimestamp": st.just("2026-01-01T00:00:00Z"), "managedFields": st.lists(_json, max_size=1)}


def _metadata(stray: str, consumed: str) -> st.SearchStrategy[Obj]:
    annotation_keys = _keys.filter(lambda k: k not in (consumed, m.LAST_APPLIED)) | st.just(stray)
    annotations = st.dictionaries(annotation_keys, st.text(max_size=8), max_size=3) | st.none()
    return st.fixed_dictionaries({"name": _names}, optional={
        "namespace": _names, "labels": _strings, "annotations": annotations, "finalizers": st.lists(_names, max_size=2),
        "ownerReferences": st.lists(_json, max_size=1), **_server_set})


def _unknown(known: set[str]) -> st.SearchStrategy[Obj]:
    return st.dictionaries(_keys.filter(lambda k: k not in known), _json, max_size=2)


def _v2_objects() -> st.SearchStrategy[Obj]:
    common = {"timeout": _scalars, "podSpec": _pods | _json, "extraLabels": _strings | st.none(),
              "extraAnnotations": _strings | st.none()}
    check_spec = st.fixed_dictionaries({}, optional={"runInterval": _scalars, **common})
    job_spec = st.fixed_dictionaries({}, optional={"phase": st.sampled_from(["", "Running", "Completed"]), **common})

    def build(kind: str, meta: Obj, spec: Any, unknown: Obj, top: Obj, status: Any) -> Obj:
        obj: Obj = {**top, "apiVersion": "comcast.github.io/v1", "kind": kind, "metadata": meta}
        if spec is not ...:
            obj["spec"] = {**unknown, **spec} if isinstance(spec, dict) else spec
        if status is not ...:
            obj["status"] = status
        return obj
    meta = _metadata(stray=m.V2_EXTRA, consumed=m.V3_EXTRA)
    tops, status = _unknown(set(m.SERVER_SET) | {"apiVersion", "kind", "metadata", "spec", "status", "items"}), \
        st.just(...) | _json
    known = {"runInterval", "timeout", "podSpec", "extraLabels", "extraAnnotations", "phase"}
    checks = st.builds(build, st.just("KuberhealthyCheck"), meta, check_spec | st.none() | st.just(...),
                       _unknown(known - {"phase"}), tops, status)
    jobs = st.builds(build, st.just("KuberhealthyJob"), meta, job_spec, _unknown(known - {"runInterval"}), tops, status)
    return checks | jobs


def _healthchecks() -> st.SearchStrategy[Obj]:
    pod_meta = st.fixed_dictionaries({}, optional={"labels": _strings, "annotations": _strings})
    pod = st.fixed_dictionaries({}, optional={"metadata": pod_meta | st.none(), "spec": _pods | _json,
                                              "other": _json}) | _json
    spec = st.fixed_dictionaries({}, optional={
        "singleRunOnly": st.booleans() | st.none(), "runInterval": _scalars, "timeout": _scalars, "podSpec": pod,
        "extraLabels": _strings | st.none(), "extraAnnotations": _strings | st.none()})
    known = {"singleRunOnly", "runInterval", "timeout", "podSpec", "extraLabels", "extraAnnotations"}

    def build(meta: Obj, spec: Any, unknown: Obj, status: Any) -> Obj:
        obj: Obj = {"apiVersion": "kuberhealthy.github.io/v2", "kind": "HealthCheck", "metadata": meta}
        if spec is not ...:
            obj["spec"] = {**unknown, **spec} if isinstance(spec, dict) else spec
        if status is not ...:
            obj["status"] = status
        return obj
    return st.builds(build, _metadata(stray=m.V3_EXTRA, consumed=m.V2_EXTRA), spec | st.none() | st.just(...),
                     _unknown(known), st.just(...) | _json)


_PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_PROPERTY
@given(st.lists(_v2_objects(), min_size=1, max_size=3))
def test_khchecks_and_khjobs_go_to_v3_and_back_unchanged(objs: list[Obj]) -> None:
    there = m.to_v3(text(*objs))
    for old, new in zip(objs, there.objects, strict=True):
        spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        assert new_spec.get("podSpec") == ({"spec": spec["podSpec"]} if "podSpec" in spec else None)
        assert new_spec.get("singleRunOnly") is (True if old["kind"] == "KuberhealthyJob" else None)
    assert m.from_v3(there.text()).objects == [user_part(o) for o in objs]


@_PROPERTY
@given(st.lists(_healthchecks(), min_size=1, max_size=3))
def test_healthchecks_go_to_v2_and_back_unchanged(objs: list[Obj]) -> None:
    assert round_trip(*objs, there=m.from_v3, back=m.to_v3) == [user_part(o) for o in objs]
