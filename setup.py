"""Packaging for Kuberhealthy (Python): the daemon and the checker client library."""
from setuptools import find_namespace_packages, setup

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
                  "kuberhealthy.web.dashboard.templates.dashboard": ["*.html"]},
    python_requires=">=3.10",
    install_requires=[
        "kubernetes>=31,<38",
        "flask>=3.0,<4",
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
            "types-PyYAML==6.0.12.20261122",
            "types-requests==2.33.0.20261030",
            "openapi-spec-validator>=0.7,<1",  # the OpenAPI document is valid (tests/unit/test_openapi.py)
            "schemathesis>=4,<5",  # the daemon fuzzed from its OpenAPI document (tests/contract)
            "selenium>=4.11,<5",  # browser tests with Debian's chromium + chromedriver (hack/tools.sh)
        ],
    },
    entry_points={"console_scripts": ["kuberhealthy = kuberhealthy.cli:main"]},
    include_package_data=True,
    license="Apache-2.0",  # an SPDX expression (license classifiers are deprecated)
    classifiers=[
        "Programming Language :: Python :: 3",
    ],
)
