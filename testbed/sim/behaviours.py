"""Which checker behaviour a pod gets (chosen by its checker container's image) and its knobs.

The checker container is the pod's first container whose image is not `kh-sim/sidecar` (a sidecar: it
runs beside the checker and never exits by itself; an init container with that image is a native
sidecar). This module is pure: it reads pod dicts and returns plans. The kubelet and the pod driver act
on them. The table lives in testbed/sim/README.md; keep both in step.
"""
from __future__ import annotations

import enum
import ipaddress
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

IMAGE_PREFIX = "kh-sim/"
SIDECAR = "sidecar"  # kh-sim/sidecar: a sidecar container (in containers) or a native sidecar (in initContainers)
DEFAULT_ERROR = "simulated check failure"
# How long an unknown image shows ErrImagePull before it turns into ImagePullBackOff.
PULL_BACKOFF_AFTER = 1.0
# Host variables handed to kh-sim/exec processes so that interpreters and tools can be found.
EXEC_HOST_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")
# SIM_TOKEN: what a reporting behaviour sends as `Authorization: Bearer` (README.md, "Reports").
TOKEN_NONE, TOKEN_FILE, TOKEN_GARBAGE, TOKEN_WRONG_AUDIENCE, TOKEN_EXPIRED = (
    "none", "file", "garbage", "wrong-audience", "expired")
TOKEN_MODES = (TOKEN_NONE, TOKEN_FILE, TOKEN_GARBAGE, TOKEN_WRONG_AUDIENCE, TOKEN_EXPIRED)
# SIM_REPORT_FROM: the source address of a report, besides a literal IPv4 loopback address.
FROM_POD, FROM_NODE = "pod", "node"
# SIM_DISRUPT: how the cluster disrupts the pod SIM_DISRUPT_AFTER seconds after it runs (disrupt.py).
DISRUPT_EVICTION, DISRUPT_PREEMPTION, DISRUPT_TAINT, DISRUPT_PRESSURE, DISRUPT_SHUTDOWN = (
    "eviction", "preemption", "taint", "pressure", "shutdown")
DISRUPT_MODES = ("", DISRUPT_EVICTION, DISRUPT_PREEMPTION, DISRUPT_TAINT, DISRUPT_PRESSURE, DISRUPT_SHUTDOWN)
DISRUPT_AFTER = 0.5  # SIM_DISRUPT_AFTER's default


class Behaviour(enum.Enum):
    OK = "ok"
    FAIL = "fail"
    SILENT = "silent"
    CRASH = "crash"
    OOM = "oom"  # killed for memory: exit 137, reason OOMKilled
    HANG = "hang"
    HANG_SILENT = "hang-silent"
    SLOW = "slow"
    EXEC = "exec"
    PULL_ERROR = "pull-error"  # any image that is not one of the above


def sim_image_name(image: str) -> str | None:
    """`kh-sim/<name>` (optionally `registry/...`, `:tag` or `@digest`) → `<name>`; None for other images."""
    ref = image.split("@", 1)[0]
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        ref = ref[:colon]
    idx = ref.rfind(IMAGE_PREFIX)
    if idx < 0 or (idx > 0 and ref[idx - 1] != "/"):
        return None
    return ref[idx + len(IMAGE_PREFIX):]


def is_sidecar_image(image: object) -> bool:
    return sim_image_name(str(image or "")) == SIDECAR


def behaviour_for_image(image: str) -> Behaviour:
    """`kh-sim/<name>` → its behaviour; anything else (kh-sim/sidecar included) is a pull error."""
    name = sim_image_name(image)
    for b in Behaviour:
        if b is not Behaviour.PULL_ERROR and b.value == name:
            return b
    return Behaviour.PULL_ERROR


def _float(env: Mapping[str, str], key: str, default: float) -> float:
    raw = env.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        logger.warning("ignoring %s=%r: not a number", key, raw)
        return default
    return max(value, 0.0)


@dataclass(frozen=True)
class Settings:
    """The SIM_* knobs of one pod, read from its checker container's env."""

    delay: float  # SIM_DELAY seconds before the main action (report / exit); slow defaults to 1
    errors: tuple[str, ...]  # SIM_ERRORS, |-separated, for kh-sim/fail
    uuid_header: bool  # False when SIM_NO_UUID_HEADER=1
    pending_delay: float  # SIM_PENDING_DELAY seconds in ContainerCreating before Running
    exit_delay: float  # SIM_EXIT_DELAY seconds between the report and the exit
    body: bytes | None  # SIM_BODY: raw report body sent instead of the JSON (for receiver tests)
    token: str = TOKEN_NONE  # SIM_TOKEN: one of TOKEN_MODES
    report_from: str = FROM_POD  # SIM_REPORT_FROM: pod, node, or an IPv4 loopback address
    log: tuple[str, ...] | None = None  # SIM_LOG lines: the checker prints exactly these (logs.py)
    log_lines: int = 0  # SIM_LOG_LINES: filler lines printed first, for checkers that print a lot
    disrupt: str = ""  # SIM_DISRUPT: one of DISRUPT_MODES ("": never disrupted)
    disrupt_after: float = DISRUPT_AFTER  # SIM_DISRUPT_AFTER: seconds after Running

    @classmethod
    def from_env(cls, env: Mapping[str, str], behaviour: Behaviour) -> Settings:
        errors = tuple(e for e in env.get("SIM_ERRORS", "").split("|") if e) or (DEFAULT_ERROR,)
        body = env.get("SIM_BODY")
        return cls(
            delay=_float(env, "SIM_DELAY", 1.0 if behaviour is Behaviour.SLOW else 0.0),
            errors=errors,
            uuid_header=env.get("SIM_NO_UUID_HEADER", "") not in ("1", "true", "yes"),
            pending_delay=_float(env, "SIM_PENDING_DELAY", 0.0),
            exit_delay=_float(env, "SIM_EXIT_DELAY", 0.0),
            body=body.encode() if body is not None else None,
            token=_choice(env, "SIM_TOKEN", TOKEN_MODES),
            report_from=_source(env),
            log=_log_lines(env.get("SIM_LOG")),
            log_lines=int(_float(env, "SIM_LOG_LINES", 0.0)),
            disrupt=_choice(env, "SIM_DISRUPT", DISRUPT_MODES),
            disrupt_after=_float(env, "SIM_DISRUPT_AFTER", DISRUPT_AFTER),
        )


def _log_lines(raw: str | None) -> tuple[str, ...] | None:
    """SIM_LOG: lines separated by newlines or by a literal backslash-n (`line1\\nline2` in YAML)."""
    if raw is None:
        return None
    text = raw.replace("\\n", "\n")
    return tuple((text[:-1] if text.endswith("\n") else text).split("\n"))


def _choice(env: Mapping[str, str], key: str, allowed: tuple[str, ...]) -> str:
    raw = env.get(key, "").strip().lower()
    if raw and raw not in allowed:
        logger.warning("ignoring %s=%r: not one of %s", key, raw, ", ".join(allowed))
    return raw if raw in allowed else allowed[0]


def _source(env: Mapping[str, str]) -> str:
    raw = env.get("SIM_REPORT_FROM", "").strip().lower() or FROM_POD
    if raw in (FROM_POD, FROM_NODE):
        return raw
    try:
        ip = ipaddress.ip_address(raw)
    except ValueError:
        ip = None
    if ip is None or ip.version != 4 or not ip.is_loopback:
        logger.warning("ignoring SIM_REPORT_FROM=%r: not pod, node or an IPv4 loopback address", raw)
        return FROM_POD
    return str(ip)


def sidecar_exit(container: Mapping[str, Any]) -> int | None:
    """A sidecar's SIM_SIDECAR_EXIT (a literal env value of its own): the exit code it ends with when it is
    stopped (SIGTERM); None: the default, 143 (it dies of the signal)."""
    for item in container.get("env") or []:
        if isinstance(item, dict) and item.get("name") == "SIM_SIDECAR_EXIT" and "value" in item:
            try:
                return int(str(item.get("value")))
            except ValueError:
                logger.warning("ignoring SIM_SIDECAR_EXIT=%r: not an integer", item.get("value"))
    return None


def checker_container(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The container whose image chooses the behaviour and whose env holds the knobs: the first one that
    is not a `kh-sim/sidecar` (the first one when all are)."""
    containers = [c for c in (pod.get("spec") or {}).get("containers") or [] if isinstance(c, dict)] or [{}]
    return dict(next((c for c in containers if not is_sidecar_image(c.get("image"))), containers[0]))


def _field_ref(pod: Mapping[str, Any], path: str, pod_ip: str, host_ip: str, node: str) -> str:
    meta = pod.get("metadata") or {}
    if path == "metadata.namespace":
        return str(meta.get("namespace", ""))
    if path == "metadata.name":
        return str(meta.get("name", ""))
    if path == "metadata.uid":
        return str(meta.get("uid", ""))
    if path == "status.podIP":
        return pod_ip
    if path == "status.hostIP":
        return host_ip
    if path == "spec.nodeName":
        return node
    if path == "spec.serviceAccountName":
        return str((pod.get("spec") or {}).get("serviceAccountName", ""))
    if path.startswith("metadata.labels['") and path.endswith("']"):
        return str((meta.get("labels") or {}).get(path[17:-2], ""))
    if path.startswith("metadata.annotations['") and path.endswith("']"):
        return str((meta.get("annotations") or {}).get(path[22:-2], ""))
    logger.warning("unsupported fieldRef %s; using an empty value", path)
    return ""


def container_env(pod: Mapping[str, Any], pod_ip: str, host_ip: str, node: str) -> dict[str, str]:
    """The checker container's env: literal values and fieldRefs; other valueFrom kinds become ""."""
    env: dict[str, str] = {}
    for item in checker_container(pod).get("env") or []:
        name = item.get("name")
        if not name:
            continue
        if "value" in item:
            env[name] = str(item.get("value") or "")
            continue
        field_ref = (item.get("valueFrom") or {}).get("fieldRef")
        path = field_ref.get("fieldPath", "") if field_ref else ""
        env[name] = _field_ref(pod, path, pod_ip, host_ip, node) if path else ""
    return env


def exec_argv(pod: Mapping[str, Any]) -> list[str]:
    """command + args of the checker container (there is no image entrypoint to fall back on)."""
    c = checker_container(pod)
    return [str(a) for a in (c.get("command") or [])] + [str(a) for a in (c.get("args") or [])]


def exec_env(env: Mapping[str, str], pod_ip: str) -> dict[str, str]:
    base = {k: os.environ[k] for k in EXEC_HOST_ENV if k in os.environ}
    base.update(env)
    base["KH_SIM_POD_IP"] = pod_ip
    return base
