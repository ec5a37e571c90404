"""A thin raw-JSON door to the API server for the simulated kubelet.

The official client's typed models get in the way here (a Binding's 201 answer does not deserialize,
patches default to JSON-patch), and the simulator only needs plain dicts. So this wraps the client's
transport (kubeconfig loading, token auth, TLS, connection pool) and speaks JSON paths directly.
It does not retry; callers decide what an error means.
"""
from __future__ import annotations

import json
import logging
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

logger = logging.getLogger(__name__)

USER_AGENT = "kh-sim-kubelet"
CALL_TIMEOUT = (5.0, 15.0)  # (connect, read) seconds for ordinary calls
MERGE_PATCH = "application/merge-patch+json"


class SimApiError(Exception):
    """An API call answered outside 2xx (or failed in transport, status 0)."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"API error {status}: {body[:300]}")
        self.status = status
        self.body = body

    @property
    def reason(self) -> str:
        try:
            return str(json.loads(self.body).get("reason", ""))
        except ValueError:
            return ""


class RawApi:
    """JSON in, JSON out, against the cluster named by a kubeconfig file."""

    def __init__(self, kubeconfig_path: str, pool_size: int = 32) -> None:
        cfg = k8s_client.Configuration()
        k8s_config.load_kube_config(config_file=str(kubeconfig_path), client_configuration=cfg)
        cfg.connection_pool_maxsize = pool_size
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
            raise SimApiError(resp.status, text)
        return json.loads(text) if text else {}

    def stream(self, path: str, query: dict[str, Any], timeout: tuple[float, float]) -> Any:
        """Open a watch; the caller reads lines from the urllib3 response and must release it."""
        method, url, headers, _ = self._serialize("GET", path, query, None, "application/json")
        try:
            resp = self._client.call_api(method, url, header_params=headers, _request_timeout=timeout)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise SimApiError(0, f"{type(e).__name__}: {e}") from e
        if not 200 <= resp.status <= 299:
            raise SimApiError(resp.status, (resp.read() or b"").decode("utf-8", errors="replace"))
        return resp.response
