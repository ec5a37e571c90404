"""One pod's life on the simulated kubelet: bind, Pending, Running, the behaviour, the exit.

Each pod gets its own thread (named sim-pod-<ns>/<name>) that waits only on its cancel event, so a
deletion noticed by the kubelet's watch stops it at once: a kh-sim/exec subprocess is killed with its
whole process group, and a report under way is cut (its socket shut down). After cancellation the
driver writes nothing more to the API server.

API writes (binding, status) are retried like a real kubelet retries them: transport errors, 429 and
5xx with jittered, capped backoff until the pod is cancelled (RawApi.call_until), so an API server that
restarts, freezes or times out leaves no pod stuck. A 404 (the pod is gone) or another 4xx is final.

Each container has a state of its own (podmodel.py): when the checker exits, a `kh-sim/sidecar`
container runs on (the pod stays Running until it is deleted), and native sidecars are stopped by the
kubelet `sidecar_stop_after` later (timings.py), as Kubernetes 1.28+ does.

The kubelet's Timings (timings.py) add a real kubelet's delays: the pod IP on a later sync than the
first Pending status, Running about a second after creation. The status of a container stopped by
its pod's deletion (stopped_status) is written by the kubelet's Terminator, not by this thread; a
disruption (SIM_DISRUPT) by its Disruptor (disrupt.py), which this thread calls once Running. A
StartGate (startgate.py), when the kubelet has one, holds the pod ContainerCreating until its turn:
pods start at most so many per second.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from testbed.cluster.builders import MERGE_PATCH
from testbed.sim import execproc, podstatus
from testbed.sim.behaviours import (
    FROM_NODE,
    FROM_POD,
    PULL_BACKOFF_AFTER,
    TOKEN_FILE,
    TOKEN_NONE,
    Behaviour,
    Settings,
    checker_container,
    container_env,
    exec_argv,
    exec_env,
)
from testbed.sim.logs import Transcript
from testbed.sim.podmodel import PENDING_WITH_INIT, PodModel
from testbed.sim.podstatus import TERMINAL
from testbed.sim.rawapi import RawApi, SimApiError
from testbed.sim.records import PodRecord
from testbed.sim.report import InFlight, Report, run_deadline, send_report
from testbed.sim.startgate import StartGate
from testbed.sim.timings import SIDECAR_STOP_AFTER, Timings
from testbed.sim.tokens import TokenMinter, map_paths, projections, report_bearer

logger = logging.getLogger(__name__)

REPORTING_BEHAVIOURS = (Behaviour.OK, Behaviour.SLOW, Behaviour.FAIL, Behaviour.HANG)
EXIT_OOM = 137  # 128 + SIGKILL, as the kernel's OOM killer leaves a container (reason OOMKilled)


@dataclass(frozen=True)
class Placement:
    """Where a pod runs: its node and that node's address, its own address, and whether the kubelet
    binds it (False: it was created already bound to the node)."""

    node: str
    host_ip: str
    pod_ip: str
    bind: bool


@dataclass(frozen=True)
class KubeletParts:
    """What every pod's driver borrows from its kubelet: the token minter (None: projected tokens are not
    minted), the timings (None: everything at once, timings.FAST), the start gate (None: no queue
    before Running) and the disruptor's schedule(driver, mode, after) (None: SIM_DISRUPT is ignored)."""

    minter: TokenMinter | None = None
    timings: Timings | None = None
    gate: StartGate | None = None
    disrupt: Callable[[PodDriver, str, float], None] | None = None


class PodDriver:
    """Drives one pod; start() once, cancel() any time (idempotent), join() after cancel()."""

    def __init__(self, api: RawApi, pod: dict[str, Any], record: PodRecord, *, behaviour: Behaviour,
                 placement: Placement, parts: KubeletParts = KubeletParts()) -> None:
        self._api = api
        self._timings = parts.timings
        self._minter = parts.minter
        self._gate = parts.gate
        self._disrupt = parts.disrupt
        self._pod = pod
        self.record = record
        self.behaviour = behaviour
        self.uid = record.uid
        self._node = placement.node
        self._host_ip = placement.host_ip
        self.pod_ip = placement.pod_ip
        self._bind = placement.bind
        self._cancel = threading.Event()
        self._turn = threading.Event()  # the gate's go-ahead; cancel() sets it too, ending the wait
        self._lock = threading.Lock()
        self._finishing = False  # the status write that finishes the pod has begun (_finish)
        self._proc: subprocess.Popen[bytes] | None = None
        self._inflight = InFlight()  # the report attempt under way, cut on cancel
        self._out: Transcript | None = None  # what the checker prints, once its container started
        self.model = PodModel(pod, placement.host_ip)  # the containers' states; every status is built from it
        self._thread = threading.Thread(target=self._run, name=f"sim-pod-{record.key}", daemon=True)
        meta = pod.get("metadata") or {}
        self._path = f"/api/v1/namespaces/{meta.get('namespace')}/pods/{meta.get('name')}"

    # --- control, called from the kubelet's threads -------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        self._cancel.set()
        self._turn.set()
        self._inflight.cut()
        if self._minter is not None:
            self._minter.forget(self._pod)
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def join(self, timeout: float) -> bool:
        if self._thread.ident is not None:
            self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def interrupt(self) -> bool:
        """Cancel the pod for a disruption, unless the write that finishes it has begun (then False)."""
        with self._lock:
            if self._finishing:
                return False
            self._cancel.set()
        self.cancel()
        return True

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds; True as soon as the pod is cancelled (deleted, the kubelet stops)."""
        return self._cancel.wait(timeout)

    @property
    def pod(self) -> dict[str, Any]:
        """The pod as the kubelet first saw it."""
        return self._pod

    def stopped_status(self, exit_code: int) -> dict[str, Any] | None:
        """The status of its running containers stopped by the pod's deletion (`exit_code`; a sidecar's own
        SIM_SIDECAR_EXIT), for a pod with a container running; None for one that never ran or had
        finished already. Call after cancel() and join()."""
        if not self.model.started or not self.model.running:
            return None
        return self.model.stop_running(exit_code)

    def note_phase(self) -> None:
        """After a status write: the record follows the model's phase (and, once finished, the exit)."""
        rec = self.record
        rec.phase = self.model.phase
        if self.model.checker_exit is not None:
            rec.exit_code = self.model.checker_exit
        if rec.phase in TERMINAL and rec.exited is None:
            rec.exited = time.monotonic()
            logger.debug("pod %s finished: %s, checker exit %s", rec.key, rec.phase, rec.exit_code)

    def write_status_until(self, stop: threading.Event, patch: dict[str, Any], what: str) -> bool:
        """Merge-patch the status after the pod's own thread is over (cancelled): retried until answered or
        `stop` (the kubelet's) is set. A 404 (the pod is gone) is silent; another failure is recorded."""
        try:
            return self._api.call_until(stop, "PATCH", self._path + "/status", patch, content_type=MERGE_PATCH,
                                        on_retry=self._count_retry) is not None
        except SimApiError as e:
            if e.status != 404:
                self.record.errors.append(f"status write on {what}: {e}")
            return False

    # --- the pod's thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._lifecycle()
        except Exception:  # top of the pod thread: log, never kill the test process
            logger.exception("simulated pod %s failed", self.record.key)
            self.record.errors.append("driver crashed; see log")

    def _count_retry(self, error: SimApiError) -> None:
        self.record.api_retries += 1

    def _write_status(self, patch: dict[str, Any]) -> bool:
        """Merge-patch pods/<name>/status, retrying transient failures until cancelled; True once written."""
        if self._cancel.is_set():
            return False
        try:
            written = self._api.call_until(self._cancel, "PATCH", self._path + "/status", patch,
                                           content_type=MERGE_PATCH, on_retry=self._count_retry)
        except SimApiError as e:
            if not self._cancel.is_set() and e.status != 404:
                logger.warning("status write for %s failed: %s", self.record.key, e)
                self.record.errors.append(f"status write: {e}")
            return False
        return written is not None and not self._cancel.is_set()

    def _do_bind(self) -> bool:
        meta = self._pod.get("metadata") or {}
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": meta.get("name"), "uid": self.uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": self._node}}
        retries = self.record.api_retries
        try:
            bound = self._api.call_until(self._cancel, "POST", self._path + "/binding", body,
                                         on_retry=self._count_retry)
        except SimApiError as e:
            if e.status == 409 and self.record.api_retries > retries and self._bound_to_us():
                return True  # an earlier attempt that timed out did bind it
            if e.status not in (404, 409):
                logger.warning("binding %s to %s failed: %s", self.record.key, self._node, e)
                self.record.errors.append(f"binding: {e}")
            else:
                logger.debug("binding %s skipped: %s", self.record.key, e)
            return False
        return bound is not None and not self._cancel.is_set()

    def _bound_to_us(self) -> bool:
        """After a retried binding answered 409: is the pod (this uid) on our node anyway?"""
        try:
            pod = self._api.call_until(self._cancel, "GET", self._path, on_retry=self._count_retry)
        except SimApiError:
            return False
        if pod is None:
            return False
        return (str((pod.get("metadata") or {}).get("uid", "")) == self.uid
                and (pod.get("spec") or {}).get("nodeName") == self._node)

    def _lifecycle(self) -> None:
        rec = self.record
        if self._cancel.is_set() or (self._bind and not self._do_bind()):
            return
        rec.bound = time.monotonic()
        rec.node = self._node
        logger.debug("pod %s bound to %s with IP %s", rec.key, self._node, self.pod_ip)
        ip, model = self.pod_ip, self.model
        env = container_env(self._pod, ip, self._host_ip, self._node)
        settings = Settings.from_env(env, self.behaviour)
        if self.behaviour is Behaviour.PULL_ERROR:
            self._image_pull_failure()
            return
        ip_after = self._timings.ip_after if self._timings else 0.0
        running_after = self._timings.running_after if self._timings else 0.0
        first_ip = ip if ip_after <= 0 else None  # a real kubelet's first Pending status has no pod IP yet
        if not self._write_status(model.pending(first_ip, "ContainerCreating")):
            return
        rec.waiting_reason = PENDING_WITH_INIT if model.layout.init else "ContainerCreating"
        env = self._mount_tokens(env)
        if first_ip is None:
            if self._cancel.wait(ip_after) or not self._write_status(model.pending(ip, "ContainerCreating")):
                return
        if self._gate is not None and not self._gate.admit(self._turn, self._cancel):
            return  # deleted while it waited for its turn to start
        if self._cancel.wait(settings.pending_delay + max(0.0, running_after - ip_after)):
            return
        started_at = podstatus.now_rfc3339()
        self._out = Transcript.begin(rec.log, self.behaviour.value, rec.key, self._node, settings.log,
                                     settings.log_lines, default=self.behaviour is not Behaviour.EXEC)
        if not self._write_status(model.run(started_at)):
            return
        rec.running, rec.phase, rec.waiting_reason = time.monotonic(), "Running", ""
        logger.debug("pod %s running as %s", rec.key, self.behaviour.value)
        if settings.disrupt and self._disrupt is not None:
            self._disrupt(self, settings.disrupt, settings.disrupt_after)
        exit_code = self._behave(env, settings)
        if exit_code is not None and not self._cancel.is_set():
            self._checkers_exited(exit_code)

    def _checkers_exited(self, exit_code: int) -> None:
        """The checker exited: its containers terminated. Without sidecars the pod finishes; a regular
        sidecar keeps it Running until it is deleted; native sidecars alone are stopped by the kubelet."""
        rec, model = self.record, self.model
        reason = "OOMKilled" if self.behaviour is Behaviour.OOM else None
        finishes = not model.layout.sidecars and not model.layout.natives
        if (finishes and not self._finish()) or not self._write_status(model.checkers_exit(exit_code, reason)):
            return
        rec.checkers_exited = time.monotonic()
        self.note_phase()
        if finishes or model.layout.sidecars:
            return  # finished, or a sidecar container runs on until the pod is deleted
        stop_after = self._timings.sidecar_stop_after if self._timings else SIDECAR_STOP_AFTER
        if not self._cancel.wait(stop_after) and self._finish() and self._write_status(model.stop_natives()):
            self.note_phase()

    def _finish(self) -> bool:
        """Claim the write that finishes the pod; False when it was interrupted (cancelled) first."""
        with self._lock:
            if self._cancel.is_set():
                return False
            self._finishing = True
            return True

    def _mount_tokens(self, env: dict[str, str]) -> dict[str, str]:
        """Mint the pod's projected ServiceAccount tokens (tokens.py) and map env paths to the files."""
        if self._minter is None or not projections(self._pod):
            return env
        files, mounts, errors = self._minter.mount(self._cancel, self._pod)
        self.record.token_files = files
        self.record.errors.extend(errors)
        return map_paths(env, files, mounts)

    def _source_ip(self, settings: Settings) -> str:
        if settings.report_from == FROM_POD:
            return self.pod_ip
        return self._host_ip if settings.report_from == FROM_NODE else settings.report_from

    def _image_pull_failure(self) -> None:
        image = str(checker_container(self._pod).get("image", ""))
        started_at = podstatus.now_rfc3339()  # of the init containers and sidecars, whose images are there
        self.model.pending(self.pod_ip, "ContainerCreating")
        message = f'rpc error: code = Unknown desc = pull access denied for {image} (simulated)'
        if not self._write_status(self.model.pull_failure(started_at, "ErrImagePull", message)):
            return
        self.record.waiting_reason = "ErrImagePull"
        if self._cancel.wait(PULL_BACKOFF_AFTER):
            return
        message = f'Back-off pulling image "{image}"'
        if self._write_status(self.model.pull_failure(started_at, "ImagePullBackOff", message)):
            self.record.waiting_reason = "ImagePullBackOff"

    def _behave(self, env: dict[str, str], settings: Settings) -> int | None:
        """The container's run; its exit code, or None when it never exits (hang) or was cancelled."""
        b = self.behaviour
        if b is Behaviour.EXEC:
            return self._exec(env)
        if self._cancel.wait(settings.delay):
            return None
        if b in REPORTING_BEHAVIOURS:
            self._report(env, settings, ok=b is not Behaviour.FAIL)
            if b is Behaviour.HANG:
                self._cancel.wait()
                return None
            return None if self._cancel.wait(settings.exit_delay) else 0
        if b is Behaviour.HANG_SILENT:
            self._cancel.wait()
            return None
        if b is Behaviour.OOM:
            return EXIT_OOM
        self._say("panic: simulated crash" if b is Behaviour.CRASH else "done, without reporting")
        return 1 if b is Behaviour.CRASH else 0

    def _say(self, *lines: str) -> None:
        if self._out is not None:
            self._out.say(*lines)

    def _report(self, env: dict[str, str], settings: Settings, ok: bool) -> None:
        url = env.get("KH_REPORTING_URL", "")
        if not url:
            self.record.errors.append("no KH_REPORTING_URL in the pod env; report not sent")
            logger.warning("pod %s has no KH_REPORTING_URL; not reporting", self.record.key)
            return
        body = settings.body
        if body is None:
            body = json.dumps({"OK": ok, "Errors": [] if ok else list(settings.errors)}).encode()
        run_uuid = env.get("KH_RUN_UUID") if settings.uuid_header else None
        token = report_bearer(settings.token, env, self._minter, self._cancel, self._pod, self.record.errors)
        if token is None and settings.token not in (TOKEN_NONE, TOKEN_FILE):
            logger.warning("pod %s cannot make its SIM_TOKEN=%s token; not reporting", self.record.key,
                           settings.token)
            return
        if settings.body is None:
            self._say(*(f"error: {e}" for e in ([] if ok else settings.errors)))
        self._say(f"reporting {'OK' if ok else 'failure'} to {url}")
        result = send_report(Report(url, body, run_uuid, token), self._source_ip(settings), self._cancel,
                             deadline=run_deadline(env), inflight=self._inflight)
        self.record.report = result
        self._say(f"report {result.outcome.value if result.outcome else 'ended'}: HTTP {result.status or '-'}")
        self.record.reported = result.at
        logger.debug("pod %s reported: %s, status=%s after %d attempts %s, error=%s", self.record.key,
                     result.outcome.value if result.outcome else "?", result.status, result.attempts,
                     result.statuses, result.error)

    def _exec(self, env: dict[str, str]) -> int | None:
        code = execproc.run(exec_argv(self._pod), exec_env(env, self.pod_ip), self.record, self._hold)
        return None if self._cancel.is_set() else code

    def _hold(self, proc: subprocess.Popen[bytes]) -> None:
        """The exec process started: cancel() kills it from now on (at once when cancelled already)."""
        with self._lock:
            self._proc = proc
        if self._cancel.is_set():
            self.cancel()
