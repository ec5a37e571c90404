"""What the attacks aim at: which report endpoint the report scenarios ("flood", and "slow"'s stalled bodies)
attack (v2's `/externalCheckStatus` by default, v3's `/check` with `--report-path /check`), and which kind
of check the genuine checks are (khchecks by default; HealthChecks, Kuberhealthy v3's kind, with
`--kind healthcheck`, whose reports then go to `/check` as their checker pods are told). Both endpoints and
both kinds run the same rules, so each target must hold on either.

A check is created with create_check() and its result read with state_spec(): a khstate's spec, or for a
HealthCheck its status in a khstate's names (OK, Errors, uuid, LastRun), {} before its first result."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from testbed.clients.rawhttp import REPORT_PATH, REPORT_PATHS
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import container, khc, khcheck
from testbed.cluster.objects import get_or_none
from testbed.cluster.objects import state_spec as khstate_spec

KHCHECK, HEALTHCHECK = "khcheck", "healthcheck"
CHECK_KINDS = (KHCHECK, HEALTHCHECK)
V3_REPORT_PATH = "/check"
HC_API_VERSION = "kuberhealthy.github.io/v2"

_chosen = [REPORT_PATH]
_kind = [KHCHECK]


def choose(path: str) -> None:
    if path not in REPORT_PATHS:
        raise ValueError(f"not a report endpoint: {path!r} (one of {', '.join(REPORT_PATHS)})")
    _chosen[0] = path


def choose_kind(kind: str) -> None:
    if kind not in CHECK_KINDS:
        raise ValueError(f"not a kind of check: {kind!r} (one of {', '.join(CHECK_KINDS)})")
    _kind[0] = kind


def report_path() -> str:
    return _chosen[0]


def kind() -> str:
    return _kind[0]


def label(scenario: str) -> str:
    """The scenario's name in the table, with the endpoint when it is not v2's and the kind when it is not
    khchecks."""
    name = scenario if report_path() == REPORT_PATH else f"{scenario} {report_path()}"
    return name if kind() == KHCHECK else f"{name} (HealthChecks)"


def check_path(ns: str, name: str | None = None) -> str:
    """The API path of the chosen kind's checks (of one of them with `name`)."""
    if kind() == KHCHECK:
        return khc(ns, name)
    base = f"/apis/{HC_API_VERSION}/namespaces/{ns}/healthchecks"
    return f"{base}/{name}" if name else base


def check_body(name: str, image: str = "kh-sim/ok", interval: str = "1h", timeout: str = "30s",
               env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A check of the chosen kind: a khcheck, or a HealthCheck with the same pod spec under podSpec.spec."""
    if kind() == KHCHECK:
        return khcheck(name, image, interval, timeout=timeout, env=env)
    return {"apiVersion": HC_API_VERSION, "kind": "HealthCheck", "metadata": {"name": name},
            "spec": {"runInterval": interval, "timeout": timeout,
                     "podSpec": {"spec": {"containers": [container(image, env=env)]}}}}


def create_check(cluster: TestCluster, ns: str, name: str, image: str = "kh-sim/ok", interval: str = "1h",
                 timeout: str = "30s", env: Mapping[str, str] | None = None) -> dict[str, Any]:
    return dict(cluster.request("POST", check_path(ns), check_body(name, image, interval, timeout, env)))


def state_spec(cluster: TestCluster, ns: str, name: str) -> dict[str, Any]:
    """The check's result in a khstate's names; {} when there is none yet."""
    if kind() == KHCHECK:
        return khstate_spec(cluster, ns, name)
    status = dict((get_or_none(cluster, check_path(ns, name)) or {}).get("status") or {})
    if not status.get("lastRunUnix") and not status.get("errors"):
        return {}
    binding = status.get("runBinding") or {}
    return {"OK": bool(status.get("ok")), "Errors": list(status.get("errors") or []),
            "LastRun": status.get("lastRunUnix"), "uuid": binding.get("uuid") or status.get("currentUUID") or ""}
