"""What the simulated kubelet remembers about each pod, for assertions and benchmarks.

Timestamps are `time.monotonic()` seconds (None until the step happened). Records outlive their pods:
a pod that vanishes is forgotten by the kubelet's driver but its record stays readable.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ReportResult:
    """One checker report as sent over HTTP, and what the receiver answered."""

    url: str
    source_ip: str
    body: bytes
    uuid_header: str | None  # the kh-run-uuid value sent, None when the header was left out
    status: int | None = None  # HTTP status; None when no answer was ever received
    response_body: str = ""
    error: str | None = None  # last transport error, when no answer was received
    attempts: int = 0
    at: float | None = None  # monotonic time of the answer (or of giving up)

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
    exited: float | None = None  # terminal status written
    terminating: float | None = None  # deletionTimestamp first seen
    deleted: float | None = None  # the pod vanished from the API
    phase: str = "Pending"
    waiting_reason: str = ""
    exit_code: int | None = None
    report: ReportResult | None = None
    stdout: str = ""  # kh-sim/exec only
    stderr: str = ""  # kh-sim/exec only
    errors: list[str] = field(default_factory=list)  # simulator-side problems (failed API writes, ...)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
