"""Pytest fixtures for the simulated kubelet (`kubelet`) and a report receiver (`receiver`).

The functions carry a `_fixture` suffix and register under the short names, so importing them never
shadows a test's parameter. Import them into tests/conftest.py with
`from tests.sim.fixtures import kubelet_fixture, receiver_fixture  # noqa: F401`.
"""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.cluster import TestCluster
from tests.sim.kubelet import SimKubelet
from tests.sim.receiver import ReportReceiver


@pytest.fixture(name="kubelet")
def kubelet_fixture(cluster: TestCluster, namespace: str) -> Iterator[SimKubelet]:
    """A SimKubelet driving pods in `namespace`, stopped (all threads joined) after the test."""
    sim = SimKubelet(str(cluster.kubeconfig), nodes=3, namespace=namespace)
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
