"""`kuberhealthy check-service` (daemon/checkservice.py), the chart's `helm test`, against a real HTTP server on
the loopback interface that answers as the daemon does, or not yet, or wrongly."""
from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from kuberhealthy import cli
from kuberhealthy.daemon import checkservice
from testbed.cluster.loopback import free_port

PAGE = {"OK": False, "Errors": ["ns/a: boom"], "CheckDetails": {"ns/a": {}, "ns/b": {}}, "JobDetails": {},
        "CurrentMaster": "kh-0"}


class FakeDaemon:
    """Answers GET /readyz and GET / from queues of (status, body); the last answer repeats."""

    def __init__(self) -> None:
        self.answers: dict[str, list[tuple[int, bytes]]] = {
            "/readyz": [(200, b"ok\n")], "/": [(200, json.dumps(PAGE).encode())]}
        self.paths: list[str] = []
        self.port = free_port()
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with fake._lock:
                    fake.paths.append(self.path)
                    queue = fake.answers.get(self.path) or [(404, b"")]
                    status, body = queue.pop(0) if len(queue) > 1 else queue[0]
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.01,), name="fake-daemon",
                                        daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeDaemon:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


@pytest.fixture
def daemon() -> Iterator[FakeDaemon]:
    with FakeDaemon() as d:
        yield d


def test_a_ready_service_with_a_status_page_passes_at_once_and_reports_its_ok_value(daemon: FakeDaemon) -> None:
    outcome = checkservice.check_service(daemon.url, deadline=10, interval=0.01)
    assert outcome.ok
    assert outcome.line == f"kuberhealthy check-service: {daemon.url} passed: /readyz 200, / OK=false, 2 checks " \
                           "(attempt 1)"
    assert daemon.paths == ["/readyz", "/"]


def test_a_service_that_becomes_ready_after_some_attempts_passes(daemon: FakeDaemon) -> None:
    daemon.answers["/readyz"] = [(503, b"not synced"), (503, b"not synced"), (200, b"ok")]
    outcome = checkservice.check_service(daemon.url, deadline=10, interval=0.01)
    assert outcome.ok and "(attempt 3)" in outcome.line
    assert daemon.paths == ["/readyz", "/readyz", "/readyz", "/"]


@pytest.mark.parametrize(("readyz", "page", "seen"), [
    ((503, b"not synced"), (200, b"{}"), "/readyz answered 503"),
    ((200, b"ok"), (500, b""), "/ answered 500"),
    ((200, b"ok"), (200, b"<html>dashboard</html>"), "/ answered 200 but not with JSON"),
    ((200, b"ok"), (200, b'{"ok": true}'), "/ answered JSON without a boolean OK"),
    ((200, b"ok"), (200, b"[true]"), "/ answered JSON without a boolean OK"),
])
def test_a_service_that_never_answers_as_the_daemon_does_fails_after_its_deadline_saying_what_it_saw(
        daemon: FakeDaemon, readyz: tuple[int, bytes], page: tuple[int, bytes], seen: str) -> None:
    daemon.answers = {"/readyz": [readyz], "/": [page]}
    clock = iter(range(1000))  # each reading half a second later: the deadline passes after a few attempts
    outcome = checkservice.check_service(daemon.url, deadline=3, interval=0.01, clock=lambda: next(clock) / 2)
    assert not outcome.ok
    assert outcome.line.startswith(f"kuberhealthy check-service: {daemon.url} failed: {seen} (after ")
    assert daemon.paths.count("/readyz") >= 2  # it retried


def test_nothing_listening_fails_with_one_line_and_no_traceback() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    clock = iter(range(1000))
    outcome = checkservice.check_service(url, deadline=2, interval=0.01, clock=lambda: next(clock) / 2)
    assert not outcome.ok
    assert outcome.line.startswith(f"kuberhealthy check-service: {url} failed: no answer (")
    assert "\n" not in outcome.line


def test_the_stop_event_ends_the_retries() -> None:
    stop = threading.Event()
    stop.set()
    outcome = checkservice.check_service(f"http://127.0.0.1:{free_port()}", deadline=3600, interval=3600, stop=stop)
    assert not outcome.ok and "after 1 attempts" in outcome.line


def test_the_address_comes_from_the_services_environment_variables_or_the_url() -> None:
    env = {"KH_SERVICE_HOST": "10.96.0.12", "KH_SERVICE_PORT": "80", "V6_SERVICE_HOST": "fd00::12"}
    assert checkservice.base_url(None, "KH_SERVICE_HOST", "KH_SERVICE_PORT", env) == "http://10.96.0.12:80"
    assert checkservice.base_url(None, "V6_SERVICE_HOST", "KH_SERVICE_PORT", env) == "http://[fd00::12]:80"
    assert checkservice.base_url("http://kh.example/", None, None, env) == "http://kh.example"
    for args, says in [((None, "NOPE_SERVICE_HOST", "KH_SERVICE_PORT"), "$NOPE_SERVICE_HOST is not set"),
                       ((None, "KH_SERVICE_HOST", "KH_SERVICE_HOST"), "$KH_SERVICE_HOST is not a port number"),
                       ((None, "KH_SERVICE_HOST", None), "give --url, or both"),
                       (("kh.example", None, None), "--url must be an http(s) URL")]:
        with pytest.raises(checkservice.UsageError, match=re.escape(says)):
            checkservice.base_url(*args, environ=env)


def test_the_subcommand_prints_one_line_and_exits_0_when_the_service_answers(
        daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KUBERHEALTHY_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERHEALTHY_SERVICE_PORT", str(daemon.port))
    rc = cli.main(["check-service", "--host-env", "KUBERHEALTHY_SERVICE_HOST", "--port-env",
                   "KUBERHEALTHY_SERVICE_PORT", "--timeout", "10"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count("\n") == 1 and " passed: " in out


def test_the_subcommand_exits_1_when_the_service_fails_and_2_without_an_address(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["check-service", "--url", f"http://127.0.0.1:{free_port()}", "--timeout", "0.2",
                   "--interval", "0.05"])
    assert rc == 1 and " failed: " in capsys.readouterr().out
    monkeypatch.delenv("KUBERHEALTHY_SERVICE_HOST", raising=False)
    rc = cli.main(["check-service", "--host-env", "KUBERHEALTHY_SERVICE_HOST", "--port-env", "X"])
    assert rc == 2 and "KUBERHEALTHY_SERVICE_HOST is not set" in capsys.readouterr().err


def test_the_subcommand_is_named_in_the_main_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "kuberhealthy check-service --help" in capsys.readouterr().out
