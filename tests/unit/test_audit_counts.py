"""The benches' audit-log counts (bench/scaleprobe.py): one scan for requests by kind and for the answers
outside 2xx, counted since a mark across the API server's log rotation (bench.scale and bench.saturate)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.scaleprobe import audit_answers, audit_mark, audit_since, count_audit

T0 = 1_796_119_200.0  # 2026-12-01T10:00:00Z
AGENT = "kuberhealthy/"


def entry(verb: str, resource: str, code: int = 200, second: int = 1, agent: str = "kuberhealthy/1.0",
          stage: str = "ResponseComplete", subresource: str = "") -> str:
    ref: dict[str, Any] = {"resource": resource}
    if subresource:
        ref["subresource"] = subresource
    return json.dumps({"stage": stage, "verb": verb, "userAgent": agent, "objectRef": ref,
                       "responseStatus": {"code": code},
                       "requestReceivedTimestamp": f"2026-12-01T10:00:{second:02d}.000000Z"},
                      separators=(",", ":")) + "\n"


def test_requests_are_counted_by_kind_and_answers_outside_2xx_by_code(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(entry("update", "khstates") + entry("create", "pods", subresource="eviction", code=429)
                   + entry("watch", "pods") + entry("get", "pods", stage="RequestReceived")
                   + entry("get", "pods", agent="kh-sim-kubelet") + entry("get", "leases", code=404, second=59))
    assert count_audit(log, 0, T0, T0 + 30, AGENT) == {"update khstates": 1, "create pods/eviction": 1}
    assert audit_answers(log, 0, T0, T0 + 60, AGENT) == {"create pods/eviction 429": 1, "get leases 404": 1}


def test_counting_from_a_mark_takes_only_what_was_written_after_it(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(entry("get", "pods"))
    mark = audit_mark(log)
    with open(log, "a") as f:
        f.write(entry("delete", "pods"))
    assert audit_since(count_audit, log, mark, T0, T0 + 60, AGENT) == {"delete pods": 1}


def test_a_rotation_during_the_window_loses_no_request(tmp_path: Path) -> None:
    """At its size limit the API server renames audit.log to audit-<time>.log (the same inode) and begins a
    new audit.log: the count goes on in the new file."""
    log = tmp_path / "audit.log"
    log.write_text(entry("get", "pods"))
    mark = audit_mark(log)
    with open(log, "a") as f:
        f.write(entry("update", "khstates"))
    log.rename(tmp_path / "audit-2026-12-01T10-00-30.000.log")
    log.write_text(entry("create", "pods") + entry("update", "khstates"))
    assert audit_since(count_audit, log, mark, T0, T0 + 60, AGENT) == {"update khstates": 2, "create pods": 1}
