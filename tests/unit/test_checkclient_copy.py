"""The checker client is one file in two distributions: `kuberhealthy_checkclient` (clients/python, the
source) and `kuberhealthy.checkclient` (its byte-identical copy, kept for `python -m kuberhealthy.checkclient`
and the daemon's own imports). Read from the source tree; nothing is built here (the wheel's tests are
tests/integration/test_checkclient_wheel.py)."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import tomllib

import kuberhealthy
from testbed.paths import REPO

CLIENT = REPO / "clients" / "python"
SOURCE = CLIENT / "src" / "kuberhealthy_checkclient" / "__init__.py"
COPY = REPO / "kuberhealthy" / "checkclient.py"
SYNC = "cp clients/python/src/kuberhealthy_checkclient/__init__.py kuberhealthy/checkclient.py"


def _version(path: Path) -> str:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__version__"]:
            assert isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            return node.value.value
    raise AssertionError(f"{path} sets no __version__")


def test_kuberhealthy_checkclient_is_a_byte_identical_copy_of_the_distributions_module() -> None:
    assert COPY.read_bytes() == SOURCE.read_bytes(), f"the copy differs from its source: run `{SYNC}`"


def test_the_client_carries_the_kuberhealthy_version_without_importing_kuberhealthy() -> None:
    assert _version(SOURCE) == kuberhealthy.__version__
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    assert "version" in project["dynamic"]  # setuptools reads __version__ from the module


def test_the_client_imports_only_the_standard_library_and_the_distribution_declares_no_dependency() -> None:
    imported: set[str] = set()
    for path in (SOURCE, SOURCE.with_name("__main__.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    assert "urllib" in imported  # the walk sees the imports
    assert sorted(imported - set(sys.stdlib_module_names) - {"__future__", "kuberhealthy_checkclient"}) == []
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "kuberhealthy-checkclient"
    assert project["dependencies"] == []
    assert not project.get("optional-dependencies")
    assert SOURCE.with_name("py.typed").is_file()
