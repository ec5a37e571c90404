"""The CRDs as hack/crd/gen_podspec.py generates them: current with the generator, small enough for
client-side apply, a PodSpec schema a 1.20 API server takes as structural and that prunes nothing, and a
duration pattern that accepts exactly what the daemon's parser accepts. The HealthCheck CRD (Kuberhealthy
v3's API) carries the same PodSpec under podSpec.spec, v3's status fields with v3's types, and ours.

(That the API server installs them and judges with them as described: tests/integration/test_crds.py and
tests/integration/test_healthcheck_crd.py.)"""
from __future__ import annotations

import functools
import importlib.util
import json
import re
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kuberhealthy.base.durations import parse_duration
from testbed.paths import CRD_DIR, REPO

GEN = REPO / "hack" / "crd" / "gen_podspec.py"
ANNOTATION_ROOM = 200 * 1024  # client-side apply stores the whole object as JSON in one annotation (256 KiB max)
FILES = {"khchecks": "comcast.github.io_khchecks.yaml", "khjobs": "comcast.github.io_khjobs.yaml",
         "khstates": "comcast.github.io_khstates.yaml", "healthchecks": "kuberhealthy.github.io_healthchecks.yaml"}


def _load_gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_podspec", GEN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_podspec", module)
    spec.loader.exec_module(module)
    return module


gen = _load_gen()


def crd(name: str) -> dict[str, Any]:
    return json.loads(_crd_json(name))  # a fresh copy each time


@functools.lru_cache
def _crd_json(name: str) -> str:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return json.dumps(yaml.load((CRD_DIR / FILES[name]).read_text(), Loader=loader))


def spec_properties(name: str, part: str = "spec") -> dict[str, Any]:
    schema = crd(name)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return dict(schema["properties"][part]["properties"])


def pod_spec(name: str) -> dict[str, Any]:
    """The PodSpec schema: a khcheck's or khjob's spec.podSpec, a HealthCheck's spec.podSpec.spec."""
    node = spec_properties(name)["podSpec"]
    return dict(node["properties"]["spec"]) if name == "healthchecks" else dict(node)


def nodes(schema: dict[str, Any], path: str = "podSpec") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node under `schema`, with a path for the failure message."""
    yield path, schema
    for prop, sub in (schema.get("properties") or {}).items():
        yield from nodes(sub, f"{path}.{prop}")
    if isinstance(schema.get("items"), dict):
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}{{}}")


PATTERN = gen.duration_pattern()
DURATION = re.compile(PATTERN)


def pattern_accepts(text: str) -> bool:
    return DURATION.fullmatch(text) is not None


def daemon_accepts(text: str) -> bool:
    """What the daemon takes as given (checkspec.py): "" is "the default", else what the parser parses."""
    if text == "":
        return True
    try:
        parse_duration(text)
    except ValueError:
        return False
    return True


# --- the files are the generation ---------------------------------------------------------------------

def test_the_crd_files_are_exactly_what_the_generator_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    files = gen.generated()
    for path, text in files.items():
        assert path.read_text() == text, f"{path.name} differs: run `python hack/crd/gen_podspec.py --write`"
    monkeypatch.setattr(gen, "generated", lambda: files)  # the same generation, not made twice: --check judges it
    assert gen.main(["--check"]) == 0


def test_the_check_mode_fails_when_a_crd_file_differs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for attr in ("KHCHECKS", "KHJOBS", "HEALTHCHECKS"):
        original: Path = getattr(gen, attr)
        copy = tmp_path / original.name
        copy.write_text(original.read_text().replace("x-kubernetes-int-or-string: true", "type: string", 1))
        monkeypatch.setattr(gen, attr, copy)
    monkeypatch.setattr(gen, "REPO", tmp_path)
    assert gen.main(["--check"]) == 1


@pytest.mark.parametrize("name", list(FILES))
def test_every_crd_fits_in_the_last_applied_annotation_of_client_side_apply(name: str) -> None:
    size = len(_crd_json(name))  # with spaces; kubectl writes it compact: this is an upper bound
    assert size < ANNOTATION_ROOM, f"{name}: {size} bytes of JSON"


# --- the PodSpec schema ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["khchecks", "khjobs", "healthchecks"])
def test_the_pod_spec_schema_is_structural_for_a_1_20_api_server_and_prunes_nothing(name: str) -> None:
    schema = pod_spec(name)
    assert schema["x-kubernetes-preserve-unknown-fields"] is True and "containers" in schema["properties"]
    assert schema["required"] == ["containers"]
    seen = 0
    for path, node in nodes(schema):
        seen += 1
        assert not {"$ref", "oneOf", "anyOf", "allOf", "x-kubernetes-patch-strategy", "x-kubernetes-patch-merge-key",
                    "x-kubernetes-unions", "x-kubernetes-group-version-kind"} & set(node), path
        assert path == "podSpec" or "description" not in node, path
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, path
            continue
        assert isinstance(node.get("type"), str), f"{path}: type {node.get('type')!r}"
        if node["type"] == "object" and "additionalProperties" not in node:
            assert node.get("x-kubernetes-preserve-unknown-fields") is True, f"{path} would prune"
        if node.get("x-kubernetes-list-type") == "map":
            keys, item = node["x-kubernetes-list-map-keys"], node["items"]
            assert set(keys) <= set(item.get("required") or []), f"{path}: a map key is optional"
            assert not item.get("nullable"), path
        assert node.get("x-kubernetes-list-type") in (None, "atomic", "map"), path
        assert node.get("format") in (None, *gen.FORMATS_1_20), path
    assert seen > 1000  # the whole PodSpec, not a stub


def test_a_healthcheck_carries_the_khcheck_s_pod_spec_under_pod_spec_spec_with_at_least_one_container() -> None:
    check, health = pod_spec("khchecks"), pod_spec("healthchecks")
    assert health["properties"]["containers"].pop("minItems") == 1
    assert "minItems" not in check["properties"]["containers"]  # a khcheck keeps what v2 took
    assert {**health, "description": ""} == {**check, "description": ""}
    wrapper = spec_properties("healthchecks")["podSpec"]
    assert wrapper["required"] == ["spec"] and set(wrapper["properties"]) == {"metadata", "spec"}
    metadata = wrapper["properties"]["metadata"]
    assert "x-kubernetes-preserve-unknown-fields" not in metadata  # as v3's: other keys are dropped
    for key in ("labels", "annotations"):
        assert metadata["properties"][key] == {"type": "object", "additionalProperties": {"type": "string"}}


def test_a_healthcheck_spec_has_v3_s_fields_and_needs_a_pod_spec() -> None:
    props = spec_properties("healthchecks")
    assert set(props) == {"singleRunOnly", "runInterval", "timeout", "extraAnnotations", "extraLabels", "podSpec"}
    assert props["singleRunOnly"]["type"] == "boolean"
    for key in ("extraAnnotations", "extraLabels"):
        assert props[key]["additionalProperties"] == {"type": "string"}
    schema = crd("healthchecks")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema["required"] == ["spec"] and schema["properties"]["spec"]["required"] == ["podSpec"]


V3_STATUS = {"ok": ("boolean", None), "errors": ("array", None), "consecutiveFailures": ("integer", None),
             "runDuration": ("integer", "int64"), "namespace": ("string", None), "currentUUID": ("string", None),
             "lastRunUnix": ("integer", "int64"), "successCount": ("integer", None),
             "failureCount": ("integer", None), "lastOKUnix": ("integer", "int64"),
             "lastFailureUnix": ("integer", "int64"), "additionalMetadata": ("string", None)}
OUR_STATUS = {"node": "string", "history": "array", "runBinding": "object", "tokenBinding": "object",
              "rollups": "object"}


def test_a_healthcheck_status_has_v3_s_fields_with_v3_s_types_then_ours_and_requires_none() -> None:
    status = spec_properties("healthchecks", "status")
    assert {k: (status[k]["type"], status[k].get("format")) for k in V3_STATUS} == V3_STATUS
    assert status["errors"]["items"] == {"type": "string"}
    assert {k: v["type"] for k, v in status.items() if k not in V3_STATUS} == OUR_STATUS
    history_item = status["history"]["items"]
    assert set(history_item["properties"]) == set(spec_properties("khstates")["history"]["items"]["properties"])
    assert history_item["x-kubernetes-preserve-unknown-fields"] is True
    assert set(status["runBinding"]["properties"]) == {"uuid", "pod", "keySha256", "authoritativePod", "reportedUUID",
                                                       "finishedUUID"}
    generation = status["tokenBinding"]["properties"]["generation"]
    assert (generation["type"], generation["format"], generation["minimum"]) == ("integer", "int64", 0)
    schema = crd("healthchecks")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "required" not in schema["properties"]["status"]
    assert crd("healthchecks")["spec"]["versions"][0]["subresources"] == {"status": {}}


def test_the_quantities_and_int_or_strings_are_int_or_string_and_the_lists_users_repeat_keys_in_are_plain() -> None:
    props = spec_properties("khchecks")["podSpec"]["properties"]
    container = props["containers"]["items"]["properties"]
    assert container["resources"]["properties"]["limits"]["additionalProperties"]["x-kubernetes-int-or-string"]
    assert container["livenessProbe"]["properties"]["httpGet"]["properties"]["port"]["x-kubernetes-int-or-string"]
    for path, node in (("ports", container["ports"]), ("env", container["env"]),
                       ("imagePullSecrets", props["imagePullSecrets"]), ("hostAliases", props["hostAliases"])):
        assert "x-kubernetes-list-type" not in node and "x-kubernetes-list-map-keys" not in node, path
    assert props["containers"]["x-kubernetes-list-map-keys"] == ["name"]
    assert props["volumes"]["x-kubernetes-list-type"] == "map"
    assert props["activeDeadlineSeconds"] == {"type": "integer", "nullable": True, "format": "int64"}


def test_the_khcheck_and_khjob_carry_the_same_pod_spec_schema_and_keep_their_other_fields() -> None:
    check, job = spec_properties("khchecks"), spec_properties("khjobs")
    assert check["podSpec"] == job["podSpec"]
    assert set(check) == {"runInterval", "timeout", "podSpec", "extraLabels", "extraAnnotations"}
    assert set(job) == {"phase", "timeout", "podSpec", "extraLabels", "extraAnnotations"}
    assert job["phase"]["nullable"] is True and "pattern" not in job["phase"]
    for props in (check, job):
        assert props["extraLabels"] == {"type": "object", "additionalProperties": {"type": "string"}}


# --- printer columns ------------------------------------------------------------------------------------

def test_only_the_long_error_column_waits_for_wide_output() -> None:
    for name in FILES:
        for column in crd(name)["spec"]["versions"][0]["additionalPrinterColumns"]:
            long = (name, column["name"]) in (("khstates", "Error"), ("healthchecks", "ErrorMessage"))
            assert column.get("priority", 0) == (1 if long else 0), (name, column["name"])


# --- the duration pattern -------------------------------------------------------------------------------

def test_the_duration_fields_carry_the_generated_pattern() -> None:
    assert spec_properties("khchecks")["runInterval"]["pattern"] == PATTERN
    assert spec_properties("khchecks")["timeout"]["pattern"] == PATTERN
    assert spec_properties("khjobs")["timeout"]["pattern"] == PATTERN
    assert spec_properties("healthchecks")["runInterval"]["pattern"] == PATTERN
    assert spec_properties("healthchecks")["timeout"]["pattern"] == PATTERN


EDGES = [
    "", "0", "+0", "-0", "00", "0s", "1s", "90s", "1m30s", "1h", "2h45m", "1.5h", "1.s", ".5s", ".s", "5.", ".",
    "+1s", "-1m", "+-1s", "--1s", "-", "+", "s", "1", "10", "1x", "m", "1m 30s", "1m30", "abc", "1.2.3s",
    "5 minutes", "1ns", "1us", "1µs", "1μs", "1ms", "1m1ms", "1sm", "1mss", "1Ms", "1S", "1H", "1d", "1y",
    "1e3s", "1_000s", "0x10s", " 1s", "1s ", "\t1s\n", "1 s", "\u30001s\u3000", "\u200b1s", "\xa01s",
    "\u0663s", "1\u0663s", "\U0001d7ces", "²s", "½s", "1,5s", "1.5.s", "9" * 400 + "h", "0." + "0" * 400 + "1ns",
    "1h1h1h",
    "1h-1m", "1s+", "(1s)", "1s\x00", "\x001s", "\uff11s", "1\uff53", "1\u00b5s", "1\u03bcs", "1 us", "1u s",
]


@pytest.mark.parametrize("text", EDGES)
def test_the_pattern_and_the_parser_agree_on_the_edge_cases(text: str) -> None:
    assert pattern_accepts(text) == daemon_accepts(text), repr(text)


TOKENS = ["0", "1", "7", "9", "\u0663", "\U0001d7ce", "\uff11", ".", "+", "-", "ns", "us", "µs", "μs", "ms", "s", "m",
          "h", "n", "u", "µ", "e", "d", "x", "_", " ", "\t", "\n", "\u3000", "\xa0", "\u200b", "\x85"]


@given(st.lists(st.sampled_from(TOKENS), max_size=10).map("".join))  # examples: the profile (tests/unit/conftest.py)
def test_the_pattern_and_the_parser_agree_on_strings_made_of_duration_pieces(text: str) -> None:
    assert pattern_accepts(text) == daemon_accepts(text), repr(text)


@given(st.text(max_size=8))
def test_the_pattern_and_the_parser_agree_on_any_text(text: str) -> None:
    assert pattern_accepts(text) == daemon_accepts(text), repr(text)


def test_the_pattern_and_the_parser_agree_on_every_character_as_a_digit_and_as_a_space() -> None:
    disagree = []
    for cp in range(sys.maxunicode + 1):
        c = chr(cp)
        # Surrogates, private use and unassigned code points (6 in 7 of them) have no digit or space property
        # for the regex engine, float() or str methods, so none can be a digit or a space to either side.
        if unicodedata.category(c) in ("Cs", "Co", "Cn"):
            continue
        for text in (c + "s", c + "1s" + c):  # a digit; a space around a duration
            if pattern_accepts(text) != daemon_accepts(text):
                disagree.append(text)
    assert not disagree, [ascii(t) for t in disagree[:20]]
