"""What the simulated kubelet remembers about each pod, for assertions and benchmarks.

Timestamps are `time.monotonic()` seconds (None until the step happened). Records outlive their pods:
a pod that vanishes is forgotten by the kubelet's driver but its record stays readable.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from testbed.sim.logs import PodLog


class Outcome(str, enum.Enum):
    """How a report ended (ReportResult.outcome)."""

    ACCEPTED = "accepted"  # answered 2xx
    REJECTED = "rejected"  # a final answer: 1xx/3xx/4xx other than 429; not retried
    DEADLINE = "deadline"  # transport errors, 429 or 5xx until the run's deadline; given up
    CANCELLED = "cancelled"  # the pod was deleted (or the kubelet stopped) first
    REFUSED = "refused"  # the URL cannot be used (not http, not loopback); nothing was sent


@dataclass
class ReportResult:
    """One checker report as sent over HTTP (with retries), and what the receiver answered."""

    url: str
    source_ip: str
    body: bytes
    uuid_header: str | None  # the kh-run-uuid value sent, None when the header was left out
    bearer: bool = False  # an `Authorization: Bearer` token was sent (SIM_TOKEN)
    status: int | None = None  # the last HTTP status answered; None when no attempt got an answer
    response_body: str = ""  # the body of that last answer
    error: str | None = None  # the last attempt's transport error (None when it got an answer)
    attempts: int = 0  # HTTP attempts made
    at: float | None = None  # monotonic time of the final answer (or of giving up / cancellation)
    statuses: list[int] = field(default_factory=list)  # every HTTP status answered, in order
    outcome: Outcome | None = None  # how it ended; None while it is under way

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status <= 299


@dataclass
class PodRecord:
    """The life of one pod as the simulated kubelet drove it."""

    namespace: str
    name: str
    uid: str
    image: str
    behaviour: str
    node: str = ""
    pod_ip: str = ""
    host_network: bool = False
    seen: float | None = None  # first watch/list event
    bound: float | None = None  # binding accepted
    running: float | None = None  # status Running written
    reported: float | None = None  # report answered (or given up)
    checkers_exited: float | None = None  # the checker containers' terminated status written (== exited
    # for a pod without sidecars; a pod with a kh-sim/sidecar container stays Running after it)
    exited: float | None = None  # terminal status written (phase Succeeded or Failed)
    disrupted: float | None = None  # the disruption (SIM_DISRUPT) written: its condition, or the kubelet's eviction
    terminating: float | None = None  # deletionTimestamp first seen
    deleted: float | None = None  # the pod vanished from the API
    phase: str = "Pending"
    waiting_reason: str = ""
    exit_code: int | None = None  # the checker containers' (143 when stopped by a deletion or a kubelet)
    disruption: str = ""  # the SIM_DISRUPT mode that disrupted the pod ("" none)
    report: ReportResult | None = None
    stdout: str = ""  # kh-sim/exec only
    stderr: str = ""  # kh-sim/exec only
    errors: list[str] = field(default_factory=list)  # simulator-side problems (failed API writes, ...)
    api_retries: int = 0  # API calls for this pod that failed transiently and were retried (not errors)
    token_files: dict[str, str] = field(default_factory=dict)  # projected token: container path -> our file
    log: PodLog = field(default_factory=PodLog)  # what the checker printed (logs.py); stays after the pod

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
