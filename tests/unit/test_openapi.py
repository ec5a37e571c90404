"""The OpenAPI document (web/openapi.yaml, served at /openapi.json): a valid OpenAPI 3.1 document that
describes exactly the app's routes, with the statuses the contract names. The daemon is held to it by
tests/contract/test_openapi_fuzz.py."""
from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from flask import Flask
from flask.testing import FlaskClient

from kuberhealthy.kube import KHCHECKS, KHSTATES
from kuberhealthy.web import openapi
from testbed.fakes import POD_NAME, FakeServices, khcheck, khstate_of

validator = pytest.importorskip("openapi_spec_validator", reason="a test extra: pip install -e '.[test]'")

# `/` answers every method v2 answered; the document describes GET and POST (the rest behave as POST).
UNDOCUMENTED_METHODS = {("/", "PUT"), ("/", "PATCH"), ("/", "DELETE")}


def document() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(openapi.DOCUMENT.read_text(encoding="utf-8"))
    return doc


def statuses(path: str, method: str) -> set[str]:
    return set(document()["paths"][path][method]["responses"])


def test_the_document_is_a_valid_openapi_3_1_document() -> None:
    doc = document()
    validator.validate(doc)
    assert doc["openapi"].startswith("3.1")


def test_the_document_describes_exactly_the_routes_of_the_app(app: Flask) -> None:
    routes = set()
    for rule in app.url_map.iter_rules():
        path = re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule.rule)
        routes |= {(path, m) for m in rule.methods or () if m not in ("HEAD", "OPTIONS")}
    documented = {(p, m.upper()) for p, ops in document()["paths"].items() for m in ops if m != "parameters"}
    assert documented == routes - UNDOCUMENTED_METHODS


def test_every_status_the_contract_allows_is_documented() -> None:
    assert statuses("/externalCheckStatus", "post") == {"200", "400", "401", "413", "429", "500", "503"}
    assert statuses("/check", "post") == {"200", "400", "401", "410", "413", "415", "429", "500", "503"}
    assert statuses("/api/checks/{namespace}/{name}/run", "post") == {"202", "403", "404", "409", "429", "500", "503"}
    assert statuses("/api/checks/{namespace}/{name}", "get") == {"200", "404"}
    assert statuses("/", "get") == {"200", "400"} and statuses("/readyz", "get") == {"200", "503"}
    assert statuses("/dashboard/live", "get") == {"200", "304", "400"}


def test_openapi_json_serves_the_document(client: FlaskClient) -> None:
    resp = client.get("/openapi.json")
    assert resp.status_code == 200 and resp.mimetype == "application/json"
    assert resp.get_json() == document()


def test_v3_s_routes_document_every_status_they_answer() -> None:
    assert statuses("/json", "get") == {"200", "400"}
    assert statuses("/api/run", "post") == {"202", "400", "403", "404", "409", "429", "500", "503"}
    assert statuses("/api/events", "get") == {"200", "400", "404", "429", "500", "503"}
    assert statuses("/api/logs", "get") == {"200", "400", "403", "404", "406", "409", "429", "500", "503"}
    assert statuses("/api/logs/stream", "get") == {"200", "400", "403", "404", "409", "429", "500", "503"}


def test_json_answers_match_the_documented_v3_summary(client: FlaskClient, fake_services: FakeServices) -> None:
    schema_validator = pytest.importorskip("openapi_schema_validator")
    fake_services.api.put(KHCHECKS, khcheck("dns"))
    fake_services.api.put(KHCHECKS, khcheck("dns", namespace="other"))
    fake_services.api.put(KHSTATES, khstate_of("dns", OK=False, Errors=["down"], LastRun="2024-01-01T00:00:00Z",
                                               RunDuration="2.5s", AuthoritativePod=POD_NAME))
    doc = document()
    answer = client.get("/json").get_json()
    assert len(answer["CheckDetails"]) == 2
    schema_validator.validate(answer, {"$ref": "#/components/schemas/V3Summary", "components": doc["components"]},
                              cls=schema_validator.OAS31Validator)
