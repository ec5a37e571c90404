"""A peer's address as pod status writes it, so an address can be compared with a pod IP.

Part of web/'s ground: the report endpoint names a run by its source address and keys its rate limit
by it, and the run-now route keys its rate limit the same way. Nothing here knows pods or HTTP.
"""
from __future__ import annotations

import ipaddress


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
