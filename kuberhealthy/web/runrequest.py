"""Run now, asked for over HTTP: the one sequence behind v2's `POST /api/checks/<ns>/<name>/run`
(web/api.py) and v3's `POST /api/run?namespace=&healthcheck=` (web/v3/routes.py).

The handler sets the run-now annotation (records/runnow.py) on the check and answers 202; the leader
runs the check and removes the annotation. In order:
  * route off (config enableRunAPI: false) → 404, as for any unknown path;
  * a cross-site browser request, or a body typed as a form or text/plain → 403 (web/origin.py; config
    trustedOrigins lists the origins that may ask anyway);
  * the per-source rate limit shared with reports (config reportRateLimit/reportRateBurst) → 429;
  * no check of that name → 404; the check found runs once (a khjob: its kind says so) → 409: it runs
    when it is created, and is never run on request;
  * the annotation already set (a request not yet taken up) → 409; a run in flight (the kind's
    `live_run`: the run's claim and its pod, from the caches) → 409; the check paused
    (records/pause.py) → 409, naming the annotation to remove (no HTTP route pauses or resumes a check);
  * the patch is conditional on the cached resourceVersion, so two replicas answering two requests
    at once cannot both say 202: a conflict is looked at again (one read) and retried once;
  * the API server away → 503 with Retry-After; refused otherwise → 500.
A 202 raises the CheckRunRequested Event (source "api"). The check is looked up by kind
(web/checkkinds.py): the route says which kinds, in which order. What it does not do: start runs (the
leader does), or know whether the leader is up (with none, the annotation waits for the next one).
"""
from __future__ import annotations

import json
import logging
import time

from flask import Response, abort, request

from kuberhealthy.base.errors import ApiError, Conflict, Invalid, NotFound, is_transient
from kuberhealthy.kube import Obj
from kuberhealthy.records import pause, runnow
from kuberhealthy.web import origin
from kuberhealthy.web.addresses import normalize_ip
from kuberhealthy.web.answers import plain
from kuberhealthy.web.checkkinds import CheckKinds, Found, Wanted
from kuberhealthy.web.context import context
from kuberhealthy.web.parts import part
from kuberhealthy.web.ratelimit import RateLimiter

logger = logging.getLogger(__name__)

RUN_BUDGET = 5.0  # seconds a run request may spend on API calls (patch, a read after a conflict, patch)
RETRY_AFTER = "2"  # seconds, for 503 answers
ATTEMPTS = 2  # conditional patches per request (the second after a conflict with an unrelated change)


class _Refused(Exception):
    def __init__(self, code: int, text: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(text)
        self.code, self.text, self.headers = code, text, headers


def source_address() -> str:
    """The requester's address, as the rate limit counts it."""
    return normalize_ip(request.remote_addr or "") or (request.remote_addr or "")


def request_run(wanted: Wanted) -> Response:
    """The whole answer to a run request for the check `wanted` names (see the module docstring)."""
    ctx = context()
    services = ctx.services
    if not services.config.enable_run_api:
        abort(404)  # the route is off: the same answer as a path that does not exist
    refused = origin.refusal(services.config.trusted_origins)
    if refused is not None:
        return refused
    source = source_address()
    wait = ctx.limiter.take(source)
    if wait > 0:
        return plain(429, f"too many requests from {source}; try again shortly",
                     {"Retry-After": RateLimiter.retry_after(wait)})
    key = f"{wanted.namespace}/{wanted.name}"
    try:
        target = _requestable(wanted, part(CheckKinds).find(wanted))
        value = _request(target, time.monotonic() + RUN_BUDGET)
    except _Refused as e:
        logger.info("Run of %s requested from %s: refused (%d): %s", key, source, e.code, e.text)
        return plain(e.code, e.text, e.headers)
    services.events.run_requested(target.kind.ref(target.obj), "api")
    logger.info("Run of %s %s requested from %s: the leader runs it at once", target.kind.name, key, source)
    body = {"namespace": wanted.namespace, "name": wanted.name, "kind": target.kind.entry_kind, "run": "requested",
            "requestedAt": value.removesuffix(runnow.API_MARK), "annotation": runnow.RUN_NOW_ANNOTATION}
    return Response(json.dumps(body), status=202, content_type="application/json")


def _requestable(wanted: Wanted, found: list[Found]) -> Found:
    """The check, when a run may be requested for it now; else why not (_Refused)."""
    key = f"{wanted.namespace}/{wanted.name}"
    if not found:
        kinds = " or ".join(k for k in wanted.kinds if part(CheckKinds).named(k) is not None) or "check"
        raise _Refused(404, f"no {kinds} {key}")
    target = found[0]
    if target.kind.runs_once(target.obj):
        raise _Refused(409, f"{key} is a {target.kind.name} that runs once, when it is created, not on request")
    return _runnable(target, key)


def _runnable(target: Found, key: str) -> Found:
    obj = target.obj
    if runnow.requested(obj) is not None:
        raise _Refused(409, f"a run of {key} was already requested and has not started yet")
    paused = pause.active(obj, time.time())
    if paused is not None:
        raise _Refused(409, f"{key} is paused until {paused.view()['until']}; it runs when the "
                            f"pause ends or when the {pause.PAUSED_UNTIL} annotation is removed")
    ns, _, name = key.partition("/")
    live = target.kind.live_run(ns, name)
    if live is not None:
        raise _Refused(409, f"a run of {key} is in flight (phase {live['phase']}, pod {live['pod']})")
    return target


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _request(target: Found, end: float) -> str:
    """Set the annotation, conditional on the check not having changed; the value written."""
    api = context().services.resources
    meta = target.obj.get("metadata") or {}
    ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    key, res = f"{ns}/{name}", target.kind.resource
    obj = target.obj
    for attempt in range(ATTEMPTS):
        value = runnow.api_value(time.time())
        try:
            api.merge_patch(res, ns, name, runnow.request_patch(value, _rv(obj)),
                            timeout=max(0.3, end - time.monotonic()))
            return value
        except Conflict:
            if attempt + 1 == ATTEMPTS:
                break
            obj = _read(target, ns, name, end)  # changed meanwhile: by another request, or by anything
            _runnable(Found(target.kind, obj), key)
        except NotFound as e:
            raise _Refused(404, f"no {target.kind.name} {key}") from e
        except ApiError as e:
            raise _api_refusal(key, e) from e
    raise _Refused(409, f"{key} changed while the run was requested; try again")


def _read(target: Found, ns: str, name: str, end: float) -> Obj:
    try:
        return context().services.resources.get(target.kind.resource, ns, name,
                                                 timeout=max(0.3, end - time.monotonic()))
    except NotFound as e:
        raise _Refused(404, f"no {target.kind.name} {ns}/{name}") from e
    except ApiError as e:
        raise _api_refusal(f"{ns}/{name}", e) from e


def _api_refusal(key: str, e: ApiError) -> _Refused:
    if isinstance(e, Invalid):  # stored before its CRD validated more: no patch passes until the spec is fixed
        return _Refused(409, f"{key} no longer passes its CRD's validation and cannot be annotated "
                        f"until its spec is fixed: {str(e)[:300]}")
    if is_transient(e):
        return _Refused(503, f"cannot request a run of {key} right now: {e}", {"Retry-After": RETRY_AFTER})
    logger.error("Run of %s: the annotation patch was refused: %s", key, e)
    return _Refused(500, f"cannot request a run of {key}: {e}")
