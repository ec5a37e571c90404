"""Which checker behaviour a pod gets (chosen by its first container's image) and its knobs.

This module is pure: it reads pod dicts and returns plans. The kubelet and the pod driver act on them.
The table lives in testbed/sim/README.md; keep both in step.
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


def behaviour_for_image(image: str) -> Behaviour:
    """`kh-sim/<name>` (optionally `registry/...`, `:tag` or `@digest`) → its behaviour."""
    ref = image.split("@", 1)[0]
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        ref = ref[:colon]
    idx = ref.rfind(IMAGE_PREFIX)
    if idx < 0 or (idx > 0 and ref[idx - 1] != "/"):
        return Behaviour.PULL_ERROR
    name = ref[idx + len(IMAGE_PREFIX):]
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
    """The SIM_* knobs of one pod, read from its first container's env."""

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


def first_container(pod: Mapping[str, Any]) -> dict[str, Any]:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return dict(containers[0])


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
    """The first container's env: literal values and fieldRefs; other valueFrom kinds become ""."""
    env: dict[str, str] = {}
    for item in first_container(pod).get("env") or []:
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
    """command + args of the first container (there is no image entrypoint to fall back on)."""
    c = first_container(pod)
    return [str(a) for a in (c.get("command") or [])] + [str(a) for a in (c.get("args") or [])]


def exec_env(env: Mapping[str, str], pod_ip: str) -> dict[str, str]:
    base = {k: os.environ[k] for k in EXEC_HOST_ENV if k in os.environ}
    base.update(env)
    base["KH_SIM_POD_IP"] = pod_ip
    return base
