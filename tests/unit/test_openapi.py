"""The OpenAPI document (web/openapi.yaml, served at /openapi.json): a valid OpenAPI 3.1 document that
describes exactly the app's routes, with the statuses the contract names. The daemon is held to it by
tests/contract/test_openapi_fuzz.py."""
from __future__ import annotations

import re
import time
from typing import Any

import pytest
import yaml
from flask import Flask
from flask.testing import FlaskClient

from kuberhealthy.kube import KHCHECKS, KHSTATES
from kuberhealthy.web import openapi
from testbed.fakes import NS, POD_NAME, FakeServices, khcheck, khstate_of

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


def test_the_timeline_documents_its_window_and_every_status_it_answers() -> None:
    assert statuses("/api/checks/{namespace}/{name}/timeline", "get") == {"200", "400", "404"}
    params = document()["paths"]["/api/checks/{namespace}/{name}/timeline"]["get"]["parameters"]
    window = document()["components"]["parameters"]["timelineWindow"]
    assert {"$ref": "#/components/parameters/timelineWindow"} in params
    assert window["required"] is True and window["schema"]["enum"] == ["24h", "7d", "30d"]


def test_check_entries_with_windows_and_timelines_match_the_documented_schemas(
        client: FlaskClient, fake_services: FakeServices) -> None:
    schema_validator = pytest.importorskip("openapi_schema_validator")
    from kuberhealthy.records import rollcodec, rollups  # noqa: PLC0415  (only here)

    rollup, now = rollups.empty(), time.time()
    for i in range(300):
        rollup = rollups.record(rollup, now - 3000 * i, "failed" if i % 3 else "ok", 0.5 + i, interval=3000)
    fake_services.api.put(KHCHECKS, khcheck("dns"))
    fake_services.api.put(KHSTATES, khstate_of("dns", OK=True, LastRun="2024-01-01T00:00:00Z", RunDuration="1s",
                                               AuthoritativePod=POD_NAME, rollups=rollcodec.serialize(rollup)))
    fake_services.api.put(KHCHECKS, khcheck("fresh"))
    components = {"components": document()["components"]}

    def valid(answer: Any, schema: str) -> None:
        schema_validator.validate(answer, {"$ref": f"#/components/schemas/{schema}", **components},
                                  cls=schema_validator.OAS31Validator)

    listing = client.get("/api/checks").get_json()
    valid(listing, "CheckList")
    assert [e["windows"]["7d"]["uptime"] is None for e in listing["checks"]] == [False, True]
    for window in ("24h", "7d", "30d"):
        for name in ("dns", "fresh"):
            valid(client.get(f"/api/checks/{NS}/{name}/timeline?window={window}").get_json(), "Timeline")
