"""Pod restarts check: fail when any container restarted more than MAX_FAILURES_ALLOWED times.

Lists the pods of TARGET_NAMESPACE (else POD_NAMESPACE, else every namespace, which needs a ClusterRole)
with the official ``kubernetes`` client, in-cluster config first and a kubeconfig as fallback, and
reports every container (init containers included) whose ``restartCount`` exceeds the limit.

Upstream's pod-restarts-check counted ``BackOff`` warning events instead; restart counts are on the pod
itself, so no event RBAC is needed and a pod that is gone is never reported.

The logic lives in ``load_config``, ``find_excessive_restarts`` and ``run_pod_restarts_check`` (which
take plain objects shaped like the client's models), so tests need no API server.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client as kube_client
from kubernetes import config as kube_config

try:
    import kuberhealthy_checkclient as checkclient  # the client's wheel, installed in the image
except ImportError:  # a source checkout: the same file as the kuberhealthy package's module
    from kuberhealthy import checkclient

logger = logging.getLogger("pod-restarts-check")

PAGE_SIZE = 500
MAX_REQUEST_TIMEOUT = 60.0  # seconds for one list call


class ConfigError(ValueError):
    """An environment variable of this check is malformed."""


@dataclass(frozen=True)
class PodRestartsConfig:
    namespace: str = ""  # "" means every namespace
    max_restarts: int = 10  # a container may restart this often; one more is an error


def load_config(environ: Mapping[str, str]) -> PodRestartsConfig:
    """Read and validate the check's variables; raises ConfigError naming the variable at fault."""
    namespace = environ.get("TARGET_NAMESPACE", "").strip() or environ.get("POD_NAMESPACE", "").strip()
    raw = environ.get("MAX_FAILURES_ALLOWED", "").strip()
    max_restarts = 10
    if raw:
        try:
            max_restarts = int(raw)
        except ValueError:
            raise ConfigError(f"MAX_FAILURES_ALLOWED must be a whole number, got {raw!r}") from None
        if max_restarts < 0:
            raise ConfigError(f"MAX_FAILURES_ALLOWED must not be negative, got {raw!r}")
    return PodRestartsConfig(namespace=namespace, max_restarts=max_restarts)


def find_excessive_restarts(pods: Iterable[Any], max_restarts: int) -> list[str]:
    """One error per container restarted more than ``max_restarts`` times, sorted by pod and container."""
    found: list[tuple[str, str, int]] = []
    for pod in pods:
        status = pod.status
        if status is None:
            continue
        where = f"{pod.metadata.namespace}/{pod.metadata.name}"
        containers = [*(status.init_container_statuses or []), *(status.container_statuses or [])]
        for container in containers:
            restarts = container.restart_count or 0
            if restarts > max_restarts:
                found.append((where, container.name, restarts))
    return [f"pod {where}: container {name} restarted {restarts} times (more than {max_restarts} allowed)"
            for where, name, restarts in sorted(found)]


def list_pods(core: Any, namespace: str, request_timeout: float) -> Iterator[Any]:
    """Every pod in ``namespace`` ("" = all), page by page so a large cluster is not one huge answer."""
    token: str | None = None
    while True:
        options: dict[str, Any] = {"limit": PAGE_SIZE, "_request_timeout": request_timeout}
        if token:
            options["_continue"] = token
        if namespace:
            page = core.list_namespaced_pod(namespace, **options)
        else:
            page = core.list_pod_for_all_namespaces(**options)
        yield from page.items
        token = page.metadata._continue if page.metadata is not None else None
        if not token:
            return


def connect() -> Any:
    """A CoreV1Api: in-cluster service account first, else KUBECONFIG / ~/.kube/config."""
    try:
        kube_config.load_incluster_config()
    except kube_config.ConfigException:
        logger.info("not running in a cluster; using the kubeconfig")
        kube_config.load_kube_config()
    return kube_client.CoreV1Api()


def request_timeout(environ: Mapping[str, str], clock: Any = time.time) -> float:
    """Seconds one API call may take: at most MAX_REQUEST_TIMEOUT, and never past the run's deadline."""
    left = checkclient.time_left(environ, reserve=5, clock=clock)  # None: no (readable) deadline
    return MAX_REQUEST_TIMEOUT if left is None else max(1.0, min(MAX_REQUEST_TIMEOUT, left))


def run_pod_restarts_check(config: PodRestartsConfig, core: Any,
                           timeout: float = MAX_REQUEST_TIMEOUT) -> list[str]:
    """List the pods and return the errors ([] when no container restarted too often)."""
    scope = f"namespace {config.namespace}" if config.namespace else "all namespaces"
    pods = list(list_pods(core, config.namespace, timeout))
    errors = find_excessive_restarts(pods, config.max_restarts)
    logger.info("%d pod(s) in %s, %d container(s) over %d restarts", len(pods), scope, len(errors),
                config.max_restarts)
    return errors


def check(environ: Mapping[str, str]) -> list[str]:
    """The whole check as configured by ``environ``: what ``main`` reports."""
    config = load_config(environ)
    return run_pod_restarts_check(config, connect(), request_timeout(environ))


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        checkclient.wait_for_kuberhealthy(timeout=60)
    except checkclient.CheckClientError as e:
        logger.warning("%s; running the check anyway", e)
    return checkclient.run_check(lambda: check(os.environ))


if __name__ == "__main__":
    sys.exit(main())
