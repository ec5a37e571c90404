"""The InfluxDB points, client settings and queue policy, without a server (a fake client stands in)."""
from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from kuberhealthy.base import config as khconfig
from kuberhealthy.base.errors import ConfigError
from kuberhealthy.outputs.influx import (
    InfluxDBClientError,
    InfluxForwarder,
    InfluxLimits,
    client_settings,
    make_points,
    measurement_name,
)


def cfg(**raw: Any) -> khconfig.Config:
    base = {"enableInflux": True, "influxURL": "http://influx.example:8086", "influxDB": "kh"}
    base.update(raw)
    return khconfig.from_mapping(base, {"POD_NAME": "kh-0", "POD_NAMESPACE": "kuberhealthy"})


class FakeClient:
    """Records write_points calls; `failures` lists exceptions to raise first, one per call."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.writes: list[list[dict[str, Any]]] = []
        self.failures: list[BaseException] = []
        self.closed = False
        self.failed_all = threading.Event()  # set once every planned failure has been raised

    def write_points(self, points: list[dict[str, Any]]) -> bool:
        if self.failures:
            failure = self.failures.pop(0)
            if not self.failures:
                self.failed_all.set()
            raise failure
        self.writes.append(points)
        return True

    def close(self) -> None:
        self.closed = True


def forwarder(**kw: Any) -> tuple[InfluxForwarder, FakeClient]:
    made: list[FakeClient] = []

    def factory(**settings: Any) -> FakeClient:
        made.append(FakeClient(**settings))
        return made[-1]

    kw.setdefault("backoff_first", 0.0)
    fwd = InfluxForwarder(cfg(), InfluxLimits(**kw), client_factory=factory, now_ns=lambda: 1_700_000_000_000_000_000)
    return fwd, made[0]


def test_a_run_becomes_a_status_point_and_a_duration_point_with_v2_names_and_tags() -> None:
    points = make_points(pod_name="kh-0", namespace="ns1", name="dns", ok=True, errors=[],
                         run_duration_seconds=1.5, time_ns=42)
    tags = {"KuberhealthyPod": "kh-0", "Namespace": "ns1", "Name": "dns", "Errors": ""}
    assert points == [
        {"measurement": "dns.ns1", "tags": tags, "fields": {"value": 1}, "time": 42},
        {"measurement": "RunDuration.dns.ns1", "tags": tags, "fields": {"value": 1.5}, "time": 42},
    ]


def test_a_failed_run_is_zero_as_an_integer_and_its_errors_are_comma_joined() -> None:
    status, duration = make_points(pod_name="p", namespace="n", name="c", ok=False, errors=["a b", "c=d"],
                                   run_duration_seconds=2, time_ns=0)
    assert status["fields"]["value"] == 0 and type(status["fields"]["value"]) is int
    assert type(duration["fields"]["value"]) is float
    assert status["tags"]["Errors"] == duration["tags"]["Errors"] == "a b,c=d"


def test_spaces_in_measurement_names_become_underscores_but_tags_keep_them() -> None:
    assert measurement_name("RunDuration.my check.my ns") == "RunDuration.my_check.my_ns"
    status, _ = make_points(pod_name="p", namespace="my ns", name="my check", ok=True, errors=[],
                            run_duration_seconds=0, time_ns=0)
    assert status["measurement"] == "my_check.my_ns" and status["tags"]["Name"] == "my check"


@pytest.mark.parametrize(("url", "host", "port", "ssl", "path"), [
    ("http://influx:8086", "influx", 8086, False, ""),
    ("http://influx", "influx", 80, False, ""),
    ("https://influx.example/prefix/", "influx.example", 443, True, "/prefix"),
    ("http://[::1]:8086", "[::1]", 8086, False, ""),
])
def test_the_influx_url_gives_host_port_tls_and_path(url: str, host: str, port: int, ssl: bool, path: str) -> None:
    s = client_settings(cfg(influxURL=url), timeout=3.0)
    assert (s["host"], s["port"], s["ssl"], s["verify_ssl"], s["path"]) == (host, port, ssl, ssl, path)
    assert s["database"] == "kh" and s["timeout"] == 3.0 and s["retries"] == 1


def test_credentials_are_sent_only_when_a_username_is_set() -> None:
    assert client_settings(cfg(influxPassword="x"), 1)["username"] is None
    assert client_settings(cfg(influxPassword="x"), 1)["password"] is None
    s = client_settings(cfg(influxUsername="kh", influxPassword="secret"), 1)
    assert (s["username"], s["password"]) == ("kh", "secret")


@pytest.mark.parametrize(("raw", "key"), [
    ({"influxURL": "http://influx:notaport"}, "influxURL"),
    ({"influxURL": "http://"}, "influxURL"),
    ({"influxDB": ""}, "influxDB"),
])
def test_an_unusable_influx_setting_stops_start_up_naming_the_key(raw: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as e:
        client_settings(cfg(**raw), 1)
    assert e.value.key == key


def test_a_full_queue_drops_the_oldest_runs_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    fwd, client = forwarder(queue_runs=2)
    with caplog.at_level(logging.WARNING, logger="kuberhealthy.outputs.influx"):
        for name in ("a", "b", "c", "d"):
            fwd.push("ns", name, True, [], 1.0)
    assert fwd.queued() == 2 and fwd.dropped == 4
    assert [r.getMessage() for r in caplog.records] == ["Dropped 2 InfluxDB points (oldest first): the queue is full"]
    fwd.start()
    fwd.stop()
    fwd.join(5)
    assert [p["measurement"] for batch in client.writes for p in batch] == [
        "c.ns", "RunDuration.c.ns", "d.ns", "RunDuration.d.ns"]


def test_stop_flushes_what_is_queued_and_closes_the_client() -> None:
    fwd, client = forwarder()
    for name in ("a", "b", "c"):
        fwd.push("ns", name, name != "b", ["boom"] if name == "b" else [], 0.25)
    fwd.start()
    fwd.stop()
    fwd.join(5)
    assert not fwd.is_alive() and client.closed
    written = [p["measurement"] for batch in client.writes for p in batch]
    assert written == ["a.ns", "RunDuration.a.ns", "b.ns", "RunDuration.b.ns", "c.ns", "RunDuration.c.ns"]
    assert fwd.sent == 6 and fwd.dropped == 0


def test_a_failed_write_is_retried_and_a_rejected_one_is_not() -> None:
    fwd, client = forwarder()
    client.failures = [OSError("connection refused"), InfluxDBClientError("database not found", 404)]
    fwd.start()
    fwd.push("ns", "retried", True, [], 1.0)  # first try fails (OSError), second is rejected (404): dropped
    assert client.failed_all.wait(5)
    fwd.push("ns", "later", True, [], 1.0)
    fwd.stop()
    fwd.join(5)
    assert not fwd.is_alive()
    assert [p["measurement"] for batch in client.writes for p in batch] == ["later.ns", "RunDuration.later.ns"]
    assert fwd.dropped == 2 and not client.failures


def test_a_push_after_stop_is_ignored() -> None:
    fwd, _ = forwarder()
    fwd.stop()
    fwd.push("ns", "late", True, [], 1.0)
    assert fwd.queued() == 0
