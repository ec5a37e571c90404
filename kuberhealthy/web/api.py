"""The JSON API: `GET /api/checks`, `GET /api/checks/<ns>/<name>`, `POST /api/checks/<ns>/<name>/run`.

Every replica answers, standbys too. Reads come from the caches through checkview.ViewCache, whose
entries keep their JSON bytes: a listing joins prepared bytes, it never serialises per request.
Answers: `{"checks": [entry, ...]}` (sorted by namespace, name, kind; a check and a job of the same
name are two entries), 404 with one line of plain text for an unknown name.

Run now (docs/interface.md#run-now, records/runnow.py). The handler sets the run-now annotation on the khcheck and
answers 202; the leader runs the check and removes the annotation. In order:
  * route off (config enableRunAPI: false) → 404, as for any unknown path;
  * a cross-site browser request, or a body typed as a form or text/plain → 403 (web/origin.py; config
    trustedOrigins lists the origins that may ask anyway);
  * the per-source rate limit shared with reports (config reportRateLimit/reportRateBurst) → 429;
  * no khcheck of that name → 404; a khjob of that name (and no khcheck) → 409: a khjob runs once,
    when it is created, and is never run on request;
  * the annotation already set (a request not yet taken up) → 409; a run in flight (the khstate's
    claim and its pod, as checkview.current_run sees them) → 409; the check paused (records/pause.py)
    → 409, naming the annotation to remove (no HTTP route pauses or resumes a check);
  * the patch is conditional on the cached resourceVersion, so two replicas answering two requests
    at once cannot both say 202: a conflict is looked at again (one read) and retried once;
  * the API server away → 503 with Retry-After; refused otherwise → 500.
A 202 raises the CheckRunRequested Event (source "api"). What it does not do: start runs (the leader
does), or know whether the leader is up (with none, the annotation waits for the next one).
"""
from __future__ import annotations

import json
import logging
import time

from flask import Blueprint, Response, abort, request

from kuberhealthy.base.errors import ApiError, Conflict, Invalid, NotFound, is_transient
from kuberhealthy.kube import KHCHECKS, Obj
from kuberhealthy.outputs.events import KIND_CHECK, ObjectRef
from kuberhealthy.records import pause, runnow
from kuberhealthy.web import origin
from kuberhealthy.web.addresses import normalize_ip
from kuberhealthy.web.answers import plain, requested_namespaces
from kuberhealthy.web.context import context
from kuberhealthy.web.entries import Built, ViewCache, current_run
from kuberhealthy.web.parts import part
from kuberhealthy.web.ratelimit import RateLimiter

logger = logging.getLogger(__name__)

bp = Blueprint("api", __name__)

RUN_BUDGET = 5.0  # seconds a run request may spend on API calls (patch, a read after a conflict, patch)
RETRY_AFTER = "2"  # seconds, for 503 answers
ATTEMPTS = 2  # conditional patches per request (the second after a conflict with an unrelated change)


@bp.before_request
def _same_origin_only() -> Response | None:
    """Every state-changing route of this blueprint (today: run) refuses cross-site browser requests."""
    config = context().services.config
    if request.method in origin.SAFE_METHODS or not config.enable_run_api:
        return None  # reads; or the run route is off, and answers 404 like a path that does not exist
    return origin.refusal(config.trusted_origins)


def _listing(built: list[Built]) -> Response:
    return Response(b'{"checks":[' + b",".join(b.body for b in built) + b"]}", content_type="application/json")


@bp.route("/api/checks", methods=["GET", "HEAD"])
def checks() -> Response:
    raw = request.args.get("namespace", "")
    return _listing(part(ViewCache).entries(requested_namespaces(raw) if raw else None))


@bp.route("/api/checks/<namespace>/<name>", methods=["GET", "HEAD"])
def one(namespace: str, name: str) -> Response:
    built = part(ViewCache).one(namespace, name)
    if not built:
        return plain(404, f"no khcheck or khjob {namespace}/{name}")
    return _listing(built)


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class _Refused(Exception):
    def __init__(self, code: int, text: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(text)
        self.code, self.text, self.headers = code, text, headers


@bp.route("/api/checks/<namespace>/<name>/run", methods=["POST"])
def run(namespace: str, name: str) -> Response:
    ctx = context()
    services = ctx.services
    if not services.config.enable_run_api:
        abort(404)  # the route is off: the same answer as a path that does not exist
    source = normalize_ip(request.remote_addr or "") or (request.remote_addr or "")
    wait = ctx.limiter.take(source)
    if wait > 0:
        return plain(429, f"too many requests from {source}; try again shortly",
                     {"Retry-After": RateLimiter.retry_after(wait)})
    key = f"{namespace}/{name}"
    try:
        obj = _requestable(namespace, name, services.khchecks.get(namespace, name))
        value = _request(namespace, name, obj, time.monotonic() + RUN_BUDGET)
    except _Refused as e:
        logger.info("Run of %s requested from %s: refused (%d): %s", key, source, e.code, e.text)
        return plain(e.code, e.text, e.headers)
    uid = str((obj.get("metadata") or {}).get("uid") or "")
    services.events.run_requested(ObjectRef(KIND_CHECK, namespace, name, uid), "api")
    logger.info("Run of %s requested from %s: the leader runs it at once", key, source)
    body = {"namespace": namespace, "name": name, "kind": "check", "run": "requested",
            "requestedAt": value.removesuffix(runnow.API_MARK), "annotation": runnow.RUN_NOW_ANNOTATION}
    return Response(json.dumps(body), status=202, content_type="application/json")


def _requestable(namespace: str, name: str, obj: Obj | None) -> Obj:
    """The khcheck, when a run may be requested for it now; else why not (_Refused)."""
    services = context().services
    if obj is None:
        if services.khjobs.get(namespace, name) is not None:
            raise _Refused(409, f"{namespace}/{name} is a khjob: it runs once, when it is created, not on request")
        raise _Refused(404, f"no khcheck {namespace}/{name}")
    if runnow.requested(obj) is not None:
        raise _Refused(409, f"a run of {namespace}/{name} was already requested and has not started yet")
    paused = pause.active(obj, time.time())
    if paused is not None:
        raise _Refused(409, f"{namespace}/{name} is paused until {paused.view()['until']}; it runs when the "
                            f"pause ends or when the {pause.PAUSED_UNTIL} annotation is removed")
    live = current_run(services.khstates.get(namespace, name), services.pods)
    if live is not None:
        raise _Refused(409, f"a run of {namespace}/{name} is in flight (phase {live['phase']}, pod {live['pod']})")
    return obj


def _request(namespace: str, name: str, obj: Obj, end: float) -> str:
    """Set the annotation, conditional on the khcheck not having changed; the value written."""
    api = context().services.resources
    for attempt in range(ATTEMPTS):
        value = runnow.api_value(time.time())
        try:
            api.merge_patch(KHCHECKS, namespace, name, runnow.request_patch(value, _rv(obj)),
                            timeout=max(0.3, end - time.monotonic()))
            return value
        except Conflict:
            if attempt + 1 == ATTEMPTS:
                break
            obj = _read(namespace, name, end)  # changed meanwhile: by another request, or by anything
            _requestable(namespace, name, obj)
        except NotFound as e:
            raise _Refused(404, f"no khcheck {namespace}/{name}") from e
        except ApiError as e:
            raise _api_refusal(namespace, name, e) from e
    raise _Refused(409, f"{namespace}/{name} changed while the run was requested; try again")


def _read(namespace: str, name: str, end: float) -> Obj:
    try:
        return context().services.resources.get(KHCHECKS, namespace, name, timeout=max(0.3, end - time.monotonic()))
    except NotFound as e:
        raise _Refused(404, f"no khcheck {namespace}/{name}") from e
    except ApiError as e:
        raise _api_refusal(namespace, name, e) from e


def _api_refusal(namespace: str, name: str, e: ApiError) -> _Refused:
    if isinstance(e, Invalid):  # stored before its CRD validated more: no patch passes until the spec is fixed
        return _Refused(409, f"{namespace}/{name} no longer passes its CRD's validation and cannot be annotated "
                        f"until its spec is fixed: {str(e)[:300]}")
    if is_transient(e):
        return _Refused(503, f"cannot request a run of {namespace}/{name} right now: {e}", {"Retry-After": RETRY_AFTER})
    logger.error("Run of %s/%s: the annotation patch was refused: %s", namespace, name, e)
    return _Refused(500, f"cannot request a run of {namespace}/{name}: {e}")

