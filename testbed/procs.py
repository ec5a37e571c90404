"""Ending the test bed's child processes. Each runs in a session of its own (start_new_session=True),
so a signal to its process group reaches whatever it started too (gunicorn's worker, etcd's helpers)."""
from __future__ import annotations

import os
import signal
import subprocess
from typing import Any

KILL_WAIT = 10.0  # seconds to wait for a SIGKILLed group


def end_group(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, grace: float = 10.0) -> int:
    """Send `sig` to the process group, give it `grace` seconds, then SIGKILL it; the exit status.
    A process that has already exited (or whose group is gone) is fine."""
    if proc.poll() is not None:
        return proc.returncode
    _signal_group(proc, sig)
    try:
        return proc.wait(grace)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        return proc.wait(KILL_WAIT)


def _signal_group(proc: subprocess.Popen[Any], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
