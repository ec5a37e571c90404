"""Gate: a runner factory for the controller's tests whose runs last until the test releases them."""
from __future__ import annotations

import threading
import uuid

from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.run.runner import Outcome, Phase, RunResult
from testbed.fakes.world import FakeServices


class Gate:
    """The controller's runner factory: each run records itself and lasts until release() (or its wake)."""

    def __init__(self, services: FakeServices) -> None:
        self.services = services
        self.started = 0
        self.stopped_runs = 0  # runs that ended because their stop event was set
        self._lock = threading.Lock()
        self._release = threading.Event()

    def __call__(self, _services: object, spec: CheckSpec, stop: threading.Event) -> Gate.Run:
        return Gate.Run(self, stop)

    class Run:
        def __init__(self, gate: Gate, stop: threading.Event) -> None:
            self.gate, self.stop = gate, stop

        def wake(self) -> None:
            self.gate._release.set()

        def run(self) -> RunResult:
            with self.gate._lock:
                self.gate.started += 1
            self.gate.services.activity.touch()
            self.gate._release.wait()
            with self.gate._lock:
                self.gate._release.clear()
                self.gate.stopped_runs += self.stop.is_set()
            self.gate.services.activity.touch()
            return RunResult(Outcome.REPORTED, str(uuid.uuid4()), Phase.DONE)

    def release(self) -> None:
        self._release.set()
