"""Whether upstream Kuberhealthy v3's controller is running HealthChecks here: its Lease has a live holder.

v3 elects its leader with the Lease `kuberhealthy-controller` in its namespace. While someone other than
this daemon holds it, two controllers would run the same HealthChecks (two pods a run, two writers of
one status), so this daemon runs none; khchecks are not v3's and run on. Live, as a Lease is judged by
client-go: its holder renewed it (its resourceVersion changed) within leaseDurationSeconds as this
replica observed, on its own monotonic clock; a Lease whose renewTime is plainly older than that on
the wall clock is not live either (a v3 that was uninstalled long ago, seen first at our start).

`V3LeaseGate.reason()` is the HealthCheck kind's gate (records/kinds.py): "" when HealthChecks may run,
else why not. Reads its watch cache only.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kuberhealthy.base.times import parse_time
from kuberhealthy.kube import Cache, Obj

V3_LEASE_NAME = "kuberhealthy-controller"
DEFAULT_DURATION = 15.0  # seconds: client-go's usual lease duration, when the Lease says none
SKEW = 5.0  # seconds of wall-clock difference tolerated before a renewTime is called old


class V3LeaseGate:
    """Watches v3's Lease through `leases` (a cache holding at most that one Lease)."""

    def __init__(self, leases: Cache, namespace: str, own_lease: str, own_identity: Callable[[], str],
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self._leases = leases
        self._namespace = namespace
        self._own_lease = own_lease
        self._own_identity = own_identity
        self._clock, self._wall = clock, wall
        self._lock = threading.Lock()
        self._seen: tuple[str, float] = ("", 0.0)  # (resourceVersion, when first observed)
        leases.add_listener(self._changed)

    def _changed(self, etype: str, obj: Obj, prev: Obj | None) -> None:
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            if version != self._seen[0]:
                self._seen = (version, self._clock())

    def holder(self) -> str:
        """The live holder of v3's Lease that is not this daemon; "" for none."""
        if self._own_lease == V3_LEASE_NAME:
            return ""  # our own Lease has that name: its holders are ours
        lease = self._leases.get(self._namespace, V3_LEASE_NAME)
        if lease is None:
            return ""
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        if not holder or holder == self._own_identity():
            return ""
        duration = spec.get("leaseDurationSeconds")
        seconds = float(duration) if isinstance(duration, (int, float)) and duration > 0 else DEFAULT_DURATION
        version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            seen_version, seen_at = self._seen
            if seen_version != version:
                self._seen = (version, self._clock())
                seen_at = self._seen[1]
        if self._clock() - seen_at > seconds:
            return ""
        renewed = parse_time(spec.get("renewTime"))
        if renewed is not None and renewed + seconds + SKEW < self._wall():
            return ""
        return holder

    def reason(self) -> str:
        holder = self.holder()
        if not holder:
            return ""
        return (f"Kuberhealthy v3's controller ({holder}) holds the Lease {self._namespace}/{V3_LEASE_NAME}: it runs "
                "the HealthChecks; uninstall it (or let its Lease expire) and they run here")
