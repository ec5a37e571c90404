"""Fixtures for integration tests that run the product in this process (the black-box ones are in
tests/contract): `daemon`, an InProcessDaemon for the test's namespace with the simulated kubelet, and
`res`, the kube layer's Resources on the test bed. A module changes the daemon's config by overriding
`daemon_settings`, and its kubelet by overriding `kubelet`."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kuberhealthy.kube import Kube, Resources
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.v3crd import v3_crd_in_place
from testbed.daemons.inprocess import InProcessDaemon
from testbed.sim.kubelet import SimKubelet


@pytest.fixture
def daemon_settings() -> dict[str, Any]:
    """Config settings of the `daemon` fixture beyond InProcessDaemon's own (override in a module)."""
    return {}


@pytest.fixture
def daemon(cluster: TestCluster, namespace: str, kubelet: SimKubelet,
           daemon_settings: dict[str, Any]) -> Iterator[InProcessDaemon]:
    """The daemon in this process, leading (enableForceMaster), its pods driven by `kubelet`."""
    d = InProcessDaemon(cluster, namespace, daemon_settings).start()
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def res(cluster: TestCluster) -> Iterator[Resources]:
    kube = Kube.connect(str(cluster.kubeconfig))
    try:
        yield Resources(kube)
    finally:
        kube.close()


@pytest.fixture
def v3_crd(cluster: TestCluster) -> Iterator[None]:
    """Kuberhealthy v3's own HealthCheck CRD in place of ours for the test (it prunes our status fields)."""
    with v3_crd_in_place(cluster):
        yield
