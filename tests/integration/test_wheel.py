"""The built wheel, not the editable checkout: every module and data file of the source tree is in it, and
the daemon imports and finds its templates, assets and OpenAPI document from an installed copy.

The tests use an editable install, which reads files straight from the tree: a subpackage missing from
setup.py's package discovery or a data file missing from package_data would pass them and break the image
and every pip install. The wheel is built from a copy of the sources (so the checkout stays clean) and
installed with no dependencies into a fresh venv that sees the test venv's third-party packages through a
.pth line, never the checkout itself.

The checker client is one file, clients/python/src/kuberhealthy_checkclient/__init__.py; in the checkout
kuberhealthy/checkclient.py is a symlink to it. The copy the builds start from keeps that symlink (and the
source it points to), as a clone has it, and the sdist, the wheel built from it and the installed wheel
must each hold the source's bytes as a regular kuberhealthy/checkclient.py.
"""
from __future__ import annotations

import shutil
import stat
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

from testbed.paths import REPO

PACKAGE = REPO / "kuberhealthy"
CHECKCLIENT_SOURCE = REPO / "clients" / "python" / "src" / "kuberhealthy_checkclient" / "__init__.py"
DATA = ("web/openapi.yaml", "web/dashboard/templates/dashboard/overview.html",
        "web/dashboard/templates/dashboard/check.html", "web/dashboard/templates/dashboard/base.html",
        "web/dashboard/templates/dashboard/macros.html", "web/dashboard/static/dashboard.css",
        "web/dashboard/static/dashboard.js", "web/dashboard/static/favicon.svg",
        "web/statuspage/templates/statuspage/status.html", "web/statuspage/templates/statuspage/macros.html",
        "web/statuspage/static/status.css")
IMPORT_CHECK = """
import sys
from pathlib import Path
import kuberhealthy, kuberhealthy.daemon.server, kuberhealthy.daemon.services, kuberhealthy.checkclient
from flask import Flask
from kuberhealthy.web.dashboard.render import fingerprint
from kuberhealthy.web.dashboard.routes import bp
from kuberhealthy.web.openapi import document_bytes
assert Path(kuberhealthy.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()), kuberhealthy.__file__
app = Flask("wheel-check")
app.register_blueprint(bp)
for name in ("overview.html", "check.html", "macros.html", "base.html"):
    app.jinja_env.get_template("dashboard/" + name)
for name in ("dashboard.css", "dashboard.js", "favicon.svg"):
    fingerprint(name)
assert document_bytes().startswith(b"{")
print(kuberhealthy.__file__)
"""


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build inputs as a clone has them: kuberhealthy/checkclient.py a symlink to clients/python's source."""
    src = tmp_path_factory.mktemp("src")
    for name in ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(PACKAGE, src / "kuberhealthy", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    client = src / CHECKCLIENT_SOURCE.relative_to(REPO)
    client.parent.mkdir(parents=True)
    shutil.copy(CHECKCLIENT_SOURCE, client)
    assert (src / "kuberhealthy" / "checkclient.py").is_symlink()
    return src


def _pip_wheel(what: Path, out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
                    "-w", str(out), str(what)], check=True, timeout=300)
    (built,) = out.glob("kuberhealthy-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel(src: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _pip_wheel(src, tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def sdist(src: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built as release/build.py builds it: setuptools' PEP 517 hook, in the copy of the sources."""
    out = tmp_path_factory.mktemp("sdist")
    done = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
                           "print(b.build_sdist(sys.argv[1]))", str(out)], cwd=src, check=True, timeout=300,
                          capture_output=True, text=True)
    return out / done.stdout.strip().splitlines()[-1]


def _wheel_member(wheel: Path, name: str) -> tuple[bool, bytes]:
    """(is a regular file, content) of a wheel's member."""
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(name)
        return stat.S_ISREG(info.external_attr >> 16), zf.read(name)


def test_the_wheel_holds_every_module_and_data_file_of_the_source_tree(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {f"kuberhealthy/{p.relative_to(PACKAGE).as_posix()}" for p in PACKAGE.rglob("*.py")}
    assert len(sources) > 40  # the walk sees the package
    assert sorted(sources - names) == []
    assert sorted(f"kuberhealthy/{d}" for d in DATA if f"kuberhealthy/{d}" not in names) == []
    assert not [n for n in names if "__pycache__" in n or n.startswith(("tests/", "testbed/", "bench/"))]


def test_the_wheel_and_the_sdist_hold_the_checker_clients_source_as_a_regular_kuberhealthy_checkclient_py(
        wheel: Path, sdist: Path, tmp_path: Path) -> None:
    source = CHECKCLIENT_SOURCE.read_bytes()
    assert _wheel_member(wheel, "kuberhealthy/checkclient.py") == (True, source)
    with tarfile.open(sdist) as tf:
        [member] = [m for m in tf.getmembers() if m.name.endswith("/kuberhealthy/checkclient.py")]
        assert member.isreg(), f"{member.name} is not a regular file in the sdist"
        extracted = tf.extractfile(member)
        assert extracted is not None and extracted.read() == source
        assert not [m.name for m in tf.getmembers() if "/clients/" in m.name]  # the client is not shipped twice
    # pip builds the wheel from the sdist (no clients/ there): the sdist's own regular file is the source.
    assert _wheel_member(_pip_wheel(sdist, tmp_path), "kuberhealthy/checkclient.py") == (True, source)


def test_the_daemon_imports_and_finds_its_templates_assets_and_openapi_from_the_installed_wheel(
        wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # The test venv's third-party packages (flask, kubernetes, ...), appended after the fresh venv's own
    # site-packages; a .pth line adds a path without processing that path's own .pth files, so the
    # checkout's editable-install finder stays out.
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "--quiet", "--disable-pip-version-check", str(wheel)], check=True, timeout=300)
    checked = subprocess.run([str(python), "-I", "-c", IMPORT_CHECK], check=False, capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert Path(checked.stdout.strip()).is_relative_to(site)
    version = subprocess.run([str(env_dir / "bin" / "kuberhealthy"), "--version"], check=False, capture_output=True,
                             text=True, timeout=120, cwd=tmp_path)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip()
    helped = subprocess.run([str(python), "-I", "-m", "kuberhealthy.checkclient", "--help"], check=False,
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: python -m kuberhealthy.checkclient ")
    installed = site / "kuberhealthy" / "checkclient.py"
    assert not installed.is_symlink() and installed.read_bytes() == CHECKCLIENT_SOURCE.read_bytes()
