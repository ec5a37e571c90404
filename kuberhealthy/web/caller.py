"""Who is reporting: find the checker pod behind a report in the pod cache, and check it may report.

A caller names its run with the `kh-run-uuid` header (pod found by label `kuberhealthy-run-id`) or,
without it, is known by its source address (the one Running pod with that pod IP; pods on the host
network share the node's IP, so they need the header). A pod that was created a moment ago may not be
in the cache yet, so the lookup waits briefly on the cache's notifier; it never lists pods from the
API. Then, as in v2, the pod must carry the check-name annotation and a `KH_RUN_UUID` env var.
Whether that UUID is still the khstate's current one is decided when the report is stored
(khstate.record_report), against the API server rather than a possibly lagging cache.
"""
from __future__ import annotations

import ipaddress
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from kuberhealthy.kube import Notifier, Obj, Reflector
from kuberhealthy.services import CHECK_NAME_ANNOTATION, RUN_ID_LABEL

RUN_UUID_ENV = "KH_RUN_UUID"
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")


class UnknownCaller(ValueError):
    """No pod may report for this request; str(e) is the one-line reason for the 400."""


@dataclass(frozen=True)
class Caller:
    namespace: str
    pod_name: str
    check: str  # the check (or job) name from the pod's annotation
    run_uuid: str  # the pod's KH_RUN_UUID
    selector: str  # how it was found, for logs and reasons


def normalize_ip(remote_addr: str) -> str | None:
    """The peer address as pod status writes it: no brackets or zone; IPv4-mapped IPv6 as IPv4."""
    text = remote_addr.strip()
    if text.startswith("[") and "]" in text:
        text = text[1:text.index("]")]
    text = text.split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return ip.compressed


def _running(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


def _short(value: str, limit: int = 100) -> str:
    return value if len(value) <= limit else value[:limit] + "..."


class CallerFinder:
    """Looks callers up in the checker-pod cache (indexes "uuid" and "ip")."""

    def __init__(self, pods: Reflector, notifier: Notifier, wait: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._pods = pods
        self._notifier = notifier
        self._wait = wait
        self._clock = clock

    def _lookup(self, find: Callable[[], list[Obj]], may_appear: bool) -> list[Obj]:
        found = find()
        if found or not may_appear or self._wait <= 0:
            return found
        return self._notifier.wait_for(find, self._clock() + self._wait, clock=self._clock) or []

    def find(self, run_uuid: str | None, remote_addr: str) -> Caller:
        """The validated caller, or UnknownCaller."""
        if run_uuid:
            selector = f"{RUN_ID_LABEL}={_short(run_uuid)}"
            pods = self._lookup(lambda: self._pods.by_index("uuid", run_uuid),
                                may_appear=bool(_LABEL_VALUE.match(run_uuid)))
        else:
            ip = normalize_ip(remote_addr)
            if ip is None:
                raise UnknownCaller(f"failed to parse the caller's address {_short(remote_addr)!r}")
            selector = f"status.podIP=={ip},status.phase==Running"
            pods = self._lookup(lambda: [p for p in self._pods.by_index("ip", ip) if _running(p)],
                                may_appear=True)
        if not pods:
            raise UnknownCaller(f"failed to find a pod with selector {selector}")
        if len(pods) > 1:
            raise UnknownCaller(f"failed to fetch pod with selector {selector} - found two or more with same label")
        return self.validate(pods[0], selector)

    @staticmethod
    def validate(pod: Obj, selector: str) -> Caller:
        """v2's checks on the calling pod: annotation, containers, KH_RUN_UUID (last one wins)."""
        meta = pod.get("metadata") or {}
        check = str((meta.get("annotations") or {}).get(CHECK_NAME_ANNOTATION) or "")
        if not check:
            raise UnknownCaller(f"error finding check name annotation on calling pod with selector: {selector}")
        containers = (pod.get("spec") or {}).get("containers") or []
        if not containers:
            raise UnknownCaller(f"failed to fetch environment variables from pod with selector {selector} "
                                "- pod had no containers")
        run_uuid: str | None = None
        for container in containers:
            for env in container.get("env") or []:
                if env.get("name") == RUN_UUID_ENV:
                    run_uuid = str(env.get("value") or "")
        if run_uuid is None:
            raise UnknownCaller(f"error finding environment variable on remote pod: {RUN_UUID_ENV}")
        namespace = str(meta.get("namespace") or "")
        if not namespace:
            raise UnknownCaller("pod check namespace was invalid or unset")
        if not run_uuid:
            raise UnknownCaller("pod uuid was invalid or unset")
        return Caller(namespace=namespace, pod_name=str(meta.get("name") or ""), check=check,
                      run_uuid=run_uuid, selector=selector)
