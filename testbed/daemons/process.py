"""The daemon as users run it: the `kuberhealthy` console script with a config file, in a child process.

Gunicorn runs inside it, exactly as in production, for contract, leader-election, shutdown, fault and
scale runs. The config file lives in the work dir and can be rewritten while the daemon runs (config
reload). Nothing here imports `kuberhealthy`: black-box tests drive the product only through this, its
HTTP endpoints and the API server. (testbed/daemons/inprocess.py wires the daemon into the test process.)

With `source` (a directory holding another version's `kuberhealthy/` package, e.g. an older commit's
`git archive`), the daemon is that version instead: this interpreter runs `kuberhealthy.cli:main` with the
directory first on PYTHONPATH and as the working directory, so it shadows the editable install, and its
first line in the log names the package it imported (`imported_from` reads it back).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import requests
import yaml

from testbed.cluster.apiserver import TestCluster
from testbed.cluster.loopback import free_port
from testbed.paths import REPO
from testbed.procs import end_group
from testbed.wait import wait_for

IMPORTED_FROM = "kuberhealthy imported from "
# The console script's body, for a daemon started from `source`, saying first where its package came from.
FROM_SOURCE = ("import sys, kuberhealthy; "
               f"print({IMPORTED_FROM!r} + kuberhealthy.__file__, file=sys.stderr, flush=True); "
               "from kuberhealthy.cli import main; sys.exit(main())")


def imported_from(log: str) -> str | None:
    """The `kuberhealthy/__init__.py` a daemon started from `source` imported, from its log; else None."""
    for line in log.splitlines():
        if line.startswith(IMPORTED_FROM):
            return line[len(IMPORTED_FROM):].strip()
    return None


def console_script() -> str:
    """The `kuberhealthy` console script of this interpreter's environment (pip install -e . made it)."""
    beside = Path(sys.executable).parent / "kuberhealthy"
    found = str(beside) if beside.exists() else shutil.which("kuberhealthy")
    if not found:
        raise RuntimeError(f"no `kuberhealthy` console script next to {sys.executable} or on PATH: "
                           "pip install -e . (make venv)")
    return found


class DaemonProcess:
    """`kuberhealthy --config FILE` as a child process in its own session, reporting to itself unless
    `settings` say otherwise. start() once; stop() (idempotent) ends the whole process group."""

    host = "127.0.0.1"

    def __init__(self, cluster: TestCluster, workdir: Path, name: str, namespace: str,
                 settings: dict[str, Any] | None = None, kubeconfig: Path | None = None, *,
                 source: Path | None = None) -> None:
        self.name = name
        self.source = source
        self.port = free_port()
        self.config_path = workdir / f"{name}.yaml"
        raw: dict[str, Any] = {"listenAddress": f"127.0.0.1:{self.port}", "checkChangeDebounce": "0s",
                               "logLevel": "debug", "externalCheckReportingURL": f"{self.url}/externalCheckStatus"}
        raw.update(settings or {})
        self.settings = raw
        self.write_config()
        self.log_path = workdir / f"{name}.log"
        self.env = dict(os.environ, POD_NAME=name, POD_NAMESPACE=namespace,
                        KUBECONFIG=str(kubeconfig or cluster.kubeconfig), PYTHONUNBUFFERED="1")
        self.env.pop("KUBERNETES_SERVICE_HOST", None)
        if source is not None:
            self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(source), self.env.get("PYTHONPATH")) if p)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_config(self) -> None:
        """Write `settings` to the config file (the running daemon picks a change up)."""
        self.config_path.write_text(yaml.safe_dump(self.settings))

    def set_reporting_url(self, url: str) -> None:
        self.settings["externalCheckReportingURL"] = url
        self.write_config()

    def start(self) -> DaemonProcess:
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            program = [console_script()] if self.source is None else [sys.executable, "-c", FROM_SOURCE]
            self.proc = subprocess.Popen([*program, "--config", str(self.config_path)],
                                         cwd=self.source or REPO, env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait_serving(self, path: str = "/readyz", timeout: float = 60) -> DaemonProcess:
        """Wait until `path` answers 200 (/readyz: caches synced); fail at once if the process exits."""
        def serving() -> bool:
            assert self.proc is not None, "not started"
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon {self.name} exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
            try:
                return requests.get(self.url + path, timeout=5).status_code == 200
            except requests.RequestException:
                return False
        wait_for(serving, timeout, interval=0.1, what=f"{self.name} {path}")
        return self

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def kill9(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        """SIGTERM the process group and wait (60 s: the chart's grace period), then SIGKILL it."""
        if self.proc is not None:
            end_group(self.proc, grace=60)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
