"""How long the simulated kubelet takes where a real kubelet takes time, and its graceful deletion.

By default (FAST) the simulated kubelet does everything at once: a pod is Running as soon as its
status is written, and a pod that gets a deletionTimestamp is deleted with grace 0 at once, so it
vanishes. Tests stay fast, but they never see what a run meets on a real node (measured on kubelet
1.20, testbed/README.md): created → Running takes about 1 s, the pod IP comes on a later status sync
than the first Pending one, and a deleted pod's container is stopped (SIGTERM: exit 143), the pod is
Failed while still Terminating, and the object disappears only 8.8-41.8 s after the delete.

`SimKubelet(..., timings=REAL)` takes a real kubelet's time; `timings=Timings(...)` sets each delay.
The driver (driver.py) applies the start-up delays; the graceful deletion is terminate.py's; the pace
at which pods may start (start_rate, off by default) is startgate.py's.
"""
from __future__ import annotations

from dataclasses import dataclass

# Every regular container terminated → the kubelet stops the pod's native sidecars (Kubernetes 1.28+):
# on a real kubelet the next pod sync, then SIGTERM; the pod stays Running, its sidecar running, meanwhile.
SIDECAR_STOP_AFTER = 0.75


@dataclass(frozen=True)
class Timings:
    """Seconds the simulated kubelet takes for what a real one takes time for (0: at once)."""

    running_after: float = 0.0  # created → Running (on top of the pod's own SIM_PENDING_DELAY)
    ip_after: float = 0.0  # the first Pending status has no pod IP; it comes on a sync this much later
    graceful: bool = False  # deletion: stop the container (exit 143, Failed while Terminating), then remove
    stop_after: float = 0.0  # deletionTimestamp seen → container stopped (status written), when graceful
    remove_after: float = 0.0  # deletionTimestamp seen → object removed (grace-0 delete) of a pod not finished
    remove_finished_after: float = 0.0  # the same for a pod that had finished (nothing to stop)
    # checker containers terminated → native sidecars stopped (in both modes: a run must see the pod
    # Running with only its sidecar left, as on a real kubelet)
    sidecar_stop_after: float = SIDECAR_STOP_AFTER
    # Pods per second that may go from ContainerCreating to Running, in arrival order (startgate.py: a
    # saturated node, for benchmarks); 0: a gate that stays open until its rate is set; None: no gate.
    start_rate: float | None = None


FAST = Timings()
# A real kubelet's, rounded (kubelet 1.20 on the test bed's real node): see testbed/README.md.
REAL = Timings(running_after=1.0, ip_after=0.5, graceful=True, stop_after=0.5, remove_after=10.0,
               remove_finished_after=1.0)
