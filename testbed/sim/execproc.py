"""kh-sim/exec: the checker container's command + args run as a local subprocess (README.md, "kh-sim/exec").

The process gets a session of its own, so the pod's driver can kill its whole process group when the
pod is deleted or the kubelet stops; `hold` hands the process to the driver as soon as it started. What
it printed goes to the pod's record (stdout, stderr) and log once it ended. No image entrypoint exists.
"""
from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping

from testbed.sim.records import PodRecord

NO_COMMAND = 128  # no command/args on the checker container
CANNOT_START = 127  # the command cannot be started (as a shell says "command not found")


def run(argv: list[str], env: Mapping[str, str], record: PodRecord,
        hold: Callable[[subprocess.Popen[bytes]], None]) -> int:
    """Run `argv` to its end; its exit code (killed by signal N: 128+N)."""
    if not argv:
        record.stderr = "kh-sim/exec needs command/args on the checker container"
        return NO_COMMAND
    try:
        proc = subprocess.Popen(argv, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as e:
        record.stderr = f"cannot start {argv[0]!r}: {e}"
        return CANNOT_START
    hold(proc)
    out, err = proc.communicate()
    record.stdout = out.decode("utf-8", errors="replace")
    record.stderr = err.decode("utf-8", errors="replace")
    for text in (record.stdout, record.stderr):  # printed all along; readable once it ended
        if text:
            record.log.write(text[:-1] if text.endswith("\n") else text)
    return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
