"""Run the daemon for tests: in this process (threads + a werkzeug server), or as real processes.

In-process: the same `build()` wiring and Flask app as production, served on a free loopback port,
so simulated checker pods report over real HTTP. Out-of-process: `kuberhealthy --config` under
gunicorn, exactly as users run it, for leader election and shutdown tests.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

from kuberhealthy.config import from_mapping
from kuberhealthy.kube import Kube
from kuberhealthy.services import Services, build
from tests.harness.cluster import REPO, TestCluster, free_port


class InProcessDaemon:
    """build() + create_app() + a threaded werkzeug server on 127.0.0.1."""

    def __init__(self, cluster: TestCluster, namespace: str, settings: dict[str, Any] | None = None,
                 pod_name: str = "kh-test-0", kubeconfig: Path | None = None) -> None:
        from werkzeug.serving import make_server

        from kuberhealthy.web import create_app
        self.port = free_port()
        raw: dict[str, Any] = {
            "targetNamespace": namespace, "enableForceMaster": True, "checkChangeDebounce": "0s",
            "listenAddress": f"127.0.0.1:{self.port}",
            "externalCheckReportingURL": f"http://127.0.0.1:{self.port}/externalCheckStatus",
            "stateReaperInterval": "1h", "checkReaperRunInterval": "1h",
        }
        raw.update(settings or {})
        self.config = from_mapping(raw, {"POD_NAME": pod_name, "POD_NAMESPACE": namespace})
        self.services: Services = build(self.config, Kube.connect(str(kubeconfig or cluster.kubeconfig)))
        self.app = create_app(self.services)
        self._server = make_server("127.0.0.1", self.port, self.app, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="test-http", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> InProcessDaemon:
        self._thread.start()
        self.services.start()
        assert self.services.wait_synced(30), "caches did not sync"
        return self

    def stop(self) -> None:
        self.services.stop(30)
        self._server.shutdown()
        self._thread.join(10)
        self.services.kube.close()


class DaemonProcess:
    """`python -m kuberhealthy.cli --config FILE` as a child process (gunicorn inside)."""

    def __init__(self, cluster: TestCluster, workdir: Path, name: str, namespace: str,
                 settings: dict[str, Any] | None = None, kubeconfig: Path | None = None) -> None:
        self.name = name
        self.port = free_port()
        self.config_path = workdir / f"{name}.yaml"
        raw: dict[str, Any] = {"listenAddress": f"127.0.0.1:{self.port}", "checkChangeDebounce": "0s",
                               "logLevel": "debug"}
        raw.update(settings or {})
        self.settings = raw
        self.config_path.write_text(yaml.safe_dump(raw))
        self.log_path = workdir / f"{name}.log"
        self.env = dict(os.environ, POD_NAME=name, POD_NAMESPACE=namespace,
                        KUBECONFIG=str(kubeconfig or cluster.kubeconfig), PYTHONUNBUFFERED="1")
        self.env.pop("KUBERNETES_SERVICE_HOST", None)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_reporting_url(self, url: str) -> None:
        self.settings["externalCheckReportingURL"] = url
        self.config_path.write_text(yaml.safe_dump(self.settings))

    def start(self) -> DaemonProcess:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "kuberhealthy.cli", "--config", str(self.config_path)],
                                     cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
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
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(60)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
