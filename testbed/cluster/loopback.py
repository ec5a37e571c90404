"""Loopback addresses and ports for the test bed: every listener and every pod address is on lo.

Linux routes all of 127.0.0.0/8 on lo, so a socket can be bound to any of these addresses and a
receiver that identifies callers by source address sees what it would see in a cluster. Pod IPs come
from one pool per process (127.10.0.1-127.19.255.254, never 127.0.0.1): the simulated kubelet takes
and releases addresses for the pods it drives, `pod_ip()` takes one for a pod a test makes by hand, so
the two never collide. Node IPs are 127.20.0.N; 127.30.0.N are nobody's (`outside_ip`).
"""
from __future__ import annotations

import ipaddress
import socket
import threading

POD_NET_FIRST = int(ipaddress.IPv4Address("127.10.0.1"))
POD_NET_LAST = int(ipaddress.IPv4Address("127.19.255.254"))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (connection refused until someone binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node_ip(index: int) -> str:
    return f"127.20.0.{index + 1}"


def outside_ip(index: int = 0) -> str:
    """An address that is no pod's and no node's (127.30.0.N): a stranger, an ingress or a proxy."""
    return f"127.30.0.{index + 1}"


class IpPool:
    """Hands out pod IPs round-robin, skipping addresses still in use and .0/.255 octets."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = POD_NET_FIRST
        self._used: set[int] = set()

    def allocate(self) -> str:
        with self._lock:
            for _ in range(POD_NET_LAST - POD_NET_FIRST + 1):
                candidate = self._next
                self._next = candidate + 1 if candidate < POD_NET_LAST else POD_NET_FIRST
                if candidate & 0xFF in (0, 255) or candidate in self._used:
                    continue
                self._used.add(candidate)
                return str(ipaddress.IPv4Address(candidate))
        raise RuntimeError("simulated pod network exhausted")

    def release(self, ip: str) -> None:
        with self._lock:
            self._used.discard(int(ipaddress.IPv4Address(ip)))


# One pool per process, so two simulated kubelets (and hand-made pods) never get the same address.
POD_IPS = IpPool()


def pod_ip() -> str:
    """A pod address no other pod of this process has or will get (kept for the whole process)."""
    return POD_IPS.allocate()
