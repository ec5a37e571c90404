"""DNS check: resolve HOSTNAME through the pod's resolver; healthy when it resolves (to EXPECTED_ADDRESS).

The lookup is the system resolver's (``getaddrinfo``: /etc/hosts, then the cluster DNS named in
/etc/resolv.conf, with its search domains), i.e. what every other program in the pod would get.
``getaddrinfo`` cannot be cancelled, so it runs in a daemon thread and DNS_TIMEOUT bounds the wait.
Names under ``.invalid`` fail at once without a query, as RFC 6761 asks of resolver libraries.

The logic lives in ``load_config`` and ``run_dns_check`` so tests can drive it; ``main`` only wires it
to the environment and reports exactly once through ``checkclient``.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

try:
    import kuberhealthy_checkclient as checkclient  # the client's wheel, installed in the image
except ImportError:  # a source checkout: the same file as the kuberhealthy package's module
    from kuberhealthy import checkclient

logger = logging.getLogger("dns-check")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class ConfigError(ValueError):
    """An environment variable of this check is missing or malformed."""


class LookupTimeout(TimeoutError):
    """The resolver did not answer within DNS_TIMEOUT."""


@dataclass(frozen=True)
class DNSCheckConfig:
    hostname: str
    expected_address: IPAddress | None = None  # must be among the results when set
    timeout: float = 5.0  # seconds for the whole lookup


def load_config(environ: Mapping[str, str]) -> DNSCheckConfig:
    """Read and validate the check's variables; raises ConfigError naming the variable at fault."""
    hostname = environ.get("HOSTNAME", "").strip().rstrip(".")
    if not hostname:
        raise ConfigError("HOSTNAME is not set; set it to the name to resolve, e.g. kubernetes.default")
    expected: IPAddress | None = None
    raw_expected = environ.get("EXPECTED_ADDRESS", "").strip()
    if raw_expected:
        try:
            expected = ipaddress.ip_address(raw_expected)
        except ValueError:
            raise ConfigError(f"EXPECTED_ADDRESS must be an IP address, got {raw_expected!r}") from None
    raw_timeout = environ.get("DNS_TIMEOUT", "").strip()
    timeout = 5.0
    if raw_timeout:
        try:
            timeout = float(raw_timeout)
        except ValueError:
            raise ConfigError(f"DNS_TIMEOUT must be a number of seconds, got {raw_timeout!r}") from None
        if not 0 < timeout <= 600:
            raise ConfigError(f"DNS_TIMEOUT must be between 0 and 600 seconds, got {raw_timeout!r}")
    return DNSCheckConfig(hostname=hostname, expected_address=expected, timeout=timeout)


def resolve(hostname: str, timeout: float) -> list[IPAddress]:
    """The addresses ``hostname`` resolves to, sorted; raises OSError/LookupTimeout when it does not."""
    if hostname.lower() == "invalid" or hostname.lower().endswith(".invalid"):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known (RFC 6761: .invalid names)")
    outcome: dict[str, object] = {}
    done = threading.Event()

    def lookup() -> None:
        try:
            outcome["infos"] = socket.getaddrinfo(hostname, None, type=socket.SOCK_STREAM)
        except OSError as e:
            outcome["error"] = e
        finally:
            done.set()

    threading.Thread(target=lookup, name="dns-lookup", daemon=True).start()
    if not done.wait(timeout):
        raise LookupTimeout(f"no answer within {timeout:g}s")
    error = outcome.get("error")
    if isinstance(error, OSError):
        raise error
    infos = outcome["infos"]
    assert isinstance(infos, list)
    addresses = {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos}
    return sorted(addresses, key=lambda a: (a.version, int(a)))


def run_dns_check(config: DNSCheckConfig,
                  resolver: Callable[[str, float], list[IPAddress]] = resolve) -> list[str]:
    """Resolve once; return [] when healthy, else one readable error."""
    try:
        addresses = resolver(config.hostname, config.timeout)
    except LookupTimeout as e:
        return [f"DNS lookup of {config.hostname!r} timed out: {e}"]
    except OSError as e:
        reason = e.strerror or str(e)
        return [f"DNS lookup of {config.hostname!r} failed: {reason}"]
    shown = ", ".join(str(a) for a in addresses) or "nothing"
    logger.info("%s resolved to %s", config.hostname, shown)
    if not addresses:
        return [f"DNS lookup of {config.hostname!r} returned no addresses"]
    if config.expected_address is not None and config.expected_address not in addresses:
        return [f"{config.hostname!r} resolved to {shown}, not to the expected {config.expected_address}"]
    return []


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        checkclient.wait_for_kuberhealthy(timeout=60)
    except checkclient.CheckClientError as e:
        logger.warning("%s; running the check anyway", e)
    return checkclient.run_check(lambda: run_dns_check(load_config(os.environ)))


if __name__ == "__main__":
    sys.exit(main())
