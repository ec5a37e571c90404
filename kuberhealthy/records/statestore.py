"""Where a check's state lives, behind one interface: a khstate of its own, or a HealthCheck's status.

Every state rule (claim a run, store a report, record a result or an error, the history) is written
once, in khstate.py and history.py, over the khstate shape, as a `mutate(current) -> new | None`. A
StateStore runs such a mutate against the object that really holds the state:

  KhstateStore      the khstate (comcast.github.io/v1) of the same name: read-modify-write of it
  HealthCheckStore  the HealthCheck's status (kuberhealthy.github.io/v2), through its status
                    subresource: the mutate sees hcstate.view(hc) and its answer goes back as
                    hcstate.status_of(); a missing HealthCheck is never created (NotFound)

Where the installed HealthCheck CRD is v3's own, the API server prunes our status fields. Before its
first write the store asks with a dry run (a status PUT with dryRun=All carrying a run binding: nothing
is stored) and, should the CRD be replaced later, any write whose answer lacks the binding it sent tells
again. When pruned, it says so once (log and a callback the daemon turns into an Event), and keeps the
run binding in the HealthCheck's annotations too (hcstate.binding_annotations): one more write for a
write that changes it.
Two writes are not atomic, so their order keeps every reader right in between: a new run's claim goes
to the annotations first (no report of the old run is taken meanwhile), anything else to the status
first (a runner waiting for "reported" never sees the stamp before the result).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kuberhealthy.base.copies import json_copy
from kuberhealthy.base.errors import NotFound
from kuberhealthy.kube import HEALTHCHECKS, Api, Bounds, Cache, Obj
from kuberhealthy.records import hcstate
from kuberhealthy.records.khstate import KHSTATE_STORE, KhstateStore, Mutate, StateStore

__all__ = ["KHSTATE_STORE", "HealthCheckStore", "KhstateStore", "StateStore"]

logger = logging.getLogger(__name__)

class HealthCheckStore:
    """The state is the HealthCheck's status. `checks`: the HealthCheck cache (a view hint of the same
    resourceVersion saves the read); `on_pruned(hc, lost)` is called once when the CRD turns out to prune
    our fields."""

    def __init__(self, checks: Cache | None = None,
                 on_pruned: Callable[[Obj, str], None] | None = None) -> None:
        self._checks = checks
        self._on_pruned = on_pruned
        self._lock = threading.Lock()
        self.pruned = False  # the installed CRD drops our status fields (found by a dry run or a write)
        self.probed = False  # the dry run was made
        self.binding_writes = 0  # extra annotation writes made because of it

    def read(self, api: Api, namespace: str, name: str, timeout: float) -> Obj | None:
        try:
            return hcstate.view(api.get(HEALTHCHECKS, namespace, name, timeout=timeout))
        except NotFound:
            return None

    def _hint(self, namespace: str, name: str, hint: Obj | None) -> Obj | None:
        if hint is None or self._checks is None:
            return None
        hc = self._checks.get(namespace, name)
        version = (hint.get("metadata") or {}).get("resourceVersion")
        if hc is None or not version or (hc.get("metadata") or {}).get("resourceVersion") != version:
            return None
        return hc

    def probe(self, api: Api, hc: Obj, timeout: float) -> None:
        """The dry run: would a status write of `hc` keep a run binding? (Once; a failed one is made again.)"""
        meta = hc.get("metadata") or {}
        body = json_copy(hc)
        body["status"] = {**(hc.get("status") or {}), hcstate.RUN_BINDING: {"uuid": "kuberhealthy-crd-probe"}}
        answer = api.replace(HEALTHCHECKS.status(), str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                             body, timeout=timeout, dry_run=True)
        self.probed = True
        if hcstate.RUN_BINDING not in (answer.get("status") or {}):
            self._found_pruned(hc)

    def update(self, api: Api, namespace: str, name: str, mutate: Mutate, hint: Obj | None,
               bounds: Bounds) -> Obj | None:
        wanted: list[Obj] = []  # the view the last mutate asked for
        if not self.probed:
            current = self._checks.get(namespace, name) if self._checks is not None else None
            if current is not None:
                self.probe(api, current, bounds.timeout)

        def on_status(hc: Obj | None) -> Obj | None:
            wanted.clear()
            # view() builds a new object (its history list is the private copy's `hc` has): mutate may change it
            before = hcstate.view(hc) if hc is not None else None
            run_before = _run_of(before)
            after = mutate(before)
            if after is None:
                return None
            if hc is None:
                raise NotFound(f"healthchecks {namespace}/{name} not found")
            wanted.append(after)
            if self.pruned and _run_of(after) != run_before:  # a new run's claim
                self._write_binding(api, namespace, name, after, bounds)
            # a shallow copy: only the status is new, and nothing here changes the rest (the request's body)
            return {**hc, "status": hcstate.status_of(after, hc.get("status"))}

        written = api.update_with_retry(HEALTHCHECKS.status(), namespace, name, on_status,
                                        hint=self._hint(namespace, name, hint), bounds=bounds)
        if written is None or not wanted:
            return hcstate.view(written) if written is not None else None
        after = wanted[0]
        sent = hcstate.status_of(after).get(hcstate.RUN_BINDING)
        if not self.pruned and sent and hcstate.RUN_BINDING not in (written.get("status") or {}):
            self._found_pruned(written)
        if self.pruned and _binding_differs(written, after):
            written = self._write_binding(api, namespace, name, after, bounds) or written
        return hcstate.view(written)

    def _found_pruned(self, hc: Obj) -> None:
        with self._lock:
            first, self.pruned = not self.pruned, True
        if not first:
            return
        lost = ("the installed HealthCheck CRD drops Kuberhealthy's own status fields (run binding, history, "
                "uptime rollups, token binding, node): the run binding is kept in the HealthCheck's annotations "
                "(one more write per run); history, uptime rollups and token binding are not kept. Install this "
                "chart's CRD to keep them")
        logger.warning("HealthCheck %s/%s: %s", (hc.get("metadata") or {}).get("namespace"),
                       (hc.get("metadata") or {}).get("name"), lost)
        if self._on_pruned is not None:
            self._on_pruned(hc, lost)

    def _write_binding(self, api: Api, namespace: str, name: str, state: Obj, bounds: Bounds) -> Obj | None:
        """Put the run binding of `state` in the HealthCheck's annotations (a read-modify-write of it)."""
        values = hcstate.binding_annotations(state)

        def on_meta(hc: Obj | None) -> Obj | None:
            if hc is None:
                raise NotFound(f"healthchecks {namespace}/{name} not found")
            annotations = dict((hc.get("metadata") or {}).get("annotations") or {})
            changed = {k: v for k, v in values.items() if annotations.get(k) != v}
            if not changed:
                return None
            for key, value in changed.items():
                if value is None:
                    annotations.pop(key, None)
                else:
                    annotations[key] = value
            out = json_copy(hc)
            out.setdefault("metadata", {})["annotations"] = annotations
            return out
        self.binding_writes += 1
        return api.update_with_retry(HEALTHCHECKS, namespace, name, on_meta, bounds=bounds)


def _run_of(state: Obj | None) -> str:
    """The run a khstate-shaped state names."""
    return str(((state or {}).get("spec") or {}).get("uuid") or "")


def _binding_differs(hc: Obj, state: Obj) -> bool:
    annotations = (hc.get("metadata") or {}).get("annotations") or {}
    return any(annotations.get(k) != v for k, v in hcstate.binding_annotations(state).items())
