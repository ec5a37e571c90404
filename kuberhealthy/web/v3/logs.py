"""A checker pod's log for v3's `GET /api/logs` and `GET /api/logs/stream`: which pod may be read, and
the bounds of each read.

Only a pod of the named check is read: the pod must be in the checker pod cache, in the check's
namespace, and labelled as a pod of that check (web/checkkinds.py: `kuberhealthy-check-name` for
khchecks and khjobs, `healthcheck` for HealthChecks); its name alone proves nothing. Logs stay
behind config `exposeLogs` (off: 403), as the log tails of the JSON API do. Refusals, as v3
answers where it has one: 400 a missing parameter, 403 a pod that is not the check's, 404 no such
check, pod or container, 409 a pod that has not started (no log yet); ours besides: 429 the
per-source rate limit, 503 the API server away (and, for streams, every stream slot taken).

Bounds. `/api/logs` reads the end of the log: its last LOG_LINES lines, at most LOG_BYTES, one read of
READ_TIMEOUT. A stream follows the log from its start and ends when the container ends, after
FOLLOW_BYTES, or at the check's timeout + FOLLOW_MARGIN (at most FOLLOW_MAX) after it began; a log
that stays quiet ends it no later than twice that (each read waits at most the whole bound: see
kube.PodLogFollow). A stream holds one of the HTTP worker's threads for its whole life, so at most
FOLLOWS run at once in the process (the worker has 32 threads; reports take at most 24). A client
that stops reading is dropped by the worker's write timeout.

What it does not do: serve HTTP (web/v3/routes.py), or read any pod it did not find in the cache.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from flask import Response

from kuberhealthy.base.errors import ApiError, BadRequest, NotFound, is_transient
from kuberhealthy.kube import Obj
from kuberhealthy.needs import LogFollow, WebNeeds
from kuberhealthy.web.answers import plain
from kuberhealthy.web.checkkinds import CheckKinds, Found, Wanted

logger = logging.getLogger(__name__)

LOG_LINES = 5000  # lines of the end of a log `/api/logs` answers at most
LOG_BYTES = 1024 * 1024  # bytes of it at most
READ_TIMEOUT = 10.0  # seconds for that read
FOLLOW_MARGIN = 30.0  # seconds a stream may last beyond the check's timeout
FOLLOW_MAX = 900.0  # seconds a stream lasts at most, whatever the timeout
FOLLOW_BYTES = 4 * 1024 * 1024  # bytes a stream passes on at most
FOLLOWS = 2  # streams open at once in the process
DEFAULT_TIMEOUT = 60.0  # seconds, when the check's entry names no timeout
RETRY_AFTER = "5"  # seconds, for 503 answers


@dataclass(frozen=True)
class Chosen:
    """The pod (and container) a log request may read."""

    found: Found
    pod: Obj
    container: str

    @property
    def namespace(self) -> str:
        return str((self.pod.get("metadata") or {}).get("namespace") or "")

    @property
    def name(self) -> str:
        return str((self.pod.get("metadata") or {}).get("name") or "")

    @property
    def phase(self) -> str:
        return str((self.pod.get("status") or {}).get("phase") or "Pending")


def choose(services: WebNeeds, kinds: CheckKinds, wanted: Wanted, pod_name: str,
           container: str) -> Chosen | Response:
    """The pod `pod_name` of the check `wanted` names, or the refusal (404, 403, 409)."""
    found = kinds.find(wanted)
    key = f"{wanted.namespace}/{wanted.name}"
    if not found:
        return plain(404, f"no check {key}")
    pod = services.pods.get(wanted.namespace, pod_name)
    if pod is None:
        return plain(404, f"no checker pod {wanted.namespace}/{pod_name}")
    owner = next((f for f in found if f.kind.owns_pod(pod, wanted.name)), None)
    if owner is None:
        return plain(403, f"pod {wanted.namespace}/{pod_name} is not a pod of {key}")
    names = [str(c.get("name") or "") for c in (pod.get("spec") or {}).get("containers") or []
             if isinstance(c, dict)]
    if container and container not in names:
        return plain(404, f"pod {wanted.namespace}/{pod_name} has no container {container}")
    chosen = Chosen(owner, pod, container or (names[0] if names else ""))
    if chosen.phase == "Pending":
        return plain(409, f"pod {wanted.namespace}/{pod_name} has not started: it has no log yet")
    return chosen


def api_refusal(chosen: Chosen, e: ApiError) -> Response:
    """The answer when the API server did not give the log."""
    where = f"pod {chosen.namespace}/{chosen.name}"
    if isinstance(e, NotFound):
        return plain(404, f"{where} is gone")
    if isinstance(e, BadRequest):  # the kubelet's "container is waiting to start" and its kin
        return plain(409, f"{where} has no log to give: {str(e)[:300]}")
    if is_transient(e):
        return plain(503, f"cannot read the log of {where} right now: {str(e)[:300]}", {"Retry-After": RETRY_AFTER})
    logger.warning("Reading the log of %s was refused: %s", where, e)
    return plain(500, f"cannot read the log of {where}: {str(e)[:300]}")


def follow_seconds(timeout: object) -> float:
    """How long a stream of a check with this timeout (seconds, from its entry) may last."""
    seconds = float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else DEFAULT_TIMEOUT
    return min(FOLLOW_MAX, seconds + FOLLOW_MARGIN)


class Streamed:
    """A stream's body: the followed log's lines, at most `limit` bytes, then the end. Closed (the API
    stream shut, the slot given back) once, by whoever ends first: its iteration or the server."""

    def __init__(self, follow: LogFollow, limit: int, release: threading.Semaphore) -> None:
        self._follow = follow
        self._limit = limit
        self._release = release
        self._lock = threading.Lock()
        self._closed = False
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._follow:
                left = self._limit - self.sent
                if left <= 0:
                    return
                piece = chunk[:left]
                self.sent += len(piece)
                yield piece
        finally:
            self.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._follow.close()
        finally:
            self._release.release()


class StreamSlots:
    """At most `count` streams at once in the process (each holds an HTTP worker thread)."""

    def __init__(self, count: int = FOLLOWS) -> None:
        self._slots = threading.BoundedSemaphore(count)

    def open(self, services: WebNeeds, chosen: Chosen, seconds: float,
             limit: int = FOLLOW_BYTES) -> Streamed | Response:
        if not self._slots.acquire(blocking=False):
            return plain(503, "too many log streams are open; try again shortly", {"Retry-After": RETRY_AFTER})
        try:
            follow = services.follow_pod_log(chosen.namespace, chosen.name, chosen.container or None, limit, seconds)
        except ApiError as e:
            self._slots.release()
            return api_refusal(chosen, e)
        except BaseException:
            self._slots.release()
            raise
        return Streamed(follow, limit, self._slots)


def log_body(chosen: Chosen, wanted: Wanted, text: str) -> dict[str, Any]:
    """`/api/logs` answered as JSON (without `format=text`): the log and what it is the log of."""
    return {"namespace": chosen.namespace, "healthcheck": wanted.name, "kind": chosen.found.kind.entry_kind,
            "pod": chosen.name, "container": chosen.container, "phase": chosen.phase, "log": text}
