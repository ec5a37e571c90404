"""A thin raw-JSON door to the API server for the simulated kubelet.

The official client's typed models get in the way here (a Binding's 201 answer does not deserialize,
patches default to JSON-patch), and the simulator only needs plain dicts. So this wraps the client's
transport (kubeconfig loading, token auth, TLS, connection pool) and speaks JSON paths directly.
`call` does not retry; `call_until` retries what a real kubelet would retry (transport errors, 429,
5xx) with jittered, capped backoff until a stop event is set. Callers decide what a final error means.

The connection pool should be about as large as the number of threads calling at once (one per
simulated pod): a full pool discards the connection after each call, and the next call pays a new TLS
handshake.
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from testbed.sim.retry import backoff, retry_after_seconds

logger = logging.getLogger(__name__)

USER_AGENT = "kh-sim-kubelet"
CALL_TIMEOUT = (5.0, 15.0)  # (connect, read) seconds for ordinary calls
DEFAULT_POOL_SIZE = 128  # connections kept per API server
RETRY_BASE = 0.1  # seconds: the first wait of call_until
RETRY_CAP = 2.0  # seconds: call_until never waits longer between attempts


class SimApiError(Exception):
    """An API call answered outside 2xx (or failed in transport, status 0)."""

    def __init__(self, status: int, body: str, retry_after: float | None = None) -> None:
        super().__init__(f"API error {status}: {body[:300]}")
        self.status = status
        self.body = body
        self.retry_after = retry_after  # seconds, from the answer's Retry-After header

    @property
    def transient(self) -> bool:
        """Worth retrying: no answer (status 0), throttled (429) or a server-side failure (5xx)."""
        return self.status in (0, 429) or self.status >= 500

    @property
    def reason(self) -> str:
        try:
            return str(json.loads(self.body).get("reason", ""))
        except ValueError:
            return ""


class RawApi:
    """JSON in, JSON out, against the cluster named by a kubeconfig file."""

    def __init__(self, kubeconfig_path: str, pool_size: int = DEFAULT_POOL_SIZE) -> None:
        cfg = k8s_client.Configuration()
        k8s_config.load_kube_config(config_file=str(kubeconfig_path), client_configuration=cfg)
        cfg.connection_pool_maxsize = pool_size
        # No hidden retries inside urllib3 (by default 3, at once, per call): callers retry with backoff,
        # count what they retried, and a frozen API server costs one timeout, not four.
        cfg.retries = False
        self._client = k8s_client.ApiClient(cfg)
        self._client.user_agent = USER_AGENT

    def close(self) -> None:
        self._client.close()
        self._client.rest_client.pool_manager.clear()

    def _serialize(self, method: str, path: str, query: dict[str, Any] | None, body: Any,
                   content_type: str) -> tuple[str, str, dict[str, str], Any]:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        method, url, headers, body, _ = self._client.param_serialize(
            method=method, resource_path=path, query_params=params, header_params=headers, body=body,
            auth_settings=["BearerToken"])
        return method, url, headers, body

    def call(self, method: str, path: str, body: Any = None, *, query: dict[str, Any] | None = None,
             content_type: str = "application/json",
             timeout: tuple[float, float] = CALL_TIMEOUT) -> dict[str, Any]:
        """One request; the decoded JSON answer, or SimApiError."""
        method, url, headers, body = self._serialize(method, path, query, body, content_type)
        try:
            resp = self._client.call_api(method, url, header_params=headers, body=body,
                                         _request_timeout=timeout)
            raw = resp.read() or b""
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise SimApiError(0, f"{type(e).__name__}: {e}") from e
        text = raw.decode("utf-8", errors="replace")
        if not 200 <= resp.status <= 299:
            raise SimApiError(resp.status, text, retry_after_seconds(resp.headers.get("Retry-After")))
        return json.loads(text) if text else {}

    def call_until(self, stop: threading.Event, method: str, path: str, body: Any = None, *,
                   content_type: str = "application/json",
                   on_retry: Callable[[SimApiError], None] | None = None) -> dict[str, Any] | None:
        """call() (no query, the ordinary timeout), retrying transient errors until it gets an answer or
        `stop` is set.

        Returns the answer, or None when `stop` was set first (nothing more is sent then); raises
        SimApiError for a final answer (a 4xx other than 429). `on_retry` sees every retried error.
        The waits are stop-aware: setting `stop` ends them at once.
        """
        attempt = 0
        while not stop.is_set():
            attempt += 1
            try:
                return self.call(method, path, body, content_type=content_type)
            except SimApiError as e:
                if stop.is_set():
                    break
                if not e.transient:
                    raise
                if on_retry is not None:
                    on_retry(e)
                delay = min(RETRY_CAP, e.retry_after if e.retry_after is not None
                            else backoff(attempt, RETRY_BASE, RETRY_CAP))
                # one line when a call starts failing, a warning once it keeps failing (~15 s), then rarely
                level = (logging.WARNING if attempt == 10 or attempt % 50 == 0
                         else logging.INFO if attempt == 1 else logging.DEBUG)
                logger.log(level, "%s %s failed (attempt %d; retrying in %.2fs): %s", method, path, attempt,
                           delay, e)
                if stop.wait(delay):
                    break
        return None

    def stream(self, path: str, query: dict[str, Any], timeout: tuple[float, float]) -> Any:
        """Open a watch; the caller reads lines from the urllib3 response and must release it."""
        method, url, headers, _ = self._serialize("GET", path, query, None, "application/json")
        try:
            resp = self._client.call_api(method, url, header_params=headers, _request_timeout=timeout)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise SimApiError(0, f"{type(e).__name__}: {e}") from e
        if not 200 <= resp.status <= 299:
            raise SimApiError(resp.status, (resp.read() or b"").decode("utf-8", errors="replace"),
                              retry_after_seconds(resp.headers.get("Retry-After")))
        return resp.response


class OpenStream:
    """The streaming response (a watch) one thread is reading, so that another thread can cut it: the
    reader set()s it while it reads and set(None)s it after; cut() unblocks the reader at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._resp: Any = None

    def set(self, resp: Any) -> None:
        with self._lock:
            self._resp = resp

    @property
    def open(self) -> bool:
        with self._lock:
            return self._resp is not None

    def cut(self) -> None:
        with self._lock:
            resp = self._resp
        if resp is not None:
            cut_stream(resp)


def cut_stream(resp: Any) -> None:
    """Unblock a thread reading a streaming response (a watch): shut its socket down (urllib3 >= 2.3),
    else close it. `resp` is a urllib3 response, or a requests one (its urllib3 response is `.raw`)."""
    raw = resp.raw if hasattr(resp, "raw") else resp
    try:
        if hasattr(raw, "shutdown"):
            raw.shutdown()
        else:
            raw.close()
    except (OSError, ValueError, RuntimeError):  # already closed or released by the reading thread
        pass
