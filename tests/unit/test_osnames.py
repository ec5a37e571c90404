"""Threads carry a short form of their names to the operating system (kuberhealthy/base/osnames.py):
what `top -H` and /proc/PID/task/*/comm show, and what bench.scale groups the daemon's CPU by."""
from __future__ import annotations

import sys
import threading
from concurrent import futures
from pathlib import Path

import pytest

from kuberhealthy.base.osnames import COMM_BYTES, name_this_thread, os_name
from kuberhealthy.base.threads import BackgroundThread
from kuberhealthy.daemon.httpworker import POOL_THREADS, PollingWorker

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names are set on Linux only")


def comm_of_this_thread() -> str:
    return Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().rstrip("\n")


def test_the_os_name_drops_the_daemons_prefix_calls_a_reflector_a_watch_and_keeps_fifteen_bytes() -> None:
    assert os_name("kh-reflector-pods") == b"watch-pods"
    assert os_name("kh-reflector-khstates") == b"watch-khstates"
    assert os_name("kh-check-ns/a-long-check-name") == b"check-ns/a-long"
    assert os_name("kh-http_3") == b"http_3"
    assert os_name("MainThread") == b"MainThread"
    assert len(os_name("kh-check-é" * 5)) <= COMM_BYTES
    os_name("kh-check-" + "é" * 10).decode("utf-8")  # a character cut in two is dropped, not left half


@linux_only
def test_a_background_thread_carries_its_name_to_the_operating_system() -> None:
    seen: list[str] = []

    class Named(BackgroundThread):
        def _run(self) -> None:
            seen.append(comm_of_this_thread())

    thread = Named("kh-reflector-pods")
    thread.finite = True
    thread.start()
    thread.join(10)
    assert seen == ["watch-pods"]


@linux_only
def test_the_http_workers_pool_threads_are_named_kh_http_in_python_and_to_the_operating_system() -> None:
    worker = PollingWorker.__new__(PollingWorker)
    worker.cfg = type("Cfg", (), {"threads": 2})()
    pool = worker.get_thread_pool()
    try:
        name, comm = pool.submit(lambda: (threading.current_thread().name, comm_of_this_thread())).result(10)
    finally:
        pool.shutdown(wait=True)
    assert isinstance(pool, futures.ThreadPoolExecutor)
    assert name.startswith(POOL_THREADS + "_")
    assert comm == name.removeprefix("kh-")


@linux_only
def test_the_main_thread_keeps_the_process_name() -> None:
    before = comm_of_this_thread()
    assert name_this_thread("kh-anything") is False
    assert comm_of_this_thread() == before
