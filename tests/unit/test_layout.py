"""Where test code lives and what it may import, checked from the source (AST; nothing is imported).

The contract tests are black-box: they and every test bed module they use (directly or through other
test bed modules), and the pytest plugin that is loaded for them, import nothing of `kuberhealthy`.
Within the test bed only testbed/daemons/inprocess.py (the in-process daemon) and testbed/fakes/ (in-memory fakes
of the product's seams, for unit tests) may import the product. Tests import the test bed, never each
other or a conftest.
"""
from __future__ import annotations

from pathlib import Path

from testbed.modgraph import imports, modules
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
