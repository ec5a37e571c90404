"""The marks of a live migration (`kuberhealthy migrate to-v3 --in-cluster`), and what they mean.

The migration creates, for a khcheck, the HealthCheck of the same name in the same namespace with its
state carried over, and marks both: the khcheck with MIGRATED_TO (the HealthCheck's name), the
HealthCheck with MIGRATED_FROM (the khcheck's uid). A pair is only a pair when both marks agree: a
HealthCheck the migration did not create (no mark, or another khcheck's uid) never pairs, whatever its
name. A HealthCheck carrying MIGRATED_FROM whose khcheck is there but not (yet, or no longer) marked is a
migration in progress (created, state being carried; or being rolled back): the khcheck runs, the
HealthCheck waits (`pending`), so no run is doubled while the marks are written one after the other.
While paired, the daemon runs the HealthCheck and not the khcheck (the khcheck is `superseded`),
and shows the pair once, under the khcheck's key `<ns>/<name>` (on `/` and in the default metrics), so
dashboards and alerts see one continuous series. Pure.
"""
from __future__ import annotations

from kuberhealthy.kube import Cache, Obj

MIGRATED_TO = "kuberhealthy.github.io/migrated-to"  # on a khcheck: the name of the HealthCheck it runs as
MIGRATED_FROM = "kuberhealthy.github.io/migrated-from"  # on a HealthCheck: the uid of the khcheck it came from


def meta_of(obj: Obj | None) -> dict[str, object]:
    """An object's metadata; {} for a missing one, or a hand-edited object of the wrong shape."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else {}


def annotation_of(obj: Obj | None, key: str) -> str:
    """An annotation's value; "" when missing or not a string."""
    annotations = meta_of(obj).get("annotations")
    value = annotations.get(key) if isinstance(annotations, dict) else None
    return value if isinstance(value, str) else ""


def is_pair(khcheck: Obj | None, healthcheck: Obj | None) -> bool:
    """Both marks agree: `healthcheck` is the migration of `khcheck`."""
    if khcheck is None or healthcheck is None:
        return False
    uid = str(meta_of(khcheck).get("uid") or "")
    return bool(uid) and annotation_of(khcheck, MIGRATED_TO) == str(meta_of(healthcheck).get("name") or "") and \
        annotation_of(healthcheck, MIGRATED_FROM) == uid and \
        meta_of(khcheck).get("namespace") == meta_of(healthcheck).get("namespace")


def migrated(khcheck: Obj, healthchecks: Cache) -> bool:
    """The khcheck runs as its HealthCheck now (a pair in the caches)."""
    target = annotation_of(khcheck, MIGRATED_TO)
    if not target:
        return False
    return is_pair(khcheck, healthchecks.get(str(meta_of(khcheck).get("namespace") or ""), target))


def migrated_from(healthcheck: Obj, khchecks: Cache) -> Obj | None:
    """The khcheck this HealthCheck is the migration of (both marks agree), or None."""
    if not annotation_of(healthcheck, MIGRATED_FROM):
        return None
    meta = meta_of(healthcheck)
    khcheck = khchecks.get(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
    return khcheck if is_pair(khcheck, healthcheck) else None


def pending(healthcheck: Obj, khchecks: Cache) -> bool:
    """The HealthCheck is a migration's whose khcheck still runs: marked as coming from a khcheck that
    exists with that uid, which is not marked as migrated to it (the migration has not switched yet, or a
    rollback has switched back)."""
    uid = annotation_of(healthcheck, MIGRATED_FROM)
    if not uid:
        return False
    meta = meta_of(healthcheck)
    khcheck = khchecks.get(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
    return khcheck is not None and str(meta_of(khcheck).get("uid") or "") == uid and not is_pair(khcheck, healthcheck)
