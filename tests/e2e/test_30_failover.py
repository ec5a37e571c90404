"""Leader failover on the real node: the leader pod deleted, the other replica takes the Lease, the
Deployment replaces the pod, checks keep running, and there are never two live checker pods of one check.
The Lease holder is sampled through the failover and compared with each run's `AuthoritativePod`."""
from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from testbed.node.e2e import E2E, Sampler, newest_run, poll

SHELL = "localhost/kh-e2e/shell-check:e2e"
CHECK = "failover-ok"


@pytest.fixture(name="steady", scope="module")
def steady_fixture(kh: E2E) -> Iterator[str]:
    """A quick, good check: a run every 15 s."""
    kh.apply(kh.khcheck(CHECK, kh.pod_spec(SHELL, {"MODE": "ok"}), namespace=kh.checks_namespace,
                        run_interval="15s", timeout="40s"))
    newest_run(kh, CHECK, timeout=120)
    yield CHECK


def test_deleting_the_leader_pod_moves_the_lease_and_checks_keep_running_with_one_live_pod_each(
        kh: E2E, steady: str) -> None:
    old_leader = poll(kh.leader, 30, "a leader")
    old_pods = {p["metadata"]["name"] for p in kh.daemon_pods()}
    seen = frozenset(r["uuid"] for r in (kh.khstate(steady) or {}).get("history") or [])
    stop = threading.Event()
    sampler = Sampler(kh, [steady], stop)
    sampler.start()
    assert sampler.ready.wait(60), sampler.errors
    try:
        kh.delete("pod", old_leader, kh.namespace)

        new_leader = poll(lambda: (h := kh.leader()) and h != old_leader and h, 90, "another replica to take the Lease")
        # the standby took over, before the Deployment's replacement could start
        assert new_leader in old_pods, f"holders sampled: {sampler.holders()}, replicas before: {old_pods}"
        poll(lambda: len(kh.ready_daemon_pods()) == 2 and not any(
            p["metadata"]["name"] == old_leader for p in kh.daemon_pods(live_only=False)), 180,
            "the Deployment to replace the deleted pod")
        after = newest_run(kh, steady, seen=seen, timeout=120)
        assert after["OK"] is True
        newest_run(kh, steady, seen=seen | {after["uuid"]}, timeout=120)  # and the next one too
    finally:
        stop.set()
        sampler.join(30)

    assert new_leader != old_leader
    assert sampler.errors == []
    assert sampler.max_live(steady) <= 1, sampler.live_counts(steady)
    assert sampler.runs, "no run finished while sampling"
    for run_uuid, authoritative, holders in sampler.runs:
        assert authoritative in holders, (run_uuid, authoritative, holders)
    state = kh.khstate(steady)
    assert state is not None and state["OK"] is True and state["consecutiveFailures"] == 0
