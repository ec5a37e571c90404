"""Where test code lives and what it may import, checked from the source (AST; nothing is imported).

The contract tests are black-box: they and every test bed module they use (directly or through other
test bed modules), and the pytest plugin that is loaded for them, import nothing of `kuberhealthy`.
Within the test bed only testbed/daemons/inprocess.py (the in-process daemon) and testbed/fakes/ (in-memory fakes
of the product's seams, for unit tests) may import the product. Tests import the test bed, never each
other or a conftest. And the test bed keeps its rooms (testbed/README.md "Rooms"): only the kit at the
top, rooms that are packages saying what they hold, no two modules of one name across testbed/ and
bench/, one home for the percentile and CPU-seconds helpers, and the release pipeline outside.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from testbed.modgraph import imports, modules, parse
from testbed.paths import REPO

PLUGIN = "testbed.pytest_plugin"
# The test bed modules that may import kuberhealthy: the in-process daemon wrapper and the in-memory fakes
# of the product's seams (used by unit tests only; the contract tests import neither).
PRODUCT_AWARE = {"testbed.daemons.inprocess", "testbed.fakes.api", "testbed.fakes.cache",
                 "testbed.fakes.clock", "testbed.fakes.gate", "testbed.fakes.readouts", "testbed.fakes.world"}


def _all_modules() -> dict[str, Path]:
    return {**modules(REPO / "kuberhealthy"), **modules(REPO / "testbed"), **modules(REPO / "tests")}


def _deps() -> dict[str, set[str]]:
    """Every module of the product, the test bed and the tests -> the modules of those it imports."""
    mods = _all_modules()
    return {name: set(imports(name, path, set(mods))) for name, path in mods.items()}


def _closure(deps: dict[str, set[str]], start: set[str]) -> set[str]:
    """`start` and the test bed modules they use, transitively, with the packages importing them runs
    (product modules are not followed)."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        parents = [m.rsplit(".", i)[0] for i in range(1, m.count(".") + 1)]
        todo.extend(d for d in [*deps.get(m, ()), *parents] if d.split(".")[0] == "testbed" and d in deps)
    return seen


def _importing_the_product(deps: dict[str, set[str]], names: set[str]) -> dict[str, list[str]]:
    return {m: sorted(d for d in deps[m] if d.split(".")[0] == "kuberhealthy") for m in sorted(names)
            if any(d.split(".")[0] == "kuberhealthy" for d in deps[m])}


def test_contract_tests_and_the_test_bed_modules_they_use_import_nothing_of_the_product() -> None:
    deps = _deps()
    contract = {m for m in deps if m.startswith("tests.contract")}
    used = _closure(deps, contract | {PLUGIN})
    assert contract and {"testbed", "testbed.daemons.process", "testbed.sim"} <= used  # the walk sees what it should
    assert _importing_the_product(deps, used) == {}


def test_only_the_in_process_wrapper_of_the_test_bed_imports_the_product() -> None:
    deps = _deps()
    testbed = {m for m in deps if m.split(".")[0] == "testbed"}
    assert set(_importing_the_product(deps, testbed)) == PRODUCT_AWARE


def test_contract_tests_run_the_console_script_not_the_module() -> None:
    for path in sorted((REPO / "tests" / "contract").glob("*.py")):
        assert "kuberhealthy.cli" not in path.read_text(), f"{path.name} runs `python -m kuberhealthy.cli`"


def test_tests_import_no_other_test_module_and_no_conftest() -> None:
    deps = _deps()
    offenders = {m: sorted(d for d in ds if d.rpartition(".")[2].startswith("test_") or d.endswith(".conftest"))
                 for m, ds in deps.items() if m.split(".")[0] == "tests"}
    assert {m: d for m, d in offenders.items() if d} == {}


# --- the test bed's rooms (testbed/README.md "Rooms") ------------------------------------------------------

TESTBED = REPO / "testbed"
BENCH = REPO / "bench"
# The kit: what may sit at the top of testbed/, beside the rooms.
KIT = {"__init__", "paths", "wait", "procs", "stats", "budget", "terminal", "modgraph", "pytest_plugin"}
# Module basenames that may occur more than once across testbed/ and bench/, each with its reason. Keep empty.
SHARED_NAMES: dict[str, str] = {}
# A helper that has one home: testbed/stats.py.
HELPER_NAME = re.compile(r"(percentile\w*|quantile\w*|pct|p50|p95|p99|cpu_seconds)")
STATS = TESTBED / "stats.py"


def _sources(*roots: Path) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _rooms() -> list[Path]:
    return sorted(d for d in TESTBED.iterdir() if d.is_dir() and d.name != "__pycache__" and any(d.rglob("*.py")))


def test_the_top_of_the_test_bed_holds_only_the_kit() -> None:
    top = {p.stem for p in TESTBED.glob("*.py")}
    assert top - KIT == set(), "a module at the top of testbed/ that is not the kit: put it in a room"


def test_every_room_of_the_test_bed_is_a_package_that_says_what_it_holds() -> None:
    rooms = _rooms()
    assert {"cluster", "sim", "fakes", "daemons"} <= {r.name for r in rooms}  # the walk sees what it should
    for room in rooms:
        init = room / "__init__.py"
        assert init.is_file(), f"testbed/{room.name}/ is not a package"
        assert ast.get_docstring(ast.parse(init.read_text())), f"testbed/{room.name}/__init__.py has no docstring"


def test_no_two_modules_of_the_test_bed_and_the_benchmarks_share_a_name() -> None:
    by_name: dict[str, list[str]] = {}
    for path in _sources(TESTBED, BENCH):
        if path.stem not in ("__init__", "__main__"):
            by_name.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    assert len(by_name) > 50  # the walk sees what it should
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1 and name not in SHARED_NAMES}
    assert shared == {}, "two modules of one name: rename one after what it holds"


def test_percentiles_and_cpu_seconds_are_defined_only_in_testbed_stats() -> None:
    found: dict[str, list[str]] = {}
    for path in [*_sources(TESTBED, BENCH), *_sources(REPO / "release")]:
        for node in ast.walk(parse(path)):  # parsed once per session
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and HELPER_NAME.fullmatch(node.name):
                found.setdefault(str(path.relative_to(REPO)), []).append(node.name)
    assert found.pop(str(STATS.relative_to(REPO)), None) == ["percentile", "cpu_seconds"]
    assert found == {}, "use testbed.stats (percentile, summary, cpu_seconds) instead"


def test_the_release_pipeline_is_not_in_the_test_bed_and_runs_as_python_m_release() -> None:
    importing: dict[str, list[str]] = {}
    for path in _sources(TESTBED):
        for node in ast.walk(parse(path)):  # parsed once per session
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n.split(".")[0] == "release" for n in names):
                importing[str(path.relative_to(REPO))] = names
    assert importing == {}, "the test bed imports the release pipeline"
    assert not any(p.stem.startswith("release") for p in _sources(TESTBED)), "a release module in testbed/"
    assert (REPO / "release" / "__init__.py").is_file() and (REPO / "release" / "__main__.py").is_file()
