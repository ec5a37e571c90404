"""What a run ends with, as its worker, the metrics and the tests read it: the phase it was in, how it
ended (Outcome) and the RunResult. Plain values: the machine that produces them is runner.py."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Phase(enum.Enum):
    """A run's phases, in the order it goes through them (runner.py's diagram)."""

    CLAIM = "claim"
    VALIDATE = "validate"
    CLEAR = "clear"
    CREATE = "create"
    START = "start"
    REPORT = "report"
    EXIT = "exit"
    RECORD = "record"
    DONE = "done"


class Outcome(enum.Enum):
    REPORTED = "reported"  # the pod reported (OK or not) and the run was recorded
    FAILED = "failed"  # the run itself failed; an execution error was recorded
    SKIPPED = "skipped"  # not judged: the pod was removed by someone else, or the API was away
    STOPPED = "stopped"  # the check was stopped (shutdown, leadership lost, spec changed)


@dataclass
class RunResult:
    outcome: Outcome
    run_uuid: str
    phase: Phase
    errors: list[str] = field(default_factory=list)
    duration: float = 0.0  # seconds
    pod: str = ""
    node: str = ""
    phase_seconds: dict[str, float] = field(default_factory=dict)  # time spent in each phase
    skip_reason: str = ""
