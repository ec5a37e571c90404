"""Thousands of generated report requests: none may crash the handler (5xx) or change any khstate.

The only pod that could report belongs to a previous run, so every request must be refused, however
well-formed; the bodies and headers are generated to reach every refusal path (body rules, caller
lookup by header and by address, pod validation, the stale-run check at store time).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from typing import Any

from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kuberhealthy.daemon.services import Services
from kuberhealthy.web import create_app
from kuberhealthy.web.report.body import MAX_BODY
from testbed.cluster.loopback import pod_ip
from testbed.daemons.inprocess import PodMaker, rv, wait_cached

KEYS = ["OK", "ok", "Ok", "oK", "Errors", "errors", "ERRORS", "eRrOrS", "o\u212a", "error", "Error", "extra", ""]
json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=4),
                           max_leaves=12)
errors_lists = st.lists(st.sampled_from(["", " ", "\t\n", "\u3000", "real error", "<b>&", "é"])
                        | st.text(max_size=30), max_size=4)
reports = st.fixed_dictionaries({}, optional={"OK": st.booleans() | json_scalars, "Errors": errors_lists
                                              | st.none() | json_values}).map(lambda d: json.dumps(d).encode())
mixed_case = st.builds(lambda k1, v1, k2, v2: json.dumps({k1: v1, k2: v2}).encode(),
                       st.sampled_from(KEYS), st.booleans() | json_values,
                       st.sampled_from(KEYS), errors_lists | json_values)
raw_bytes = st.binary(max_size=200)
json_text = json_values.map(lambda v: json.dumps(v).encode())
broken = st.builds(lambda b, cut: b[: max(0, len(b) - cut)], reports, st.integers(1, 5))
specials = st.sampled_from([b"", b"null", b"[]", b"{}", b"NaN", b'{"OK": NaN}', b"[" * 5000, b"\xef\xbb\xbf{}",
                            b'{"OK": true}\n{"OK": false}', b'{"OK": false, "Errors": ["\\ud800"]}',
                            b"x" * (MAX_BODY + 1)])
bodies = reports | mixed_case | raw_bytes | json_text | broken | specials
header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"),
                      max_size=70)


class OutcomeCounter(logging.Handler):
    """Collects the handler's one-line outcomes, to show which refusal paths the examples reached."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def count(self, fragment: str) -> int:
        return sum(fragment in m for m in self.messages)


def test_no_generated_report_crashes_the_handler_or_changes_a_khstate(maker: PodMaker,
                                                                      services: Services) -> None:
    current, stale = str(uuid.uuid4()), str(uuid.uuid4())
    before = maker.khstate("target", current)
    pod = maker.pod("target", stale)  # a leftover pod of an earlier run: validates, but may not store
    bare = maker.pod("bare", str(uuid.uuid4()), annotate=False)
    wait_cached(services, maker.namespace, "target")
    # Hundreds of requests from a few addresses: the per-source rate limit is not what is fuzzed here.
    services.config = dataclasses.replace(services.config, report_rate_limit=1e9, report_rate_burst=10**9)
    app: Flask = create_app(services, caller_wait=0)
    client = app.test_client()
    headers_choice = st.sampled_from([None, "", stale, current, bare.run_uuid]) | header_text
    addresses = st.sampled_from([pod.ip, bare.ip, pod_ip(), "::1", "[::ffff:" + pod.ip + "]", "nonsense", ""])
    paths = st.sampled_from(["/externalCheckStatus"] * 9 + ["/"])
    seen: dict[int, int] = {}

    @settings(max_examples=10_000, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(body=bodies, run_header=headers_choice, address=addresses, path=paths)
    def throw(body: bytes, run_header: str | None, address: str, path: str) -> None:
        headers: dict[str, Any] = {"Content-Type": "application/json"}
        if run_header is not None:
            headers["kh-run-uuid"] = run_header
        resp = client.post(path, data=body, headers=headers, environ_base={"REMOTE_ADDR": address})
        seen[resp.status_code] = seen.get(resp.status_code, 0) + 1
        assert resp.status_code < 500, (resp.status_code, resp.get_data(as_text=True))
        if path == "/externalCheckStatus":
            assert resp.status_code in (400, 413), resp.get_data(as_text=True)
            text = resp.get_data(as_text=True)
            assert text.endswith("\n") and len(text.splitlines()) == 1

    outcomes = OutcomeCounter()
    report_logger = logging.getLogger("kuberhealthy.web.report.routes")
    report_logger.addHandler(outcomes)
    old_level = report_logger.level
    report_logger.setLevel(logging.INFO)
    try:
        throw()
    finally:
        report_logger.removeHandler(outcomes)
        report_logger.setLevel(old_level)
    assert sum(seen.values()) >= 10_000
    # every refusal path was reached, down to the stale-run check made when storing
    for fragment in ("stale-run", "without any error strings", "blank error string", "OK true with error",
                     "Failed to unmarshal", "failed to find a pod", "check name annotation", "(413, too-large)"):
        assert outcomes.count(fragment) > 0, (fragment, outcomes.messages[:5])
    assert rv(maker.get_khstate("target")) == rv(before)
    assert rv(services.khstates.get(maker.namespace, "target") or {"metadata": {"resourceVersion": ""}}) == rv(before)
