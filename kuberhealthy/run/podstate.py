"""What a run reads off its checker pod: the phase predicates, v2's failure reasons, the log tail.

Pure functions on the pod as the cache keeps it (checkpod.slim_pod) or a read returns it; RunPod,
which of the cached pods is this run's, what its phases wait for, and whether someone else deleted it
(a deletionTimestamp the run did not cause: kubectl delete, an eviction, a drain, a node shutdown);
why_ended, what the pod's status says about a checker that ended without reporting; plus one bounded
read of the checker's log for a failed run's history entry. Nothing here fails or skips a run, nor
decides whether the cache is to be believed: that is guard.py's. The state machine that uses them is
runner.py.
"""
from __future__ import annotations

from kuberhealthy.base.errors import ApiError
from kuberhealthy.kube import Api, Cache, Obj
from kuberhealthy.records.checkpod import MESSAGE_CHARS, RUN_ID_LABEL
from kuberhealthy.records.history import LOG_LINES, log_unavailable

POD_START_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")
FINISHED = ("Succeeded", "Failed")

# v2's reasons, kept word for word: alerts and dashboards match on them.
ERR_CLEANUP = "failed to see pod cleanup within timeout"
ERR_RUNNING = "failed to see pod running within timeout"
ERR_REPORT = "timed out waiting for checker pod to report in"
ERR_EXIT = "timed out waiting for pod to exit"
ERR_START = "error when waiting for pod to start: "

LOG_READ_BYTES = 16384  # what the API server sends of a log at most (the history keeps 4 KiB)
# Container reasons that say no more than the exit code does: "exited <code>" then.
PLAIN_EXITS = ("Error", "Completed", "", None)


def live(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") not in FINISHED


def terminating(pod: Obj) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def pending(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in (None, "", "Pending")


def start_failure(pod: Obj) -> str | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        if reason in POD_START_FAILURES:
            return str(reason)
    return None


def why_ended(pod: Obj | None) -> str:
    """Why a checker pod ended without reporting, from its status (the run error after v2's reason).

    The pod's own reason first (a node-pressure eviction, a node shutdown: `checker pod <name>:
    Evicted: <message>`), then the first init container, then the first container, that did not exit
    0: `checker pod <name> container <c>: OOMKilled (exit 137)`, `checker pod <name> init container <c>
    exited 1`. A checker that exited 0 without reporting says so. Works on the slim pod and on a read.
    """
    name = pod_name_of(pod)
    status = (pod or {}).get("status") or {}
    if status.get("reason"):
        message = str(status.get("message") or "")[:MESSAGE_CHARS]
        return f"checker pod {name}: {status['reason']}" + (f": {message}" if message else "")
    exited: list[str] = []
    for kind, key in (("init container", "initContainerStatuses"), ("container", "containerStatuses")):
        for cs in status.get(key) or []:
            done = ((cs or {}).get("state") or {}).get("terminated")
            if not isinstance(done, dict):
                continue
            code, reason, who = done.get("exitCode"), done.get("reason"), f"checker pod {name} {kind} {cs.get('name')}"
            if code == 0 and reason in PLAIN_EXITS:
                exited.append(f"{who} exited 0 without reporting")
                continue
            return f"{who} exited {code}" if reason in PLAIN_EXITS else f"{who}: {reason} (exit {code})"
    if exited:
        return exited[-1]  # every container exited 0: the (last) checker container's
    return f"checker pod {name} ended ({status.get('phase') or 'no phase'}) without a container exit status"


def pod_uid(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or meta.get("name") or "")


def uid_of(pod: Obj | None) -> str:
    """The pod's uid ("" when there is none): what a delete or an eviction of that very pod carries."""
    return str(((pod or {}).get("metadata") or {}).get("uid") or "")


def pod_name_of(pod: Obj | None) -> str:
    return str(((pod or {}).get("metadata") or {}).get("name") or "")


def node_of(pod: Obj | None) -> str:
    """The node the pod was scheduled to ("" if none yet)."""
    return str(((pod or {}).get("spec") or {}).get("nodeName") or "")


def never_started(pod: Obj) -> bool:
    """Pending, and no container (init or main) has ever run: nothing of it is running."""
    status = pod.get("status") or {}
    if not pending(pod):
        return False
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        state = cs.get("state") or {}
        if "running" in state or "terminated" in state:  # keys only: the cache keeps few of their fields
            return False
    return True


def earlier(pods: list[Obj], run_uuid: str, stuck: set[str]) -> list[Obj]:
    """The live pods among `pods` left by other runs than `run_uuid` that a new run must wait for: not
    those known `stuck` Terminating, nor those being deleted before any container of theirs started.
    A real kubelet can take most of a minute to remove a pod deleted while still Pending (the old
    leader's last pod after a failover: measured 54 s on kubelet 1.20), although nothing of it runs;
    waiting for it would fail a run with a shorter timeout on every failover."""
    return [p for p in pods if live(p) and pod_uid(p) not in stuck
            and not (terminating(p) and never_started(p))
            and (p["metadata"].get("labels") or {}).get(RUN_ID_LABEL) != run_uuid]


class RunPod:
    """One run's checker pod as the pod cache shows it: only the pod the run created counts (by name and,
    once created, uid, among the pods carrying its uuid: not a look-alike), and the last version seen is kept.

    It also remembers what tells "someone else deleted the pod" from "the pod ended": the pods this
    run told to go itself (its CLEAR, its eviction on a timeout, a failure or a stop), and whether the
    pod was ever seen finished before any deletionTimestamp. On a real kubelet a deleted pod's container
    is stopped (SIGTERM: exit 143), the pod ends Failed while Terminating, and the object stays for
    seconds: that is a deletion, not a checker that ended without reporting."""

    def __init__(self, cache: Cache, run_uuid: str) -> None:
        self.cache = cache
        self.run_uuid = run_uuid
        self.name = ""  # the pod this run claims, then creates
        self.uid = ""  # the created pod's, from the create's answer: every delete and eviction carries it
        self.last: Obj | None = None  # its last version seen: in the cache, by a read, or as created
        self.told_to_go: set[str] = set()  # pods this run asked to remove (a deletionTimestamp it caused)
        self._seen = False  # the cache has shown it to START
        self._ended = False  # seen finished with no deletionTimestamp: it ended on its own

    def of_run(self) -> list[Obj]:
        return list(self.cache.by_index("uuid", self.run_uuid))

    def current(self) -> Obj | None:
        for pod in self.of_run():
            if (not self.name or pod_name_of(pod) == self.name) and self.ours(pod):
                return pod
        return None

    def created(self, pod: Obj) -> None:
        """The pod the run's create made (or found its own after a lost answer): the only one it may remove."""
        self.last, self.uid = pod, uid_of(pod)

    def ours(self, pod: Obj | None) -> bool:
        """Whether `pod` (a version under the run's pod name) is the one the run created: same uid, when known."""
        return not self.uid or not uid_of(pod) or uid_of(pod) == self.uid

    def see(self, pod: Obj) -> Obj:
        """Keep `pod` (a version from the cache or a read) as the last seen, and whether it ended on its own."""
        self.last = pod
        if not live(pod) and not terminating(pod):
            self._ended = True
        return pod

    def deleted(self, pod: Obj | None) -> bool:
        """Whether someone else deleted the run's pod (`pod`: its current version, None when gone) before
        it ended on its own: gone, or a deletionTimestamp this run did not cause, whatever phase it shows."""
        if self._ended or self.name in self.told_to_go:
            return False
        return pod is None or terminating(pod)

    def start_state(self) -> str | None:
        """START's wait: "started", "pull" (an image pull failure), "gone" (seen, then gone), "deleted"
        (someone else set its deletionTimestamp), or None."""
        pod = self.current()
        if pod is None:
            return "gone" if self._seen else None  # not seen yet: the watch may simply be behind
        self._seen = True
        self.see(pod)
        if self.deleted(pod):
            return "deleted"
        if start_failure(pod):
            return "pull"
        return None if pending(pod) else "started"

    def exit_state(self) -> str | None:
        """EXIT's wait: "exited" (finished on its own, or gone after that), "deleted" (someone else deleted
        it first: gone, or Terminating whatever its phase), or None."""
        pod = self.current()
        if pod is not None:
            self.see(pod)
        if self.deleted(pod):
            return "deleted"
        return "exited" if pod is None or not live(pod) else None

    def evictable(self) -> list[tuple[str, str]]:
        """(name, uid) of the pod this run created, while live and not yet told to go; nothing before it
        was created. Only that pod, with its uid as the precondition: a pod under a predicted name that
        the run did not create is never touched. A create whose answer was lost leaves no uid: then the
        pod under the run's name that carries its uuid label, as the cache has it (a checker pod: the
        reapers' rule)."""
        pod = self.current()
        uid = self.uid or uid_of(pod)
        pod = pod or self.last
        if not uid or (pod is not None and (not live(pod) or terminating(pod))):
            return []
        return [(self.name, uid)]


def read_log_tail(api: Api, namespace: str, name: str, pod: Obj | None, timeout: float) -> str:
    """The end of the checker's log (its first container when it has several), through the API
    server; a log that cannot be read is said so (history.log_unavailable), never raised."""
    if pod is not None and not container_started(pod):
        return log_unavailable("no container of the checker pod has started")  # the API server says 400
    containers = ((pod or {}).get("spec") or {}).get("containers") or []
    container = str(containers[0].get("name") or "") if len(containers) > 1 else None
    try:
        return api.pod_log(namespace, name, container or None, tail_lines=LOG_LINES, limit_bytes=LOG_READ_BYTES,
                           timeout=timeout)
    except ApiError as e:
        return log_unavailable(str(e))


def container_started(pod: Obj) -> bool:
    """Whether a container of the pod has run (running or terminated, now or last time): only then has
    it a log. A pod still Pending, waiting on its image or its node, has none."""
    status = pod.get("status") or {}
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        if not isinstance(cs, dict):
            continue
        for state in (cs.get("state") or {}, cs.get("lastState") or {}):
            if isinstance(state, dict) and ("running" in state or "terminated" in state):
                return True
    return status.get("phase") not in (None, "Pending")
