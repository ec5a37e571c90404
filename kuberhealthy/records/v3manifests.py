"""Manifests moved between v2's kinds (khcheck, khjob) and v3's HealthCheck, offline: text in, text out.

`kuberhealthy migrate to-v3` and `from-v3` are thin shells around `to_v3()` and `from_v3()`. The
conversion loses nothing and adds nothing: a field is carried as written (no default filled in, no value
checked), `podSpec` becomes `podSpec.spec` and back, a khjob is a HealthCheck with `singleRunOnly: true`.
What the other side has no place for is named in a note and carried, as JSON, in an annotation of ours
(`V2_EXTRA` on a HealthCheck, `V3_EXTRA` on a khcheck or khjob) that the reverse conversion consumes, so a
round trip gives back the same objects. What the API server sets (uid, resourceVersion, managedFields,
status, ...) is not the user's and is dropped without a word.

Pure: no API access and no I/O; the caller reads the input and writes the output and the notes. Not here:
moving the objects of a live cluster and their state.
"""
from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from kuberhealthy.base.config import Config
from kuberhealthy.base.durations import format_duration
from kuberhealthy.kube import HEALTHCHECKS, KHCHECKS, KHJOBS, Obj
from kuberhealthy.records.checkspec import DEFAULT_TIMEOUT

V2_API_VERSION = KHCHECKS.api_version
V3_API_VERSION = HEALTHCHECKS.api_version
KIND_CHECK = "KuberhealthyCheck"
KIND_JOB = "KuberhealthyJob"
KIND_HEALTHCHECK = "HealthCheck"
# On a HealthCheck: what its khcheck or khjob held that v3 has no place for. On a khcheck or khjob: what its
# HealthCheck held that v2 has no place for. Each is a JSON object in the shape of the object it came from.
V2_EXTRA = "kuberhealthy.github.io/v2-extra"
V3_EXTRA = "kuberhealthy.github.io/v3-extra"
# Written by the API server (or by kubectl, about the object it applied last): never the user's, never carried.
SERVER_SET = frozenset({"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields",
                        "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"})
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

_CARRIED = ("apiVersion", "kind", "metadata", "spec", "status")  # top-level keys the conversion handles
_META_ORDER = ("name", "generateName", "namespace", "labels", "annotations")
_V3_ORDER = ("singleRunOnly", "runInterval", "timeout", "extraLabels", "extraAnnotations", "podSpec")
_V2_ORDER = ("phase", "runInterval", "timeout", "extraLabels", "extraAnnotations", "podSpec")
_SAME = {  # spec fields of a v2 kind that keep their name and value in a HealthCheck
    KIND_CHECK: ("runInterval", "timeout", "extraLabels", "extraAnnotations"),
    KIND_JOB: ("timeout", "extraLabels", "extraAnnotations"),
}
_SHORT = {KIND_CHECK: "khcheck", KIND_JOB: "khjob", KIND_HEALTHCHECK: KIND_HEALTHCHECK}
_WHY = {  # why a field has no place, where a word helps
    "spec.phase": "a new HealthCheck runs once",
    "spec.runInterval": "a khjob runs once",
    "spec.podSpec.metadata": "v2 puts only extraLabels and extraAnnotations on the checker pod",
}


class ManifestError(ValueError):
    """The input cannot be converted: bad YAML, or an object of ours whose shape no conversion can carry.
    The message names the document (1-based) and, within a List, the item."""


@dataclass
class Conversion:
    """The converted objects, in input order, and the notes (one line per object and field)."""

    objects: list[Obj] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        return render(self.objects)


# --- YAML in and out -------------------------------------------------------------------------------------

class _Loader(yaml.SafeLoader):
    """YAML as kubectl reads it for a custom resource: an unquoted time stays a string."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


class _Dumper(yaml.SafeDumper):
    """Block style, list items indented under their key, multi-line strings as `|` blocks."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # YAML 1.1 reads NEL and the Unicode line and paragraph separators as line breaks: outside double quotes
    # (which escape them) a reader would fold or normalize them away.
    if any(ch in value for ch in "\x85\u2028\u2029"):
        style: str | None = '"'
    else:
        style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def render(objects: list[Obj]) -> str:
    """Multi-document YAML, each document after a `---` line; keys in the objects' own order."""
    return "".join("---\n" + yaml.dump(o, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                                       allow_unicode=True, width=1 << 30) for o in objects)


def documents(text: str) -> Iterator[tuple[str, Obj]]:
    """Each object of the input with where it stands ("document 2", "document 1, item 3"); a `List` (as
    `kubectl get -o yaml` writes) gives its items. Empty documents are nothing."""
    index = 0
    try:
        for index, doc in enumerate(yaml.load_all(text, Loader=_Loader), 1):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise ManifestError(f"document {index}: not a Kubernetes object (a mapping with apiVersion and kind)")
            items = doc.get("items")
            if str(doc.get("kind") or "").endswith("List") and isinstance(items, list):
                for i, item in enumerate(items, 1):
                    if not isinstance(item, dict):
                        raise ManifestError(f"document {index}, item {i}: not a Kubernetes object (a mapping)")
                    yield f"document {index}, item {i}", item
            else:
                yield f"document {index}", doc
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        what = f"{e.problem} ({e.context})" if e.context else str(e.problem)
        raise ManifestError(f"document {index + 1}{where}: invalid YAML: {what}") from e
    except yaml.YAMLError as e:
        raise ManifestError(f"document {index + 1}: invalid YAML: {e}") from e


# --- the two directions ----------------------------------------------------------------------------------

def to_v3(text: str) -> Conversion:
    """Every khcheck and khjob of the input as a HealthCheck; other objects are left out (and noted)."""
    out = Conversion()
    seen: dict[tuple[str, str], str] = {}
    for where, obj in documents(text):
        kind = str(obj.get("kind") or "")
        if obj.get("apiVersion") != V2_API_VERSION or kind not in _SAME:
            out.notes.append(f"skipped {_label(obj, short=False)}: not a khcheck or khjob{_version(obj, _SAME)}")
            continue
        converted = _healthcheck_of(where, obj, kind, out.notes)
        meta = converted["metadata"]
        target = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if target[1] and target in seen:
            out.notes.append(f"{seen[target]} and {_label(obj)} both become {_label(converted)}: "
                             "the one applied last replaces the other")
        seen.setdefault(target, _label(obj))
        out.objects.append(converted)
    return out


def from_v3(text: str) -> Conversion:
    """Every HealthCheck of the input as a khcheck, or a khjob when `singleRunOnly` is true; other objects
    are left out (and noted)."""
    out = Conversion()
    for where, obj in documents(text):
        if obj.get("apiVersion") != V3_API_VERSION or obj.get("kind") != KIND_HEALTHCHECK:
            out.notes.append(f"skipped {_label(obj, short=False)}: not a HealthCheck"
                             f"{_version(obj, (KIND_HEALTHCHECK,))}")
            continue
        out.objects.append(_v2_of(where, obj, out.notes))
    return out


def _healthcheck_of(where: str, obj: Obj, kind: str, notes: list[str]) -> Obj:
    label = _label(obj)
    meta, theirs = _metadata(where, obj, V3_EXTRA)
    spec = _spec(where, obj)
    extra: Obj = {k: v for k, v in obj.items() if k not in _CARRIED}
    notes.extend(_no_place(label, key, None, KIND_HEALTHCHECK, V2_EXTRA) for key in extra)
    new_spec: Obj = {"singleRunOnly": True} if kind == KIND_JOB else {}
    left: Obj = {}
    for key, value in (spec or {}).items():
        if key == "podSpec":
            new_spec["podSpec"] = {"spec": value}
        elif key in _SAME[kind]:
            new_spec[key] = value
        else:
            left[key] = value
            if not (key == "phase" and kind == KIND_JOB and value in ("", None)):  # not run yet: a new HealthCheck
                notes.append(_no_place(label, f"spec.{key}", value, KIND_HEALTHCHECK, V2_EXTRA))
    if left:
        extra["spec"] = left
    out: Obj = {"apiVersion": V3_API_VERSION, "kind": KIND_HEALTHCHECK, "metadata": meta}
    _put_spec(out, obj, new_spec, keep=kind == KIND_JOB)
    _unset_timeout(spec, label, _SHORT[kind], KIND_HEALTHCHECK, notes)
    _overlay(out, theirs, "", notes, label, V3_EXTRA)
    _stash(where, label, out["metadata"], V2_EXTRA, extra)
    return _arrange(out, _V3_ORDER, pod_order=("metadata", "spec"))


def _v2_of(where: str, obj: Obj, notes: list[str]) -> Obj:
    label = _label(obj)
    meta, theirs = _metadata(where, obj, V2_EXTRA)
    spec = _spec(where, obj)
    once = (spec or {}).get("singleRunOnly")
    if once is not None and not isinstance(once, bool):
        raise ManifestError(f"{where}: {label}: spec.singleRunOnly is {once!r}, not a boolean")
    kind = KIND_JOB if once else KIND_CHECK
    side = _SHORT[kind]
    extra: Obj = {k: v for k, v in obj.items() if k not in _CARRIED}
    notes.extend(_no_place(label, key, None, side, V3_EXTRA) for key in extra)
    new_spec: Obj = {}
    left: Obj = {}
    for key, value in (spec or {}).items():
        if key == "singleRunOnly":
            if not value:
                left[key] = value  # a khcheck says the same; kept only so that the way back is exact
        elif key == "podSpec" and isinstance(value, dict):
            if "spec" in value:
                new_spec["podSpec"] = value["spec"]
            pod = {k: v for k, v in value.items() if k != "spec"}
            if pod or "spec" not in value:
                left["podSpec"] = pod
            notes.extend(_no_place(label, f"spec.podSpec.{k}", v, side, V3_EXTRA)
                         for k, v in pod.items() if v not in ({}, None))
        elif key in _SAME[kind]:
            new_spec[key] = value
        else:
            left[key] = value
            if value is not None:
                notes.append(_no_place(label, f"spec.{key}", value, side, V3_EXTRA))
    if left:
        extra["spec"] = left
    out: Obj = {"apiVersion": (KHJOBS if kind == KIND_JOB else KHCHECKS).api_version, "kind": kind,
                "metadata": meta}
    _put_spec(out, obj, new_spec, keep=kind == KIND_JOB)
    _unset_timeout(spec, label, KIND_HEALTHCHECK, side, notes)
    _overlay(out, theirs, "", notes, label, V2_EXTRA)
    _stash(where, label, out["metadata"], V3_EXTRA, extra)
    return _arrange(out, _V2_ORDER)


# --- the parts both directions share ---------------------------------------------------------------------

def _label(obj: Obj, short: bool = True) -> str:
    """`khcheck ns/name`, `HealthCheck name`, `Secret ns/name`: an object as the notes name it."""
    kind = str(obj.get("kind") or "(no kind)")
    kind = _SHORT.get(kind, kind) if short else kind
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = str(meta.get("name") or (f"{meta['generateName']}*" if meta.get("generateName") else "(no name)"))
    ns = meta.get("namespace")
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"


def _version(obj: Obj, kinds: Collection[str]) -> str:
    return f" (apiVersion {obj.get('apiVersion')})" if str(obj.get("kind")) in kinds else ""


def _no_place(label: str, path: str, value: Any, side: str, annotation: str) -> str:
    shown = f" {json.dumps(value)}" if path == "spec.phase" and isinstance(value, str) else ""
    why = f" ({_WHY[path]})" if path in _WHY else ""
    return f"{label}: {path}{shown} has no place in a {side}{why}; kept in annotation {annotation}"


def _unset_timeout(spec: Obj | None, label: str, was: str, becomes: str, notes: list[str]) -> None:
    """The one default that differs: a run's timeout (v2's 5m, v3's 30s). Said, never filled in."""
    if (spec or {}).get("timeout") in (None, ""):
        v2, v3 = format_duration(DEFAULT_TIMEOUT), format_duration(Config.healthcheck_timeout)
        old, new = (v3, v2) if was == KIND_HEALTHCHECK else (v2, v3)
        notes.append(f"{label}: spec.timeout is not set: a {was}'s default is {old}, a {becomes}'s {new}; "
                     f"set it to keep {old}")


def _spec(where: str, obj: Obj) -> Obj | None:
    spec = obj.get("spec")
    if spec is not None and not isinstance(spec, dict):
        raise ManifestError(f"{where}: {_label(obj)}: spec is not a mapping")
    return spec


def _put_spec(out: Obj, obj: Obj, new_spec: Obj, keep: bool) -> None:
    """The new spec, unless the old object had none (or `spec: null`, which stays so) and nothing is added."""
    if obj.get("spec") is not None or keep:
        out["spec"] = new_spec
    elif "spec" in obj:
        out["spec"] = None


def _metadata(where: str, obj: Obj, consumed: str) -> tuple[Obj, Obj]:
    """The object's metadata without what the server set, and the extra annotation of ours it carried
    (taken out of it: the conversion consumes it)."""
    meta = obj.get("metadata") or {}
    if not isinstance(meta, dict):
        raise ManifestError(f"{where}: {_label(obj)}: metadata is not a mapping")
    meta = {k: v for k, v in meta.items() if k not in SERVER_SET}
    annotations = meta.get("annotations")
    if annotations is not None and not isinstance(annotations, dict):
        raise ManifestError(f"{where}: {_label(obj)}: metadata.annotations is not a mapping")
    if not annotations or (consumed not in annotations and LAST_APPLIED not in annotations):
        return meta, {}
    annotations = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    raw = annotations.pop(consumed, None)
    if annotations:
        meta["annotations"] = annotations
    else:
        del meta["annotations"]
    if raw is None:
        return meta, {}
    try:
        extra = json.loads(str(raw))
    except ValueError as e:
        raise ManifestError(f"{where}: {_label(obj)}: annotation {consumed} is not JSON: {e}") from e
    if not isinstance(extra, dict):
        raise ManifestError(f"{where}: {_label(obj)}: annotation {consumed} is not a JSON object")
    return meta, extra


def _overlay(target: Obj, extra: Obj, path: str, notes: list[str], label: str, annotation: str) -> None:
    """Put back what the annotation carried. Where the object now sets a value of its own, the object wins."""
    for key, value in extra.items():
        where = f"{path}.{key}" if path else str(key)
        mine = target.get(key)
        if key not in target:
            target[key] = value
        elif isinstance(mine, dict) and isinstance(value, dict):
            _overlay(mine, value, where, notes, label, annotation)
        elif mine != value:
            notes.append(f"{label}: {where} in annotation {annotation} ignored: the object sets it")


def _stash(where: str, label: str, meta: Obj, name: str, extra: Obj) -> None:
    """Carry `extra` in annotation `name`. An annotation map that was empty or null comes back so, and a
    stray annotation of that name comes back too."""
    annotations = meta.get("annotations")
    stray = isinstance(annotations, dict) and name in annotations
    if not extra and not stray:
        return
    if "annotations" in meta and not annotations:
        extra["metadata"] = {"annotations": annotations}
    elif stray:
        assert isinstance(annotations, dict)
        extra["metadata"] = {"annotations": {name: annotations[name]}}
    try:
        value = json.dumps(extra, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ManifestError(f"{where}: {label}: what it carries cannot be written as JSON: {e}") from e
    meta["annotations"] = {**(annotations or {}), name: value}


def _arrange(obj: Obj, spec_order: tuple[str, ...], pod_order: tuple[str, ...] = ()) -> Obj:
    """Keys in a stable order: the known ones first, in their order; the rest as they came."""
    out = _ordered(obj, _CARRIED)
    out["metadata"] = _ordered(out["metadata"], _META_ORDER)
    spec = out.get("spec")
    if isinstance(spec, dict):
        out["spec"] = spec = _ordered(spec, spec_order)
        if pod_order and isinstance(spec.get("podSpec"), dict):
            spec["podSpec"] = _ordered(spec["podSpec"], pod_order)
    return out


def _ordered(d: Obj, first: tuple[str, ...]) -> Obj:
    return {**{k: d[k] for k in first if k in d}, **{k: v for k, v in d.items() if k not in first}}
