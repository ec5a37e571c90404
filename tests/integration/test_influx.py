"""The Influx forwarder against a real InfluxDB 1.x on loopback: what arrives, and that nothing blocks."""
from __future__ import annotations

import logging
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from influxdb import InfluxDBClient

from kuberhealthy.base import config as khconfig
from kuberhealthy.outputs.influx import InfluxForwarder, InfluxLimits
from testbed.cluster.loopback import free_port
from testbed.tools.influxd import InfluxD
from testbed.wait import wait_for


def make_config(url: str, database: str) -> khconfig.Config:
    return khconfig.from_mapping({"enableInflux": True, "influxURL": url, "influxDB": database},
                                 {"POD_NAME": "kh-test-0", "POD_NAMESPACE": "kuberhealthy"})


@pytest.fixture
def admin(influxd: InfluxD) -> Iterator[InfluxDBClient]:
    client = InfluxDBClient(host="127.0.0.1", port=influxd.http_port, timeout=10)
    yield client
    client.close()


@pytest.fixture
def database(admin: InfluxDBClient) -> str:
    name = "kh_" + uuid.uuid4().hex[:8]
    admin.create_database(name)
    return name


def points(admin: InfluxDBClient, database: str, measurement: str) -> list[dict[str, Any]]:
    return list(admin.query(f'SELECT * FROM "{measurement}"', database=database).get_points())


def exactly(count: int, admin: InfluxDBClient, database: str, measurement: str) -> list[dict[str, Any]] | None:
    got = points(admin, database, measurement)
    return got if len(got) == count else None


def test_pushed_runs_arrive_with_v2_measurement_names_tags_and_values(
        influxd: InfluxD, admin: InfluxDBClient, database: str) -> None:
    fwd = InfluxForwarder(make_config(influxd.url, database))
    fwd.start()
    try:
        fwd.push("ns1", "dns", True, [], 1.25)
        fwd.push("ns1", "dns", False, ["lookup failed", "timeout"], 3.5)
        status = wait_for(lambda: exactly(2, admin, database, "dns.ns1"), what="status points")
        duration = wait_for(lambda: exactly(2, admin, database, "RunDuration.dns.ns1"), what="duration points")
    finally:
        fwd.stop()
        fwd.join(15)
    assert status is not None and duration is not None
    by_value = {p["value"]: p for p in status}
    assert set(by_value) == {0, 1} and all(type(v) is int for v in by_value)
    assert by_value[1]["Errors"] is None  # an empty tag is not stored
    assert by_value[0]["Errors"] == "lookup failed,timeout"
    for p in status + duration:
        assert (p["KuberhealthyPod"], p["Namespace"], p["Name"]) == ("kh-test-0", "ns1", "dns")
    assert sorted(p["value"] for p in duration) == [1.25, 3.5]
    assert not fwd.is_alive()


def test_spaces_in_names_become_underscores_in_the_measurement(
        influxd: InfluxD, admin: InfluxDBClient, database: str) -> None:
    fwd = InfluxForwarder(make_config(influxd.url, database))
    fwd.start()
    fwd.push("my ns", "my check", True, [], 0.5)
    fwd.stop()
    fwd.join(15)
    got = points(admin, database, "my_check.my_ns")
    assert len(got) == 1 and got[0]["Name"] == "my check" and got[0]["Namespace"] == "my ns"
    assert len(points(admin, database, "RunDuration.my_check.my_ns")) == 1


def test_stop_flushes_everything_queued_before_the_thread_ends(
        influxd: InfluxD, admin: InfluxDBClient, database: str) -> None:
    fwd = InfluxForwarder(make_config(influxd.url, database))
    for i in range(300):  # queued before the sender starts: more than one batch
        fwd.push("ns", "burst", i % 2 == 0, [], float(i))
    fwd.start()
    fwd.stop()
    fwd.join(15)
    assert not fwd.is_alive()
    assert fwd.sent == 600 and fwd.dropped == 0
    assert len(points(admin, database, "RunDuration.burst.ns")) == 300


def test_a_dead_influxdb_never_blocks_a_push_and_stop_returns_within_its_deadline(
        caplog: pytest.LogCaptureFixture) -> None:
    closed_port = free_port()  # nothing listens here
    fwd = InfluxForwarder(make_config(f"http://127.0.0.1:{closed_port}", "kh"),
                          InfluxLimits(client_timeout=1.0, flush_timeout=2.0))
    fwd.start()
    for i in range(100):
        fwd.push("ns", f"c{i}", True, [], 1.0)
    fwd.stop()
    fwd.join(10)
    assert not fwd.is_alive()
    assert fwd.sent == 0 and fwd.dropped == 200
    assert any("Dropping" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)


def test_an_influxdb_that_never_answers_cannot_hold_up_a_push_or_shutdown() -> None:
    with socket.socket() as silent:  # accepts connections (kernel backlog) but never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        writers: list[str] = []

        class RecordingClient(InfluxDBClient):  # type: ignore[misc]
            def write_points(self, *args: Any, **kwargs: Any) -> Any:
                writers.append(threading.current_thread().name)
                return super().write_points(*args, **kwargs)

        fwd = InfluxForwarder(make_config(f"http://127.0.0.1:{port}", "kh"),
                              InfluxLimits(client_timeout=0.5, flush_timeout=1.0), client_factory=RecordingClient)
        fwd.start()
        for i in range(20):
            fwd.push("ns", f"c{i}", False, ["x"], 1.0)
        wait_for(lambda: fwd.queued() < 20, what="the sender to pick up a batch")
        fwd.stop()
        fwd.join(10)
        assert not fwd.is_alive()
        assert writers and set(writers) == {"kh-influx"}  # the network is only touched by the sender thread
        assert fwd.sent == 0 and fwd.dropped == 40


def test_a_missing_database_is_reported_and_not_created(
        influxd: InfluxD, admin: InfluxDBClient,
        caplog: pytest.LogCaptureFixture) -> None:
    name = "kh_missing_" + uuid.uuid4().hex[:8]
    fwd = InfluxForwarder(make_config(influxd.url, name))
    fwd.start()
    fwd.push("ns", "dns", True, [], 1.0)
    wait_for(lambda: fwd.dropped == 2, what="the rejected points to be dropped")
    fwd.stop()
    fwd.join(15)
    assert any(name in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
    assert {"name": name} not in admin.get_list_database()
