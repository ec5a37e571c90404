"""CONTRACT sections 1, 2, 4, 7, 8 and 9: election, config reload, reapers, a dead InfluxDB, shutdown.

Tests here run in file order and build on each other (one story per module, to keep the suite fast):
replica A takes an expired Lease, runs checks with InfluxDB down and aggressive reapers, picks up a
config change, is stopped with SIGTERM; replica B then takes the released Lease, loses it to a thief,
and is stopped with SIGINT.
"""
from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.contract import (
    create_lease,
    free_tcp_port_closed,
    get_json,
    get_or_none,
    khc,
    khcheck,
    khj,
    khjob,
    khs,
    khstate,
    lease_holder,
    lease_path,
    micro_now,
    new_namespace,
    parse_metrics,
    parse_rfc3339,
    pods_path,
    start_daemon,
    wait_for,
    wait_ready,
)
from tests.harness.cluster import TestCluster
from tests.harness.daemon import DaemonProcess
from tests.sim.kubelet import SimKubelet

LEASE = "kh-contract"
ELECTION = {"leaseName": LEASE, "leaseDuration": "6s", "renewDeadline": "4s", "retryPeriod": "1s"}


@dataclass
class Story:
    cluster: TestCluster
    ns: str
    kubelet: SimKubelet
    workdir: Path
    a: DaemonProcess
    b: DaemonProcess | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    def settings(self) -> dict[str, Any]:
        return {"targetNamespace": self.ns, "leaderElection": ELECTION,
                "enableInflux": True, "influxURL": f"http://127.0.0.1:{free_tcp_port_closed()}", "influxDB": "kh",
                "maxCheckPodAge": "3s", "maxKHJobAge": "3s", "checkReaperRunInterval": "1s",
                "stateReaperInterval": "1s"}


@pytest.fixture(scope="module")
def story(cluster: TestCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    ns = new_namespace(cluster, "clife")
    # an earlier leader whose Lease is about to expire
    create_lease(cluster, ns, LEASE, "old-leader", 3)
    cluster.request("POST", khc(ns), khcheck("pulse", "kh-sim/ok", interval="1s", timeout="30s"))
    cluster.request("POST", khc(ns), khcheck("oncea", "kh-sim/ok", interval="1h", timeout="30s"))
    cluster.request("POST", khc(ns), khcheck("stuck", "kh-sim/hang-silent", interval="1h", timeout="10m"))
    cluster.request("POST", khj(ns), khjob("jobx", "kh-sim/ok"))
    cluster.request("POST", khs(ns), khstate("orphan", OK=True, Errors=[], RunDuration="1s", Namespace=ns, Node="n",
                                             LastRun="2024-05-01T10:00:00Z", AuthoritativePod="old-leader",
                                             uuid=str(uuid.uuid4())))
    kubelet = SimKubelet(str(cluster.kubeconfig), nodes=3, namespace=ns).start()
    work = tmp_path_factory.mktemp("life")
    s = Story(cluster, ns, kubelet, work, a=None)  # type: ignore[arg-type]
    s.a = start_daemon(cluster, work, "kh-life-a", ns, s.settings())
    try:
        wait_ready(s.a)
        yield s
    finally:
        for d in (s.a, s.b):
            if d is not None:
                d.stop()
        kubelet.stop()


def pods(s: Story, check: str | None = None) -> list[dict[str, Any]]:
    path = pods_path(s.ns) + (f"?labelSelector=kuberhealthy-check-name%3D{check}" if check else "")
    return sorted(s.cluster.request("GET", path)["items"], key=lambda p: p["metadata"]["creationTimestamp"])


def live(p: dict[str, Any]) -> bool:
    return "deletionTimestamp" not in p["metadata"] and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")


def live_pod(s: Story, check: str) -> dict[str, Any]:
    def one() -> dict[str, Any]:
        found = [p for p in pods(s, check) if live(p) and p.get("status", {}).get("phase") == "Running"]
        assert len(found) == 1, f"{len(found)} running {check} pods"
        return found[0]
    return wait_for(one, 60, what=f"a running {check} pod")


def env_value(p: dict[str, Any], name: str) -> str | None:
    for v in p["spec"]["containers"][0].get("env") or []:
        if v["name"] == name:
            return v.get("value")
    return None


def authoritative(s: Story, name: str) -> str:
    obj = get_or_none(s.cluster, khs(s.ns, name))
    return str((obj or {}).get("spec", {}).get("AuthoritativePod") or "")


# --- section 7: election -----------------------------------------------------------------------------------

def test_a_replica_takes_over_an_expired_lease_and_reports_itself_as_current_master(story: Story) -> None:
    s = story
    wait_for(lambda: lease_holder(s.cluster, s.ns, LEASE) == s.a.name, 60, what="replica A holds the Lease")
    wait_for(lambda: get_json(s.a.url)["CurrentMaster"] == s.a.name, 30, what="CurrentMaster is replica A")
    wait_for(lambda: authoritative(s, "pulse") == s.a.name, 60, what="replica A runs pulse")
    samples = parse_metrics(requests.get(s.a.url + "/metrics", timeout=30).text)
    assert [lab for n, lab, _ in samples if n == "kuberhealthy_running"] == [{"current_master": s.a.name}]


# --- section 4: no controller pod ----------------------------------------------------------------------------

def test_without_its_own_pod_in_the_cluster_checker_pods_have_no_owner_and_runs_proceed(story: Story) -> None:
    s = story
    wait_for(lambda: authoritative(s, "pulse") == s.a.name, 60, what="pulse ran")
    assert get_or_none(s.cluster, pods_path(s.ns, s.a.name)) is None
    for p in pods(s):
        assert not p["metadata"].get("ownerReferences"), p["metadata"]["name"]


# --- section 8: InfluxDB down ----------------------------------------------------------------------------------

def test_a_down_influxdb_never_blocks_or_breaks_checks(story: Story) -> None:
    s = story

    def runs() -> int:
        n = sum(1 for k, r in s.kubelet.records.items() if k.startswith(f"{s.ns}/pulse-")
                and r.report is not None and r.report.status == 200)
        assert n >= 4, f"{n} pulse runs reported"
        return n
    wait_for(runs, 60, what="four pulse runs with InfluxDB unreachable")
    spec = s.cluster.request("GET", khs(s.ns, "pulse"))["spec"]
    assert spec["OK"] is True and spec["Errors"] == []


# --- section 2: reapers --------------------------------------------------------------------------------------

def test_finished_checker_pods_and_completed_khjobs_older_than_their_max_age_are_deleted(story: Story) -> None:
    """maxCheckPodAge and maxKHJobAge are 3s and the reaper runs every second; 15s is plenty for both.
    (v2 silently raised them to at least 30s and 5m; the contract names no such floors.)"""
    s = story
    # oncea runs once (runInterval 1h): only the reaper can remove its finished pod
    wait_for(lambda: [r for k, r in s.kubelet.records.items() if k.startswith(f"{s.ns}/oncea-") and r.exited], 60,
             what="oncea's pod finished")
    wait_for(lambda: (get_or_none(s.cluster, khj(s.ns, "jobx")) or {"spec": {"phase": "Completed"}})
             ["spec"].get("phase") == "Completed", 60, what="jobx completed")
    deadline = time.monotonic() + 15
    pod_gone = job_gone = False
    while time.monotonic() < deadline and not (pod_gone and job_gone):
        finished = [r for k, r in s.kubelet.records.items() if k.startswith(f"{s.ns}/oncea-") and r.exited]
        pod_gone = bool(finished) and all(r.deleted for r in finished)
        job_gone = get_or_none(s.cluster, khj(s.ns, "jobx")) is None
        time.sleep(0.1)
    assert pod_gone, "oncea's finished pod outlived maxCheckPodAge (3s) by 15s"
    assert job_gone, "the completed khjob outlived maxKHJobAge (3s) by 15s"
    assert any(k.startswith(f"{s.ns}/jobx-") for k in s.kubelet.records), "jobx never ran"


def test_orphan_khstates_are_removed_and_the_others_kept(story: Story) -> None:
    s = story
    wait_for(lambda: get_or_none(s.cluster, khs(s.ns, "orphan")) is None, 60, what="the orphan khstate removed")
    assert get_or_none(s.cluster, khs(s.ns, "pulse")) is not None
    assert get_or_none(s.cluster, khs(s.ns, "stuck")) is not None


# --- section 2: reload ------------------------------------------------------------------------------------------

def test_a_config_file_change_is_picked_up_and_restarts_checks_on_the_leader(story: Story) -> None:
    s = story
    before = live_pod(s, "stuck")
    new_url = s.a.url + "/externalCheckStatus?reloaded=1"
    assert env_value(before, "KH_REPORTING_URL") != new_url
    s.a.set_reporting_url(new_url)

    def restarted() -> dict[str, Any]:
        p = live_pod(s, "stuck")
        assert p["metadata"]["uid"] != before["metadata"]["uid"], "stuck not restarted yet"
        return p
    after = wait_for(restarted, 60, what="stuck restarted after the config change")
    assert env_value(after, "KH_REPORTING_URL") == new_url
    gone = get_or_none(s.cluster, pods_path(s.ns, before["metadata"]["name"]))
    assert gone is None or gone["metadata"]["uid"] != before["metadata"]["uid"] or \
        "deletionTimestamp" in gone["metadata"], "the cancelled run's pod was left running"

    def pulse_uses_new_url() -> bool:
        return any(env_value(p, "KH_REPORTING_URL") == new_url for p in pods(s, "pulse"))
    wait_for(pulse_uses_new_url, 30, what="pulse pods with the new URL")


# --- section 9: SIGTERM ----------------------------------------------------------------------------------------

def sigterm_a(s: Story) -> dict[str, Any]:
    if "rc" not in s.facts:
        victim = live_pod(s, "stuck")
        s.facts["victim"] = victim
        s.a.signal(signal.SIGTERM)
        s.facts["rc"] = s.a.wait(60)  # the chart's termination grace period
        s.facts["pod_after"] = get_or_none(s.cluster, pods_path(s.ns, victim["metadata"]["name"]))
        s.facts["holder_after"] = lease_holder(s.cluster, s.ns, LEASE)
        s.facts["live_after"] = [p["metadata"]["name"] for p in pods(s) if live(p)]
    return s.facts


def test_sigterm_cancels_runs_removes_their_pods_releases_the_lease_and_exits(story: Story) -> None:
    s = story
    wait_for(lambda: lease_holder(s.cluster, s.ns, LEASE) == s.a.name, 60, what="A leads")
    f = sigterm_a(s)
    assert f["rc"] == 0, f"exit status {f['rc']}:\n{s.a.log()[-3000:]}"
    victim = f["victim"]
    after = f["pod_after"]
    assert after is None or after["metadata"]["uid"] != victim["metadata"]["uid"] or \
        "deletionTimestamp" in after["metadata"], "the running checker pod was left behind"
    assert f["live_after"] == [], f"live checker pods left after shutdown: {f['live_after']}"
    assert f["holder_after"] in ("", None), f"Lease not released: held by {f['holder_after']!r}"
    with pytest.raises(requests.ConnectionError):
        requests.get(s.a.url + "/healthz", timeout=5)


# --- section 7: B takes over, loses the Lease; SIGINT ------------------------------------------------------------

def ensure_b(s: Story) -> DaemonProcess:
    sigterm_a(s)
    if s.b is None:
        s.b = start_daemon(s.cluster, s.workdir, "kh-life-b", s.ns, s.settings())
        wait_ready(s.b)
    return s.b


def test_another_replica_takes_the_released_lease_and_runs_the_checks(story: Story) -> None:
    s = story
    b = ensure_b(s)
    wait_for(lambda: lease_holder(s.cluster, s.ns, LEASE) == b.name, 60, what="B holds the Lease")
    wait_for(lambda: authoritative(s, "pulse") == b.name, 60, what="B runs pulse")
    assert get_json(b.url)["CurrentMaster"] == b.name


def test_a_leader_that_loses_its_lease_stops_its_checks(story: Story) -> None:
    s = story
    b = ensure_b(s)
    wait_for(lambda: authoritative(s, "pulse") == b.name, 60, what="B runs pulse")
    live_pod(s, "stuck")
    s.cluster.request("PATCH", lease_path(s.ns, LEASE),
                      {"spec": {"holderIdentity": "thief", "leaseDurationSeconds": 3600, "renewTime": micro_now(),
                                "acquireTime": micro_now()}},
                      content_type="application/merge-patch+json")
    s.facts["stolen"] = True
    wait_for(lambda: get_json(b.url)["CurrentMaster"] == "thief", 30, what="CurrentMaster is the thief")

    def quiet() -> bool:
        ps = pods(s)
        assert not [p["metadata"]["name"] for p in ps if live(p)], "checker pods still live"
        newest = max(parse_rfc3339(p["metadata"]["creationTimestamp"]).timestamp() for p in ps) if ps else 0
        assert time.time() - newest > 4, "pods still being created"
        return True
    wait_for(quiet, 60, what="B stopped running checks")
    assert lease_holder(s.cluster, s.ns, LEASE) == "thief"


def test_sigint_stops_gracefully_and_leaves_a_lease_it_does_not_hold_alone(story: Story) -> None:
    s = story
    b = ensure_b(s)
    wait_ready(b)
    b.signal(signal.SIGINT)
    rc = b.wait(60)
    assert rc == 0, f"exit status {rc}:\n{b.log()[-3000:]}"
    if s.facts.get("stolen"):
        assert lease_holder(s.cluster, s.ns, LEASE) == "thief"
    else:
        assert lease_holder(s.cluster, s.ns, LEASE) in ("", None)

