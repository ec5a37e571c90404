"""The one place that builds and uses the official `kubernetes` client.

We use the client for what it does well (in-cluster config, kubeconfig with token refresh, TLS
settings) and speak plain JSON ourselves, on wire.py's kept connections (urllib3's pool, as the client
configures it, where wire.py cannot serve the configuration): objects stay dicts, so
custom resources and pods are handled alike, nothing is deserialised into models we do not need, and
watch streams can be shut down from another thread. Every request carries a timeout. Transport errors
and error statuses are translated to kuberhealthy.base.errors here and go no further.

Why not `ApiClient.call_api`: per request it walks the body to "sanitize" it, re-runs the token
refresh hook (for a kubeconfig that re-applies the whole config, proxies from the environment
included), matches content types with regular expressions and re-parses the URL: about as much CPU
as the rest of a check run (and urllib3 and http.client as much again: wire.py). Here the body is `json.dumps`,
and the credentials are refreshed through the client's own hook at most every AUTH_REFRESH seconds
(at once after a 401).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlencode

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from kuberhealthy import __version__
from kuberhealthy.base.errors import ApiError, ConfigError, NoFreeConnection, Unreachable, error_for_status
from kuberhealthy.kube.wire import Answer, Wire

logger = logging.getLogger(__name__)

Obj = dict[str, Any]

USER_AGENT = f"kuberhealthy/{__version__}"
CONNECT_TIMEOUT = 5.0  # seconds
READ_TIMEOUT = 15.0  # seconds, for ordinary (non-watch) requests
POOL_SIZE = 64  # kept connections to the API server
IN_FLIGHT = 48  # ordinary requests at once; the rest of the pool is for watch streams
AUTH_REFRESH = 1.0  # seconds between calls of the client's credential refresh hook (token files rotate in minutes)


def load_api_client(kubeconfig: str | None = None) -> Any:
    """In-cluster config when running in a pod, else KUBECONFIG / ~/.kube/config."""
    cfg = k8s_client.Configuration()
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
    except (ConfigException, FileNotFoundError, OSError) as e:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise ConfigError("KUBECONFIG", f"no usable Kubernetes configuration ({where}): {e}") from e
    if not cfg.verify_ssl:
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    # Many threads share one pool: size it for the watches plus concurrent runs and handlers.
    cfg.connection_pool_maxsize = POOL_SIZE
    # No hidden retries: urllib3's default (3, including read timeouts) would make every timeout 4x
    # longer than stated. Our callers retry where it is safe (409 loops, reflector backoff, elector).
    cfg.retries = False
    api = k8s_client.ApiClient(cfg)
    api.user_agent = USER_AGENT  # so audit logs and API server metrics can tell our requests apart
    return api


def _status_error(status: int, body: bytes) -> ApiError:
    reason, message = "", f"HTTP {status}"
    try:
        doc = json.loads(body)
        if isinstance(doc, dict):
            reason = str(doc.get("reason") or "")
            message = str(doc.get("message") or message)
    except ValueError:
        if body:
            message = body[:300].decode("utf-8", "replace")
    return error_for_status(status, message, reason)


class Kube:
    """A thin JSON REST client over the official client's configuration and urllib3 pool."""

    def __init__(self, api_client: Any, in_flight: int = IN_FLIGHT, clock: Any = time.monotonic) -> None:
        self._api = api_client
        self._cfg = api_client.configuration
        self._pool = api_client.rest_client.pool_manager
        wire = Wire(self._cfg)
        self._wire = wire if wire.usable else None  # else urllib3, as the client configured it
        self._base = str(self._cfg.host).rstrip("/")
        self._agent = str(api_client.user_agent or USER_AGENT)
        self._clock = clock
        self._auth_lock = threading.Lock()
        self._auth: str | None = None
        self._auth_at: float | None = None  # when the refresh hook last ran; None: run it on the next request
        # Back-pressure: past the pool's size urllib3 opens a new connection per request and throws it
        # away (a TLS handshake each), which turns a slow API server into a CPU storm. Waiting for a
        # slot, within the request's own timeout, keeps every request on a kept connection.
        self._slots = threading.BoundedSemaphore(in_flight)

    @classmethod
    def connect(cls, kubeconfig: str | None = None) -> Kube:
        return cls(load_api_client(kubeconfig))

    def _authorization(self) -> str | None:
        """The Authorization header's value: the client's refresh hook (token file re-read, exec plugin,
        expiry) runs at most every AUTH_REFRESH seconds; client-certificate auth has none."""
        now = self._clock()
        with self._auth_lock:
            if self._auth_at is None or now - self._auth_at >= AUTH_REFRESH:
                self._auth = self._cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
                self._auth_at = now
            return self._auth

    def _headers(self, body: Any, content_type: str | None) -> tuple[dict[str, str], bytes | None]:
        headers = {"Accept": "application/json", "User-Agent": self._agent}
        auth = self._authorization()
        if auth:
            headers["Authorization"] = auth
        if body is None:
            return headers, None
        headers["Content-Type"] = content_type or "application/json"
        return headers, body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()

    def _unauthorized(self, status: int) -> None:
        if status == 401:  # a rotated token: the next request asks the refresh hook again
            with self._auth_lock:
                self._auth_at = None

    def _send(self, method: str, path: str, query: Mapping[str, Any] | None, body: Any,
              content_type: str | None, timeout: tuple[float, float], stream: bool = False) -> Any:
        """One request: an Answer from the wire (its body read unless `stream`), or on the urllib3
        fallback (wire.py says when) urllib3's response with its body not yet read."""
        target = path + ("?" + urlencode(query) if query else "")
        headers, data = self._headers(body, content_type)
        try:
            if self._wire is not None:
                answer = self._wire.request(method, target, headers, data, timeout, stream=stream)
                self._unauthorized(answer.status)
                return answer
            resp = self._pool.request(method, self._base + target, body=data, headers=headers,
                                      preload_content=False, retries=False, redirect=False,
                                      timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]))
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise Unreachable(f"{method} {path}: {e}") from e
        self._unauthorized(resp.status)
        return resp

    def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None, body: Any = None,
                content_type: str | None = None, timeout: float = READ_TIMEOUT) -> Any:
        """One request; returns the decoded JSON body (None when empty). Raises ApiError subclasses."""
        data = self.request_bytes(method, path, query=query, body=body, content_type=content_type, timeout=timeout)
        return json.loads(data) if data else None

    def request_bytes(self, method: str, path: str, *, query: Mapping[str, Any] | None = None, body: Any = None,
                      content_type: str | None = None, timeout: float = READ_TIMEOUT) -> bytes:
        """One request; returns the raw body (a pod's log is text, not JSON). Raises ApiError subclasses."""
        started = time.monotonic()
        if not self._slots.acquire(timeout=timeout):
            raise NoFreeConnection(f"{method} {path}: no free connection within {timeout:.1f}s (API server slow)")
        try:
            left = max(0.1, timeout - (time.monotonic() - started))
            resp = self._send(method, path, query, body, content_type, (min(CONNECT_TIMEOUT, left), left))
            if isinstance(resp, Answer):
                status, data = resp.status, resp.body
            else:
                try:
                    status, data = resp.status, resp.read()
                except (urllib3.exceptions.HTTPError, OSError) as e:
                    raise Unreachable(f"{method} {path}: {e}") from e
                finally:
                    resp.release_conn()
        finally:
            self._slots.release()
        if status >= 400:
            raise _status_error(status, data)
        return bytes(data or b"")

    def open_stream(self, path: str, query: Mapping[str, Any], read_timeout: float) -> Any:
        """Start a streaming GET (a watch). Returns the open answer; see iter_lines()."""
        resp = self._send("GET", path, query, None, None, (CONNECT_TIMEOUT, read_timeout), stream=True)
        if resp.status >= 400:
            try:
                body = b"".join(resp.lines()) if isinstance(resp, Answer) else resp.read()
            except (urllib3.exceptions.HTTPError, OSError) as e:
                raise Unreachable(f"GET {path}: {e}") from e
            finally:
                resp.close() if isinstance(resp, Answer) else resp.release_conn()
            raise _status_error(resp.status, body)
        return resp

    @staticmethod
    def iter_lines(raw: Any) -> Iterator[bytes]:
        """Newline-delimited JSON frames of a watch response, as they arrive."""
        if isinstance(raw, Answer):
            try:
                yield from raw.lines()
            except (OSError, ValueError) as e:  # WireError is an OSError; so are timeouts and resets
                raise Unreachable(f"watch stream broke: {type(e).__name__}: {e}") from e
            return
        pending = b""
        try:
            for chunk in raw.stream(amt=None, decode_content=False):
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    if line.strip():
                        yield line
        except (urllib3.exceptions.HTTPError, OSError, ValueError, AttributeError, RuntimeError) as e:
            # urllib3 can also raise AttributeError/RuntimeError on a connection torn down under it
            raise Unreachable(f"watch stream broke: {type(e).__name__}: {e}") from e
        if pending.strip():
            yield pending

    @staticmethod
    def shutdown_stream(raw: Any) -> None:
        """Unblock a reader of `raw` from another thread (on stop), or release it after the stream ended.

        Never raises: a clean-up error must not mask why the stream ended (urllib3 raises RuntimeError
        "Cannot shutdown as connection has already been released to the pool" after a broken read, and
        that once hid every 410 from the reflector, which then resumed from a dead resourceVersion).
        """
        for step in ("shutdown", "close"):
            fn = getattr(raw, step, None)
            if fn is None:
                continue
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - clean-up only; see the docstring
                logger.debug("watch stream %s: %s: %s", step, type(e).__name__, e)

    def close(self) -> None:
        if self._wire is not None:
            self._wire.close()
        self._api.close()
