"""Every API the daemon calls is one the newest Kubernetes still serves.

The list comes from the code: every Resource and Versions constant kube/ defines (the paths it asks for
and the versions of the bodies it sends), every subresource named in a call, and, as a second net, every
apiVersion written anywhere in kuberhealthy/ (a string that is a group/version, an object literal's
apiVersion and kind). Each is judged against the newest schemas kubernetes-validate ships (that kind must
exist in that version) and our own kinds against the chart's CRDs. An older version is allowed only as a
declared fallback (Versions.fallbacks), asked only of a server that cannot read the preferred one: fake
servers prove the preference here, the test bed's Kubernetes 1.20 the fallback
(tests/integration/test_api_fallback.py).
"""
from __future__ import annotations

import ast
import functools
import importlib
import importlib.resources
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

import kuberhealthy
from kuberhealthy.base.errors import ApiError, BadRequest, Forbidden, TooManyRequests
from kuberhealthy.kube import resources
from kuberhealthy.kube.resources import EVICTION, GROUP, RETRY_PREFERRED, Resource, Resources, Versions
from testbed.cluster.crds import load_crds

NEWEST = kubernetes_validate.latest_version()
PACKAGE = Path(kuberhealthy.__file__).parent
DECLARING = Path(resources.__file__)  # the one module whose fallback versions are declared, and so allowed
GROUP_VERSION = re.compile(r"[a-z0-9-]+(?:\.[a-z0-9-]+)*/v\d+(?:(?:alpha|beta)\d+)?")

# Subresources asked for with no kind of their own in a body (pods/log answers text), and those whose body's
# versions a Versions constant declares. A subresource in neither fails the test until it is judged here.
NO_BODY = {("pods", "log")}
BODIES = {("pods", "eviction"): EVICTION}


# --- what the newest Kubernetes and our CRDs serve ---------------------------------------------------------

@functools.cache
def _newest() -> tuple[frozenset[tuple[str, str]], frozenset[str]]:
    schemas = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    doc = json.loads((schemas / f"v{NEWEST}-local-strict" / "_definitions.json").read_text(encoding="utf-8"))
    kinds, versions = set(), set()
    for name, schema in doc["$defs"].items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or ():
            api_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            kinds.add((api_version, gvk["kind"]))
            if not name.startswith("io.k8s.apimachinery."):  # DeleteOptions, WatchEvent: listed under every version
                versions.add(api_version)
    return frozenset(kinds), frozenset(versions)


def newest_kinds() -> frozenset[tuple[str, str]]:
    """(apiVersion, kind) of every kind in the newest Kubernetes' API, from kubernetes-validate's schemas."""
    return _newest()[0]


def newest_api_versions() -> frozenset[str]:
    """The group/versions the newest Kubernetes serves (some kind of their own in them)."""
    return _newest()[1]


@dataclass(frozen=True)
class Served:
    """One served version of one of our CRDs."""

    plural: str
    status: bool  # has the status subresource
    deprecated: bool


@functools.cache
def crd_kinds() -> dict[tuple[str, str], Served]:
    """(apiVersion, kind) of every version the chart's CRDs serve."""
    out = {}
    for crd in load_crds():
        spec = crd["spec"]
        for v in spec["versions"]:
            if v.get("served"):
                out[(f"{spec['group']}/{v['name']}", spec["names"]["kind"])] = Served(
                    spec["names"]["plural"], "status" in (v.get("subresources") or {}), bool(v.get("deprecated")))
    return out


def crd_groups() -> set[str]:
    return {api_version.rpartition("/")[0] for api_version, _ in crd_kinds()}


def plural_of(kind: str) -> str:
    lower = kind.lower()
    if lower.endswith("s"):
        return lower + "es"
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + "s"


# --- the judge -------------------------------------------------------------------------------------------

def judge_kind(api_version: str, kind: str) -> str | None:
    """Why `kind` in `api_version` is not current; None when the newest Kubernetes (or our CRDs) serve it."""
    if api_version.rpartition("/")[0] in crd_groups():
        served = crd_kinds().get((api_version, kind))
        if served is None:
            return f"{kind} {api_version}: not a version the chart's CRDs serve"
        return f"{kind} {api_version}: deprecated in the chart's CRDs" if served.deprecated else None
    if (api_version, kind) not in newest_kinds():
        return f"{kind} {api_version}: not in Kubernetes {NEWEST}'s API (removed, or never there)"
    return None


def judge_api_version(api_version: str) -> str | None:
    """Why `api_version` is not current; None when some kind of it is served."""
    served = newest_api_versions() | {v for v, _ in crd_kinds()}
    return None if api_version in served else f"{api_version}: not in Kubernetes {NEWEST}'s API nor our CRDs"


def kind_of(res: Resource) -> str | None:
    """The kind served at `res`'s group, version and plural (None: nothing is)."""
    for (api_version, kind), served in crd_kinds().items():
        if api_version == res.api_version and served.plural == res.plural:
            return kind
    for api_version, kind in newest_kinds():
        if api_version == res.api_version and plural_of(kind) == res.plural:
            return kind
    return None


def judge_resource(res: Resource) -> str | None:
    kind = kind_of(res)
    if kind is None:
        return f"{res.plural} in {res.api_version}: not in Kubernetes {NEWEST}'s API nor our CRDs"
    return judge_kind(res.api_version, kind)


def judge_versions(versions: Versions) -> str | None:
    return judge_kind(versions.preferred, versions.kind)


# --- what the code calls: kube/'s constants ---------------------------------------------------------------

def constants(kind: type[Any]) -> dict[str, Any]:
    return {name: value for name, value in vars(resources).items() if isinstance(value, kind)}


RESOURCES: dict[str, Resource] = constants(Resource)
BODY_VERSIONS: dict[str, Versions] = constants(Versions)


def test_the_constants_collected_are_the_resources_the_daemon_uses() -> None:
    assert {"PODS", "EVENTS", "LEASES", "TOKENREVIEWS", "DEPLOYMENTS", "KHCHECKS", "KHSTATES", "KHJOBS",
            "HEALTHCHECKS"} <= set(RESOURCES)
    assert BODY_VERSIONS == {"EVICTION": EVICTION}


@pytest.mark.parametrize("name", sorted(RESOURCES))
def test_every_resource_kube_defines_is_served_by_the_newest_kubernetes_or_our_crds(name: str) -> None:
    assert judge_resource(RESOURCES[name]) is None


@pytest.mark.parametrize("name", sorted(BODY_VERSIONS))
def test_every_body_the_daemon_sends_prefers_a_version_the_newest_kubernetes_serves(name: str) -> None:
    versions = BODY_VERSIONS[name]
    assert judge_versions(versions) is None
    assert versions.preferred not in versions.fallbacks


# --- the second net: what is written in the package -------------------------------------------------------

@dataclass(frozen=True)
class Written:
    """An apiVersion (or a kind whose apiVersion is computed) written in the package's source."""

    where: str
    api_version: str | None  # None: computed from what the scan cannot evaluate
    kind: str | None  # None: a bare group/version string


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _value(node: ast.expr, module: ModuleType | None) -> str | None:
    """A constant, or names and attributes evaluated in `module` (LEASES.api_version); None otherwise."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if module is None or not all(isinstance(n, (ast.Name, ast.Attribute, ast.Load)) for n in ast.walk(node)):
        return None
    try:
        value = eval(compile(ast.Expression(node), "<scan>", "eval"), vars(module))
    except (NameError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def scan(source: str, where: str, module: ModuleType | None = None) -> Iterator[Written]:
    tree = ast.parse(source)
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            fields = {k.value: v for k, v in zip(node.keys, node.values, strict=True) if isinstance(k, ast.Constant)}
            if "apiVersion" in fields and "kind" in fields:
                skip.add(id(fields["apiVersion"]))  # judged with its kind, not again alone
                api_version, kind = _value(fields["apiVersion"], module), _value(fields["kind"], module)
                if kind is not None:
                    yield Written(f"{where}:{node.lineno}", api_version, kind)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip \
                and GROUP_VERSION.fullmatch(node.value):
            yield Written(f"{where}:{node.lineno}", node.value, None)


def scan_package() -> list[Written]:
    found: list[Written] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        module = importlib.import_module(name) if "apiVersion" in source else None
        found.extend(scan(source, str(path.relative_to(PACKAGE.parent)), module))
    return found


def known_kinds() -> set[str]:
    """Kinds whose versions the constants already name (and the tests above judge)."""
    return {k for r in RESOURCES.values() if (k := kind_of(r))} | {v.kind for v in BODY_VERSIONS.values()}


def judge_written(found: Written, declaring: str) -> str | None:
    fallbacks = {(v, versions.kind) for versions in BODY_VERSIONS.values() for v in versions.fallbacks}
    declared = found.where.startswith(f"{declaring}:")
    if found.api_version is None:
        if found.kind in known_kinds():
            return None
        return f"{found.where}: which version of {found.kind}? Name it in a Resource or Versions constant"
    if found.kind is None:
        if declared and found.api_version in {v for v, _ in fallbacks}:
            return None
        why = judge_api_version(found.api_version)
    else:
        if declared and (found.api_version, found.kind) in fallbacks:
            return None
        why = judge_kind(found.api_version, found.kind)
    return f"{found.where}: {why}" if why else None


DECLARING_NAME = str(DECLARING.relative_to(PACKAGE.parent))


def test_every_api_version_written_in_the_package_is_current_or_a_declared_fallback() -> None:
    found = scan_package()
    problems = [why for w in found if (why := judge_written(w, DECLARING_NAME))]
    assert problems == []
    # The scan sees what it is meant to: literals, and versions computed from kube/'s constants.
    seen = {(w.api_version, w.kind) for w in found}
    assert {("authentication.k8s.io/v1", "TokenReview"), ("v1", "Event"), ("coordination.k8s.io/v1", "Lease"),
            ("policy/v1beta1", None)} <= seen


def _subresources(source: str) -> Iterator[tuple[str, str]]:
    """(resource constant, subresource) of every X.path(ns, name, "sub") and X.status() in the source."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in RESOURCES:
            if node.func.attr == "status":
                yield node.func.value.id, "status"
            elif node.func.attr == "path":
                subs = list(node.args[2:3]) + [k.value for k in node.keywords if k.arg == "sub"]
                for sub in subs:
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                        yield node.func.value.id, sub.value


def judge_subresource(name: str, sub: str) -> str | None:
    res = RESOURCES[name]
    if sub == "status":
        served = crd_kinds().get((res.api_version, kind_of(res) or ""))
        return None if served is None or served.status else f"{res.plural}/status: the CRD has no status subresource"
    if (res.plural, sub) in NO_BODY:
        return None
    versions = BODIES.get((res.plural, sub))
    if versions is None:
        return f"{res.plural}/{sub}: a subresource nobody judged (add it to NO_BODY or BODIES)"
    return judge_versions(versions)


def test_every_subresource_the_daemon_asks_for_is_judged() -> None:
    asked = {pair for path in sorted(PACKAGE.rglob("*.py")) for pair in _subresources(path.read_text("utf-8"))}
    asked |= {(name, r.subresource) for name, r in RESOURCES.items() if r.subresource}
    assert {("PODS", "log"), ("PODS", "eviction"), ("HEALTHCHECKS", "status")} <= asked
    assert [why for name, sub in sorted(asked) if (why := judge_subresource(name, sub))] == []


# --- the judge catches what was removed --------------------------------------------------------------------

@pytest.mark.parametrize(("api_version", "kind"), [
    ("extensions/v1beta1", "Ingress"), ("policy/v1beta1", "PodSecurityPolicy"),
    ("policy/v1beta1", "PodDisruptionBudget"), ("batch/v1beta1", "CronJob"),
    ("apiextensions.k8s.io/v1beta1", "CustomResourceDefinition"), ("comcast.github.io/v2", "KuberhealthyCheck"),
])
def test_the_judge_refuses_an_api_version_that_was_removed(api_version: str, kind: str) -> None:
    assert judge_kind(api_version, kind) is not None
    assert judge_api_version(api_version) is not None


def test_the_judge_accepts_what_replaced_them() -> None:
    for api_version, kind in [("networking.k8s.io/v1", "Ingress"), ("policy/v1", "PodDisruptionBudget"),
                              ("batch/v1", "CronJob"), ("comcast.github.io/v1", "KuberhealthyCheck"),
                              ("kuberhealthy.github.io/v2", "HealthCheck"), ("v1", "Pod")]:
        assert judge_kind(api_version, kind) is None, (api_version, kind)


def test_a_resource_or_body_in_a_removed_version_is_caught() -> None:
    assert judge_resource(Resource("ingresses", "extensions", "v1beta1")) is not None
    assert judge_resource(Resource("podsecuritypolicies", "policy", "v1beta1")) is not None
    assert judge_resource(Resource("khchecks", GROUP, "v2")) is not None
    assert judge_resource(Resource("ingresses", "networking.k8s.io")) is None
    assert judge_versions(Versions("PodDisruptionBudget", "policy/v1beta1", ())) is not None
    assert judge_versions(Versions("Eviction", "policy/v1beta1", ("policy/v1",))) is not None


def test_the_source_scan_catches_a_removed_api_version_in_new_code() -> None:
    source = '''
INGRESS = {"apiVersion": "extensions/v1beta1", "kind": "Ingress"}
PSP_GROUP = "policy/v1beta1"
MYSTERY = {"apiVersion": version_of_the_day, "kind": "CronJob"}
FINE = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "note": "apps/v1"}
'''
    problems = [why for w in scan(source, "new.py") if (why := judge_written(w, DECLARING_NAME))]
    assert len(problems) == 3
    assert any("Ingress extensions/v1beta1" in p for p in problems)
    assert any("policy/v1beta1" in p for p in problems)  # a fallback only where it is declared
    assert any("which version of CronJob" in p for p in problems)


def test_a_subresource_nobody_judged_is_caught() -> None:
    assert judge_subresource("PODS", "exec") is not None
    assert judge_subresource("PODS", "log") is None


# --- preference: a current server is asked only the current version -----------------------------------------

class Server:
    """Stands in for Kube: answers evictions as a server that reads the given Eviction versions; records them."""

    def __init__(self, reads: tuple[str, ...], refusal: ApiError | None = None) -> None:
        self.reads = reads
        self.refusal = refusal  # what an eviction it can read gets (a PodDisruptionBudget's 429...)
        self.asked: list[str] = []

    def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        if method == "DELETE":
            self.asked.append("DELETE")
            return {}
        version = body["apiVersion"]
        self.asked.append(version)
        if version not in self.reads:
            raise BadRequest(f"no kind Eviction is registered for version {version}", reason="BadRequest")
        if self.refusal is not None:
            raise self.refusal
        return {}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


CURRENT = ("policy/v1", "policy/v1beta1")


def test_a_current_server_is_asked_only_for_the_preferred_eviction_version() -> None:
    server = Server(CURRENT)
    res = Resources(server)  # type: ignore[arg-type]
    assert [res.evict_pod("ns", n) for n in "abc"] == ["evicted"] * 3
    assert server.asked == [EVICTION.preferred] * 3


@pytest.mark.parametrize("refusal", [TooManyRequests("disruption budget", reason="TooManyRequests"),
                                     Forbidden("no eviction for you", reason="Forbidden")],
                         ids=["a disruption budget", "rbac"])
def test_an_eviction_the_server_refuses_is_not_asked_again_in_an_older_version(refusal: ApiError) -> None:
    server = Server(CURRENT, refusal)
    res = Resources(server)  # type: ignore[arg-type]
    assert res.evict_pod("ns", "a") == "deleted"
    assert server.asked == [EVICTION.preferred, "DELETE"]


def test_a_server_that_cannot_read_the_preferred_version_gets_the_fallback_and_is_asked_again_later() -> None:
    clock, server = Clock(), Server(("policy/v1beta1",))
    res = Resources(server, clock=clock)  # type: ignore[arg-type]
    assert res.evict_pod("ns", "a") == "evicted"
    assert res.evict_pod("ns", "b") == "evicted"
    assert server.asked == ["policy/v1", "policy/v1beta1", "policy/v1beta1"]

    server.asked.clear()
    clock.now += RETRY_PREFERRED - 1
    assert res.evict_pod("ns", "c") == "evicted"
    assert server.asked == ["policy/v1beta1"]

    server.asked.clear()
    clock.now += 1  # long enough: the server may have been upgraded since
    server.reads = CURRENT
    assert res.evict_pod("ns", "d") == "evicted"
    assert res.evict_pod("ns", "e") == "evicted"
    assert server.asked == ["policy/v1", "policy/v1"]


def test_a_server_that_reads_no_eviction_version_gets_a_delete() -> None:
    server = Server(())
    res = Resources(server)  # type: ignore[arg-type]
    assert res.evict_pod("ns", "a") == "deleted"
    assert server.asked == [*EVICTION.in_order, "DELETE"]


def test_a_server_that_stopped_reading_the_fallback_is_asked_the_preferred_version_at_once() -> None:
    clock, server = Clock(), Server(("policy/v1beta1",))
    res = Resources(server, clock=clock)  # type: ignore[arg-type]
    res.evict_pod("ns", "a")
    server.asked.clear()
    server.reads = ("policy/v1",)  # upgraded within the hour, and the old version no longer read
    assert res.evict_pod("ns", "b") == "evicted"
    assert res.evict_pod("ns", "c") == "evicted"
    assert server.asked == ["policy/v1beta1", "policy/v1", "policy/v1"]
