"""The JSON API: `GET /api/checks`, `GET /api/checks/<ns>/<name>`, `GET /api/checks/<ns>/<name>/timeline`,
`POST /api/checks/<ns>/<name>/run`.

Every replica answers, standbys too. Reads come from the caches through entries.ViewCache, whose
entries keep their JSON bytes: a listing joins prepared bytes, it never serialises per request.
Answers: `{"checks": [entry, ...]}` (sorted by namespace, name, kind; a check, a job and a HealthCheck
of the same name are entries of their own, told apart by `kind`), 404 with one line of plain text for
an unknown name. `?kind=check|job|healthcheck` (comma-separated for several) keeps those kinds; an
unknown kind matches nothing. A name may be given as a key `/` shows: `hc:<name>` names the HealthCheck
of a same-named pair.

Timeline: `GET /api/checks/<ns>/<name>/timeline?window=24h|7d|30d` answers `{namespace, name, window,
buckets}`, the buckets of the check's rollup oldest first (web/uptime.py: hourly for 24h and 7d, per UTC
day for 30d); another or no window is a 400 naming the three. Of a check and a job of one name (one
state, so one rollup) the check is named; `hc:<name>` or `?kind=healthcheck` names the HealthCheck.

Run now: `POST /api/checks/<ns>/<name>/run[?kind=]` sets the run-now annotation on the khcheck (or
HealthCheck: a name no khcheck has, `hc:<name>`, or `?kind=healthcheck`) and answers 202
(docs/interface.md#run-now); web/runrequest.py holds the sequence and every refusal (403, 404, 409,
429, 503), shared with v3's `POST /api/run`.
"""
from __future__ import annotations

import json

from flask import Blueprint, Response, request

from kuberhealthy.records.checkspec import KIND_HEALTHCHECK
from kuberhealthy.web.answers import plain, requested_kinds, requested_namespaces
from kuberhealthy.web.checkkinds import KHCHECK, KHJOB, CheckKinds, Wanted
from kuberhealthy.web.entries import CHECK, HEALTHCHECK, JOB, Built, ViewCache
from kuberhealthy.web.parts import part
from kuberhealthy.web.runrequest import request_run
from kuberhealthy.web.uptime import TIMELINES, Uptime

bp = Blueprint("api", __name__)

# What a name is looked up as, in order: a khjob is named only to say it is not run on request; a
# HealthCheck answers a name no khcheck has (or that of a migrated khcheck: web/shown.py).
RUN_KINDS = (KHCHECK, KHJOB, KIND_HEALTHCHECK)
TIMELINE_PREFERENCE = (CHECK, HEALTHCHECK, JOB)  # whose timeline a name without a kind gives


def _listing(built: list[Built]) -> Response:
    return Response(b'{"checks":[' + b",".join(b.body for b in built) + b"]}", content_type="application/json")


def _not_found(namespace: str, name: str, kinds: tuple[str, ...] | None) -> Response:
    return plain(404, f"no {'check' if kinds is None else ' or '.join(kinds)} {namespace}/{name}")


def _named(name: str) -> tuple[str, tuple[str, ...] | None]:
    """The name without a kind's prefix, and the entry kinds it (and `?kind=`) asks for."""
    return part(CheckKinds).named_entries(name, requested_kinds(request.args.get("kind", "")))


@bp.route("/api/checks", methods=["GET", "HEAD"])
def checks() -> Response:
    raw = request.args.get("namespace", "")
    return _listing(part(ViewCache).entries(requested_namespaces(raw) if raw else None,
                                            requested_kinds(request.args.get("kind", ""))))


@bp.route("/api/checks/<namespace>/<name>", methods=["GET", "HEAD"])
def one(namespace: str, name: str) -> Response:
    bare, kinds = _named(name)
    built = part(ViewCache).one(namespace, bare, kinds)
    if not built:
        return _not_found(namespace, name, kinds)
    return _listing(built)


@bp.route("/api/checks/<namespace>/<name>/timeline", methods=["GET", "HEAD"])
def timeline(namespace: str, name: str) -> Response:
    window = request.args.get("window", "")
    if window not in TIMELINES:
        return plain(400, f"window must be one of {', '.join(TIMELINES)} (hourly buckets for 24h and 7d, "
                          "daily for 30d)")
    bare, kinds = _named(name)
    built = part(ViewCache).one(namespace, bare, kinds)
    if not built:
        return _not_found(namespace, name, kinds)
    entry = min(built, key=lambda b: TIMELINE_PREFERENCE.index(str(b.view["kind"]))).view
    buckets = part(Uptime).timeline(str(entry["kind"]), namespace, bare, window)
    body = {"namespace": namespace, "name": bare, "window": window, "buckets": buckets}
    return Response(json.dumps(body, separators=(",", ":")), content_type="application/json")


@bp.route("/api/checks/<namespace>/<name>/run", methods=["POST"])
def run(namespace: str, name: str) -> Response:
    bare, kinds = _named(name)
    if kinds is None:
        return request_run(Wanted(namespace, bare, RUN_KINDS))
    return request_run(Wanted(namespace, bare, part(CheckKinds).names_of_entries(kinds)))
