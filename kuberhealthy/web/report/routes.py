"""`POST /externalCheckStatus` (v2's) and `POST /check` (v3's): a checker pod reports its run's result.

Both endpoints take a report of a run of either kind of check, judged by the same rules; they differ
only where v3 answers differently (`Dialect`): `/check` refuses a body that is not
`application/json` (415) and answers 410 to a report of a run that is over from that run's own pod,
where `/externalCheckStatus` answers 400 as v2 did. Any other method than POST is 405 on both.

Order of work, one way: the per-source rate limit (429), read the body (bounded: 413 past MAX_BODY),
decode and check it (body.py), ask the admission once whose run this is and whether it may be stored
(admission.py: Accepted, Refused or NotYet; the token review, the triage, the report slot and the
caller rules are behind it), then store through khstate.record_report, which refuses (StaleReport)
unless the pod's run UUID is still the current one, and answer. Every refusal is a 4xx with one line
of plain text and writes nothing; 500 means only that storing failed for a lasting reason.

A refusal the admission says informs (one that names the check to inform) raises a ReportRejected
Event on the check. The message is ours (the reason in words), never caller-chosen (no source
address, no uuid): the recorder damps it to one per check and reason per minute (outputs/events.py).
Every other refusal only counts in kuberhealthy_report_requests_total and
kuberhealthy_report_rejected_total.

The control plane being away is not the checker's fault, so it never costs a report:
  * the caller cannot be confirmed yet (API unreachable, pod cache not current) → 503 + Retry-After;
  * the khstate write fails because the API is away or overloaded → the report is held in memory
    (heldreports.py) and written as soon as the API answers, within the run's deadline; the checker
    gets 200, so it does not spend its deadline retrying;
  * no request holds a server thread longer than REQUEST_BUDGET seconds; when too many reports are
    in flight at once (an outage: admission.py's report slots), the rest get 503 at once so threads
    stay free for `/` and probes.
One INFO line per report (request id, caller, outcome); bodies are logged only at DEBUG.
"""
from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from dataclasses import dataclass

from flask import Blueprint, Response, request

from kuberhealthy.base.errors import ApiError, KuberhealthyError, is_transient
from kuberhealthy.base.times import utcnow
from kuberhealthy.checkclient import RUN_UUID_HEADER
from kuberhealthy.kube import Bounds
from kuberhealthy.needs import WebNeeds
from kuberhealthy.outputs.events import ObjectRef
from kuberhealthy.outputs.heldreports import Held
from kuberhealthy.records.khstate import RunFinished, RunWrite, StaleReport, TokenBound, record_report
from kuberhealthy.web.addresses import normalize_ip
from kuberhealthy.web.answers import plain
from kuberhealthy.web.parts import part
from kuberhealthy.web.ratelimit import ConfiguredLimiter, RateLimiter
from kuberhealthy.web.report import stats
from kuberhealthy.web.report.admission import Accepted, Admission, Credentials, NotYet, Refused
from kuberhealthy.web.report.body import MAX_BODY, BadReport, Report, parse_report
from kuberhealthy.web.report.stats import ReportStats
from kuberhealthy.web.report.tokens import bearer

logger = logging.getLogger(__name__)

bp = Blueprint("report", __name__)

TOO_LARGE = f"request body is larger than {MAX_BODY} bytes"
REQUEST_BUDGET = 2.0  # seconds a report may hold a server thread (cache wait, fallback read, write)
RETRY_AFTER = "2"  # seconds, for 503 answers
# A refusal's reason in the words of a ReportRejected Event (stats.REASONS; the others raise none)
EVENT_WORDS = {
    stats.NOT_RUN_POD: "it came from a checker pod that is not the pod the run created",
    stats.RUN_OVER: "its run is over (its pod has finished or the run was recorded)",
    stats.STALE: "it named a run that is not the check's current one",
    stats.SOURCE: "it failed the source check (reportSourceCheck: enforce)",
    stats.TOKEN_OTHER_POD: "it carried the token of a pod that is not the run's",
    stats.TOKEN_REQUIRED: "the check is bound to tokens and the report carried none",
}
HOLD_DEFAULT = 600.0  # seconds a held report lives when its pod carries no readable deadline
BEARER_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="kuberhealthy"'}  # on every 401
# Refusals of a report from the run's own pod whose run is over: its pod has finished, the run was
# recorded, or (found only when storing) it is an earlier run of the check than its current one.
RUN_IS_OVER = frozenset({stats.RUN_OVER})


@dataclass(frozen=True)
class Dialect:
    """Where the answers of one report endpoint differ from the other's."""

    run_over: int  # the code of a report whose run is over, from that run's own pod
    json_only: bool  # a body that is not declared application/json is refused with 415


V2 = Dialect(run_over=400, json_only=False)
V3 = Dialect(run_over=410, json_only=True)
NOT_JSON = "reports must be sent with Content-Type: application/json"


@dataclass(frozen=True)
class ReportDesk:
    """What the report route works with; one per app, built by create_app (web/__init__.py)."""

    services: WebNeeds
    stats: ReportStats
    limiter: ConfiguredLimiter  # per source address, shared with the run-now route
    admission: Admission


def read_body(limit: int = MAX_BODY) -> bytes | None:
    """The request body, or None when it is longer than `limit` bytes (read no further than that)."""
    length = request.content_length
    if length is not None and length > limit:
        return None
    stream = request.stream
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = stream.read(min(65536, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return None if size > limit else b"".join(chunks)


@bp.route("/externalCheckStatus", methods=["POST"])
def external_check_status() -> Response:
    return _answer(V2)


@bp.route("/check", methods=["POST"])
def check_report() -> Response:
    return _answer(V3)


def _answer(dialect: Dialect) -> Response:
    desk = part(ReportDesk)
    if dialect.json_only and request.mimetype != "application/json":
        desk.stats.reject(stats.NOT_JSON)
        desk.stats.answered(415)
        return plain(415, NOT_JSON)
    remote = request.remote_addr or ""
    source = normalize_ip(remote) or remote
    wait = desk.limiter.take(source)
    if wait > 0:
        desk.stats.reject(stats.RATE_LIMITED)
        response = plain(429, f"too many reports from {source}; try again shortly",
                         {"Retry-After": RateLimiter.retry_after(wait)})
    else:
        credentials = Credentials(run_uuid=request.headers.get(RUN_UUID_HEADER, "").strip(),
                                  token=bearer(request.headers.get("Authorization", "")), remote=remote, source=source)
        response = _report(desk, credentials, time.monotonic() + REQUEST_BUDGET, dialect)
    desk.stats.answered(response.status_code)
    return response


class _Reply:
    """The answers to one report (request id `rid`): every one logged, a refusal counted and, when it
    names a check to inform, raised as a ReportRejected Event."""

    def __init__(self, desk: ReportDesk, rid: str, who: str, dialect: Dialect = V2) -> None:
        self._desk = desk
        self._dialect = dialect
        self.rid = rid
        self.who = who
        self.headers = {"X-Request-Id": rid}

    def refused(self, refusal: Refused) -> Response:
        self._desk.stats.reject(refusal.reason)
        logger.info("report %s from %s: refused (%d, %s): %s", self.rid, self.who, refusal.code, refusal.reason,
                    refusal.text)
        if refusal.check is not None:
            self._rejected_event(refusal.check, refusal.reason)
        extra = BEARER_CHALLENGE if refusal.code == 401 else {}
        code = self._dialect.run_over if refusal.reason in RUN_IS_OVER else refusal.code
        return plain(code, refusal.text, {**self.headers, **extra})

    def not_yet(self, wait: NotYet) -> Response:
        if wait.level is not None:
            logger.log(wait.level, "report %s from %s: not yet (503): %s", self.rid, self.who, wait.text)
        return plain(503, wait.text, {**self.headers, "Retry-After": wait.retry_after})

    def _rejected_event(self, check: str, reason: str) -> None:
        """A ReportRejected Event on the check: spoofing attempts become visible in `kubectl describe`.
        The message is ours (the reason in words), never the caller's: Events are counted by message."""
        words = EVENT_WORDS.get(reason)
        if words is None:
            return
        found = self._desk.services.kinds.of_ident(check)
        if found is None:
            return
        kind, namespace, name = found
        obj = kind.checks.get(namespace, name) or {}
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        self._desk.services.events.report_rejected(
            ObjectRef(kind.event_kind, namespace, name, uid, kind.resource.api_version), words)


def _report(desk: ReportDesk, credentials: Credentials, end: float, dialect: Dialect = V2) -> Response:
    """The answer to one report, within the monotonic `end`."""
    reply = _Reply(desk, "web-" + uuid.uuid4().hex[:12], credentials.who, dialect)
    body = read_body()
    if body is None:
        return reply.refused(Refused(413, stats.TOO_LARGE, TOO_LARGE))
    logger.debug("report %s from %s: body %r", reply.rid, reply.who, body[:2048])
    try:
        report = parse_report(body)
    except BadReport as e:
        return reply.refused(Refused(400, stats.BAD_BODY, str(e)))
    received = utcnow()
    with desk.admission.admit(credentials, end) as answer:  # an Accepted answer holds a report slot
        if isinstance(answer, Refused):
            return reply.refused(answer)
        if isinstance(answer, NotYet):
            return reply.not_yet(answer)
        return _store(desk, reply, report, received, answer, end)


def _store(desk: ReportDesk, reply: _Reply, report: Report, received: dt.datetime, accepted: Accepted,
           end: float) -> Response:
    """Store the report of the run `accepted` names, or hold it while the API server is away."""
    services = desk.services
    caller = accepted.caller
    headers = reply.headers
    rid = reply.rid
    inform = caller.ident if accepted.informs else None
    target = f"{caller.namespace}/{caller.check}"
    who = f"pod {caller.namespace}/{caller.pod_name} ({caller.selector})"
    store = services.kinds.store_of(caller.ident)
    try:
        write = RunWrite(services.resources, caller.namespace, caller.check, caller.run_uuid,
                         services.config.pod_name, bounds=Bounds(max(0.3, end - time.monotonic()), end), store=store)
        record_report(write, report.ok, list(report.errors), now=received,
                      hint=caller.state or services.kinds.state_cache(caller.ident).get(caller.namespace, caller.check),
                      binding=accepted.binding)
    except TokenBound as e:  # bound since the caches last looked (caller.py decides on them first)
        return reply.refused(Refused(401, stats.TOKEN_REQUIRED, str(e), inform))
    except StaleReport as e:
        reason = (f"pod was not properly whitelisted for reporting status of check {caller.check} with uuid "
                  f"{caller.run_uuid} and namespace {caller.namespace}")
        over = isinstance(e, RunFinished)  # a run of this check that is over, not one it never had
        return reply.refused(Refused(400, stats.RUN_OVER if over else stats.STALE, reason, inform))
    except ApiError as e:
        if not is_transient(e):
            logger.error("report %s for %s from %s: failed to store (500): %s", rid, target, who, e)
            return plain(500, f"failed to store check state for {caller.check}: {e}", headers)
        expires = (caller.deadline or time.time() + HOLD_DEFAULT) + 30.0
        held = Held(caller.namespace, caller.check, caller.run_uuid, report.ok, report.errors, received, expires,
                    accepted.binding, store)
        if not services.held.add(held):
            logger.error("report %s for %s from %s: cannot hold it (503): %s", rid, target, who, e)
            return plain(503, f"cannot store check state for {caller.check} right now: {e}",
                         {**headers, "Retry-After": RETRY_AFTER})
        logger.warning("report %s for %s from %s: accepted and held, the API server is away: %s", rid, target,
                       who, e)
        return plain(200, "", headers)
    except KuberhealthyError as e:
        logger.error("report %s for %s from %s: failed to store (500): %s", rid, target, who, e)
        return plain(500, f"failed to store check state for {caller.check}: {e}", headers)
    logger.info("report %s for %s from %s: stored OK=%s with %d error(s)", rid, target, who, report.ok,
                len(report.errors))
    return plain(200, "", headers)
