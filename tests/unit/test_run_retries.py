"""A run's API requests when the API server is slow or away: counted, never more than a fixed number per run.

The retries of a run are one budget (guard.RETRIES) for all its calls, whatever its timeout: a control plane
that stays slow gets no more requests per run the longer it stays slow. A request that never left because
every connection of the client stayed busy (NoFreeConnection: the client's own requests queued ahead of
it) is not retried at all. Either way the run is skipped, never failed (no false alarm). Time is the fakes'
clock: a retry's backoff advances it, so a run with a ten-minute timeout ends at once.
"""
from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import pytest

from kuberhealthy.base.errors import NoFreeConnection, ServerError, Unreachable
from kuberhealthy.kube import KHSTATES, PODS
from kuberhealthy.outputs.runstats import SKIP_API
from kuberhealthy.records import khstate
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.run.guard import RETRIES
from kuberhealthy.run.runner import Outcome, Phase, Runner, RunResult
from testbed.fakes import NS, FakeServices, FakeStop, check_spec, khstate_of
from testbed.fakes.readouts import skipped_count

LONG = check_spec("probe", timeout="10m")  # long enough for hundreds of retries at a fixed backoff
SATURATED = NoFreeConnection("GET khstates: no free connection within 5.0s (API server slow)")
ALWAYS = 10**6  # a fault's count that never runs out


class Run:
    """Runner(check).run() on a thread named like a worker's, so the test can move the clock meanwhile."""

    def __init__(self, services: FakeServices, check: CheckSpec = LONG) -> None:
        self.stop = FakeStop(services.clock)
        self.runner = Runner(services, check, self.stop, clock=services.clock, wall=services.clock.wall)
        self._pool = futures.ThreadPoolExecutor(1, thread_name_prefix=f"kh-test-run-{check.name}")
        self._future = self._pool.submit(self.runner.run)

    def result(self) -> RunResult:
        try:
            return self._future.result(10.0)
        finally:
            self.stop.set()
            self.runner.wake()
            self._pool.shutdown(wait=True)


@pytest.fixture
def services(fake_services: FakeServices) -> Iterator[FakeServices]:
    yield fake_services
    fake_services.api.down = False


def calls(services: FakeServices, method: str, plural: str) -> int:
    return sum(1 for c in services.api.calls if (c.method, c.plural) == (method, plural))


def test_a_run_the_api_server_stays_away_for_makes_one_request_and_its_retries_whatever_its_timeout(
        services: FakeServices) -> None:
    services.api.down = True
    result = Run(services).result()
    assert result.outcome is Outcome.SKIPPED and result.skip_reason == SKIP_API
    assert len(services.api.calls) == 1 + RETRIES  # was one every 2 s of its ten minutes
    assert skipped_count(services.stats, SKIP_API) == 1


def test_a_request_that_found_no_free_connection_is_not_retried_and_the_run_is_skipped(
        services: FakeServices) -> None:
    services.api.fail("get", KHSTATES, SATURATED, times=ALWAYS)  # the claim reads the khstate first
    result = Run(services).result()
    assert result.outcome is Outcome.SKIPPED and result.skip_reason == SKIP_API and result.phase is Phase.CLAIM
    assert [(c.method, c.plural) for c in services.api.calls] == [("get", "khstates")]


def test_a_create_that_found_no_free_connection_is_not_retried_and_no_failure_is_recorded(
        services: FakeServices) -> None:
    services.api.put(KHSTATES, khstate_of("probe", uuid="the-run-before"))
    services.api.fail("create", PODS, SATURATED, times=ALWAYS)
    result = Run(services).result()
    assert result.outcome is Outcome.SKIPPED and result.phase is Phase.CREATE
    assert calls(services, "create", "pods") == 1 and not services.api.objects(PODS)
    spec = khstate.Spec.of(services.api.peek(KHSTATES, NS, "probe") or {})
    assert spec.ok is True and spec.errors == ()


def test_a_failure_whose_record_found_no_free_connection_is_a_skip_after_one_request(
        services: FakeServices) -> None:
    services.api.put(KHSTATES, khstate_of("probe", uuid="the-run-before"))
    run = Run(services, check_spec("probe", timeout="60s"))
    services.until(lambda: services.api.objects(PODS), "the run's checker pod")  # it stays Pending
    writes = calls(services, "replace", "khstates")  # the claim
    services.api.fail("replace", KHSTATES, SATURATED, times=ALWAYS)
    services.clock.advance(61)
    result = run.result()
    assert result.outcome is Outcome.SKIPPED and result.skip_reason == SKIP_API
    assert calls(services, "replace", "khstates") == writes + 1
    assert khstate.Spec.of(services.api.peek(KHSTATES, NS, "probe") or {}).errors == ()


def test_the_retries_of_one_run_are_one_budget_for_all_its_phases(services: FakeServices) -> None:
    claim_retries = 3
    services.api.fail("create", KHSTATES, ServerError("etcdserver: request timed out", status=500),
                      times=claim_retries)
    services.api.fail("create", PODS, Unreachable("connection refused"), times=ALWAYS)
    result = Run(services).result()
    assert result.outcome is Outcome.SKIPPED and result.phase is Phase.CREATE
    assert calls(services, "create", "khstates") == 1 + claim_retries
    assert calls(services, "create", "pods") == 1 + RETRIES - claim_retries
