"""Under which key each check is shown, and which check is not shown at all: the one rule behind `/`, the
JSON API's entries, /metrics' check labels, `/json` and the dashboard, for both kinds of check.

A khcheck or khjob is shown under v2's key, `<namespace>/<name>`. A HealthCheck is shown under the same
key, unless a khcheck or khjob of its name in its namespace exists that is not its migration pair
(records/migration.py): then the two are two checks and the HealthCheck is shown as
`<namespace>/hc:<name>`. A migrated pair shows once: the HealthCheck under `<namespace>/<name>` (the
daemon runs it, on the khcheck's schedule), and the khcheck is not shown (nor its khstate on `/`), so a
dashboard or alert on that key sees one continuous series across the migration.

Pure over the caches it is given; it never calls the API.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kuberhealthy.kube import Obj
from kuberhealthy.records import migration
from kuberhealthy.records.checkspec import HC_PREFIX


class Lookup(Protocol):
    """What the rule reads of a cache."""

    def get(self, namespace: str, name: str) -> Obj | None: ...


def _ns_name(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def single_run_only(healthcheck: Obj) -> bool:
    """A HealthCheck that runs once (v3's `spec.singleRunOnly`): shown as a job is."""
    spec = healthcheck.get("spec")
    return isinstance(spec, dict) and spec.get("singleRunOnly") is True


@dataclass(frozen=True)
class Shown:
    """The display rule over the caches of both kinds (`healthchecks` None: no HealthChecks here)."""

    khchecks: Lookup | None
    khjobs: Lookup | None
    healthchecks: Lookup | None = None

    def khcheck_hidden(self, khcheck: Obj) -> bool:
        """The khcheck runs as its migrated HealthCheck now, which is shown in its place."""
        if self.healthchecks is None:
            return False
        annotations = (khcheck.get("metadata") or {}).get("annotations") or {}
        target = annotations.get(migration.MIGRATED_TO) if isinstance(annotations, dict) else None
        if not isinstance(target, str) or not target:
            return False
        namespace, _ = _ns_name(khcheck)
        return migration.is_pair(khcheck, self.healthchecks.get(namespace, target))

    def khstate_hidden(self, namespace: str, name: str) -> bool:
        """The khstate of this name is not shown: its khcheck is migrated, or no khcheck or khjob claims
        it and a HealthCheck is shown under its key."""
        if self.healthchecks is None:
            return False
        khcheck = self.khchecks.get(namespace, name) if self.khchecks is not None else None
        if khcheck is not None:
            return self.khcheck_hidden(khcheck)
        if self.khjobs is not None and self.khjobs.get(namespace, name) is not None:
            return False
        return self.healthchecks.get(namespace, name) is not None

    def healthcheck_key(self, healthcheck: Obj) -> str:
        """`<ns>/<name>`, or `<ns>/hc:<name>` while an unpaired khcheck or khjob of that name exists."""
        namespace, name = _ns_name(healthcheck)
        khcheck = self.khchecks.get(namespace, name) if self.khchecks is not None else None
        clash = (khcheck is not None and not migration.is_pair(khcheck, healthcheck)) or (
            self.khjobs is not None and self.khjobs.get(namespace, name) is not None)
        return f"{namespace}/{HC_PREFIX}{name}" if clash else f"{namespace}/{name}"
