"""The daemon wired in the test process: the same `build()` and Flask app as production, served by a
threaded werkzeug server on a free loopback port, so simulated checker pods report over real HTTP and a
test can reach into the services (caches, controller, resources) it runs.

The one module of the test bed that imports `kuberhealthy`; black-box code (tests/contract, and what
it uses) must not import it (tests/unit/test_layout.py checks that). Also here: services without the
elector for web tests, and `PodMaker`, which makes checker pods and khstates as a run leaves them and
waits for the services' caches to see them.
"""
from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flask import Flask
from werkzeug.serving import BaseWSGIServer, make_server

from kuberhealthy.base.config import from_mapping
from kuberhealthy.base.errors import NotFound
from kuberhealthy.daemon.services import Services, build
from kuberhealthy.kube import HEALTHCHECKS, KHCHECKS, KHSTATES, Kube, Obj, Resources
from kuberhealthy.records import khstate
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.records.history import RunFacts, RunRecord, apply_run
from kuberhealthy.web import create_app
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import PodShape, khcheck, khs
from testbed.cluster.builders import khstate as khstate_body
from testbed.cluster.loopback import free_port, pod_ip
from testbed.cluster.objects import create_checker_pod, set_pod_status
from testbed.wait import wait_for

if TYPE_CHECKING:
    from typing_extensions import Unpack

POD_NAME = "kh-test-0"  # the in-process daemon's (and the web services') POD_NAME
REPORTING_URL = "http://127.0.0.1/externalCheckStatus"  # PodMaker.pod: KH_REPORTING_URL unless given another


# --- serving a WSGI app ---------------------------------------------------------------------------------

@dataclass
class WebServer:
    """A threaded werkzeug server for one app on one thread; stop() shuts it down and joins it."""

    host: str
    port: int
    httpd: BaseWSGIServer
    thread: threading.Thread

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.thread.join(10)
        self.httpd.server_close()


def serve(app: Flask, host: str = "127.0.0.1", port: int = 0) -> WebServer:
    """Serve `app` on host:port (0: a free one) until stop()."""
    httpd = make_server(host, port, app, threaded=True)
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="test-web-server",
                         daemon=True)
    t.start()
    return WebServer(host=host, port=httpd.server_port, httpd=httpd, thread=t)


# --- the whole daemon ----------------------------------------------------------------------------------

class InProcessDaemon:
    """build() + create_app() + a WebServer on 127.0.0.1, reporting to itself; reapers hourly unless
    `settings` say otherwise. start() once, stop() once."""

    def __init__(self, cluster: TestCluster, namespace: str, settings: dict[str, Any] | None = None,
                 pod_name: str = POD_NAME, kubeconfig: Path | None = None) -> None:
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
        self._server: WebServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> InProcessDaemon:
        self._server = serve(self.app, port=self.port)
        self.services.start()
        assert self.services.wait_synced(30), "caches did not sync"
        return self

    def stop(self) -> None:
        self.services.stop(30)
        if self._server is not None:
            self._server.stop()
        self.services.kube.close()


def check_spec(namespace: str, image: str, timeout: str = "20s", env: Mapping[str, str] | None = None,
               name: str = "probe", **extra: Any) -> CheckSpec:
    """A check (runInterval 1h) for Runner(...).run() without a khcheck in the API."""
    body = khcheck(name, image, interval="1h", timeout=timeout, env=env, **extra)
    body["metadata"]["namespace"] = namespace
    return CheckSpec.of(body)


def state_of(d: InProcessDaemon, ns: str, name: str = "probe") -> khstate.Spec:
    """The check's khstate as the product reads it (from the API, not the cache)."""
    return khstate.Spec.of(d.services.resources.get(KHSTATES, ns, name))


# --- services for the web app ----------------------------------------------------------------------------

class FakeElector:
    """Stands in for the Lease elector: Services.current_master() asks its holder()."""

    def __init__(self, holder: str) -> None:
        self._holder = holder

    def holder(self) -> str:
        return self._holder

    def is_leader(self) -> bool:
        return False


def make_services(cluster: TestCluster, target_namespace: str, master: str = POD_NAME) -> Services:
    """Services (caches not started) for `target_namespace` ("" = all) whose Lease holder is `master`."""
    config = from_mapping({"targetNamespace": target_namespace},
                          {"POD_NAME": POD_NAME, "POD_NAMESPACE": target_namespace or "kh"})
    services = Services(config, Kube.connect(str(cluster.kubeconfig)))
    services.elector = FakeElector(master)
    return services


def history_keys(outcomes: str, now: float) -> dict[str, Any]:
    """The khstate `spec` keys (counters, lastOK/lastFailure, history) that runs of these outcomes leave,
    oldest first, one a minute up to `now`: "o" reported OK, "f" failed (an error and a log tail)."""
    spec: dict[str, Any] = {}
    for i, o in enumerate(outcomes):
        start = now - (len(outcomes) - i) * 60
        if o == "o":
            record = RunRecord.reported(RunFacts(f"run-{i}", start, 1.5, "node-1", f"pod-{i}"),
                                        {"OK": True, "Errors": []})
        else:
            record = RunRecord.failed(RunFacts(f"run-{i}", start, 2.5, "node-1", f"pod-{i}"), "timed out",
                                      [f"broken {i}"], logs=f"checker said {i}\n")
        spec.update(apply_run(spec, record, 24, start + 2))
    return spec


def rv(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["resourceVersion"])


def wait_cached(services: Services, namespace: str, name: str,
                pred: Callable[[dict[str, Any]], bool] = lambda _o: True) -> dict[str, Any]:
    """The khstate from the services' cache, once it is there and pred(it) holds."""
    def ready() -> dict[str, Any] | None:
        obj = services.khstates.get(namespace, name)
        return obj if obj is not None and pred(obj) else None
    got: dict[str, Any] = wait_for(ready, timeout=15, what=f"khstate {namespace}/{name} in the cache")
    return got


@dataclass
class CheckerPod:
    namespace: str
    name: str
    check: str
    run_uuid: str
    ip: str


class PodMaker:
    """Creates khstates and checker pods through the API, the way the runner would leave them, and
    (given services) waits for the pod cache to see each pod."""

    def __init__(self, cluster: TestCluster, namespace: str, services: Services | None) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.services = services

    def khstate(self, check: str, run_uuid: str, namespace: str | None = None, **spec: Any) -> dict[str, Any]:
        ns = namespace or self.namespace
        body = khstate_body(check, **{"OK": True, "Errors": [], "RunDuration": "", "Namespace": ns, "Node": "",
                                      "AuthoritativePod": POD_NAME, "uuid": run_uuid, **spec})
        created: dict[str, Any] = self.cluster.request("POST", khs(ns), body)
        return created

    def get_khstate(self, check: str, namespace: str | None = None) -> dict[str, Any]:
        got: dict[str, Any] = self.cluster.request("GET", khs(namespace or self.namespace, check))
        return got

    def pod(self, check: str, run_uuid: str, ip: str | None = None, *, running: bool = True, wait: bool = True,
            name: str | None = None, **shape: Unpack[PodShape]) -> CheckerPod:
        """A checker pod as the runner creates it (`shape`: checker_pod's keywords; unbound unless
        `node_name`, and KH_REPORTING_URL is 127.0.0.1 unless `env` names another); `running` writes its
        status by hand (no kubelet)."""
        name = name or f"{check}-{uuid.uuid4().hex[:8]}"
        ip = ip or pod_ip()
        shape.setdefault("node_name", None)
        shape["env"] = {"KH_REPORTING_URL": REPORTING_URL, **(shape.get("env") or {})}
        _, ip = create_checker_pod(self.cluster, self.namespace, name, check=check, run_uuid=run_uuid, phase=None,
                                   ip=ip, **shape)
        if running:
            self.set_running(name, ip)
        if wait and self.services is not None:
            pods = self.services.pods
            wait_for(lambda: (p := pods.get(self.namespace, name)) is not None
                     and (not running or (p.get("status") or {}).get("phase") == "Running"),
                     timeout=15, what=f"pod {name} in the cache")
        return CheckerPod(self.namespace, name, check, run_uuid, ip)

    def set_running(self, name: str, ip: str) -> None:
        set_pod_status(self.cluster, self.namespace, name, "Running", ip)


# --- checks of both kinds on the real API server: objects as a user writes them, waits for a run ----------

def healthcheck(name: str, image: str = "kh-sim/ok", interval: str = "1h", timeout: str = "20s",
                env: dict[str, str] | None = None, **spec: Any) -> Obj:
    """A HealthCheck shaped like v3's own test manifest (podSpec.spec, restartPolicy Never)."""
    container: dict[str, Any] = {"name": "main", "image": image}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    body: dict[str, Any] = {"singleRunOnly": False, "runInterval": interval, "timeout": timeout,
                            "podSpec": {"spec": {"containers": [container], "restartPolicy": "Never"}}}
    body.update(spec)
    return {"apiVersion": HEALTHCHECKS.api_version, "kind": "HealthCheck", "metadata": {"name": name}, "spec": body}


def khcheck_obj(name: str, image: str = "kh-sim/ok", interval: str = "1h", timeout: str = "20s") -> Obj:
    """A khcheck as a user writes it (runInterval, timeout, podSpec)."""
    return {"apiVersion": KHCHECKS.api_version, "kind": "KuberhealthyCheck", "metadata": {"name": name},
            "spec": {"runInterval": interval, "timeout": timeout,
                     "podSpec": {"containers": [{"name": "main", "image": image}]}}}


def status_of(res: Resources, ns: str, name: str) -> dict[str, Any]:
    return dict(res.get(HEALTHCHECKS, ns, name).get("status") or {})


def ran(res: Resources, ns: str, name: str, runs: int = 1) -> Callable[[], dict[str, Any] | None]:
    """The HealthCheck's status once `runs` runs of it are over (for wait_for)."""
    def done() -> dict[str, Any] | None:
        status = status_of(res, ns, name)
        total = int(status.get("successCount") or 0) + int(status.get("failureCount") or 0)
        return status if total >= runs and not status.get("currentUUID") else None
    return done


def khstate_done(res: Resources, ns: str, name: str) -> Callable[[], Obj | None]:
    """The khstate once a run of its khcheck is over (for wait_for)."""
    def done() -> Obj | None:
        try:
            state = res.get(KHSTATES, ns, name)
        except NotFound:
            return None
        return state if khstate.finished_uuid(state) else None
    return done
