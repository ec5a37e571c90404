"""The checker client has one source, clients/python/src/kuberhealthy_checkclient/__init__.py (the
`kuberhealthy-checkclient` distribution). The daemon's `kuberhealthy.checkclient` is that file, not a copy:
a symlink in the checkout, so the editable install, mypy and import-linter read the source, and a regular
file that setup.py writes into the daemon's wheel and sdist (tests/integration/test_wheel.py builds both
and compares them). Read from the source tree and this venv; nothing is built here."""
from __future__ import annotations

import ast
import importlib.util
import os
import sys
from pathlib import Path

import tomllib

import kuberhealthy
from testbed.paths import REPO

CLIENT = REPO / "clients" / "python"
SOURCE = CLIENT / "src" / "kuberhealthy_checkclient" / "__init__.py"
LINK = REPO / "kuberhealthy" / "checkclient.py"


def _version(path: Path) -> str:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__version__"]:
            assert isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            return node.value.value
    raise AssertionError(f"{path} sets no __version__")


def test_kuberhealthy_checkclient_in_the_checkout_is_a_symlink_to_the_one_source_not_a_copy() -> None:
    assert LINK.is_symlink(), f"{LINK} must be a symlink to {SOURCE}, not a copy of it"
    assert os.readlink(LINK) == os.path.relpath(SOURCE, LINK.parent)  # relative: it works in any clone
    assert LINK.resolve() == SOURCE.resolve()


def test_the_module_this_venv_imports_as_kuberhealthy_checkclient_is_the_source_file() -> None:
    spec = importlib.util.find_spec("kuberhealthy.checkclient")
    assert spec is not None and spec.origin is not None
    assert Path(spec.origin).read_bytes() == SOURCE.read_bytes()
    assert Path(spec.origin).resolve() == SOURCE.resolve()  # the editable install reads the source itself


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
