"""The one place that builds and uses the official `kubernetes` client.

We use the client for what it does well (in-cluster config, kubeconfig with token refresh, TLS, the
urllib3 pool) and speak plain JSON through `ApiClient.call_api`: objects stay dicts, so custom
resources and pods are handled alike, nothing is deserialised into models we do not need, and watch
streams can be shut down from another thread. Every request carries a timeout. ApiException and
transport errors are translated to kuberhealthy.base.errors here and go no further.
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
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from kuberhealthy import __version__
from kuberhealthy.base.errors import ApiError, ConfigError, Unreachable, error_for_status

logger = logging.getLogger(__name__)

Obj = dict[str, Any]

USER_AGENT = f"kuberhealthy/{__version__}"
CONNECT_TIMEOUT = 5.0  # seconds
READ_TIMEOUT = 15.0  # seconds, for ordinary (non-watch) requests
POOL_SIZE = 64  # kept connections to the API server
IN_FLIGHT = 48  # ordinary requests at once; the rest of the pool is for watch streams


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
    """A thin JSON REST client over the official ApiClient."""

    def __init__(self, api_client: Any, in_flight: int = IN_FLIGHT) -> None:
        self._api = api_client
        # Back-pressure: past the pool's size urllib3 opens a new connection per request and throws it
        # away (a TLS handshake each), which turns a slow API server into a CPU storm. Waiting for a
        # slot, within the request's own timeout, keeps every request on a kept connection.
        self._slots = threading.BoundedSemaphore(in_flight)

    @classmethod
    def connect(cls, kubeconfig: str | None = None) -> Kube:
        return cls(load_api_client(kubeconfig))

    def _send(self, method: str, path: str, query: Mapping[str, Any] | None, body: Any,
              content_type: str | None, timeout: tuple[float, float]) -> Any:
        url_path = path + ("?" + urlencode(query) if query else "")
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        try:
            _, url, hdrs, ser_body, _ = self._api.param_serialize(
                method=method, resource_path=url_path, header_params=headers, body=body,
                auth_settings=["BearerToken"])
            return self._api.call_api(method, url, header_params=hdrs, body=ser_body, _request_timeout=timeout)
        except ApiException as e:
            raise _status_error(int(e.status or 0), (e.body or "").encode()
                                if isinstance(e.body, str) else (e.body or b"")) from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise Unreachable(f"{method} {path}: {e}") from e

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
            raise Unreachable(f"{method} {path}: no free connection within {timeout:.1f}s (API server slow)")
        try:
            left = max(0.1, timeout - (time.monotonic() - started))
            resp = self._send(method, path, query, body, content_type, (min(CONNECT_TIMEOUT, left), left))
            try:
                data = resp.read()
            except (urllib3.exceptions.HTTPError, OSError) as e:
                raise Unreachable(f"{method} {path}: {e}") from e
        finally:
            self._slots.release()
        if resp.status >= 400:
            raise _status_error(resp.status, data)
        return bytes(data or b"")

    def open_stream(self, path: str, query: Mapping[str, Any], read_timeout: float) -> Any:
        """Start a streaming GET (a watch). Returns the raw urllib3 response; see iter_lines()."""
        resp = self._send("GET", path, query, None, None, (CONNECT_TIMEOUT, read_timeout))
        if resp.status >= 400:
            raise _status_error(resp.status, resp.read())
        return resp.response

    @staticmethod
    def iter_lines(raw: Any) -> Iterator[bytes]:
        """Newline-delimited JSON frames of a watch response, as they arrive."""
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
        self._api.close()
