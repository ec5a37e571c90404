"""Sidecar-proof runs on the real node: a checker pod counts as exited once every container that is not a
sidecar has terminated, and the daemon then ends the pod itself, within seconds and not at the timeout.

The sidecars here are what a mesh or an agent injector adds beside the checker and what never exits on
its own: a container named `istio-proxy` (a sidecar by its name), and one named `vault-agent` that is a
sidecar only because the pod's annotation `kuberhealthy.github.io/sidecars` names it (a khcheck's
`spec.extraAnnotations`; a HealthCheck's `podSpec.metadata.annotations`). Native sidecars (an init
container with `restartPolicy: Always`) need Kubernetes 1.28; this node runs 1.20, so they are not here.

What is proved: checks with such a sidecar record OK runs, one after the other, and each run's pod has
ended before the check's next run begins (a background watch samples the states and pods of the checks,
so a pod left running until the next run evicted it cannot pass unseen); a checker that crashes beside
a sidecar fails with its own container's exit, before the timeout, with its own log tail; a checker that
reported and keeps running beside a sidecar still times out waiting for its pod to exit. Run durations
and how long each pod outlived its recorded run are printed (`[e2e] sidecars: ...`), never asserted
beyond "before the timeout".
"""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from testbed.node.e2e import E2E, HC_LABEL, poll
from testbed.terminal import say

SHELL = "localhost/kh-e2e/shell-check:e2e"
SIDECARS_ANNOTATION = "kuberhealthy.github.io/sidecars"
CHECK_LABEL = "kuberhealthy-check-name"
RUN_LABEL = "kuberhealthy-run-id"
FINISHED_PHASES = ("Succeeded", "Failed")

# A sidecar that never exits on its own and stops on SIGTERM, as a proxy does when its pod is deleted:
# with 143 (128 + SIGTERM), so a sidecar's non-zero exit is on the pod and the run must not be judged by it.
SIDECAR_LINE = "e2e sidecar: running"
SIDECAR_SCRIPT = f"trap 'echo e2e sidecar: stopping; exit 143' TERM; echo {SIDECAR_LINE}; sleep 100000 & wait"

CRASH_LINE = "e2e checker beside a sidecar: about to exit 3"
# The checker does a little work first (a real one would), says why it gives up, and exits 3 unreported.
CRASH_SCRIPT = f'sleep 2; echo "{CRASH_LINE}"; exit 3'
# The checker reports OK and then never exits (PID 1 sleep: the eviction at the timeout ends it).
LINGER_SCRIPT = "python3 -m kuberhealthy.checkclient ok && echo 'e2e checker: reported, now sleeping' " \
                "&& exec sleep 1000000"


@dataclass(frozen=True)
class Subject:
    """One check of this module: its kind (`khcheck` or `healthcheck`), name and timeout in seconds."""

    kind: str
    name: str
    timeout: float

    def state(self, kh: E2E) -> dict[str, Any] | None:
        """The khstate's spec, or the HealthCheck's status (None: not there yet)."""
        return kh.khstate(self.name) if self.kind == "khcheck" else kh.hc_status(self.name)

    def pods(self, kh: E2E) -> list[dict[str, Any]]:
        return kh.checker_pods(self.name) if self.kind == "khcheck" else kh.hc_pods(self.name)


ISTIO = Subject("khcheck", "sidecar-istio-proxy", 60.0)
ANNOTATED = Subject("khcheck", "sidecar-annotated", 60.0)
HC_ANNOTATED = Subject("healthcheck", "hc-sidecar-annotated", 60.0)
CRASHES = Subject("khcheck", "sidecar-checker-crashes", 60.0)
LINGERS = Subject("khcheck", "sidecar-checker-lingers", 25.0)
SUBJECTS = (ISTIO, ANNOTATED, HC_ANNOTATED, CRASHES, LINGERS)


def execution_error(kh: E2E, check: str, reason: str) -> str:
    return f"Check execution error: {kh.checks_namespace}/{check}: {reason}"


def go_seconds(duration: str) -> float:
    """A Go duration string (`4.512s`, `1m2.003s`, `850ms`) in seconds."""
    parts = re.findall(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, f"not a Go duration: {duration!r}"
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * units[u] for n, u in parts)


def sidecar(name: str) -> dict[str, Any]:
    return {"name": name, "image": SHELL, "imagePullPolicy": "Never", "command": ["/bin/sh", "-c", SIDECAR_SCRIPT],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}}


@dataclass(frozen=True)
class Ended:
    """When the watch first saw a recorded run's pod gone or finished, and the run in flight then."""

    at: float
    in_flight: str  # the uuid of the check's run in flight at that moment ("" between runs, HealthChecks)


class StateAndPodWatch(threading.Thread):
    """Samples, about twice a second until stopped, the states of this module's checks and then their
    pods (in that order, so a pod seen live was live after the state was read). For each recorded run
    (a history entry): when it was first seen recorded, and when its pod was first seen ended (gone, or
    Succeeded/Failed) together with the check's run in flight at that sample."""

    def __init__(self, kh: E2E, subjects: tuple[Subject, ...]) -> None:
        super().__init__(name="e2e-sidecar-watch", daemon=True)
        self.kh, self.subjects = kh, subjects
        self.stop = threading.Event()
        self.recorded_at: dict[str, float] = {}  # run uuid -> first seen recorded
        self.ended: dict[str, Ended] = {}  # run uuid -> its pod first seen ended
        self.rounds = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self._sample()
            except Exception as e:  # noqa: BLE001 - a failed round is sampled again; the tests show the errors
                self.errors.append(repr(e))
            self.stop.wait(0.5)

    def _states(self) -> dict[tuple[str, str], dict[str, Any]]:
        ns = self.kh.checks_namespace
        out = {("khcheck", o["metadata"]["name"]): dict(o.get("spec") or {}) for o in self.kh.items("khstates", ns)}
        out.update({("healthcheck", o["metadata"]["name"]): dict(o.get("status") or {})
                    for o in self.kh.items("healthchecks", ns)})
        return out

    def _live_pods(self) -> dict[tuple[str, str], set[str]]:
        live: dict[tuple[str, str], set[str]] = {}
        for pod in self.kh.items("pods", self.kh.checks_namespace, "app=kuberhealthy-check"):
            labels = pod["metadata"].get("labels") or {}
            key = ("healthcheck", labels[HC_LABEL]) if HC_LABEL in labels else ("khcheck", labels.get(CHECK_LABEL, ""))
            if (pod.get("status") or {}).get("phase") not in FINISHED_PHASES:
                live.setdefault(key, set()).add(pod["metadata"]["name"])
        return live

    def _sample(self) -> None:
        states = self._states()
        live = self._live_pods()
        now = time.monotonic()
        with self._lock:
            for subject in self.subjects:
                state = states.get((subject.kind, subject.name))
                if state is None:
                    continue
                in_flight = str(state.get("uuid" if subject.kind == "khcheck" else "currentUUID") or "")
                for entry in state.get("history") or []:
                    run_uuid = str(entry.get("uuid") or "")
                    self.recorded_at.setdefault(run_uuid, now)
                    if run_uuid not in self.ended and entry.get("pod") not in live.get((subject.kind, subject.name),
                                                                                        set()):
                        self.ended[run_uuid] = Ended(now, in_flight)
            self.rounds += 1

    def ended_of(self, run_uuid: str) -> Ended | None:
        with self._lock:
            return self.ended.get(run_uuid)

    def outlived(self, run_uuid: str) -> float | None:
        """Seconds from the run's first sighting as recorded to its pod's first sighting as ended."""
        with self._lock:
            ended, recorded = self.ended.get(run_uuid), self.recorded_at.get(run_uuid)
        return None if ended is None or recorded is None else round(ended.at - recorded, 1)


def _checks(kh: E2E) -> list[dict[str, Any]]:
    istio = kh.pod_spec(SHELL, {"MODE": "ok"})
    istio["containers"].append(sidecar("istio-proxy"))

    annotated = kh.pod_spec(SHELL, {"MODE": "ok"})
    annotated["containers"].append(sidecar("vault-agent"))
    annotated_check = kh.khcheck(ANNOTATED.name, annotated, run_interval="30s", timeout="1m")
    # a khcheck puts annotations on its pods with extraAnnotations; a list, of which one is in this pod
    annotated_check["spec"]["extraAnnotations"] = {SIDECARS_ANNOTATION: "log-shipper,vault-agent"}

    hc_pod = kh.pod_spec(SHELL, {"MODE": "ok"})
    hc_pod["containers"].append(sidecar("vault-agent"))
    hc = kh.healthcheck(HC_ANNOTATED.name, hc_pod, run_interval="30s", timeout="1m")
    hc["spec"]["podSpec"]["metadata"] = {"annotations": {SIDECARS_ANNOTATION: "vault-agent"}}

    crashes = kh.pod_spec(SHELL, container={"command": ["/bin/sh", "-c", CRASH_SCRIPT]})
    # first, as Istio injects it when the application waits for the proxy: the checker is not the first
    # container, its exit and log are still the ones that count
    crashes["containers"].insert(0, sidecar("istio-proxy"))

    lingers = kh.pod_spec(SHELL, container={"command": ["/bin/sh", "-c", LINGER_SCRIPT]})
    lingers["containers"].append(sidecar("istio-proxy"))

    return [
        kh.khcheck(ISTIO.name, istio, run_interval="30s", timeout="1m"),
        annotated_check,
        hc,
        kh.khcheck(CRASHES.name, crashes, run_interval="10m", timeout="1m"),
        kh.khcheck(LINGERS.name, lingers, run_interval="10m", timeout="25s"),
    ]


@pytest.fixture(name="watch", scope="module")
def watch_fixture(kh: E2E) -> Iterator[StateAndPodWatch]:
    """Every check of this module created at once, watched from before their first runs."""
    watch = StateAndPodWatch(kh, SUBJECTS)
    watch.start()
    try:
        poll(lambda: watch.rounds > 0, 60, f"the watch's first sample; errors {watch.errors[-3:]}")
        kh.apply(*_checks(kh))
        yield watch
    finally:
        watch.stop.set()
        watch.join(30)
        for subject in SUBJECTS:
            kh.delete(subject.kind, subject.name, kh.checks_namespace)
        for selector in (f"{CHECK_LABEL} in ({','.join(s.name for s in SUBJECTS if s.kind == 'khcheck')})",
                         f"{HC_LABEL}={HC_ANNOTATED.name}"):
            kh.kubectl("delete", "pods", "-n", kh.checks_namespace, "-l", selector, "--ignore-not-found",
                       "--wait=false", check=False)


def new_run(kh: E2E, subject: Subject, seen: frozenset[str] = frozenset(), timeout: float = 180.0) -> dict[str, Any]:
    """The newest history entry of the check whose uuid is not in `seen`."""
    def found() -> dict[str, Any] | None:
        runs = list((subject.state(kh) or {}).get("history") or [])
        return runs[0] if runs and runs[0]["uuid"] not in seen else None
    entry: dict[str, Any] = poll(found, timeout, f"a new recorded run of {subject.kind} {subject.name}")
    return entry


def pod_ended(watch: StateAndPodWatch, subject: Subject, run: dict[str, Any]) -> Ended:
    """The run's pod seen gone or finished; it must have been so before the check's next run began
    (that run's first step evicts old pods: a pod left running until then would pass unseen otherwise)."""
    ended: Ended = poll(lambda: watch.ended_of(run["uuid"]), 120,
                        f"pod {run['pod']} of {subject.name} to end; watch errors {watch.errors[-3:]}")
    assert ended.in_flight in ("", run["uuid"]), \
        f"pod {run['pod']} of run {run['uuid']} was still live when the next run {ended.in_flight} had begun"
    return ended


def two_ok_runs_in_a_row(kh: E2E, watch: StateAndPodWatch, subject: Subject,
                         request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    first = new_run(kh, subject)
    pod_ended(watch, subject, first)
    second = new_run(kh, subject, seen=frozenset({first["uuid"]}), timeout=150)
    pod_ended(watch, subject, second)
    runs = [first, second]
    say(request.config, "e2e", f"sidecars: {subject.kind} {subject.name}: run durations "
        f"{[r['duration'] for r in runs]} (timeout {subject.timeout:.0f} s); pod ended seconds after the run "
        f"was seen recorded {[watch.outlived(r['uuid']) for r in runs]}")

    for run in runs:
        assert run["OK"] is True and run["outcome"] == "reported" and run.get("errors", []) == [], run
        assert go_seconds(run["duration"]) < subject.timeout, run  # the pod ended by the daemon, not at the timeout
    history = list((subject.state(kh) or {}).get("history") or [])
    uuids = [e["uuid"] for e in history]
    assert second["uuid"] in uuids, uuids
    assert uuids[uuids.index(second["uuid"]) + 1] == first["uuid"], uuids  # one after the other, nothing between
    return runs


@pytest.mark.parametrize("subject", [ISTIO, ANNOTATED], ids=["istio-proxy", "named-in-the-annotation"])
def test_a_khcheck_beside_a_sidecar_that_never_exits_records_ok_runs_and_its_pods_do_not_linger(
        kh: E2E, watch: StateAndPodWatch, request: pytest.FixtureRequest, subject: Subject) -> None:
    """The sidecar is `istio-proxy` (a sidecar by its name), or `vault-agent`, a sidecar only because the
    khcheck's `extraAnnotations` name it in `kuberhealthy.github.io/sidecars`."""
    two_ok_runs_in_a_row(kh, watch, subject, request)

    state = kh.khstate(subject.name)
    assert state is not None and state["OK"] is True and state["Errors"] == [], state
    assert state["consecutiveFailures"] == 0 and state["successCount"] >= 2, state


def test_a_healthcheck_whose_pod_metadata_names_its_sidecar_records_ok_runs_and_its_pods_do_not_linger(
        kh: E2E, watch: StateAndPodWatch, request: pytest.FixtureRequest) -> None:
    two_ok_runs_in_a_row(kh, watch, HC_ANNOTATED, request)

    status = kh.hc_status(HC_ANNOTATED.name)
    assert status is not None and status["ok"] is True and status.get("errors", []) == [], status
    assert status.get("consecutiveFailures", 0) == 0 and status["successCount"] >= 2, status


def crashed_run(kh: E2E, watch: StateAndPodWatch) -> dict[str, Any]:
    run = new_run(kh, CRASHES)
    pod_ended(watch, CRASHES, run)  # ended by the daemon: the next run is 10 minutes away
    return run


def test_a_checker_that_crashes_beside_a_sidecar_fails_with_its_own_exit_before_the_timeout(
        kh: E2E, watch: StateAndPodWatch, request: pytest.FixtureRequest) -> None:
    run = crashed_run(kh, watch)
    state = kh.khstate(CRASHES.name)
    say(request.config, "e2e", f"sidecars: {CRASHES.name}: run duration {run['duration']} "
        f"(timeout {CRASHES.timeout:.0f} s); pod ended {watch.outlived(run['uuid'])} s after the run was seen recorded")

    expected = [execution_error(kh, CRASHES.name, "timed out waiting for checker pod to report in"),
                f"checker pod {run['pod']} container main exited 3"]  # the checker's, never the sidecar's
    assert state is not None and state["OK"] is False and state["Errors"] == expected, state
    assert run["OK"] is False and run["errors"] == expected, run
    assert run["outcome"] == "failed: timed out waiting for checker pod to report in", run
    assert go_seconds(run["duration"]) < CRASHES.timeout, run  # as soon as the checker ended, not at the timeout


def test_the_log_tail_of_a_checker_that_crashed_beside_a_sidecar_is_the_checkers_own(
        kh: E2E, watch: StateAndPodWatch) -> None:
    run = crashed_run(kh, watch)

    logs = run.get("logs", "")
    assert CRASH_LINE in logs, run  # read before the pod was ended
    assert SIDECAR_LINE not in logs, run  # the checker container's log, though the sidecar is the first container
    api = kh.http(f"/api/checks/{kh.checks_namespace}/{CRASHES.name}").json()
    (entry,) = api["checks"]
    assert CRASH_LINE in entry["history"][0]["logs"]  # exposeLogs: true in these tests


def test_a_checker_that_reported_and_keeps_running_beside_a_sidecar_times_out_waiting_for_its_pod_to_exit(
        kh: E2E, watch: StateAndPodWatch) -> None:
    run = new_run(kh, LINGERS)
    state = kh.khstate(LINGERS.name)

    assert state is not None and state["OK"] is False, state
    assert state["Errors"] == [execution_error(kh, LINGERS.name, "timed out waiting for pod to exit")], state
    assert run["outcome"] == "failed: timed out waiting for pod to exit", run  # it had reported
    # ... and its pod is removed by the run
    poll(lambda: all(p["metadata"].get("deletionTimestamp") or p["status"].get("phase") in FINISHED_PHASES
                     for p in LINGERS.pods(kh)), 60, "the lingering checker's pod to be removed")
