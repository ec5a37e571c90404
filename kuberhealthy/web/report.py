"""`POST /externalCheckStatus`: a checker pod reports its run's result.

Order of work: read the body (bounded: 413 past MAX_BODY), decode and check it, find and validate the
calling pod in the cache, then store through khstate.record_report, which re-reads the khstate and
refuses (StaleReport) unless the pod's run UUID is still the current one. Every refusal is a 4xx with
one line of plain text and writes nothing; 500 means only that storing failed. One INFO line per
report (request id, caller, outcome); bodies are logged only at DEBUG.
"""
from __future__ import annotations

import logging
import uuid

from flask import Blueprint, Response, request

from kuberhealthy.errors import KuberhealthyError
from kuberhealthy.khstate import StaleReport, record_report
from kuberhealthy.web import context, plain
from kuberhealthy.web.caller import CallerFinder, UnknownCaller
from kuberhealthy.web.reportbody import MAX_BODY, BadReport, parse_report

logger = logging.getLogger(__name__)

bp = Blueprint("report", __name__)

UUID_HEADER = "kh-run-uuid"
TOO_LARGE = f"request body is larger than {MAX_BODY} bytes"


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

    ctx = context()
    services = ctx.services
    finder = CallerFinder(services.pods, services.notifier, ctx.caller_wait)
    try:
        caller = finder.find(run_uuid or None, remote)
    except UnknownCaller as e:
        logger.info("report %s from %s: refused (400): %s", rid, who, e)
        return plain(400, str(e), headers)

    target = f"{caller.namespace}/{caller.check}"
    who = f"pod {caller.namespace}/{caller.pod_name} ({caller.selector})"
    try:
        record_report(services.resources, caller.namespace, caller.check, caller.run_uuid, report.ok,
                      list(report.errors), services.config.pod_name,
                      hint=services.khstates.get(caller.namespace, caller.check))
    except StaleReport:
        reason = (f"pod was not properly whitelisted for reporting status of check {caller.check} with uuid "
                  f"{caller.run_uuid} and namespace {caller.namespace}")
        logger.info("report %s for %s from %s: refused (400): stale run %s", rid, target, who, caller.run_uuid)
        return plain(400, reason, headers)
    except KuberhealthyError as e:
        logger.error("report %s for %s from %s: failed to store (500): %s", rid, target, who, e)
        return plain(500, f"failed to store check state for {caller.check}: {e}", headers)
    logger.info("report %s for %s from %s: stored OK=%s with %d error(s)", rid, target, who, report.ok,
                len(report.errors))
    return plain(200, "", headers)
