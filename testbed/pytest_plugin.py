"""The test bed's pytest fixtures, registered by tests/conftest.py with `pytest_plugins`.

- `cluster` (session): etcd + kube-apiserver on loopback with the chart's CRDs, stopped even when tests fail
- `namespace`: a fresh namespace per test
- `kubelet`: a SimKubelet driving pods in `namespace` (`kubelet_nodes` nodes, 3 unless a module
  overrides that fixture); `receiver`: a ReportReceiver on 127.0.0.1
- `daemons`: start the daemon as real processes (the console script), all stopped after the test
- `helm` (module): the helm binary with a throw-away home; `influxd` (module): a real InfluxDB 1.x
- `no_thread_leaks` (autouse): every test fails if it leaves a product (`kh-`) thread running

Fixtures that need the product in-process (an InProcessDaemon, Services) live in the conftest of the
tests that use them: this plugin is loaded for the black-box contract tests too, so it imports nothing
of `kuberhealthy`. The functions carry a `_fixture` suffix and register under the short names, so
importing them never shadows a test's parameter.
"""
from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.cluster.apiserver import TestCluster, cleanup, start_cluster
from testbed.cluster.crds import install_crds
from testbed.cluster.objects import create_namespace
from testbed.daemons.process import DaemonProcess
from testbed.sim.kubelet import SimKubelet
from testbed.sim.receiver import ReportReceiver
from testbed.tools.helm import Helm, find_helm
from testbed.tools.influxd import INFLUXD, InfluxD, start_influxd

THREAD_PREFIX = "kh-"  # the product names every thread it starts kh-<what>
LEAK_GRACE = 5.0  # seconds a stopped product thread may take to end


@pytest.fixture(name="no_thread_leaks", autouse=True)
def no_thread_leaks_fixture() -> Iterator[None]:
    """Fail the test if it leaves product threads running. Autouse, so function-scoped fixtures are set
    up after it and torn down before it looks; threads of module- and session-scoped fixtures were
    running before it started and do not count."""
    before = set(threading.enumerate())
    yield
    pause = threading.Event()
    leaked: list[threading.Thread] = []
    for _ in range(int(LEAK_GRACE / 0.1)):
        leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()
                  and t.name.startswith(THREAD_PREFIX)]
        if not leaked:
            break
        pause.wait(0.1)
    assert not leaked, f"threads left running: {[t.name for t in leaked]}"


@pytest.fixture(name="cluster", scope="session")
def cluster_fixture() -> Iterator[TestCluster]:
    """etcd + kube-apiserver on loopback for the whole session, stopped even when tests fail."""
    c = start_cluster(with_kcm=bool(os.environ.get("KH_TEST_WITH_KCM")))
    try:
        install_crds(c)
        os.environ["KUBECONFIG"] = str(c.kubeconfig)
        yield c
    finally:
        cleanup(c)


@pytest.fixture(name="namespace")
def namespace_fixture(cluster: TestCluster) -> str:
    """A namespace of its own for each test (left behind: the test bed has no namespace controller)."""
    return create_namespace(cluster)


@pytest.fixture(name="kubelet_nodes")
def kubelet_nodes_fixture() -> int:
    """How many nodes the `kubelet` fixture simulates (override in a module: one node makes every
    hostNetwork pod share its IP)."""
    return 3


@pytest.fixture(name="kubelet")
def kubelet_fixture(cluster: TestCluster, namespace: str, kubelet_nodes: int) -> Iterator[SimKubelet]:
    """A SimKubelet driving pods in `namespace`, stopped (all threads joined) after the test."""
    sim = SimKubelet(str(cluster.kubeconfig), nodes=kubelet_nodes, namespace=namespace, signing_key=cluster.sa_key)
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture(name="receiver")
def receiver_fixture() -> Iterator[ReportReceiver]:
    """A report receiver on 127.0.0.1 (free port) answering 200, stopped after the test."""
    r = ReportReceiver().start()
    try:
        yield r
    finally:
        r.stop()


Daemons = Callable[..., DaemonProcess]


@pytest.fixture(name="daemons")
def daemons_fixture(cluster: TestCluster, namespace: str, tmp_path: Path) -> Iterator[Daemons]:
    """`daemons(name, settings=None, *, pod_namespace=None, kubeconfig=None)`: a DaemonProcess (not
    started) whose POD_NAMESPACE is the test's namespace unless given, with its files in tmp_path;
    every one is stopped after the test."""
    made: list[DaemonProcess] = []

    def make(name: str, settings: dict[str, Any] | None = None, *, pod_namespace: str | None = None,
             kubeconfig: Path | None = None) -> DaemonProcess:
        d = DaemonProcess(cluster, tmp_path, name, pod_namespace or namespace, settings, kubeconfig=kubeconfig)
        made.append(d)
        return d
    try:
        yield make
    finally:
        for d in made:
            d.stop()


@pytest.fixture(name="helm", scope="module")
def helm_fixture(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    path = find_helm()
    if not path:
        pytest.skip("helm not found: run `bash hack/tools.sh` (or set KH_HELM) to fetch it")
    return Helm(path, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(name="influxd", scope="module")
def influxd_fixture() -> Iterator[InfluxD]:
    """A running influxd for the test module (tests use their own database names)."""
    if not os.access(INFLUXD, os.X_OK):
        pytest.fail(f"no influxd at {INFLUXD} (apt-get install influxdb, or set KH_TEST_INFLUXD)")
    server = start_influxd()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.workdir, ignore_errors=True)
