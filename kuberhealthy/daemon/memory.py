"""How the daemon's memory is kept: the cyclic garbage collector and glibc's malloc arenas, set for a
process whose heap is mostly long-lived objects shared by a thousand threads.

Garbage collector. The worker holds the imported libraries (the official client alone brings a thousand
model classes) and the watch caches (a khstate of a month-old check is some thousands of objects), and
every watch event and request makes short-lived ones. With the interpreter's defaults (700, 10, 10) a
young collection runs every 700 allocations and a full one walks every long-lived object again and
again: measured over the web app's caches of 1,000 checks (250 of them changing between /metrics
scrapes), a quarter of the wall time went to collections, a full one taking about a quarter of a second
of the GIL. So, in the worker before the daemon starts: what start-up made is collected once and frozen
(moved where collections never look again; it is freed by reference counting as ever), and collections
run ten times less often. Garbage in cycles still goes at the next middle-generation collection, about
every 140,000 allocations.

Sharing with the arbiter. The worker is forked from gunicorn's arbiter, which has imported the same
libraries; their pages stay shared until written. A collection writes into the header of every object it
walks, so the worker's first collection used to copy every page of the arbiter's objects (about 24 MB of
the arbiter's 64 MB were private again soon after the fork). The arbiter freezes its objects just before
forking (`freeze_before_fork`), so the worker's collections never walk them.

Arenas. glibc gives each thread that allocates its own arena, up to eight per core, and frees memory
back to an arena, not to the system. With a thread per check, every arena is in use and each keeps the
high-water mark of what its threads once held (measured at 1,000 checks: 16 arenas holding about
110 MB). The worker's threads allocate holding the GIL, one at a time, so several arenas buy no
parallelism: the worker keeps ARENAS of them (the MALLOC_ARENA_MAX environment variable still wins when
set). Other C libraries are left as they are.
"""
from __future__ import annotations

import ctypes
import gc
import logging
import os
import platform

logger = logging.getLogger(__name__)

THRESHOLDS = (7000, 20, 20)  # allocations before a young collection; young ones before a middle one; ...
ARENAS = 2  # glibc malloc arenas in the worker
M_ARENA_MAX = -8  # glibc's mallopt parameter number (malloc.h)


def freeze_before_fork() -> None:
    """In the arbiter, just before it forks a worker: move its objects out of the collector's sight, so
    the worker's collections leave their pages shared."""
    gc.freeze()


def settle() -> None:
    """In the worker, before its threads start: collect and freeze what start-up made, set the
    thresholds, and limit the malloc arenas."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    arenas = limit_arenas()
    logger.debug("Memory: %d start-up objects frozen, collector thresholds %s, malloc arenas %s",
                 gc.get_freeze_count(), THRESHOLDS, arenas or "as the C library sets them")


def limit_arenas(arenas: int = ARENAS) -> int | None:
    """Ask glibc for at most `arenas` malloc arenas; the limit set, None when none was (not glibc, or
    MALLOC_ARENA_MAX given)."""
    if os.environ.get("MALLOC_ARENA_MAX") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    return arenas if mallopt(ctypes.c_int(M_ARENA_MAX), ctypes.c_int(arenas)) == 1 else None
