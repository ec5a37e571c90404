"""docs/interface.md#http-endpoints and #leader-election (and #configuration's promMetricsConfig), seen from
replicas that do not lead.

Someone else ("other-replica") holds the Lease, so the replicas started here never run anything: every
khstate, khcheck, khjob and checker pod is written by the test, and the HTTP answers are compared with
them. Every replica serves HTTP and accepts reports; only the leader runs checks.
"""
from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from testbed.clients.formats import parse_metrics, parse_rfc3339, promtool_check
from testbed.clients.rawhttp import Answer, assert_one_line_plain_text, post_report, request
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import (
    MERGE_PATCH,
    SAME_AS_RUN,
    khc,
    khcheck,
    khj,
    khjob,
    khs,
    khstate,
    lease_path,
    pods_path,
)
from testbed.cluster.loopback import pod_ip
from testbed.cluster.objects import (
    create_checker_pod,
    create_finished_pod,
    create_lease,
    create_namespace,
    get_or_none,
    lease_holder,
)
from testbed.daemons.process import DaemonProcess
from testbed.wait import wait_for

OTHER = "other-replica"
OLD_RUN = "2024-05-01T10:00:00Z"
DETAIL_KEYS = ["OK", "Errors", "RunDuration", "Namespace", "Node", "LastRun", "AuthoritativePod", "uuid"]
TOP_KEYS = ["OK", "Errors", "CheckDetails", "JobDetails", "CurrentMaster"]
REAPER_PERIOD = 1.0  # seconds: the replicas' reaper intervals
JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')  # one JSON string, escapes and all


@dataclass
class World:
    cluster: TestCluster
    lease_ns: str
    a: str
    b: str
    c: str
    r: str
    follower: DaemonProcess
    suppress: DaemonProcess
    trunc: DaemonProcess
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    ready_at: float = 0.0  # monotonic time every replica was ready


def ran_state(ns: str, **over: Any) -> dict[str, Any]:
    spec = {"OK": True, "Errors": [], "RunDuration": "1.5s", "Namespace": ns, "Node": "node-1",
            "LastRun": OLD_RUN, "AuthoritativePod": OTHER, "uuid": str(uuid.uuid4())}
    spec.update(over)
    return spec


@pytest.fixture(scope="module")
def world(cluster: TestCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    lease_ns = create_namespace(cluster, "cf")
    create_lease(cluster, lease_ns, "kuberhealthy", OTHER, 3600)
    a, b, c, r = (create_namespace(cluster, p) for p in ("ca", "cb", "cc", "cr"))
    states: dict[str, dict[str, Any]] = {}

    def put(ns: str, name: str, spec: dict[str, Any] | None, job: bool = False) -> None:
        if job:
            cluster.request("POST", khj(ns), khjob(name, image="example.invalid/never:1", phase="Completed"))
        else:
            cluster.request("POST", khc(ns), khcheck(name, image="example.invalid/never:1", interval="1h"))
        if spec is not None:
            cluster.request("POST", khs(ns), khstate(name, **spec))
            states[f"{ns}/{name}"] = spec

    put(a, "good", ran_state(a, RunDuration="1.5s", Node="node-a"))
    put(a, "bad", ran_state(a, OK=False, Errors=["disk full", "dns down"], RunDuration="2.25s"))
    put(a, "ghost", {"OK": True, "Errors": [], "RunDuration": "", "Namespace": a, "Node": "",
                     "AuthoritativePod": "", "uuid": str(uuid.uuid4())})
    put(a, "neverstate", None)
    put(a, "jobby", ran_state(a, RunDuration="3s"), job=True)
    put(b, "fine", ran_state(b))
    # "" cannot be stored (this API server decodes "" in a custom resource's string list as null and the
    # schema refuses null items), so the blank error here is whitespace only
    put(c, "blanky", ran_state(c, OK=False, Errors=["   ", "real problem"]))
    put(c, "weird", ran_state(c, OK=False, Errors=['say "hi" \\ back', "line one\nline two", "ünïcødé ✓"]))
    # housekeeping bait: only a leader may remove these
    cluster.request("POST", khs(r), khstate("orphan", **ran_state(r)))
    create_finished_pod(cluster, r, "gone-check-old", "gone-check", "Succeeded", 100)

    work = tmp_path_factory.mktemp("http")
    common = {"enableForceMaster": False, "logLevel": "debug",
              # Go-style durations of every shape the contract names; the values do not matter to a follower
              "maxKHJobAge": "1m30s", "maxCheckPodAge": "1h", "checkChangeDebounce": "500ms",
              "stateReaperInterval": f"{REAPER_PERIOD:g}s", "checkReaperRunInterval": f"{REAPER_PERIOD:g}s",
              "leaderElection": {"leaseName": "kuberhealthy", "leaseDuration": "15s", "renewDeadline": "10s",
                                 "retryPeriod": "2s"}}
    follower = DaemonProcess(cluster, work, "kh-follower", lease_ns,
                             dict(common, targetNamespace="", someUnknownKey="whatever"))
    suppress = DaemonProcess(cluster, work, "kh-suppress", lease_ns,
                             dict(common, targetNamespace=a, promMetricsConfig={"suppressErrorLabel": True}))
    trunc = DaemonProcess(cluster, work, "kh-trunc", lease_ns,
                          dict(common, targetNamespace=a, promMetricsConfig={"errorLabelMaxLength": 4}))
    try:
        for d in (follower, suppress, trunc):
            d.start()
        for d in (follower, suppress, trunc):
            d.wait_serving()
        yield World(cluster, lease_ns, a, b, c, r, follower, suppress, trunc, states, time.monotonic())
    finally:
        for d in (follower, suppress, trunc):
            d.stop()


def status(w: World, query: str = "", d: DaemonProcess | None = None) -> tuple[requests.Response, Any]:
    resp = requests.get((d or w.follower).url + "/" + query, timeout=30)
    assert resp.status_code == 200, (resp.status_code, resp.text[:300])
    return resp, resp.json()


def status_with(w: World, keys: set[str], query: str = "") -> Any:
    """The status page once the follower's caches show every key in `keys` (checks or jobs)."""
    def seen() -> Any:
        _, body = status(w, query)
        assert keys <= set(body["CheckDetails"]) | set(body["JobDetails"]), \
            f"missing {keys - set(body['CheckDetails']) - set(body['JobDetails'])}"
        return body
    return wait_for(seen, 30, what=f"status page showing {keys}")


# --- /healthz, /readyz ---------------------------------------------------------------------------------

def test_healthz_and_readyz_answer_200_on_a_replica_that_does_not_lead(world: World) -> None:
    for d in (world.follower, world.suppress, world.trunc):
        assert requests.get(d.url + "/healthz", timeout=10).status_code == 200
        assert requests.get(d.url + "/readyz", timeout=10).status_code == 200


def test_an_unknown_config_key_is_only_a_warning(world: World) -> None:
    assert world.follower.proc is not None and world.follower.proc.poll() is None
    lines = [ln for ln in world.follower.log().splitlines() if "someUnknownKey" in ln]
    assert lines, "the unknown key is not mentioned in the log"
    # (the product prints "Ignoring unknown config key 'someUnknownKey'" before logging is set up, so the
    # line carries no level; the contract only asks for a warning, which this is in substance)


def test_the_http_server_is_gunicorn_with_one_threaded_worker(world: World) -> None:
    """One gunicorn worker (a child of the arbiter) serving with threads."""
    assert world.follower.proc is not None
    pid = world.follower.proc.pid
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            children.append(int(entry))
    assert len(children) == 1, f"{len(children)} worker processes"
    assert len(os.listdir(f"/proc/{children[0]}/task")) > 1, "the worker has no threads"


# --- GET / ------------------------------------------------------------------------------------------

def test_the_status_page_is_v2_json_with_keys_in_v2_order_indented_by_two_spaces(world: World) -> None:
    a = world.a
    status_with(world, {f"{a}/good", f"{a}/bad"})
    resp, body = status(world)
    assert list(body) == TOP_KEYS
    # Go's MarshalIndent(v, "", "  "). The layout is compared with every string replaced by a placeholder:
    # how a string is escaped (Go escapes <, >, &, U+2028/9, \b as \u0008...) is another test's, and
    # checks of other tests in the cluster may carry any text.
    def layout(text: str) -> str:
        return JSON_STRING.sub('"S"', text)
    assert layout(resp.text.rstrip("\n")) == layout(json.dumps(body, indent=2)), \
        "not indented like Go's MarshalIndent(.., \"  \")"
    good = body["CheckDetails"][f"{a}/good"]
    assert list(good) == DETAIL_KEYS
    expected = world.states[f"{a}/good"]
    for k in DETAIL_KEYS:
        assert good[k] == expected[k], (k, good[k], expected[k])


def test_the_status_page_answers_200_even_when_checks_fail(world: World) -> None:
    a = world.a
    body = status_with(world, {f"{a}/bad"})
    assert body["CheckDetails"][f"{a}/bad"]["OK"] is False
    assert body["OK"] is False


def test_top_level_errors_hold_every_non_blank_check_error(world: World) -> None:
    body = status_with(world, {f"{world.a}/bad", f"{world.c}/blanky"})
    assert body["OK"] is False
    for e in ("disk full", "dns down", "real problem"):
        assert e in body["Errors"], body["Errors"]
    assert "" not in body["Errors"], body["Errors"]
    assert all(e.strip() for e in body["Errors"]), body["Errors"]


def test_checks_that_never_ran_are_hidden(world: World) -> None:
    a = world.a
    body = status_with(world, {f"{a}/good"})
    for hidden in (f"{a}/ghost", f"{a}/neverstate"):
        assert hidden not in body["CheckDetails"] and hidden not in body["JobDetails"], hidden


def test_khjob_states_are_shown_under_job_details(world: World) -> None:
    a = world.a
    body = status_with(world, {f"{a}/jobby"})
    assert f"{a}/jobby" in body["JobDetails"]
    assert f"{a}/jobby" not in body["CheckDetails"]


def test_the_namespace_query_filters_checks_and_jobs(world: World) -> None:
    a, b, c = world.a, world.b, world.c
    status_with(world, {f"{a}/good", f"{a}/bad", f"{a}/jobby", f"{b}/fine", f"{c}/blanky"})
    _, two = status(world, f"?namespace={a},{b}")
    keys = set(two["CheckDetails"]) | set(two["JobDetails"])
    assert {f"{a}/good", f"{a}/bad", f"{b}/fine", f"{a}/jobby"} <= keys
    assert all(k.split("/")[0] in (a, b) for k in keys), keys
    _, one = status(world, f"?namespace={b}")
    assert set(one["CheckDetails"]) == {f"{b}/fine"}
    assert one["JobDetails"] == {}
    _, gaps = status(world, f"?namespace=,{b},,")
    assert set(gaps["CheckDetails"]) == {f"{b}/fine"}, "empty items in ?namespace= are not ignored"
    _, none = status(world, "?namespace=no-such-namespace-here")
    assert none["CheckDetails"] == {} and none["JobDetails"] == {}


def test_top_level_ok_and_errors_follow_the_namespace_filter(world: World) -> None:
    """Ambiguity probe: in a view filtered to healthy checks only, the summary is healthy."""
    status_with(world, {f"{world.b}/fine"})
    _, body = status(world, f"?namespace={world.b}")
    assert body["OK"] is True and body["Errors"] == []


def test_a_status_request_with_a_body_gets_400_with_a_one_line_reason(world: World) -> None:
    ans = request(world.follower, "GET", "/", b'{"hello": 1}', headers={"Content-Type": "application/json"})
    assert ans.status == 400, ans
    assert_one_line_plain_text(ans)


def test_current_master_is_the_lease_holder(world: World) -> None:
    cl = world.cluster
    holder = lease_holder(cl, world.lease_ns, "kuberhealthy")
    assert holder == OTHER
    _, body = status(world)
    assert body["CurrentMaster"] == OTHER
    cl.request("PATCH", lease_path(world.lease_ns, "kuberhealthy"), {"spec": {"holderIdentity": "another-one"}},
               content_type=MERGE_PATCH)
    try:
        wait_for(lambda: status(world)[1]["CurrentMaster"] == "another-one", 30, what="CurrentMaster follows the Lease")
    finally:
        cl.request("PATCH", lease_path(world.lease_ns, "kuberhealthy"), {"spec": {"holderIdentity": OTHER}},
                   content_type=MERGE_PATCH)
    wait_for(lambda: status(world)[1]["CurrentMaster"] == OTHER, 30, what="CurrentMaster back")


def test_a_replica_that_does_not_lead_runs_no_checks(world: World) -> None:
    status_with(world, {f"{world.a}/good"})
    for ns in (world.a, world.b, world.c):
        assert world.cluster.request("GET", pods_path(ns))["items"] == []
    assert world.cluster.request("GET", khj(world.a, "jobby"))["spec"]["phase"] == "Completed"


# --- /metrics -------------------------------------------------------------------------------------------

def metrics_of(d: DaemonProcess) -> str:
    r = requests.get(d.url + "/metrics", timeout=30)
    assert r.status_code == 200, r.status_code
    return r.text


def check_series(samples: list[tuple[str, dict[str, str], float]], family: str, check: str) -> list[dict[str, str]]:
    return [lab for name, lab, _ in samples if name == family and lab.get("check") == check]


def test_metrics_pass_promtool_and_carry_the_v2_families_and_labels(world: World) -> None:
    a = world.a
    status_with(world, {f"{a}/good", f"{a}/bad", f"{a}/jobby"})

    def complete() -> str:
        text = metrics_of(world.follower)
        samples = parse_metrics(text)
        assert check_series(samples, "kuberhealthy_check", f"{a}/bad"), "no kuberhealthy_check for the bad check"
        return text
    text = wait_for(complete, 30, what="metrics for the hand-made states")
    lint = promtool_check(text)
    assert lint.returncode == 0, f"promtool check metrics failed:\n{lint.stdout}\n{lint.stderr}"
    samples = parse_metrics(text)
    names = {n for n, _, _ in samples}
    for fam in ("kuberhealthy_running", "kuberhealthy_cluster_state", "kuberhealthy_check",
                "kuberhealthy_check_duration_seconds", "kuberhealthy_job", "kuberhealthy_job_duration_seconds"):
        assert fam in names, f"family {fam} missing:\n{text[:3000]}"
    running = [lab for n, lab, _ in samples if n == "kuberhealthy_running"]
    assert running and all(set(lab) == {"current_master"} for lab in running), running
    assert running[0]["current_master"] == lease_holder(world.cluster, world.lease_ns, "kuberhealthy")
    bad = check_series(samples, "kuberhealthy_check", f"{a}/bad")
    assert len(bad) == 1
    assert set(bad[0]) == {"check", "namespace", "status", "error"}, bad[0]
    assert bad[0]["namespace"] == a
    assert bad[0]["error"] == "disk full|dns down"
    good = check_series(samples, "kuberhealthy_check", f"{a}/good")
    assert len(good) == 1 and set(good[0]) == {"check", "namespace", "status", "error"}, good
    durations = [(lab, v) for n, lab, v in samples if n == "kuberhealthy_check_duration_seconds"
                 and lab.get("check") == f"{a}/good"]
    assert len(durations) == 1
    assert set(durations[0][0]) == {"check", "namespace"} and durations[0][0]["namespace"] == a
    assert durations[0][1] == pytest.approx(1.5)
    jobs = [lab for n, lab, _ in samples if n == "kuberhealthy_job" and any("jobby" in v for v in lab.values())]
    assert jobs, "no kuberhealthy_job series for the khjob"
    jobdur = [v for n, lab, v in samples if n == "kuberhealthy_job_duration_seconds"
              and any("jobby" in x for x in lab.values())]
    assert jobdur == [pytest.approx(3.0)]


def test_metrics_with_quotes_backslashes_newlines_and_unicode_in_errors_pass_promtool(world: World) -> None:
    c = world.c

    def weird() -> str:
        text = metrics_of(world.follower)
        assert check_series(parse_metrics(text), "kuberhealthy_check", f"{c}/weird"), "not yet"
        return text
    text = wait_for(weird, 30, what="the weird check's series")
    lint = promtool_check(text)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    lab = check_series(parse_metrics(text), "kuberhealthy_check", f"{c}/weird")[0]
    exact = 'say "hi" \\ back|line one\nline two|ünïcødé ✓'
    # v2 turned " into ' in this label; the contract neither asks for nor forbids that
    assert lab["error"] in (exact, exact.replace('"', "'")), lab["error"]
    body = status_with(world, {f"{c}/weird"})
    assert body["CheckDetails"][f"{c}/weird"]["Errors"] == world.states[f"{c}/weird"]["Errors"]


def test_cluster_state_metric_is_0_while_a_check_fails(world: World) -> None:
    status_with(world, {f"{world.a}/bad"})
    samples = parse_metrics(metrics_of(world.follower))
    state = [v for n, _, v in samples if n == "kuberhealthy_cluster_state"]
    assert state == [0.0]


def test_suppress_error_label_drops_the_error_label(world: World) -> None:
    a = world.a

    def series() -> dict[str, str]:
        found = check_series(parse_metrics(metrics_of(world.suppress)), "kuberhealthy_check", f"{a}/bad")
        assert found, "no series yet"
        return found[0]
    lab = wait_for(series, 30, what="the bad check's series")
    assert "error" not in lab, lab
    lint = promtool_check(metrics_of(world.suppress))
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_error_label_max_length_truncates_the_error_label(world: World) -> None:
    a = world.a

    def series() -> dict[str, str]:
        found = check_series(parse_metrics(metrics_of(world.trunc)), "kuberhealthy_check", f"{a}/bad")
        assert found, "no series yet"
        return found[0]
    lab = wait_for(series, 30, what="the bad check's series")
    assert lab.get("error") == "disk", lab


# --- POST /externalCheckStatus ------------------------------------------------------------------------------

@dataclass
class Caller:
    w: World
    check: str
    run_uuid: str
    pod: str
    ip: str

    @property
    def ns(self) -> str:
        return self.w.r

    def state(self) -> dict[str, Any]:
        return self.w.cluster.request("GET", khs(self.ns, self.check))

    def post(self, body: Any, *, header: bool = True, from_pod_ip: bool = False, **kw: Any) -> Answer:
        return post_report(self.w.follower, body, run_uuid=self.run_uuid if header else None,
                           source_ip=self.ip if from_pod_ip else "127.0.0.1", **kw)


def make_caller(w: World, *, env_uuid: str | None = SAME_AS_RUN, annotate: bool = True, phase: str = "Running",
                ip: str | None = None, state_uuid: str | None = None) -> Caller:
    """A check with a khstate whose uuid is the current run, and a Running checker pod for that run."""
    name = "rep-" + uuid.uuid4().hex[:8]
    run = str(uuid.uuid4())
    cl = w.cluster
    cl.request("POST", khc(w.r), khcheck(name, image="example.invalid/never:1", interval="1h"))
    cl.request("POST", khs(w.r), khstate(name, **ran_state(w.r, uuid=state_uuid or run, OK=True, Errors=[])))
    pod = f"{name}-1700000000"
    _, ip = create_checker_pod(cl, w.r, pod, check=name if annotate else None, run_uuid=run, env_uuid=env_uuid,
                               phase=phase, ip=ip)
    return Caller(w, name, run, pod, ip)


def accepted(c: Caller, body: Any, **kw: Any) -> Answer:
    """Post until the replica's caches know the new pod/khstate (a 400 before that is legitimate)."""
    def ok() -> Answer:
        ans = c.post(body, **kw)
        assert ans.status == 200, ans
        return ans
    return wait_for(ok, 30, interval=0.2, what="the report to be accepted")


def assert_rejected(c: Caller, body: Any, code: int = 400, **kw: Any) -> Answer:
    before = c.state()
    ans = c.post(body, **kw)
    after = c.state()
    assert ans.status == code, ans
    assert_one_line_plain_text(ans)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], \
        f"a rejected report changed the khstate: {before['spec']} -> {after['spec']}"
    return ans


def warm(c: Caller) -> None:
    """Wait until the follower can identify this caller: a valid report for it is accepted once."""
    accepted(c, {"OK": True, "Errors": []})


def test_a_report_with_the_run_uuid_header_is_stored(world: World) -> None:
    c = make_caller(world)
    accepted(c, {"OK": False, "Errors": ["first", "second"]})
    spec = c.state()["spec"]
    assert spec["OK"] is False and spec["Errors"] == ["first", "second"]
    assert parse_rfc3339(spec["LastRun"]) > parse_rfc3339(OLD_RUN)
    assert spec["uuid"] == c.run_uuid


def test_a_report_without_the_header_is_identified_by_the_source_ip(world: World) -> None:
    c = make_caller(world)
    accepted(c, {"OK": False, "Errors": ["by ip"]}, header=False, from_pod_ip=True)
    spec = c.state()["spec"]
    assert spec["OK"] is False and spec["Errors"] == ["by ip"]


@pytest.mark.parametrize("body", [
    '{"ok": false, "errors": ["lower case"]}',
    '{"Ok": false, "ERRORS": ["lower case"]}',
    '{"oK": false, "eRRors": ["lower case"], "unknownField": 1}',
])
def test_report_keys_match_case_insensitively_like_go(world: World, body: str) -> None:
    c = make_caller(world)
    accepted(c, body)
    spec = c.state()["spec"]
    assert spec["OK"] is False and spec["Errors"] == ["lower case"]


def test_a_duplicate_key_takes_the_last_value_like_go(world: World) -> None:
    c = make_caller(world)
    accepted(c, '{"OK": true, "ok": false, "Errors": ["dup"]}')
    spec = c.state()["spec"]
    assert spec["OK"] is False and spec["Errors"] == ["dup"]


def test_ok_true_with_null_errors_is_stored(world: World) -> None:
    c = make_caller(world)
    accepted(c, '{"OK": true, "Errors": null}')
    assert c.state()["spec"]["OK"] is True


def test_an_unknown_run_uuid_is_rejected_and_changes_nothing(world: World) -> None:
    c = make_caller(world)
    warm(c)
    c2 = Caller(world, c.check, str(uuid.uuid4()), c.pod, c.ip)
    assert_rejected(c2, {"OK": True, "Errors": []})
    # the header decides: a wrong header is not rescued by a right source address
    assert_rejected(c2, {"OK": True, "Errors": []}, from_pod_ip=True)


def test_an_unknown_source_ip_without_header_is_rejected(world: World) -> None:
    c = make_caller(world)
    warm(c)
    ans = post_report(world.follower, {"OK": True, "Errors": []}, source_ip=pod_ip())
    assert ans.status == 400, ans
    assert_one_line_plain_text(ans)


def test_a_stale_run_uuid_is_rejected_and_changes_nothing(world: World) -> None:
    """The pod is a genuine checker pod of the check, but the khstate has moved on to another run."""
    newer = str(uuid.uuid4())
    c = make_caller(world, state_uuid=newer)
    probe = make_caller(world)
    warm(probe)  # created after c's pod and khstate: once it is accepted, the caches hold c's too
    assert_rejected(c, {"OK": True, "Errors": []})
    assert_rejected(c, {"OK": True, "Errors": []}, header=False, from_pod_ip=True)


def test_a_pod_whose_env_run_uuid_differs_from_the_khstate_is_rejected(world: World) -> None:
    c = make_caller(world, env_uuid=str(uuid.uuid4()))
    probe = make_caller(world)
    warm(probe)
    assert_rejected(c, {"OK": True, "Errors": []})
    assert_rejected(c, {"OK": True, "Errors": []}, header=False, from_pod_ip=True)


def test_a_pod_without_the_run_uuid_env_is_rejected(world: World) -> None:
    c = make_caller(world, env_uuid=None)
    probe = make_caller(world)
    warm(probe)
    assert_rejected(c, {"OK": True, "Errors": []})


def test_a_pod_without_the_check_name_annotation_is_rejected(world: World) -> None:
    c = make_caller(world, annotate=False)
    probe = make_caller(world)
    warm(probe)
    assert_rejected(c, {"OK": True, "Errors": []})
    assert_rejected(c, {"OK": True, "Errors": []}, header=False, from_pod_ip=True)


def test_identification_by_ip_needs_a_running_pod(world: World) -> None:
    c = make_caller(world, phase="Succeeded")
    probe = make_caller(world)
    warm(probe)
    assert_rejected(c, {"OK": True, "Errors": []}, header=False, from_pod_ip=True)


def test_identification_by_ip_refuses_an_address_two_running_pods_share(world: World) -> None:
    shared = pod_ip()
    c = make_caller(world, ip=shared)
    make_caller(world, ip=shared)
    warm(c)  # by header: fine
    assert_rejected(c, {"OK": False, "Errors": ["which one?"]}, header=False, from_pod_ip=True)


BAD_BODIES = [
    ("empty", ""),
    ("truncated", '{"OK": true, "Errors": ['),
    ("not-json", "OK=true"),
    ("array", "[]"),
    ("string", '"OK"'),
    ("ok-wrong-type", '{"OK": "yes", "Errors": []}'),
    ("errors-wrong-type", '{"OK": false, "Errors": "broken"}'),
    ("error-item-wrong-type", '{"OK": false, "Errors": [42]}'),
    ("ok-false-no-errors", '{"OK": false, "Errors": []}'),
    ("ok-false-errors-missing", '{"OK": false}'),
    ("empty-object", "{}"),
    ("ok-false-errors-null", '{"OK": false, "Errors": null}'),
    ("blank-error", '{"OK": false, "Errors": ["real", ""]}'),
    ("only-blank-error", '{"OK": false, "Errors": [""]}'),
    ("ok-true-with-errors", '{"OK": true, "Errors": ["but why"]}'),
]


@pytest.mark.parametrize(("label", "body"), BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_a_bad_report_body_is_rejected_with_400_and_changes_nothing(world: World, label: str, body: str) -> None:
    c = make_caller(world)
    warm(c)
    assert_rejected(c, body)


def test_a_whitespace_only_error_is_blank_and_rejected(world: World) -> None:
    c = make_caller(world)
    warm(c)
    assert_rejected(c, '{"OK": false, "Errors": ["   "]}')


def test_a_body_over_1_mib_gets_413_and_changes_nothing(world: World) -> None:
    c = make_caller(world)
    warm(c)
    core = b'{"OK": false, "Errors": ["too big"]}'
    assert_rejected(c, core + b" " * (1024 * 1024 + 1 - len(core)), code=413)
    assert_rejected(c, core + b" " * (2 * 1024 * 1024), code=413, chunked=True)


def test_a_body_of_exactly_1_mib_is_not_too_large(world: World) -> None:
    c = make_caller(world)
    warm(c)
    core = b'{"OK": false, "Errors": ["just fits"]}'
    ans = c.post(core + b" " * (1024 * 1024 - len(core)))
    assert ans.status == 200, ans
    assert c.state()["spec"]["Errors"] == ["just fits"]


def test_a_report_for_a_check_without_a_khstate_is_rejected(world: World) -> None:
    c = make_caller(world)
    warm(c)
    world.cluster.request("DELETE", khs(world.r, c.check))
    probe = make_caller(world)
    warm(probe)  # the deletion has reached the caches
    ans = c.post({"OK": True, "Errors": []})
    assert ans.status == 400, ans
    assert_one_line_plain_text(ans)
    assert get_or_none(world.cluster, khs(world.r, c.check)) is None, "a rejected report created a khstate"


def test_other_4xx_answers_of_the_report_endpoint_are_one_line_plain_text(world: World) -> None:
    """Probe of "Every 4xx has a one-line plain-text reason" for a wrong method on /externalCheckStatus."""
    ans = request(world.follower, "GET", "/externalCheckStatus")
    assert 400 <= ans.status < 500, ans
    assert_one_line_plain_text(ans)


def test_every_replica_accepts_reports(world: World) -> None:
    """kh-follower does not lead; a report sent to it is stored all the same."""
    c = make_caller(world)
    accepted(c, {"OK": True, "Errors": []})
    assert lease_holder(world.cluster, world.lease_ns, "kuberhealthy") != world.follower.name


# --- housekeeping is the leader's ---------------------------------------------------------------------------

def test_a_replica_that_does_not_lead_runs_no_reapers(world: World) -> None:
    """Both reapers run every second on a leader: watched for five periods since the replicas were
    ready, the follower removes neither the orphan khstate nor the finished checker pod."""
    watch_until = world.ready_at + 5 * REAPER_PERIOD
    while True:
        assert get_or_none(world.cluster, khs(world.r, "orphan")) is not None, "a follower removed an orphan khstate"
        assert get_or_none(world.cluster, pods_path(world.r, "gone-check-old")) is not None, \
            "a follower reaped a finished checker pod"
        if time.monotonic() >= watch_until:
            break
        time.sleep(0.5)
