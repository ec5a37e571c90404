"""The test bed's one percentile (nearest rank), its CPU-seconds helper and its split of a process's CPU by
thread names (testbed/stats.py)."""
from __future__ import annotations

import os
import threading

import pytest

from kuberhealthy.base.threads import BackgroundThread
from testbed.stats import (
    ENDED,
    ThreadSample,
    cpu_by_thread_group,
    cpu_seconds,
    percentile,
    slices_by_thread_group,
    summary,
    thread_cpu,
    thread_group,
)

TEN = [float(v) for v in range(10, 0, -1)]  # 10.0 .. 1.0, unsorted on purpose


def test_the_percentile_of_no_values_is_none() -> None:
    assert percentile([], 50) is None
    assert percentile(iter(()), 0) is None


def test_every_percentile_of_one_value_is_that_value() -> None:
    assert [percentile([7.0], p) for p in (0, 1, 50, 99, 100)] == [7.0] * 5


def test_p0_is_the_smallest_and_p100_the_largest() -> None:
    assert (percentile(TEN, 0), percentile(TEN, 100)) == (1.0, 10.0)


def test_p50_is_the_value_at_rank_ceil_of_half_n() -> None:
    assert percentile(TEN, 50) == 5.0  # rank 5 of 10, not an average of 5 and 6
    assert percentile([1.0, 2.0, 3.0], 50) == 2.0  # rank ceil(1.5) = 2
    assert percentile([1.0, 2.0], 50) == 1.0  # rank 1


def test_p99_is_the_largest_value_up_to_a_hundred_values_and_the_next_to_largest_at_a_hundred() -> None:
    assert percentile(TEN, 99) == 10.0  # rank ceil(9.9) = 10
    hundred = [float(v) for v in range(1, 101)]
    assert percentile(hundred, 99) == 99.0  # rank 99 exactly
    assert percentile([*hundred, 101.0], 99) == 100.0  # rank ceil(99.99) = 100


def test_a_percentile_outside_0_to_100_is_refused() -> None:
    with pytest.raises(ValueError):
        percentile(TEN, 101)
    with pytest.raises(ValueError):
        percentile(TEN, -1)


def test_the_summary_counts_and_gives_p50_p99_and_max() -> None:
    assert summary(TEN) == {"count": 10, "p50": 5.0, "p99": 10.0, "max": 10.0}


def test_the_summary_of_no_values_has_a_zero_count_and_no_figures() -> None:
    assert summary([]) == {"count": 0, "p50": None, "p99": None, "max": None}


def test_cpu_seconds_of_a_process_that_is_gone_is_zero() -> None:
    assert cpu_seconds([2**22 + 12345]) == 0.0  # above the default pid_max


def test_cpu_seconds_with_reaped_children_is_never_less_than_without() -> None:
    pid = os.getpid()
    own = cpu_seconds([pid])
    assert own >= 0.0
    assert cpu_seconds([pid], reaped_children=True) >= own


def test_threads_are_grouped_by_name_with_every_check_thread_in_one_group_and_pool_numbers_dropped() -> None:
    assert thread_group("check-ns/a-check", main=False) == "check"
    assert thread_group("check-kuberheal", main=False) == "check"  # the namespace cut before its "/"
    assert thread_group("check-reaper", main=False) == "check-reaper"
    assert thread_group("http_3", main=False) == "http"
    assert thread_group("watch-pods", main=False) == "watch-pods"
    assert thread_group("gunicorn", main=True) == "main"


def test_the_cpu_of_a_group_counts_born_threads_whole_and_the_rest_of_the_process_as_ended_threads() -> None:
    before = {(1, 1): ThreadSample("main", 1.0), (1, 2): ThreadSample("check", 2.0), (1, 3): ThreadSample("check", 5.0)}
    after = {(1, 1): ThreadSample("main", 1.5), (1, 2): ThreadSample("check", 2.25),
             (1, 4): ThreadSample("http", 0.5)}  # 3 ended, 4 was born
    assert cpu_by_thread_group(before, after, process_seconds=2.0) == {"main": 0.5, "check": 0.25, "http": 0.5,
                                                                      ENDED: 0.75}
    assert ENDED not in cpu_by_thread_group(before, after, process_seconds=1.25)


def test_the_time_slices_of_a_group_count_born_threads_whole_and_leave_out_ended_ones() -> None:
    before = {(1, 1): ThreadSample("main", 1.0, 100), (1, 2): ThreadSample("check", 2.0, 40),
              (1, 3): ThreadSample("check", 5.0, 7), (1, 5): ThreadSample("check", 1.0, 10)}
    after = {(1, 1): ThreadSample("main", 1.5, 130), (1, 2): ThreadSample("check", 2.25, 45),
             (1, 4): ThreadSample("http", 0.5, 12), (1, 5): ThreadSample("check", 1.0, 10)}  # 3 ended, 4 was born
    assert slices_by_thread_group(before, after) == {"main": 30, "check": 5, "http": 12}


def test_a_live_process_s_named_threads_are_found_with_their_cpu() -> None:
    release = threading.Event()

    class Spinning(BackgroundThread):
        def _run(self) -> None:
            sum(range(200_000))
            release.wait(10)

    thread = Spinning("kh-reflector-pods")
    thread.start()
    try:
        for _ in range(100):
            found = thread_cpu([os.getpid()])
            if any(sample.group == "watch-pods" for sample in found.values()):
                break
            release.wait(0.05)
        groups = {sample.group for sample in found.values()}
        assert {"main", "watch-pods"} <= groups
        assert all(sample.seconds >= 0 for sample in found.values())
        pods = [sample for sample in found.values() if sample.group == "watch-pods"]
        assert pods[0].slices >= 1  # it ran: the scheduler put it on a CPU at least once
    finally:
        release.set()
        thread.stop()
        thread.join(10)
