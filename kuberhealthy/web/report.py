"""`POST /externalCheckStatus`: a checker pod reports its run's result.

Order of work: read the body (bounded: 413 past MAX_BODY), decode and check it, find and validate the
calling pod (cache, then one bounded read), then store through khstate.record_report, which refuses
(StaleReport) unless the pod's run UUID is still the current one. Every refusal is a 4xx with one
line of plain text and writes nothing; 500 means only that storing failed for a lasting reason.

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

from kuberhealthy.errors import ApiError, KuberhealthyError, is_transient
from kuberhealthy.heldreports import Held
from kuberhealthy.khstate import StaleReport, record_report, utcnow
from kuberhealthy.web import context, plain
from kuberhealthy.web.caller import CallerFinder, CallerNotYetKnown, UnknownCaller
from kuberhealthy.web.reportbody import MAX_BODY, BadReport, parse_report

logger = logging.getLogger(__name__)

bp = Blueprint("report", __name__)

UUID_HEADER = "kh-run-uuid"
TOO_LARGE = f"request body is larger than {MAX_BODY} bytes"
REQUEST_BUDGET = 2.0  # seconds a report may hold a server thread (cache wait, fallback read, write)
RETRY_AFTER = "2"  # seconds, for 503 answers
HOLD_DEFAULT = 600.0  # seconds a held report lives when its pod carries no readable deadline


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
    if not ctx.report_slots.acquire(blocking=False):
        return plain(503, "too many reports in flight; try again shortly", {"Retry-After": RETRY_AFTER})
    try:
        return _report(time.monotonic() + REQUEST_BUDGET)
    finally:
        ctx.report_slots.release()


def _report(end: float) -> Response:
    rid = "web-" + uuid.uuid4().hex[:12]
    headers = {"X-Request-Id": rid}
    run_uuid = request.headers.get(UUID_HEADER, "").strip()
    remote = request.remote_addr or ""
    who = f"uuid header {run_uuid[:80]!r}" if run_uuid else f"address {remote}"

    body = read_body()
    if body is None:
        logger.info("report %s from %s: refused (413): %s", rid, who, TOO_LARGE)
        return plain(413, TOO_LARGE, headers)
    logger.debug("report %s from %s: body %r", rid, who, body[:2048])
    try:
        report = parse_report(body)
    except BadReport as e:
        logger.info("report %s from %s: refused (400): %s", rid, who, e)
        return plain(400, str(e), headers)
    received = utcnow()

    ctx = context()
    services = ctx.services
    finder = CallerFinder(services.pods, services.notifier, ctx.caller_wait, services.read_checker_pods)
    try:
        caller = finder.find(run_uuid or None, remote, end)
    except UnknownCaller as e:
        logger.info("report %s from %s: refused (400): %s", rid, who, e)
        return plain(400, str(e), headers)
    except CallerNotYetKnown as e:
        logger.warning("report %s from %s: not yet (503): %s", rid, who, e)
        return plain(503, str(e), {**headers, "Retry-After": RETRY_AFTER})

    target = f"{caller.namespace}/{caller.check}"
    who = f"pod {caller.namespace}/{caller.pod_name} ({caller.selector})"
    try:
        record_report(services.resources, caller.namespace, caller.check, caller.run_uuid, report.ok,
                      list(report.errors), services.config.pod_name, now=received,
                      hint=services.khstates.get(caller.namespace, caller.check),
                      timeout=max(0.3, end - time.monotonic()), deadline=end)
    except StaleReport:
        reason = (f"pod was not properly whitelisted for reporting status of check {caller.check} with uuid "
                  f"{caller.run_uuid} and namespace {caller.namespace}")
        logger.info("report %s for %s from %s: refused (400): stale run %s", rid, target, who, caller.run_uuid)
        return plain(400, reason, headers)
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
