#!/usr/bin/env python3
"""Generate the validating parts of the khcheck, khjob and HealthCheck CRDs (helm/kuberhealthy/crds/).

`spec.podSpec` (a HealthCheck's `spec.podSpec.spec`) gets core/v1 PodSpec's schema from kubernetes-validate's
bundled Kubernetes 1.37 schemas, converted to what a 1.20 API server accepts as a structural schema:
  - `type: [X, "null"]` becomes `type: X` + `nullable: true`;
  - IntOrString and Quantity (a `oneOf` of string and integer/number) become `x-kubernetes-int-or-string`;
  - `$ref`s are resolved inline (a recursive one, if Kubernetes ever grows one, stops at MAX_DEPTH as an
    object that keeps whatever it holds);
  - dropped: descriptions, `x-kubernetes-patch-*`, `x-kubernetes-unions`, `x-kubernetes-group-version-kind`,
    formats 1.20 does not know, and list-type `set` (a set refuses duplicates the Pod API accepts);
  - a map-type list stays one only when every key is required in its items and the Pod API itself
    refuses duplicate keys: `ports` (`protocol` is optional), `imagePullSecrets` (`name` is optional),
    `env` and `hostAliases` (duplicates accepted) become plain lists;
  - every object node keeps unknown fields (`x-kubernetes-preserve-unknown-fields` beside its properties),
    so a field a newer cluster's pods have is never pruned; only fields this schema knows are checked.
A HealthCheck's PodSpec also needs at least one container (`minItems: 1`): v3's own CRD takes an empty
list, but no pod can be made of it.
`spec.runInterval` (khcheck, HealthCheck) and `spec.timeout` get a `pattern` accepting exactly what the daemon's
duration parser (kuberhealthy/base/durations.py) accepts, and "" (the daemon's "use the default"). The
pattern's digit and space classes are found by asking the parser about every candidate character. They
are nullable too: "" means the default, and some API server builds decode "" in custom resources as null.

Everything else in the three files is left as it is: the generated blocks are spliced in place of the
old ones. Deterministic (keys in a fixed order, no YAML anchors).

  python hack/crd/gen_podspec.py            # print the khcheck CRD as it would be written
  python hack/crd/gen_podspec.py --write    # rewrite the CRDs
  python hack/crd/gen_podspec.py --check    # exit 1 (naming the files) when a CRD differs from this
"""
from __future__ import annotations

import argparse
import copy
import functools
import json
import sys
import unicodedata
from pathlib import Path
from typing import Any

import kubernetes_validate  # the test extra (setup.py): its bundled schemas are the source
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kuberhealthy.base.durations import parse_duration  # noqa: E402 (the checkout's, not an installed one)

CRD_DIR = REPO / "helm" / "kuberhealthy" / "crds"
KHCHECKS = CRD_DIR / "comcast.github.io_khchecks.yaml"
KHJOBS = CRD_DIR / "comcast.github.io_khjobs.yaml"
HEALTHCHECKS = CRD_DIR / "kuberhealthy.github.io_healthchecks.yaml"
KUBERNETES = "v1.37.0-local"  # kubernetes-validate's directory of 1.37's schemas (not "-strict")
POD_SPEC = "io.k8s.api.core.v1.PodSpec"
INT_OR_STRING = {"io.k8s.apimachinery.pkg.util.intstr.IntOrString", "io.k8s.apimachinery.pkg.api.resource.Quantity"}
MAX_DEPTH = 12  # nested $refs; PodSpec needs 7 today
FORMATS_1_20 = {"int32", "int64", "float", "double", "byte", "date", "date-time", "duration", "password",
                "uri", "email", "hostname", "ipv4", "ipv6", "cidr", "mac", "uuid", "uuid3", "uuid4", "uuid5"}
DROPPED = {"description", "x-kubernetes-patch-strategy", "x-kubernetes-patch-merge-key", "x-kubernetes-unions",
           "x-kubernetes-group-version-kind"}
# Map-type lists whose keys are required but whose duplicates the Pod API accepts anyway.
DUPLICATES_ACCEPTED = {("io.k8s.api.core.v1.Container", "env"), ("io.k8s.api.core.v1.EphemeralContainer", "env"),
                       (POD_SPEC, "hostAliases")}
PODSPEC_DESCRIPTION = ("A core/v1 PodSpec for the checker pod (Kubernetes 1.37's schema: fields it does not"
                       " know are kept, not checked). At least one container; every container needs an image.")
HC_PODSPEC_DESCRIPTION = ("The checker pod's core/v1 PodSpec (Kubernetes 1.37's schema: fields it does not know are"
                          " kept, not checked). At least one container.")
UNITS = ("ns", "us", "µs", "μs", "ms", "s", "m", "h")  # durations.py's; the unit test holds them equal
KEY_ORDER = ("type", "nullable", "format", "minItems", "x-kubernetes-int-or-string",
             "x-kubernetes-preserve-unknown-fields", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
             "x-kubernetes-map-type", "required", "properties", "items", "additionalProperties")


def definitions() -> dict[str, Any]:
    path = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / KUBERNETES / "_definitions.json"
    return dict(json.loads(path.read_text())["$defs"])


class Converter:
    """Kubernetes' JSON schema (draft 2020-12, as kubernetes-validate ships it) → a 1.20 structural schema."""

    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs

    def convert(self, node: dict[str, Any], owner: str = "", stack: tuple[str, ...] = (),
                prop: str = "") -> dict[str, Any]:
        """`owner` is the definition holding this node, `prop` its property there (when it is one)."""
        node = dict(node)
        ref = node.pop("$ref", None)
        if ref is not None:
            name = str(ref).rsplit("/", 1)[-1]
            if name in INT_OR_STRING:
                return {"x-kubernetes-int-or-string": True, "nullable": True}
            if name in stack or len(stack) >= MAX_DEPTH:
                return {"type": "object", "nullable": True, "x-kubernetes-preserve-unknown-fields": True}
            target = self.defs[name]
            return self.convert({**target, **{k: v for k, v in node.items() if k not in target}}, name,
                                (*stack, name))
        if "oneOf" in node:  # IntOrString / Quantity written out
            kinds = {t for alt in node["oneOf"] for t in _types(alt.get("type"))}
            if kinds <= {"string", "integer", "number", "null"} and "string" in kinds:
                return {"x-kubernetes-int-or-string": True, "nullable": "null" in kinds}
            raise SystemExit(f"{owner}: a oneOf this generator does not know: {node['oneOf']}")
        out: dict[str, Any] = {}
        types = _types(node.get("type"))
        real = [t for t in types if t != "null"]
        if len(real) != 1:
            raise SystemExit(f"{owner}: cannot give {node} one type")
        out["type"] = real[0]
        if "null" in types:
            out["nullable"] = True
        fmt = node.get("format")
        if fmt is not None and fmt in FORMATS_1_20:
            out["format"] = fmt
        for key in ("x-kubernetes-map-type", "required"):
            if key in node:
                out[key] = copy.deepcopy(node[key])
        if "properties" in node:
            out["properties"] = {p: self.convert(v, owner, stack, p) for p, v in sorted(node["properties"].items())}
        if "additionalProperties" in node:
            extra = node["additionalProperties"]
            out["additionalProperties"] = (self.convert(extra, owner, stack) if isinstance(extra, dict)
                                           else {"x-kubernetes-preserve-unknown-fields": True})
        if out["type"] == "object" and "additionalProperties" not in out:
            out["x-kubernetes-preserve-unknown-fields"] = True
        if "items" in node:
            out["items"] = self.convert(node["items"], owner, stack)
            self._list_type(node, out, (owner, prop))
        unknown = set(node) - DROPPED - {"type", "format", "properties", "additionalProperties", "items",
                                         "required", "x-kubernetes-map-type", "x-kubernetes-list-type",
                                         "x-kubernetes-list-map-keys"}
        if unknown:
            raise SystemExit(f"{owner}: keys this generator does not know: {sorted(unknown)}")
        return {k: out[k] for k in KEY_ORDER if k in out}

    @staticmethod
    def _list_type(node: dict[str, Any], out: dict[str, Any], where: tuple[str, str]) -> None:
        kind = node.get("x-kubernetes-list-type")
        if kind == "atomic":
            out["x-kubernetes-list-type"] = "atomic"
        if kind != "map":
            return  # "set" is dropped: see the module's docstring
        keys = list(node.get("x-kubernetes-list-map-keys") or [])
        required = set(out["items"].get("required") or [])
        if keys and set(keys) <= required and where not in DUPLICATES_ACCEPTED:
            out["x-kubernetes-list-type"] = "map"
            out["x-kubernetes-list-map-keys"] = keys
            out["items"].pop("nullable", None)  # 1.20: "cannot be nullable when x-kubernetes-list-type is map"


def _types(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def pod_spec_schema() -> dict[str, Any]:
    defs = definitions()
    schema = Converter(defs).convert({"$ref": f"#/$defs/{POD_SPEC}"})
    schema.pop("nullable", None)
    return {"type": "object", "description": PODSPEC_DESCRIPTION,
            **{k: v for k, v in schema.items() if k != "type"}}


def health_check_pod_spec(pod_spec: dict[str, Any]) -> dict[str, Any]:
    """A HealthCheck's `podSpec.spec`: the khcheck's PodSpec schema, with at least one container."""
    out = copy.deepcopy(pod_spec)
    out["description"] = HC_PODSPEC_DESCRIPTION
    containers = {**out["properties"]["containers"], "minItems": 1}
    out["properties"]["containers"] = {k: containers[k] for k in KEY_ORDER if k in containers}
    return out


# --- durations ---------------------------------------------------------------------------------------------

def _accepts(text: str) -> bool:
    try:
        parse_duration(text)
    except ValueError:
        return False
    return True


def _regex_char(cp: int) -> str:
    """One character for a class: a control or Latin-1 character as a `\\xHH` escape (Python's re and
    Go's RE2 both read it, and YAML tools cannot mangle it: Go's YAML drops a literal U+0085), others as
    themselves (the two have no common escape above U+00FF)."""
    return chr(cp) if 0x20 < cp < 0x7F or cp > 0xFF else f"\\x{cp:02x}"


def _char_class(chars: list[str]) -> str:
    """A regex character class of these characters, as ranges of consecutive code points. None of them
    is special inside a class (the callers' are digits and spaces)."""
    points = sorted(ord(c) for c in chars)
    parts: list[str] = []
    i = 0
    while i < len(points):
        j = i
        while j + 1 < len(points) and points[j + 1] == points[j] + 1:
            j += 1
        first, last = _regex_char(points[i]), _regex_char(points[j])
        parts.append(first if i == j else f"{first}-{last}")
        i = j + 1
    for c in chars:
        assert c not in "]\\^-[", c
    return "[" + "".join(parts) + "]"


@functools.cache  # it sweeps every code point: once per process (the CRD tests ask for it many times)
def duration_pattern() -> str:
    """A Go RE2 (and Python re) pattern matching exactly the strings parse_duration accepts, and ""."""
    candidates = [chr(cp) for cp in range(sys.maxunicode + 1)
                  if not 0xD800 <= cp <= 0xDFFF and (chr(cp).isspace() or chr(cp).isdigit()
                                                     or unicodedata.category(chr(cp)) == "Nd")]
    digits = [c for c in candidates if _accepts(c + "s")]
    spaces = [c for c in candidates if _accepts(c + "1s" + c)]
    d = _char_class(digits)
    w = _char_class(spaces) + "*" if spaces else ""  # what the parser strips around the duration
    number = f"(?:{d}+(?:\\.{d}*)?|\\.{d}+)"
    unit = "(?:" + "|".join(sorted(UNITS, key=lambda u: (-len(u), u))) + ")"
    return f"^(?:|{w}[+-]?(?:0|(?:{number}{unit})+){w})$"


# --- writing ----------------------------------------------------------------------------------------------

class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(key: str, value: Any, indent: int, width: int = 100) -> list[str]:
    text = yaml.dump({key: value}, Dumper=_Dumper, sort_keys=False, width=width, indent=2, allow_unicode=False,
                     default_flow_style=False)
    pad = " " * indent
    return [pad + line if line else line for line in text.splitlines()]


def _block(lines: list[str], key: str, indent: int) -> tuple[int, int]:
    """The lines [start, end) of the mapping entry `key:` at this indentation (exactly one)."""
    head = " " * indent + key + ":"
    starts = [i for i, line in enumerate(lines) if line == head or line.startswith(head + " ")]
    if len(starts) != 1:
        raise SystemExit(f"expected one {key!r} at indentation {indent}, found {len(starts)}")
    start = starts[0]
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    return start, end


def render(path: Path, durations: tuple[str, ...], pod_spec: dict[str, Any], pattern: str,
           inner: tuple[str, ...] = ()) -> str:
    """`pod_spec` replaces the `podSpec` block, or the block `inner` names below it (each key one level
    deeper: ("properties", "spec") for a HealthCheck's podSpec.spec)."""
    lines = path.read_text().splitlines()
    heads = [line for line in lines if line.strip() == "podSpec:"]
    if len(heads) != 1:
        raise SystemExit(f"{path}: expected one podSpec")
    indent = len(heads[0]) - len(heads[0].lstrip())
    start, end = _block(lines, "podSpec", indent)
    key, at = "podSpec", indent
    for key in inner:
        at += 2
        first, last = _block(lines[start:end], key, at)
        start, end = start + first, start + last
    lines[start:end] = _dump(key, pod_spec, at)
    for key in durations:
        start, end = _block(lines, key, indent)
        old = yaml.safe_load("\n".join(line[indent:] for line in lines[start:end]))[key]
        # nullable: "" is the default, and some API server builds decode "" in custom resources as null
        new = {"type": "string", "nullable": True, "description": old.get("description"), "pattern": pattern}
        lines[start:end] = _dump(key, {k: v for k, v in new.items() if v is not None}, indent, width=1 << 16)
    return "\n".join(lines) + "\n"


def generated() -> dict[Path, str]:
    pod_spec, pattern = pod_spec_schema(), duration_pattern()
    return {KHCHECKS: render(KHCHECKS, ("runInterval", "timeout"), pod_spec, pattern),
            KHJOBS: render(KHJOBS, ("timeout",), pod_spec, pattern),
            HEALTHCHECKS: render(HEALTHCHECKS, ("runInterval", "timeout"), health_check_pod_spec(pod_spec), pattern,
                                 inner=("properties", "spec"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the CRD files")
    mode.add_argument("--check", action="store_true", help="exit 1 when a CRD file differs from the generation")
    args = parser.parse_args(argv)
    files = generated()
    if args.write:
        for path, text in files.items():
            if path.read_text() != text:
                path.write_text(text)
                print(f"wrote {path.relative_to(REPO)}")
        return 0
    if args.check:
        stale = [path for path, text in files.items() if path.read_text() != text]
        for path in stale:
            print(f"{path.relative_to(REPO)} differs from hack/crd/gen_podspec.py: run it with --write",
                  file=sys.stderr)
        return 1 if stale else 0
    sys.stdout.write(files[KHCHECKS])
    return 0


if __name__ == "__main__":
    sys.exit(main())
