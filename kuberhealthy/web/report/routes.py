"""`POST /externalCheckStatus`: a checker pod reports its run's result.

Order of work: the per-source rate limit (429), read the body (bounded: 413 past MAX_BODY), decode
and check it (body.py), hand the request to the caller rules once (caller.py: the token, the uuid
header or the source address, bound to the run's pod, the header path's source check) and turn
their verdict into the answer, then store through khstate.record_report, which refuses
(StaleReport) unless the pod's run UUID is still the current one. Every refusal is a 4xx with one
line of plain text and writes nothing (a refusal for a known check also raises a ReportRejected
Event); 500 means only that storing failed for a lasting reason.

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

import logging
import time
import uuid

from flask import Blueprint, Response, request

from kuberhealthy.base.errors import ApiError, KuberhealthyError, is_transient
from kuberhealthy.base.times import utcnow
from kuberhealthy.checkclient import RUN_UUID_HEADER
from kuberhealthy.outputs.events import KIND_CHECK, KIND_JOB, ObjectRef
from kuberhealthy.outputs.heldreports import Held
from kuberhealthy.records.khstate import StaleReport, record_report
from kuberhealthy.web.context import context, plain
from kuberhealthy.web.ratelimit import RateLimiter
from kuberhealthy.web.report import stats
from kuberhealthy.web.report.body import MAX_BODY, BadReport, parse_report
from kuberhealthy.web.report.caller import CallerRules, NotYet, Refused
from kuberhealthy.web.report.finder import normalize_ip
from kuberhealthy.web.report.tokens import bearer

logger = logging.getLogger(__name__)

bp = Blueprint("report", __name__)

TOO_LARGE = f"request body is larger than {MAX_BODY} bytes"
REQUEST_BUDGET = 2.0  # seconds a report may hold a server thread (cache wait, fallback read, write)
RETRY_AFTER = "2"  # seconds, for 503 answers
HOLD_DEFAULT = 600.0  # seconds a held report lives when its pod carries no readable deadline
BEARER_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="kuberhealthy"'}  # on every 401


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
    if not ctx.report_slots.acquire(blocking=False):
        return _answer(plain(503, "too many reports in flight; try again shortly", {"Retry-After": RETRY_AFTER}))
    try:
        return _answer(_report(time.monotonic() + REQUEST_BUDGET, source))
    finally:
        ctx.report_slots.release()


def _answer(response: Response) -> Response:
    context().report_stats.answered(response.status_code)
    return response


def _rejected_event(check: tuple[str, str], reason: str, source: str) -> None:
    """A ReportRejected Event on the check: spoofing attempts become visible in `kubectl describe`.
    The message is ours (reason and address), never the caller's text: Events are counted by message."""
    services = context().services
    namespace, name = check
    obj = services.khchecks.get(namespace, name)
    kind = KIND_CHECK
    if obj is None:
        obj, kind = services.khjobs.get(namespace, name), KIND_JOB
    if obj is None:
        return
    uid = str((obj.get("metadata") or {}).get("uid") or "")
    services.events.report_rejected(ObjectRef(kind, namespace, name, uid), f"{reason}, from {source}")


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
        if check is not None:
            _rejected_event(check, reason, source)
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

    services = ctx.services
    verdict = CallerRules(services, ctx.tokens, ctx.caller_wait, ctx.report_stats).judge(run_uuid, token, remote, end)
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
                      timeout=max(0.3, end - time.monotonic()), deadline=end)
    except StaleReport:
        reason = (f"pod was not properly whitelisted for reporting status of check {caller.check} with uuid "
                  f"{caller.run_uuid} and namespace {caller.namespace}")
        return refuse(400, stats.STALE, reason, check=(caller.namespace, caller.check))
    except ApiError as e:
        if not is_transient(e):
            logger.error("report %s for %s from %s: failed to store (500): %s", rid, target, who, e)
            return plain(500, f"failed to store check state for {caller.check}: {e}", headers)
        expires = (caller.deadline or time.time() + HOLD_DEFAULT) + 30.0
        held = Held(caller.namespace, caller.check, caller.run_uuid, report.ok, report.errors, received, expires)
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
