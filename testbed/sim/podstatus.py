"""Pod status documents the simulated kubelet writes, one state per container.

Shapes follow what a Kubernetes 1.29 kubelet reports (phase, conditions, containerStatuses and
initContainerStatuses with waiting / running / terminated states), trimmed to the fields Kuberhealthy
and tests look at. The phase is the kubelet's own rule for restartPolicy Never: Pending while a regular
container waits; Running while a regular container or a native sidecar runs; then Succeeded when every
regular container exited 0, else Failed (a native sidecar's exit never counts; a regular sidecar's
does, as it does on a real kubelet). Containers with the image `kh-sim/sidecar` are sidecars: among
init containers, native ones (the 1.20 API server drops `restartPolicy: Always`, so the image says it).
The addresses in the documents come from testbed/cluster/loopback.py; podmodel.py keeps the states.
"""
from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from testbed.sim.behaviours import checker_container, is_sidecar_image, sidecar_exit

State = dict[str, Any]  # one container's `state`: {"waiting": ...} | {"running": ...} | {"terminated": ...}
TERMINAL = ("Succeeded", "Failed")


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Slot:
    """One container of the pod spec. `sidecar`: image kh-sim/sidecar; `exit`: what it exits with when
    stopped (its SIM_SIDECAR_EXIT; None: the stop's own code)."""

    name: str
    image: str
    sidecar: bool = False
    exit: int | None = None


@dataclass(frozen=True)
class Layout:
    """The pod's containers as the kubelet runs them: init containers (sidecar: native) and containers."""

    init: tuple[Slot, ...] = ()
    containers: tuple[Slot, ...] = ()
    checker: str = ""  # the container whose image chose the behaviour

    @property
    def natives(self) -> tuple[Slot, ...]:
        return tuple(s for s in self.init if s.sidecar)

    @property
    def checkers(self) -> tuple[Slot, ...]:
        """The regular containers that are not sidecars: they all share the checker's exit."""
        return tuple(s for s in self.containers if not s.sidecar)

    @property
    def sidecars(self) -> tuple[Slot, ...]:
        """Regular containers that are sidecars: they never exit by themselves."""
        return tuple(s for s in self.containers if s.sidecar)


def layout(pod: Mapping[str, Any]) -> Layout:
    spec = pod.get("spec") or {}

    def slots(key: str) -> tuple[Slot, ...]:
        return tuple(Slot(str(c.get("name", "")), str(c.get("image", "")), is_sidecar_image(c.get("image")),
                          sidecar_exit(c))
                     for c in spec.get(key) or [] if isinstance(c, dict))
    return Layout(slots("initContainers"), slots("containers"), str(checker_container(pod).get("name", "")))


def waiting_state(reason: str, message: str = "") -> State:
    return {"waiting": {"reason": reason, **({"message": message} if message else {})}}


def running_state(started_at: str) -> State:
    return {"running": {"startedAt": started_at}}


def terminated_state(exit_code: int, started_at: str, reason: str | None = None) -> State:
    """Terminated now with `exit_code`; reason Completed for 0, else Error, unless given (OOMKilled)."""
    return {"terminated": {"exitCode": exit_code, "reason": reason or ("Completed" if exit_code == 0 else "Error"),
                           "startedAt": started_at, "finishedAt": now_rfc3339()}}


def phase(lay: Layout, states: Mapping[str, State]) -> str:
    """The kubelet's phase for restartPolicy Never (see the module docstring)."""
    regular = [states.get(s.name) or {} for s in lay.containers]
    if not regular or any("terminated" not in s and "running" not in s for s in regular):
        return "Pending"
    natives = [states.get(s.name) or {} for s in lay.natives]
    if any("running" in s for s in [*regular, *natives]):
        return "Running"
    return "Succeeded" if all(s["terminated"].get("exitCode") == 0 for s in regular) else "Failed"


def _ready(slot: Slot, state: State, init: bool) -> bool:
    if init and not slot.sidecar:  # a regular init container is ready once it completed
        return (state.get("terminated") or {}).get("exitCode") == 0
    return "running" in state


def _statuses(slots: Sequence[Slot], states: Mapping[str, State], init: bool) -> list[dict[str, Any]]:
    return [{"name": s.name, "image": s.image, "imageID": "", "restartCount": 0,
             "ready": _ready(s, states.get(s.name) or {}, init), "started": "running" in (states.get(s.name) or {}),
             "state": states.get(s.name) or waiting_state("ContainerCreating")}
            for s in slots]


def _condition(kind: str, ok: bool, since: str, reason: str = "", message: str = "") -> dict[str, Any]:
    c: dict[str, Any] = {"type": kind, "status": "True" if ok else "False", "lastTransitionTime": since}
    if not ok and reason:
        c["reason"] = reason
        if message:
            c["message"] = message
    return c


def _conditions(lay: Layout, states: Mapping[str, State], pod_phase: str, since: str) -> list[dict[str, Any]]:
    def state(s: Slot) -> State:
        return states.get(s.name) or {}
    uninitialised = [s.name for s in lay.init
                     if not (_ready(s, state(s), True) or (s.sidecar and "terminated" in state(s)))]
    unready = [s.name for s in [*lay.natives, *lay.containers] if "running" not in state(s)]
    why = {"Succeeded": "PodCompleted", "Failed": "PodFailed"}.get(pod_phase, "ContainersNotReady")
    message = f"containers with unready status: [{' '.join(unready)}]" if why == "ContainersNotReady" else ""
    return [_condition("Initialized", not uninitialised, since, "ContainersNotInitialized",
                       f"containers with incomplete status: [{' '.join(uninitialised)}]"),
            _condition("Ready", not unready, since, why, message),
            _condition("ContainersReady", not unready, since, why, message),
            _condition("PodScheduled", True, since)]


@dataclass(frozen=True)
class Addresses:
    """`pod_ip` None: no pod IP yet (a real kubelet's first Pending status; a later one adds it)."""

    pod_ip: str | None
    host_ip: str
    start_time: str

    def fields(self) -> dict[str, Any]:
        if self.pod_ip is None:
            return {"hostIP": self.host_ip, "startTime": self.start_time}
        return {"hostIP": self.host_ip, "podIP": self.pod_ip, "podIPs": [{"ip": self.pod_ip}],
                "startTime": self.start_time}


def document(lay: Layout, states: Mapping[str, State], where: Addresses, *, since: str,
             extra_conditions: Sequence[Mapping[str, Any]] = (), overrides: Mapping[str, str] | None = None
             ) -> dict[str, Any]:
    """The merge patch of `pods/<name>/status`: every container's state, the phase they make (or the one
    `overrides` sets, with status.reason and message: a kubelet eviction), the kubelet's conditions and
    `extra_conditions` (written by others, such as DisruptionTarget: a merge patch replaces the list)."""
    pod_phase = (overrides or {}).get("phase") or phase(lay, states)
    status: dict[str, Any] = {"phase": pod_phase, **where.fields(), **{k: v for k, v in (overrides or {}).items()
                                                                       if k != "phase"},
                              "conditions": [*_conditions(lay, states, pod_phase, since),
                                             *(dict(c) for c in extra_conditions)],
                              "containerStatuses": _statuses(lay.containers, states, init=False)}
    if lay.init:
        status["initContainerStatuses"] = _statuses(lay.init, states, init=True)
    return {"status": status}
