"""A failed run asks the API server only what it can answer: no log of a pod that never started, and
no eviction in a version the server has already refused (policy/v1 before Kubernetes 1.22)."""
from __future__ import annotations

from typing import Any

from kuberhealthy.base.errors import BadRequest
from kuberhealthy.kube import Resources
from kuberhealthy.run.podstate import read_log_tail


class Recorded:
    """Stands in for Kube: records each request; policy/v1 evictions are refused as a 1.20 server does."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        version = (body or {}).get("apiVersion", "")
        self.asked.append(f"{method} {path.rsplit('/', 1)[-1]} {version}".strip())
        if path.endswith("/eviction") and version == "policy/v1":
            raise BadRequest("the server could not find the requested resource", reason="BadRequest")
        return {}

    def request_bytes(self, method: str, path: str, **_: Any) -> bytes:
        self.asked.append(f"{method} {path.rsplit('/', 1)[-1]}")
        return b"a line\n"


def pod(phase: str, **state: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "main"}]},
            "status": {"phase": phase, "containerStatuses": [{"name": "main", "state": state}]}}


def test_the_log_of_a_pod_that_never_started_is_not_asked_for() -> None:
    kube = Recorded()
    text = read_log_tail(Resources(kube), "ns", "p", pod("Pending", waiting={"reason": "ContainerCreating"}),  # type: ignore[arg-type]
                         timeout=1.0)
    assert kube.asked == [] and "never" not in text and "has started" in text


def test_the_log_of_a_pod_that_ran_is_read() -> None:
    kube = Recorded()
    for shown in (pod("Running", running={}), pod("Failed", terminated={"exitCode": 1}), pod("Running")):
        read_log_tail(Resources(kube), "ns", "p", shown, timeout=1.0)  # type: ignore[arg-type]
    assert kube.asked == ["GET log"] * 3


def test_an_eviction_version_the_server_refused_is_not_asked_first_again() -> None:
    kube = Recorded()
    resources = Resources(kube)  # type: ignore[arg-type]
    assert resources.evict_pod("ns", "a") == "evicted"
    assert resources.evict_pod("ns", "b") == "evicted"
    assert kube.asked == ["POST eviction policy/v1", "POST eviction policy/v1beta1", "POST eviction policy/v1beta1"]
