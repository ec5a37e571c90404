"""Pod names that cannot be squatted into a failure, over the in-memory fakes (docs/interface.md#checker-pods,
#under-hostile-clients).

A pod the run did not create under its predicted name `<check>-<unix seconds>` (no checker labels, so no
cache sees it) makes the run claim a fallback name and create under it; nothing the run removes is
ever a pod it did not create: every eviction and delete carries the uid from the run's own create.
"""
from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import pytest

from kuberhealthy.base.errors import Conflict
from kuberhealthy.control.reaper import CheckReaper
from kuberhealthy.kube import KHSTATES, PODS, Obj
from kuberhealthy.kube.resources import FOREIGN
from kuberhealthy.records import khstate
from kuberhealthy.records.checkpod import Claimed, build_pod, fallback_pod_name, pod_name, run_key_sha256
from kuberhealthy.run.runner import RENAMES, Outcome, Phase, Runner, RunResult
from kuberhealthy.web.report.finder import CallerFinder, NotTheRunsPod
from testbed.fakes import NS, REPORTING_URL, FakeServices, FakeStop, check_spec, khstate_of, report

CHECK = check_spec("probe", timeout="60s")
FALLBACK = re.compile(r"^probe-\d+-[a-z0-9]{5}$")


def squat(services: FakeServices, name: str, phase: str = "Running") -> Obj:
    """A plain pod (no checker labels, no annotations) under `name`, as anyone with pod create rights makes it."""
    return services.api.put(PODS, {"metadata": {"name": name, "namespace": NS},
                                   "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                                   "status": {"phase": phase}})


def predicted(services: FakeServices) -> str:
    return pod_name("probe", int(services.clock.wall()))


def untouched(services: FakeServices, squatter: Obj) -> bool:
    now = services.api.peek(PODS, NS, squatter["metadata"]["name"])
    return now is not None and now["metadata"]["uid"] == squatter["metadata"]["uid"] and \
        not now["metadata"].get("deletionTimestamp")


def removals(services: FakeServices) -> list[tuple[str, str, str | None]]:
    return [(c.method, c.name, (c.body or {}).get("uid")) for c in services.api.calls
            if c.method in ("evict_pod", "delete") and c.plural == PODS.plural]


class Run:
    """Runner(CHECK).run() on a thread named like a check worker's; the test plays kubelet and checker."""

    def __init__(self, services: FakeServices) -> None:
        self.services = services
        self.stop = FakeStop(services.clock)
        self.runner = Runner(services, CHECK, self.stop, clock=services.clock, wall=services.clock.wall)
        self.outcome: list[RunResult] = []
        self.thread = threading.Thread(target=lambda: self.outcome.append(self.runner.run()), name="kh-test-squat")
        self.thread.start()
        _runs.append(self)

    def pod(self) -> Obj:
        return self.services.until(lambda: self.services.run_pods(self.runner.run_uuid), "the run's pod")[0]

    def halt(self) -> None:
        self.stop.set()
        self.runner.wake()

    def result(self) -> RunResult:
        self.thread.join(10)
        assert self.outcome, f"the run did not end (phase {self.runner.phase.value})"
        return self.outcome[0]


_runs: list[Run] = []


@pytest.fixture(autouse=True)
def halt_runs_left_waiting() -> Iterator[None]:
    """A test that failed half way leaves its run waiting: stop it (the leak guard then finds no thread)."""
    yield
    for run in _runs:
        run.halt()
        run.thread.join(10)
    _runs.clear()


def state(services: FakeServices) -> khstate.Spec:
    return khstate.Spec.of(services.api.peek(KHSTATES, NS, "probe") or {})


def test_the_fallback_name_is_the_v2_name_and_five_random_lowercase_letters_or_digits() -> None:
    names = {fallback_pod_name("probe-1700000000") for _ in range(50)}
    assert all(re.fullmatch(r"probe-1700000000-[a-z0-9]{5}", n) for n in names) and len(names) > 1


def test_a_plain_pod_under_the_predicted_name_is_left_alone_and_the_run_reports_under_a_fallback_name(
        fake_services: FakeServices) -> None:
    squatter = squat(fake_services, predicted(fake_services))
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    name = pod["metadata"]["name"]
    assert FALLBACK.match(name) and name.startswith(squatter["metadata"]["name"] + "-")
    claim = khstate.RunClaim.of(fake_services.api.peek(KHSTATES, NS, "probe"))
    assert claim.uuid == run.runner.run_uuid and claim.pod == name  # what the report path binds to
    report(fake_services, pod, ok=True)
    fake_services.kubelet.finish(pod)
    result = run.result()
    assert result.outcome is Outcome.REPORTED and result.pod == name and state(fake_services).ok is True
    assert untouched(fake_services, squatter) and removals(fake_services) == []


def test_the_claim_names_the_fallback_pod_before_that_pod_is_created(fake_services: FakeServices) -> None:
    squat(fake_services, predicted(fake_services))
    run = Run(fake_services)
    name = run.pod()["metadata"]["name"]
    writes = [(c.method, c.name, c.body) for c in fake_services.api.calls
              if c.method in ("create", "replace") and c.name in ("probe", name)]
    rebind = next(i for i, (m, _, body) in enumerate(writes)
                  if m == "replace" and khstate.RunClaim.of(body).pod == name)
    create = next(i for i, (m, n, _) in enumerate(writes) if m == "create" and n == name)
    assert rebind < create
    run.halt()
    run.result()


def test_a_run_that_times_out_under_a_fallback_name_evicts_its_own_pod_by_uid_and_not_the_squatter(
        fake_services: FakeServices) -> None:
    squatter = squat(fake_services, predicted(fake_services))
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    fake_services.until(lambda: run.runner.phase is Phase.REPORT, "phase REPORT")
    fake_services.clock.advance(61)  # past CHECK's timeout
    result = run.result()
    assert result.outcome is Outcome.FAILED
    assert state(fake_services).errors == (f"Check execution error: {NS}/probe: timed out waiting for checker pod to "
                                           "report in",)
    assert removals(fake_services) == [("evict_pod", pod["metadata"]["name"], pod["metadata"]["uid"])]
    assert untouched(fake_services, squatter)


def test_a_run_whose_every_name_is_taken_fails_and_removes_nothing(fake_services: FakeServices) -> None:
    """v2's failure, but the run never evicts a pod it did not create (it once evicted the squatter)."""
    squatter = squat(fake_services, predicted(fake_services))
    fake_services.api.fail("create", PODS, Conflict('pods "x" already exists', reason="AlreadyExists"),
                           times=RENAMES + 1)  # every create
    result = Run(fake_services).result()
    assert result.outcome is Outcome.FAILED and result.phase is Phase.CREATE
    (error,) = result.errors
    assert error.startswith(f"Check execution error: {NS}/probe: failed to create checker pod probe-") and \
        "already exists" in error
    assert len(fake_services.api.made("create", PODS)) == RENAMES + 1
    assert removals(fake_services) == [] and untouched(fake_services, squatter)


def test_a_pod_that_took_the_runs_name_after_its_pod_was_deleted_is_never_touched(
        fake_services: FakeServices) -> None:
    run = Run(fake_services)
    pod = fake_services.kubelet.run(run.pod())
    fake_services.until(lambda: run.runner.phase is Phase.REPORT, "phase REPORT")
    name = pod["metadata"]["name"]
    fake_services.api.remove(PODS, NS, name)
    impostor = squat(fake_services, name)  # someone else's pod under the run's name, a moment later
    result = run.result()  # the read finds another uid under the name: the run's pod is gone
    assert result.outcome is Outcome.SKIPPED and result.skip_reason == "pod-deleted"
    assert removals(fake_services) == [] and untouched(fake_services, impostor)


def test_an_eviction_or_delete_with_another_pods_uid_leaves_that_pod_alone(fake_services: FakeServices) -> None:
    other = squat(fake_services, "probe-1")
    assert fake_services.api.evict_pod(NS, "probe-1", uid="not-its-uid") == FOREIGN
    assert fake_services.api.delete(PODS, NS, "probe-1", uid="not-its-uid") is False
    assert untouched(fake_services, other)
    assert fake_services.api.evict_pod(NS, "probe-1", uid=other["metadata"]["uid"]) == "evicted"


def test_clearing_an_earlier_checker_pod_evicts_it_by_its_uid(fake_services: FakeServices) -> None:
    body = build_pod(CHECK, "earlier-run", fake_services.clock.wall() - 600, REPORTING_URL)
    old = fake_services.api.put(PODS, {**body, "status": {"phase": "Running"}})
    run = Run(fake_services)
    fake_services.until(lambda: fake_services.api.made("evict_pod"), "the earlier pod's eviction")
    assert removals(fake_services) == [("evict_pod", old["metadata"]["name"], old["metadata"]["uid"])]
    run.halt()
    run.result()


def test_the_reaper_never_deletes_a_finished_pod_without_the_checker_labels(fake_services: FakeServices) -> None:
    plain = squat(fake_services, "probe-1600000000", phase="Succeeded")
    fake_services.clock.advance(10 * 24 * 3600)  # far beyond any age limit
    CheckReaper(fake_services, now=fake_services.clock.wall, interval=3600).reap_once()
    assert untouched(fake_services, plain) and removals(fake_services) == []


def test_rebinding_names_the_new_pod_only_while_the_khstate_still_names_the_run(
        fake_services: FakeServices) -> None:
    res = fake_services.api
    khstate.claim_run(khstate.RunWrite(res, NS, "probe", "run-1", "kh-0"), run_pod="probe-1", run_key_sha256="h")
    out = khstate.rebind_run_pod(khstate.RunWrite(res, NS, "probe", "run-1", "kh-0"), "probe-1-abcde")
    assert out is not None and khstate.RunClaim.of(out).pod == "probe-1-abcde"
    assert khstate.RunClaim.of(out).key_sha256 == "h"
    khstate.claim_run(khstate.RunWrite(res, NS, "probe", "run-2", "kh-0"), run_pod="probe-2", run_key_sha256="h2")
    assert khstate.rebind_run_pod(khstate.RunWrite(res, NS, "probe", "run-1", "kh-0"), "probe-1-zzzzz") is None
    assert khstate.RunClaim.of(res.peek(KHSTATES, NS, "probe")).pod == "probe-2"


@pytest.mark.parametrize("hint_run", ["run-0", ""])
def test_rebinding_reads_the_khstate_when_the_cached_hint_is_behind_the_claim(
        fake_services: FakeServices, hint_run: str) -> None:
    res = fake_services.api
    khstate.claim_run(khstate.RunWrite(res, NS, "probe", "run-1", "kh-0"), run_pod="probe-1", run_key_sha256="h")
    hint = {"metadata": {"name": "probe", "namespace": NS}, "spec": {"uuid": hint_run}}
    out = khstate.rebind_run_pod(khstate.RunWrite(res, NS, "probe", "run-1", "kh-0"), "probe-1-abcde", hint=hint)
    assert out is not None and khstate.RunClaim.of(out).pod == "probe-1-abcde"


# --- the report path: a replica whose khstate cache is behind the re-claim ---------------------------------

def checker(services: FakeServices, name: str, run_uuid: str, key: str, ip: str) -> Obj:
    """A Running checker pod of CHECK for `run_uuid` under `name`, carrying the run key `key`."""
    body = build_pod(CHECK, run_uuid, services.clock.wall(), REPORTING_URL, claimed=Claimed(name, key))
    return services.api.put(PODS, {**body, "status": {"phase": "Running", "podIP": ip}})


def claim(run_uuid: str, run_pod: str, key: str) -> Obj:
    return khstate_of("probe", uuid=run_uuid, annotations={khstate.RUN_POD: run_pod,
                                                           khstate.RUN_KEY_SHA256: run_key_sha256(key)})


def test_a_report_from_the_fallback_pod_is_accepted_by_a_replica_whose_cache_is_behind_the_re_claim(
        fake_services: FakeServices) -> None:
    squat(fake_services, "probe-100")  # no labels: no cache has it
    checker(fake_services, "probe-100-x2k9q", "run-1", "secret", "10.0.0.7")
    fake_services.api.put(KHSTATES, claim("run-1", "probe-100", "secret"))  # the cache: the first claim
    reads: list[str] = []

    def read_state(check: str, timeout: float) -> Obj | None:
        reads.append(check.partition("/")[2])
        return claim("run-1", "probe-100-x2k9q", "secret")  # the API server: the re-claim
    finder = CallerFinder(fake_services.pods, fake_services.notifier, wait=0.0, states=fake_services.kinds.state_cache,
                          read_state=read_state)
    assert finder.find("run-1", "10.0.0.7").pod_name == "probe-100-x2k9q" and reads == ["probe"]


def test_a_look_alike_of_a_run_whose_pod_the_cache_shows_costs_no_khstate_read(fake_services: FakeServices) -> None:
    checker(fake_services, "probe-100", "run-1", "secret", "10.0.0.7")
    evil = checker(fake_services, "evil", "run-1", "secret", "10.0.0.9")  # copied labels, env and key
    fake_services.api.put(KHSTATES, claim("run-1", "probe-100", "secret"))

    def read_state(check: str, timeout: float) -> Obj | None:
        raise AssertionError("no read: the cache shows the claimed pod as the run's")
    finder = CallerFinder(fake_services.pods, fake_services.notifier, wait=0.0, states=fake_services.kinds.state_cache,
                          read_state=read_state)
    with pytest.raises(NotTheRunsPod):
        finder.find_pod(fake_services.pods.get(NS, evil["metadata"]["name"]) or {}, 10**9)
