"""Odd query strings and headers get 4xx, never 5xx (docs/interface.md#dashboard): the dashboard's
`since` tokens are read with ASCII digits only and a bounded length (web/dashboard/changelog.py), and a
malformed one gets a one-line 400 (web/dashboard/routes.py); every GET endpoint is tried with odd query
strings, and /metrics with an OpenMetrics `version` that is no version (prometheus-client raises on it).
`"²".isdigit()` is true and `int("²")` raises; int() of more than 4,300 digits raises too."""
from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from kuberhealthy.kube import KHCHECKS
from kuberhealthy.web.dashboard import changelog
from testbed.fakes import NS, FakeServices, khcheck

ODD_TOKENS = ["x.\u00b2.y", "x.\u00b2", "a.\u0663.b", "a.\uff11.b", "a.\u2460.b", "a.1_0.b", "a. 1.b", "a.-1.b",
              "a.+1.b", "a." + "9" * 5000 + ".b", "a.1.b.c", "..", ".", "a..b", "a.1.\u00e9", "a\x00.1.b",
              "a." + "1" * 20 + ".b", "a" * 200 + ".1.b", "a.1.b\n"]
GET_PATHS = ["/", "/metrics", "/healthz", "/readyz", "/api/checks", f"/api/checks/{NS}/probe", "/dashboard",
             "/dashboard/live", f"/dashboard/{NS}/probe", f"/dashboard/{NS}/probe/live",
             "/dashboard/_static/dashboard.js", "/favicon.ico", "/openapi.json"]
ODD_QUERIES = ["since=x.%C2%B2.y", "since=" + "9" * 5000, "namespace=%C2%B2", "namespace=%ff%fe", "q=%00&ns=%ff",
               "state=%C2%B2", "format=%00", "v=%ff", "%ff=%ff", "since=a.1.b&since=x.%C2%B2.y", "since", "&&&=&",
               "since=%00", "namespace=" + "," * 3000]


@pytest.mark.parametrize("token", ODD_TOKENS)
def test_an_odd_token_is_not_well_formed_and_names_no_generation(token: str) -> None:
    assert not changelog.well_formed(token)
    assert changelog.generation(token) == -1


def test_the_tokens_a_change_log_issues_are_well_formed_and_name_their_generation() -> None:
    log = changelog.ChangeLog()
    token = log.observe({"r1": "1"}, "kh-0")
    assert changelog.well_formed(token) and changelog.generation(token) == 1
    assert changelog.well_formed("deadbeef.7") and changelog.generation("deadbeef.7") == 7  # an older shape


@pytest.mark.parametrize("token", ODD_TOKENS)
def test_the_change_log_answers_an_odd_token_with_everything_instead_of_raising(token: str) -> None:
    log = changelog.ChangeLog()
    log.observe({"r1": "1", "r2": "1"}, "kh-0")
    delta = log.since(token)
    assert delta.full and delta.changed == ["r1", "r2"]


@pytest.mark.parametrize("token", ODD_TOKENS)
def test_an_odd_since_token_gets_a_one_line_400(client: FlaskClient, token: str) -> None:
    resp = client.get("/dashboard/live", query_string={"since": token})
    assert resp.status_code == 400, resp.get_data(as_text=True)[:300]
    text = resp.get_data(as_text=True)
    assert resp.mimetype == "text/plain" and text.count("\n") == 1 and "since" in text


def test_a_well_formed_token_from_another_process_gets_every_row(
        client: FlaskClient, fake_services: FakeServices) -> None:
    fake_services.api.put(KHCHECKS, khcheck("probe"))
    resp = client.get("/dashboard/live", query_string={"since": "0badf00d.3.0123456789abcdef"})
    assert resp.status_code == 200 and resp.get_json()["full"] is True and len(resp.get_json()["rows"]) == 1


@pytest.mark.parametrize("path", GET_PATHS)
def test_every_get_endpoint_answers_odd_query_strings_below_500(client: FlaskClient, fake_services: FakeServices,
                                                                  path: str) -> None:
    fake_services.api.put(KHCHECKS, khcheck("probe"))
    for query in ODD_QUERIES:
        resp = client.get(f"{path}?{query}")
        assert resp.status_code < 500, (path, query[:60], resp.get_data(as_text=True)[:300])


@pytest.mark.parametrize("accept", ["application/openmetrics-text; version=x",
                                    "application/openmetrics-text;version=1.x",
                                    "application/openmetrics-text;version=\u00b2".encode().decode("latin-1")])
def test_metrics_with_an_openmetrics_version_that_is_no_version_gets_a_one_line_400(
        client: FlaskClient, accept: str) -> None:
    resp = client.get("/metrics", headers={"Accept": accept})
    assert resp.status_code == 400 and resp.mimetype == "text/plain"
    assert resp.get_data(as_text=True).count("\n") == 1
    assert client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}).status_code == 200
