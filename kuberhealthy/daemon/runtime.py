"""The daemon inside the gunicorn worker: its services, started after the fork, reconfigured or
rebuilt when the config file changes, stopped when the worker exits.

One lock orders a reload against the stop. A thread of the services that dies unexpectedly, or a
rebuild that cannot start, asks the arbiter to stop (SIGTERM to the parent): never a half-alive
daemon. Nothing here knows gunicorn: server.py's hooks and signal handlers call start() and stop().
"""
from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable

from kuberhealthy.base.config import DEFAULT_CONFIG_PATH, Config
from kuberhealthy.daemon.configwatch import ConfigWatcher
from kuberhealthy.daemon.reconfigure import needs_rebuild, needs_restart, reconfigure
from kuberhealthy.daemon.services import Services, build
from kuberhealthy.kube import Kube

logger = logging.getLogger(__name__)

STOP_BUDGET = 45.0  # seconds for services.stop(), inside the arbiter's graceful timeout (server.py)


class Runtime:
    """The worker's daemon: the current services, rebuilt when the config file changes."""

    def __init__(self, config: Config, kubeconfig: str | None, config_path: str | None,
                 publish: Callable[[Services], None]) -> None:
        self.config = config
        self._kubeconfig = kubeconfig
        self._config_path = config_path
        self._publish = publish  # serve the web app over these services from now on
        self.services: Services | None = None
        self.watcher: ConfigWatcher | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        self._start_services(self.config, swap_after_sync=False)
        path = self._config_path or DEFAULT_CONFIG_PATH
        if os.path.exists(path):
            self.watcher = ConfigWatcher(path, self.config, self.reload)
            if self.services is not None:
                self.watcher.supervised_by(self.services.deaths)  # a dead watcher stops the process too
            self.watcher.start()

    def _start_services(self, config: Config, swap_after_sync: bool) -> None:
        """Build and start services. At start-up the web app serves at once (/readyz tells when caches
        are synced); on a reload the previous app keeps answering until the new caches are synced."""
        services = build(config, Kube.connect(self._kubeconfig))
        services.on_fatal = self._fatal
        if self.watcher is not None:
            self.watcher.supervised_by(services.deaths)
        self.services = services
        if not swap_after_sync:
            self._publish(services)
        services.start()
        if swap_after_sync:
            services.wait_synced(30.0)
            self._publish(services)

    @staticmethod
    def _fatal() -> None:
        logger.error("A core thread died; stopping the process")
        os.kill(os.getppid(), signal.SIGTERM)

    def reload(self, config: Config) -> None:
        """Apply a changed config file.

        Every key applies live except listenAddress and leaderElection.* (logged as needing a
        restart, kept at their running values): checks keep running, the Lease is kept, and only the
        parts a changed key feeds are replaced (reconfigure.py). A change of targetNamespace
        means other caches: the services are rebuilt (checks restart, the Lease is handed over).
        """
        with self._lock:
            config, restart = needs_restart(self.config, config)
            for name in restart:
                logger.warning("Config key %s changed; it takes effect after a restart (not applied)", name)
            if config == self.config:
                return
            logging.getLogger().setLevel(config.log_level.upper())
            if self.services is not None and not needs_rebuild(self.config, config):
                restarted = reconfigure(self.services, config)
                self.config = config
                logger.info("Applied the new config live (restarted: %s)", ", ".join(restarted) or "nothing")
                return
            logger.info("targetNamespace or metricsStyle changed: rebuilding the services and restarting the checks")
            self._stop_services()
            self.config = config
            try:
                self._start_services(config, swap_after_sync=True)
            except Exception:  # no half-alive daemon: without services the process must stop
                logger.exception("Could not start on the new config; stopping the process")
                os.kill(os.getppid(), signal.SIGTERM)

    def _stop_services(self) -> None:
        services, self.services = self.services, None
        if services is not None:
            services.stop(STOP_BUDGET)
            services.kube.close()

    def stop(self) -> None:
        """Idempotent: the worker's SIGTERM handler and worker_exit both call it."""
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher.join(5)
        with self._lock:
            if self.services is None:
                return
            logger.info("Stopping services")
            self._stop_services()
            logger.info("Services stopped")
