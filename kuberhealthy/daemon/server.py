"""The gunicorn application: one worker (httpworker.py: gthread's pool, fed whole requests), its hooks
and the process's signals.

Everything runs in one worker process so the caches, the controller and the HTTP handlers share
memory. With a TLS certificate and key configured, the same app is served over HTTPS too, on a
listener of its own beside HTTP's (the worker's TLS connections: httptls.py); the pair is loaded here
first, so a file that cannot be used stops start-up with a message naming its setting.

The hooks hand the daemon to the worker's Runtime (runtime.py): it starts after the fork
(post_worker_init) and stops when the worker exits (worker_exit): stop runs and remove their pods,
release the Lease, flush Influx. gunicorn's graceful timeout bounds it, inside the chart's 60 s
termination grace period. What the daemon does between start and stop is not this module's.

Signals: handlers only queue the signal (gunicorn's design); threads act on it. In the worker,
SIGTERM or SIGINT goes to the kh-shutdown thread, which stops the services and then lets gunicorn
wind the worker down. In the arbiter, SIGINT stops gracefully like SIGTERM, and a second SIGTERM or
SIGINT while stopping goes to the kh-hard-stop thread, which kills the worker and exits at once.
"""
from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import threading
from collections.abc import Callable, Collection
from types import FrameType
from typing import Any

from gunicorn.app.base import BaseApplication

from kuberhealthy.base.config import Config
from kuberhealthy.base.errors import ConfigError
from kuberhealthy.daemon import memory
from kuberhealthy.daemon.httptls import ServerTLS
from kuberhealthy.daemon.httpworker import PollingWorker
from kuberhealthy.daemon.runtime import Runtime
from kuberhealthy.needs import WebNeeds
from kuberhealthy.web import create_app

logger = logging.getLogger(__name__)

GRACEFUL_TIMEOUT = 55  # seconds the arbiter waits for the worker before SIGKILL
# report handling takes at most 24 (web.report.admission.REPORT_SLOTS): the rest stay free for `/` and probes
HTTP_THREADS = 32
KEEPALIVE = 5  # seconds a kept-alive connection may stay idle


def _dual_stack() -> bool:
    """Whether this host can listen on IPv6 (and so on IPv4 too, through mapped addresses)."""
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind(("::", 0))
        return True
    except OSError:
        return False


def _address(host: str, port: int, dual_stack: bool | None) -> str:
    if not host:
        host = "::" if (_dual_stack() if dual_stack is None else dual_stack) else "0.0.0.0"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"


def _bind(config: Config, dual_stack: bool | None = None) -> str:
    """gunicorn's bind for listenAddress. `:port` listens on every address, IPv6 included where the
    host has it, as Go's net.Listen(":port") does; callers' IPv4 addresses then arrive IPv4-mapped."""
    return _address(config.listen_host, config.listen_port, dual_stack)


def _tls_bind(config: Config, dual_stack: bool | None = None) -> str:
    """gunicorn's bind for listenAddressTLS, read as listenAddress is."""
    return _address(config.listen_tls_host, config.listen_tls_port, dual_stack)


def server_tls(config: Config) -> ServerTLS | None:
    """The HTTPS listener's certificate and port when TLS is configured, loaded (ConfigError naming the
    setting when a file cannot be used); else None."""
    if not config.tls_cert_file:
        return None
    if config.listen_tls_port == 0:  # the worker tells the HTTPS listener by its port
        raise ConfigError("listenAddressTLS", "HTTPS needs a port of its own, not 0")
    return ServerTLS(config.tls_cert_file, config.tls_key_file, config.listen_tls_port)


_runtime: Runtime | None = None


def _post_worker_init(worker: Any) -> None:
    """In the worker, after the fork: build and start the daemon, and order its shutdown.

    gunicorn's worker stops serving as soon as it gets SIGTERM. The contract's order is the other way
    round (runs stopped, pods removed, Lease released, Influx flushed, then the web server), so the
    worker's SIGTERM (and SIGINT) handler only queues the signal for the kh-shutdown thread, which
    stops the services first and then lets gunicorn wind down.
    """
    global _runtime
    app = worker.app
    memory.settle()
    runtime = _runtime = Runtime(app.config, app.kubeconfig, app.config_path, app.flask_holder.init)
    runtime.start()
    gunicorn_exit = worker.handle_exit
    signals: queue.SimpleQueue[int] = queue.SimpleQueue()  # put() is safe in a signal handler

    def shutdown() -> None:
        sig = signals.get()
        try:
            runtime.stop()
        finally:
            gunicorn_exit(sig, None)

    threading.Thread(target=shutdown, name="kh-shutdown", daemon=True).start()

    def handle_exit(sig: int, frame: FrameType | None) -> None:
        signals.put(sig)

    signal.signal(signal.SIGTERM, handle_exit)
    signal.signal(signal.SIGINT, handle_exit)


def _pre_fork(server: Any, worker: Any) -> None:
    memory.freeze_before_fork()


def _worker_exit(server: Any, worker: Any) -> None:
    if _runtime is not None:
        _runtime.stop()


def _hard_stop(server: Any, signals: queue.SimpleQueue[int], kill: Callable[[int, int], None] = os.kill,
               exit_now: Callable[[int], None] = os._exit) -> None:
    """The arbiter's kh-hard-stop thread: the second stop signal kills the worker and exits now."""
    signals.get()
    signals.get()
    logger.warning("Second signal: exiting now")
    for pid in list(server.WORKERS):
        try:
            kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    exit_now(1)


def _when_ready(server: Any) -> None:
    """gunicorn's hook (it must take exactly one argument)."""
    install_arbiter_signals(server)


def install_arbiter_signals(server: Any,
                            hard_stop: Callable[[Any, queue.SimpleQueue[int]], None] = _hard_stop) -> None:
    """In the arbiter: SIGINT stops gracefully too (gunicorn's would not); a second SIGTERM/SIGINT
    during a graceful stop ends everything at once. The handler only queues (both queues)."""
    gunicorn_queue = server.signal  # gunicorn's own handler: queues the signal, wakes the arbiter's loop
    signals: queue.SimpleQueue[int] = queue.SimpleQueue()
    threading.Thread(target=hard_stop, args=(server, signals), name="kh-hard-stop", daemon=True).start()

    def handler(sig: int, frame: FrameType | None) -> None:
        signals.put(sig)
        gunicorn_queue(signal.SIGTERM, frame)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


class _FlaskHolder:
    """A WSGI callable that forwards to the Flask app once the worker has built it."""

    def __init__(self) -> None:
        self.app: Any = None

    def init(self, services: WebNeeds) -> None:
        self.app = create_app(services, server_collectors=PollingWorker.metrics.collectors())

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if self.app is None:
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"starting\n"]
        return self.app(environ, start_response)


def http_settings(known: Collection[str], tls: ServerTLS | None = None) -> dict[str, Any]:
    """How the daemon serves HTTP, apart from where it listens, its logs and its hooks: one worker of
    ours, its threads and timeouts, and with `tls` which listener is HTTPS. `known` is gunicorn's
    setting names (cfg.settings), for the ones only some versions have. The web benchmark serves the
    app with these too."""
    settings: dict[str, Any] = {
        "workers": 1,
        # gthread whose threads get only whole requests (httpworker.py)
        "worker_class": PollingWorker.serving_tls(tls),
        "threads": HTTP_THREADS,
        "graceful_timeout": GRACEFUL_TIMEOUT,
        "timeout": 60,
        "keepalive": KEEPALIVE,
        "accesslog": None,
    }
    # gunicorn >= 25.1 opens a control socket under $HOME by default; the image's root is read-only and
    # nothing of ours uses it (every replica is managed through the API), so it is turned off.
    if "control_socket_disable" in known:
        settings["control_socket_disable"] = True
    return settings


class KuberhealthyApplication(BaseApplication):  # type: ignore[misc]  # gunicorn ships no types
    def __init__(self, config: Config, kubeconfig: str | None, config_path: str | None) -> None:
        self.config = config
        self.kubeconfig = kubeconfig
        self.config_path = config_path
        self.flask_holder = _FlaskHolder()
        self.tls = server_tls(config)  # before gunicorn binds anything
        super().__init__()

    def load_config(self) -> None:
        settings = {
            **http_settings(self.cfg.settings, self.tls),
            "bind": [_bind(self.config), *([_tls_bind(self.config)] if self.tls is not None else [])],
            "errorlog": "-",
            "loglevel": "warning" if self.config.log_level != "debug" else "info",
            "pre_fork": _pre_fork,
            "post_worker_init": _post_worker_init,
            "worker_exit": _worker_exit,
            "when_ready": _when_ready,
            "proc_name": "kuberhealthy",
        }
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return self.flask_holder


def serve(config: Config, kubeconfig: str | None, config_path: str | None) -> int:
    """Serve until stopped; ConfigError before anything starts when the TLS files cannot be used."""
    app = KuberhealthyApplication(config, kubeconfig, config_path)
    logger.info("Kuberhealthy starting as %s in %s, listening on %s%s", config.pod_name, config.pod_namespace,
                _bind(config), f" and HTTPS on {_tls_bind(config)}" if app.tls is not None else "")
    app.run()
    return 0
