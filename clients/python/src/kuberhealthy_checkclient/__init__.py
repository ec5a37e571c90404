"""Report a checker pod's result to Kuberhealthy.

Kuberhealthy starts a checker pod for every run of a KuberhealthyCheck and injects ``KH_REPORTING_URL``,
``KH_RUN_UUID``, ``KH_CHECK_RUN_DEADLINE`` (unix seconds) and ``KH_POD_NAMESPACE``. The pod tests something,
then POSTs exactly one report, ``{"OK": bool, "Errors": [str]}``, to the reporting URL. This module makes that
POST robust:

* it always sends the ``kh-run-uuid`` header, so Kuberhealthy can find the pod by its run UUID even when
  the source IP is not the pod's own (hostNetwork, service meshes such as Istio, SNAT); upstream's
  in-tree Python and JavaScript clients omit it;
* when ``KH_REPORT_TOKEN_FILE`` names a readable file (Kuberhealthy mounts a projected ServiceAccount
  token there), it sends it as ``Authorization: Bearer <token>``: the report is then identified as this
  pod's through any proxy. A 401 (the token was refused, or was needed: a check bound to tokens) is
  retried once after reading the file again (the kubelet may have been rotating it); the error then
  says if the file could not be read;
* it validates the report first (the server rejects ``OK: false`` without errors and blank errors);
* it retries connection errors and 5xx answers with exponential backoff and jitter until the run's
  deadline, and never retries a 200 or another 4xx (a 4xx raises :class:`ReportRejectedError` with the
  server's one-line reason).

It also tells a check its namespace (:func:`get_pod_namespace`) and the seconds it has left before the
run's deadline (:func:`time_left`). It does not run checks, parse check-specific settings or talk to the
Kubernetes API.

Standard library only (Python 3.10 or later), typed, and one file that imports nothing else: it is the
distribution ``kuberhealthy-checkclient`` (``pip install kuberhealthy-checkclient``, then
``import kuberhealthy_checkclient``), the module ``kuberhealthy.checkclient`` of the ``kuberhealthy``
distribution (its setup.py installs this file under that name), and it works copied alone into an image
(``import checkclient``).

Library use::

    import kuberhealthy_checkclient as checkclient
    errors = my_check()                 # [] when healthy
    if errors:
        checkclient.report_failure(errors)
    else:
        checkclient.report_success()

or ``sys.exit(checkclient.run_check(my_check))``, which also turns an exception into a failure report.

Command line, for shell checks::

    python -m kuberhealthy_checkclient ok
    python -m kuberhealthy_checkclient fail "disk /data is 97% full" "second reason"
    python -m kuberhealthy_checkclient wait --timeout 30
    python -m kuberhealthy.checkclient ok   # the same, from the kuberhealthy distribution
    python checkclient.py ok                # the same, when the file was copied alone

Exit status 0 means the report was accepted (or Kuberhealthy is reachable, for ``wait``); 1 means it
was rejected, could not be delivered before the deadline, or the environment is missing; 2 means bad
arguments. ``KH_CLIENT_DEBUG=1`` (or ``--debug``, or ``debug=True``) logs what is sent to stderr.
"""
from __future__ import annotations

import argparse
import http.client
import json
import logging
import math
import os
import random
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

__all__ = [
    "CheckClientError", "InvalidEnvironmentError", "KuberhealthyUnreachableError",
    "MissingEnvironmentError", "ReportNotDeliveredError", "ReportRejectedError", "Reporter",
    "enable_debug_logging", "encode_report", "get_deadline", "get_pod_namespace", "get_reporting_url",
    "get_run_uuid", "main", "report_failure", "report_success", "run_check", "time_left",
    "wait_for_kuberhealthy",
]

# The kuberhealthy distribution's version (a test holds them equal); this file imports nothing of it.
__version__ = "0.1.0"

ENV_REPORTING_URL = "KH_REPORTING_URL"
ENV_RUN_UUID = "KH_RUN_UUID"
ENV_DEADLINE = "KH_CHECK_RUN_DEADLINE"
ENV_POD_NAMESPACE = "KH_POD_NAMESPACE"  # the downward API's metadata.namespace
ENV_DEBUG = "KH_CLIENT_DEBUG"
ENV_TOKEN_FILE = "KH_REPORT_TOKEN_FILE"  # a projected ServiceAccount token (audience kuberhealthy)
RUN_UUID_HEADER = "kh-run-uuid"
# Where the kubelet mounts the pod's ServiceAccount namespace (unless automountServiceAccountToken is false).
SERVICE_ACCOUNT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

DEFAULT_BACKOFF_BASE = 0.5  # seconds: the first retry waits about this long
DEFAULT_BACKOFF_MAX = 10.0  # seconds: no single wait between retries is longer
DEFAULT_REQUEST_TIMEOUT = 10.0  # seconds: one HTTP attempt
DEFAULT_RETRY_WINDOW = 60.0  # seconds of retrying when KH_CHECK_RUN_DEADLINE is not set
MAX_BODY_BYTES = 1024 * 1024  # the server answers 413 above this
_MIN_ATTEMPT_TIMEOUT = 1.0  # seconds: even the last attempt at the deadline gets this long
_MAX_REASON_CHARS = 500
_USER_AGENT = "kuberhealthy-checkclient (python)"

# A fixed name, so the logger is the same whether this file runs inside the package or copied alone.
logger = logging.getLogger("kuberhealthy.checkclient")


class CheckClientError(Exception):
    """Base of the errors about the environment or delivery (bad arguments raise ValueError/TypeError)."""


class MissingEnvironmentError(CheckClientError):
    """A variable Kuberhealthy injects into checker pods is unset or blank."""

    def __init__(self, variable: str, also: str = "") -> None:
        self.variable = variable
        detail = f" ({also})" if also else ""
        super().__init__(f"environment variable {variable} is not set (or blank){detail}; Kuberhealthy sets it "
                         "in checker pods, so this is probably not running inside one")


class InvalidEnvironmentError(CheckClientError):
    """A variable is set but its value cannot be used."""

    def __init__(self, variable: str, value: str, why: str) -> None:
        self.variable = variable
        self.value = value
        super().__init__(f"environment variable {variable}={value!r} is invalid: {why}")


class ReportRejectedError(CheckClientError):
    """Kuberhealthy answered with a non-retryable status (4xx); retrying would not help.

    ``reason`` is the server's one-line reason; ``note`` what the client adds (e.g. an unreadable token file).
    """

    def __init__(self, status: int, reason: str, note: str = "") -> None:
        self.status = status
        self.reason = reason
        self.note = note
        suffix = f" ({note})" if note else ""
        super().__init__(f"Kuberhealthy rejected the report with HTTP {status}: {reason}{suffix}")


class ReportNotDeliveredError(CheckClientError):
    """Every attempt until the deadline failed with a connection error or a 5xx answer."""

    def __init__(self, attempts: int, last_error: str) -> None:
        self.attempts = attempts
        self.last_error = last_error
        super().__init__(f"report not delivered after {attempts} attempt(s) before the deadline; "
                         f"last error: {last_error}")


class KuberhealthyUnreachableError(CheckClientError, TimeoutError):
    """The reporting URL's host:port did not accept a connection in time."""


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _require(variable: str, environ: Mapping[str, str]) -> str:
    value = environ.get(variable, "").strip()
    if not value:
        raise MissingEnvironmentError(variable)
    return value


def get_reporting_url(environ: Mapping[str, str] | None = None) -> str:
    """The URL reports go to, from ``KH_REPORTING_URL`` (must be http or https with a host)."""
    url = _require(ENV_REPORTING_URL, _environ(environ))
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidEnvironmentError(ENV_REPORTING_URL, url, "expected an http(s):// URL with a host")
    return url


def get_run_uuid(environ: Mapping[str, str] | None = None) -> str:
    """This run's UUID, from ``KH_RUN_UUID``; it is sent as the ``kh-run-uuid`` header."""
    return _require(ENV_RUN_UUID, _environ(environ))


def get_deadline(environ: Mapping[str, str] | None = None) -> float:
    """The run's deadline from ``KH_CHECK_RUN_DEADLINE``, in unix seconds (compare with ``time.time()``).

    Kuberhealthy gives up on the run at this moment; a check should report before it.
    """
    raw = _require(ENV_DEADLINE, _environ(environ))
    try:
        deadline = float(raw)
    except ValueError:
        raise InvalidEnvironmentError(ENV_DEADLINE, raw, "expected unix seconds, e.g. 1700000000") from None
    if not math.isfinite(deadline):
        raise InvalidEnvironmentError(ENV_DEADLINE, raw, "expected a finite number of unix seconds")
    return deadline


def get_pod_namespace(environ: Mapping[str, str] | None = None, *,
                      namespace_file: str = SERVICE_ACCOUNT_NAMESPACE_FILE) -> str:
    """The checker pod's namespace: ``KH_POD_NAMESPACE`` (Kuberhealthy sets it from the downward API), else
    the namespace file of the pod's mounted ServiceAccount.

    Raises MissingEnvironmentError when neither gives a name.
    """
    namespace = _environ(environ).get(ENV_POD_NAMESPACE, "").strip()
    if namespace:
        return namespace
    try:
        with open(namespace_file, encoding="utf-8") as f:
            namespace = f.read().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise MissingEnvironmentError(ENV_POD_NAMESPACE, f"and {namespace_file} cannot be read: {e}") from None
    if not namespace:
        raise MissingEnvironmentError(ENV_POD_NAMESPACE, f"and {namespace_file} is empty")
    return namespace


def time_left(environ: Mapping[str, str] | None = None, *, reserve: float = 0.0,
              clock: Callable[[], float] = time.time) -> float | None:
    """Seconds until the run's deadline (``KH_CHECK_RUN_DEADLINE``), less ``reserve`` seconds kept back (e.g.
    to report); never negative. None when the variable is unset or not a number of unix seconds.

    A check bounds its own waits with it: ``timeout = min(10.0, left)`` where ``left`` is not None.
    """
    if reserve < 0 or not math.isfinite(reserve):
        raise ValueError(f"reserve must be a finite number of seconds >= 0, not {reserve!r}")
    try:
        deadline = get_deadline(environ)
    except CheckClientError:
        return None
    return max(0.0, deadline - clock() - reserve)


def _debug_requested(environ: Mapping[str, str]) -> bool:
    return environ.get(ENV_DEBUG, "").strip().lower() in ("1", "true", "yes", "on")


def enable_debug_logging() -> None:
    """Make this module's debug messages visible, on stderr unless logging is already configured."""
    logger.setLevel(logging.DEBUG)
    if not logger.hasHandlers():
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("checkclient %(levelname)s: %(message)s"))
        logger.addHandler(handler)


def _validated_errors(errors: str | Iterable[str]) -> list[str]:
    if isinstance(errors, str):
        errors = [errors]
    checked = list(errors)
    if not checked:
        raise ValueError("a failure report needs at least one error message")
    for index, message in enumerate(checked):
        if not isinstance(message, str):
            raise TypeError(f"error messages must be strings; item {index} is {type(message).__name__}")
        if not message.strip():
            raise ValueError(f"error message {index} is blank; Kuberhealthy rejects blank errors")
    return checked


def encode_report(ok: bool, errors: Sequence[str] = ()) -> bytes:
    """The exact body sent: compact JSON ``{"OK":..,"Errors":[..]}``, as Go's encoder writes it.

    Raises ValueError/TypeError for a report Kuberhealthy would reject (success with errors, failure
    without errors, blank errors, a body over 1 MiB).
    """
    if not isinstance(ok, bool):
        raise TypeError(f"ok must be a bool, not {type(ok).__name__}")
    if ok and errors:
        raise ValueError("a success report carries no errors; use report_failure to report errors")
    checked = [] if ok else _validated_errors(errors)
    body = json.dumps({"OK": ok, "Errors": checked}, separators=(",", ":")).encode("utf-8")
    if len(body) > MAX_BODY_BYTES:
        raise ValueError(f"report is {len(body)} bytes; Kuberhealthy accepts at most {MAX_BODY_BYTES}")
    return body


def _backoff(attempt: int, base: float, cap: float) -> float:
    """Exponential backoff with "equal jitter": between half and all of min(cap, base * 2^(attempt-1))."""
    ceiling = min(cap, base * 2.0 ** min(attempt - 1, 32))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Report a redirect as an error instead of following it (urllib would turn the POST into a GET)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _reason(response: IO[bytes], fallback: str) -> str:
    """The first line of a plain-text answer body, shortened; the HTTP reason phrase if there is none."""
    try:
        text = response.read(4096).decode("utf-8", errors="replace").strip()
    except (OSError, http.client.HTTPException):
        text = ""
    first_line = text.splitlines()[0].strip() if text else ""
    return (first_line or fallback)[:_MAX_REASON_CHARS]


@dataclass
class Reporter:
    """Sends one report to Kuberhealthy, retrying transient failures until ``deadline``.

    Build it with :meth:`from_env` in a checker pod. ``clock`` and ``sleep`` are injectable for tests;
    the clock is the wall clock because the deadline is wall-clock time chosen by the controller.
    """

    url: str
    run_uuid: str
    deadline: float | None = None  # unix seconds; None: retry for retry_window seconds
    backoff_base: float = DEFAULT_BACKOFF_BASE
    backoff_max: float = DEFAULT_BACKOFF_MAX
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    retry_window: float = DEFAULT_RETRY_WINDOW
    debug: bool = False
    token_file: str = ""  # KH_REPORT_TOKEN_FILE: sent as `Authorization: Bearer` whenever it can be read
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    _retry_after: float | None = field(default=None, init=False, repr=False)  # from the last answer
    _token_problem: str = field(default="", init=False, repr=False)  # why the last token read failed

    def __post_init__(self) -> None:
        if self.backoff_base <= 0 or self.backoff_max < self.backoff_base:
            raise ValueError("need 0 < backoff_base <= backoff_max")
        if self.request_timeout <= 0 or self.retry_window < 0:
            raise ValueError("need request_timeout > 0 and retry_window >= 0")
        if self.debug:
            enable_debug_logging()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, debug: bool | None = None,
                 **options: Any) -> Reporter:
        """A reporter configured from the variables Kuberhealthy injects; ``options`` set other fields.

        Raises MissingEnvironmentError / InvalidEnvironmentError naming the variable at fault.
        ``KH_CHECK_RUN_DEADLINE`` may be absent (then retries last ``retry_window`` seconds).
        """
        env = _environ(environ)
        deadline = get_deadline(env) if env.get(ENV_DEADLINE, "").strip() else None
        options.setdefault("token_file", env.get(ENV_TOKEN_FILE, "").strip())
        return cls(url=get_reporting_url(env), run_uuid=get_run_uuid(env), deadline=deadline,
                   debug=_debug_requested(env) if debug is None else debug, **options)

    def report_success(self) -> None:
        """Report that the check passed."""
        self.send(True, [])

    def report_failure(self, errors: str | Iterable[str]) -> None:
        """Report that the check failed; ``errors`` (one string or several) appear on the status page."""
        self.send(False, _validated_errors(errors))

    def send(self, ok: bool, errors: Sequence[str]) -> None:
        """POST the report; return once Kuberhealthy accepted it (2xx).

        Raises ReportRejectedError on a 3xx/4xx other than 429 (no retry) and ReportNotDeliveredError
        when connection errors, 5xx or 429 answers lasted until the deadline (a `Retry-After` is
        honoured). At least one attempt is always made.
        """
        body = encode_report(ok, errors)
        give_up_at = self.deadline if self.deadline is not None else self.clock() + self.retry_window
        logger.debug("reporting to %s with %s: %s; body %s", self.url, RUN_UUID_HEADER, self.run_uuid,
                     body.decode("utf-8"))
        attempt = 0
        retried_401 = False
        while True:
            attempt += 1
            remaining = give_up_at - self.clock()
            timeout = min(self.request_timeout, max(remaining, _MIN_ATTEMPT_TIMEOUT))
            self._retry_after = None
            try:
                error = self._attempt(body, timeout)
            except ReportRejectedError as e:
                if e.status != 401 or retried_401 or not self.token_file:
                    raise
                # The token was refused or missing: the kubelet may have been swapping the file. Once.
                retried_401 = True
                logger.warning("report attempt %d got HTTP 401 (%s); reading %s again and retrying once",
                               attempt, e.reason, self.token_file)
                self.sleep(max(0.0, min(self.backoff_base, give_up_at - self.clock())))
                continue
            if error is None:
                logger.debug("report accepted on attempt %d", attempt)
                return
            remaining = give_up_at - self.clock()
            if remaining <= 0:
                raise ReportNotDeliveredError(attempt, error)
            delay = _backoff(attempt, self.backoff_base, self.backoff_max)
            if self._retry_after is not None:  # Kuberhealthy said when to come back
                delay = max(delay, self._retry_after)
            delay = min(delay, remaining)
            logger.warning("report attempt %d failed (%s); retrying in %.2fs", attempt, error, delay)
            self.sleep(delay)

    def _token(self) -> str:
        """The report token, read afresh for each attempt (the kubelet rotates the file); "" without one
        (why is kept for the error of a 401)."""
        self._token_problem = ""
        if not self.token_file:
            return ""
        try:
            with open(self.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as e:
            self._token_problem = f"the token file {self.token_file} could not be read: {e}"
            logger.debug("%s: reporting without a token", self._token_problem)
            return ""
        if not token:
            self._token_problem = f"the token file {self.token_file} is empty"
        return token

    def _attempt(self, body: bytes, timeout: float) -> str | None:
        """One POST: None when accepted, a description when worth retrying; raises when final."""
        headers = {"Content-Type": "application/json", RUN_UUID_HEADER: self.run_uuid, "User-Agent": _USER_AGENT}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(self.url, data=body, method="POST", headers=headers)
        try:
            with _OPENER.open(request, timeout=timeout) as response:
                status = response.status
                logger.debug("Kuberhealthy answered HTTP %d", status)
                return None if 200 <= status < 300 else f"unexpected HTTP {status}"
        except urllib.error.HTTPError as e:
            with e:
                status, reason = e.code, _reason(e, e.reason or http.client.responses.get(e.code, ""))
            logger.debug("Kuberhealthy answered HTTP %d: %s", status, reason)
            if status >= 500 or status == 429:  # busy or cannot confirm the caller yet: come back later
                self._retry_after = _retry_after(e.headers.get("Retry-After") if e.headers else None)
                return f"HTTP {status}: {reason}"
            note = ""
            if status == 401:
                note = self._token_problem or ("" if self.token_file else f"no token sent: {ENV_TOKEN_FILE} is not set")
            raise ReportRejectedError(status, reason, note) from None
        except urllib.error.URLError as e:
            return f"cannot reach {self.url}: {e.reason}"
        except (OSError, http.client.HTTPException) as e:
            return f"cannot reach {self.url}: {type(e).__name__}: {e}"


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (the delta-seconds form), capped at a minute."""
    try:
        return min(60.0, max(0.0, float(value))) if value else None
    except ValueError:
        return None


def report_success(*, environ: Mapping[str, str] | None = None, **options: Any) -> None:
    """Report success for this run. ``options`` are :class:`Reporter` fields (e.g. ``debug=True``)."""
    Reporter.from_env(environ, **options).report_success()


def report_failure(errors: str | Iterable[str], *, environ: Mapping[str, str] | None = None,
                   **options: Any) -> None:
    """Report failure with at least one non-blank error message (validated before anything is sent)."""
    checked = _validated_errors(errors)
    Reporter.from_env(environ, **options).report_failure(checked)


def run_check(check: Callable[[], Iterable[str] | None], *, environ: Mapping[str, str] | None = None,
              **options: Any) -> int:
    """Run ``check`` and report its result exactly once; return an exit status for ``sys.exit``.

    ``check`` returns its error messages (empty or None: healthy). An exception inside it becomes a
    failure report ``"<ExceptionType>: <message>"``. Returns 0 once a report was accepted (a failure
    report included: the failure is on the status page) and 1 when reporting itself failed.
    """
    try:
        result = check()
        messages = [result] if isinstance(result, str) else [str(message) for message in (result or [])]
        errors = [message for message in messages if message.strip()]
        if messages and not errors:
            errors = ["the check failed without an error message"]
    except Exception as e:
        logger.exception("the check raised an exception; reporting it as a failure")
        errors = [f"{type(e).__name__}: {e}".strip()]
    try:
        reporter = Reporter.from_env(environ, **options)
        if errors:
            logger.info("reporting failure: %s", "; ".join(errors))
            reporter.report_failure(errors)
        else:
            logger.info("reporting success")
            reporter.report_success()
    except (CheckClientError, ValueError) as e:
        logger.error("could not report to Kuberhealthy: %s", e)
        return 1
    return 0


def _host_port(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise InvalidEnvironmentError(ENV_REPORTING_URL, url, "the port is not a number") from None
    return parts.hostname or "", port or (443 if parts.scheme == "https" else 80)


def wait_for_kuberhealthy(timeout: float | None = None, *, environ: Mapping[str, str] | None = None,
                          clock: Callable[[], float] = time.time,
                          sleep: Callable[[float], None] = time.sleep,
                          backoff_base: float = DEFAULT_BACKOFF_BASE, backoff_max: float = 3.0) -> None:
    """Block until the reporting URL's host:port accepts a TCP connection.

    Useful first thing in a check on a fresh node, where DNS or the pod network may not be ready yet.
    ``timeout`` seconds; None waits until KH_CHECK_RUN_DEADLINE (or DEFAULT_RETRY_WINDOW without one).
    Raises KuberhealthyUnreachableError when time runs out.
    """
    env = _environ(environ)
    if _debug_requested(env):
        enable_debug_logging()
    host, port = _host_port(get_reporting_url(env))
    if timeout is None:
        has_deadline = bool(env.get(ENV_DEADLINE, "").strip())
        give_up_at = get_deadline(env) if has_deadline else clock() + DEFAULT_RETRY_WINDOW
    else:
        give_up_at = clock() + timeout
    attempt = 0
    while True:
        attempt += 1
        try:
            connect_timeout = min(backoff_max, max(give_up_at - clock(), 0.1))
            with socket.create_connection((host, port), timeout=connect_timeout):
                logger.debug("%s:%d accepts connections", host, port)
                return
        except OSError as e:
            last_error = e
        remaining = give_up_at - clock()
        if remaining <= 0:
            raise KuberhealthyUnreachableError(
                f"Kuberhealthy at {host}:{port} did not accept a connection in time: {last_error}")
        delay = min(_backoff(attempt, backoff_base, backoff_max), remaining)
        logger.debug("%s:%d not reachable yet (%s); retrying in %.2fs", host, port, last_error, delay)
        sleep(delay)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    # "python -m kuberhealthy.checkclient" inside the package; the script's name when copied alone
    prog = f"python -m {__spec__.name}" if __spec__ is not None and __spec__.name != "__main__" else None
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Report a checker pod's result to Kuberhealthy (reads KH_REPORTING_URL, KH_RUN_UUID "
                    "and KH_CHECK_RUN_DEADLINE). Exit status: 0 done, 1 not reported, 2 bad arguments.")
    parser.add_argument("--debug", action="store_true", help="log what is sent (as KH_CLIENT_DEBUG=1)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{ok,fail,wait}")
    commands.add_parser("ok", help="report success")
    fail = commands.add_parser("fail", help="report failure with one or more reasons")
    fail.add_argument("reasons", nargs="+", metavar="REASON", help="an error message for the status page")
    wait = commands.add_parser("wait", help="wait until the reporting URL accepts connections")
    wait.add_argument("--timeout", type=float, default=None,
                      help="seconds (default: until KH_CHECK_RUN_DEADLINE)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: ``ok``, ``fail REASON...`` or ``wait``; returns the exit status."""
    args = _parse_args(argv)
    debug = True if args.debug else None
    try:
        if args.command == "ok":
            report_success(debug=debug)
        elif args.command == "fail":
            report_failure(args.reasons, debug=debug)
        else:
            if args.debug:
                enable_debug_logging()
            wait_for_kuberhealthy(args.timeout)
    except (ValueError, TypeError) as e:
        print(f"checkclient: invalid report: {e}", file=sys.stderr)
        return 2
    except CheckClientError as e:
        print(f"checkclient: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
