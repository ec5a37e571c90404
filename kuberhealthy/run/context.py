"""One run's context: the facts a run is born with, built once by the Runner and read by its parts.

The Runner (the phases), its Guard (the trust rules) and its Recorder (the result) all work for the same
check, the same run uuid, the same start and deadline, on the same clocks, logging with the same
`<ns>/<check>` and run uuid; this object carries them so no part is handed them one by one. It also
says how a state write of this run is addressed (khstate.RunWrite), and which Kind (records/kinds.py)
the check is: where its object, its state and its pods live (a run never asks which kind that is). It
holds no state that changes during the run: what the run learns (its pod, its phase) lives in the Runner and its RunPod.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from kuberhealthy.kube import Bounds, Obj
from kuberhealthy.needs import RunNeeds
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.records.khstate import RunWrite
from kuberhealthy.records.kinds import Kind


@dataclass(frozen=True)
class RunContext:
    """What one run of one check is, for the run's whole life."""

    services: RunNeeds
    check: CheckSpec
    run_uuid: str
    stop: threading.Event  # the check's stop: shutdown, leadership lost, spec changed
    started: float  # monotonic: the run's one start
    wall_start: float  # unix seconds: the same start, for the run's history entry and its pod's deadline
    clock: Callable[[], float]
    wall: Callable[[], float]
    log: logging.LoggerAdapter[logging.Logger]  # carries the check's key and the run uuid

    @property
    def kind(self) -> Kind:
        """Where the check's object, state and pods live."""
        return self.services.kinds.of(self.check)

    @property
    def deadline(self) -> float:
        """Monotonic: the run's one deadline (start + the check's timeout)."""
        return self.started + self.check.timeout

    def state_write(self, timeout: float, until: float) -> RunWrite:
        """A state write of this run, by this replica: each request within `timeout`, none after `until`."""
        return RunWrite(self.services.resources, self.check.namespace, self.check.name, self.run_uuid,
                        self.services.config.pod_name, self.check.workload, Bounds(timeout, until, self.clock),
                        self.kind.store)

    def cached_state(self) -> Obj | None:
        """The check's state as the watch cache has it (a hint for a write, or what a wait looks at)."""
        return self.kind.states.get(self.check.namespace, self.check.name)
