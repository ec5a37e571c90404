"""Kuberhealthy v3's HealthChecks on the real node, with the real image and chart: a HealthCheck shaped
like v3's own test manifest (a curl checker reporting to `/check`), a checker on a v3-style client that
refuses any reporting path but `/check`, a HealthCheck left behind by upstream v3 (its status, its
finalizer, a finished checker pod with only v3's labels) run on and then deleted, and a live migration
(`kuberhealthy migrate to-v3 --in-cluster`) with the Lease holder changing in the middle.

Numbered before test_40_upgrade: that module leaves `reportAuth: token` set, and v3-style checkers send
no token. There is no cluster DNS: every podSpec maps the Service's name with `hostAliases`, and a
HealthCheck's reporting URL is the v2 one with its last segment replaced by `check`.
"""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from testbed.node.e2e import E2E, HC_GROUP, HC_LABEL, newest_run, poll
from testbed.paths import REPO
from testbed.terminal import say

CURL = "localhost/kh-e2e/curl-check:e2e"
V3_CLIENT = "localhost/kh-e2e/v3-check:e2e"
SHELL = "localhost/kh-e2e/shell-check:e2e"
V3_CLIENT_SCRIPT = REPO / "tests" / "e2e" / "images" / "v3-check" / "check.sh"
RUN_UUID = "kh-run-uuid"  # v3's label and annotation on a checker pod
V3_LEASE = "kuberhealthy-controller"  # upstream v3's leader-election Lease, in the daemon's namespace
V3_FINALIZER = "kuberhealthy.io/healthcheck"
MIGRATED_TO = "kuberhealthy.github.io/migrated-to"
MIGRATED_FROM = "kuberhealthy.github.io/migrated-from"
MIGRATE_NS = "kh-e2e-migrate"  # the live migration's own namespace: `--namespace` takes every khcheck in it
V3_FAIL_REASON = "the e2e v3-style check fails on purpose"

# v3's own test manifest's checker (tests/healthcheck-test.yaml upstream), with a shorter wait.
V3_TEST_SCRIPT = """set -x
sleep 5
report='{"OK":true,"Errors":[]}'
echo "Reporting to $KH_REPORTING_URL with KH_RUN_UUID=$KH_RUN_UUID payload: $report"
curl -v --fail-with-body \\
  -H "Content-Type: application/json" \\
  -H "kh-run-uuid: $KH_RUN_UUID" \\
  -d "$report" "$KH_REPORTING_URL"
echo "Report sent"
"""


def _v3_pod_spec(kh: E2E, script: str = V3_TEST_SCRIPT) -> dict[str, Any]:
    return kh.pod_spec(CURL, container={"command": ["sh", "-c", script]}, restartPolicy="Never")


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env") or []}


def _log_of(kh: E2E, pod: dict[str, Any], needle: str) -> str:
    """The pod's log once it holds `needle` (the checker may still be running)."""
    name, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
    text: str = poll(lambda: (log := kh.logs(name, ns)) and needle in log and log, 90, f"{needle!r} in {name}'s log")
    return text


def _gone(kh: E2E, kind: str, name: str, namespace: str) -> None:
    """Delete and wait until it is gone; a HealthCheck still held by a finalizer after a minute has it
    taken off (so a failed test leaves nothing stuck), then the test fails."""
    kh.delete(kind, name, namespace)
    try:
        poll(lambda: kh.get(kind, name, namespace) is None, 60, f"{kind} {namespace}/{name} to go")
    except AssertionError:
        kh.kubectl("patch", kind, name, "-n", namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
                   check=False)
        raise


def _delete_hc(kh: E2E, name: str, namespace: str | None = None) -> None:
    ns = namespace or kh.checks_namespace
    try:
        _gone(kh, "healthcheck", name, ns)
    finally:
        kh.kubectl("delete", "pods", "-n", ns, "-l", f"{HC_LABEL}={name}", "--ignore-not-found", "--wait=false",
                   check=False)


def _json(kh: E2E, namespace: str) -> dict[str, Any]:
    resp = kh.http(f"/json?namespace={namespace}")
    resp.raise_for_status()
    return dict(resp.json())


# --- 1. v3's own test, on the real node --------------------------------------------------------------


def test_a_healthcheck_shaped_like_v3s_own_test_runs_a_curl_checker_that_reports_to_check(kh: E2E) -> None:
    name, ns = "v3-shaped", kh.checks_namespace
    started = int(time.time())
    kh.apply(kh.healthcheck(name, _v3_pod_spec(kh), run_interval="40s", timeout="30s", singleRunOnly=False))
    try:
        pod = poll(lambda: kh.hc_pods(name), 90, "the HealthCheck's checker pod")[0]
        status = kh.wait_for_hc(name, after_unix=started - 2)
        log = _log_of(kh, pod, "Report sent")
        page = kh.status()
        summary = _json(kh, ns)
    finally:
        _delete_hc(kh, name)

    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels[HC_LABEL] == name
    run_uuid = labels[RUN_UUID]
    assert run_uuid and annotations[RUN_UUID] == run_uuid
    assert annotations["createdBy"] == "kuberhealthy" and annotations["kuberhealthyCheckName"] == name
    env = _env(pod)
    assert urlsplit(env["KH_REPORTING_URL"]).path == "/check", env
    assert env["KH_REPORTING_URL"] == kh.v3_reporting_url
    assert env["KH_RUN_UUID"] == run_uuid
    assert "< HTTP/1.1 200" in log, log

    # zero values may be left out, as Go's omitempty does
    assert status["ok"] is True and status.get("errors", []) == [], status
    assert status["successCount"] >= 1 and status.get("failureCount", 0) == 0, status
    assert status["lastRunUnix"] >= started - 2 and status["lastOKUnix"] >= status["lastRunUnix"], status
    assert status.get("consecutiveFailures", 0) == 0 and status["namespace"] == ns, status
    assert status["runDuration"] >= 5_000_000_000, status  # nanoseconds, as Go's time.Duration; the checker waits 5 s

    details = summary["CheckDetails"][name]
    assert details["ok"] is True and details.get("errors", []) == [] and details["namespace"] == ns, details
    assert details["successCount"] >= 1 and details["lastRunUnix"] >= status["lastRunUnix"], details
    assert details["currentUUID"] == "" and details["runIntervalSeconds"] == 40 and details["timeoutSeconds"] == 30
    assert page["CheckDetails"][f"{ns}/{name}"]["OK"] is True, page["CheckDetails"].get(f"{ns}/{name}")


# --- 2. a checker on a v3-style client ---------------------------------------------------------------


def _client_gate(url: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KH_REPORTING_URL=url, KH_RUN_UUID=str(uuid.uuid4()), MODE="validate")
    return subprocess.run(["sh", str(V3_CLIENT_SCRIPT)], env=env, capture_output=True, text=True, timeout=30,
                          check=False)


def test_a_checker_on_a_v3_style_client_that_refuses_any_path_but_check_reports_to_the_daemon(kh: E2E) -> None:
    # The client's own gate, as v3's Go client has it: v2's path, a trailing slash, no path: refused.
    for url in (f"http://{kh.service_host}/externalCheckStatus", f"{kh.v3_reporting_url}/", f"http://{kh.service_host}"):
        refused = _client_gate(url)
        assert refused.returncode == 3 and "must point to the /check endpoint" in refused.stderr, (url, refused)
    assert _client_gate(kh.v3_reporting_url).returncode == 0

    good, bad = "v3-client-ok", "v3-client-fail"
    started = int(time.time())
    kh.apply(kh.healthcheck(good, kh.pod_spec(V3_CLIENT, {"MODE": "ok"}), run_interval="1m", timeout="40s"),
             kh.healthcheck(bad, kh.pod_spec(V3_CLIENT, {"MODE": "fail", "FAIL_REASON": V3_FAIL_REASON}),
                            run_interval="1m", timeout="40s"))
    try:
        good_pod = poll(lambda: kh.hc_pods(good), 90, "the good checker's pod")[0]
        bad_pod = poll(lambda: kh.hc_pods(bad), 90, "the failing checker's pod")[0]
        ok_status = kh.wait_for_hc(good, after_unix=started - 2)
        fail_status = kh.wait_for_hc(bad, ok=False, after_unix=started - 2)
        good_log = _log_of(kh, good_pod, "answer ")
        bad_log = _log_of(kh, bad_pod, "answer ")
    finally:
        _delete_hc(kh, good)
        _delete_hc(kh, bad)

    assert "answer 200" in good_log and "answer 200" in bad_log, (good_log, bad_log)
    assert f"POST {kh.v3_reporting_url} run {good_pod['metadata']['labels'][RUN_UUID]}" in good_log, good_log
    assert ok_status["ok"] is True and ok_status["successCount"] >= 1, ok_status
    assert fail_status["ok"] is False and fail_status["errors"] == [V3_FAIL_REASON], fail_status
    assert fail_status["failureCount"] >= 1 and fail_status["consecutiveFailures"] >= 1, fail_status


# --- 3. a cluster moved from upstream v3 -------------------------------------------------------------


def _micro_time(unix: float) -> str:
    return datetime.fromtimestamp(unix, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _v3_lease(kh: E2E, holder: str, seconds: int) -> dict[str, Any]:
    now = time.time()
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": V3_LEASE, "namespace": kh.namespace},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": seconds, "acquireTime": _micro_time(now - 3600),
                     "renewTime": _micro_time(now), "leaseTransitions": 0}}


def _leftover_pod(kh: E2E, hc: dict[str, Any], run_uuid: str, last_run: int) -> dict[str, Any]:
    """A finished checker pod as upstream v3 leaves it: its name, labels, annotations and owner, and no
    label or annotation of ours."""
    name = hc["metadata"]["name"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{uuid.uuid4().hex[:5]}", "namespace": hc["metadata"]["namespace"],
                         "labels": {HC_LABEL: name, RUN_UUID: run_uuid},
                         "annotations": {"createdBy": "kuberhealthy", RUN_UUID: run_uuid,
                                         "createdTime": time.strftime("%Y-%m-%d %H:%M:%S +0000 UTC",
                                                                      time.gmtime(last_run)),
                                         "kuberhealthyCheckName": name},
                         "ownerReferences": [{"apiVersion": HC_GROUP, "kind": "HealthCheck", "name": name,
                                              "uid": hc["metadata"]["uid"], "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": kh.pod_spec(CURL, {"KH_REPORTING_URL": kh.v3_reporting_url, "KH_RUN_UUID": run_uuid},
                                container={"command": ["sh", "-c", "echo v3 reported; exit 0"]},
                                restartPolicy="Never")}


def test_a_healthcheck_left_by_upstream_v3_runs_on_from_its_counters_and_deleting_it_removes_its_pods_and_finalizer(
        kh: E2E) -> None:
    name, ns = "from-v3", kh.checks_namespace
    holder = "kuberhealthy-7d9f8c6b5-x2k4p"
    # v3 is still running here: its Lease is held, so our daemon leaves HealthChecks to it.
    kh.apply(_v3_lease(kh, holder, 90))
    try:
        hc = kh.healthcheck(name, _v3_pod_spec(kh, V3_TEST_SCRIPT.replace("sleep 5", "sleep 3")),
                            run_interval="30s", timeout="30s", singleRunOnly=False)
        hc["metadata"]["finalizers"] = [V3_FINALIZER]
        kh.apply(hc)
        now = int(time.time())
        carried: dict[str, Any] = {"ok": True, "errors": [], "consecutiveFailures": 0, "runDuration": 4_180_000_000,
                   "namespace": ns, "currentUUID": "", "lastRunUnix": now - 20, "successCount": 41,
                   "failureCount": 2, "lastOKUnix": now - 16, "lastFailureUnix": now - 3600, "additionalMetadata": ""}
        obj = poll(lambda: kh.put_status(kh.get("healthcheck", name, ns), carried), 30, "v3's status written")
        leftover = _leftover_pod(kh, obj, str(uuid.uuid4()), now - 20)
        leftover_name = leftover["metadata"]["name"]
        kh.apply(leftover)
        poll(lambda: (kh.get("pod", leftover_name, ns) or {}).get("status", {}).get("phase") == "Succeeded", 90,
             "the leftover pod to finish")
        held = kh.hc_status(name)
        held_pods = [p["metadata"]["name"] for p in kh.hc_pods(name)]
    finally:
        # v3 uninstalled: its Lease goes (or stops being renewed)
        kh.kubectl("delete", "lease", V3_LEASE, "-n", kh.namespace, "--ignore-not-found", check=False)
    try:
        # nothing of ours ran while v3 held its Lease
        assert held is not None and {k: held.get(k) for k in carried} == carried, held
        assert held_pods == [leftover_name], held_pods

        status = kh.wait_for_hc(name, min_success=carried["successCount"] + 1, after_unix=carried["lastRunUnix"],
                                timeout=180)
        pods = {p["metadata"]["name"]: p for p in kh.hc_pods(name)}
        before_delete = kh.get("healthcheck", name, ns)
    except BaseException:
        _delete_hc(kh, name)
        raise

    assert status["ok"] is True and status.get("errors", []) == [], status
    assert status["successCount"] >= carried["successCount"] + 1, status  # counting on from v3's
    assert status["failureCount"] == carried["failureCount"], status
    assert status["lastFailureUnix"] == carried["lastFailureUnix"], status
    assert status["lastRunUnix"] > carried["lastRunUnix"] and status["lastOKUnix"] >= status["lastRunUnix"], status
    assert leftover_name in pods and len(pods) >= 2, sorted(pods)  # ours ran beside the leftover
    ours = [p for n, p in pods.items() if n != leftover_name]
    assert all(_env(p)["KH_REPORTING_URL"] == kh.v3_reporting_url for p in ours)
    assert V3_FINALIZER in before_delete["metadata"]["finalizers"]

    # Deleted: the leftover pod and ours go, then v3's finalizer, so the HealthCheck does not hang.
    kh.delete("healthcheck", name, ns)
    gone_at: dict[str, float] = {}

    def deleted() -> bool:
        remaining = kh.hc_pods(name)  # the pods first, then the HealthCheck, each time
        if not remaining:
            gone_at.setdefault("pods", time.monotonic())
        if kh.get("healthcheck", name, ns) is None:
            gone_at.setdefault("healthcheck", time.monotonic())
        return len(gone_at) == 2
    try:
        poll(deleted, 90, "the HealthCheck and its pods to go (finalizer removed)", interval=0.5)
    except AssertionError:
        stuck = kh.get("healthcheck", name, ns)
        _delete_hc(kh, name)
        left = [p["metadata"]["name"] for p in kh.hc_pods(name)]
        raise AssertionError(f"stuck: {stuck and stuck['metadata']}; pods {left}") from None
    # the daemon removed the pods before the finalizer (the garbage collector would have taken the
    # leftover only after its owner was gone)
    assert gone_at["pods"] <= gone_at["healthcheck"], gone_at


# --- 4. live migration with the Lease holder changing --------------------------------------------------


def _kuberhealthy_cli() -> list[str]:
    module = "kuberhealthy" if (REPO / "kuberhealthy" / "__main__.py").is_file() else "kuberhealthy.cli"
    return [sys.executable, "-m", module]


def _cli(kh: E2E, *args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KUBECONFIG=str(kh.kubeconfig))
    return subprocess.run([*_kuberhealthy_cli(), *args], env=env, capture_output=True, text=True, timeout=timeout,
                          check=False, cwd=REPO)


class PodWatch(threading.Thread):
    """Samples, about twice a second until stopped: every pod of a namespace (its creation time, kind of
    check, live or not), the Lease holder, and the keys `/` shows for one check."""

    def __init__(self, kh: E2E, namespace: str, key: str) -> None:
        super().__init__(name="e2e-podwatch", daemon=True)
        self.kh, self.namespace, self.key = kh, namespace, key
        self.stop = threading.Event()
        self.pods: dict[str, dict[str, Any]] = {}  # name -> first seen: created, healthcheck label or not
        self.max_live = 0
        self.live_at_max: list[str] = []
        self.holders: list[str | None] = []
        self.page_keys: list[tuple[bool, bool]] = []  # per `/` answered: (key shown, hc: key shown)
        self.errors: list[str] = []
        self.ready = threading.Event()  # set after the first sample: act only then

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                live = []
                for p in self.kh.items("pods", self.namespace):
                    meta = p["metadata"]
                    self.pods.setdefault(meta["name"], {"created": meta["creationTimestamp"],
                                                        "healthcheck": HC_LABEL in (meta.get("labels") or {})})
                    if not meta.get("deletionTimestamp") and (p.get("status") or {}).get("phase") in (
                            "Pending", "Running", None):
                        live.append(meta["name"])
                if len(live) > self.max_live:
                    self.max_live, self.live_at_max = len(live), live
                holder = self.kh.leader()
                if not self.holders or self.holders[-1] != holder:
                    self.holders.append(holder)
            except Exception as e:  # noqa: BLE001 - reported by the test
                self.errors.append(repr(e))
            try:
                details = self.kh.status()["CheckDetails"]
                ns, _, name = self.key.partition("/")
                self.page_keys.append((self.key in details, f"{ns}/hc:{name}" in details))
            except requests.RequestException:
                pass  # the Service between two replicas: sampled again next time
            self.ready.set()
            self.stop.wait(0.5)

    def creations(self) -> list[tuple[float, str, bool]]:
        """(creation time, pod, a HealthCheck's) in creation order."""
        out = [(datetime.strptime(v["created"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp(), k,
                v["healthcheck"]) for k, v in self.pods.items()]
        return sorted(out)


def test_a_live_migration_with_the_lease_holder_changing_in_the_middle_runs_the_check_on_once_per_interval(
        kh: E2E, request: pytest.FixtureRequest) -> None:
    helped = _cli(kh, "migrate", "to-v3", "--help")
    if "--in-cluster" not in helped.stdout:
        pytest.skip("migrate --in-cluster not available")
    name, ns = "live", MIGRATE_NS
    key = f"{ns}/{name}"
    poll(lambda: (found := kh.get("namespace", ns)) is None or found["status"]["phase"] == "Active", 180,
         f"namespace {ns} left by an earlier session to go")
    kh.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    watch: PodWatch | None = None
    try:
        poll(lambda: kh.get("serviceaccount", "default", ns), 60, "the namespace's default ServiceAccount")
        kh.apply(kh.khcheck(name, kh.pod_spec(SHELL, {"MODE": "ok"}), namespace=ns, run_interval="15s", timeout="40s"))
        newest_run(kh, name, ns, timeout=150)
        assert kh.status()["CheckDetails"][key]["OK"] is True
        watch = PodWatch(kh, ns, key)
        old_leader = poll(kh.leader, 30, "a leader")
        watch.start()
        assert watch.ready.wait(60), watch.errors

        env = dict(os.environ, KUBECONFIG=str(kh.kubeconfig))
        migrate = subprocess.Popen([*_kuberhealthy_cli(), "migrate", "to-v3", "--in-cluster", "--namespace", ns],
                                   env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        kh.delete("pod", old_leader, kh.namespace)  # the Lease changes hands while the check changes kind
        out, err = migrate.communicate(timeout=180)
        migrated_at = time.time()
        assert migrate.returncode == 0, (out, err)

        new_leader = poll(lambda: (h := kh.leader()) and h != old_leader and h, 120, "another replica to lead")
        hc = kh.get("healthcheck", name, ns)
        khcheck = kh.get("khcheck", name, ns)
        assert hc is not None and khcheck is not None
        carried = int((hc.get("status") or {}).get("successCount") or 0)
        assert carried >= 1, hc.get("status")  # the khstate's counters came along
        status = kh.wait_for_hc(name, namespace=ns, min_success=carried + 2, after_unix=int(migrated_at),
                                timeout=240)
        khstate_after = kh.khstate(name, ns)
        status = kh.wait_for_hc(name, namespace=ns, min_success=status["successCount"] + 1,
                                after_unix=status["lastRunUnix"], timeout=120)
        page = kh.status()["CheckDetails"]
        khstate_later = kh.khstate(name, ns)
        poll(lambda: len(kh.ready_daemon_pods()) == 2, 180, "two Ready replicas again")
    finally:
        if watch is not None:
            watch.stop.set()
            watch.join(30)
        for kind in ("healthcheck", "khcheck"):
            kh.delete(kind, name, ns)
        try:
            poll(lambda: kh.get("healthcheck", name, ns) is None, 60, "the HealthCheck to go")
        finally:
            kh.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false", check=False)

    assert (hc["metadata"].get("annotations") or {}).get(MIGRATED_FROM) == khcheck["metadata"]["uid"]
    assert (khcheck["metadata"].get("annotations") or {}).get(MIGRATED_TO) == name
    created = watch.creations()
    gaps = [round(b[0] - a[0]) for a, b in itertools.pairwise(created)]
    kinds = [is_hc for _, _, is_hc in created]
    say(request.config, "e2e", f"migration: pods (healthcheck?, seconds after the previous) "
        f"{list(zip(kinds, [0, *gaps], strict=True))}; holders {watch.holders}; `/` samples {len(watch.page_keys)}")
    assert new_leader != old_leader and old_leader in watch.holders, watch.holders
    assert status["ok"] is True and status["successCount"] >= carried + 3, status
    # the khcheck no longer runs: its state stands still while the HealthCheck runs on
    assert khstate_later is not None and khstate_after is not None
    assert khstate_later.get("LastRun") == khstate_after.get("LastRun"), (khstate_after, khstate_later)
    # `/` shows the check once, under the khcheck's key, before, throughout and after
    assert page[key]["OK"] is True and f"{ns}/hc:{name}" not in page, sorted(page)
    assert watch.page_keys and all(shown for shown, _ in watch.page_keys), watch.page_keys
    assert not any(hc_key for _, hc_key in watch.page_keys), watch.page_keys
    # never two runs at once, and no two runs started together
    assert watch.errors == []
    assert watch.max_live <= 1, watch.live_at_max
    assert all(g >= 5 for g in gaps), list(zip(created, [0, *gaps], strict=True))
    assert kinds == sorted(kinds), created  # khcheck pods, then only the HealthCheck's
    assert kinds[-1] is True and kinds.count(True) >= 3, created
