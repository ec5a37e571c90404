"""What `kuberhealthy migrate to-v3 --in-cluster` (and `--rollback`) does to one khcheck, given what is
there: the plan, and the objects it writes. Pure: no API access, no clock; daemon/migratelive.py reads
the cluster, asks here, and carries the steps out, each of which checks what is there first, so a run
killed half-way is finished by the next one.

To v3, for a khcheck whose HealthCheck of the same name is missing or ours (marked MIGRATED_FROM its
uid): create the HealthCheck (its spec from the offline conversion, v3manifests.to_v3, so offline and
live agree; marked MIGRATED_FROM at creation), write its status from the khstate (hcstate.status_of),
then mark the khcheck MIGRATED_TO, last. Until that last step the HealthCheck is `pending`
(migration.py): the daemon runs the khcheck, not the HealthCheck, so no run is doubled and none missed
while the steps happen; with the mark, the daemon runs the HealthCheck from the carried LastRun on. A
HealthCheck of that name without our mark, or marked from another khcheck's uid, is refused and left
alone, as is its khcheck.

Rollback, for a pair (both marks agree): copy the HealthCheck's state back into the khstate (counters
never step back), remove the khcheck's mark, then delete the HealthCheck. A HealthCheck of ours whose
khcheck was never marked (a migration stopped half-way) is deleted without copying: the khcheck ran
throughout and its khstate is the newer.

khjobs are not planned here: they run once and are left as they are.
"""
from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from kuberhealthy.base.durations import format_duration
from kuberhealthy.base.times import parse_time
from kuberhealthy.kube import KHCHECKS, KHSTATES, Obj
from kuberhealthy.records import hcstate, khstate, migration, runnow, v3manifests
from kuberhealthy.records.checkspec import DEFAULT_RUN_INTERVAL, DEFAULT_TIMEOUT
from kuberhealthy.records.history import HISTORY_LENGTH
from kuberhealthy.records.migration import annotation_of, meta_of

# Annotations of a khcheck that do not travel to its HealthCheck: the migration's own mark, and a
# run-now request (it is the khcheck's; carried, the HealthCheck would run at once after the switch).
NOT_CARRIED = frozenset({migration.MIGRATED_TO, migration.MIGRATED_FROM, runnow.RUN_NOW_ANNOTATION})
# The spec fields whose unset value means another thing in a HealthCheck (its defaults are the daemon's
# healthCheckDefaults): set to the khcheck's effective value, so the check runs as before.
EFFECTIVE = (("runInterval", DEFAULT_RUN_INTERVAL), ("timeout", DEFAULT_TIMEOUT))


class Step(enum.Enum):
    UNMARK_STALE = "remove a stale migrated-to mark from the khcheck"
    CREATE = "create the HealthCheck"
    WRITE_STATUS = "carry the khstate into the HealthCheck's status"
    MARK = "mark the khcheck migrated"
    COPY_BACK = "copy the HealthCheck's state into the khstate"
    UNMARK = "remove the khcheck's migrated-to mark"
    DELETE = "delete the HealthCheck"


class Outcome(enum.Enum):
    MIGRATE = "migrated"
    ALREADY = "already migrated"
    REFUSE = "refused"
    ROLL_BACK = "rolled back"
    NOT_MIGRATED = "not migrated"
    SKIP = "skipped"


@dataclass(frozen=True)
class Plan:
    """One khcheck's plan: the outcome it reaches and the steps left to reach it, in order."""

    namespace: str
    name: str
    outcome: Outcome
    steps: tuple[Step, ...] = ()
    reason: str = ""  # why refused or skipped; what was found, for a resumed or partial plan

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def uid(obj: Obj | None) -> str:
    return str(meta_of(obj).get("uid") or "")


def ours(khcheck: Obj, hc: Obj) -> bool:
    """The HealthCheck was created by this migration from this khcheck (marked with its uid)."""
    return bool(uid(khcheck)) and annotation_of(hc, migration.MIGRATED_FROM) == uid(khcheck)


def _deleting(obj: Obj | None) -> bool:
    return bool(meta_of(obj).get("deletionTimestamp"))


def refusal(khcheck: Obj, hc: Obj) -> str:
    """Why a HealthCheck of the khcheck's name is not the migration's, naming both."""
    meta = meta_of(khcheck)
    key = f"{meta.get('namespace')}/{meta.get('name')}"
    mark = annotation_of(hc, migration.MIGRATED_FROM)
    why = (f"it carries no {migration.MIGRATED_FROM} mark" if not mark else
           f"its {migration.MIGRATED_FROM} mark is uid {mark}, not this khcheck's uid {uid(khcheck)}")
    return (f"HealthCheck {key} exists and this migration did not create it from khcheck {key} ({why}); "
            "both left alone")


def plan_to_v3(khcheck: Obj, hc: Obj | None) -> Plan:
    """What migrating `khcheck` needs, `hc` being the HealthCheck of its name (None: there is none)."""
    meta = meta_of(khcheck)
    ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    if _deleting(khcheck):
        return Plan(ns, name, Outcome.SKIP, reason="the khcheck is being deleted")
    if hc is not None and not ours(khcheck, hc):
        return Plan(ns, name, Outcome.REFUSE, reason=refusal(khcheck, hc))
    if hc is not None and _deleting(hc):
        return Plan(ns, name, Outcome.SKIP, reason="its HealthCheck is being deleted; run again once it is gone")
    if hc is not None and migration.is_pair(khcheck, hc):
        return Plan(ns, name, Outcome.ALREADY)
    stale = (Step.UNMARK_STALE,) if annotation_of(khcheck, migration.MIGRATED_TO) else ()
    if hc is None:
        return Plan(ns, name, Outcome.MIGRATE, (*stale, Step.CREATE, Step.WRITE_STATUS, Step.MARK))
    # ours, not yet marked: a migration stopped after the create; the khcheck still runs, so its khstate
    # is carried again before the switch
    return Plan(ns, name, Outcome.MIGRATE, (*stale, Step.WRITE_STATUS, Step.MARK),
                reason="resumed: its HealthCheck was already created")


def plan_rollback(khcheck: Obj, hc: Obj | None) -> Plan:
    """What rolling back `khcheck`'s migration needs."""
    meta = meta_of(khcheck)
    ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    marked = bool(annotation_of(khcheck, migration.MIGRATED_TO))
    if hc is not None and not ours(khcheck, hc):
        if marked:  # a mark that pairs with nothing of ours: ours to remove; their HealthCheck is left alone
            return Plan(ns, name, Outcome.ROLL_BACK, (Step.UNMARK,),
                        reason=f"{refusal(khcheck, hc)}; only the khcheck's stale mark removed")
        return Plan(ns, name, Outcome.NOT_MIGRATED, reason=f"HealthCheck {ns}/{name} is not the migration's: "
                                                           "left alone")
    if hc is None:
        if marked:
            return Plan(ns, name, Outcome.ROLL_BACK, (Step.UNMARK,), reason="no HealthCheck: only the mark removed")
        return Plan(ns, name, Outcome.NOT_MIGRATED)
    if _deleting(hc):
        return Plan(ns, name, Outcome.ROLL_BACK, (Step.UNMARK,) if marked else (),
                    reason="its HealthCheck is being deleted")
    if migration.is_pair(khcheck, hc):
        return Plan(ns, name, Outcome.ROLL_BACK, (Step.COPY_BACK, Step.UNMARK, Step.DELETE))
    # ours but never switched (or switched back by a rollback stopped half-way): the khcheck's state is newer
    return Plan(ns, name, Outcome.ROLL_BACK, ((Step.UNMARK,) if marked else ()) + (Step.DELETE,),
                reason="the khcheck was not switched over: its khstate kept")


# --- the objects the steps write -------------------------------------------------------------------------

def healthcheck_for(khcheck: Obj) -> tuple[Obj, list[str]]:
    """The HealthCheck to create for `khcheck`, and notes on what it could not carry: the offline
    conversion's, plus our mark and the khcheck's effective interval and timeout where it sets none.
    Raises v3manifests.ManifestError for a khcheck the conversion cannot take."""
    source = {**khcheck, "apiVersion": KHCHECKS.api_version, "kind": v3manifests.KIND_CHECK}
    meta = dict(meta_of(source))
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        meta["annotations"] = {k: v for k, v in annotations.items() if k not in NOT_CARRIED}
    meta.pop("finalizers", None)  # another controller's: it would hold the HealthCheck's deletion
    source["metadata"] = meta
    source.pop("status", None)
    conversion = v3manifests.to_v3(json.dumps(source))
    (hc,) = conversion.objects
    notes = [n for n in conversion.notes if "spec.timeout is not set" not in n]
    spec = hc.get("spec")
    if not isinstance(spec, dict):
        spec = hc["spec"] = {}
    for key, default in EFFECTIVE:
        if spec.get(key) in (None, ""):
            spec[key] = format_duration(default)
            notes.append(f"spec.{key} is not set: set to {spec[key]}, the khcheck's default")
    hc_meta = hc["metadata"]
    hc_meta["namespace"] = str(meta_of(khcheck).get("namespace") or "")
    hc_meta["annotations"] = {**(hc_meta.get("annotations") or {}), migration.MIGRATED_FROM: uid(khcheck)}
    return hc, notes


def status_for(state: Obj | None, khcheck: Obj, hc: Obj) -> dict[str, Any] | None:
    """The HealthCheck status that carries the khstate `state` (None: nothing to carry). A token binding at
    the khcheck's current generation stays a binding, at the HealthCheck's."""
    if state is None:
        return None
    carried = json.loads(json.dumps(state))
    spec = carried.setdefault("spec", {})
    bound = spec.pop(khstate.TOKEN_BOUND_GENERATION, None)
    if bound is not None and bound == meta_of(khcheck).get("generation") and meta_of(hc).get("generation") is not None:
        spec[khstate.TOKEN_BOUND_GENERATION] = meta_of(hc)["generation"]
    return hcstate.status_of(carried, hc.get("status"))


def in_flight(state: Obj | None) -> bool:
    """A run of the check is under way: claimed (a uuid) and not finished."""
    claim = khstate.RunClaim.of(state)
    return bool(claim.uuid) and not claim.finished


def _time(spec: dict[str, Any], key: str) -> float:
    t = parse_time(spec.get(key)) if spec.get(key) else None
    return t if t is not None else 0.0


def _count(spec: dict[str, Any], key: str) -> int:
    value = spec.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


RESULT_KEYS = ("OK", "Errors", "RunDuration", "Node", "consecutiveFailures")


def khstate_back(hc: Obj, current: Obj | None) -> Obj:
    """The khstate after a rollback: the HealthCheck's result where it is the newer, each counter the
    larger of the two, each time the later, the histories merged (newest first, one entry per run). The
    khstate's own run binding (uuid and its annotations) and token binding stay as they were."""
    meta = meta_of(hc)
    ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    theirs = hcstate.view(hc).get("spec") or {}
    out = json.loads(json.dumps(current)) if current is not None else khstate.new_body(ns, name, "")
    out.setdefault("apiVersion", KHSTATES.api_version)
    out.setdefault("kind", "KuberhealthyState")
    spec = out.setdefault("spec", {})
    newer = _time(theirs, "LastRun") >= _time(spec, "LastRun") and bool(theirs.get("LastRun"))
    if newer:
        for key in RESULT_KEYS:
            if key in theirs:
                spec[key] = theirs[key]
        if theirs.get("AuthoritativePod"):
            spec["AuthoritativePod"] = theirs["AuthoritativePod"]
    for key in ("successCount", "failureCount"):
        if key in theirs or key in spec:
            spec[key] = max(_count(spec, key), _count(theirs, key))
    for key in hcstate.TIMES:
        if _time(theirs, key) > _time(spec, key):
            spec[key] = theirs[key]
    history = merged_history(theirs.get("history"), spec.get("history"))
    if history is not None:
        spec["history"] = history
    spec.setdefault("Namespace", ns)
    return out


def merged_history(first: Any, second: Any) -> list[Any] | None:
    """Two histories as one: newest first by `start`, a run (uuid) once, `first`'s entry where both have
    it, as long as the longer of the two or the default historyLength (the daemon's next run trims it to its
    own). None when neither is a list."""
    lists = [h for h in (first, second) if isinstance(h, list)]
    if not lists:
        return None
    seen: set[str] = set()
    entries: list[Any] = []
    for h in lists:
        for entry in h:
            run = str(entry.get("uuid") or "") if isinstance(entry, dict) else ""
            if run and run in seen:
                continue
            seen.add(run)
            entries.append(entry)

    def start(entry: Any) -> float:
        t = parse_time(entry.get("start")) if isinstance(entry, dict) and entry.get("start") else None
        return t if t is not None else 0.0
    entries.sort(key=start, reverse=True)  # stable: equal starts keep `first` first
    return entries[:max(HISTORY_LENGTH, *(len(h) for h in lists))]


def mark_patch(khcheck: Obj, name: str | None) -> Obj:
    """A merge patch setting (a name) or removing (None) the khcheck's MIGRATED_TO, refused by the API
    server if the khcheck under that name is no longer the one planned for (its uid)."""
    return {"metadata": {"uid": uid(khcheck), "annotations": {migration.MIGRATED_TO: name}}}

