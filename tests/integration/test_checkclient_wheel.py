"""The checker client's own wheel (clients/python): built as a release builds it, installed where no index
and no other package can be reached, it needs nothing but the standard library, carries `py.typed`, passes
the client's behaviour tests (tests/unit/test_checkclient.py, run in the fresh venv against the installed
module) and type-checks a typed consumer with mypy.

The wheel is built from a copy of clients/python (setuptools writes build/ and *.egg-info beside the
sources), with build isolation as tests/integration/test_wheel.py builds the daemon's. It is installed with
every pip configuration file and PIP_* variable left out and `--no-index`, and without `--no-deps`: a
single Requires-Dist would fail the install.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest

import kuberhealthy
from testbed.paths import REPO

CLIENT = REPO / "clients" / "python"
DIST = "kuberhealthy-checkclient"
MODULE = "kuberhealthy_checkclient"
METADATA = f"""
import importlib.metadata, json, {MODULE}
dist = importlib.metadata.distribution("{DIST}")
print(json.dumps({{"version": dist.version, "requires": dist.requires, "files": [str(f) for f in dist.files or []],
                  "module": {MODULE}.__file__, "names": sorted(importlib.metadata.packages_distributions())}}))
"""
CONSUMER = f"""
from {MODULE} import Reporter, get_pod_namespace, run_check, time_left

left: float | None = time_left(reserve=5.0)
namespace: str = get_pod_namespace({{"KH_POD_NAMESPACE": "team-a"}})
reporter: Reporter = Reporter.from_env({{"KH_REPORTING_URL": "http://kh/x", "KH_RUN_UUID": "u"}}, request_timeout=2.0)
status: int = run_check(lambda: ["a reason"])
"""
WRONG = f"""
from {MODULE} import get_pod_namespace

namespace: int = get_pod_namespace()
"""


def _run(args: list[str], timeout: float = 300, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)


def _purelib(python: Path) -> Path:
    out = _run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("client-src")
    shutil.copytree(CLIENT, src, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "dist", "*.egg-info"))
    out = tmp_path_factory.mktemp("client-dist")
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
                  "-w", str(out), "."], cwd=src)
    assert built.returncode == 0, built.stdout + built.stderr
    (found,) = out.glob("kuberhealthy_checkclient-*-py3-none-any.whl")
    return found


def _install(wheel: Path, into: Path) -> Path:
    """A fresh venv (no pip of its own) with the wheel installed from nothing but itself; its python."""
    venv.EnvBuilder(with_pip=False).create(into)
    python = into / "bin" / "python"
    bare = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    done = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", "--quiet",
                 "--disable-pip-version-check", str(wheel)], env={**bare, "PIP_CONFIG_FILE": os.devnull})
    assert done.returncode == 0, done.stdout + done.stderr
    return python


@pytest.fixture(scope="module")
def clean_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv's python: the standard library and the wheel, nothing else."""
    return _install(wheel, tmp_path_factory.mktemp("clean") / "venv")


def test_the_wheel_holds_the_module_its_command_line_and_py_typed_and_requires_nothing(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
        headers = zf.read(metadata).decode()
        assert zf.read(f"{MODULE}/__init__.py") == (CLIENT / "src" / MODULE / "__init__.py").read_bytes()
    assert {f"{MODULE}/__init__.py", f"{MODULE}/__main__.py", f"{MODULE}/py.typed"} <= names
    assert {n.split("/")[0] for n in names} == {MODULE, f"{MODULE}-{kuberhealthy.__version__}.dist-info"}
    assert re.search(r"^Name: kuberhealthy-checkclient$", headers, re.M)
    assert re.search(rf"^Version: {re.escape(kuberhealthy.__version__)}$", headers, re.M)
    assert "Requires-Dist" not in headers
    assert re.search(r"^Description-Content-Type: text/markdown$", headers, re.M)


def test_the_wheel_installs_with_no_index_and_brings_no_other_distribution(clean_python: Path) -> None:
    shown = _run([str(clean_python), "-I", "-c", METADATA], cwd=clean_python.parent)
    assert shown.returncode == 0, shown.stderr
    found = json.loads(shown.stdout)

    assert found["version"] == kuberhealthy.__version__
    assert found["requires"] is None  # no Requires-Dist at all
    assert f"{MODULE}/py.typed" in found["files"]
    assert Path(found["module"]).is_relative_to(_purelib(clean_python))
    assert found["names"] == [MODULE]  # the venv's site-packages holds the client only


def test_the_installed_command_line_runs_as_python_m_kuberhealthy_checkclient(clean_python: Path) -> None:
    helped = _run([str(clean_python), "-I", "-m", MODULE, "--help"], cwd=clean_python.parent)
    refused = _run([str(clean_python), "-I", "-m", MODULE, "ok"], cwd=clean_python.parent,
                   env={"PATH": os.environ.get("PATH", "")})

    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith(f"usage: python -m {MODULE} ")
    assert refused.returncode == 1
    assert "KH_REPORTING_URL" in refused.stderr


def test_the_client_behaviour_tests_pass_against_the_installed_module(wheel: Path, tmp_path: Path) -> None:
    python = _install(wheel, tmp_path / "venv")
    site = _purelib(python)
    # pytest and the test helpers' imports from this venv, after the fresh venv's own site-packages; a .pth
    # line adds a path without processing that path's own .pth files (the checkout's editable finder).
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {**os.environ, "CHECKCLIENT_UNDER_TEST": MODULE}
    env.pop("PYTHONPATH", None)
    # From the checkout (tests/ and testbed/ on the path), where no other kuberhealthy_checkclient exists.
    where = _run([str(python), "-c", f"import {MODULE}; print({MODULE}.__file__)"], cwd=REPO, env=env)
    ran = _run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest",
                "tests/unit/test_checkclient.py"], cwd=REPO, env=env, timeout=600)

    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(site)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    passed = re.search(r"(\d+) passed", ran.stdout)
    assert passed and int(passed.group(1)) >= 60, ran.stdout[-2000:]
    assert not re.search(r"\d+ (failed|skipped|error)", ran.stdout)


def test_a_typed_consumer_type_checks_against_the_installed_package_and_a_wrong_type_is_caught(
        clean_python: Path, tmp_path: Path) -> None:
    (tmp_path / "consumer.py").write_text(CONSUMER)
    (tmp_path / "wrong.py").write_text(WRONG)
    mypy = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
            "--python-executable", str(clean_python)]

    good = _run([*mypy, "consumer.py"], cwd=tmp_path)
    bad = _run([*mypy, "wrong.py"], cwd=tmp_path)

    assert good.returncode == 0, good.stdout + good.stderr  # without py.typed: "missing library stubs or py.typed"
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert 'expression has type "str", variable has type "int"' in bad.stdout
