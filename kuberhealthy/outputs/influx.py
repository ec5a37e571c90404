"""Forward each run's result to InfluxDB 1.x, the way Kuberhealthy v2.7.1 did, without ever slowing a run.

After a run, `push()` queues two points and returns at once:
  measurement `<check>.<namespace>`              field `value` = 1 (OK) or 0, an integer as in v2
  measurement `RunDuration.<check>.<namespace>`  field `value` = run duration in seconds (float)
both tagged `KuberhealthyPod` (this replica, ours: v2 left it empty), `Namespace`, `Name` and `Errors`
(the errors joined with ","; InfluxDB drops an empty tag). Spaces in measurement names become "_".
Points are stamped with the time of the run's end, so a delayed send still lands at the right time.

One sender thread writes batches with `write_points`. Every request has a client timeout; failures
are retried with exponential backoff a few times and then the batch is dropped with an error. The
queue is bounded (in runs): when InfluxDB is slow or down, the oldest runs are dropped with a warning.
`stop()` makes the thread flush what is queued, one attempt per batch, within `flush_timeout`; if
InfluxDB cannot be reached the rest is dropped at once rather than spending the shutdown grace period.

The database is not created: v2 did not, the configured user may hold only WRITE rights, and the
operator chooses the retention policy. A missing database is logged as an error naming it.

What this module does not do: decide when to push (the runner does, on the leader, after a run),
or format line protocol by hand (the `influxdb` client does).
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from influxdb import InfluxDBClient
from influxdb.exceptions import InfluxDBClientError, InfluxDBServerError

from kuberhealthy.base.config import Config
from kuberhealthy.base.errors import ConfigError
from kuberhealthy.base.threads import BackgroundThread

logger = logging.getLogger(__name__)

Point = dict[str, Any]

QUEUE_RUNS = 1000  # runs (two points each) held while InfluxDB is slow or down
BATCH_RUNS = 250  # runs per write request
CLIENT_TIMEOUT = 5.0  # seconds, connect and read, per request
FLUSH_TIMEOUT = 10.0  # seconds stop() may spend sending what is queued
ATTEMPTS = 4  # tries per batch before it is dropped
BACKOFF_FIRST = 0.5  # seconds, doubled per failed try
BACKOFF_MAX = 30.0  # seconds
DROP_WARNING_EVERY = 60.0  # seconds between "dropped" warnings, so a long outage does not flood the log


def measurement_name(name: str) -> str:
    return name.replace(" ", "_")


def make_points(*, pod_name: str, namespace: str, name: str, ok: bool, errors: list[str],
                run_duration_seconds: float, time_ns: int) -> list[Point]:
    """The two points v2 wrote for one run, as `write_points` dicts."""
    tags = {"KuberhealthyPod": pod_name, "Namespace": namespace, "Name": name, "Errors": ",".join(errors)}
    return [
        {"measurement": measurement_name(f"{name}.{namespace}"), "tags": dict(tags),
         "fields": {"value": 1 if ok else 0}, "time": time_ns},
        {"measurement": measurement_name(f"RunDuration.{name}.{namespace}"), "tags": dict(tags),
         "fields": {"value": float(run_duration_seconds)}, "time": time_ns},
    ]


def client_settings(config: Config, timeout: float) -> dict[str, Any]:
    """InfluxDBClient keyword arguments from influxURL/influxUsername/influxPassword/influxDB.

    A URL without a port means the scheme's port (80/443), as v2's Go client read it. TLS certificates
    are verified. An empty username sends no credentials.
    """
    try:
        url = urlsplit(config.influx_url)
        port = url.port
    except ValueError:
        raise ConfigError("influxURL", f"not a valid URL: {config.influx_url!r}") from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ConfigError("influxURL", f"expected http(s)://host[:port], got {config.influx_url!r}")
    if not config.influx_db:
        raise ConfigError("influxDB", "must name the database when enableInflux is true")
    https = url.scheme == "https"
    host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
    return {
        "host": host, "port": port or (443 if https else 80), "path": url.path.rstrip("/"),
        "ssl": https, "verify_ssl": https,
        "username": config.influx_username or None,
        "password": config.influx_password if config.influx_username else None,
        "database": config.influx_db, "timeout": timeout,
        "retries": 1,  # one try per call: retrying (with backoff, stop-aware) is ours
    }


@dataclass(frozen=True)
class InfluxLimits:
    """How much an InfluxForwarder holds and how long it waits (the defaults above; tests shrink them)."""

    queue_runs: int = QUEUE_RUNS
    client_timeout: float = CLIENT_TIMEOUT
    flush_timeout: float = FLUSH_TIMEOUT
    backoff_first: float = BACKOFF_FIRST


class InfluxForwarder(BackgroundThread):
    """A bounded queue of runs and one thread that writes them to InfluxDB."""

    thread_name = "kh-influx"

    def __init__(self, config: Config, limits: InfluxLimits = InfluxLimits(), *,
                 client_factory: Callable[..., Any] = InfluxDBClient,
                 clock: Callable[[], float] = time.monotonic,
                 now_ns: Callable[[], int] = time.time_ns) -> None:
        super().__init__(self.thread_name)
        self._settings = client_settings(config, limits.client_timeout)
        self._client = client_factory(**self._settings)
        self.database = config.influx_db
        self.pod_name = config.pod_name
        self.flush_timeout = limits.flush_timeout
        self._backoff_first = limits.backoff_first
        self._clock = clock
        self._now_ns = now_ns
        self._max_runs = max(1, limits.queue_runs)
        self._queue: collections.deque[list[Point]] = collections.deque()
        self._cond = threading.Condition()
        self.sent = 0  # points written (under _cond)
        self.dropped = 0  # points given up on (under _cond)
        self._dropped_unreported = 0
        self._last_drop_warning: float | None = None

    # --- the caller's side ---------------------------------------------------------------------------

    def push(self, namespace: str, name: str, ok: bool, errors: list[str],
             run_duration_seconds: float) -> None:
        """Queue one run's points; never blocks on InfluxDB."""
        points = make_points(pod_name=self.pod_name, namespace=namespace, name=name, ok=ok, errors=errors,
                             run_duration_seconds=run_duration_seconds, time_ns=self._now_ns())
        with self._cond:
            if self._stop.is_set():
                logger.debug("Influx forwarder stopped; not queueing %s/%s", namespace, name)
                return
            if len(self._queue) >= self._max_runs:
                self._drop_locked(len(self._queue.popleft()), "the queue is full")
            self._queue.append(points)
            self._cond.notify()

    def queued(self) -> int:
        """Runs waiting to be sent."""
        with self._cond:
            return len(self._queue)

    def dropped_points(self) -> int:
        """Points given up on so far (kuberhealthy_influx_points_dropped_total)."""
        with self._cond:
            return self.dropped

    # --- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        s = self._settings
        logger.info("Forwarding check results to InfluxDB %s://%s:%s%s database %s",
                    "https" if s["ssl"] else "http", s["host"], s["port"], s["path"], self.database)
        super().start()

    def stop(self) -> None:
        """Stop accepting points; the thread flushes the queue (within flush_timeout) and ends."""
        with self._cond:
            self._stop.set()
            self._cond.notify_all()

    # --- the sender thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    runs = self._take(wait=True)
                    if runs and not self._send_with_retry(runs):
                        self._put_back(runs)  # stop came during a backoff: the flush gets another go
                except Exception:  # a bug must not end forwarding
                    logger.exception("Influx sender: unexpected error; continuing")
                    self._stop.wait(self._backoff_first)
            self._flush()
        finally:
            self._client.close()

    def _take(self, wait: bool) -> list[list[Point]]:
        """Up to BATCH_RUNS queued runs (waits for some unless stopping)."""
        with self._cond:
            while wait and not self._queue and not self._stop.is_set():
                self._cond.wait()
            return [self._queue.popleft() for _ in range(min(BATCH_RUNS, len(self._queue)))]

    def _put_back(self, runs: list[list[Point]]) -> None:
        with self._cond:
            self._queue.extendleft(reversed(runs))
            while len(self._queue) > self._max_runs:
                self._drop_locked(len(self._queue.popleft()), "the queue is full")

    def _write(self, runs: list[list[Point]]) -> None:
        points = [p for run in runs for p in run]
        self._client.write_points(points)
        with self._cond:
            self.sent += len(points)

    def _count(self, runs: list[list[Point]]) -> int:
        return sum(len(run) for run in runs)

    def _send_with_retry(self, runs: list[list[Point]]) -> bool:
        """Write with backoff. True when done with the runs (sent or dropped), False if stop interrupted."""
        delay = self._backoff_first
        for attempt in range(1, ATTEMPTS + 1):
            failure = ""
            try:
                self._write(runs)
                return True
            except InfluxDBClientError as e:
                if e.code != 429:
                    self._rejected(runs, e)
                    return True
                failure = f"throttled: {e.content}"
            except (InfluxDBServerError, OSError) as e:  # requests' errors are OSErrors
                failure = str(e)
            if attempt == ATTEMPTS:
                break
            logger.warning("InfluxDB write of %d points failed (try %d of %d): %s; retrying in %.1fs",
                           self._count(runs), attempt, ATTEMPTS, failure, delay)
            if self._stop.wait(delay):
                return False
            delay = min(delay * 2, BACKOFF_MAX)
        logger.error("InfluxDB write failed %d times; dropping %d points", ATTEMPTS, self._count(runs))
        with self._cond:
            self.dropped += self._count(runs)
        return True

    def _rejected(self, runs: list[list[Point]], e: InfluxDBClientError) -> None:
        # 4xx: sending it again cannot help (missing database, bad credentials, field type clash).
        hint = f" (does database {self.database!r} exist?)" if e.code == 404 else ""
        logger.error("InfluxDB rejected %d points with HTTP %s: %s%s", self._count(runs), e.code, e.content,
                     hint)
        with self._cond:
            self.dropped += self._count(runs)

    def _flush(self) -> None:
        """One attempt per batch until the queue is empty, the deadline passes, or InfluxDB is unreachable."""
        deadline = self._clock() + self.flush_timeout
        while True:
            runs = self._take(wait=False)
            if not runs:
                return
            if self._clock() >= deadline:
                self._give_up(runs, "the flush deadline passed")
                return
            try:
                self._write(runs)
            except InfluxDBClientError as e:
                self._rejected(runs, e)
            except (InfluxDBServerError, OSError) as e:
                self._give_up(runs, f"InfluxDB is unavailable ({e})")
                return

    def _give_up(self, runs: list[list[Point]], why: str) -> None:
        with self._cond:
            count = self._count(runs) + self._count(list(self._queue))
            self._queue.clear()
            self.dropped += count
        logger.error("Dropping %d InfluxDB points on shutdown: %s", count, why)

    def _drop_locked(self, count: int, why: str) -> None:
        self.dropped += count
        self._dropped_unreported += count
        now = self._clock()
        if self._last_drop_warning is None or now - self._last_drop_warning >= DROP_WARNING_EVERY:
            logger.warning("Dropped %d InfluxDB points (oldest first): %s", self._dropped_unreported, why)
            self._dropped_unreported = 0
            self._last_drop_warning = now
