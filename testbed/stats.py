"""The one home of the figures benchmarks and the simulated kubelet report: percentiles and CPU seconds.

Before this module five hand-written percentiles disagreed on the rank they picked; here there is one,
the nearest-rank definition (the value at rank ceil(p/100 * n), 1-based), with None for no values, so a
report never shows a made-up number. `summary` is the {count, p50, p99, max} block the reports print.
`cpu_seconds` reads /proc/<pid>/stat: utime+stime, and optionally cutime+cstime (the reaped children),
so a worker that exited between two samples still counts; `thread_cpu` and `cpu_by_thread_group` split a
process's CPU by its threads' names (/proc/PID/task/TID/comm; the daemon names its threads, base/osnames.py),
and `slices_by_thread_group` counts how often each group's threads were put on a CPU (each time is a
wake-up or a preemption, and what it costs the kernel and the CPU caches is CPU no floor bench pays).
Part of the test bed's kit: it imports
nothing of `kuberhealthy`, and it measures nothing by itself.
"""
from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

CLK_TCK = os.sysconf("SC_CLK_TCK")


def percentile(values: Iterable[float], p: float) -> float | None:
    """The p-th percentile of `values` by nearest rank: the value at rank ceil(p/100 * n) (1-based; the
    smallest for p = 0); None when there are no values."""
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is not in [0, 100]")
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(p * len(ordered) / 100))
    return ordered[rank - 1]


def summary(values: Iterable[float]) -> dict[str, float | None]:
    """count, p50, p99 and max of `values` (each None but count when there are none)."""
    ordered = sorted(values)
    return {"count": len(ordered), "p50": percentile(ordered, 50), "p99": percentile(ordered, 99),
            "max": ordered[-1] if ordered else None}


def stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name (field 3 is index 0), or None when the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_seconds(pids: Iterable[int], *, reaped_children: bool = False) -> float:
    """CPU seconds (utime+stime) the processes `pids` spent so far, with `reaped_children` also those of
    their children they waited for (cutime+cstime). A process that is gone counts as 0."""
    ticks = 0
    for pid in pids:
        f = stat_fields(pid)
        if f is not None:
            ticks += int(f[11]) + int(f[12]) + (int(f[13]) + int(f[14]) if reaped_children else 0)
    return ticks / CLK_TCK


class ThreadSample(NamedTuple):
    """One thread at one moment, from /proc/PID/task/TID/schedstat."""

    group: str
    seconds: float  # its time on a CPU so far
    slices: int = 0  # the times the scheduler has put it on a CPU so far (schedstat's third field)


ThreadCpu = dict[tuple[int, int], ThreadSample]  # (pid, tid) -> the thread's sample
ENDED = "ended threads"  # a group of cpu_by_thread_group: CPU of threads gone before the second sample


def thread_group(comm: str, *, main: bool) -> str:
    """The group a thread's CPU is shown under: "main" for a process's main thread, "check" for the
    daemon's check threads (check-<ns>/<name>), else its name less a trailing _N or -N (http_3: http)."""
    if main:
        return "main"
    if comm.startswith("check-") and comm != "check-reaper":  # a check's: check-<ns>/<name>, cut at 15 bytes
        return "check"
    return re.sub(r"[_-][0-9]+$", "", comm)


def thread_cpu(pids: Iterable[int]) -> ThreadCpu:
    """Every live thread of the processes `pids`: its group, its CPU seconds so far (the scheduler's time on
    a CPU, in ns: /proc/PID/task/TID/stat's utime+stime are whole ticks, and rounding them thread by thread
    loses a tenth of a daemon's CPU across its ~270 threads) and its time slices so far."""
    out: ThreadCpu = {}
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            try:
                comm = Path(f"/proc/{pid}/task/{tid}/comm").read_text().rstrip("\n")
                on_cpu_ns, _waited_ns, slices = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[:3]
                sample = ThreadSample(thread_group(comm, main=tid == pid), int(on_cpu_ns) / 1e9, int(slices))
            except (OSError, ValueError):  # ended meanwhile (or a schedstat without its three fields)
                continue
            out[(pid, tid)] = sample
    return out


def cpu_by_thread_group(before: ThreadCpu, after: ThreadCpu, process_seconds: float) -> dict[str, float]:
    """CPU seconds per group between two samples: a thread born in between counts whole; what the
    processes spent (`process_seconds`, from their own stat) beyond the live threads' sum is ENDED."""
    groups: Counter[str] = Counter()
    for key, now in after.items():
        then = before.get(key)
        groups[now.group] += max(0.0, now.seconds - (then.seconds if then is not None else 0.0))
    ended = process_seconds - sum(groups.values())
    if ended > 0:
        groups[ENDED] += ended
    return dict(groups)


def slices_by_thread_group(before: ThreadCpu, after: ThreadCpu) -> dict[str, int]:
    """Time slices per group between two samples, of the threads alive at the second (one born in between
    counts whole; one that ended in between is not counted: the kernel keeps no count for it)."""
    groups: Counter[str] = Counter()
    for key, now in after.items():
        then = before.get(key)
        groups[now.group] += max(0, now.slices - (then.slices if then is not None else 0))
    return dict(groups)
