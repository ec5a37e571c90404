"""Whose run is this report, and may it be stored? The one question the report route asks.

`Admission.admit(credentials, end)` answers it with one of three kinds of answer, and the route only
acts on it (store or hold, answer, count, log, raise the Event):
  * Accepted: a known run (the caller: namespace, check, pod, run uuid, deadline; the token binding
    that goes with the write; whether a refusal when storing deserves a ReportRejected Event);
  * Refused: a 4xx with the stats reason, one line of text and the check to inform (its
    ReportRejected Event), or None when the refusal informs no one;
  * NotYet: 503 with its Retry-After, when the control plane cannot say yet.

Behind it, in this order (the order is what makes a fake report cost almost nothing):
  1. a bearer token is pre-screened and reviewed (tokens.py: a forged token is refused free, reviews
     are bounded, past the bound 503 with `Retry-After: 1`); one that cannot be reviewed right now is
     sorted like a report without one;
  2. a report whose token named no pod is sorted by what the caches know (triage.py): one naming no
     run they know gets 400 while they are current, or waits in a small pool while they may be behind;
  3. only then it takes one of the REPORT_SLOTS, holds it while the caller rules decide (caller.py,
     which alone finds the run's pod: finder.py) and while the route stores, and gives it back when the
     route leaves the `with` block.
ReportRejected Events only where they inform: a refusal of a report that carried a token, or came from
the address of one of the check's own checker pods (docs/interface.md#report-authenticity).

No HTTP here (the route reads the request and answers), no storing, no Events.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TypeAlias

from kuberhealthy.kube import Obj
from kuberhealthy.needs import WebNeeds
from kuberhealthy.records.checkpod import pod_check_index
from kuberhealthy.web.report import stats
from kuberhealthy.web.report.caller import Accepted, CallerRules, NotYet, Refused, Reviewed
from kuberhealthy.web.report.stats import ReportStats
from kuberhealthy.web.report.tokens import (
    ForeignPod,
    InvalidToken,
    PodIdentity,
    ReviewsBusy,
    TokenNotYetVerified,
    TokenVerifier,
)
from kuberhealthy.web.report.triage import Behind, Triage, Unknown

REPORT_SLOTS = 24  # reports of runs the caches know handled at once (others: triage.py's pool, no slot)
CALLER_WAIT = 0.8  # seconds a report waits for its pod to show up in the pod cache (then: one read)
RETRY_AFTER = "2"  # seconds, for 503 answers
RETRY_SOON = "1"  # seconds, for 503 answers while the caches may be behind (triage.py) or reviews are busy
IN_FLIGHT = "too many reports in flight; try again shortly"

Answer: TypeAlias = Accepted | Refused | NotYet

__all__ = ["CALLER_WAIT", "IN_FLIGHT", "REPORT_SLOTS", "Accepted", "Admission", "Answer", "Credentials", "NotYet",
           "Refused"]


@dataclass(frozen=True)
class Credentials:
    """What a report says about who sent it."""

    run_uuid: str  # the kh-run-uuid header ("" without)
    token: str | None  # the bearer token (None without)
    remote: str  # the peer address, as the server saw it
    source: str  # the peer address normalized (addresses.normalize_ip), else as given

    @property
    def who(self) -> str:
        """The sender, for log lines (never for Events: it is the caller's to choose)."""
        if self.token is not None:
            return f"a token from {self.remote}"
        return f"uuid header {self.run_uuid[:80]!r}" if self.run_uuid else f"address {self.remote}"


@dataclass(frozen=True)
class _Screened:
    """What the steps before the slot found: the token's review, and the pods a rescue read returned."""
    reviewed: Reviewed
    found: list[Obj] | None


class Admission:
    """Decides who sent a report and whether it may be stored (module docstring); one per web app.
    `tokens`, `triage` and `slots` are read at each report (tests put others in their place)."""

    def __init__(self, services: WebNeeds, report_stats: ReportStats, *, tokens: TokenVerifier, triage: Triage,
                 caller_wait: float = CALLER_WAIT, slots: int = REPORT_SLOTS) -> None:
        self._services = services
        self.tokens = tokens
        self.triage = triage
        self.slots = threading.BoundedSemaphore(slots)
        self._caller_wait = caller_wait
        self._report_stats = report_stats

    @contextmanager
    def admit(self, credentials: Credentials, end: float) -> Iterator[Answer]:
        """The answer for a report with `credentials`, decided before the monotonic `end`. An Accepted
        answer holds a report slot until the `with` block ends: store inside it."""
        screened = self._screen(credentials, end)
        if not isinstance(screened, _Screened):
            yield screened
            return
        if not self.slots.acquire(blocking=False):
            yield NotYet(IN_FLIGHT, RETRY_AFTER, level=None)
            return
        try:
            yield self._decide(credentials, screened, end)
        finally:
            self.slots.release()

    def _screen(self, credentials: Credentials, end: float) -> _Screened | Refused | NotYet:
        """Before a slot: the token's review (steps 1), then, unless it named a pod, the triage (2)."""
        reviewed: Reviewed = None
        if credentials.token is not None:
            try:
                reviewed = self.tokens.verify(credentials.token, end - time.monotonic())
            except InvalidToken as e:
                return Refused(401, stats.TOKEN_INVALID, str(e))
            except ForeignPod as e:
                return Refused(400, stats.TOKEN_OTHER_POD, str(e))
            except ReviewsBusy as e:
                return NotYet(str(e), RETRY_SOON, logging.INFO)
            except TokenNotYetVerified as e:  # the caller rules decide (with token-or-uuid: the uuid rules may)
                reviewed = e
        if isinstance(reviewed, PodIdentity):  # a token names its pod: else sorted by what the caches know
            return _Screened(reviewed, None)
        sort = self.triage.sort(credentials.run_uuid or None, credentials.remote, end)
        if isinstance(sort, Unknown) and reviewed is None:
            return Refused(400, stats.UNKNOWN_CALLER, sort.text)
        if isinstance(sort, Unknown):  # the token may still prove it once it can be reviewed: not final
            return NotYet(str(reviewed), RETRY_AFTER, logging.INFO)
        if isinstance(sort, Behind):
            return NotYet(sort.text, RETRY_SOON, logging.INFO)
        return _Screened(reviewed, sort.pods)

    def _decide(self, credentials: Credentials, screened: _Screened, end: float) -> Answer:
        """Holding a slot: the caller rules (3)."""
        # Rules over the services as they are now (their reads are looked up per report, as the caches are).
        rules = CallerRules(self._services, self._caller_wait, self._report_stats)
        verdict = rules.judge(credentials.run_uuid, credentials.remote, end, reviewed=screened.reviewed,
                                    found=screened.found)
        if isinstance(verdict, Accepted):
            return replace(verdict, informs=self._informs(verdict.caller.ident, credentials))
        if isinstance(verdict, Refused) and verdict.check is not None \
                and not self._informs(verdict.check, credentials):
            return replace(verdict, check=None)
        return verdict

    def _informs(self, check: str, credentials: Credentials) -> bool:
        """Whether a refusal for `check` deserves an Event: it carried a token (verified: only a valid
        token's refusal names a check) or came from the address of one of the check's checker pods."""
        if credentials.token is not None:
            return True
        return any(check in pod_check_index(p) for p in self._services.pods.by_index("ip", credentials.source))
