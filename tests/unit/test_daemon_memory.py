"""The daemon's memory settings (daemon/memory.py): the collector in the arbiter and the worker, and glibc's
malloc arenas in the worker."""
import gc
import os
import platform
import re
import subprocess
import sys

import pytest

from kuberhealthy.base.config import from_mapping
from kuberhealthy.daemon import memory
from kuberhealthy.daemon.server import KuberhealthyApplication


def test_the_worker_freezes_what_start_up_made_and_collects_less_often() -> None:
    before = gc.get_threshold()
    try:
        memory.settle()
        assert gc.get_threshold() == memory.THRESHOLDS
        assert gc.get_freeze_count() > 10_000  # the imported libraries at least
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_the_arbiter_freezes_its_objects_before_each_fork_so_the_worker_leaves_their_pages_shared() -> None:
    app = KuberhealthyApplication(from_mapping({}, {"POD_NAME": "kh-0"}), None, None)
    before = gc.get_freeze_count()
    try:
        app.cfg.pre_fork(None, None)
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()


ARENA_PROBE = """
import ctypes, sys, threading
from kuberhealthy.daemon import memory
if sys.argv[1] == "limit":
    assert memory.limit_arenas(2) == 2
barrier = threading.Barrier(8)
def allocate():
    kept = [bytes(4000) for _ in range(200)]  # past pymalloc's 512 bytes: from this thread's arena
    barrier.wait()
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
ctypes.CDLL(None).malloc_stats()  # one "Arena N:" block per arena, on stderr
"""


def _arenas(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    done = subprocess.run([sys.executable, "-c", ARENA_PROBE, mode], capture_output=True, text=True, env=env,
                          timeout=60, check=True)
    return len(re.findall(r"^Arena \d+:", done.stderr, re.M))


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc arenas are glibc's")
def test_eight_threads_that_allocate_share_two_malloc_arenas_once_the_worker_limits_them() -> None:
    assert _arenas("free") > 2  # the probe can tell: unlimited, its threads take arenas of their own
    assert _arenas("limit") == 2


def test_the_arenas_are_left_to_the_environment_when_malloc_arena_max_is_set(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert memory.limit_arenas() is None
