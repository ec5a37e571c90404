"""The example checks in examples/checks, driven through their importable functions.

HTTP targets and the fake Kuberhealthy are threaded servers on 127.0.0.1; DNS uses ``localhost`` (from
/etc/hosts) and ``.invalid`` names (refused without a query); the pod-restarts check gets plain objects
shaped like the kubernetes client's models, so no API server is needed.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import yaml

from testbed.cluster.loopback import free_port
from testbed.paths import REPO

EXAMPLES = REPO / "examples" / "checks"
CHECKS = ["http-check", "dns-check", "pod-restarts-check"]


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"kh_example_{name.replace('-', '_')}",
                                                  EXAMPLES / name / "check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


http_check = load_example("http-check")
dns_check = load_example("dns-check")
pod_restarts = load_example("pod-restarts-check")


@dataclass
class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1. GET/POST/... ``/status/<code>`` answers <code>;
    ``/sequence`` answers the next of ``sequence``; every request is recorded as (method, path, body)."""

    sequence: list[int] = field(default_factory=list)
    requests: list[tuple[str, str, bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server.requests.append((self.command, self.path, body))
                if self.path == "/sequence":
                    status = server.sequence.pop(0)
                else:
                    status = int(self.path.rsplit("/", 1)[-1])
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.01,), name="loopback-target",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


class FakeKuberhealthy(LoopbackServer):
    """Accepts every report with 200; ``reports`` are the decoded bodies."""

    @property
    def reports(self) -> list[Any]:
        return [json.loads(body) for method, _, body in self.requests if method == "POST"]


@pytest.fixture
def target() -> Iterator[LoopbackServer]:
    server = LoopbackServer()
    yield server
    server.stop()


@pytest.fixture
def kh(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKuberhealthy]:
    """A fake Kuberhealthy whose address is in the KH_* variables, as in a checker pod."""
    server = FakeKuberhealthy()
    monkeypatch.setenv("KH_REPORTING_URL", f"{server.base}/status/200")
    monkeypatch.setenv("KH_RUN_UUID", "run-1")
    monkeypatch.setenv("KH_CHECK_RUN_DEADLINE", str(int(time.time()) + 60))
    monkeypatch.setattr(logging, "basicConfig", lambda **kwargs: None)  # main() must not reconfigure pytest
    yield server
    server.stop()


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}/"


# --- http-check --------------------------------------------------------------------------------------

def http_config(**env: str) -> Any:
    return http_check.load_config(env)


def test_the_http_check_passes_when_the_url_answers_200(target: LoopbackServer) -> None:
    assert http_check.run_http_check(http_config(CHECK_URL=f"{target.base}/status/200")) == []
    assert [(m, p) for m, p, _ in target.requests] == [("GET", "/status/200")]


def test_the_http_check_fails_readably_when_the_url_answers_500(target: LoopbackServer) -> None:
    url = f"{target.base}/status/500"

    [error] = http_check.run_http_check(http_config(CHECK_URL=url))

    assert error.startswith(f"GET {url}: only 0 of 1 request(s) got the expected status 200")
    assert "got status 500 (1x)" in error


def test_the_http_check_fails_readably_when_the_url_is_unreachable() -> None:
    [error] = http_check.run_http_check(http_config(CHECK_URL=closed_port_url()))

    assert "only 0 of 1" in error
    assert "request failed" in error


@pytest.mark.parametrize(("percent", "healthy"), [("60", True), ("80", False)])
def test_the_http_check_passes_when_the_passing_percent_of_attempts_succeed(
        target: LoopbackServer, percent: str, healthy: bool) -> None:
    target.sequence = [200, 500, 200, 500, 200]
    config = http_config(CHECK_URL=f"{target.base}/sequence", COUNT="5", SECONDS="2", PASSING_PERCENT=percent)
    sleeps: list[float] = []

    errors = http_check.run_http_check(config, sleep=sleeps.append)

    assert (errors == []) is healthy
    assert sleeps == [2.0] * 4  # between attempts, not after the last
    assert len(target.requests) == 5
    if not healthy:
        assert "only 3 of 5" in errors[0] and "4 needed (80%)" in errors[0]


def test_the_http_check_sends_the_request_type_and_body_and_accepts_another_expected_status(
        target: LoopbackServer) -> None:
    config = http_config(CHECK_URL=f"{target.base}/status/201", REQUEST_TYPE="post", REQUEST_BODY='{"a":1}',
                         EXPECTED_STATUS_CODE="201")

    assert http_check.run_http_check(config) == []
    assert target.requests == [("POST", "/status/201", b'{"a":1}')]


def test_the_http_check_defaults_follow_upstream_except_count() -> None:
    config = http_config(CHECK_URL="https://example.invalid/")

    assert (config.count, config.seconds, config.passing_percent, config.request_type,
            config.expected_status_code, config.request_body) == (1, 0.0, 100, "GET", 200, "{}")


@pytest.mark.parametrize(("env", "variable"), [
    ({"CHECK_URL": " "}, "CHECK_URL"),
    ({"CHECK_URL": "ftp://x"}, "CHECK_URL"),
    ({"COUNT": "0"}, "COUNT"),
    ({"COUNT": "many"}, "COUNT"),
    ({"SECONDS": "-1"}, "SECONDS"),
    ({"PASSING_PERCENT": "150"}, "PASSING_PERCENT"),
    ({"REQUEST_TYPE": "FETCH"}, "REQUEST_TYPE"),
    ({"EXPECTED_STATUS_CODE": "ok"}, "EXPECTED_STATUS_CODE"),
])
def test_a_bad_http_check_setting_is_an_error_naming_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(http_check.ConfigError, match=variable):
        http_check.load_config({"CHECK_URL": "http://127.0.0.1/", **env})


def test_the_http_check_reports_exactly_once_to_kuberhealthy(
        target: LoopbackServer, kh: FakeKuberhealthy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHECK_URL", f"{target.base}/status/500")

    assert http_check.main() == 0

    [report] = kh.reports
    assert report["OK"] is False
    assert "got status 500" in report["Errors"][0]


def test_a_misconfigured_http_check_reports_the_setting_as_a_failure(
        kh: FakeKuberhealthy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHECK_URL", raising=False)

    assert http_check.main() == 0

    [report] = kh.reports
    assert report["OK"] is False
    assert report["Errors"][0].startswith("ConfigError: CHECK_URL is not set")


# --- dns-check ---------------------------------------------------------------------------------------

def dns_config(**env: str) -> Any:
    return dns_check.load_config(env)


@pytest.mark.parametrize("env", [{}, {"EXPECTED_ADDRESS": "127.0.0.1"}])
def test_the_dns_check_passes_when_localhost_resolves_to_loopback(env: dict[str, str]) -> None:
    assert dns_check.run_dns_check(dns_config(HOSTNAME="localhost", **env)) == []


def test_the_dns_check_fails_for_a_name_that_does_not_resolve() -> None:
    [error] = dns_check.run_dns_check(dns_config(HOSTNAME="no-such-host.invalid"))

    assert error.startswith("DNS lookup of 'no-such-host.invalid' failed")


def test_the_dns_check_fails_when_the_expected_address_is_not_among_the_results() -> None:
    [error] = dns_check.run_dns_check(dns_config(HOSTNAME="localhost", EXPECTED_ADDRESS="10.9.8.7"))

    assert "'localhost' resolved to 127.0.0.1" in error
    assert "not to the expected 10.9.8.7" in error


def test_the_dns_check_reports_a_resolver_error_readably() -> None:
    def failing(hostname: str, timeout: float) -> list[Any]:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    [error] = dns_check.run_dns_check(dns_config(HOSTNAME="kubernetes.default"), resolver=failing)

    assert error == "DNS lookup of 'kubernetes.default' failed: Temporary failure in name resolution"


def test_a_lookup_slower_than_dns_timeout_fails_the_dns_check(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    monkeypatch.setattr(dns_check.socket, "getaddrinfo", lambda *args, **kwargs: release.wait(5) and [])

    try:
        [error] = dns_check.run_dns_check(dns_config(HOSTNAME="slow.example", DNS_TIMEOUT="0.05"))
    finally:
        release.set()

    assert error == "DNS lookup of 'slow.example' timed out: no answer within 0.05s"


@pytest.mark.parametrize(("env", "variable"), [
    ({}, "HOSTNAME"),
    ({"HOSTNAME": "x", "EXPECTED_ADDRESS": "not-an-ip"}, "EXPECTED_ADDRESS"),
    ({"HOSTNAME": "x", "DNS_TIMEOUT": "soon"}, "DNS_TIMEOUT"),
    ({"HOSTNAME": "x", "DNS_TIMEOUT": "0"}, "DNS_TIMEOUT"),
])
def test_a_bad_dns_check_setting_is_an_error_naming_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(dns_check.ConfigError, match=variable):
        dns_check.load_config(env)


def test_the_dns_check_reports_exactly_once_to_kuberhealthy(
        kh: FakeKuberhealthy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOSTNAME", "localhost")
    monkeypatch.setenv("EXPECTED_ADDRESS", "127.0.0.1")

    assert dns_check.main() == 0

    assert kh.reports == [{"OK": True, "Errors": []}]


# --- pod-restarts-check ------------------------------------------------------------------------------

def container(name: str, restarts: int | None) -> SimpleNamespace:
    return SimpleNamespace(name=name, restart_count=restarts)


def pod(namespace: str, name: str, containers: list[SimpleNamespace] | None = None,
        init: list[SimpleNamespace] | None = None, has_status: bool = True) -> SimpleNamespace:
    status = SimpleNamespace(container_statuses=containers, init_container_statuses=init) if has_status else None
    return SimpleNamespace(metadata=SimpleNamespace(namespace=namespace, name=name), status=status)


PODS = [
    pod("web", "frontend-1", [container("nginx", 11), container("sidecar", 10)]),
    pod("db", "postgres-0", [container("postgres", 0)], init=[container("migrate", 25)]),
    pod("web", "api-7", [container("api", 200)]),
    pod("web", "pending-1", None),
    pod("web", "new-1", has_status=False),
    pod("web", "unknown-1", [container("app", None)]),
]


def test_containers_restarted_more_than_the_limit_are_reported_one_error_each_in_order() -> None:
    assert pod_restarts.find_excessive_restarts(PODS, 10) == [
        "pod db/postgres-0: container migrate restarted 25 times (more than 10 allowed)",
        "pod web/api-7: container api restarted 200 times (more than 10 allowed)",
        "pod web/frontend-1: container nginx restarted 11 times (more than 10 allowed)",
    ]


def test_no_container_over_the_limit_means_healthy() -> None:
    assert pod_restarts.find_excessive_restarts(PODS, 200) == []


@pytest.mark.parametrize(("env", "namespace", "limit"), [
    ({}, "", 10),
    ({"POD_NAMESPACE": "kuberhealthy"}, "kuberhealthy", 10),
    ({"POD_NAMESPACE": "kuberhealthy", "TARGET_NAMESPACE": "web", "MAX_FAILURES_ALLOWED": "3"}, "web", 3),
])
def test_the_pod_restarts_settings_pick_the_namespace_and_limit(
        env: dict[str, str], namespace: str, limit: int) -> None:
    config = pod_restarts.load_config(env)

    assert (config.namespace, config.max_restarts) == (namespace, limit)


@pytest.mark.parametrize("value", ["ten", "-1"])
def test_a_bad_restart_limit_is_an_error_naming_the_variable(value: str) -> None:
    with pytest.raises(pod_restarts.ConfigError, match="MAX_FAILURES_ALLOWED"):
        pod_restarts.load_config({"MAX_FAILURES_ALLOWED": value})


class FakeCoreV1:
    """Serves ``pods`` two per page, recording each list call's arguments."""

    def __init__(self, pods: list[SimpleNamespace]) -> None:
        self.pods = pods
        self.calls: list[tuple[str, str | None, dict[str, Any]]] = []

    def _page(self, options: dict[str, Any]) -> SimpleNamespace:
        start = int(options.get("_continue", 0))
        rest = start + 2 < len(self.pods)
        return SimpleNamespace(items=self.pods[start:start + 2],
                               metadata=SimpleNamespace(_continue=str(start + 2) if rest else None))

    def list_namespaced_pod(self, namespace: str, **options: Any) -> SimpleNamespace:
        self.calls.append(("namespaced", namespace, options))
        return self._page(options)

    def list_pod_for_all_namespaces(self, **options: Any) -> SimpleNamespace:
        self.calls.append(("all", None, options))
        return self._page(options)


def test_the_pod_restarts_check_lists_every_page_of_one_namespace_with_a_timeout() -> None:
    core = FakeCoreV1(PODS)
    config = pod_restarts.load_config({"TARGET_NAMESPACE": "web"})

    errors = pod_restarts.run_pod_restarts_check(config, core, timeout=7.0)

    assert len(errors) == 3
    assert [(kind, ns) for kind, ns, _ in core.calls] == [("namespaced", "web")] * 3
    assert [options.get("_continue") for *_, options in core.calls] == [None, "2", "4"]
    assert all(options["_request_timeout"] == 7.0 for *_, options in core.calls)


def test_the_pod_restarts_check_lists_all_namespaces_when_none_is_set() -> None:
    core = FakeCoreV1([])

    assert pod_restarts.run_pod_restarts_check(pod_restarts.load_config({}), core) == []
    assert [kind for kind, *_ in core.calls] == ["all"]


def test_api_calls_never_outlast_the_run_deadline() -> None:
    deadline = {"KH_CHECK_RUN_DEADLINE": "1000"}

    assert pod_restarts.request_timeout(deadline, clock=lambda: 975.0) == 20.0
    assert pod_restarts.request_timeout(deadline, clock=lambda: 999.0) == 1.0
    assert pod_restarts.request_timeout(deadline, clock=lambda: 0.0) == pod_restarts.MAX_REQUEST_TIMEOUT
    assert pod_restarts.request_timeout({}) == pod_restarts.MAX_REQUEST_TIMEOUT


def test_the_pod_restarts_check_reports_exactly_once_to_kuberhealthy(
        kh: FakeKuberhealthy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "web")
    monkeypatch.setattr(pod_restarts, "connect", lambda: FakeCoreV1(PODS))

    assert pod_restarts.main() == 0

    [report] = kh.reports
    assert report["OK"] is False
    assert len(report["Errors"]) == 3


def test_an_api_error_in_the_pod_restarts_check_becomes_a_failure_report(
        kh: FakeKuberhealthy, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_cluster() -> Any:
        raise pod_restarts.kube_config.ConfigException("Invalid kube-config file. No configuration found.")

    monkeypatch.setattr(pod_restarts, "connect", no_cluster)

    assert pod_restarts.main() == 0

    assert kh.reports == [{"OK": False,
                           "Errors": ["ConfigException: Invalid kube-config file. No configuration found."]}]


# --- packaging ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CHECKS)
def test_every_example_ships_a_khcheck_a_dockerfile_and_a_readme_documenting_its_variables(name: str) -> None:
    directory = EXAMPLES / name
    [khcheck, *rest] = list(yaml.safe_load_all((directory / "khcheck.yaml").read_text()))
    dockerfile = (directory / "Dockerfile").read_text()
    readme = (directory / "README.md").read_text()
    source = (directory / "check.py").read_text()

    assert (khcheck["apiVersion"], khcheck["kind"]) == ("comcast.github.io/v1", "KuberhealthyCheck")
    assert {"runInterval", "timeout", "podSpec"} <= set(khcheck["spec"])
    [container] = khcheck["spec"]["podSpec"]["containers"]
    assert container["image"] and container["env"]
    read_by_check = re.findall(r'environ(?:\.get\(|, )"([A-Z_]+)"', source)
    for variable in [env["name"] for env in container["env"]] + read_by_check:
        assert f"`{variable}`" in readme, f"{name}/README.md does not document {variable}"
    assert "ARG BASE_IMAGE=python:3.11-slim\nFROM ${BASE_IMAGE}\n" in dockerfile  # as the daemon's: no registry here
    # the context is the example's directory; the client comes from its wheel, built into wheels/
    assert "COPY wheels/ /tmp/wheels/" in dockerfile
    assert "--no-index --find-links /tmp/wheels kuberhealthy-checkclient" in dockerfile
    assert "COPY check.py /app/check.py" in dockerfile
    assert "kuberhealthy/checkclient.py" not in dockerfile
    assert all(doc["kind"] in ("ServiceAccount", "Role", "RoleBinding") for doc in rest)


@pytest.mark.parametrize(("name", "env"), [
    ("http-check", {"CHECK_URL": "{target}/status/200"}),
    ("dns-check", {"HOSTNAME": "localhost"}),
])
def test_a_stdlib_example_runs_from_a_directory_laid_out_like_its_image(
        name: str, env: dict[str, str], target: LoopbackServer, kh: FakeKuberhealthy, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"  # what the image's virtualenv holds: the client's package
    shutil.copytree(REPO / "clients" / "python" / "src" / "kuberhealthy_checkclient", site / "kuberhealthy_checkclient")
    shutil.copy(EXAMPLES / name / "check.py", tmp_path / "check.py")
    child_env = {key: value for key, value in os.environ.items() if key.startswith("KH_") or key == "PATH"}
    child_env["PYTHONPATH"] = str(site)
    child_env.update({key: value.format(target=target.base) for key, value in env.items()})

    # -S and a bare environment: no site-packages and no repository on the path, only the client's package
    # and the script's directory
    done = subprocess.run([sys.executable, "-S", str(tmp_path / "check.py")], env=child_env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)

    assert done.returncode == 0, done.stderr
    assert kh.reports == [{"OK": True, "Errors": []}]
