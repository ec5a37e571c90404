"""Cross-origin protection of run now (web/origin.py, docs/interface.md#run-now): Go 1.25's
CrossOriginProtection rules, the refusal of form-typed bodies, config trustedOrigins (validated at load,
applied on reload), and the run route over the in-memory fakes: a refused request sets no annotation and
raises no Event; the dashboard's own same-origin request and curl still get 202."""
from __future__ import annotations

import dataclasses

import pytest
from flask.testing import FlaskClient

from kuberhealthy.base import config as kh_config
from kuberhealthy.base.errors import ConfigError
from kuberhealthy.kube import KHCHECKS
from kuberhealthy.records import runnow
from kuberhealthy.web import origin
from testbed.fakes import NS, FakeServices, khcheck

HOST = "kh.example.com:8080"
TRUSTED = frozenset({"https://dash.example.com"})
RUN = f"/api/checks/{NS}/probe/run"


def verdict(method: str = "POST", trusted: frozenset[str] = TRUSTED, **headers: str) -> str | None:
    named = {k.replace("_", "-").title(): v for k, v in headers.items()}
    return origin.cross_origin(method, {"Host": HOST, **named}, trusted)


# --- the rules -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS", "get"])
def test_safe_methods_always_pass_whatever_the_headers_say(method: str) -> None:
    assert verdict(method, sec_fetch_site="cross-site", origin="http://evil.example") is None


@pytest.mark.parametrize("site", ["same-origin", "none", "Same-Origin"])
def test_a_same_origin_or_user_typed_request_passes_by_sec_fetch_site(site: str) -> None:
    assert verdict(sec_fetch_site=site, origin="http://evil.example") is None


@pytest.mark.parametrize("site", ["cross-site", "same-site", "anything"])
def test_any_other_sec_fetch_site_is_refused_even_with_a_matching_origin(site: str) -> None:
    reason = verdict(sec_fetch_site=site, origin=f"http://{HOST}")
    assert reason is not None and site.lower() in reason


def test_without_sec_fetch_site_an_origin_must_name_the_host_whatever_the_scheme() -> None:
    assert verdict(origin=f"http://{HOST}") is None
    assert verdict(origin=f"https://{HOST.upper()}") is None  # Host carries no scheme: Go compares hosts
    for other in ("http://evil.example", "http://kh.example.com", "http://kh.example.com:8081", "garbage", "http://["):
        reason = verdict(origin=other)
        assert reason is not None and "trustedOrigins" in reason, other


def test_origin_null_is_refused_even_when_the_request_has_no_host() -> None:
    assert verdict(origin="null") is not None
    assert origin.cross_origin("POST", {"Origin": "null"}, TRUSTED) is not None


def test_a_request_with_neither_header_passes_as_curl_and_scripts_send_it() -> None:
    assert verdict() is None
    assert origin.cross_origin("POST", {}, frozenset()) is None


def test_a_trusted_origin_passes_with_or_without_sec_fetch_site() -> None:
    assert verdict(origin="https://dash.example.com") is None
    assert verdict(origin="https://DASH.example.com", sec_fetch_site="cross-site") is None
    assert verdict(origin="https://dash.example.com", sec_fetch_site="cross-site", trusted=frozenset()) is not None
    assert verdict(origin="http://dash.example.com", sec_fetch_site="cross-site") is not None  # another scheme


@pytest.mark.parametrize("ctype", ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                                   "multipart/form-data; boundary=x", " Multipart/Form-Data"])
def test_the_body_types_a_form_or_an_unpreflighted_fetch_can_send_are_refused(ctype: str) -> None:
    assert origin.form_body(ctype) is not None


@pytest.mark.parametrize("ctype", ["", "application/json", "application/merge-patch+json"])
def test_no_body_type_or_json_is_fine(ctype: str) -> None:
    assert origin.form_body(ctype) is None


# --- config trustedOrigins ----------------------------------------------------------------------------------

def test_trusted_origins_default_to_none_and_are_kept_in_the_form_browsers_send() -> None:
    assert kh_config.from_mapping({}).trusted_origins == frozenset()
    got = kh_config.from_mapping({"trustedOrigins": ["https://KH.example.com", " http://10.0.0.1:8080 "]})
    assert got.trusted_origins == {"https://kh.example.com", "http://10.0.0.1:8080"}


@pytest.mark.parametrize("value", ["https://kh.example.com", ["https://kh.example.com/"], ["kh.example.com"],
                                   ["null"], ["ftp://kh.example.com"], ["https://kh.example.com:99999"],
                                   ["https://kh.example.com?x=1"], ["https://user@kh.example.com"], [42]])
def test_a_bad_trusted_origin_stops_start_up_naming_the_key(value: object) -> None:
    with pytest.raises(ConfigError, match="trustedOrigins"):
        kh_config.from_mapping({"trustedOrigins": value})


# --- the run route ------------------------------------------------------------------------------------------

def _annotated(services: FakeServices) -> bool:
    obj = services.api.get(KHCHECKS, NS, "probe")
    return runnow.RUN_NOW_ANNOTATION in (obj["metadata"].get("annotations") or {})


@pytest.fixture
def probe(fake_services: FakeServices) -> FakeServices:
    fake_services.api.put(KHCHECKS, khcheck("probe"))
    return fake_services


CROSS_SITE = {
    "Sec-Fetch-Site cross-site": ({"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}, None, None),
    "Origin evil, no Sec-Fetch-Site": ({"Origin": "http://evil.example"}, None, None),
    "Origin null": ({"Origin": "null"}, None, None),
    "text/plain body": ({}, "text/plain", b'{"x": 1}'),
    "form body": ({}, "application/x-www-form-urlencoded", b"a=1"),
    "empty form body": ({}, "application/x-www-form-urlencoded", b""),
    "multipart body": ({}, "multipart/form-data; boundary=b", b"--b--\r\n"),
    "same-origin but a text/plain body": ({"Sec-Fetch-Site": "same-origin"}, "text/plain", b"x"),
}


@pytest.mark.parametrize(("headers", "ctype", "body"), CROSS_SITE.values(), ids=CROSS_SITE.keys())
def test_a_cross_site_run_request_gets_a_one_line_403_and_sets_nothing(
        client: FlaskClient, probe: FakeServices, headers: dict[str, str], ctype: str | None,
        body: bytes | None) -> None:
    resp = client.post(RUN, headers=headers, content_type=ctype, data=body)
    assert resp.status_code == 403 and resp.mimetype == "text/plain"
    text = resp.get_data(as_text=True)
    assert text.endswith("\n") and text.count("\n") == 1 and len(text) > 10
    assert not _annotated(probe) and probe.events.recorded == []


def test_the_dashboards_own_button_and_curl_get_202(client: FlaskClient, probe: FakeServices) -> None:
    # What dashboard.js sends: a same-origin fetch, POST, no body, Accept: application/json.
    page = client.post(RUN, headers={"Sec-Fetch-Site": "same-origin", "Origin": "http://localhost",
                                     "Accept": "application/json"})
    assert page.status_code == 202, page.get_data(as_text=True)
    assert _annotated(probe)
    probe.api.merge_patch(KHCHECKS, NS, "probe", {"metadata": {"annotations": {runnow.RUN_NOW_ANNOTATION: None}}})
    assert not _annotated(probe)  # as the leader takes the request up
    curl = client.post(RUN)  # curl -X POST: no Origin, no Sec-Fetch-Site, no body
    assert curl.status_code == 202, curl.get_data(as_text=True)
    assert [r[0] for r in probe.events.recorded] == ["CheckRunRequested", "CheckRunRequested"]


def test_an_old_browser_on_the_same_host_passes_by_origin(client: FlaskClient, probe: FakeServices) -> None:
    resp = client.post(RUN, headers={"Origin": "http://localhost"})  # the test client's Host is localhost
    assert resp.status_code == 202, resp.get_data(as_text=True)


def test_trusted_origins_apply_on_reload_without_a_restart(client: FlaskClient, probe: FakeServices) -> None:
    cross = {"Sec-Fetch-Site": "cross-site", "Origin": "https://dash.example.com"}
    assert client.post(RUN, headers=cross).status_code == 403
    probe.config = dataclasses.replace(probe.config, trusted_origins=frozenset({"https://dash.example.com"}))
    assert client.post(RUN, headers=cross).status_code == 202
    assert client.post(RUN, headers={**cross, "Origin": "https://other.example.com"}).status_code == 403


def test_with_the_run_api_off_a_cross_site_request_gets_the_same_404_as_an_unknown_path(
        client: FlaskClient, probe: FakeServices) -> None:
    probe.config = dataclasses.replace(probe.config, enable_run_api=False)
    resp = client.post(RUN, headers={"Sec-Fetch-Site": "cross-site"})
    assert resp.status_code == 404
    assert resp.get_data() == client.post("/no/such/path", headers={"Sec-Fetch-Site": "cross-site"}).get_data()


def test_reads_of_the_api_stay_open_to_cross_site_pages(client: FlaskClient, probe: FakeServices) -> None:
    assert client.get("/api/checks", headers={"Sec-Fetch-Site": "cross-site", "Origin": "null"}).status_code == 200
