"""`make attack` scenario "squat": checker pod names taken in advance (docs/interface.md#under-hostile-clients,
#name-labels-and-annotations).

A real daemon process leads (enableForceMaster) with one check that runs every INTERVAL; before its
first run, plain pods (no checker labels: anyone with pod create rights can make them) are created under
every `<check>-<unix seconds>` name for the next SQUAT_SECONDS, half of them a never-starting image and
half a checker that crashes at once (finished pods: the reaper, every 5 s here, must leave them alone
too: they carry no checker labels). The runs are observed for OBSERVE seconds from the khstate (each
finished run's OK and the pod its claim names) and the simulated kubelet (each report's answer); at the
end every squatter is read back (same uid, no deletionTimestamp) and the audit log is searched for any
delete or eviction of a squatter's name. Targets: every run OK, under a fallback name, its report
accepted; no squatter touched.
"""
from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

from bench.attack.bed import daemon_bed
from bench.attack.table import Row
from kuberhealthy.kube import KHCHECKS
from kuberhealthy.records.checkpod import pod_name
from kuberhealthy.records.khstate import FINISHED_UUID, RUN_POD
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khcheck, khs, pods_path
from testbed.cluster.objects import get_or_none
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

CHECK = "squatted"
INTERVAL = "10s"
OBSERVE = 60.0  # seconds of runs watched
SQUAT_SECONDS = 90  # names squatted ahead: the whole observation, and the first run's start
MIN_RUNS = 4  # fewer finished runs than this in OBSERVE is a miss (the check runs every 10 s)
IMAGES = ("busybox", "kh-sim/crash")  # never starts (ErrImagePull) / exits 1 at once (Failed)


def _squatter(name: str, image: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": image}], "restartPolicy": "Never"}}


def _runs(cluster: TestCluster, ns: str, stop: threading.Event, seen: dict[str, tuple[bool, str, str]]) -> None:
    """Polls the khstate: every finished run's (OK, errors, the pod its claim names), by uuid."""
    while not stop.wait(0.3):
        obj = get_or_none(cluster, khs(ns, CHECK)) or {}
        spec, notes = obj.get("spec") or {}, (obj.get("metadata") or {}).get("annotations") or {}
        run = str(spec.get("uuid") or "")
        if run and notes.get(FINISHED_UUID) == run and run not in seen:
            seen[run] = (spec.get("OK") is True, "; ".join(spec.get("Errors") or []), str(notes.get(RUN_POD) or ""))


def _touched(cluster: TestCluster, ns: str, squatters: dict[str, str]) -> list[str]:
    """Squatters (name -> uid) no longer there as created: gone, replaced, or marked for deletion."""
    hurt = []
    for name, uid in squatters.items():
        pod = get_or_none(cluster, pods_path(ns, name))
        if pod is None or pod["metadata"]["uid"] != uid or pod["metadata"].get("deletionTimestamp"):
            hurt.append(name)
    return hurt


def _removals(cluster: TestCluster, offset: int, ns: str, names: set[str]) -> list[str]:
    """Deletes and evictions of the squatters' names the API server saw (audit log), as `verb name`."""
    hits = []
    for event in cluster.audit_events_since(offset):
        ref = event.get("objectRef") or {}
        if ref.get("resource") != "pods" or ref.get("namespace") != ns or ref.get("name") not in names:
            continue
        if event.get("verb") == "delete" or (event.get("verb") == "create" and ref.get("subresource") == "eviction"):
            hits.append(f"{event.get('verb')} {ref.get('subresource') or ''} {ref.get('name')}".replace("  ", " "))
    return sorted(set(hits))


def _rows(runs: dict[str, tuple[bool, str, str]], sim: SimKubelet, squatters: dict[str, str], touched: list[str],
          removals: list[str], tracebacks: int) -> list[Row]:
    fallback = re.compile(rf"{CHECK}-\d+-[a-z0-9]{{5}}")
    ok_runs = [r for r, (ok, _, pod) in runs.items() if ok and fallback.fullmatch(pod)]
    names = [pod for _, _, pod in runs.values()]
    accepted = [k for k, r in sim.report_results.items() if k.split("/", 1)[1] in names and r.status == 200]
    failures = [f"{r}: {errors or 'OK'} (pod {pod or '?'})" for r, (_, errors, pod) in runs.items() if r not in ok_runs]
    runs_row = Row(
        "squat", f"plain pods under every {CHECK}-<unix s> for {SQUAT_SECONDS} s; check every {INTERVAL}",
        f"{len(ok_runs)}/{len(runs)} runs OK under a fallback name", None,
        f"{len(accepted)}/{len(runs)}", f"every run OK (>= {MIN_RUNS} in {OBSERVE:.0f} s), reports accepted",
        len(runs) >= MIN_RUNS and len(ok_runs) == len(runs) and len(accepted) == len(runs) and not tracebacks,
        [f"pod names used: {', '.join(names)}", f"runs not OK: {failures or 'none'}",
         f"tracebacks in the daemon's log: {tracebacks}"])
    squat_row = Row(
        "squat", f"{len(squatters)} squatters ({' / '.join(IMAGES)}), reaper every 5 s",
        f"{len(touched)} touched, {len(removals)} deletes/evictions", None, "-",
        "0 squatters touched (same uid, no deletionTimestamp), none deleted or evicted",
        not touched and not removals, [f"touched: {touched or 'none'}; removals: {removals or 'none'}"])
    return [runs_row, squat_row]


def run(cluster: TestCluster, workdir: Path) -> list[Row]:
    settings = {"checkReaperRunInterval": "5s", "maxCheckPodAge": "1s"}  # the reaper busy among the squatters
    stop = threading.Event()
    seen: dict[str, tuple[bool, str, str]] = {}
    with daemon_bed(cluster, workdir, "squat", settings=settings) as (ns, sim, daemon):
        watcher = threading.Thread(target=_runs, args=(cluster, ns, stop, seen), daemon=True)
        try:
            daemon.start().wait_serving()
            offset = cluster.audit_offset()
            now = int(time.time())
            squatters: dict[str, str] = {}
            for i in range(SQUAT_SECONDS):
                name = pod_name(CHECK, now + i)
                made = cluster.request("POST", pods_path(ns), _squatter(name, IMAGES[i % 2]))
                squatters[name] = made["metadata"]["uid"]
            print(f"   {len(squatters)} squatters: {min(squatters)} .. {max(squatters)}", flush=True)
            watcher.start()
            cluster.request("POST", KHCHECKS.path(ns), khcheck(CHECK, "kh-sim/ok", INTERVAL, timeout="30s"))
            wait_for(lambda: seen, 60, what="a first finished run")
            time.sleep(OBSERVE)
        finally:
            stop.set()
        watcher.join(5)
        rows = _rows(dict(seen), sim, squatters, _touched(cluster, ns, squatters),
                     _removals(cluster, offset, ns, set(squatters)), daemon.log().count("Traceback"))
    for r in rows:
        print(f"   {r.tried}: {r.answered}", flush=True)
        for n in r.notes:
            print(f"      {n}", flush=True)
    return rows
