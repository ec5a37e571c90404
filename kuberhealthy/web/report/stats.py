"""Counters of the report endpoint, exported beside the v2 families.

  kuberhealthy_report_requests_total{code}             every answer of POST /externalCheckStatus and /check
  kuberhealthy_report_rejected_total{reason}           refused reports, by why (REASONS)
  kuberhealthy_report_source_mismatch_total{action}    header-path reports from an address that is
                                                       neither the pod's nor its node's: accepted
                                                       (reportSourceCheck: warn) or refused (enforce)
Process-local, per replica (each replica answers its own reports).
"""
from __future__ import annotations

from prometheus_client import Counter
from prometheus_client.registry import Collector

TOO_LARGE = "too-large"
BAD_BODY = "bad-body"
UNKNOWN_CALLER = "unknown-caller"
NOT_RUN_POD = "not-run-pod"  # a look-alike: same label/env/address, not the pod the run created
RUN_OVER = "run-over"  # the run is over, or its pod has finished
STALE = "stale-run"  # not the khstate's current run
SOURCE = "source"  # reportSourceCheck: enforce
TOKEN_INVALID = "token-invalid"  # 401
TOKEN_REQUIRED = "token-required"  # 401, reportAuth: token
TOKEN_OTHER_POD = "token-other-pod"  # a valid token, of a pod that is not the run's
RATE_LIMITED = "rate-limited"  # 429
NOT_JSON = "not-json"  # 415 (POST /check only)
REASONS = (TOO_LARGE, BAD_BODY, UNKNOWN_CALLER, NOT_RUN_POD, RUN_OVER, STALE, SOURCE, TOKEN_INVALID, TOKEN_REQUIRED,
           TOKEN_OTHER_POD, RATE_LIMITED, NOT_JSON)
CODES = ("200", "400", "401", "410", "413", "415", "429", "500", "503")


class ReportStats:
    def __init__(self) -> None:
        self.requests = Counter("kuberhealthy_report_requests", "Answers to check reports, by HTTP status",
                                ["code"], registry=None)
        self.rejected = Counter("kuberhealthy_report_rejected", "Check reports refused, by reason", ["reason"],
                                registry=None)
        self.source_mismatch = Counter("kuberhealthy_report_source_mismatch",
                                       "Header-path reports from neither the pod's nor its node's address",
                                       ["action"], registry=None)
        for code in CODES:
            self.requests.labels(code)
        for reason in REASONS:
            self.rejected.labels(reason)
        for action in ("accepted", "refused"):
            self.source_mismatch.labels(action)

    def answered(self, code: int) -> None:
        self.requests.labels(str(code)).inc()

    def reject(self, reason: str) -> None:
        self.rejected.labels(reason).inc()

    def count(self, counter: Counter, label: str) -> float:
        return float(counter.labels(label)._value.get())

    def collectors(self) -> list[Collector]:
        return [self.requests, self.rejected, self.source_mismatch]
