"""How a report names its run: by its `kh-run-uuid` header, else by its source address.

Shared by the two steps that look runs up (triage.py, which sorts reports by what the caches know,
and finder.py, which finds the run's own pod), so neither imports the other. Nothing here looks
anything up.
"""
from __future__ import annotations

import re
from collections.abc import Callable

from kuberhealthy.kube import Obj
from kuberhealthy.records.checkpod import RUN_ID_LABEL
from kuberhealthy.web.addresses import normalize_ip

_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")

# (run uuid or None, pod IP or None, timeout seconds) -> pods the API server has for that caller
FallbackRead = Callable[[str | None, str | None, float], list[Obj]]

FINISHED = ("Succeeded", "Failed")


class UnknownCaller(ValueError):
    """No pod may report for this request; str(e) is the one-line reason for the 400."""


def named_by(run_uuid: str | None, remote_addr: str) -> tuple[str | None, str]:
    """(pod IP or None, selector text) of what a report names: its uuid header, else its source address.
    UnknownCaller when no pod can be so named (a uuid no label can hold, an address that is none)."""
    if run_uuid:
        selector = f"{RUN_ID_LABEL}={_short(run_uuid)}"
        if not _LABEL_VALUE.match(run_uuid):  # no pod can carry this label: refuse at once
            raise UnknownCaller(not_found(selector))
        return None, selector
    ip = normalize_ip(remote_addr)
    if ip is None:
        raise UnknownCaller(f"failed to parse the caller's address {_short(remote_addr)!r}")
    return ip, f"status.podIP=={ip},status.phase==Running"


def not_found(selector: str) -> str:
    """v2's reason when no pod answers to the selector (contract-tested text)."""
    return f"failed to find a pod with selector {selector}"


def _short(value: str, limit: int = 100) -> str:
    return value if len(value) <= limit else value[:limit] + "..."
