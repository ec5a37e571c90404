"""HTTP check: request CHECK_URL COUNT times; healthy when enough answers carry the expected status.

Configured like upstream Kuberhealthy's http-check (same variable names), with two fixes: COUNT defaults
to 1 (not 0, which passed without sending anything) and PASSING_PERCENT really is a percentage (upstream
divided integers, so anything below 100 meant 0). Every request has a timeout (REQUEST_TIMEOUT).

The logic lives in ``load_config`` and ``run_http_check`` so tests can drive it; ``main`` only wires it
to the environment and reports exactly once through ``checkclient``.
"""
from __future__ import annotations

import http.client
import logging
import os
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

try:
    import kuberhealthy_checkclient as checkclient  # the client's wheel, installed in the image
except ImportError:  # a source checkout: the same file as the kuberhealthy package's module
    from kuberhealthy import checkclient

logger = logging.getLogger("http-check")

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
METHODS_WITH_BODY = ("POST", "PUT", "PATCH", "DELETE")


class ConfigError(ValueError):
    """An environment variable of this check is missing or malformed."""


def _number(environ: Mapping[str, str], name: str, default: float, *, low: float, high: float,
            whole: bool = True) -> float:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        kind = "a whole number" if whole else "a number"
        raise ConfigError(f"{name} must be {kind}, got {raw!r}") from None
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low:g} and {high:g}, got {raw!r}")
    return value


@dataclass(frozen=True)
class HTTPCheckConfig:
    url: str
    count: int = 1  # requests to send
    seconds: float = 0.0  # pause between requests
    passing_percent: int = 100  # share of requests that must get the expected status
    request_type: str = "GET"
    request_body: str = "{}"  # sent with POST, PUT, PATCH and DELETE, as upstream
    expected_status_code: int = 200
    request_timeout: float = 10.0  # seconds per request

    @property
    def needed(self) -> int:
        """Requests that must pass: PASSING_PERCENT of COUNT, rounded up."""
        return -(-self.count * self.passing_percent // 100)


def load_config(environ: Mapping[str, str]) -> HTTPCheckConfig:
    """Read and validate the check's variables; raises ConfigError naming the variable at fault."""
    url = environ.get("CHECK_URL", "").strip()
    if not url:
        raise ConfigError("CHECK_URL is not set; set it to the URL to check, e.g. http://my-svc.my-ns/healthz")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"CHECK_URL must start with http:// or https://, got {url!r}")
    request_type = environ.get("REQUEST_TYPE", "").strip().upper() or "GET"
    if request_type not in METHODS:
        raise ConfigError(f"REQUEST_TYPE must be one of {', '.join(METHODS)}, got {request_type!r}")
    return HTTPCheckConfig(
        url=url,
        count=int(_number(environ, "COUNT", 1, low=1, high=100_000)),
        seconds=_number(environ, "SECONDS", 0.0, low=0, high=86_400, whole=False),
        passing_percent=int(_number(environ, "PASSING_PERCENT", 100, low=1, high=100)),
        request_type=request_type,
        request_body=environ.get("REQUEST_BODY") or "{}",
        expected_status_code=int(_number(environ, "EXPECTED_STATUS_CODE", 200, low=100, high=599)),
        request_timeout=_number(environ, "REQUEST_TIMEOUT", 10.0, low=0.001, high=3_600, whole=False),
    )


def send_request(config: HTTPCheckConfig) -> str | None:
    """One request: None when it got the expected status, else why not."""
    body = config.request_body.encode() if config.request_type in METHODS_WITH_BODY else None
    request = urllib.request.Request(config.url, data=body, method=config.request_type,
                                     headers={"User-Agent": "kuberhealthy-http-check (python)"})
    try:
        with urllib.request.urlopen(request, timeout=config.request_timeout) as response:
            status = response.status
    except urllib.error.HTTPError as e:
        e.close()
        status = e.code
    except urllib.error.URLError as e:
        return f"request failed: {e.reason}"
    except (OSError, http.client.HTTPException) as e:
        return f"request failed: {type(e).__name__}: {e}"
    if status != config.expected_status_code:
        return f"got status {status}"
    return None


def run_http_check(config: HTTPCheckConfig, *, send: Callable[[HTTPCheckConfig], str | None] = send_request,
                   sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """Send COUNT requests SECONDS apart; return [] when enough passed, else one readable error."""
    logger.info("%s %s: %d request(s), %d must get status %d", config.request_type, config.url, config.count,
                config.needed, config.expected_status_code)
    failures: list[str] = []
    for number in range(1, config.count + 1):
        if number > 1 and config.seconds:
            sleep(config.seconds)
        reason = send(config)
        if reason is None:
            logger.info("request %d: got the expected status %d", number, config.expected_status_code)
        else:
            logger.warning("request %d: %s", number, reason)
            failures.append(reason)
    passed = config.count - len(failures)
    if passed >= config.needed:
        return []
    reasons = ", ".join(f"{reason} ({times}x)" for reason, times in Counter(failures).most_common(5))
    return [f"{config.request_type} {config.url}: only {passed} of {config.count} request(s) got the "
            f"expected status {config.expected_status_code}, {config.needed} needed "
            f"({config.passing_percent}%); failures: {reasons}"]


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        checkclient.wait_for_kuberhealthy(timeout=60)
    except checkclient.CheckClientError as e:
        logger.warning("%s; running the check anyway", e)
    return checkclient.run_check(lambda: run_http_check(load_config(os.environ)))


if __name__ == "__main__":
    sys.exit(main())
