"""Shared fixtures: one real API server per test session, a fresh namespace per test, no leaked threads."""
from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator

import pytest

from tests.harness.cluster import TestCluster, cleanup, start_cluster
from tests.harness.crds import install_crds
from tests.harness.helm import helm  # noqa: F401 - registers the fixture
from tests.sim.fixtures import kubelet_fixture, receiver_fixture  # noqa: F401 - registers fixtures


@pytest.fixture(scope="session")
def cluster() -> Iterator[TestCluster]:
    """etcd + kube-apiserver on loopback for the whole session, stopped even when tests fail."""
    c = start_cluster(with_kcm=bool(os.environ.get("KH_TEST_WITH_KCM")))
    try:
        install_crds(c)
        os.environ["KUBECONFIG"] = str(c.kubeconfig)
        yield c
    finally:
        cleanup(c)


@pytest.fixture
def namespace(cluster: TestCluster) -> str:
    """A namespace of its own for each test (left behind: the test bed has no namespace controller)."""
    name = "t-" + uuid.uuid4().hex[:10]
    cluster.request("POST", "/api/v1/namespaces",
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


@pytest.fixture
def no_thread_leaks() -> Iterator[None]:
    """Fail the test if it leaves non-daemon or product threads running."""
    before = set(threading.enumerate())
    yield
    deadline = threading.Event()
    leaked: list[threading.Thread] = []
    for _ in range(50):
        leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()
                  and t.name.startswith("kh-")]
        if not leaked:
            break
        deadline.wait(0.1)
    assert not leaked, f"threads left running: {[t.name for t in leaked]}"
