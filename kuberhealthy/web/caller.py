"""Who is reporting: find the checker pod behind a report, and check it may report.

A caller names its run with the `kh-run-uuid` header (pod found by label `kuberhealthy-run-id`) or,
without it, is known by its source address (the one Running pod with that pod IP; pods on the host
network share the node's IP, so they need the header). As in v2, the pod must then carry the
check-name annotation and a `KH_RUN_UUID` env var. Whether that UUID is still the khstate's current
one is decided when the report is stored (khstate.record_report), against the API server.

Looking up never lists the cluster per report: the pod cache answers, after waiting briefly for a
pod created a moment ago. Only when the cache has not seen the caller does one bounded read by label
(or by pod IP) ask the API server. When neither can say yet — the read failed, or the cache is not
current — the answer is CallerNotYetKnown (503 with Retry-After), never a 400: a genuine checker
must not lose its report to a lagging or absent control plane.
"""
from __future__ import annotations

import ipaddress
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from kuberhealthy.checkpod import CHECK_NAME_ANNOTATION, KH_CHECK_RUN_DEADLINE, KH_RUN_UUID, RUN_ID_LABEL
from kuberhealthy.errors import ApiError
from kuberhealthy.kube import Obj, Reflector
from kuberhealthy.notify import Notifier

_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")

READ_RESERVE = 0.8  # seconds of a request's budget kept for the fallback read after the cache wait

# (run uuid or None, pod IP or None, timeout seconds) -> pods the API server has for that caller
FallbackRead = Callable[[str | None, str | None, float], list[Obj]]


class UnknownCaller(ValueError):
    """No pod may report for this request; str(e) is the one-line reason for the 400."""


class CallerNotYetKnown(Exception):
    """The caller cannot be confirmed or refused right now (control plane away or lagging): 503."""


@dataclass(frozen=True)
class Caller:
    namespace: str
    pod_name: str
    check: str  # the check (or job) name from the pod's annotation
    run_uuid: str  # the pod's KH_RUN_UUID
    selector: str  # how it was found, for logs and reasons
    deadline: float | None = None  # the pod's KH_CHECK_RUN_DEADLINE (unix seconds), when readable


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
    """Looks callers up in the checker-pod cache (indexes "uuid" and "ip"), then with one bounded read."""

    def __init__(self, pods: Reflector, notifier: Notifier, wait: float, fallback: FallbackRead | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._pods = pods
        self._notifier = notifier
        self._wait = wait
        self._fallback = fallback
        self._clock = clock

    def _lookup(self, find: Callable[[], list[Obj]], topic: tuple[str, str, str], deadline: float) -> list[Obj]:
        found = find()
        if found or self._wait <= 0:
            return found
        with self._notifier.waiter(topic) as waiter:
            return waiter.wait_for(find, min(deadline, self._clock() + self._wait), clock=self._clock) or []

    def find(self, run_uuid: str | None, remote_addr: str, deadline: float | None = None) -> Caller:
        """The validated caller; UnknownCaller (400) or CallerNotYetKnown (503). `deadline` is monotonic."""
        end = deadline if deadline is not None else self._clock() + self._wait + READ_RESERVE
        ip: str | None = None
        if run_uuid:
            selector = f"{RUN_ID_LABEL}={_short(run_uuid)}"
            if not _LABEL_VALUE.match(run_uuid):  # no pod can carry this label: refuse at once
                raise UnknownCaller(f"failed to find a pod with selector {selector}")

            def by_uuid() -> list[Obj]:
                return self._pods.by_index("uuid", run_uuid)
            pods = self._lookup(by_uuid, self._pods.topic("uuid", run_uuid), end - READ_RESERVE)
        else:
            ip = normalize_ip(remote_addr)
            if ip is None:
                raise UnknownCaller(f"failed to parse the caller's address {_short(remote_addr)!r}")
            selector = f"status.podIP=={ip},status.phase==Running"
            address = ip

            def by_ip() -> list[Obj]:
                return [p for p in self._pods.by_index("ip", address) if _running(p)]
            pods = self._lookup(by_ip, self._pods.topic("ip", ip), end - READ_RESERVE)
        if not pods:
            pods = self._read(run_uuid, ip, end, selector)
        if len(pods) > 1:
            raise UnknownCaller(f"failed to fetch pod with selector {selector} - found two or more with same label")
        return self.validate(pods[0], selector)

    def _read(self, run_uuid: str | None, ip: str | None, end: float, selector: str) -> list[Obj]:
        """The fallback: one bounded read, for a pod the cache has not seen (yet)."""
        current = self._pods.is_current()
        if self._fallback is None:
            if current:
                raise UnknownCaller(f"failed to find a pod with selector {selector}")
            raise CallerNotYetKnown("the pod cache is not current; try again shortly")
        left = end - self._clock()
        if left < 0.1:
            if current:
                raise UnknownCaller(f"failed to find a pod with selector {selector}")
            raise CallerNotYetKnown("the pod cache is not current; try again shortly")
        try:
            pods = self._fallback(run_uuid, ip, left)
        except ApiError as e:
            raise CallerNotYetKnown(f"cannot look up the calling pod right now: {e}") from e
        if ip is not None:
            pods = [p for p in pods if _running(p)]
        if not pods:
            raise UnknownCaller(f"failed to find a pod with selector {selector}")
        return pods

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
        deadline: float | None = None
        for container in containers:
            for env in container.get("env") or []:
                if env.get("name") == KH_RUN_UUID:
                    run_uuid = str(env.get("value") or "")
                elif env.get("name") == KH_CHECK_RUN_DEADLINE:
                    try:
                        deadline = float(env.get("value") or "")
                    except ValueError:
                        deadline = None
        if run_uuid is None:
            raise UnknownCaller(f"error finding environment variable on remote pod: {KH_RUN_UUID}")
        namespace = str(meta.get("namespace") or "")
        if not namespace:
            raise UnknownCaller("pod check namespace was invalid or unset")
        if not run_uuid:
            raise UnknownCaller("pod uuid was invalid or unset")
        return Caller(namespace=namespace, pod_name=str(meta.get("name") or ""), check=check,
                      run_uuid=run_uuid, selector=selector, deadline=deadline)
