"""Threads carry a short form of their names to the operating system, so `top -H`, `ps -L` and
/proc/PID/task/*/comm tell a check thread from a watch or an HTTP pool thread (CPython leaves every
thread named after the process).

The kernel keeps 15 bytes of a thread's name, so the daemon's prefix "kh-" is dropped and a cache's
"reflector-" becomes "watch-": kh-reflector-pods is "watch-pods", kh-check-<ns>/<name> is
"check-<ns>/<na", a pool thread kh-http_3 is "http_3". Linux only (prctl PR_SET_NAME on the calling
thread); elsewhere, or where libc cannot be loaded, nothing is set. Never called on the main thread:
its name is the process's, which `ps`, `pgrep` and probes look for.
"""
from __future__ import annotations

import ctypes
import logging
import sys
import threading

logger = logging.getLogger(__name__)

COMM_BYTES = 15  # TASK_COMM_LEN - 1: what the kernel keeps of a name
PR_SET_NAME = 15  # prctl option (linux/prctl.h)
DROPPED_PREFIX = "kh-"
RENAMED = (("reflector-", "watch-"),)


def os_name(name: str) -> bytes:
    """The name the operating system gets for a thread named `name` (at most COMM_BYTES bytes)."""
    short = name.removeprefix(DROPPED_PREFIX)
    for old, new in RENAMED:
        if short.startswith(old):
            short = new + short.removeprefix(old)
    return short.encode("utf-8", "replace")[:COMM_BYTES].decode("utf-8", "ignore").encode("utf-8")


def _load_prctl() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]  # ctypes' function type is private
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols, libc's among them (no ldconfig)
        prctl = libc.prctl
    except (OSError, AttributeError) as e:
        logger.debug("Thread names stay with Python: libc could not be loaded (%s)", e)
        return None
    return prctl


_PRCTL = _load_prctl()


def name_this_thread(name: str | None = None) -> bool:
    """Give the calling thread (not the main thread) the OS name of `name`, or of its Python name;
    True when the operating system took it."""
    if _PRCTL is None or threading.current_thread() is threading.main_thread():
        return False
    wanted = os_name(name if name is not None else threading.current_thread().name)
    return bool(_PRCTL(PR_SET_NAME, ctypes.c_char_p(wanted), 0, 0, 0) == 0)
