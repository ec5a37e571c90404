"""The running daemon against its own OpenAPI document (`GET /openapi.json`), fuzzed with schemathesis.

A real daemon (the console script, gunicorn) on the test bed, leading, with two checks that have run
(one OK, one failing) so the JSON API and the dashboard have something to say. Schemathesis generates
requests for every documented operation, valid ones and (where the schema constrains them) invalid
ones, and every answer must be documented for its operation, never a 5xx, and match its schema
(status, content type, headers, body). Nothing generated can be an accepted report (no request comes
from a checker pod) or a run request for a real check, so afterwards no khstate has changed and no
khcheck carries a run-now request. Bounded: a few dozen examples per operation (reports fewer: each
unknown caller waits briefly for the pod cache), well under a minute in all.

Free-text query parameters are generated as odd strings on purpose (malformed query strings
get 4xx, never 5xx): the fuzz loads the served document and marks each of them with a
string format whose strategy makes token-shaped values with non-ASCII digits (`x.².y`: "²".isdigit() is
true, int("²") raises), signs, underscores, long digit runs, NULs and plain random text.
"""
from __future__ import annotations

import string
from typing import Any
from urllib.parse import quote

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khc, khcheck, khs
from testbed.cluster.objects import checker_pods
from testbed.pytest_plugin import Daemons
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is a test extra: pip install -e '.[test]'")
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]
EXAMPLES = 30  # per operation and generation mode
REPORT_EXAMPLES = 8  # per mode: each unknown caller costs the report handler's short wait for its pod


V3_NAMED_BY_QUERY = ("/api/events", "/api/logs", "/api/logs/stream")  # reads of one check, named in the query
ODD_FORMAT = "kh-odd-query"  # a generation hint only: the fuzz marks free-text query parameters with it
ODD_PARTS = ["\u00b2", "\u2460", "\u0663", "\uff11", "-1", "+1", " 1", "1_0", "0x1f", "", "0", "9" * 400, "\x00",
             "\u00e9"]
ALNUM = st.text(alphabet=string.ascii_letters + string.digits, max_size=12)
ODD_QUERY = st.one_of(
    st.tuples(ALNUM, st.sampled_from(ODD_PARTS), ALNUM).map(".".join),  # `<epoch>.<generation>.<digest>`-like
    st.lists(st.one_of(ALNUM, st.sampled_from(ODD_PARTS)), max_size=5).map(".".join),
    st.text(max_size=40),
).filter(lambda v: len(quote(v)) <= 1200)  # three of them stay under gunicorn's 4,094-byte request line
schemathesis.openapi.format(ODD_FORMAT, ODD_QUERY)


def _odd_queries(doc: dict[str, Any]) -> dict[str, Any]:
    """The document with every free-text query parameter (a string, no enum or pattern) marked ODD_FORMAT."""
    params = [p for item in doc["paths"].values() for op in item.values() if isinstance(op, dict)
              for p in op.get("parameters", [])]
    for p in [*params, *doc["components"]["parameters"].values()]:
        schema = p.get("schema") or {}
        if p.get("in") == "query" and schema.get("type") == "string" and not {"enum", "pattern"} & set(schema):
            p["schema"] = {**schema, "format": ODD_FORMAT}
    return doc


def _examples(path: str) -> int:
    return REPORT_EXAMPLES if path == "/externalCheckStatus" else EXAMPLES


def _states(cluster: TestCluster, ns: str) -> dict[str, str]:
    items = cluster.request("GET", khs(ns))["items"]
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in items}


def _annotations(cluster: TestCluster, ns: str) -> dict[str, dict[str, str]]:
    items = cluster.request("GET", khc(ns))["items"]
    return {o["metadata"]["name"]: dict(o["metadata"].get("annotations") or {}) for o in items}


def _settled(url: str, names: set[str]) -> bool:
    checks: list[dict[str, Any]] = requests.get(url + "/api/checks", timeout=5).json()["checks"]
    done = {c["name"] for c in checks if c["state"] != "never-run" and c["currentRun"] is None}
    return names <= done


def _fuzz(operation: Any, mode: Any, url: str, session: requests.Session, statuses: set[int],
          path: dict[str, str] | None = None, query: dict[str, str] | None = None) -> None:
    """Up to _examples() requests for one operation in one generation mode (and with these path and
    query parameters, if given), each answer validated."""
    strategy = operation.as_strategy(generation_mode=mode, path_parameters=path, query=query)

    @settings(max_examples=_examples(operation.path), deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def fuzz(case: Any) -> None:
        statuses.add(case.call_and_validate(base_url=url, session=session, checks=CHECKS, timeout=10).status_code)

    try:
        fuzz()
    except Unsatisfiable:  # negative mode: the operation has nothing that could be made invalid
        assert mode == GenerationMode.NEGATIVE


def test_every_generated_request_gets_a_documented_answer_and_rejected_ones_change_nothing(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, daemons: Daemons) -> None:
    for name, image in (("fuzz-ok", "kh-sim/ok"), ("fuzz-fail", "kh-sim/fail")):
        cluster.request("POST", khc(namespace), khcheck(name, image, interval="1h", timeout="20s"))
    daemon = daemons("kh-fuzz-0", {"targetNamespace": namespace, "enableForceMaster": True,
                                   "reportRateLimit": 10000, "reportRateBurst": 100000, "exposeLogs": True})
    daemon.start().wait_serving()
    wait_for(lambda: _settled(daemon.url, {"fuzz-ok", "fuzz-fail"}), timeout=60, interval=0.2,
             what="both checks to have run once")
    states, annotations = _states(cluster, namespace), _annotations(cluster, namespace)
    pods = {name: checker_pods(cluster, namespace, name)[-1]["metadata"]["name"] for name in ("fuzz-ok", "fuzz-fail")}

    served = requests.get(daemon.url + "/openapi.json", timeout=10).json()
    schema = schemathesis.openapi.from_dict(_odd_queries(served))
    session = requests.Session()
    answered: dict[str, set[int]] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        statuses = answered.setdefault(operation.label, set())
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _fuzz(operation, mode, daemon.url, session, statuses)
        if "{name}" in operation.path and operation.method.upper() == "GET":  # the real checks, too
            for name in ("fuzz-ok", "fuzz-fail"):
                _fuzz(operation, GenerationMode.POSITIVE, daemon.url, session, statuses,
                      {"namespace": namespace, "name": name})
        if operation.path in V3_NAMED_BY_QUERY:  # the real checks (and their pods), too
            for name in ("fuzz-ok", "fuzz-fail"):
                query = {"namespace": namespace, "healthcheck": name}
                if operation.path.startswith("/api/logs"):
                    query["pod"] = pods[name]
                _fuzz(operation, GenerationMode.POSITIVE, daemon.url, session, statuses, query=query)
    assert 200 in answered["GET /api/checks/{namespace}/{name}"] and 400 in answered["POST /externalCheckStatus"]
    assert 400 in answered["GET /dashboard/live"], "no odd since token was generated"  # the class is reached
    assert 403 in answered["POST /api/checks/{namespace}/{name}/run"], "no cross-site run request was generated"
    assert 403 in answered["POST /api/run"] and 400 in answered["POST /api/run"]
    assert 200 in answered["GET /json"] and 200 in answered["GET /api/events"]
    timeline = answered["GET /api/checks/{namespace}/{name}/timeline"]
    assert 200 in timeline and 400 in timeline and 404 in timeline, timeline
    assert 200 in answered["GET /api/logs"] and 200 in answered["GET /api/logs/stream"]
    token = session.get(daemon.url + "/dashboard/live", timeout=5).json()["token"]
    assert session.get(f"{daemon.url}/dashboard/live?since={token}", headers={"If-None-Match": f'"{token}"'},
                       timeout=5).status_code == 304  # the page's own poll, documented as such
    assert _states(cluster, namespace) == states, "a rejected request changed a khstate"
    assert _annotations(cluster, namespace) == annotations, "a generated request asked for a run"
    assert "Traceback" not in daemon.log(), daemon.log()[-4000:]
