"""Fixtures for the HTTP API over real services: the test API server, the caches, a real HTTP server.

Checker pods are created through the API and given a Running status with a loopback pod IP by hand
(`PodMaker`), so a report can come from the pod's own address (Linux routes all of 127/8 on lo).
"""
from __future__ import annotations

import http.client
import itertools
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from flask import Flask
from werkzeug.serving import BaseWSGIServer, make_server

import kuberhealthy.config
from kuberhealthy.kube import Kube
from kuberhealthy.services import Services
from kuberhealthy.web import create_app
from tests.harness.cluster import TestCluster
from tests.harness.wait import wait_for

GROUP_PATH = "/apis/comcast.github.io/v1"
_ips = itertools.count(2)


def next_pod_ip() -> str:
    """A loopback address no other pod of this session has."""
    n = next(_ips)
    return f"127.0.{1 + n // 250}.{1 + n % 250}"


class FakeElector:
    """Stands in for the Lease elector: Services.current_master() asks its holder()."""

    def __init__(self, holder: str) -> None:
        self._holder = holder

    def holder(self) -> str:
        return self._holder

    def is_leader(self) -> bool:
        return False


def make_services(cluster: TestCluster, target_namespace: str, master: str = "kh-test-0") -> Services:
    config = kuberhealthy.config.from_mapping({"targetNamespace": target_namespace},
                                              {"POD_NAME": "kh-test-0", "POD_NAMESPACE": target_namespace or "kh"})
    services = Services(config, Kube.connect(str(cluster.kubeconfig)))
    services.elector = FakeElector(master)
    return services


@pytest.fixture
def services(cluster: TestCluster, namespace: str, no_thread_leaks: None) -> Iterator[Services]:
    """Real caches for `namespace`, synced; stopped after the test, with no kh- thread left behind."""
    s = make_services(cluster, namespace)
    s.start_caches()
    try:
        assert s.wait_synced(10), "caches did not sync"
        yield s
    finally:
        s.stop(10)
        s.kube.close()


@pytest.fixture
def app(services: Services) -> Flask:
    return create_app(services, caller_wait=2.5)


@dataclass
class Server:
    host: str
    port: int
    httpd: BaseWSGIServer
    thread: threading.Thread

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def serve(app: Flask, host: str = "127.0.0.1") -> Server:
    httpd = make_server(host, 0, app, threaded=True)
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="test-web-server",
                         daemon=True)
    t.start()
    return Server(host=host, port=httpd.server_port, httpd=httpd, thread=t)


@pytest.fixture
def server(app: Flask) -> Iterator[Server]:
    s = serve(app)
    try:
        yield s
    finally:
        s.httpd.shutdown()
        s.thread.join(10)
        s.httpd.server_close()


@dataclass
class Answer:
    status: int
    text: str
    headers: dict[str, str] = field(default_factory=dict)


def http_request(server: Server, method: str, path: str, body: bytes | None = None,
                 headers: dict[str, str] | None = None, source_ip: str | None = None,
                 chunked: bool = False) -> Answer:
    """One request over a real socket, optionally from a given source address."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30,
                                      source_address=(source_ip, 0) if source_ip else None)
    try:
        hdrs = dict(headers or {})
        if chunked:
            conn.putrequest(method, path)
            for k, v in hdrs.items():
                conn.putheader(k, v)
            conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            data = body or b""
            conn.send(f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n")
        else:
            conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        return Answer(resp.status, resp.read().decode("utf-8", "replace"),
                      {k.lower(): v for k, v in resp.getheaders()})
    finally:
        conn.close()


def post_report(server: Server, body: Any, run_uuid: str | None = None, source_ip: str | None = None) -> Answer:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if run_uuid is not None:
        headers["kh-run-uuid"] = run_uuid
    return http_request(server, "POST", "/externalCheckStatus", raw, headers, source_ip)


@dataclass
class CheckerPod:
    namespace: str
    name: str
    check: str
    run_uuid: str
    ip: str


class PodMaker:
    """Creates khstates and checker pods through the API, the way the runner would leave them."""

    def __init__(self, cluster: TestCluster, namespace: str, services: Services | None) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.services = services

    def khstate(self, check: str, run_uuid: str, namespace: str | None = None, **spec: Any) -> dict[str, Any]:
        ns = namespace or self.namespace
        body = {"apiVersion": "comcast.github.io/v1", "kind": "KuberhealthyState",
                "metadata": {"name": check, "namespace": ns},
                "spec": {"OK": True, "Errors": [], "RunDuration": "", "Namespace": ns, "Node": "",
                         "AuthoritativePod": "kh-test-0", "uuid": run_uuid, **spec}}
        created: dict[str, Any] = self.cluster.request("POST", f"{GROUP_PATH}/namespaces/{ns}/khstates", body)
        return created

    def get_khstate(self, check: str, namespace: str | None = None) -> dict[str, Any]:
        ns = namespace or self.namespace
        got: dict[str, Any] = self.cluster.request("GET", f"{GROUP_PATH}/namespaces/{ns}/khstates/{check}")
        return got

    def pod(self, check: str, run_uuid: str, ip: str | None = None, *, annotate: bool = True,
            env_uuid: str | None = None, with_env: bool = True, running: bool = True,
            name: str | None = None, wait: bool = True, image: str = "kh-sim/ok",
            reporting_url: str = "http://127.0.0.1/externalCheckStatus", extra_env: dict[str, str] | None = None,
            host_network: bool = False, node_name: str | None = None) -> CheckerPod:
        """A checker pod as the runner creates it; `running` patches its status by hand (no kubelet)."""
        name = name or f"{check}-{uuid.uuid4().hex[:8]}"
        ip = ip or next_pod_ip()
        env = [{"name": "KH_REPORTING_URL", "value": reporting_url}]
        if with_env:
            env.append({"name": "KH_RUN_UUID", "value": env_uuid if env_uuid is not None else run_uuid})
        env.extend({"name": k, "value": v} for k, v in (extra_env or {}).items())
        spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [{"name": "main", "image": image, "env": env}]}
        if host_network:
            spec["hostNetwork"] = True
        if node_name:
            spec["nodeName"] = node_name
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": self.namespace,
                             "labels": {"app": "kuberhealthy-check", "kuberhealthy-check-name": check,
                                        "kuberhealthy-run-id": run_uuid},
                             "annotations": {"comcast.github.io/check-name": check} if annotate else {}},
                "spec": spec}
        self.cluster.request("POST", f"/api/v1/namespaces/{self.namespace}/pods", body)
        if running:
            self.set_running(name, ip)
        if wait and self.services is not None:
            pods = self.services.pods
            wait_for(lambda: (p := pods.get(self.namespace, name)) is not None
                     and (not running or (p.get("status") or {}).get("phase") == "Running"),
                     timeout=15, what=f"pod {name} in the cache")
        return CheckerPod(self.namespace, name, check, run_uuid, ip)

    def set_running(self, name: str, ip: str) -> None:
        self.cluster.request("PATCH", f"/api/v1/namespaces/{self.namespace}/pods/{name}/status",
                             {"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                                         "hostIP": "127.0.0.1"}},
                             content_type="application/merge-patch+json")


@pytest.fixture
def maker(cluster: TestCluster, namespace: str, services: Services) -> PodMaker:
    return PodMaker(cluster, namespace, services)


def rv(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["resourceVersion"])


def wait_cached(services: Services, namespace: str, name: str,
                pred: Callable[[dict[str, Any]], bool] = lambda _o: True) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        obj = services.khstates.get(namespace, name)
        return obj if obj is not None and pred(obj) else None
    got: dict[str, Any] = wait_for(ready, timeout=15, what=f"khstate {namespace}/{name} in the cache")  # type: ignore[arg-type]
    return got
