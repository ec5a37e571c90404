"""Kuberhealthy v3's read routes and run route, for every kind of check the daemon knows
(web/checkkinds.py), on every replica:

  GET  /json                                     v3's summary (web/v3/summary.py), `?namespace=a,b`
  POST /api/run?namespace=&healthcheck=          run now, as `POST /api/checks/<ns>/<name>/run`
                                                 (web/runrequest.py: 202, 403, 404, 409, 429, 503)
  GET  /api/events?namespace=&healthcheck=       the check's Events (web/v3/events.py)
  GET  /api/logs?namespace=&healthcheck=&pod=[&format=text][&container=]
  GET  /api/logs/stream?namespace=&healthcheck=&pod=[&container=]
                                                 a checker pod's log, read or followed (web/v3/logs.py)

`healthcheck` is the check's name, or its `/json` key (`<ns>/<name>`, `<ns>/hc:<name>`). A bare name
is looked up as a HealthCheck first, then as a khcheck, then as a khjob (which is read but never run on
request). A missing `namespace` or `healthcheck` is v3's 400. `/json` reads only the caches; events
and logs are one bounded API read each (events: at most events.READ, within events.READ_TIMEOUT; logs:
see logs.py), behind the per-source rate limit that reports and run requests share.
"""
from __future__ import annotations

import json
import logging

from flask import Blueprint, Response, abort, request

from kuberhealthy.base.errors import ApiError, is_transient
from kuberhealthy.web.answers import plain, requested_namespaces
from kuberhealthy.web.checkkinds import KHCHECK, KHJOB, CheckKinds, Wanted
from kuberhealthy.web.context import context
from kuberhealthy.web.entries import ViewCache
from kuberhealthy.web.parts import part
from kuberhealthy.web.ratelimit import RateLimiter
from kuberhealthy.web.runrequest import request_run, source_address
from kuberhealthy.web.v3 import events, logs
from kuberhealthy.web.v3.summary import Summary

logger = logging.getLogger(__name__)

bp = Blueprint("v3", __name__)

HEALTHCHECK = "healthcheck"
LOOKUP = (HEALTHCHECK, KHCHECK, KHJOB)  # a bare name's kinds, in order (kinds not served are skipped)
JSON = "application/json; charset=utf-8"
TEXT = "text/plain; charset=utf-8"
NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def _wanted() -> Wanted | Response:
    wanted = part(CheckKinds).wanted(request.args.get("namespace", ""), request.args.get("healthcheck", ""), LOOKUP)
    return wanted if isinstance(wanted, Wanted) else plain(400, wanted)


def _limited() -> Response | None:
    source = source_address()
    wait = context().limiter.take(source)
    if wait <= 0:
        return None
    return plain(429, f"too many requests from {source}; try again shortly",
                 {"Retry-After": RateLimiter.retry_after(wait)})


def _has_body() -> bool:
    if request.content_length:
        return True
    return "chunked" in request.headers.get("Transfer-Encoding", "").lower() and bool(request.stream.read(1))


@bp.route("/json", methods=["GET", "HEAD"])
def summary() -> Response:
    if _has_body():  # as v3 (and `/`): a checker reporting to the wrong URL
        return plain(400, "Unexpected body from status page request. Verify check is reporting to the right status url")
    raw = request.args.get("namespace", "")
    namespaces = requested_namespaces(raw) if raw else None
    return Response(part(Summary).page(namespaces or None), content_type=JSON)


@bp.route("/api/run", methods=["POST"])
def run() -> Response:
    if not context().services.config.enable_run_api:
        abort(404)  # the route is off: the same answer as a path that does not exist
    wanted = _wanted()
    return wanted if isinstance(wanted, Response) else request_run(wanted)


@bp.route("/api/events", methods=["GET", "HEAD"])
def check_events() -> Response:
    wanted = _wanted()
    if isinstance(wanted, Response):
        return wanted
    refused = _limited()
    if refused is not None:
        return refused
    found = part(CheckKinds).find(wanted)
    if not found:
        return plain(404, f"no check {wanted.namespace}/{wanted.name}")
    kind = found[0].kind
    try:
        items = context().services.read_check_events(wanted.namespace, kind.event_kind, wanted.name, events.READ,
                                                     events.READ_TIMEOUT)
    except ApiError as e:
        if is_transient(e):
            return plain(503, f"cannot list the Events of {wanted.namespace}/{wanted.name} right now: {e}",
                         {"Retry-After": logs.RETRY_AFTER})
        logger.warning("Listing the Events of %s %s/%s was refused: %s", kind.name, wanted.namespace, wanted.name, e)
        return plain(500, f"cannot list the Events of {wanted.namespace}/{wanted.name}: {str(e)[:300]}")
    return Response(events.render(items), content_type=JSON)


def _log_request() -> tuple[Wanted, logs.Chosen] | Response:
    """The pod a log request may read, or its refusal: logs off, parameters, the rate limit, the pod."""
    services = context().services
    if not services.config.expose_logs:
        return plain(403, "checker logs are not served here (config exposeLogs is false)")
    wanted = _wanted()
    if isinstance(wanted, Response):
        return wanted
    pod = request.args.get("pod", "").strip()
    if not pod:
        return plain(400, "pod is required")
    refused = _limited()
    if refused is not None:
        return refused
    chosen = logs.choose(services, part(CheckKinds), wanted, pod, request.args.get("container", "").strip())
    return chosen if isinstance(chosen, Response) else (wanted, chosen)


@bp.route("/api/logs", methods=["GET", "HEAD"])
def pod_log() -> Response:
    fmt = request.args.get("format", "json")
    if fmt not in ("json", "text"):
        return plain(406, "format must be text (or json, the default)")
    asked = _log_request()
    if isinstance(asked, Response):
        return asked
    wanted, chosen = asked
    try:
        text = context().services.resources.pod_log(chosen.namespace, chosen.name, chosen.container or None,
                                                    tail_lines=logs.LOG_LINES, limit_bytes=logs.LOG_BYTES,
                                                    timeout=logs.READ_TIMEOUT)
    except ApiError as e:
        return logs.api_refusal(chosen, e)
    if fmt == "text":
        return Response(text, content_type=TEXT, headers=NO_STORE)
    return Response(json.dumps(logs.log_body(chosen, wanted, text)), content_type=JSON, headers=NO_STORE)


@bp.route("/api/logs/stream", methods=["GET", "HEAD"])
def pod_log_stream() -> Response:
    asked = _log_request()
    if isinstance(asked, Response):
        return asked
    wanted, chosen = asked
    if request.method == "HEAD":  # no body: nothing to follow
        return Response(b"", content_type=TEXT, headers=NO_STORE)
    entries = part(ViewCache).one(wanted.namespace, wanted.name)
    timeout = next((b.view.get("timeout") for b in entries if b.view.get("kind") == chosen.found.kind.entry_kind), None)
    seconds = logs.follow_seconds(timeout)
    opened = part(logs.StreamSlots).open(context().services, chosen, seconds)
    if isinstance(opened, Response):
        return opened
    logger.info("Following the log of pod %s/%s for %s (at most %.0f s)", chosen.namespace, chosen.name,
                source_address(), seconds)
    return Response(opened, content_type=TEXT, headers={**NO_STORE, "X-Accel-Buffering": "no"},
                    direct_passthrough=True)
