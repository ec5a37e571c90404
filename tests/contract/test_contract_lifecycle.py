"""docs/interface.md (install, configuration, checker pods, leader election, InfluxDB, shutdown): election,
config reload, reapers, a dead InfluxDB, shutdown.

Every test sets up what it needs and runs alone or in any order. One replica for the module (`leader`)
takes over an expired Lease and runs checks with InfluxDB down and aggressive reapers; each test on it
uses checks of its own. The tests that reload, stop or dethrone a replica start their own replicas in
a namespace of their own (`daemons`, `kubelet`).
"""
from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests

from testbed.clients.formats import parse_metrics, parse_rfc3339
from testbed.clients.rawhttp import get_json
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import (
    MERGE_PATCH,
    khc,
    khcheck,
    khj,
    khjob,
    khs,
    khstate,
    lease_path,
    micro_now,
    pods_path,
)
from testbed.cluster.loopback import free_port
from testbed.cluster.objects import (
    checker_pods,
    create_lease,
    create_namespace,
    get_or_none,
    lease_holder,
    state_spec,
)
from testbed.daemons.process import DaemonProcess
from testbed.pytest_plugin import Daemons
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

LEASE = "kh-contract"
ELECTION = {"leaseName": LEASE, "leaseDuration": "6s", "renewDeadline": "4s", "retryPeriod": "1s"}


def settings(ns: str) -> dict[str, Any]:
    """A replica for `ns`: Lease election, InfluxDB unreachable, finished pods and khjobs reaped after 3s."""
    return {"targetNamespace": ns, "leaderElection": ELECTION,
            "enableInflux": True, "influxURL": f"http://127.0.0.1:{free_port()}", "influxDB": "kh",
            "maxCheckPodAge": "3s", "maxKHJobAge": "3s", "checkReaperRunInterval": "1s",
            "stateReaperInterval": "1s"}


PULSE = khcheck("pulse", interval="1s")  # runs every second
STUCK = khcheck("stuck", "kh-sim/hang-silent", interval="1h", timeout="10m")  # one run whose pod keeps running


def create_checks(cluster: TestCluster, ns: str, *bodies: dict[str, Any]) -> None:
    for body in bodies:
        cluster.request("POST", khc(ns), body)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@dataclass
class Leader:
    cluster: TestCluster
    ns: str
    kubelet: SimKubelet
    a: DaemonProcess


@pytest.fixture(scope="module")
def leader(cluster: TestCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Leader]:
    """Replica A, started beside an earlier leader's Lease that is about to expire."""
    ns = create_namespace(cluster, "clife")
    create_lease(cluster, ns, LEASE, "old-leader", 3)
    kubelet = SimKubelet(str(cluster.kubeconfig), nodes=3, namespace=ns).start()
    a = DaemonProcess(cluster, tmp_path_factory.mktemp("life"), "kh-life-a", ns, settings(ns))
    try:
        a.start().wait_serving()
        yield Leader(cluster, ns, kubelet, a)
    finally:
        a.stop()
        kubelet.stop()


def live(p: dict[str, Any]) -> bool:
    return "deletionTimestamp" not in p["metadata"] and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")


def live_pod(cluster: TestCluster, ns: str, check: str) -> dict[str, Any]:
    def one() -> dict[str, Any]:
        found = [p for p in checker_pods(cluster, ns, check)
                 if live(p) and p.get("status", {}).get("phase") == "Running"]
        assert len(found) == 1, f"{len(found)} running {check} pods"
        return found[0]
    return wait_for(one, 60, what=f"a running {check} pod")


def env_value(p: dict[str, Any], name: str) -> str | None:
    for v in p["spec"]["containers"][0].get("env") or []:
        if v["name"] == name:
            return v.get("value")
    return None


def authoritative(cluster: TestCluster, ns: str, name: str) -> str:
    return str(state_spec(cluster, ns, name).get("AuthoritativePod") or "")


def leads(cluster: TestCluster, ns: str, d: DaemonProcess) -> None:
    wait_for(lambda: lease_holder(cluster, ns, LEASE) == d.name, 60, what=f"{d.name} holds the Lease")


def leading_replica(cluster: TestCluster, daemons: Daemons, name: str, ns: str) -> DaemonProcess:
    """A replica for `ns`, ready and holding the Lease."""
    d = daemons(name, settings(ns)).start().wait_serving()
    leads(cluster, ns, d)
    return d


def steal_lease(cluster: TestCluster, ns: str, d: DaemonProcess) -> None:
    """Another identity takes the Lease for an hour; returns once `d` shows it as CurrentMaster."""
    cluster.request("PATCH", lease_path(ns, LEASE),
                    {"spec": {"holderIdentity": "thief", "leaseDurationSeconds": 3600, "renewTime": micro_now(),
                              "acquireTime": micro_now()}},
                    content_type=MERGE_PATCH)
    wait_for(lambda: get_json(d.url)["CurrentMaster"] == "thief", 30, what="CurrentMaster is the thief")


# --- leader election --------------------------------------------------------------------------------------

def test_a_replica_takes_over_an_expired_lease_and_reports_itself_as_current_master(leader: Leader) -> None:
    s, pulse = leader, unique("pulse")
    s.cluster.request("POST", khc(s.ns), khcheck(pulse, interval="1s"))
    leads(s.cluster, s.ns, s.a)
    wait_for(lambda: get_json(s.a.url)["CurrentMaster"] == s.a.name, 30, what="CurrentMaster is replica A")
    wait_for(lambda: authoritative(s.cluster, s.ns, pulse) == s.a.name, 60, what="replica A runs the check")
    samples = parse_metrics(requests.get(s.a.url + "/metrics", timeout=30).text)
    assert [lab for n, lab, _ in samples if n == "kuberhealthy_running"] == [{"current_master": s.a.name}]


# --- checker pods: no controller pod -------------------------------------------------------------------------

def test_without_its_own_pod_in_the_cluster_checker_pods_have_no_owner_and_runs_proceed(leader: Leader) -> None:
    s, check = leader, unique("owner")
    s.cluster.request("POST", khc(s.ns), khcheck(check, interval="1s"))
    wait_for(lambda: state_spec(s.cluster, s.ns, check).get("LastRun"), 60, what=f"{check} ran")
    assert get_or_none(s.cluster, pods_path(s.ns, s.a.name)) is None
    pods = checker_pods(s.cluster, s.ns, check)
    assert pods
    for p in pods:
        assert not p["metadata"].get("ownerReferences"), p["metadata"]["name"]


# --- InfluxDB down ----------------------------------------------------------------------------------------

def test_a_down_influxdb_never_blocks_or_breaks_checks(leader: Leader) -> None:
    s, pulse = leader, unique("influx")
    s.cluster.request("POST", khc(s.ns), khcheck(pulse, interval="1s"))

    def runs() -> int:
        n = sum(1 for k, r in s.kubelet.records.items() if k.startswith(f"{s.ns}/{pulse}-")
                and r.report is not None and r.report.status == 200)
        assert n >= 4, f"{n} {pulse} runs reported"
        return n
    wait_for(runs, 60, what="four runs with InfluxDB unreachable")
    spec = s.cluster.request("GET", khs(s.ns, pulse))["spec"]
    assert spec["OK"] is True and spec["Errors"] == []


# --- clean-up (reapers) --------------------------------------------------------------------------------------

def test_finished_checker_pods_and_completed_khjobs_older_than_their_max_age_are_deleted(leader: Leader) -> None:
    """maxCheckPodAge and maxKHJobAge are 3s and the reaper runs every second; 15s is plenty for both.
    (v2 silently raised them to at least 30s and 5m; the contract names no such floors.)"""
    s, once, job = leader, unique("oncea"), unique("jobx")
    s.cluster.request("POST", khc(s.ns), khcheck(once, interval="1h"))  # runs once: only the reaper removes its pod
    s.cluster.request("POST", khj(s.ns), khjob(job))

    def finished() -> list[Any]:
        return [r for k, r in s.kubelet.records.items() if k.startswith(f"{s.ns}/{once}-") and r.exited]
    wait_for(finished, 60, what=f"{once}'s pod finished")
    wait_for(lambda: (get_or_none(s.cluster, khj(s.ns, job)) or {"spec": {"phase": "Completed"}})
             ["spec"].get("phase") == "Completed", 60, what=f"{job} completed")
    deadline = time.monotonic() + 15
    pod_gone = job_gone = False
    while time.monotonic() < deadline and not (pod_gone and job_gone):
        done = finished()
        pod_gone = bool(done) and all(r.deleted for r in done)
        job_gone = get_or_none(s.cluster, khj(s.ns, job)) is None
        time.sleep(0.1)
    assert pod_gone, f"{once}'s finished pod outlived maxCheckPodAge (3s) by 15s"
    assert job_gone, "the completed khjob outlived maxKHJobAge (3s) by 15s"
    assert any(k.startswith(f"{s.ns}/{job}-") for k in s.kubelet.records), f"{job} never ran"


def test_orphan_khstates_are_removed_and_the_others_kept(leader: Leader) -> None:
    s, orphan, kept = leader, unique("orphan"), unique("kept")
    s.cluster.request("POST", khc(s.ns), khcheck(kept, interval="1h"))
    wait_for(lambda: state_spec(s.cluster, s.ns, kept), 60, what=f"{kept}'s khstate")
    s.cluster.request("POST", khs(s.ns), khstate(orphan, OK=True, Errors=[], RunDuration="1s", Namespace=s.ns,
                                                 Node="n", LastRun="2024-05-01T10:00:00Z",
                                                 AuthoritativePod="old-leader", uuid=str(uuid.uuid4())))
    wait_for(lambda: get_or_none(s.cluster, khs(s.ns, orphan)) is None, 60, what="the orphan khstate removed")
    assert get_or_none(s.cluster, khs(s.ns, kept)) is not None


# --- configuration: reload ---------------------------------------------------------------------------------------

def test_a_config_file_change_is_picked_up_and_restarts_checks_on_the_leader(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, daemons: Daemons) -> None:
    ns = namespace
    create_checks(cluster, ns, PULSE, STUCK)
    a = leading_replica(cluster, daemons, "kh-reload", ns)
    before = live_pod(cluster, ns, "stuck")
    new_url = a.url + "/externalCheckStatus?reloaded=1"
    assert env_value(before, "KH_REPORTING_URL") != new_url
    a.set_reporting_url(new_url)

    def restarted() -> dict[str, Any]:
        p = live_pod(cluster, ns, "stuck")
        assert p["metadata"]["uid"] != before["metadata"]["uid"], "stuck not restarted yet"
        return p
    after = wait_for(restarted, 60, what="stuck restarted after the config change")
    assert env_value(after, "KH_REPORTING_URL") == new_url
    gone = get_or_none(cluster, pods_path(ns, before["metadata"]["name"]))
    assert gone is None or gone["metadata"]["uid"] != before["metadata"]["uid"] or \
        "deletionTimestamp" in gone["metadata"], "the cancelled run's pod was left running"

    def pulse_uses_new_url() -> bool:
        return any(env_value(p, "KH_REPORTING_URL") == new_url for p in checker_pods(cluster, ns, "pulse"))
    wait_for(pulse_uses_new_url, 30, what="pulse pods with the new URL")


# --- shutdown: SIGTERM -----------------------------------------------------------------------------------------

def test_sigterm_cancels_runs_removes_their_pods_releases_the_lease_and_exits(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, daemons: Daemons) -> None:
    ns = namespace
    create_checks(cluster, ns, STUCK)
    a = leading_replica(cluster, daemons, "kh-term", ns)
    victim = live_pod(cluster, ns, "stuck")
    a.signal(signal.SIGTERM)
    rc = a.wait(60)  # the chart's termination grace period
    after = get_or_none(cluster, pods_path(ns, victim["metadata"]["name"]))
    holder = lease_holder(cluster, ns, LEASE)
    live_after = [p["metadata"]["name"] for p in checker_pods(cluster, ns) if live(p)]
    assert rc == 0, f"exit status {rc}:\n{a.log()[-3000:]}"
    assert after is None or after["metadata"]["uid"] != victim["metadata"]["uid"] or \
        "deletionTimestamp" in after["metadata"], "the running checker pod was left behind"
    assert live_after == [], f"live checker pods left after shutdown: {live_after}"
    assert holder in ("", None), f"Lease not released: held by {holder!r}"
    with pytest.raises(requests.ConnectionError):
        requests.get(a.url + "/healthz", timeout=5)



# --- leader election: a standby takes over, a leader loses the Lease; SIGINT ------------------------------------

def test_another_replica_takes_the_released_lease_and_runs_the_checks(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, daemons: Daemons) -> None:
    ns = namespace
    create_checks(cluster, ns, PULSE)
    a = leading_replica(cluster, daemons, "kh-first", ns)
    a.signal(signal.SIGTERM)
    assert a.wait(60) == 0, a.log()[-3000:]
    b = leading_replica(cluster, daemons, "kh-second", ns)
    wait_for(lambda: authoritative(cluster, ns, "pulse") == b.name, 60, what="the second replica runs pulse")
    assert get_json(b.url)["CurrentMaster"] == b.name


def test_a_leader_that_loses_its_lease_stops_its_checks(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, daemons: Daemons) -> None:
    ns = namespace
    create_checks(cluster, ns, PULSE, STUCK)
    b = leading_replica(cluster, daemons, "kh-loser", ns)
    wait_for(lambda: authoritative(cluster, ns, "pulse") == b.name, 60, what="the leader runs pulse")
    live_pod(cluster, ns, "stuck")
    steal_lease(cluster, ns, b)

    def quiet() -> bool:
        ps = checker_pods(cluster, ns)
        assert not [p["metadata"]["name"] for p in ps if live(p)], "checker pods still live"
        newest = max(parse_rfc3339(p["metadata"]["creationTimestamp"]).timestamp() for p in ps) if ps else 0
        assert time.time() - newest > 4, "pods still being created"
        return True
    wait_for(quiet, 60, what="the dethroned leader stopped running checks")
    assert lease_holder(cluster, ns, LEASE) == "thief"


def test_sigint_stops_gracefully_and_leaves_a_lease_it_does_not_hold_alone(
        cluster: TestCluster, namespace: str, kubelet: SimKubelet, daemons: Daemons) -> None:
    ns = namespace
    b = leading_replica(cluster, daemons, "kh-int", ns)
    steal_lease(cluster, ns, b)
    b.signal(signal.SIGINT)
    rc = b.wait(60)
    assert rc == 0, f"exit status {rc}:\n{b.log()[-3000:]}"
    assert lease_holder(cluster, ns, LEASE) == "thief"
