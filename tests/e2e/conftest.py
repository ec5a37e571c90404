"""The end-to-end session: a real single-node Kubernetes (testbed/node/realnode.py), the images built here and
loaded into its containerd, and the chart installed with helm (2 replicas, imagePullPolicy Never, the
bundled upstream checks off, since their images cannot be pulled here).

Where the real node cannot start, every test skips with the reason, except under `CI=true`, where that
fails the run. Each part has a time budget (binaries, images, install, tests), printed when it ends and
again at the end of the session; going over a budget is reported, never asserted (no wall-clock limits
in tests).

There is no cluster DNS on the node (CoreDNS is not packaged): the reporting URL stays the default
(`http://kuberhealthy.kh-e2e.svc.cluster.local/externalCheckStatus`) and every checker podSpec of these
tests resolves that name with `hostAliases` (tests/e2e/README.md).
"""
from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.budget import TimeBudget
from testbed.node.e2e import E2E, chart_values, helm_binary, import_images, kubectl_from_env
from testbed.node.images import Built, build_all
from testbed.node.realnode import NODE_SH, RealNode, RealNodeError
from testbed.terminal import say
from testbed.tools.helm import Helm

# Seconds each part may take on a cold machine (2 cores): the node's binaries (Debian's 1.20.2 tree,
# shared with the API-server test bed), the images, the helm install, the tests themselves.
BUDGETS = {"binaries": 480.0, "images": 480.0, "install": 180.0, "tests": 900.0}


class Budget(TimeBudget):
    """Seconds per part (BUDGETS), printed as each ends and together at the end of the session."""

    def __init__(self, config: pytest.Config) -> None:
        super().__init__(BUDGETS, self._say)
        self.config = config

    def _say(self, text: str) -> None:
        say(self.config, "e2e", text)


def _skip_or_fail(reason: str) -> None:
    """Skip with the reason, except under CI=true, where a skipped e2e run must fail."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the real node is unavailable: {reason}", pytrace=False)
    pytest.skip(f"real node unavailable: {reason}")


@pytest.fixture(name="budget", scope="session")
def budget_fixture(request: pytest.FixtureRequest) -> Iterator[Budget]:
    b = Budget(request.config)
    yield b
    b.say(b.summary())


@pytest.fixture(name="real_node", scope="session")
def real_node_fixture(budget: Budget) -> Iterator[RealNode]:
    """The real node, started for the session and stopped after it (KH_E2E_KEEP_NODE=1 keeps it).
    Missing binaries are built first (`node.sh build`, idempotent: a warm cache does nothing)."""
    with budget.part("binaries"):
        reason = RealNode.unavailable()
        if reason and os.geteuid() == 0:
            build = subprocess.run(["bash", str(NODE_SH), "build"], capture_output=True, text=True, check=False,
                                   timeout=BUDGETS["binaries"] * 3)
            reason = RealNode.unavailable()
            if reason and build.returncode != 0:
                reason += f" (node.sh build failed: {(build.stdout + build.stderr)[-2000:]})"
    if reason:
        _skip_or_fail(reason)
    with budget.part("binaries"):
        try:
            node = RealNode.start()
        except (RealNodeError, subprocess.TimeoutExpired) as e:
            _skip_or_fail(f"node.sh start failed: {e}")
    try:
        yield node
    finally:
        if not os.environ.get("KH_E2E_KEEP_NODE"):
            node.stop()


@pytest.fixture(name="images", scope="session")
def images_fixture(real_node: RealNode, budget: Budget) -> Built:
    """Every image of the tests, built with podman and imported into the node's containerd."""
    out = Path(tempfile.mkdtemp(prefix="kh-e2e-images-"))
    with budget.part("images"):
        try:
            built = build_all(out, out / "build.log")
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            pytest.fail(f"building the e2e images failed: {e}", pytrace=False)
        tars = sorted(set(built.tars.values()))
        try:
            import_images(real_node, tars)
        except subprocess.CalledProcessError as e:
            pytest.fail(f"ctr images import failed: {e.stderr}", pytrace=False)
        for tar in tars:
            tar.unlink()
    budget.say("images: " + ", ".join(f"{k} {v:.0f} s" for k, v in built.seconds.items()))
    return built


def _helm(tmp: Path) -> Helm:
    binary = helm_binary()
    if binary is None:
        _skip_or_fail("no helm binary (bash hack/tools.sh could not fetch it)")
    assert binary is not None
    return Helm(binary, tmp)


@pytest.fixture(name="kh", scope="session")
def kh_fixture(real_node: RealNode, images: Built, budget: Budget,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2E]:
    """The chart installed: two Ready replicas, the Service's ClusterIP known; uninstalled at the end
    (unless a test did) and the tests' namespaces deleted."""
    e2e = E2E(kubectl_bin=kubectl_from_env(real_node.env), kubeconfig=Path(real_node.kubeconfig),
              helm=_helm(tmp_path_factory.mktemp("helm-home")))
    e2e.values = chart_values(images.image("daemon"))
    with budget.part("install"):
        if e2e.installed():
            e2e.uninstall()  # left by a session that kept its node (KH_E2E_KEEP_NODE)
        e2e.create_namespaces()
        e2e.install()
        e2e.find_cluster_ip()
        e2e.await_ready(2)
    started = time.monotonic()
    try:
        yield e2e
    finally:
        budget.spent["tests"] = time.monotonic() - started
        budget.say(budget.line("tests"))
        if e2e.installed():
            e2e.uninstall()
        for ns in (e2e.checks_namespace, e2e.namespace):
            e2e.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false", check=False)



def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A generous timeout per test: the first one also waits for the session's set-up (a cold image
    build, the node's start, the install), which pytest-timeout counts in."""
    for item in items:
        if item.path.is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.timeout(2400))
