"""What a run reads off its checker pod: the phase predicates, v2's failure reasons, the log tail.

Pure functions on the pod as the cache keeps it (checkpod.slim_pod) or a read returns it; RunPod,
which of the cached pods is this run's, what its phases wait for, and whether someone else deleted it
(a deletionTimestamp the run did not cause: kubectl delete, an eviction, a drain, a node shutdown) or
the cluster disrupted it (disruption: the DisruptionTarget condition, a kubelet's eviction);
why_ended, what the pod's status says about a checker that ended without reporting; plus one bounded
read of the checker's log for a failed run's history entry. Nothing here fails or skips a run, nor
decides whether the cache is to be believed: that is guard.py's. The state machine that uses them is
runner.py.

Sidecars. A mesh injects a proxy container that never exits, so a checker pod may never finish on its
own. The checker is over when every container that is not a sidecar has terminated (checkers_done);
the sidecars (sidecars_of) are the native ones (init containers with restartPolicy Always), the known
mesh proxies, those the pod's annotation names and those the config names. A sidecar's exit status
never decides anything (why_ended skips them), and its log is never the one read.
"""
from __future__ import annotations

from kuberhealthy.base.errors import ApiError
from kuberhealthy.kube import Api, Cache, Obj
from kuberhealthy.records.checkpod import DISRUPTION_CONDITION, MESSAGE_CHARS, RUN_ID_LABEL, SIDECARS_ANNOTATION
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
MESH_SIDECARS = frozenset(("istio-proxy", "linkerd-proxy", "cilium-envoy"))  # the meshes' injected proxies
# A pod's own reasons for a kubelet's eviction or a node shutdown, for kubelets that set no DisruptionTarget.
DISRUPTED_POD_REASONS = ("Evicted", "Preempting", "Terminated", "Shutdown", "NodeShutdown")


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


def why_ended(pod: Obj | None, sidecars: frozenset[str] = MESH_SIDECARS) -> str:
    """Why a checker pod ended without reporting, from its status (the run error after v2's reason).

    The pod's own reason first (a node-pressure eviction, a node shutdown: `checker pod <name>:
    Evicted: <message>`), then the first init container, then the first container, that did not exit
    0: `checker pod <name> container <c>: OOMKilled (exit 137)`, `checker pod <name> init container <c>
    exited 1`. A checker that exited 0 without reporting says so. `sidecars` are not the checker: their
    exits are never the reason. Works on the slim pod and on a read.
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
            if not isinstance(done, dict) or (cs or {}).get("name") in sidecars:
                continue
            code, reason, who = done.get("exitCode"), done.get("reason"), f"checker pod {name} {kind} {cs.get('name')}"
            if code == 0 and reason in PLAIN_EXITS:
                exited.append(f"{who} exited 0 without reporting")
                continue
            return f"{who} exited {code}" if reason in PLAIN_EXITS else f"{who}: {reason} (exit {code})"
    if exited:
        return exited[-1]  # every container exited 0: the (last) checker container's
    return f"checker pod {name} ended ({status.get('phase') or 'no phase'}) without a container exit status"


def sidecars_of(pod: Obj | None, configured: tuple[str, ...] | frozenset[str] = ()) -> frozenset[str]:
    """The names of `pod`'s sidecars (a pod body the run builds, the pod as the cache or a read has it):
    native ones (init containers with restartPolicy Always), the mesh proxies, those the pod's
    annotation names (comma-separated) and the `configured` ones (config sidecarContainers)."""
    meta, spec = (pod or {}).get("metadata") or {}, (pod or {}).get("spec") or {}
    named = str((meta.get("annotations") or {}).get(SIDECARS_ANNOTATION) or "")
    native = [str(c.get("name")) for c in spec.get("initContainers") or []
              if isinstance(c, dict) and c.get("restartPolicy") == "Always"]
    return MESH_SIDECARS.union(configured, [n.strip() for n in named.split(",") if n.strip()] if named else (), native)


def checkers_done(pod: Obj, sidecars: frozenset[str]) -> bool:
    """Every container of the pod that is not a sidecar has terminated (and there is one): the checker
    is over, whatever its sidecars still do."""
    checkers = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []
                if isinstance(c, dict) and c.get("name") not in sidecars]
    done = {cs.get("name") for cs in (pod.get("status") or {}).get("containerStatuses") or []
            if isinstance(cs, dict) and "terminated" in (cs.get("state") or {})}
    return bool(checkers) and done.issuperset(checkers)


def over(pod: Obj, sidecars: frozenset[str]) -> bool:
    """The checker pod has exited, as a run sees it: finished, or only sidecars still run."""
    return not live(pod) or checkers_done(pod, sidecars)


def sidecars_running(pod: Obj, sidecars: frozenset[str]) -> list[str]:
    """The regular containers among `sidecars` still running in a live pod whose checker is over: the
    pod does not end by itself then (a native sidecar is stopped by the kubelet, so it is not listed)."""
    if not live(pod) or terminating(pod) or not checkers_done(pod, sidecars):
        return []
    return [str(cs.get("name")) for cs in (pod.get("status") or {}).get("containerStatuses") or []
            if isinstance(cs, dict) and cs.get("name") in sidecars and "terminated" not in (cs.get("state") or {})]


def disruption(pod: Obj | None) -> str:
    """Why the cluster disrupted the pod, "" when it did not: a true DisruptionTarget condition
    (Kubernetes 1.26+: an eviction, a preemption, a taint, a node's pressure or shutdown), as
    `<reason>: <message>`; else, for kubelets that set none, a failed pod's own reason of an eviction or
    a node shutdown (`Evicted: The node was low on resource: memory.`)."""
    status = (pod or {}).get("status") or {}
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == DISRUPTION_CONDITION and c.get("status") == "True":
            return _said(c.get("reason") or DISRUPTION_CONDITION, c.get("message"))
    if status.get("phase") == "Failed" and status.get("reason") in DISRUPTED_POD_REASONS:
        return _said(status["reason"], status.get("message"))
    return ""


def _said(reason: object, message: object) -> str:
    text = str(message or "")[:MESSAGE_CHARS]
    return f"{reason}: {text}" if text else str(reason)


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
        self.sidecars = MESH_SIDECARS  # its sidecars, as the body the run built says (the run sets them)
        self.disruption = ""  # why the cluster disrupted it, once seen (podstate.disruption)
        self._seen = False  # the cache has shown it to START
        self._ended = False  # seen over with no deletionTimestamp: it ended on its own

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

    def sidecars_in(self, pod: Obj | None) -> frozenset[str]:
        """Its sidecars: the built body's, and what the pod itself says (a webhook may add them)."""
        return self.sidecars | sidecars_of(pod) if pod is not None else self.sidecars

    def over(self, pod: Obj) -> bool:
        """The checker is over: the pod finished, or only sidecars still run."""
        return over(pod, self.sidecars_in(pod))

    def see(self, pod: Obj) -> Obj:
        """Keep `pod` (a version from the cache or a read) as the last seen, whether it ended on its own,
        and whether the cluster disrupted it (not the run's own eviction)."""
        self.last = pod
        if not self.disruption and self.name not in self.told_to_go:
            self.disruption = disruption(pod)
        if self.over(pod) and not terminating(pod) and not self.disruption:
            self._ended = True
        return pod

    def deleted(self, pod: Obj | None) -> bool:
        """Whether someone else deleted the run's pod (`pod`: its current version, None when gone) before
        it ended on its own: gone, or a deletionTimestamp this run did not cause, whatever phase it shows;
        or the cluster disrupted it (an eviction that sets no deletionTimestamp included)."""
        if self.name in self.told_to_go:
            return False
        if self.disruption:
            return True
        if self._ended:
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
        return "exited" if pod is None or self.over(pod) else None

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

    def only_sidecars(self) -> list[str]:
        """The regular-container sidecars that keep the run's pod alive now that its checker is over
        (podstate.sidecars_running): then the run ends the pod itself."""
        pod = self.current()
        return sidecars_running(pod, self.sidecars_in(pod)) if pod is not None else []


def read_log_tail(api: Api, namespace: str, name: str, pod: Obj | None, timeout: float,
                  sidecars: frozenset[str] = MESH_SIDECARS) -> str:
    """The end of the checker's log (its first container that is not a sidecar when it has several),
    through the API server; a log that cannot be read is said so (history.log_unavailable), never raised."""
    if pod is not None and not container_started(pod):
        return log_unavailable("no container of the checker pod has started")  # the API server says 400
    containers = ((pod or {}).get("spec") or {}).get("containers") or []
    checkers = [c for c in containers if c.get("name") not in sidecars] or containers
    container = str(checkers[0].get("name") or "") if len(containers) > 1 else None
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
