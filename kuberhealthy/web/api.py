"""The JSON API: `GET /api/checks`, `GET /api/checks/<ns>/<name>`, `POST /api/checks/<ns>/<name>/run`.

Every replica answers, standbys too. Reads come from the caches through checkview.ViewCache, whose
entries keep their JSON bytes: a listing joins prepared bytes, it never serialises per request.
Answers: `{"checks": [entry, ...]}` (sorted by namespace, name, kind; a check and a job of the same
name are two entries), 404 with one line of plain text for an unknown name.

Run now: `POST /api/checks/<ns>/<name>/run` sets the run-now annotation on the khcheck and answers
202 (docs/interface.md#run-now); web/runrequest.py holds the sequence and every refusal (403, 404, 409,
429, 503), shared with v3's `POST /api/run`.
"""
from __future__ import annotations

from flask import Blueprint, Response, request

from kuberhealthy.web.answers import plain, requested_namespaces
from kuberhealthy.web.checkkinds import KHCHECK, KHJOB, Wanted
from kuberhealthy.web.entries import Built, ViewCache
from kuberhealthy.web.parts import part
from kuberhealthy.web.runrequest import request_run

bp = Blueprint("api", __name__)

RUN_KINDS = (KHCHECK, KHJOB)  # what a name is looked up as: a khjob is named only to say it is not run on request


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


@bp.route("/api/checks/<namespace>/<name>/run", methods=["POST"])
def run(namespace: str, name: str) -> Response:
    return request_run(Wanted(namespace, name, RUN_KINDS))
