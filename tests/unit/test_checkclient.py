"""The checker client against a fake Kuberhealthy: a threaded HTTP server on 127.0.0.1.

Retries never really sleep here: the client's ``sleep`` (and, for deadlines, its ``clock``) are injected.

The module under test is ``kuberhealthy.checkclient``, or the one named by ``CHECKCLIENT_UNDER_TEST``:
tests/integration/test_checkclient_wheel.py runs these tests in a fresh venv against the installed
``kuberhealthy_checkclient`` wheel (the same file, as its own distribution).
"""
from __future__ import annotations

import importlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from testbed.cluster.loopback import free_port
from testbed.paths import REPO

MODULE = os.environ.get("CHECKCLIENT_UNDER_TEST", "kuberhealthy.checkclient")
if TYPE_CHECKING:
    from kuberhealthy import checkclient
else:
    checkclient = importlib.import_module(MODULE)
InvalidEnvironmentError = checkclient.InvalidEnvironmentError
KuberhealthyUnreachableError = checkclient.KuberhealthyUnreachableError
MissingEnvironmentError = checkclient.MissingEnvironmentError
ReportNotDeliveredError = checkclient.ReportNotDeliveredError
ReportRejectedError = checkclient.ReportRejectedError

RUN_UUID = "6e1a7c4e-2b1f-4c55-9a0e-1f2d3c4b5a69"
FAST = {"backoff_base": 0.001, "backoff_max": 0.01}


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class FakeKuberhealthy:
    """Records every request; answers from ``answers`` (status, text) in order, then 200."""

    port: int = field(default_factory=free_port)
    answers: list[tuple[int, str]] = field(default_factory=list)
    retry_after: int = 0  # the Retry-After header sent with 429 and 503
    hang: bool = False  # hold every request until stop()
    received: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/externalCheckStatus"

    def start(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with fake._lock:
                    fake.received.append(Received("POST", self.path,
                                                  {k.lower(): v for k, v in self.headers.items()}, body))
                    status, text = fake.answers.pop(0) if fake.answers else (200, "")
                if fake.hang:
                    fake._release.wait(10)
                    return
                payload = text.encode()
                self.send_response(status)
                if status in (429, 503):
                    self.send_header("Retry-After", str(fake.retry_after))
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.01,),
                                        name="fake-kuberhealthy", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)


class FakeTime:
    """A wall clock that only moves when the client sleeps."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def kh() -> Iterator[FakeKuberhealthy]:
    fake = FakeKuberhealthy()
    fake.start()
    yield fake
    fake.stop()


def kh_env(url: str, deadline: float | None = None) -> dict[str, str]:
    env = {"KH_REPORTING_URL": url, "KH_RUN_UUID": RUN_UUID}
    env["KH_CHECK_RUN_DEADLINE"] = str(int(time.time() + 60 if deadline is None else deadline))
    return env


@pytest.fixture
def env(kh: FakeKuberhealthy) -> dict[str, str]:
    return kh_env(kh.url)


@pytest.fixture
def restore_client_logger() -> Iterator[None]:
    client_logger = logging.getLogger("kuberhealthy.checkclient")
    level, handlers = client_logger.level, list(client_logger.handlers)
    yield
    client_logger.setLevel(level)
    client_logger.handlers[:] = handlers


# --- what is sent ------------------------------------------------------------------------------------

def test_a_success_report_sends_the_uuid_header_and_exact_body(kh: FakeKuberhealthy, env: dict[str, str]) -> None:
    checkclient.report_success(environ=env)

    [report] = kh.received
    assert report.method == "POST"
    assert report.path == "/externalCheckStatus"
    assert report.body == b'{"OK":true,"Errors":[]}'
    assert report.headers["content-type"] == "application/json"
    assert report.headers["kh-run-uuid"] == RUN_UUID
    assert report.headers["content-length"] == str(len(report.body))


def test_a_failure_report_sends_every_error_in_order(kh: FakeKuberhealthy, env: dict[str, str]) -> None:
    checkclient.report_failure(["first problem", "second: ünïcode"], environ=env)

    [report] = kh.received
    assert report.json() == {"OK": False, "Errors": ["first problem", "second: ünïcode"]}
    assert report.headers["content-type"] == "application/json"
    assert report.headers["kh-run-uuid"] == RUN_UUID


def test_a_single_string_is_reported_as_one_error_not_as_characters(
        kh: FakeKuberhealthy, env: dict[str, str]) -> None:
    checkclient.report_failure("disk full", environ=env)

    assert kh.received[0].json() == {"OK": False, "Errors": ["disk full"]}


def test_the_variables_are_read_from_the_process_environment_by_default(
        kh: FakeKuberhealthy, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    checkclient.report_success()

    assert kh.received[0].headers["kh-run-uuid"] == RUN_UUID


@pytest.mark.parametrize("errors", [[], [""], ["fine", "   "], ["\n"]])
def test_a_failure_without_a_readable_error_is_refused_before_anything_is_sent(
        kh: FakeKuberhealthy, env: dict[str, str], errors: list[str]) -> None:
    with pytest.raises(ValueError, match="error"):
        checkclient.report_failure(errors, environ=env)

    assert kh.received == []


def test_a_non_string_error_is_refused_before_anything_is_sent(
        kh: FakeKuberhealthy, env: dict[str, str]) -> None:
    with pytest.raises(TypeError, match="item 1 is int"):
        checkclient.report_failure(["fine", 3], environ=env)  # type: ignore[list-item]

    assert kh.received == []


def test_a_success_report_cannot_carry_errors_and_oversized_reports_are_refused() -> None:
    with pytest.raises(ValueError, match="no errors"):
        checkclient.encode_report(True, ["x"])
    with pytest.raises(ValueError, match="at most"):
        checkclient.encode_report(False, ["x" * (1024 * 1024)])


# --- retries -----------------------------------------------------------------------------------------

def test_5xx_answers_are_retried_with_growing_jittered_backoff_until_accepted(
        kh: FakeKuberhealthy, env: dict[str, str]) -> None:
    kh.answers = [(503, "unavailable"), (500, "storing failed"), (502, "bad gateway")]
    fake = FakeTime(time.time())

    checkclient.report_success(environ=env, backoff_base=1.0, backoff_max=3.0, clock=fake.clock,
                               sleep=fake.sleep)

    assert len(kh.received) == 4
    assert all(r.body == b'{"OK":true,"Errors":[]}' for r in kh.received)
    ceilings = [1.0, 2.0, 3.0]  # base * 2^(n-1), capped at backoff_max
    assert len(fake.sleeps) == 3
    for slept, ceiling in zip(fake.sleeps, ceilings, strict=True):
        assert ceiling / 2 <= slept <= ceiling


def test_503_and_429_are_retried_no_sooner_than_retry_after_says(kh: FakeKuberhealthy, env: dict[str, str]) -> None:
    kh.answers = [(503, "cannot look up the calling pod right now"), (429, "slow down")]
    kh.retry_after = 7
    fake = FakeTime(time.time())

    checkclient.report_success(environ=env, backoff_base=0.1, backoff_max=0.5, clock=fake.clock,
                               sleep=fake.sleep)

    assert len(kh.received) == 3
    assert fake.sleeps == [7.0, 7.0]


def test_a_refused_connection_is_retried_until_kuberhealthy_starts_listening() -> None:
    late = FakeKuberhealthy()  # its port is free: connecting is refused until it starts
    sleeps: list[float] = []

    def sleep_then_start(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            late.start()

    try:
        checkclient.report_failure(["late"], environ=kh_env(late.url), sleep=sleep_then_start, **FAST)
    finally:
        late.stop()

    assert len(sleeps) == 2
    assert [r.json() for r in late.received] == [{"OK": False, "Errors": ["late"]}]


@pytest.mark.parametrize("status", [400, 404, 413])
def test_a_4xx_is_not_retried_and_raises_with_the_server_reason(
        kh: FakeKuberhealthy, env: dict[str, str], status: int) -> None:
    kh.answers = [(status, "run uuid abc is stale; the current run is def\nsecond line")]
    sleeps: list[float] = []

    with pytest.raises(ReportRejectedError) as caught:
        checkclient.report_failure(["x"], environ=env, sleep=sleeps.append, **FAST)

    assert caught.value.status == status
    assert caught.value.reason == "run uuid abc is stale; the current run is def"
    assert "stale" in str(caught.value)
    assert len(kh.received) == 1
    assert sleeps == []


def test_a_redirect_is_not_followed_and_not_retried(kh: FakeKuberhealthy, env: dict[str, str]) -> None:
    kh.answers = [(307, "moved")]

    with pytest.raises(ReportRejectedError) as caught:
        checkclient.report_success(environ=env, **FAST)

    assert caught.value.status == 307
    assert len(kh.received) == 1


def test_retries_stop_at_the_run_deadline(kh: FakeKuberhealthy) -> None:
    kh.answers = [(503, "busy")] * 1000
    fake = FakeTime(1_700_000_000.0)
    env = kh_env(kh.url, deadline=1_700_000_010)

    with pytest.raises(ReportNotDeliveredError) as caught:
        checkclient.report_success(environ=env, backoff_base=0.5, backoff_max=2.0, clock=fake.clock,
                                   sleep=fake.sleep)

    assert fake.now == pytest.approx(1_700_000_010)  # waited up to the deadline, not past it
    assert sum(fake.sleeps) == pytest.approx(10)
    assert max(fake.sleeps) <= 2.0
    assert caught.value.attempts == len(kh.received) == len(fake.sleeps) + 1
    assert "503" in caught.value.last_error


def test_a_deadline_already_past_still_gets_exactly_one_attempt(kh: FakeKuberhealthy) -> None:
    kh.answers = [(500, "storing failed")]
    sleeps: list[float] = []

    with pytest.raises(ReportNotDeliveredError, match="1 attempt"):
        checkclient.report_success(environ=kh_env(kh.url, deadline=time.time() - 5), sleep=sleeps.append)

    assert len(kh.received) == 1
    assert sleeps == []


def test_a_hung_kuberhealthy_cannot_hold_the_check_past_its_deadline(kh: FakeKuberhealthy) -> None:
    kh.hang = True
    started = time.monotonic()

    with pytest.raises(ReportNotDeliveredError, match="timed out"):
        checkclient.report_success(environ=kh_env(kh.url, deadline=time.time() - 1), request_timeout=0.2)

    assert time.monotonic() - started < 3


def test_without_a_deadline_retries_last_the_retry_window(kh: FakeKuberhealthy) -> None:
    kh.answers = [(503, "busy")] * 1000
    fake = FakeTime(1_000.0)
    env = {"KH_REPORTING_URL": kh.url, "KH_RUN_UUID": RUN_UUID}

    with pytest.raises(ReportNotDeliveredError):
        checkclient.report_success(environ=env, retry_window=5.0, backoff_base=1.0, backoff_max=1.0,
                                   clock=fake.clock, sleep=fake.sleep)

    assert fake.now == pytest.approx(1_005.0)


# --- environment -------------------------------------------------------------------------------------

@pytest.mark.parametrize("missing", ["KH_REPORTING_URL", "KH_RUN_UUID"])
@pytest.mark.parametrize("blank", [False, True])
def test_a_missing_or_blank_variable_raises_an_error_naming_it(
        kh: FakeKuberhealthy, env: dict[str, str], missing: str, blank: bool) -> None:
    if blank:
        env[missing] = "  "
    else:
        del env[missing]

    with pytest.raises(MissingEnvironmentError, match=missing) as caught:
        checkclient.report_success(environ=env)

    assert caught.value.variable == missing
    assert kh.received == []


def test_get_deadline_returns_unix_seconds_and_names_the_variable_when_missing_or_malformed() -> None:
    assert checkclient.get_deadline({"KH_CHECK_RUN_DEADLINE": "1700000123"}) == 1_700_000_123.0

    with pytest.raises(MissingEnvironmentError, match="KH_CHECK_RUN_DEADLINE"):
        checkclient.get_deadline({})
    for bad in ("soon", "nan", "inf"):
        with pytest.raises(InvalidEnvironmentError, match="KH_CHECK_RUN_DEADLINE"):
            checkclient.get_deadline({"KH_CHECK_RUN_DEADLINE": bad})


# --- the pod's namespace and the time left ---------------------------------------------------------

def test_the_pod_namespace_is_KH_POD_NAMESPACE_before_the_service_account_file(tmp_path: Path) -> None:
    sa_file = tmp_path / "namespace"
    sa_file.write_text("from-the-file")

    assert checkclient.get_pod_namespace({"KH_POD_NAMESPACE": " team-a \n"}, namespace_file=str(sa_file)) == "team-a"


def test_without_KH_POD_NAMESPACE_the_namespace_is_read_from_the_service_account_file(tmp_path: Path) -> None:
    sa_file = tmp_path / "namespace"
    sa_file.write_text("team-b\n")

    assert checkclient.get_pod_namespace({"KH_POD_NAMESPACE": " "}, namespace_file=str(sa_file)) == "team-b"
    assert checkclient.SERVICE_ACCOUNT_NAMESPACE_FILE == "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def test_without_either_the_namespace_getter_raises_naming_the_variable_and_the_file(tmp_path: Path) -> None:
    missing, empty = tmp_path / "missing", tmp_path / "empty"
    empty.write_text("\n")

    for sa_file, why in ((missing, "cannot be read"), (empty, "is empty")):
        with pytest.raises(MissingEnvironmentError, match="KH_POD_NAMESPACE") as caught:
            checkclient.get_pod_namespace({}, namespace_file=str(sa_file))
        assert caught.value.variable == "KH_POD_NAMESPACE"
        assert f"{sa_file} {why}" in str(caught.value)


def test_time_left_counts_down_to_the_deadline_less_the_reserve_and_never_goes_negative() -> None:
    env = {"KH_CHECK_RUN_DEADLINE": "1700000100"}

    assert checkclient.time_left(env, clock=lambda: 1_700_000_070.5) == 29.5
    assert checkclient.time_left(env, reserve=5, clock=lambda: 1_700_000_070.5) == 24.5
    assert checkclient.time_left(env, reserve=5, clock=lambda: 1_700_000_097.0) == 0.0
    assert checkclient.time_left(env, clock=lambda: 1_700_000_200.0) == 0.0
    assert checkclient.time_left({"KH_CHECK_RUN_DEADLINE": "1"}) == 0.0  # the real clock is past 1970


@pytest.mark.parametrize("value", [None, "", " ", "soon", "nan", "inf", "-inf"])
def test_time_left_is_none_when_the_deadline_is_unset_or_not_unix_seconds(value: str | None) -> None:
    env = {} if value is None else {"KH_CHECK_RUN_DEADLINE": value}

    assert checkclient.time_left(env, clock=lambda: 0.0) is None


@pytest.mark.parametrize("reserve", [-1.0, float("nan"), float("inf")])
def test_time_left_refuses_a_reserve_that_is_not_a_finite_non_negative_number(reserve: float) -> None:
    with pytest.raises(ValueError, match="reserve"):
        checkclient.time_left({"KH_CHECK_RUN_DEADLINE": "1700000100"}, reserve=reserve)


@pytest.mark.parametrize("url", ["kuberhealthy/externalCheckStatus", "ftp://kh/x", "http:///nohost"])
def test_a_reporting_url_that_is_not_http_raises_an_error_naming_the_variable(url: str) -> None:
    with pytest.raises(InvalidEnvironmentError, match="KH_REPORTING_URL"):
        checkclient.report_success(environ={"KH_REPORTING_URL": url, "KH_RUN_UUID": RUN_UUID})


def test_debug_mode_logs_the_url_the_uuid_header_and_the_body(
        kh: FakeKuberhealthy, env: dict[str, str], caplog: pytest.LogCaptureFixture,
        restore_client_logger: None) -> None:
    env["KH_CLIENT_DEBUG"] = "1"

    with caplog.at_level(logging.DEBUG, logger="kuberhealthy.checkclient"):
        checkclient.report_failure(["why"], environ=env)

    text = caplog.text
    assert kh.url in text
    assert f"kh-run-uuid: {RUN_UUID}" in text
    assert '{"OK":false,"Errors":["why"]}' in text


# --- waiting for Kuberhealthy ------------------------------------------------------------------------

def test_wait_for_kuberhealthy_returns_once_the_port_accepts_connections() -> None:
    late = FakeKuberhealthy()
    sleeps: list[float] = []

    def sleep_then_start(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            late.start()

    try:
        checkclient.wait_for_kuberhealthy(30, environ=kh_env(late.url), sleep=sleep_then_start,
                                          backoff_base=0.001, backoff_max=0.01)
    finally:
        late.stop()

    assert len(sleeps) == 3
    assert late.received == []  # only a TCP connect: nothing is reported


def test_wait_for_kuberhealthy_gives_up_after_its_timeout() -> None:
    fake = FakeTime(5_000.0)

    with pytest.raises(KuberhealthyUnreachableError, match=r"127\.0\.0\.1"):
        checkclient.wait_for_kuberhealthy(4, environ=kh_env(f"http://127.0.0.1:{free_port()}/x"),
                                          clock=fake.clock, sleep=fake.sleep, backoff_max=1.0)

    assert fake.now == pytest.approx(5_004.0)


# --- run_check ---------------------------------------------------------------------------------------

def test_run_check_reports_success_once_when_the_check_returns_no_errors(
        kh: FakeKuberhealthy, env: dict[str, str]) -> None:
    assert checkclient.run_check(lambda: [], environ=env) == 0

    assert [r.json() for r in kh.received] == [{"OK": True, "Errors": []}]


def test_run_check_reports_the_returned_errors_once_dropping_blank_ones(
        kh: FakeKuberhealthy, env: dict[str, str]) -> None:
    assert checkclient.run_check(lambda: ["a broke", "", "b broke"], environ=env) == 0

    assert [r.json() for r in kh.received] == [{"OK": False, "Errors": ["a broke", "b broke"]}]


def test_run_check_turns_an_exception_into_one_failure_report(
        kh: FakeKuberhealthy, env: dict[str, str]) -> None:
    def check() -> list[str]:
        raise RuntimeError("cannot list pods")

    assert checkclient.run_check(check, environ=env) == 0

    assert [r.json() for r in kh.received] == [{"OK": False, "Errors": ["RuntimeError: cannot list pods"]}]


def test_run_check_returns_non_zero_when_the_report_is_rejected(
        kh: FakeKuberhealthy, env: dict[str, str]) -> None:
    kh.answers = [(400, "unknown caller")]

    assert checkclient.run_check(lambda: None, environ=env) == 1
    assert len(kh.received) == 1


# --- command line ------------------------------------------------------------------------------------

def run_cli(*args: str, env: dict[str, str], script: Path | None = None,
            cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("KH_")}
    command = [sys.executable, "-I", str(script)] if script else [sys.executable, "-m", MODULE]
    return subprocess.run([*command, *args], env={**base, **env}, cwd=cwd, capture_output=True, text=True,
                          timeout=30, check=False)


def test_the_cli_ok_reports_success_and_exits_zero(kh: FakeKuberhealthy, env: dict[str, str]) -> None:
    done = run_cli("ok", env=env)

    assert done.returncode == 0, done.stderr
    [report] = kh.received
    assert report.body == b'{"OK":true,"Errors":[]}'
    assert report.headers["kh-run-uuid"] == RUN_UUID


def test_the_cli_fail_reports_every_reason(kh: FakeKuberhealthy, env: dict[str, str]) -> None:
    done = run_cli("fail", "disk is 97% full", "second reason", env=env)

    assert done.returncode == 0, done.stderr
    assert kh.received[0].json() == {"OK": False, "Errors": ["disk is 97% full", "second reason"]}


def test_the_cli_exits_non_zero_naming_a_missing_variable(kh: FakeKuberhealthy) -> None:
    done = run_cli("ok", env={"KH_REPORTING_URL": kh.url})

    assert done.returncode == 1
    assert "KH_RUN_UUID" in done.stderr
    assert kh.received == []


@pytest.mark.parametrize("args", [["fail", " "], ["fail"], ["bogus"], []])
def test_the_cli_refuses_bad_arguments_without_sending(
        kh: FakeKuberhealthy, env: dict[str, str], args: list[str]) -> None:
    done = run_cli(*args, env=env)

    assert done.returncode == 2
    assert done.stderr.strip()
    assert kh.received == []


def test_the_cli_prints_the_server_reason_for_a_rejected_report(
        kh: FakeKuberhealthy, env: dict[str, str]) -> None:
    kh.answers = [(400, "pod with run uuid not found")]

    done = run_cli("fail", "x", env=env)

    assert done.returncode == 1
    assert "pod with run uuid not found" in done.stderr


def test_the_cli_help_names_the_module_it_runs_as(kh: FakeKuberhealthy, env: dict[str, str]) -> None:
    done = run_cli("--help", env=env)

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m {MODULE} ")
    assert kh.received == []


def test_the_cli_debug_flag_logs_what_is_sent(kh: FakeKuberhealthy, env: dict[str, str]) -> None:
    done = run_cli("--debug", "fail", "why", env=env)

    assert done.returncode == 0
    assert '{"OK":false,"Errors":["why"]}' in done.stderr


def test_the_module_works_when_copied_alone_into_an_empty_directory(
        kh: FakeKuberhealthy, env: dict[str, str], tmp_path: Path) -> None:
    copied = tmp_path / "checkclient.py"
    shutil.copy(checkclient.__file__, copied)

    waited = run_cli("wait", "--timeout", "5", env=env, script=copied, cwd=tmp_path)
    reported = run_cli("fail", "alone", env=env, script=copied, cwd=tmp_path)

    assert waited.returncode == 0, waited.stderr
    assert reported.returncode == 0, reported.stderr
    assert kh.received[0].json() == {"OK": False, "Errors": ["alone"]}
    source = copied.read_text()
    assert "from kuberhealthy" not in source
    assert "from ." not in source


def test_the_report_token_is_sent_as_a_bearer_token_read_afresh_for_each_attempt(
        kh: FakeKuberhealthy, env: dict[str, str], tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("tok-1\n")
    kh.answers = [(503, "not yet")]
    reporter = checkclient.Reporter.from_env({**env, "KH_REPORT_TOKEN_FILE": str(token)},
                                             sleep=lambda _s: token.write_text("tok-2"))
    reporter.report_success()
    assert [r.headers.get("authorization") for r in kh.received] == ["Bearer tok-1", "Bearer tok-2"]
    assert all(r.headers["kh-run-uuid"] == RUN_UUID for r in kh.received)


def test_without_a_readable_token_file_the_report_goes_without_a_token(
        kh: FakeKuberhealthy, env: dict[str, str], tmp_path: Path) -> None:
    checkclient.report_success(environ={**env, "KH_REPORT_TOKEN_FILE": str(tmp_path / "missing")})
    [report] = kh.received
    assert "authorization" not in report.headers


def test_a_401_is_retried_once_after_reading_the_token_file_again(
        kh: FakeKuberhealthy, env: dict[str, str], tmp_path: Path) -> None:
    token = tmp_path / "token"  # missing at first: the kubelet is swapping it
    kh.answers = [(401, "check ns/probe is bound to ServiceAccount tokens since it reported with one")]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        token.write_text("tok-2\n")
    checkclient.report_success(environ={**env, "KH_REPORT_TOKEN_FILE": str(token)}, sleep=sleep, **FAST)
    assert [r.headers.get("authorization") for r in kh.received] == [None, "Bearer tok-2"]
    assert len(sleeps) == 1


def test_a_second_401_is_final_and_names_the_token_file_that_could_not_be_read(
        kh: FakeKuberhealthy, env: dict[str, str], tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    kh.answers = [(401, "bound"), (401, "bound again"), (200, "")]
    with pytest.raises(ReportRejectedError) as caught:
        checkclient.report_success(environ={**env, "KH_REPORT_TOKEN_FILE": str(missing)}, sleep=lambda _s: None,
                                   **FAST)
    assert caught.value.status == 401 and caught.value.reason == "bound again"
    assert f"the token file {missing} could not be read" in str(caught.value)
    assert len(kh.received) == 2


def test_a_401_without_a_token_file_is_not_retried_and_says_no_token_was_sent(
        kh: FakeKuberhealthy, env: dict[str, str]) -> None:
    kh.answers = [(401, "a ServiceAccount token is required")]
    with pytest.raises(ReportRejectedError) as caught:
        checkclient.report_success(environ=env, sleep=lambda _s: None, **FAST)
    assert "KH_REPORT_TOKEN_FILE is not set" in str(caught.value) and len(kh.received) == 1


def test_other_4xx_answers_are_still_not_retried_with_a_token_file(
        kh: FakeKuberhealthy, env: dict[str, str], tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("tok")
    kh.answers = [(400, "stale")]
    with pytest.raises(ReportRejectedError):
        checkclient.report_success(environ={**env, "KH_REPORT_TOKEN_FILE": str(token)}, sleep=lambda _s: None)
    assert len(kh.received) == 1
