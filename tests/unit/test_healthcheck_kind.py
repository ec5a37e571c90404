"""The HealthCheck kind as data, over the in-memory fakes: where its state is written (its status, and its
annotations under a CRD that prunes our fields), its states seen as khstates, v3's Lease as its gate, the
marks of a migration, which pods are its, and what the controller does with it (run once, a spec it cannot
run, status-only changes, a migrated pair, v3's finalizer)."""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kuberhealthy.base.errors import NotFound
from kuberhealthy.base.times import format_datetime, utcnow
from kuberhealthy.control.controller import Controller
from kuberhealthy.control.finalizers import Finalizers, wakeups
from kuberhealthy.control.reaper import CheckReaper
from kuberhealthy.kube import HEALTHCHECKS, KHCHECKS, LEASES, PODS, Bounds, Obj
from kuberhealthy.kube.mappedcache import MappedCache
from kuberhealthy.records import hcstate, khstate, migration
from kuberhealthy.records.checkpod import build_pod, pod_check_index
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.records.kinds import V3_FINALIZER
from kuberhealthy.records.v3lease import V3_LEASE_NAME
from kuberhealthy.run.runner import Outcome, Phase, RunResult
from testbed.fakes import NS, REPORTING_URL, FakeServices, healthcheck, khcheck, khstate_of

V3_STATUS = frozenset({"ok", "errors", "runDuration", "namespace", "currentUUID", "lastRunUnix", "successCount",
                       "failureCount", "lastOKUnix", "lastFailureUnix", "additionalMetadata"})


def write(services: FakeServices, run_uuid: str, name: str = "probe") -> khstate.RunWrite:
    return khstate.RunWrite(services.api, NS, name, run_uuid, "kh-test-0", bounds=Bounds(5.0),
                            store=services.hc_store)


def hc_annotations(services: FakeServices, name: str = "probe") -> dict[str, str]:
    return dict(((services.api.peek(HEALTHCHECKS, NS, name) or {}).get("metadata") or {}).get("annotations") or {})


# --- the state in the status ----------------------------------------------------------------------------

def test_a_claim_a_report_and_a_result_land_in_the_status_with_v3_s_names(fake_services: FakeServices) -> None:
    fake_services.api.put(HEALTHCHECKS, healthcheck("probe"))
    khstate.claim_run(write(fake_services, "run-1"), run_pod="probe-1", run_key_sha256="ab")
    khstate.record_report(write(fake_services, "run-1"), False, ["dns slow"])
    khstate.record_result(write(fake_services, "run-1"), "2.5s", "node-1")
    status = (fake_services.api.peek(HEALTHCHECKS, NS, "probe") or {})["status"]
    assert status["ok"] is False and status["errors"] == ["dns slow"] and status["runDuration"] == 2_500_000_000
    assert status["currentUUID"] == "" and status["runBinding"]["finishedUUID"] == "run-1"
    assert status["lastRunUnix"] > 0 and status["node"] == "node-1"
    writes = [c.method for c in fake_services.api.calls if c.plural == "healthchecks" and c.method != "get"]
    # the dry run before the first write (does the CRD keep our fields?), then one PUT of the status each
    assert writes == ["replace_status_dry_run"] + ["replace_status"] * 3


def test_a_healthcheck_that_is_gone_is_never_created_by_a_write(fake_services: FakeServices) -> None:
    with pytest.raises(NotFound):
        khstate.claim_run(write(fake_services, "run-1"))
    assert fake_services.api.peek(HEALTHCHECKS, NS, "probe") is None


def test_under_a_crd_that_prunes_our_fields_the_binding_goes_to_annotations_and_the_loss_is_said_once(
        fake_services: FakeServices) -> None:
    fake_services.api.status_fields[HEALTHCHECKS.plural] = V3_STATUS
    fake_services.api.put(HEALTHCHECKS, healthcheck("probe"))
    fake_services.api.put(HEALTHCHECKS, healthcheck("other"))
    khstate.claim_run(write(fake_services, "run-1"), run_pod="probe-1", run_key_sha256="ab")
    view = fake_services.hc_store.read(fake_services.api, NS, "probe", 1.0)
    claim = khstate.RunClaim.of(view)
    assert (claim.uuid, claim.pod, claim.key_sha256, claim.finished) == ("run-1", "probe-1", "ab", False)
    assert "runBinding" not in (fake_services.api.peek(HEALTHCHECKS, NS, "probe") or {})["status"]
    khstate.record_report(write(fake_services, "run-1"), True, [])
    khstate.record_result(write(fake_services, "run-1"), "1s", "node-1")
    khstate.claim_run(write(fake_services, "run-2", "other"))
    assert hc_annotations(fake_services)[khstate.FINISHED_UUID] == "run-1"
    assert hc_annotations(fake_services)[khstate.REPORTED_UUID] == "run-1"
    assert [e[0] for e in fake_services.events.recorded] == ["StateNotKept"]  # once, not per check or write
    assert fake_services.hc_store.pruned and fake_services.hc_store.binding_writes >= 3


def test_under_a_pruning_crd_a_new_run_s_claim_reaches_the_annotations_before_the_status(
        fake_services: FakeServices) -> None:
    """Between the two writes a reader must never take a report of the old run for the new one's, nor see
    the new run's report stamp before its result."""
    fake_services.api.status_fields[HEALTHCHECKS.plural] = V3_STATUS
    fake_services.api.put(HEALTHCHECKS, healthcheck("probe"))
    khstate.claim_run(write(fake_services, "run-1"))  # finds out about the pruning
    fake_services.api.calls.clear()
    khstate.claim_run(write(fake_services, "run-2"), run_pod="probe-2")
    khstate.record_report(write(fake_services, "run-2"), True, [])
    writes = [c.method for c in fake_services.api.calls if c.method in ("replace", "replace_status")]
    assert writes[:2] == ["replace", "replace_status"]  # the claim: annotations first
    assert writes[-2:] == ["replace_status", "replace"]  # the report: its result first, then its stamp


# --- states as khstates ------------------------------------------------------------------------------------

def test_the_mapped_cache_shows_each_healthcheck_as_a_khstate_and_maps_each_version_once(
        fake_services: FakeServices) -> None:
    states = MappedCache(fake_services.healthchecks, hcstate.view)
    seen: list[tuple[str, bool]] = []
    states.add_listener(lambda etype, obj, prev: seen.append((etype, obj["kind"] == "KuberhealthyState")))
    fake_services.api.put(HEALTHCHECKS, healthcheck("probe", status={"ok": False, "errors": ["x"],
                                                                     "lastRunUnix": 1_700_000_000}))
    first = states.get(NS, "probe")
    assert first is not None and khstate.Spec.of(first).errors == ("x",)
    assert khstate.Spec.of(first).last_run == "2023-11-14T22:13:20Z"
    assert states.get(NS, "probe") is first and states.list() == [first]
    assert seen == [("ADDED", True)] and states.topic("key", f"{NS}/probe") == fake_services.healthchecks.topic(
        "key", f"{NS}/probe")


def test_a_healthcheck_never_run_reads_as_ok_like_a_new_khstate() -> None:
    assert khstate.Spec.of(hcstate.view(healthcheck("probe"))).ok is True
    assert khstate.Spec.of(hcstate.view(healthcheck("probe", status={"ok": False}))).ok is False


# --- v3's Lease ---------------------------------------------------------------------------------------------

def lease(holder: str, renewed: float, duration: int = 15) -> Obj:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": V3_LEASE_NAME, "namespace": "kuberhealthy"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                     "renewTime": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(renewed))}}


def test_v3_s_lease_held_by_someone_else_closes_the_gate_until_it_is_no_longer_renewed(
        fake_services: FakeServices) -> None:
    gate, clock = fake_services.v3_gate, fake_services.clock
    assert gate.reason() == ""
    fake_services.api.put(LEASES, lease("v3-pod", clock.wall()))
    assert "v3-pod" in gate.reason() and V3_LEASE_NAME in gate.reason()
    clock.advance(10)
    fake_services.api.put(LEASES, lease("v3-pod", clock.wall()))  # renewed
    clock.advance(10)
    assert gate.reason() != ""
    clock.advance(10)  # not renewed for 20 s > 15 s
    assert gate.reason() == ""


def test_a_lease_renewed_long_ago_or_held_by_us_or_by_nobody_leaves_the_gate_open(
        fake_services: FakeServices) -> None:
    wall = fake_services.clock.wall()
    for obj in (lease("v3-pod", wall - 3600), lease(fake_services.config.pod_name, wall), lease("", wall)):
        fake_services.api.put(LEASES, obj)
        assert fake_services.v3_gate.reason() == ""


# --- migration marks ----------------------------------------------------------------------------------------

def test_a_pair_is_a_pair_only_when_both_marks_agree(fake_services: FakeServices) -> None:
    kh = fake_services.api.put(KHCHECKS, khcheck("probe"))
    uid = kh["metadata"]["uid"]
    hc = fake_services.api.put(HEALTHCHECKS, {**healthcheck("probe"), "metadata": {
        "name": "probe", "namespace": NS, "annotations": {migration.MIGRATED_FROM: uid}}})
    assert migration.pending(hc, fake_services.khchecks) and not migration.migrated(kh, fake_services.healthchecks)
    marked = fake_services.api.edit(KHCHECKS, NS, "probe", lambda o: o["metadata"].setdefault(
        "annotations", {}).update({migration.MIGRATED_TO: "probe"}))
    assert migration.migrated(marked, fake_services.healthchecks) and not migration.pending(hc, fake_services.khchecks)
    assert migration.migrated_from(hc, fake_services.khchecks) is not None
    stranger = fake_services.api.put(HEALTHCHECKS, {**healthcheck("probe"), "metadata": {
        "name": "probe", "namespace": NS, "annotations": {migration.MIGRATED_FROM: "another-uid"}}})
    assert not migration.is_pair(marked, stranger) and not migration.pending(stranger, fake_services.khchecks)


# --- pods ---------------------------------------------------------------------------------------------------

def test_a_pod_is_a_healthcheck_s_by_v3_s_label_and_a_khcheck_s_otherwise(fake_services: FakeServices) -> None:
    hc_spec = fake_services.kinds.named("healthcheck").parse(healthcheck("probe"))  # type: ignore[union-attr]
    ours = build_pod(hc_spec, "r1", 1_700_000_000, REPORTING_URL)
    kh = build_pod(CheckSpec.of(khcheck("probe", extraLabels={"healthcheck": "probe"})), "r2", 1_700_000_000,
                   REPORTING_URL)
    v3s = {"metadata": {"namespace": NS, "name": "x", "labels": {"healthcheck": "probe"}}}
    assert pod_check_index(ours) == [f"{NS}/hc:probe"] and pod_check_index(v3s) == [f"{NS}/hc:probe"]
    assert pod_check_index(kh) == [f"{NS}/probe"]  # an author's label does not make it a HealthCheck's


# --- the controller -----------------------------------------------------------------------------------------

class Recorder:
    """A runner factory whose runs record themselves and end at once, judged (REPORTED)."""

    def __init__(self, services: FakeServices) -> None:
        self.services = services
        self.specs: list[CheckSpec] = []
        self.lock = threading.Lock()

    def __call__(self, _services: object, spec: CheckSpec, stop: threading.Event) -> Any:
        recorder = self

        class Run:
            def wake(self) -> None:
                pass

            def run(self) -> RunResult:
                with recorder.lock:
                    recorder.specs.append(spec)
                recorder.services.activity.touch()
                return RunResult(Outcome.REPORTED, str(uuid.uuid4()), Phase.DONE)
        return Run()

    def idents(self) -> list[str]:
        with self.lock:
            return [s.ident for s in self.specs]


@pytest.fixture
def leading(fake_services: FakeServices) -> Iterator[tuple[Controller, Recorder]]:
    runs = Recorder(fake_services)
    controller = Controller(fake_services, list, runner=runs, clock=fake_services.clock)
    controller.start()
    controller.became_leader()
    fake_services.until(controller.is_leading, "leading")
    try:
        yield controller, runs
    finally:
        controller.stop()
        controller.join(5)


def test_a_single_run_only_healthcheck_runs_once_and_not_again_after_a_new_leader(
        fake_services: FakeServices, leading: tuple[Controller, Recorder]) -> None:
    controller, runs = leading
    fake_services.api.put(HEALTHCHECKS, healthcheck("once", run_interval="1s", singleRunOnly=True))
    fake_services.until(lambda: runs.idents() == [f"{NS}/hc:once"], "the one run")
    fake_services.api.edit(HEALTHCHECKS, NS, "once", lambda o: o.update(status={
        "ok": True, "lastRunUnix": int(fake_services.clock.wall()), "currentUUID": ""}))
    fake_services.clock.advance(5)
    controller.lost_leadership()
    controller.became_leader()
    fake_services.until(controller.is_leading, "leading again")
    fake_services.clock.advance(5)
    assert runs.idents() == [f"{NS}/hc:once"] and f"{NS}/hc:once" not in controller.workers


def test_a_healthcheck_whose_spec_cannot_run_is_not_run_and_raises_one_event_per_version(
        fake_services: FakeServices, leading: tuple[Controller, Recorder]) -> None:
    controller, runs = leading
    fake_services.api.put(HEALTHCHECKS, healthcheck("bad", run_interval="forever"))
    fake_services.api.put(KHCHECKS, khcheck("good"))
    fake_services.until(lambda: f"{NS}/good" in runs.idents(), "the good check's run")
    fake_services.api.put(KHCHECKS, khcheck("other"))  # another reconcile: no second Event
    fake_services.until(lambda: f"{NS}/other" in runs.idents(), "the other check's run")
    invalid = [e for e in fake_services.events.recorded if e[0] == "SpecInvalid"]
    assert invalid == [("SpecInvalid", f"{NS}/bad", "spec.runInterval: 'forever' is not a duration (e.g. 30s, 5m, "
                        "1h)")]
    assert f"{NS}/hc:bad" not in controller.workers


def test_a_status_write_of_a_healthcheck_does_not_make_the_controller_reconcile(
        fake_services: FakeServices, leading: tuple[Controller, Recorder]) -> None:
    controller, runs = leading
    fake_services.api.put(HEALTHCHECKS, {**healthcheck("probe"), "metadata": {"name": "probe", "namespace": NS,
                                                                                "generation": 1}})
    fake_services.until(lambda: runs.idents() == [f"{NS}/hc:probe"], "its run")
    reconciles = controller.reconciles
    for i in range(5):
        def count(obj: Obj, n: int = i) -> None:
            obj["status"] = {"successCount": n}
        fake_services.api.edit(HEALTHCHECKS, NS, "probe", count)
    fake_services.api.put(KHCHECKS, khcheck("marker"))  # one reconcile, for this
    fake_services.until(lambda: f"{NS}/marker" in runs.idents(), "the marker's run")
    assert controller.reconciles == reconciles + 1


def test_while_v3_s_controller_holds_its_lease_only_the_khchecks_run(
        fake_services: FakeServices, leading: tuple[Controller, Recorder]) -> None:
    controller, runs = leading
    fake_services.api.put(LEASES, lease("v3-pod", fake_services.clock.wall()))
    fake_services.api.put(HEALTHCHECKS, healthcheck("held"))
    fake_services.api.put(KHCHECKS, khcheck("free"))
    fake_services.until(lambda: f"{NS}/free" in runs.idents(), "the khcheck's run")
    assert f"{NS}/hc:held" not in controller.workers
    fake_services.clock.advance(30)  # v3 stopped renewing
    controller.kinds_changed()
    fake_services.until(lambda: f"{NS}/hc:held" in runs.idents(), "the HealthCheck's run")


def test_a_migrated_pair_runs_as_its_healthcheck_on_the_khcheck_s_cadence_and_a_pending_one_as_its_khcheck(
        fake_services: FakeServices, leading: tuple[Controller, Recorder]) -> None:
    controller, runs = leading
    kh = fake_services.api.put(KHCHECKS, khcheck("moving", run_interval="1h"))
    fake_services.until(lambda: runs.idents() == [f"{NS}/moving"], "the khcheck's run")
    recently = format_datetime(utcnow())
    fake_services.api.put(HEALTHCHECKS, {
        **healthcheck("moving", run_interval="1h",
                      status=hcstate.status_of(khstate_of("moving", LastRun=recently))),
        "metadata": {"name": "moving", "namespace": NS,
                     "annotations": {migration.MIGRATED_FROM: kh["metadata"]["uid"]}}})
    fake_services.api.put(KHCHECKS, khcheck("marker1"))
    fake_services.until(lambda: f"{NS}/marker1" in runs.idents(), "a reconcile")
    assert f"{NS}/moving" in controller.workers and f"{NS}/hc:moving" not in controller.workers  # pending
    fake_services.api.edit(KHCHECKS, NS, "moving", lambda o: o["metadata"].setdefault("annotations", {}).update(
        {migration.MIGRATED_TO: "moving"}))
    fake_services.until(lambda: f"{NS}/hc:moving" in controller.workers and f"{NS}/moving" not in controller.workers,
                        "the switch")
    # it ran a moment ago as the khcheck: next due an interval after that, not now
    assert controller.workers[f"{NS}/hc:moving"].first_due > fake_services.clock() + 3500


# --- v3's finalizer -----------------------------------------------------------------------------------------

def test_a_deleted_healthcheck_loses_v3_s_finalizer_once_its_pods_are_gone(fake_services: FakeServices) -> None:
    body = healthcheck("final")
    body["metadata"].update(finalizers=[V3_FINALIZER, "other.io/keep"], deletionTimestamp="2026-12-02T00:00:00Z")
    fake_services.api.put(HEALTHCHECKS, body)
    fake_services.api.put(PODS, {"metadata": {"name": "final-v3", "namespace": NS, "labels": {"healthcheck": "final"}},
                                 "spec": {"containers": [{"name": "c", "image": "x"}]}})
    part = Finalizers(fake_services, wakeups(fake_services))
    assert part.pass_once() == 1  # the pod deleted; the finalizer waits for it to be gone
    assert fake_services.api.peek(PODS, NS, "final-v3") is None
    assert part.pass_once() == 0
    assert (fake_services.api.peek(HEALTHCHECKS, NS, "final") or {})["metadata"]["finalizers"] == ["other.io/keep"]


def test_finished_checker_pods_upstream_v3_left_are_reaped_by_the_same_rules_as_ours(
        fake_services: FakeServices) -> None:
    old = {"metadata": {"name": "v3-old", "namespace": NS, "labels": {"healthcheck": "probe"},
                        "creationTimestamp": "2020-01-01T00:00:00Z"},
           "spec": {"containers": [{"name": "c", "image": "x"}]},
           "status": {"phase": "Succeeded", "containerStatuses": [
               {"name": "c", "state": {"terminated": {"exitCode": 0, "finishedAt": "2020-01-01T00:00:05Z"}}}]}}
    fake_services.api.put(PODS, old)
    running = {**old, "metadata": {**old["metadata"], "name": "v3-running"}, "status": {"phase": "Running"}}
    fake_services.api.put(PODS, running)
    reaper = CheckReaper(fake_services)
    assert [d.name for d in reaper.reap_once()] == ["v3-old"]  # older than maxCheckPodAge; a live one is left
    assert fake_services.api.peek(PODS, NS, "v3-running") is not None
    lists = len(fake_services.api.made("list", PODS))
    reaper.reap_once()
    assert len(fake_services.api.made("list", PODS)) == lists  # looked for again only every few passes
