"""What kube/ offers to the parts above it, as typing.Protocols: the API calls and a watch cache.

kube.Resources provides Api and kube.Reflector provides Cache; unit tests provide in-memory fakes.
This module holds no behaviour.
"""
from __future__ import annotations

import builtins
import threading
from collections.abc import Callable
from typing import Protocol

from kuberhealthy.base.notify import Topic
from kuberhealthy.kube.client import Obj
from kuberhealthy.kube.resources import Bounds, Resource

Listener = Callable[[str, Obj, "Obj | None"], None]  # (event type, object, previous object)


class Api(Protocol):
    """The API server, one bounded request per call (errors are kuberhealthy.base.errors types)."""

    def get(self, res: Resource, namespace: str, name: str, timeout: float = ...) -> Obj: ...

    def list(self, res: Resource, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None, timeout: float = ...) -> tuple[builtins.list[Obj], str]: ...

    def create(self, res: Resource, namespace: str, body: Obj, timeout: float = ..., dry_run: bool = ...) -> Obj: ...

    def replace(self, res: Resource, namespace: str, name: str, body: Obj, timeout: float = ...,
                dry_run: bool = ...) -> Obj: ...

    def merge_patch(self, res: Resource, namespace: str, name: str, patch: Obj, timeout: float = ...) -> Obj: ...

    def create_event(self, namespace: str, body: Obj, timeout: float = ...) -> Obj: ...

    def patch_event(self, namespace: str, name: str, body: Obj, timeout: float = ...) -> Obj: ...

    def pod_log(self, namespace: str, name: str, container: str | None = None, tail_lines: int = ...,
                limit_bytes: int = ..., timeout: float = ...) -> str: ...

    def delete(self, res: Resource, namespace: str, name: str, grace_seconds: int | None = None,
               uid: str | None = None, timeout: float = ...) -> bool: ...

    def evict_pod(self, namespace: str, name: str, uid: str | None = None, timeout: float = ...) -> str: ...

    def update_with_retry(self, res: Resource, namespace: str, name: str,
                          mutate: Callable[[Obj | None], Obj | None], *,
                          hint: Obj | None = None, bounds: Bounds = ...,
                          stop: threading.Event | None = None) -> Obj | None: ...


class Cache(Protocol):
    """A watch cache of one resource: reads never call the API."""

    @property
    def plural(self) -> str: ...

    @property
    def synced(self) -> threading.Event: ...

    def get(self, namespace: str, name: str) -> Obj | None: ...

    def list(self) -> builtins.list[Obj]: ...

    def by_index(self, index: str, value: str) -> builtins.list[Obj]: ...

    def add_listener(self, fn: Listener) -> None: ...

    def topic(self, index: str, value: str) -> Topic: ...

    def is_current(self) -> bool: ...

    def stale_seconds(self) -> float: ...

    def impaired_since(self, since: float) -> bool: ...
