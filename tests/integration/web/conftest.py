"""Fixtures for the HTTP API over real services: the test API server, the caches, a real HTTP server.

Checker pods are created through the API and given a Running status with a loopback pod IP by hand
(`PodMaker`, testbed/daemons/inprocess.py), so a report can come from the pod's own address (Linux routes all
of 127/8 on lo). Every test here also gets the autouse thread-leak guard.
"""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask

from kuberhealthy.daemon.services import Services
from kuberhealthy.web import create_app
from testbed.cluster.apiserver import TestCluster
from testbed.daemons.inprocess import PodMaker, WebServer, make_services, serve


@pytest.fixture
def services(cluster: TestCluster, namespace: str) -> Iterator[Services]:
    """Real caches for `namespace`, synced; stopped after the test."""
    s = make_services(cluster, namespace)
    s.start_caches()
    try:
        assert s.wait_synced(10), "caches did not sync"
        yield s
    finally:
        s.stop(10)
        s.kube.close()


@pytest.fixture
def app(services: Services) -> Flask:
    return create_app(services, caller_wait=2.5)


@pytest.fixture
def server(app: Flask) -> Iterator[WebServer]:
    s = serve(app)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def maker(cluster: TestCluster, namespace: str, services: Services) -> PodMaker:
    return PodMaker(cluster, namespace, services)
