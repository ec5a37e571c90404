"""`kuberhealthy migrate to-v3 --in-cluster [--dry-run] [--rollback]` against the real API server
(daemon/migratelive.py): khchecks become HealthChecks with their state carried, marked as a pair; a
second run changes nothing; a run stopped half-way is finished by the next; a HealthCheck the migration
did not create is left alone; a rollback copies the state back and removes what the migration made.
With the daemon running, the switch neither doubles nor misses a run."""
from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from kuberhealthy import cli
from kuberhealthy.base.errors import NotFound
from kuberhealthy.base.times import parse_time
from kuberhealthy.kube import HEALTHCHECKS, KHCHECKS, KHJOBS, KHSTATES, Obj, Resources
from kuberhealthy.records import khstate, migrateplan, migration
from testbed.cluster.apiserver import TestCluster
from testbed.daemons.inprocess import InProcessDaemon
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

LAST_RUN = "2030-01-02T03:04:05Z"
HISTORY = [
    {"uuid": "u7", "start": "2030-01-02T03:04:00Z", "duration": "5s", "OK": True, "errors": [], "node": "n1",
     "pod": "probe-1893553440", "outcome": "reported"},
    {"uuid": "u6", "start": "2030-01-02T02:54:00Z", "duration": "4s", "OK": False, "errors": ["dns slow"],
     "node": "n2", "pod": "probe-1893552840", "outcome": "reported"},
]


def khcheck(name: str, interval: str = "1h", timeout: str = "20s", image: str = "kh-sim/ok") -> Obj:
    return {"apiVersion": KHCHECKS.api_version, "kind": "KuberhealthyCheck", "metadata": {"name": name},
            "spec": {"runInterval": interval, "timeout": timeout,
                     "podSpec": {"containers": [{"name": "main", "image": image}]}}}


def state(name: str, ns: str) -> Obj:
    """A khstate after seven runs, two of them kept in its history."""
    return {"apiVersion": KHSTATES.api_version, "kind": "KuberhealthyState",
            "metadata": {"name": name, "annotations": {khstate.FINISHED_UUID: "u7", khstate.REPORTED_UUID: "u7"}},
            "spec": {"OK": True, "Errors": [], "RunDuration": "5s", "Namespace": ns, "Node": "n1",
                     "LastRun": LAST_RUN, "AuthoritativePod": "kuberhealthy-0", "uuid": "u7", "khWorkload": "KHCheck",
                     "consecutiveFailures": 0, "successCount": 5, "failureCount": 2, "lastOK": LAST_RUN,
                     "lastFailure": "2030-01-02T02:54:04Z", "history": HISTORY}}


def migrate(cluster: TestCluster, ns: str, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, list[str]]:
    rc = cli.main(["migrate", "to-v3", "--in-cluster", "--namespace", ns, "--kubeconfig", str(cluster.kubeconfig),
                   *flags])
    return rc, capsys.readouterr().out.splitlines()


def annotations_of(obj: Obj) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


def versions(res: Resources, ns: str) -> dict[str, str]:
    out = {}
    for r in (KHCHECKS, KHSTATES, HEALTHCHECKS):
        for obj in res.list(r, ns)[0]:
            out[f"{r.plural}/{obj['metadata']['name']}"] = obj["metadata"]["resourceVersion"]
    return out


@pytest.fixture
def probe(res: Resources, namespace: str) -> Obj:
    """khcheck `probe` with a khstate of seven runs."""
    check = res.create(KHCHECKS, namespace, khcheck("probe"))
    res.create(KHSTATES, namespace, state("probe", namespace))
    return check


def test_a_khcheck_becomes_a_healthcheck_whose_status_carries_its_counters_history_and_last_run(
        cluster: TestCluster, namespace: str, res: Resources, probe: Obj, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = migrate(cluster, namespace, capsys)
    assert rc == 0
    assert out[0].startswith(f"khcheck {namespace}/probe: migrated (state carried: 7 runs, last run {LAST_RUN}")
    assert out[-1] == "1 khcheck: 1 migrated"
    hc = res.get(HEALTHCHECKS, namespace, "probe")
    assert hc["spec"]["runInterval"] == "1h" and hc["spec"]["timeout"] == "20s"
    assert hc["spec"]["podSpec"] == {"spec": probe["spec"]["podSpec"]}
    assert annotations_of(hc)[migration.MIGRATED_FROM] == probe["metadata"]["uid"]
    status = hc["status"]
    assert (status["successCount"], status["failureCount"], status["consecutiveFailures"]) == (5, 2, 0)
    assert status["lastRunUnix"] == parse_time(LAST_RUN) and status["ok"] is True and status["currentUUID"] == ""
    assert status["history"] == HISTORY and status["runDuration"] == 5_000_000_000
    marked = res.get(KHCHECKS, namespace, "probe")
    assert annotations_of(marked)[migration.MIGRATED_TO] == "probe" and migration.is_pair(marked, hc)


def test_a_second_migration_changes_nothing_and_says_so(
        cluster: TestCluster, namespace: str, res: Resources, probe: Obj, capsys: pytest.CaptureFixture[str]) -> None:
    assert migrate(cluster, namespace, capsys)[0] == 0
    before = versions(res, namespace)
    rc, out = migrate(cluster, namespace, capsys)
    assert rc == 0 and out == [f"khcheck {namespace}/probe: already migrated", "1 khcheck: 1 already migrated"]
    assert versions(res, namespace) == before


def test_a_dry_run_writes_nothing_and_says_what_it_would_do(
        cluster: TestCluster, namespace: str, res: Resources, probe: Obj, capsys: pytest.CaptureFixture[str]) -> None:
    before = versions(res, namespace)
    rc, out = migrate(cluster, namespace, capsys, "--dry-run")
    assert rc == 0 and out[0].startswith(f"khcheck {namespace}/probe: would migrate (create the HealthCheck")
    assert out[-1] == "dry run, nothing written: 1 khcheck: 1 would migrate"
    assert versions(res, namespace) == before and not res.list(HEALTHCHECKS, namespace)[0]


def test_a_healthcheck_the_migration_did_not_create_is_left_alone_named_and_the_exit_code_says_so(
        cluster: TestCluster, namespace: str, res: Resources, probe: Obj, capsys: pytest.CaptureFixture[str]) -> None:
    res.create(KHCHECKS, namespace, khcheck("taken"))
    theirs, _ = migrateplan.healthcheck_for(res.get(KHCHECKS, namespace, "taken"))
    del theirs["metadata"]["annotations"]
    theirs = res.create(HEALTHCHECKS, namespace, theirs)
    rc, out = migrate(cluster, namespace, capsys)
    assert rc == 1
    assert f"khcheck {namespace}/probe: migrated" in out[0]
    assert out[1] == (f"khcheck {namespace}/taken: refused: HealthCheck {namespace}/taken exists and this migration "
                      f"did not create it from khcheck {namespace}/taken (it carries no {migration.MIGRATED_FROM} "
                      "mark); both left alone")
    assert res.get(HEALTHCHECKS, namespace, "taken")["metadata"]["resourceVersion"] == \
        theirs["metadata"]["resourceVersion"]
    assert migration.MIGRATED_TO not in annotations_of(res.get(KHCHECKS, namespace, "taken"))


def test_a_migration_stopped_after_the_create_is_finished_by_the_next_run(
        cluster: TestCluster, namespace: str, res: Resources, probe: Obj, capsys: pytest.CaptureFixture[str]) -> None:
    created, _ = migrateplan.healthcheck_for(probe)  # what the first step creates; then the process was killed
    res.create(HEALTHCHECKS, namespace, created)
    rc, out = migrate(cluster, namespace, capsys)
    assert rc == 0 and out[0].startswith(f"khcheck {namespace}/probe: migrated (resumed")
    hc = res.get(HEALTHCHECKS, namespace, "probe")
    assert hc["status"]["successCount"] == 5 and hc["status"]["history"] == HISTORY
    assert migration.is_pair(res.get(KHCHECKS, namespace, "probe"), hc)


def test_a_rollback_copies_the_healthcheck_s_state_back_without_a_counter_stepping_back_and_removes_the_pair(
        cluster: TestCluster, namespace: str, res: Resources, probe: Obj, capsys: pytest.CaptureFixture[str]) -> None:
    assert migrate(cluster, namespace, capsys)[0] == 0
    hc = res.get(HEALTHCHECKS, namespace, "probe")
    later = (parse_time(LAST_RUN) or 0) + 3600  # the HealthCheck ran on: one more failure
    newest = {"uuid": "u8", "start": "2030-01-02T04:04:00Z", "duration": "3s", "OK": False, "errors": ["boom"],
              "node": "n3", "pod": "probe-x", "outcome": "reported"}
    hc["status"].update({"ok": False, "errors": ["boom"], "failureCount": 3, "consecutiveFailures": 1,
                         "lastRunUnix": later, "lastFailureUnix": later, "history": [newest, *HISTORY]})
    hc["status"]["successCount"] = 1  # edited down by hand: the khstate's 5 stays
    res.replace(HEALTHCHECKS.status(), namespace, "probe", hc)
    rc, out = migrate(cluster, namespace, capsys, "--rollback")
    assert rc == 0 and out[0].startswith(f"khcheck {namespace}/probe: rolled back (state copied back")
    spec = res.get(KHSTATES, namespace, "probe")["spec"]
    assert (spec["OK"], spec["Errors"], spec["failureCount"], spec["successCount"]) == (False, ["boom"], 3, 5)
    assert parse_time(spec["LastRun"]) == later and spec["consecutiveFailures"] == 1
    assert [e["uuid"] for e in spec["history"]] == ["u8", "u7", "u6"]
    assert migration.MIGRATED_TO not in annotations_of(res.get(KHCHECKS, namespace, "probe"))
    with pytest.raises(NotFound):
        res.get(HEALTHCHECKS, namespace, "probe")
    rc, out = migrate(cluster, namespace, capsys, "--rollback")
    assert rc == 0 and out == [f"khcheck {namespace}/probe: not migrated", "1 khcheck: 1 not migrated"]


def test_khjobs_are_left_alone_and_said_to_be(
        cluster: TestCluster, namespace: str, res: Resources, capsys: pytest.CaptureFixture[str]) -> None:
    res.create(KHJOBS, namespace, {"apiVersion": KHJOBS.api_version, "kind": "KuberhealthyJob",
                                   "metadata": {"name": "once"},
                                   "spec": {"podSpec": {"containers": [{"name": "main", "image": "kh-sim/ok"}]}}})
    rc, out = migrate(cluster, namespace, capsys)
    assert rc == 0 and out == [f"khjob {namespace}/once: left alone (a khjob runs once)",
                               "0 khchecks: nothing to do; 1 khjob left alone"]
    assert not res.list(HEALTHCHECKS, namespace)[0]


# --- with the daemon running -----------------------------------------------------------------------------

INTERVAL = 3.0


def starts(kubelet: SimKubelet, name: str) -> list[float]:
    """When each checker pod of the check was first seen, oldest first (khcheck's and HealthCheck's)."""
    return sorted(r.seen for r in kubelet.records.values() if r.name.startswith(f"{name}-") and r.seen is not None)


def runs(res: Resources, ns: str, name: str) -> int:
    try:
        status: dict[str, Any] = res.get(HEALTHCHECKS, ns, name).get("status") or {}
    except NotFound:
        return 0
    return int(status.get("successCount") or 0) + int(status.get("failureCount") or 0)


@pytest.fixture
def daemon_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The daemon's checkChangeDebounce: the in-process daemon's 0s unless a test says otherwise."""
    return {"checkChangeDebounce": getattr(request, "param", "0s")}


@pytest.mark.parametrize(("daemon_settings", "phase"), [
    pytest.param("0s", 0.0, id="right-after-a-run-started"),
    pytest.param("0s", INTERVAL / 2, id="between-two-runs"),
    pytest.param("10s", 0.0, id="with-the-default-debounce"),  # a switch is acted on at once, not debounced
], indirect=["daemon_settings"])
def test_with_the_daemon_running_the_switch_neither_doubles_nor_misses_a_run_and_back(
        cluster: TestCluster, namespace: str, res: Resources, daemon: InProcessDaemon, kubelet: SimKubelet,
        phase: float, capsys: pytest.CaptureFixture[str]) -> None:
    res.create(KHCHECKS, namespace, khcheck("beat", interval=f"{INTERVAL:.0f}s", timeout="10s"))
    third = wait_for(lambda: starts(kubelet, "beat")[2:3], timeout=60, what="three runs of the khcheck")[0]
    time.sleep(max(0.0, third + phase - time.monotonic()))  # where in the interval the migration starts
    rc, out = migrate(cluster, namespace, capsys)
    assert rc == 0, out
    switched = time.monotonic()
    before = khstate.Spec.of(res.get(KHSTATES, namespace, "beat"))
    wait_for(lambda: runs(res, namespace, "beat") >= 3 + 3, timeout=60, what="three runs of the HealthCheck")
    after = res.get(KHSTATES, namespace, "beat")
    assert khstate.Spec.of(after).last_run == before.last_run, "the khcheck ran after the switch"
    rc, out = migrate(cluster, namespace, capsys, "--rollback")
    assert rc == 0, out
    back = time.monotonic()
    wait_for(lambda: len([t for t in starts(kubelet, "beat") if t > back]) >= 3, timeout=60,
             what="three runs of the khcheck after the rollback")
    seen = starts(kubelet, "beat")
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(seen)]
    around = [round(t - switched, 2) for t in seen]
    assert all(g >= INTERVAL / 2 for g in gaps), f"a run doubled: gaps {gaps}, starts from the switch {around}"
    assert all(g <= INTERVAL * 1.5 for g in gaps), f"a run missed: gaps {gaps}, starts from the switch {around}"

