"""`POST /externalCheckStatus`: a checker pod reports its run's result.

Order of work: the per-source rate limit (429), read the body (bounded: 413 past MAX_BODY), decode
and check it, identify the caller — by a projected ServiceAccount token (web/tokens.py: any address,
401 when it fails verification) or by the uuid header / source address — and bind it to the pod its
run created (web/caller.py: a look-alike, a finished pod or an ended run → 400), check the header
path's source address (config reportSourceCheck), then store through khstate.record_report, which
refuses (StaleReport) unless the pod's run UUID is still the current one. Every refusal is a 4xx with one
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

from kuberhealthy.base.errors import ApiError, KuberhealthyError, is_transient
from kuberhealthy.checkclient import RUN_UUID_HEADER
from kuberhealthy.outputs.events import KIND_CHECK, KIND_JOB, ObjectRef
from kuberhealthy.outputs.heldreports import Held
from kuberhealthy.records.khstate import StaleReport, record_report, utcnow
from kuberhealthy.web.context import context, plain
from kuberhealthy.web.ratelimit import RateLimiter
from kuberhealthy.web.report import stats
from kuberhealthy.web.report.body import MAX_BODY, BadReport, parse_report
from kuberhealthy.web.report.caller import (
    SOURCE_OK,
    SOURCE_OTHER_POD,
    Caller,
    CallerFinder,
    CallerNotYetKnown,
    NotTheRunsPod,
    RunIsOver,
    UnknownCaller,
    normalize_ip,
    source_verdict,
)
from kuberhealthy.web.report.tokens import InvalidToken, TokenNotYetVerified, bearer

logger = logging.getLogger(__name__)

bp = Blueprint("report", __name__)

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
    source = normalize_ip(request.remote_addr or "") or (request.remote_addr or "")
    wait = ctx.limiter().take(source)
    if wait > 0:
        ctx.report_stats.reject(stats.RATE_LIMITED)
        return _answer(plain(429, f"too many reports from {source}; try again shortly",
                             {"Retry-After": RateLimiter.retry_after(wait)}))
    if not ctx.report_slots.acquire(blocking=False):
        return _answer(plain(503, "too many reports in flight; try again shortly", {"Retry-After": RETRY_AFTER}))
    try:
        return _answer(_report(time.monotonic() + REQUEST_BUDGET))
    finally:
        ctx.report_slots.release()


def _answer(response: Response) -> Response:
    context().report_stats.answered(response.status_code)
    return response


class _Refused(Exception):
    def __init__(self, code: int, reason: str, text: str, headers: dict[str, str] | None = None,
                 check: tuple[str, str] | None = None) -> None:
        super().__init__(text)
        self.code, self.reason, self.text, self.headers, self.check = code, reason, text, headers or {}, check


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


def _caller(run_uuid: str, token: str | None, remote: str, end: float) -> Caller:
    """Who reports, by the token (any address) or the uuid header / source address (the run's pod only)."""
    ctx = context()
    services = ctx.services
    finder = CallerFinder(services.pods, services.notifier, ctx.caller_wait, services.read_checker_pods,
                          khstates=services.khstates, read_state=services.read_khstate)
    unverified: CallerNotYetKnown | None = None
    try:
        if token is not None:
            try:
                return _caller_by_token(finder, token, run_uuid, end)
            except CallerNotYetKnown as e:
                # The API server cannot review the token now (away, or RBAC without tokenreviews).
                # With token-or-uuid the uuid rules would take this report without the token: let them
                # decide, so our checkclient (always sending it) fares no worse than a v2 client.
                if services.config.report_auth == "token":
                    raise
                unverified = e
        elif services.config.report_auth == "token":
            raise _Refused(401, stats.TOKEN_REQUIRED, "a ServiceAccount token is required: send the file named "
                           "by KH_REPORT_TOKEN_FILE as Authorization: Bearer <token> (reportAuth: token)",
                           {"WWW-Authenticate": 'Bearer realm="kuberhealthy"'})
        caller = _by_uuid(finder, run_uuid, remote, end)
    except _Refused:
        if unverified is not None:  # the token may still prove it once it can be reviewed: not final
            raise unverified from None
        raise
    if unverified is not None:
        logger.warning("token not reviewed (%s); the report's uuid rules identified pod %s/%s", unverified,
                       caller.namespace, caller.pod_name)
    return caller


def _by_uuid(finder: CallerFinder, run_uuid: str, remote: str, end: float) -> Caller:
    """The uuid header / source address path: the run's pod only, then the header path's source check."""
    try:
        caller = finder.find(run_uuid or None, remote, end)
    except RunIsOver as e:
        raise _Refused(400, stats.RUN_OVER, str(e), check=e.check) from e
    except NotTheRunsPod as e:
        raise _Refused(400, stats.NOT_RUN_POD, str(e), check=e.check) from e
    except UnknownCaller as e:
        raise _Refused(400, stats.UNKNOWN_CALLER, str(e)) from e
    if run_uuid:
        _check_source(caller, remote)
    return caller


def _caller_by_token(finder: CallerFinder, token: str, run_uuid: str, end: float) -> Caller:
    ctx = context()
    try:
        who = ctx.tokens.verify(token, end - time.monotonic())
    except InvalidToken as e:
        raise _Refused(401, stats.TOKEN_INVALID, str(e), {"WWW-Authenticate": 'Bearer realm="kuberhealthy"'}) from e
    except TokenNotYetVerified as e:
        raise CallerNotYetKnown(str(e)) from e
    services = ctx.services
    pod = services.pods.get(who.namespace, who.name)
    if pod is None or (pod.get("metadata") or {}).get("uid") != who.uid:
        try:
            pod = services.read_checker_pod(who.namespace, who.name, max(0.1, end - time.monotonic()))
        except ApiError as e:
            raise CallerNotYetKnown(f"cannot look up the token's pod right now: {e}") from e
    if pod is None or (pod.get("metadata") or {}).get("uid") != who.uid:
        raise _Refused(400, stats.TOKEN_OTHER_POD, f"the token's pod {who.namespace}/{who.name} is not a checker pod "
                       "that may report")
    try:
        caller = finder.find_pod(pod, end)
    except (NotTheRunsPod, RunIsOver) as e:
        reason = stats.RUN_OVER if isinstance(e, RunIsOver) else stats.TOKEN_OTHER_POD
        raise _Refused(400, reason, f"token of pod {who.namespace}/{who.name}: {e}",
                       check=getattr(e, "check", None)) from e
    if run_uuid and run_uuid != caller.run_uuid:
        raise _Refused(400, stats.TOKEN_OTHER_POD, f"the token's pod {who.namespace}/{who.name} runs "
                       f"{caller.run_uuid}, not {run_uuid[:80]}")
    return caller


def _check_source(caller: Caller, remote: str) -> None:
    """Header path: the request should come from the pod's IP or its node's (hostNetwork, SNAT)."""
    services = context().services
    mode = services.config.report_source_check
    verdict = source_verdict(caller, remote, services.pods)
    if verdict == SOURCE_OK:
        return
    source = normalize_ip(remote) or remote
    check = (caller.namespace, caller.check)
    if verdict == SOURCE_OTHER_POD:  # a pod we know, not the run's: a look-alike using the run's uuid
        raise _Refused(400, stats.NOT_RUN_POD, f"report with the uuid of run {caller.run_uuid} came from {source}, "
                       f"the address of another pod, not of {caller.namespace}/{caller.pod_name}", check=check)
    if mode == "off":
        return
    text = (f"report for pod {caller.namespace}/{caller.pod_name} came from {source!r}, neither the "
            f"pod's address ({', '.join(caller.pod_ips) or 'none yet'}) nor its node's ({caller.host_ip or 'unknown'})")
    report_stats = context().report_stats
    if mode == "enforce":
        report_stats.source_mismatch.labels("refused").inc()
        raise _Refused(400, stats.SOURCE, text + " (reportSourceCheck: enforce)", check=check)
    report_stats.source_mismatch.labels("accepted").inc()
    logger.warning("%s; accepted (reportSourceCheck: warn)", text)


def _report(end: float) -> Response:
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
            _rejected_event(check, reason, normalize_ip(remote) or remote)
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
    try:
        caller = _caller(run_uuid, token, remote, end)
    except _Refused as e:
        return refuse(e.code, e.reason, e.text, e.headers, e.check)
    except CallerNotYetKnown as e:
        logger.warning("report %s from %s: not yet (503): %s", rid, who, e)
        return plain(503, str(e), {**headers, "Retry-After": RETRY_AFTER})

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
