"""Fake reports cost nothing (kuberhealthy/web/report/triage.py), over the in-memory fakes: a report naming no
run the caches know is refused without an API request while they are current, waits only in a small bounded
pool while they may be behind, and the rescue reads made for such reports are at most one a second and shared.
And refused reports raise ReportRejected Events only from the check's own checker pods (routes.py), damped
(outputs/events.py; the damping itself is tested in test_events.py)."""
from __future__ import annotations

import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from kuberhealthy.base.errors import Unreachable
from kuberhealthy.checkclient import RUN_UUID_HEADER
from kuberhealthy.kube import KHCHECKS, KHSTATES, PODS, Obj
from kuberhealthy.outputs.events import EventRecorder
from kuberhealthy.records import khstate
from kuberhealthy.records.checkpod import Claimed, build_pod, run_key_sha256
from kuberhealthy.web.parts import part
from kuberhealthy.web.report.routes import ReportDesk
from kuberhealthy.web.report.triage import Behind, Known, RescueReads, Triage, TriageLimits, Unknown
from testbed.fakes import NS, REPORTING_URL, FakeServices, check_spec, khcheck, khstate_of
from testbed.wait import wait_for

WAIT = 10.0  # seconds a thread of a test may wait for something that happens at once
OK = {"OK": True, "Errors": []}


def post(client: FlaskClient, body: Any, run_uuid: str | None = None, source: str = "192.0.2.99") -> Any:
    """POST /externalCheckStatus from `source` (by default an address no pod has)."""
    headers = {RUN_UUID_HEADER: run_uuid} if run_uuid is not None else {}
    return client.post("/externalCheckStatus", data=json.dumps(body).encode(), headers=headers,
                       content_type="application/json", environ_base={"REMOTE_ADDR": source})


def checker_pod(fake: FakeServices, check: str = "dns") -> tuple[Obj, str]:
    """A Running checker pod of `check` and the khstate naming its run."""
    run = str(uuid.uuid4())
    fake.api.put(KHSTATES, khstate_of(check, uuid=run))
    body = build_pod(check_spec(check), run, fake.clock.wall(), REPORTING_URL)
    return fake.kubelet.run(fake.api.put(PODS, body)), run


def address(pod: Obj) -> str:
    return str(pod["status"]["podIP"])


def install(app: Flask, fake: FakeServices, **kw: Any) -> Triage:
    """A triage on the fake wall clock (creation times are the fake API's), in place of the app's."""
    clocks = {"wall": kw.pop("wall", fake.clock.wall), **({"clock": kw.pop("clock")} if "clock" in kw else {})}
    triage = Triage(fake.pods, fake.kinds, fake.notifier, fake.read_checker_pods, TriageLimits(**kw), **clocks)
    part(ReportDesk, app).admission.triage = triage
    return triage


def pending_pod(fake: FakeServices, check: str = "dns") -> tuple[Obj, str]:
    """A checker pod just created, not yet scheduled (no pod IP), whose run's claim this replica's
    khstate cache has not seen yet (it still names an earlier run): for reports by address, the caches
    may be behind for 30 s."""
    run = str(uuid.uuid4())
    fake.api.put(KHSTATES, khstate_of(check, uuid=str(uuid.uuid4())))
    return fake.api.put(PODS, build_pod(check_spec(check), run, fake.clock.wall(), REPORTING_URL)), run


def claimed_pending_pod(fake: FakeServices, check: str = "dns") -> tuple[Obj, str]:
    """A checker pod just created (no pod IP) whose khstate claims its run by the pod's name, as our
    runner's claim does: the caches may be behind for 30 s."""
    run, key = str(uuid.uuid4()), uuid.uuid4().hex
    body = build_pod(check_spec(check), run, fake.clock.wall(), REPORTING_URL, claimed=Claimed(run_key=key))
    fake.api.put(KHSTATES, khstate_of(check, uuid=run, annotations={
        khstate.RUN_POD: body["metadata"]["name"], khstate.RUN_KEY_SHA256: run_key_sha256(key)}))
    return fake.api.put(PODS, body), run


def api_calls(fake: FakeServices) -> list[Any]:
    return [c for c in fake.api.made() if c.method in ("get", "list")]


def test_a_fake_report_costs_no_api_read_while_the_caches_are_current(
        fake_services: FakeServices, app: Flask, client: FlaskClient) -> None:
    install(app, fake_services)
    checker_pod(fake_services)
    before = len(api_calls(fake_services))
    made_up = str(uuid.uuid4())
    by_uuid = post(client, OK, run_uuid=made_up)
    by_address = post(client, OK)  # no header, from an address no checker pod has
    assert (by_uuid.status_code, by_uuid.text) == (400, f"failed to find a pod with selector "
                                                        f"kuberhealthy-run-id={made_up}\n")
    assert (by_address.status_code, by_address.text) == (400, "failed to find a pod with selector "
                                                              "status.podIP==192.0.2.99,status.phase==Running\n")
    assert len(api_calls(fake_services)) == before


def test_a_report_of_a_run_the_caches_know_is_handled_as_before_while_they_may_be_behind(
        fake_services: FakeServices, app: Flask, client: FlaskClient) -> None:
    install(app, fake_services)
    pending_pod(fake_services, "other")  # the caches may be behind from now on
    pod, run = checker_pod(fake_services)
    assert post(client, OK, run_uuid=run, source=address(pod)).status_code == 200
    assert post(client, OK, source=address(pod)).status_code == 200


def test_while_a_new_pod_has_no_ip_a_stranger_is_told_to_retry_and_afterwards_refused(
        fake_services: FakeServices, app: Flask, client: FlaskClient) -> None:
    triage = install(app, fake_services, pool_wait=0.05, rescue_after=0.0)
    pod, _ = pending_pod(fake_services)
    answer = post(client, OK)
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "1"
    fake_services.kubelet.run(pod)  # it has its IP: nothing is behind any more
    assert not triage.behind(by_address=True)
    assert post(client, OK).status_code == 400


def test_a_young_pod_stops_counting_after_thirty_seconds(fake_services: FakeServices, app: Flask) -> None:
    triage = install(app, fake_services)
    pending_pod(fake_services)
    assert triage.behind(by_address=True)
    fake_services.clock.advance(31)
    assert not triage.behind(by_address=True)


def test_a_cache_that_is_not_current_means_the_caches_may_be_behind(
        fake_services: FakeServices, app: Flask) -> None:
    triage = install(app, fake_services)
    assert not triage.behind()
    fake_services.khstates.set_current(False)
    assert triage.behind()


def test_a_genuine_report_whose_pod_the_cache_has_not_seen_with_its_ip_is_found_by_the_rescue_read(
        fake_services: FakeServices, app: Flask, client: FlaskClient) -> None:
    triage = install(app, fake_services, rescue_after=0.0)
    pod, _ = claimed_pending_pod(fake_services)
    fake_services.pods.pause()  # the pod cache does not see the kubelet's status update
    pod = fake_services.kubelet.run(pod)
    answer = post(client, OK, source=address(pod))
    assert answer.status_code == 200, answer.text
    assert triage.rescue is not None and triage.rescue.reads == 1
    fake_services.pods.resume()


def test_a_genuine_report_neither_cache_has_seen_while_they_are_not_current_gets_200_or_503_never_400(
        fake_services: FakeServices, app: Flask, client: FlaskClient) -> None:
    install(app, fake_services, pool_wait=0.05, rescue_after=0.0, rescue_every=3600.0)
    fake_services.pods.pause()
    fake_services.khstates.pause()
    fake_services.pods.set_current(False)
    pods = [checker_pod(fake_services, f"c{i}") for i in range(3)]
    answers = [post(client, OK, run_uuid=run, source=address(pod)).status_code for pod, run in pods]
    assert answers[0] == 200  # the one rescue read of this hour
    assert set(answers[1:]) == {503}
    fake_services.pods.resume()
    fake_services.khstates.resume()


def test_the_wait_pool_full_answers_503_with_retry_after_1_at_once(
        fake_services: FakeServices, app: Flask) -> None:
    gate, asked = threading.Event(), threading.Event()

    def slow_read(run_uuid: str | None, ip: str | None, timeout: float) -> list[Obj]:
        asked.set()
        assert gate.wait(WAIT)
        return []
    triage = install(app, fake_services, pool_wait=WAIT, rescue_after=0.0)
    triage.rescue = RescueReads(slow_read)
    fake_services.pods.set_current(False)
    made_up = str(uuid.uuid4())
    with ThreadPoolExecutor(4) as pool:
        waiting = [pool.submit(lambda: post(app.test_client(), OK, run_uuid=made_up)) for _ in range(4)]
        assert asked.wait(WAIT)
        wait_for(lambda: triage.rescue is not None and triage.rescue.shared == 3, WAIT, what="four in the pool")
        full = post(app.test_client(), OK, run_uuid=made_up)
        assert full.status_code == 503 and full.headers["Retry-After"] == "1", full.text
        assert "waiting for the caches" in full.text and triage.pool_full == 1
        slots = part(ReportDesk, app).admission.slots
        held = [slots.acquire(blocking=False) for _ in range(24)]
        assert all(held)  # the four waiting hold no report slot
        for _ in held:
            slots.release()
        gate.set()
        # the one shared read found no pod with that label: each of the four is refused
        assert [f.result(WAIT).status_code for f in waiting] == [400] * 4


def test_rescue_reads_are_at_most_one_a_second_for_the_process() -> None:
    now = [100.0]
    calls: list[tuple[str | None, str | None]] = []

    def read(run_uuid: str | None, ip: str | None, timeout: float) -> list[Obj]:
        calls.append((run_uuid, ip))
        return []
    rescue = RescueReads(read, every=1.0, clock=lambda: now[0])
    assert rescue.ask("a", None, 1.0) == []
    assert rescue.ask("b", None, 1.0) is None  # within the second: no read
    assert rescue.ask(None, "10.0.0.1", 1.0) is None
    now[0] += 1.0
    assert rescue.ask(None, "10.0.0.1", 1.0) == []
    assert calls == [("a", None), (None, "10.0.0.1")] and rescue.reads == 2


def test_concurrent_askers_of_one_run_share_one_rescue_read() -> None:
    gate, started = threading.Event(), threading.Event()
    calls: list[str | None] = []

    def read(run_uuid: str | None, ip: str | None, timeout: float) -> list[Obj]:
        calls.append(run_uuid)
        started.set()
        assert gate.wait(WAIT)
        return [{"metadata": {"name": "p"}}]
    rescue = RescueReads(read, every=0.0)
    with ThreadPoolExecutor(5) as pool:
        first = pool.submit(rescue.ask, "run", None, WAIT)
        assert started.wait(WAIT)
        others = [pool.submit(rescue.ask, "run", None, WAIT) for _ in range(4)]
        wait_for(lambda: rescue.shared == 4, WAIT, what="four askers sharing the read")
        gate.set()
        answers = [f.result(WAIT) for f in [first, *others]]
    assert calls == ["run"] and all(a == [{"metadata": {"name": "p"}}] for a in answers)


def test_a_rescue_read_the_api_cannot_answer_tells_the_caller_to_retry(
        fake_services: FakeServices, app: Flask) -> None:
    triage = install(app, fake_services, pool_wait=0.05, rescue_after=0.0)
    fake_services.pods.set_current(False)
    fake_services.api.fail("list", PODS, Unreachable("connection refused"))
    assert isinstance(triage.sort(str(uuid.uuid4()), "", 10**12), Behind)


def test_a_claim_of_a_run_that_is_over_does_not_make_its_uuid_known(fake_services: FakeServices, app: Flask) -> None:
    triage = install(app, fake_services)
    run = str(uuid.uuid4())
    fake_services.api.put(KHSTATES, khstate_of("dns", uuid=run))
    assert triage.known(run, None)
    fake_services.api.put(KHSTATES, khstate_of("dns", uuid=run, annotations={khstate.FINISHED_UUID: run}))
    assert not triage.known(run, None)
    assert isinstance(triage.sort(run, "", 10**12), Unknown)


def test_a_report_naming_something_no_pod_can_carry_is_refused_at_once_even_while_the_caches_may_be_behind(
        fake_services: FakeServices, app: Flask) -> None:
    triage = install(app, fake_services)
    fake_services.pods.set_current(False)
    assert isinstance(triage.sort("spoof!" + "x" * 70, "", 10**12), Unknown)
    assert isinstance(triage.sort(None, "nonsense", 10**12), Unknown)
    assert not isinstance(triage.sort(None, "10.0.0.1", 0), Known)


def test_a_run_claimed_moments_ago_whose_pod_the_cache_lacks_means_the_caches_may_be_behind(
        fake_services: FakeServices, app: Flask) -> None:
    triage = install(app, fake_services, clock=fake_services.clock)
    run = str(uuid.uuid4())
    fake_services.pods.pause()  # the pod watch trails: a fast checker reports before its pod is delivered
    body = build_pod(check_spec("dns"), run, fake_services.clock.wall(), REPORTING_URL)
    claim = {khstate.RUN_POD: body["metadata"]["name"]}
    fake_services.api.put(KHSTATES, khstate_of("dns", uuid=run, annotations=claim))
    assert triage.behind()
    pod = fake_services.kubelet.run(fake_services.api.put(PODS, body))
    fake_services.pods.resume()
    assert not triage.behind() and triage.known(None, address(pod))


def test_a_claim_stops_counting_after_thirty_seconds_and_one_without_its_pod_never_counts(
        fake_services: FakeServices, app: Flask) -> None:
    triage = install(app, fake_services, clock=fake_services.clock)
    fake_services.api.put(KHSTATES, khstate_of("byhand", uuid=str(uuid.uuid4())))  # names no pod: v2, or a test
    assert not triage.behind()
    claimed = f"dns-{int(fake_services.clock.wall())}"  # a run's pod name carries its start
    fake_services.api.put(KHSTATES, khstate_of("dns", uuid=str(uuid.uuid4()), annotations={khstate.RUN_POD: claimed}))
    assert triage.behind()
    fake_services.clock.advance(31)
    assert not triage.behind()


# --- ReportRejected Events ----------------------------------------------------------------------------------


class EventsApi:
    """The two Event calls the recorder makes, kept by name."""

    def __init__(self) -> None:
        self.store: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []

    def create_event(self, namespace: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.calls.append("create")
        self.store[body["metadata"]["name"]] = dict(body)
        return body

    def patch_event(self, namespace: str, name: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.calls.append("patch")
        self.store[name].update(body)
        return self.store[name]

    def events(self) -> list[dict[str, Any]]:
        return list(self.store.values())


def drain(r: EventRecorder) -> None:
    while r.step():
        pass


def finished_run(fake: FakeServices) -> tuple[dict[str, object], str]:
    """A check whose last run is over: its pod Succeeded (still in the cache) and its uuid is on `/`."""
    fake.api.put(KHCHECKS, khcheck("dns"))
    pod, run = checker_pod(fake)
    return fake.kubelet.finish(pod), run


def test_twenty_rejected_reports_from_twenty_addresses_raise_no_event(
        fake_services: FakeServices, client: FlaskClient) -> None:
    _, run = finished_run(fake_services)
    answers = [post(client, OK, run_uuid=run, source=f"192.0.2.{i}").status_code for i in range(1, 21)]
    answers += [post(client, OK, run_uuid=str(uuid.uuid4()), source=f"198.51.100.{i}").status_code
                for i in range(1, 21)]
    assert set(answers) == {400}
    assert fake_services.events.recorded == []


def test_a_checker_pods_repeated_rejection_gives_one_event_a_minute_without_any_address(
        fake_services: FakeServices, client: FlaskClient) -> None:
    api, clock = EventsApi(), [1_796_119_200.0, 100.0]
    r = EventRecorder(api, "kh-0", wall=lambda: clock[0], clock=lambda: clock[1])
    fake_services.events = r  # type: ignore[assignment]
    pod, run = finished_run(fake_services)
    for _ in range(5):
        answer = post(client, OK, run_uuid=run, source=address(pod))
        assert answer.status_code == 400 and "is over" in answer.text
    drain(r)
    (event,) = api.events()
    assert event["reason"] == "ReportRejected" and event["involvedObject"]["name"] == "dns"
    assert event["message"] == (f"A report for {NS}/dns was rejected: its run is over (its pod has finished or "
                                "the run was recorded)")
    assert address(pod) not in event["message"] and r.damped == 4
    clock[0] += 61
    clock[1] += 61
    post(client, OK, run_uuid=run, source=address(pod))
    drain(r)
    assert api.events()[0]["count"] == 6 and len(api.calls) == 2


def test_a_young_pod_counts_only_for_reports_by_address_and_only_when_a_run_of_ours_may_own_it(
        fake_services: FakeServices, app: Flask, client: FlaskClient) -> None:
    triage = install(app, fake_services)
    pending_pod(fake_services)
    assert triage.behind(by_address=True)
    assert not triage.behind()  # a report naming a uuid: the young pod's label answers it already
    assert post(client, OK, run_uuid=str(uuid.uuid4())).status_code == 400


def test_a_young_pod_its_khstate_names_without_naming_the_pod_does_not_make_strangers_wait(
        fake_services: FakeServices, app: Flask, client: FlaskClient) -> None:
    """A khstate written by hand or by v2 (uuid, no run-pod claim): strangers still get 400 at once."""
    triage = install(app, fake_services)
    run = str(uuid.uuid4())
    fake_services.api.put(KHSTATES, khstate_of("dns", uuid=run))
    fake_services.api.put(PODS, build_pod(check_spec("dns"), run, fake_services.clock.wall(), REPORTING_URL))
    assert not triage.behind(by_address=True)
    assert post(client, OK).status_code == 400


def test_a_young_pod_our_run_claims_by_name_makes_strangers_by_address_wait(
        fake_services: FakeServices, app: Flask) -> None:
    triage = install(app, fake_services)
    claimed_pending_pod(fake_services)
    assert triage.behind(by_address=True)


def test_a_claimed_run_whose_pod_is_in_the_cache_makes_no_report_naming_another_uuid_wait(
        fake_services: FakeServices, app: Flask, client: FlaskClient) -> None:
    """The leader claimed a run and created its pod (no IP yet): a report naming another uuid is a
    stranger's at once; one by address may be that pod's and waits."""
    triage = install(app, fake_services, pool_wait=0.05, rescue_after=0.0)
    claimed_pending_pod(fake_services)
    assert not triage.behind()
    assert post(client, OK, run_uuid=str(uuid.uuid4())).status_code == 400
    assert triage.behind(by_address=True)


def test_a_claimed_run_whose_pod_cannot_pull_its_image_makes_no_stranger_wait(
        fake_services: FakeServices, app: Flask, client: FlaskClient) -> None:
    """A check with an image that cannot be pulled: its pod never reports, so it is no sign at all."""
    triage = install(app, fake_services)
    pod, _ = claimed_pending_pod(fake_services)
    fake_services.api.edit(PODS, NS, pod["metadata"]["name"], lambda p: p.setdefault("status", {}).update(
        containerStatuses=[{"name": "main", "state": {"waiting": {"reason": "ErrImagePull"}}}]))
    assert not triage.behind(by_address=True)
    assert post(client, OK).status_code == 400
    assert post(client, OK, run_uuid=str(uuid.uuid4())).status_code == 400


def test_a_claim_left_by_a_run_long_over_is_no_sign_when_the_caches_fill(
        fake_services: FakeServices, app: Flask, client: FlaskClient) -> None:
    """A daemon stopped mid-run leaves an open claim naming a pod that is gone; a replica starting later
    must not take it for a run about to report (its pod name carries the run's start, long ago)."""
    run = str(uuid.uuid4())
    old_pod = f"dns-{int(fake_services.clock.wall()) - 3600}"
    fake_services.api.put(KHSTATES, khstate_of("dns", uuid=run, annotations={khstate.RUN_POD: old_pod}))
    triage = install(app, fake_services)
    assert not triage.behind() and not triage.behind(by_address=True)
    assert post(client, OK, run_uuid=str(uuid.uuid4())).status_code == 400


def test_a_claim_whose_pod_never_appears_stops_counting_within_seconds(
        fake_services: FakeServices, app: Flask, client: FlaskClient) -> None:
    """A daemon that claimed a run and stopped before creating its pod: strangers wait only briefly."""
    triage = install(app, fake_services)
    claimed = f"dns-{int(fake_services.clock.wall())}"
    fake_services.api.put(KHSTATES, khstate_of("dns", uuid=str(uuid.uuid4()), annotations={khstate.RUN_POD: claimed}))
    assert triage.behind()
    fake_services.clock.advance(12)
    assert not triage.behind() and not triage.behind(by_address=True)
    assert post(client, OK, run_uuid=str(uuid.uuid4())).status_code == 400
