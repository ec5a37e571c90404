"""At start: does the installed khstate CRD keep the fields this version adds? Helm never upgrades `crds/`.

With an older chart's CRD the API server silently prunes the fields this version adds to a khstate
(history, counters, the token binding's tokenBoundGeneration, the uptime rollups): results still work, history never
appears, and a check that reported with a token is never bound to tokens. One dry-run create of a
probe khstate (nothing is stored; RBAC the daemon has already) tells. If fields would be pruned, a warning is logged
and raised as an Event on this replica's pod, naming the command that updates the CRDs (README,
"Upgrading"). A one-off thread: an API server that is away only delays it (a few tries, then it gives
up quietly: the next start tells).

The probe (probe_body, pruned_fields) is pure and needs no RBAC beyond creating khstates: the dry-run
answer is the object as it would be stored, pruned. Reading the CRD object instead would need `get`
on CRDs. What the fields are and how they are written is records/history.py's and records/khstate.py's.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from kuberhealthy.base.errors import ApiError, is_transient
from kuberhealthy.base.threads import BackgroundThread
from kuberhealthy.base.times import format_time
from kuberhealthy.kube import KHSTATES, PODS, Api
from kuberhealthy.outputs.events import WARNING, EventRecorder, ObjectRef
from kuberhealthy.records import rollcodec, rollups
from kuberhealthy.records.history import ADDED_KEYS, ENTRY_KEYS, RunFacts, RunRecord, new_entry
from kuberhealthy.records.khstate import TOKEN_BOUND_GENERATION
from kuberhealthy.records.uptime import FIELD as ROLLUPS

logger = logging.getLogger(__name__)

ATTEMPTS = 5
RETRY = 5.0  # seconds between tries while the API server is away
TIMEOUT = 5.0
UPGRADE_HINT = ("update the CRDs: helm show crds <repo>/kuberhealthy --version <chart version> | "
                "kubectl apply --server-side --force-conflicts -f -")
REASON = "OutdatedCRD"
PROBE_NAME_PREFIX = "kuberhealthy-schema-probe-"


def probe_body(api_version: str, namespace: str, now: float) -> dict[str, Any]:
    """A khstate (api_version: KHSTATES.api_version) with every added field set, for a dry-run create;
    generateName, so it never clashes with a real khstate."""
    record = RunRecord.failed(RunFacts("probe", now, 1.0, "node", "pod"), "probe", ["probe"], logs="probe")
    spec: dict[str, Any] = {"OK": True, "Errors": [], "RunDuration": "", "Namespace": namespace, "Node": "",
                            "AuthoritativePod": "", "uuid": "", "consecutiveFailures": 1, "successCount": 1,
                            "failureCount": 1, "lastOK": format_time(now), "lastFailure": format_time(now),
                            "history": [new_entry(record, capture_logs=True)], TOKEN_BOUND_GENERATION: 1,
                            ROLLUPS: rollcodec.serialize(rollups.record(rollups.empty(), now, rollups.OK, 1.0))}
    return {"apiVersion": api_version, "kind": "KuberhealthyState",
            "metadata": {"generateName": PROBE_NAME_PREFIX, "namespace": namespace}, "spec": spec}


def pruned_fields(answer: Mapping[str, Any]) -> list[str]:
    """The added fields missing from the API server's answer to probe_body(). [] = the CRD keeps them all."""
    spec = answer.get("spec") or {}
    missing = [k for k in (*ADDED_KEYS, TOKEN_BOUND_GENERATION, ROLLUPS) if k not in spec]
    history = spec.get("history")
    if isinstance(history, list) and history and isinstance(history[0], Mapping):
        missing += [f"history[].{k}" for k in ENTRY_KEYS if k not in history[0]]
    return missing


def consequences(missing: list[str]) -> str:
    """What the dropped fields cost, for the warning."""
    lost = [] if set(missing) <= {TOKEN_BOUND_GENERATION, ROLLUPS} else ["no history is kept"]
    if TOKEN_BOUND_GENERATION in missing:
        lost.append("no check is bound to report tokens")
    if ROLLUPS in missing:
        lost.append("no uptime over 7 or 30 days is kept")
    return " and ".join(lost)


class SchemaCheck(BackgroundThread):
    finite = True

    def __init__(self, api: Api, events: EventRecorder, probe_namespace: str, namespace: str, pod_name: str) -> None:
        super().__init__("kh-schema-check")
        self._api = api
        self._events = events
        self._probe_namespace = probe_namespace  # where the daemon may create khstates (targetNamespace)
        self._namespace = namespace
        self._pod_name = pod_name
        self.missing: list[str] | None = None  # None until known

    def check_once(self) -> list[str]:
        ns = self._probe_namespace
        answer = self._api.create(KHSTATES, ns, probe_body(KHSTATES.api_version, ns, time.time()), timeout=TIMEOUT,
                                  dry_run=True)
        return pruned_fields(answer)

    def _run(self) -> None:
        for attempt in range(ATTEMPTS):
            try:
                self.missing = self.check_once()
                break
            except ApiError as e:
                logger.debug("Cannot check the khstate CRD (try %d): %s", attempt + 1, e)
                if not is_transient(e) or self._stop.wait(RETRY):
                    return
        if not self.missing:
            return
        message = (f"The khstate CRD is older than this Kuberhealthy: the API server drops "
                   f"{', '.join(self.missing[:6])}{' ...' if len(self.missing) > 6 else ''}, so "
                   f"{consequences(self.missing)}; {UPGRADE_HINT}")
        logger.warning("%s", message)
        uid = ""
        try:
            uid = str((self._api.get(PODS, self._namespace, self._pod_name, timeout=TIMEOUT).get("metadata") or {})
                      .get("uid") or "")
        except ApiError:
            pass  # outside a cluster there is no such pod; the log line stands
        if uid:
            self._events.record(ObjectRef("Pod", self._namespace, self._pod_name, uid, api_version="v1"), WARNING,
                                REASON, message)
