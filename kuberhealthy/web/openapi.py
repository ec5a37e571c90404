"""`GET /openapi.json`: the OpenAPI 3 description of every HTTP endpoint, with every status the
contract allows for it (docs/interface.md#http-endpoints).

The document is written by hand in web/openapi.yaml (package data) and served as JSON. It is checked
by tests/unit/test_openapi.py (a valid OpenAPI 3.1 document that names every route of the app) and
tests/contract/test_openapi_fuzz.py (schemathesis against a running daemon: no undocumented status,
no 5xx, answers that match their schemas, rejected requests that change nothing).
"""
from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import yaml
from flask import Blueprint, Response

bp = Blueprint("openapi", __name__)

DOCUMENT = Path(__file__).parent / "openapi.yaml"


@cache
def document_bytes() -> bytes:
    """The document as JSON (parsed once: it ships with the package and never changes at run time)."""
    return json.dumps(yaml.safe_load(DOCUMENT.read_text(encoding="utf-8")), indent=1).encode()


@bp.route("/openapi.json", methods=["GET", "HEAD"])
def openapi_json() -> Response:
    return Response(document_bytes(), content_type="application/json",
                    headers={"Cache-Control": "public, max-age=300", "Access-Control-Allow-Origin": "*"})
