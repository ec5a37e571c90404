"""The package's shape, checked from its source (AST; nothing is imported): what import-linter's contracts
(pyproject.toml, run by `make lint`) cannot say. No import cycle in the package, the test bed or the
benchmarks; no import inside a function; only the daemon layer imports the composition root; one home per
constant; no tests imported by tools; and the layers contract covers every part of the package."""
from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest
import tomllib

from testbed.modgraph import cycles, graph, modules, parse

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "kuberhealthy"
# Label, annotation and env names: each is written once, next to its owner.
NAME_LIKE = re.compile(r"^(KH_[A-Z0-9_]+|kuberhealthy-[a-z-]+|([a-z0-9-]+\.)*comcast\.github\.io/[a-z0-9-]+)$")


def _trees(root: Path) -> dict[Path, ast.Module]:
    return {p: parse(p) for p in sorted(root.rglob("*.py"))}  # parsed once per session (shared: read only)


def _imported_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


@pytest.mark.parametrize("folder", ["kuberhealthy", "testbed", "bench"])
def test_the_package_the_test_bed_and_the_benchmarks_have_no_import_cycle(folder: str) -> None:
    g = graph(ROOT / folder)
    assert len(g) > 3  # the walk sees the folder's modules
    assert cycles(g) == []


def test_no_module_of_the_package_imports_inside_a_function() -> None:
    lazy = {m: [d for d, is_lazy in deps.items() if is_lazy] for m, deps in graph(PACKAGE).items()}
    assert {m: d for m, d in lazy.items() if d} == {}


def test_no_part_imports_the_composition_root() -> None:
    importers = {m for m, deps in graph(PACKAGE).items() if "kuberhealthy.daemon.services" in deps}
    assert importers <= {"kuberhealthy.daemon.runtime", "kuberhealthy.daemon.reconfigure"}


def test_the_import_linter_layers_name_every_subpackage_and_top_level_module_of_the_package() -> None:
    """import-linter (`make lint`) enforces the layers and the forbidden imports (the kubernetes client only
    in kube/, nothing in checkclient); a module it is not told about escapes them, so every subpackage and
    every top-level module must stand in the layers contract, and the forbidden contracts must be there."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers"]
    named = {m.strip() for layer in layers["layers"] for m in layer.split("|")}
    children = {f"kuberhealthy.{p.stem if p.is_file() else p.name}" for p in PACKAGE.iterdir()
                if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert children - named <= {"kuberhealthy.checkclient"}  # the stand-alone client has a contract of its own
    forbidden = {tuple(c["source_modules"]): set(c["forbidden_modules"]) for c in contracts if c["type"] == "forbidden"}
    assert any("kubernetes" in f and set(s) == children - {"kuberhealthy.kube"} for s, f in forbidden.items())
    assert any(s == ("kuberhealthy.checkclient",) and children - {"kuberhealthy.checkclient"} <= f
               for s, f in forbidden.items())


def test_nothing_outside_tests_imports_the_tests() -> None:
    offenders = []
    for folder in ("kuberhealthy", "testbed", "bench", "examples"):
        for p, tree in _trees(ROOT / folder).items():
            if any(n == "tests" or n.startswith("tests.") for n in _imported_names(tree)):
                offenders.append(str(p.relative_to(ROOT)))
    assert offenders == []


def test_each_label_annotation_and_env_name_is_written_once_in_the_package() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for p, tree in _trees(PACKAGE).items():
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                    and NAME_LIKE.match(node.value):
                where[node.value].append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert {name: places for name, places in where.items() if len(places) > 1} == {}
    assert "kuberhealthy-run-id" in where and "KH_RUN_UUID" in where  # the scan sees what it should


def test_the_module_graph_tool_finds_a_cycle_and_a_lazy_import(tmp_path: Path) -> None:
    pkg = tmp_path / "kuberhealthy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from kuberhealthy import b\n")
    (pkg / "b.py").write_text("def f():\n    from kuberhealthy.a import x\n")
    g = graph(pkg)
    assert set(modules(pkg)) == {"kuberhealthy", "kuberhealthy.a", "kuberhealthy.b"}
    assert g["kuberhealthy.b"] == {"kuberhealthy.a": True}
    assert cycles(g) == [["kuberhealthy.a", "kuberhealthy.b"]]


def test_every_module_named_in_the_stricter_mypy_overrides_exists() -> None:
    """mypy applies an override to the modules it names and says nothing of a name that matches none: after a
    move, a stale name would silently drop the stricter checks from the module it meant."""
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    ours = [m for o in overrides for m in o["module"] if m.split(".")[0] == "kuberhealthy"]
    known = set(modules(PACKAGE))
    assert ours and sorted(m for m in ours if m not in known) == []


# --- a kind of check is data (records/kinds.py), not a second runner -------------------------------------
# The run, the controller, the reapers and the report handler never name a kind: an identifier, attribute,
# imported name or string of one kind (its resource, cache, constants, event kind) in run/, control/ or
# web/report/ fails. Docstrings and comments may say what they like.

KIND_BLIND = ("run", "control", "web/report")
# Identifiers that name one kind: its resources, caches, constants, parsers, labels and state codec.
KIND_NAMES = frozenset({
    "KHCHECKS", "KHJOBS", "KHSTATES", "HEALTHCHECKS", "KIND_KHCHECK", "KIND_KHJOB", "KIND_HEALTHCHECK",
    "KIND_CHECK", "KIND_JOB", "WORKLOAD_CHECK", "WORKLOAD_JOB", "HC_PREFIX", "V3_FINALIZER", "V3_CHECK_LABEL",
    "CHECK_NAME_LABEL", "khchecks", "khjobs", "khstates", "healthchecks", "hcstate", "of_healthcheck", "of_job",
    "read_khstate", "statestore", "HealthCheckStore", "KhstateStore", "KHSTATE_STORE", "v3lease", "migration",
})
# Strings that name one kind (exact values: an error message may mention a khstate, as v2's do).
KIND_STRINGS = frozenset({"KuberhealthyCheck", "KuberhealthyJob", "KuberhealthyState", "HealthCheck", "khcheck",
                          "khjob", "khstate", "healthcheck", "khchecks", "khjobs", "khstates", "healthchecks",
                          "hc:", "comcast.github.io", "kuberhealthy.github.io"})


def kind_names(source: str) -> list[str]:
    """What in `source` names a kind, as `line: what`."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.alias):
            name = node.asname or node.name.rsplit(".", 1)[-1]
        elif isinstance(node, (ast.ImportFrom,)) and node.module:
            name = node.module.rsplit(".", 1)[-1]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if node.value in KIND_STRINGS:
                found.append(f"{node.lineno}: string {node.value!r}")
            continue
        if name in KIND_NAMES:
            found.append(f"{getattr(node, 'lineno', '?')}: {name}")
    return found


def kind_blind_modules() -> list[Path]:
    return sorted(p for part in KIND_BLIND for p in (PACKAGE / part).rglob("*.py"))


@pytest.mark.parametrize("path", kind_blind_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_of_the_run_the_controller_or_the_report_handler_names_a_kind(path: Path) -> None:
    assert kind_names(path.read_text()) == []


def test_the_check_finds_a_kind_named_in_code_but_not_in_a_docstring() -> None:
    source = '''"""Runs khchecks and HealthChecks alike."""
from kuberhealthy.kube import KHSTATES
def f(services):
    """Reads services.khstates."""
    return services.khchecks.get("a", "b"), "HealthCheck", "failed to claim the run in its khstate"
'''
    assert sorted(kind_names(source)) == ["2: KHSTATES", "5: khchecks", "5: string 'HealthCheck'"]
