"""`POST /externalCheckStatus`: a checker pod reports its run's result.

Order of work: the per-source rate limit (429), read the body (bounded: 413 past MAX_BODY), decode
and check it (body.py), hand the request to the caller rules once (caller.py: the token, the uuid
header or the source address, bound to the run's pod, the header path's source check) and turn
their verdict into the answer, then store through khstate.record_report, which refuses
(StaleReport) unless the pod's run UUID is still the current one. Every refusal is a 4xx with one
line of plain text and writes nothing; 500 means only that storing failed for a lasting reason.

A fake report costs almost nothing (triage.py): before it takes a report slot, a report is sorted by
what the caches know. One naming no run they know gets 400 at once and no API request while the
caches are current, or waits in a small pool (no slot held) while they may be behind, then 503 with
`Retry-After: 1`; only reports of runs the caches know take one of the REPORT_SLOTS. A bearer token
is pre-screened and reviewed before the slot too (tokens.py: a forged token is refused free, reviews
are bounded, past the bound 503 with `Retry-After: 1`); one that cannot be reviewed right now is
sorted like a report without one.

ReportRejected Events (on the check) only where they inform: for a refusal of a report that came from
the address of one of the check's own checker pods, or with a valid token. The message is ours (the
reason in words), never caller-chosen (no source address, no uuid): the recorder damps it to one per
check and reason per minute (outputs/events.py). Every other refusal only counts in
kuberhealthy_report_requests_total and kuberhealthy_report_rejected_total.

The control plane being away is not the checker's fault, so it never costs a report:
  * the caller cannot be confirmed yet (API unreachable, pod cache not current) → 503 + Retry-After;
  * the khstate write fails because the API is away or overloaded → the report is held in memory
    (heldreports.py) and written as soon as the API answers, within the run's deadline; the checker
    gets 200, so it does not spend its deadline retrying;
  * no request holds a server thread longer than REQUEST_BUDGET seconds; when too many reports are
    in flight at once (an outage), the rest get 503 at once so threads stay free for `/` and probes.
One INFO line per report (request id, caller, outcome); bodies are logged only at DEBUG.
"""
from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from typing import Protocol

from flask import Blueprint, Response, request

from kuberhealthy.base.errors import ApiError, KuberhealthyError, is_transient
from kuberhealthy.base.times import utcnow
from kuberhealthy.checkclient import RUN_UUID_HEADER
from kuberhealthy.kube import Obj
from kuberhealthy.outputs.events import KIND_CHECK, KIND_JOB, ObjectRef
from kuberhealthy.outputs.heldreports import Held
from kuberhealthy.records.checkpod import CHECK_NAME_ANNOTATION
from kuberhealthy.records.khstate import StaleReport, TokenBound, record_report
from kuberhealthy.web.context import WebContext, context, plain
from kuberhealthy.web.ratelimit import RateLimiter
from kuberhealthy.web.report import stats
from kuberhealthy.web.report.body import MAX_BODY, BadReport, Report, parse_report
from kuberhealthy.web.report.caller import CallerRules, NotYet, Refused, Reviewed
from kuberhealthy.web.report.finder import normalize_ip
from kuberhealthy.web.report.tokens import (
    ForeignPod,
    InvalidToken,
    PodIdentity,
    ReviewsBusy,
    TokenNotYetVerified,
    bearer,
)
from kuberhealthy.web.report.triage import Behind, Unknown

logger = logging.getLogger(__name__)

bp = Blueprint("report", __name__)

TOO_LARGE = f"request body is larger than {MAX_BODY} bytes"
REQUEST_BUDGET = 2.0  # seconds a report may hold a server thread (cache wait, fallback read, write)
RETRY_AFTER = "2"  # seconds, for 503 answers
RETRY_SOON = "1"  # seconds, for 503 answers while the caches may be behind (triage.py)
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


class Refuse(Protocol):
    """_report's refuse(): count, log, maybe raise an Event, and answer a refusal."""

    def __call__(self, code: int, reason: str, text: str, extra: dict[str, str] | None = None,
                 check: tuple[str, str] | None = None) -> Response: ...


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
    ctx = context()
    source = normalize_ip(request.remote_addr or "") or (request.remote_addr or "")
    wait = ctx.limiter().take(source)
    if wait > 0:
        ctx.report_stats.reject(stats.RATE_LIMITED)
        return _answer(plain(429, f"too many reports from {source}; try again shortly",
                             {"Retry-After": RateLimiter.retry_after(wait)}))
    return _answer(_report(time.monotonic() + REQUEST_BUDGET, source))


def _answer(response: Response) -> Response:
    context().report_stats.answered(response.status_code)
    return response


def _informs(check: tuple[str, str], source: str, token: bool) -> bool:
    """Whether a refusal for `check` deserves an Event: it carried a token (verified: only a valid
    token's refusal names a check) or came from the address of one of the check's checker pods."""
    if token:
        return True
    namespace, name = check
    return any((p.get("metadata") or {}).get("namespace") == namespace
               and ((p.get("metadata") or {}).get("annotations") or {}).get(CHECK_NAME_ANNOTATION) == name
               for p in context().services.pods.by_index("ip", source))


def _rejected_event(check: tuple[str, str], reason: str) -> None:
    """A ReportRejected Event on the check: spoofing attempts become visible in `kubectl describe`.
    The message is ours (the reason in words), never the caller's: Events are counted by message."""
    words = EVENT_WORDS.get(reason)
    if words is None:
        return
    services = context().services
    namespace, name = check
    obj = services.khchecks.get(namespace, name)
    kind = KIND_CHECK
    if obj is None:
        obj, kind = services.khjobs.get(namespace, name), KIND_JOB
    if obj is None:
        return
    uid = str((obj.get("metadata") or {}).get("uid") or "")
    services.events.report_rejected(ObjectRef(kind, namespace, name, uid), words)


def _report(end: float, source: str) -> Response:
    """The answer to one report from `source` (the peer address, normalized), within the monotonic `end`."""
    rid = "web-" + uuid.uuid4().hex[:12]
    headers = {"X-Request-Id": rid}
    ctx = context()
    run_uuid = request.headers.get(RUN_UUID_HEADER, "").strip()
    token = bearer(request.headers.get("Authorization", ""))
    remote = request.remote_addr or ""
    who = f"uuid header {run_uuid[:80]!r}" if run_uuid else f"address {remote}"
    if token is not None:
        who = f"a token from {remote}"

    def refuse(code: int, reason: str, text: str, extra: dict[str, str] | None = None,
               check: tuple[str, str] | None = None) -> Response:
        ctx.report_stats.reject(reason)
        logger.info("report %s from %s: refused (%d, %s): %s", rid, who, code, reason, text)
        if check is not None and _informs(check, source, token is not None):
            _rejected_event(check, reason)
        return plain(code, text, {**headers, **(extra or {})})

    body = read_body()
    if body is None:
        return refuse(413, stats.TOO_LARGE, TOO_LARGE)
    logger.debug("report %s from %s: body %r", rid, who, body[:2048])
    try:
        report = parse_report(body)
    except BadReport as e:
        return refuse(400, stats.BAD_BODY, str(e))
    received = utcnow()

    found: list[Obj] | None = None
    reviewed: Reviewed = None
    if token is not None:  # reviewed before it takes a slot (tokens.py: pre-screen, bounded reviews)
        try:
            reviewed = ctx.tokens.verify(token, end - time.monotonic())
        except InvalidToken as e:
            return refuse(401, stats.TOKEN_INVALID, str(e), BEARER_CHALLENGE)
        except ForeignPod as e:
            return refuse(400, stats.TOKEN_OTHER_POD, str(e))
        except ReviewsBusy as e:
            logger.info("report %s from %s: not yet (503): %s", rid, who, e)
            return plain(503, str(e), {**headers, "Retry-After": RETRY_SOON})
        except TokenNotYetVerified as e:  # the caller rules decide (with token-or-uuid: the uuid rules may)
            reviewed = e
    if not isinstance(reviewed, PodIdentity):  # a token names its pod: else sorted by what the caches know
        sort = ctx.triage.sort(run_uuid or None, remote, end)
        if isinstance(sort, Unknown) and reviewed is None:
            return refuse(400, stats.UNKNOWN_CALLER, sort.text)
        if isinstance(sort, Unknown):  # the token may still prove it once it can be reviewed: not final
            logger.info("report %s from %s: not yet (503): %s", rid, who, reviewed)
            return plain(503, str(reviewed), {**headers, "Retry-After": RETRY_AFTER})
        if isinstance(sort, Behind):
            logger.info("report %s from %s: not yet (503): %s", rid, who, sort.text)
            return plain(503, sort.text, {**headers, "Retry-After": RETRY_SOON})
        found = sort.pods
    if not ctx.report_slots.acquire(blocking=False):
        return plain(503, "too many reports in flight; try again shortly", {**headers, "Retry-After": RETRY_AFTER})
    try:
        return _judged(ctx, report, received, end, found, reviewed, rid=rid, who=who, refuse=refuse,
                       credentials=(run_uuid, token, remote))
    finally:
        ctx.report_slots.release()


def _judged(ctx: WebContext, report: Report, received: dt.datetime, end: float, found: list[Obj] | None,
            reviewed: Reviewed, *, rid: str, who: str, refuse: Refuse,
            credentials: tuple[str, str | None, str]) -> Response:
    """The rest of a report of a run the caches know (or of a reviewed token), holding a report slot: the
    caller rules, then storing. `credentials`: the uuid header ("" without), the bearer token (None
    without) and the peer address; `reviewed` what the token's review said."""
    services = ctx.services
    headers = {"X-Request-Id": rid}
    run_uuid, token, remote = credentials
    verdict = CallerRules(services, ctx.tokens, ctx.caller_wait, ctx.report_stats).judge(
        run_uuid, token, remote, end, found, reviewed)
    if isinstance(verdict, NotYet):
        logger.warning("report %s from %s: not yet (503): %s", rid, who, verdict.text)
        return plain(503, verdict.text, {**headers, "Retry-After": RETRY_AFTER})
    if isinstance(verdict, Refused):
        return refuse(verdict.code, verdict.reason, verdict.text, BEARER_CHALLENGE if verdict.code == 401 else None,
                      verdict.check)
    caller = verdict.caller

    target = f"{caller.namespace}/{caller.check}"
    who = f"pod {caller.namespace}/{caller.pod_name} ({caller.selector})"
    try:
        record_report(services.resources, caller.namespace, caller.check, caller.run_uuid, report.ok,
                      list(report.errors), services.config.pod_name, now=received,
                      hint=caller.state or services.khstates.get(caller.namespace, caller.check),
                      timeout=max(0.3, end - time.monotonic()), deadline=end, binding=verdict.binding)
    except TokenBound as e:  # bound since the caches last looked (caller.py decides on them first)
        return refuse(401, stats.TOKEN_REQUIRED, str(e), BEARER_CHALLENGE, (caller.namespace, caller.check))
    except StaleReport:
        reason = (f"pod was not properly whitelisted for reporting status of check {caller.check} with uuid "
                  f"{caller.run_uuid} and namespace {caller.namespace}")
        return refuse(400, stats.STALE, reason, check=(caller.namespace, caller.check))
    except ApiError as e:
        if not is_transient(e):
            logger.error("report %s for %s from %s: failed to store (500): %s", rid, target, who, e)
            return plain(500, f"failed to store check state for {caller.check}: {e}", headers)
        expires = (caller.deadline or time.time() + HOLD_DEFAULT) + 30.0
        held = Held(caller.namespace, caller.check, caller.run_uuid, report.ok, report.errors, received, expires,
                    verdict.binding)
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
