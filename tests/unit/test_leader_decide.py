"""The elector's pure decision: create, acquire, renew or wait — judged by our own monotonic clock."""
from kuberhealthy.control.leader import Action, Record, decide


def rec(holder: str, renew: str = "t1", duration: float = 15) -> Record:
    return Record(holder=holder, renew_time=renew, transitions=0, duration=duration)


def test_no_lease_means_create() -> None:
    assert decide(None, 0, 0, "me", 15) is Action.CREATE


def test_our_own_lease_is_renewed() -> None:
    assert decide(rec("me"), 0, 100, "me", 15) is Action.RENEW


def test_a_released_lease_is_acquired_at_once() -> None:
    assert decide(rec(""), 100, 100, "me", 15) is Action.ACQUIRE


def test_a_live_lease_of_another_replica_is_left_alone() -> None:
    assert decide(rec("other"), 100, 114.9, "me", 15) is Action.WAIT


def test_a_lease_unchanged_for_its_duration_is_taken_over() -> None:
    assert decide(rec("other"), 100, 115, "me", 15) is Action.ACQUIRE


def test_the_lease_s_own_duration_overrides_ours() -> None:
    assert decide(rec("other", duration=60), 100, 130, "me", 15) is Action.WAIT
    assert decide(rec("other", duration=1), 100, 101, "me", 15) is Action.ACQUIRE
