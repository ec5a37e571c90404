"""`make faults --mix`: the fault scenarios with half of the checks HealthChecks (Kuberhealthy v3's kind).

MixFaultBed is the fault bed of testbed/faults with its checks split: the first half khchecks as there
(c01, c02, ...), the other half HealthChecks (h01, h02, ...; apiVersion kuberhealthy.github.io/v2, spec
{runInterval, timeout, podSpec: {spec: <the same pod spec>}}) with the same checker, delays, interval and
timeout, in the same namespace. A HealthCheck's result is its status, written through the status
subresource; the test bed's audit log records those writes with their bodies, and MixAuditTail reads
them as the bed's AuditTail reads khstate writes, so the verdict's invariants (no false alarm, a good
run after the fault, one live pod per check) hold each HealthCheck to the same rules as each khcheck.
False alarms are counted per kind (by_kind).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from testbed.clients.formats import parse_rfc3339
from testbed.cluster.builders import container
from testbed.faults.faultbed import BedSettings, FaultBed
from testbed.faults.observe import AuditTail, Write

HC_GROUP = "kuberhealthy.github.io"
HC_API_VERSION = f"{HC_GROUP}/v2"
HC_PREFIX = "h"
def healthcheck(name: str, image: str, interval: str, timeout: str, env: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": HC_API_VERSION, "kind": "HealthCheck", "metadata": {"name": name},
            "spec": {"runInterval": interval, "timeout": timeout,
                     "podSpec": {"spec": {"containers": [container(image, env=env)]}}}}


def kind_of(check: str) -> str:
    """`healthcheck` or `khcheck`, by the bed's names (`<ns>/hNN` or `<ns>/cNN`)."""
    return "healthcheck" if check.split("/", 1)[-1].startswith(HC_PREFIX) else "khcheck"


class MixAuditTail(AuditTail):
    """AuditTail that also reads a HealthCheck's status writes as results: ok, errors, lastRunUnix; the run's
    uuid from its run binding. A status with no result yet (no lastRunUnix, no errors) is no failure."""

    def __init__(self, path: Path, namespace: str, offset: int = 0) -> None:
        super().__init__(path, namespace, offset)
        self._hc: dict[str, dict[str, Any]] = {}

    def _write_of(self, ev: dict[str, Any]) -> Write | None:
        ref = ev.get("objectRef") or {}
        if ref.get("resource") != "healthchecks":
            return super()._write_of(ev)
        code = int((ev.get("responseStatus") or {}).get("code") or 0)
        body = ev.get("requestObject")
        if (ref.get("namespace") != self._ns or ev.get("verb") not in ("create", "update", "patch")
                or ev.get("stage") != "ResponseComplete" or not 200 <= code <= 299 or not isinstance(body, dict)):
            return None
        name = ref.get("name") or (body.get("metadata") or {}).get("name")
        if not name or (ref.get("subresource") != "status" and "status" not in body):
            return None
        check = f"{self._ns}/{name}"
        status = dict(self._hc.get(check) or {})
        status.update(body.get("status") or {})
        self._hc[check] = status
        errors = status.get("errors") or []
        errs = tuple(str(e) for e in errors) if isinstance(errors, list) else (str(errors),)
        last_run = str(status.get("lastRunUnix") or "")
        last_run = "" if last_run == "0" else last_run
        binding = status.get("runBinding") or {}
        at = parse_rfc3339(str(ev.get("stageTimestamp") or ev.get("requestReceivedTimestamp"))).timestamp()
        return Write(at=at, check=check, verb=str(ev.get("verb")), user_agent=str(ev.get("userAgent") or ""),
                     ok=bool(status.get("ok", False)) or not (last_run or errs), errors=errs, last_run=last_run,
                     uuid=str(binding.get("uuid") or status.get("currentUUID") or ""),
                     reported_uuid=str(binding.get("finishedUUID") or ""))


class MixFaultBed(FaultBed):
    """A FaultBed whose checks are half khchecks, half HealthChecks (see the module docstring)."""

    def __init__(self, workdir: Path, settings: BedSettings | None = None, namespace: str = "faults") -> None:
        super().__init__(workdir, settings, namespace)
        hcs = self.s.checks // 2
        self.hc_checks = [f"{namespace}/{HC_PREFIX}{i:02d}" for i in range(1, hcs + 1)]
        self.checks = self.checks[:self.s.checks - hcs]  # the khchecks FaultBed.start creates

    def start(self, warmup_timeout: float = 120.0) -> MixFaultBed:
        t0 = time.monotonic()
        super().start(warmup_timeout)
        assert self.cluster is not None
        self.audit = MixAuditTail(self.cluster.audit_log, self.ns)
        for i, check in enumerate(self.hc_checks):
            delay = self.s.delays[i % len(self.s.delays)]
            self.cluster.request("POST", f"/apis/{HC_API_VERSION}/namespaces/{self.ns}/healthchecks",
                                 healthcheck(check.split("/", 1)[1], "kh-sim/slow", self.s.interval, self.s.timeout,
                                             env={"SIM_DELAY": str(delay)}))
        self.checks = self.checks + self.hc_checks
        self.mark("HealthChecks created")
        missing = self.wait_good_runs(self.t_start, max(30.0, warmup_timeout - (time.monotonic() - t0)))
        if missing:
            raise RuntimeError(f"warm-up: no good run within {warmup_timeout}s for {missing}; see {self.workdir}")
        self.mark("warm-up done: every HealthCheck has a good run too")
        return self
