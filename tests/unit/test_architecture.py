"""The package's shape, checked from its source (AST; nothing is imported): one-way imports, one
home per constant, the API client only under kuberhealthy/kube/, no tests imported by tools."""
from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from testbed.modgraph import cycles, graph, modules

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "kuberhealthy"
# Label, annotation and env names: each is written once, next to its owner.
NAME_LIKE = re.compile(r"^(KH_[A-Z0-9_]+|kuberhealthy-[a-z-]+|([a-z0-9-]+\.)*comcast\.github\.io/[a-z0-9-]+)$")


def _trees(root: Path) -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text()) for p in sorted(root.rglob("*.py"))}


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


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(graph(PACKAGE)) == []


def test_no_module_of_the_package_imports_inside_a_function() -> None:
    lazy = {m: [d for d, is_lazy in deps.items() if is_lazy] for m, deps in graph(PACKAGE).items()}
    assert {m: d for m, d in lazy.items() if d} == {}


def test_no_part_imports_the_composition_root() -> None:
    importers = {m for m, deps in graph(PACKAGE).items() if "kuberhealthy.daemon.services" in deps}
    assert importers <= {"kuberhealthy.daemon.server"}


def test_only_the_kube_package_imports_the_kubernetes_client() -> None:
    offenders = [str(p.relative_to(ROOT)) for p, tree in _trees(PACKAGE).items()
                 if "kube" not in p.relative_to(PACKAGE).parts[:1]
                 and any(n == "kubernetes" or n.startswith("kubernetes.") for n in _imported_names(tree))]
    assert offenders == []


def test_the_checker_client_library_imports_nothing_of_the_package() -> None:
    tree = ast.parse((PACKAGE / "checkclient.py").read_text())
    assert not [n for n in _imported_names(tree) if n.split(".")[0] == "kuberhealthy"]


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
