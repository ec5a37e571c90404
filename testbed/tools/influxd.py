"""A real InfluxDB 1.x (Debian's /usr/bin/influxd) on free loopback ports, for tests.

Each start writes a config into a temp dir (reporting off, meta/data/wal inside the dir, HTTP and the
RPC bind-address on free 127.0.0.1 ports), waits for /ping to answer 204, and is stopped by its PID.

The `influxd` fixture (one server per test module) is in testbed/pytest_plugin.py.

Nothing here is imported by the product.
"""
from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from testbed.cluster.loopback import free_port

INFLUXD = os.environ.get("KH_TEST_INFLUXD", "/usr/bin/influxd")

CONFIG = """reporting-enabled = false
bind-address = "127.0.0.1:{rpc_port}"
[meta]
  dir = "{dir}/meta"
[data]
  dir = "{dir}/data"
  wal-dir = "{dir}/wal"
  query-log-enabled = false
[monitor]
  store-enabled = false
[http]
  enabled = true
  bind-address = "127.0.0.1:{http_port}"
  auth-enabled = false
  log-enabled = false
[continuous_queries]
  enabled = false
"""


@dataclass
class InfluxD:
    """One influxd child process and its temp dir."""

    workdir: Path
    http_port: int = 0
    rpc_port: int = 0
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self, timeout: float = 30.0) -> InfluxD:
        self.http_port, self.rpc_port = free_port(), free_port()
        conf = self.workdir / "influxdb.conf"
        conf.write_text(CONFIG.format(dir=self.workdir, http_port=self.http_port, rpc_port=self.rpc_port))
        with open(self.workdir / "influxd.log", "wb") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen([INFLUXD, "-config", str(conf)], stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self._wait_ping(timeout)
        return self

    def _wait_ping(self, timeout: float) -> None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only, never a proxy
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                tail = (self.workdir / "influxd.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"influxd exited with {self.proc.returncode}:\n{tail}")
            try:
                with opener.open(f"{self.url}/ping", timeout=2) as resp:
                    if resp.status == 204:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"influxd did not answer /ping within {timeout}s")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def start_influxd(workdir: Path | None = None) -> InfluxD:
    wd = workdir or Path(tempfile.mkdtemp(prefix="kh-influxd-"))
    return InfluxD(workdir=wd).start()
