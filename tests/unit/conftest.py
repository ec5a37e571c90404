"""Fixtures over the in-memory fakes (testbed/fakes/): services, the Flask app and its test client.

In-process like the Flask tutorial's `app`/`client`: no API server, no sockets, no real sleeps. A test
that leaves a `kh-` thread running fails by the autouse guard (testbed.pytest_plugin's no_thread_leaks).
"""
from __future__ import annotations

import os

import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import settings

from kuberhealthy.web import create_app
from testbed.fakes import FakeClock, FakeServices

# Hypothesis: the fast tier tries each property 100 times (its default), with no deadline (a busy machine is not
# a failure); HYPOTHESIS_PROFILE=thorough tries 1000 (CI's unit job). A test's own max_examples still wins.
settings.register_profile("unit", deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "unit"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake_services(clock: FakeClock) -> FakeServices:
    """Synced, current caches over an empty fake API; this replica is the master the page shows."""
    return FakeServices(clock=clock)


@pytest.fixture
def app(fake_services: FakeServices) -> Flask:
    # caller_wait 0: a pod the cache has not seen is looked up at once, without waiting for the cache
    return create_app(fake_services, caller_wait=0.0)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()
