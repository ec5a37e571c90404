"""What the simulated kubelet knows of one pod's containers, and the status patches it writes from it.

One PodModel per pod, shared by the pod's driver (driver.py), its graceful deletion (terminate.py) and
its disruption (disrupt.py): each step changes the containers' states and returns the whole status
document (podstatus.py) to merge-patch, so a later write never drops what an earlier one added (the
DisruptionTarget condition, a kubelet eviction's reason). Thread-safe; it makes no API calls.

Init containers that are not sidecars are not run: they show `terminated` exit 0 (Completed) from the
moment the pod runs. Native sidecars (init containers with image kh-sim/sidecar) run beside the checker.
"""
from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from testbed.sim import podstatus
from testbed.sim.podstatus import Addresses, Layout, Slot, State

EXIT_SIGTERM = 143  # 128 + SIGTERM: a container stopped by its pod's deletion or a kubelet's kill
PENDING_WITH_INIT = "PodInitializing"  # every container's reason while a pod with init containers is created


class PodModel:
    """One pod's container states, its conditions added by others and a kubelet eviction's fields."""

    def __init__(self, pod: Mapping[str, Any], host_ip: str) -> None:
        self.layout: Layout = podstatus.layout(pod)
        self._lock = threading.Lock()
        self._states: dict[str, State] = {}
        self._where = Addresses(None, host_ip, podstatus.now_rfc3339())
        self._started_at = ""
        self._extra: list[dict[str, Any]] = []  # conditions written by others (DisruptionTarget)
        self._overrides: dict[str, str] = {}  # phase, reason, message a kubelet eviction sets
        self.checker_exit: int | None = None  # the checker containers' exit code, once they exited

    # --- what the driver asks -----------------------------------------------------------------------

    @property
    def phase(self) -> str:
        with self._lock:
            return self._overrides.get("phase") or podstatus.phase(self.layout, self._states)

    @property
    def started(self) -> bool:
        """The containers started (Running was built)."""
        with self._lock:
            return bool(self._started_at)

    @property
    def running(self) -> list[str]:
        """The containers (init ones included) running now."""
        with self._lock:
            return [n for n, s in self._states.items() if "running" in s]

    def _patch(self) -> dict[str, Any]:
        return podstatus.document(self.layout, self._states, self._where, since=podstatus.now_rfc3339(),
                                  extra_conditions=self._extra, overrides=self._overrides)

    # --- steps: each changes the states and returns the whole status to write -----------------------

    def pending(self, pod_ip: str | None, reason: str, message: str = "") -> dict[str, Any]:
        """Pending: `reason` (ContainerCreating; PodInitializing for every container of a pod with init
        containers, as a kubelet says) on every container; `pod_ip` None: not known yet."""
        with self._lock:
            self._where = Addresses(pod_ip, self._where.host_ip, self._where.start_time)
            state = podstatus.waiting_state(PENDING_WITH_INIT if self.layout.init else reason, message)
            for s in [*self.layout.init, *self.layout.containers]:
                self._states[s.name] = state
            return self._patch()

    def _start(self, started_at: str) -> None:
        self._started_at = started_at
        for s in self.layout.init:  # regular init containers are not run: completed at once
            self._states[s.name] = (podstatus.running_state(started_at) if s.sidecar
                                    else podstatus.terminated_state(0, started_at))
        for s in self.layout.sidecars:
            self._states[s.name] = podstatus.running_state(started_at)

    def run(self, started_at: str) -> dict[str, Any]:
        """Running: every container (and native sidecar) running, regular init containers completed."""
        with self._lock:
            self._start(started_at)
            for s in self.layout.checkers:
                self._states[s.name] = podstatus.running_state(started_at)
            return self._patch()

    def pull_failure(self, started_at: str, reason: str, message: str) -> dict[str, Any]:
        """The checker's image cannot be pulled: its containers wait with `reason`; init containers and
        sidecars (whose images are there) run."""
        with self._lock:
            self._start(started_at)
            for s in self.layout.checkers:
                self._states[s.name] = podstatus.waiting_state(reason, message)
            return self._patch()

    def checkers_exit(self, exit_code: int, reason: str | None = None) -> dict[str, Any]:
        """The checker exited: its containers terminated with `exit_code`; sidecars run on."""
        with self._lock:
            self.checker_exit = exit_code
            for s in self.layout.checkers:
                self._states[s.name] = podstatus.terminated_state(exit_code, self._started_at, reason)
            return self._patch()

    def stop_natives(self) -> dict[str, Any]:
        """The kubelet stops the native sidecars (every regular container has terminated)."""
        with self._lock:
            self._stop(self.layout.natives, EXIT_SIGTERM)
            return self._patch()

    def stop_running(self, exit_code: int = EXIT_SIGTERM) -> dict[str, Any]:
        """Every running container stopped (a deletion's or a kubelet's SIGTERM): terminated with
        `exit_code`, a sidecar with its own SIM_SIDECAR_EXIT when it has one."""
        with self._lock:
            if any("running" in (self._states.get(s.name) or {}) for s in self.layout.checkers):
                self.checker_exit = exit_code
            self._stop([*self.layout.init, *self.layout.containers], exit_code)
            return self._patch()

    def _stop(self, slots: Sequence[Slot], exit_code: int) -> None:
        for s in slots:
            if "running" in (self._states.get(s.name) or {}):
                code = s.exit if s.sidecar and s.exit is not None else exit_code
                self._states[s.name] = podstatus.terminated_state(code, self._started_at)

    def add_condition(self, condition: Mapping[str, Any]) -> dict[str, Any]:
        """A condition someone else writes (DisruptionTarget); kept in every later status."""
        with self._lock:
            self._extra = [c for c in self._extra if c.get("type") != condition.get("type")] + [dict(condition)]
            return self._patch()

    def fail(self, reason: str, message: str) -> dict[str, Any]:
        """A kubelet's own eviction: phase Failed, status.reason and status.message, containers as they are."""
        with self._lock:
            self._overrides = {"phase": "Failed", "reason": reason, "message": message}
            return self._patch()
