"""What each part of the daemon needs from the others, as typing.Protocols.

Runs, the controller, the reapers and the web app are written against these, not against the
composition root (services.py) that happens to provide them: mypy checks every use, unit tests pass
in-memory fakes, and no part imports services. Each protocol lists only what its part uses.

    Part         a long-lived activity (threads.BackgroundThread)
    Api, Cache   the API calls and a watch cache (kube/protocols.py; kube.Resources, kube.Reflector)
    RunNeeds     one check run (runner.Runner)
    ControlNeeds the controller and its workers
    ReaperNeeds  the reapers
    WebNeeds     the HTTP app
This module holds no behaviour.
"""
from __future__ import annotations

import builtins
from collections.abc import Iterator
from typing import Protocol

from kuberhealthy.base.config import Config
from kuberhealthy.base.notify import Notifier
from kuberhealthy.base.threads import Deaths
from kuberhealthy.kube import Obj
from kuberhealthy.kube.protocols import Api, Cache
from kuberhealthy.outputs.events import ObjectRef
from kuberhealthy.outputs.heldreports import Held
from kuberhealthy.outputs.runstats import SchedulingMetrics
from kuberhealthy.records.kinds import Kinds
from kuberhealthy.records.uptime import RollupBook

CacheState = tuple[str, bool, float]  # (cache, current, seconds not current)


class Part(Protocol):
    """A long-lived activity on its own thread (threads.BackgroundThread provides it)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def join(self, timeout: float | None = None) -> None: ...

    def supervised_by(self, deaths: Deaths) -> None: ...


class LogFollow(Protocol):
    """A followed container log (kube.PodLogFollow): its lines as they arrive, until it ends."""

    def __iter__(self) -> Iterator[bytes]: ...

    def close(self) -> None: ...


class HeldView(Protocol):
    """Reports accepted on this replica whose khstate write waits for the API."""

    def holds(self, run_uuid: str) -> bool: ...


class EventSink(Protocol):
    """Kubernetes Events about checks (events.EventRecorder): queued, never blocking, never raising."""

    def check_failed(self, ref: ObjectRef, first_error: str) -> bool: ...

    def check_recovered(self, ref: ObjectRef, failures: int = 0) -> bool: ...

    def run_requested(self, ref: ObjectRef, source: str = "") -> bool: ...

    def report_rejected(self, ref: ObjectRef, reason: str) -> bool: ...

    def pause_ignored(self, ref: ObjectRef, annotation: str, value: str) -> bool: ...

    def spec_invalid(self, ref: ObjectRef, problem: str) -> bool: ...

    def state_not_kept(self, ref: ObjectRef, what: str) -> bool: ...

    def pod_disrupted(self, ref: ObjectRef, pod: str, why: str, in_a_row: int) -> bool: ...


class ResultSink(Protocol):
    """Where a finished run's result is forwarded (InfluxDB)."""

    def push(self, namespace: str, name: str, ok: bool, errors: builtins.list[str], duration: float) -> None: ...


class Basics(Protocol):
    """What every part reads: the settings, the API, the checker pods and the results."""

    @property
    def config(self) -> Config: ...

    @property
    def resources(self) -> Api: ...

    @property
    def pods(self) -> Cache: ...

    @property
    def khstates(self) -> Cache: ...

    @property
    def rollups(self) -> RollupBook: ...


class Catalog(Protocol):
    """The checks and jobs themselves (a run does without: it knows its check)."""

    @property
    def khchecks(self) -> Cache: ...

    @property
    def khjobs(self) -> Cache: ...


class RunNeeds(Basics, Protocol):
    """What one check run uses."""

    @property
    def kinds(self) -> Kinds: ...

    @property
    def notifier(self) -> Notifier: ...

    @property
    def held(self) -> HeldView: ...

    @property
    def stats(self) -> SchedulingMetrics: ...

    # checker pod uids already reported stuck Terminating
    @property
    def stuck_terminating(self) -> set[str]: ...

    # per check ident, its runs in a row whose checker pod the cluster disrupted
    @property
    def disrupted_in_a_row(self) -> dict[str, int]: ...

    @property
    def influx(self) -> ResultSink | None: ...

    @property
    def events(self) -> EventSink: ...

    def owner_reference(self, namespace: str) -> Obj | None: ...


class ControlNeeds(RunNeeds, Catalog, Protocol):
    """What the controller and its workers use, beyond a run's needs."""

    @property
    def deaths(self) -> Deaths: ...

    def wait_synced(self, timeout: float) -> bool: ...


class ReaperNeeds(Basics, Catalog, Protocol):
    """What the reapers use: they decide from the caches and delete through the API."""

    @property
    def kinds(self) -> Kinds: ...


class WebNeeds(Basics, Catalog, Protocol):
    """What the HTTP app reads and calls."""

    @property
    def kinds(self) -> Kinds: ...

    @property
    def notifier(self) -> Notifier: ...

    @property
    def stats(self) -> SchedulingMetrics: ...

    @property
    def held(self) -> HeldWriter: ...

    @property
    def events(self) -> EventSink: ...

    def current_master(self) -> str: ...

    def is_leader(self) -> bool: ...

    def cache_status(self) -> builtins.list[CacheState]: ...

    def influx_points_dropped(self) -> int: ...

    def ready(self) -> bool: ...

    def read_checker_pods(self, run_uuid: str | None, ip: str | None, timeout: float) -> builtins.list[Obj]: ...

    def read_checker_pod(self, namespace: str, name: str, timeout: float) -> Obj | None: ...

    def read_khstate(self, namespace: str, name: str, timeout: float) -> Obj | None: ...

    def read_check_events(self, namespace: str, kind: str, name: str, limit: int,
                          timeout: float) -> builtins.list[Obj]: ...

    def follow_pod_log(self, namespace: str, pod: str, container: str | None, limit_bytes: int,
                       seconds: float) -> LogFollow: ...


class HeldWriter(HeldView, Protocol):
    def add(self, report: Held) -> bool: ...
