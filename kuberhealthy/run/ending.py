"""How a run ends when it does not end as planned: settled on fresh reads, and its pod removed.

A run's waits read the watch caches. When the deadline passes, or the caches could not be trusted
during the run, settled() decides on what the API server says now: the pod reported and exited (the
run goes on to RECORD); it was deleted by someone else before it ended on its own (a node drain, an
eviction, `kubectl delete`: the run is skipped, guard.removed); or it is where one of v2's reasons
says (still Pending, running without a report, ended without one), and the run fails with that reason
and, for a pod that ended, why (podstate.why_ended: an OOMKill, a failed init container). A run that
ends early (stopped, skipped, failed) removes the pod it created, by its uid (evict_run_pods).

Apart from runner.py because this is the part of a run that grew with every way a pod can end; the
phases and their order stay there. This module writes no result (finish.py) and sets no phase: it
says which phase the run ended in, and the Runner records it.
"""
from __future__ import annotations

from dataclasses import dataclass

from kuberhealthy.base.errors import ApiError, is_transient
from kuberhealthy.kube import PODS
from kuberhealthy.kube.resources import FOREIGN
from kuberhealthy.run.context import RunContext
from kuberhealthy.run.guard import CONFIRM_TIMEOUT, Failed, Guard, Skipped, removed
from kuberhealthy.run.podstate import (
    ERR_EXIT,
    ERR_REPORT,
    ERR_RUNNING,
    ERR_START,
    RunPod,
    container_started,
    pending,
    start_failure,
    uid_of,
    why_ended,
)
from kuberhealthy.run.result import Phase

SIDECAR_GRACE_SECONDS = 2  # a pod whose checker is over is deleted with this grace: only sidecars are left in it


@dataclass(frozen=True)
class Ending:
    """How settled() found the run over: the exception to raise, in `phase` (None: the phase it is in)."""

    error: Failed | Skipped
    phase: Phase | None = None


def report_state(guard: Guard, pod: RunPod) -> str | None:
    """REPORT's wait: "reported", "gone", "deleted" (someone else set its deletionTimestamp), "ended"
    (without a report), or None."""
    if guard.reported():
        return "reported"
    current = pod.current()
    if current is None:
        return "gone"
    pod.see(current)
    if pod.deleted(current):
        return "deleted"
    return "ended" if pod.over(current) else None


def reported_and_exited(guard: Guard, pod: RunPod) -> bool:
    """The settling wait: reported, and the pod finished on its own (not deleted by someone else)."""
    if not guard.reported() or (current := pod.current()) is None:
        return False
    pod.see(current)
    if pod.disruption:  # reported first: the report stands, whatever becomes of the pod
        return True
    return pod.over(current) and not pod.deleted(current)


def settled(guard: Guard, pod: RunPod) -> Ending | None:
    """Decide on fresh reads: None when the pod reported and exited (the run goes on to RECORD), else
    the run's end: v2's reason for where the pod is (a failure, or a skip if the control plane was
    impaired during the run), or removed() for a pod someone else deleted. Raises Skipped when the
    API server cannot be read."""
    now = guard.read_pod(pod.name, pod.uid)
    if now is not None:
        pod.see(now)
    # A pod none of whose containers has run cannot have reported: no read of the khstate for it.
    reported = guard.reported() or ((now is None or container_started(now)) and guard.report_confirmed())
    if reported and pod.disruption:
        guard.log.info("Checker pod reported, then the cluster disrupted it (%s): the report stands", pod.disruption)
        return None
    if pod.deleted(now) or (now is None and not reported):
        return Ending(removed("exited" if reported else "reported"))
    if reported:
        if now is not None and not pod.over(now):
            return Ending(guard.fail(ERR_EXIT), Phase.EXIT)
        guard.log.info("Checker pod reported and exited (confirmed by reads)")
        return None
    assert now is not None
    if pending(now):
        failure = start_failure(now)
        return Ending(guard.fail(ERR_START + failure if failure else ERR_RUNNING), Phase.START)
    return Ending(guard.fail(ERR_REPORT, why_ended(now, pod.sidecars_in(now)) if pod.over(now) else ""),
                  Phase.REPORT)


def end_sidecar_pod(ctx: RunContext, pod: RunPod) -> None:
    """The run's checker is over but its pod lives on, kept alive by sidecars that never exit (a mesh's
    proxy): delete it (its uid; a short grace), as it would have ended by itself without them. An API
    error is logged: the run is complete either way, and the next run's CLEAR removes what is left."""
    running = pod.only_sidecars()
    uid = pod.uid or uid_of(pod.current())
    if not running or not uid:
        return
    ctx.log.info("The checker is over; ending pod %s, where only sidecars run (%s)", pod.name, ", ".join(running))
    pod.told_to_go.add(pod.name)
    try:
        ctx.services.resources.delete(PODS, ctx.check.namespace, pod.name, grace_seconds=SIDECAR_GRACE_SECONDS,
                                      uid=uid, timeout=CONFIRM_TIMEOUT)
    except ApiError as e:
        ctx.log.warning("Could not end checker pod %s: %s", pod.name, e)


def evict_run_pods(ctx: RunContext, pod: RunPod) -> None:
    """Remove the pod this run created, by its uid (RunPod.evictable); one whose checker is over and only
    sidecars keep alive is ended as end_sidecar_pod does. An API error here is logged; the reaper or the
    next run's CLEAR retries."""
    if pod.only_sidecars():
        end_sidecar_pod(ctx, pod)
        return
    for name, uid in pod.evictable():
        pod.told_to_go.add(name)
        try:
            how = ctx.services.resources.evict_pod(ctx.check.namespace, name, uid=uid, timeout=CONFIRM_TIMEOUT)
            if how == FOREIGN:
                ctx.log.warning("Left pod %s alone: it is not the pod this run created (another uid)", name)
            else:
                ctx.log.info("Removed checker pod %s (%s)", name, how)
        except ApiError as e:
            ctx.log.warning("Could not remove checker pod %s: %s", name, e)
            if is_transient(e):
                break  # the API is away; the next run's CLEAR removes what is left
