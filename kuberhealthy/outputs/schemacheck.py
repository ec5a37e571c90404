"""At start: does the installed khstate CRD keep the history fields? Helm never upgrades `crds/`.

With an older chart's CRD the API server silently prunes the fields this version adds to a khstate
(history, counters): results still work, history never appears. One dry-run create of a probe khstate
(nothing is stored; RBAC the daemon has already) tells. If fields would be pruned, a warning is logged
and raised as an Event on this replica's pod, naming the command that updates the CRDs (README,
"Upgrading"). A one-off thread: an API server that is away only delays it (a few tries, then it gives
up quietly: the next start tells).
"""
from __future__ import annotations

import logging
import time

from kuberhealthy.base.errors import ApiError, is_transient
from kuberhealthy.base.threads import BackgroundThread
from kuberhealthy.kube import KHSTATES, PODS, Api
from kuberhealthy.outputs.events import WARNING, EventRecorder, ObjectRef
from kuberhealthy.records.history import probe_body, pruned_fields

logger = logging.getLogger(__name__)

ATTEMPTS = 5
RETRY = 5.0  # seconds between tries while the API server is away
TIMEOUT = 5.0
UPGRADE_HINT = ("update the CRDs: helm show crds <repo>/kuberhealthy --version <chart version> | "
                "kubectl apply --server-side --force-conflicts -f -")
REASON = "OutdatedCRD"


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
                   f"{', '.join(self.missing[:6])}{' ...' if len(self.missing) > 6 else ''}, so no history is "
                   f"kept; {UPGRADE_HINT}")
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
