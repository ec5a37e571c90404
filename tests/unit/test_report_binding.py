"""A report is taken only from the pod its run created (docs/interface.md#report-authenticity), decided over
in-memory caches: look-alikes are ignored, finished pods and ended runs refused, older claims still work; and the pieces
around it: the claim and finish annotations, the status page's uuid, the rate limiter, the token review."""
from __future__ import annotations

import copy
import threading
from typing import Any

import pytest

from kuberhealthy.base.errors import Unreachable
from kuberhealthy.base.notify import Notifier
from kuberhealthy.kube import Obj, key_of
from kuberhealthy.records import khstate
from kuberhealthy.records.checkpod import (
    RUN_KEY_ANNOTATION,
    pod_check_index,
    pod_ip_index,
    pod_uuid_index,
    run_key_sha256,
    slim_pod,
)
from kuberhealthy.web.ratelimit import RateLimiter
from kuberhealthy.web.report.caller import SOURCE_FOREIGN, SOURCE_OK, SOURCE_OTHER_POD, source_verdict
from kuberhealthy.web.report.finder import CallerFinder, NotTheRunsPod, RunIsOver, UnknownCaller
from kuberhealthy.web.report.tokens import InvalidToken, TokenNotYetVerified, TokenVerifier, bearer, identity_of

NS, CHECK, RUN = "team", "dns", "run-1"


class Cache:
    """Just enough of a watch cache: objects by key, the finder's indexes, always current."""

    def __init__(self, plural: str, objs: list[Obj] | None = None) -> None:
        self.plural = plural
        self.objs = {key_of(o): o for o in objs or []}
        self.synced = threading.Event()
        self.synced.set()

    def get(self, namespace: str, name: str) -> Obj | None:
        return self.objs.get(f"{namespace}/{name}")

    def list(self) -> list[Obj]:
        return list(self.objs.values())

    def by_index(self, index: str, value: str) -> list[Obj]:
        fn = {"uuid": pod_uuid_index, "ip": pod_ip_index, "check": pod_check_index}[index]
        return [o for o in self.objs.values() if value in fn(o)]

    def topic(self, index: str, value: str) -> tuple[str, str, str]:
        return (self.plural, index, value)

    def is_current(self) -> bool:
        return True


def pod(name: str, key: str = "secret", phase: str = "Running", ip: str = "10.0.0.7", run: str = RUN,
        created: str = "2026-12-01T08:00:00Z") -> Obj:
    return slim_pod({
        "metadata": {"name": name, "namespace": NS, "uid": "uid-" + name, "creationTimestamp": created,
                     "labels": {"app": "kuberhealthy-check", "kuberhealthy-check-name": CHECK,
                                "kuberhealthy-run-id": run},
                     "annotations": {"comcast.github.io/check-name": CHECK, RUN_KEY_ANNOTATION: key}},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "env": [{"name": "KH_RUN_UUID", "value": run}]}]},
        "status": {"phase": phase, "podIP": ip, "hostIP": "192.168.1.2"},
    })


def state(run: str = RUN, run_pod: str = "dns-100", key: str = "secret", finished: str = "") -> Obj:
    annotations = {khstate.RUN_POD: run_pod, khstate.RUN_KEY_SHA256: run_key_sha256(key) if run_pod else ""}
    if finished:
        annotations[khstate.FINISHED_UUID] = finished
    return {"metadata": {"name": CHECK, "namespace": NS, "annotations": annotations},
            "spec": {"uuid": run, "OK": True, "Errors": []}}


def finder(pods: list[Obj], st: Obj | None, read: list[Obj] | None = None) -> CallerFinder:
    def fallback(run_uuid: str | None, ip: str | None, timeout: float) -> list[Obj]:
        return list(read or [])
    return CallerFinder(Cache("pods", pods), Notifier(), wait=0.0, fallback=fallback,
                        states=lambda _check: Cache("khstates", [st] if st else []))


def test_the_runs_pod_reports_although_a_look_alike_carries_the_same_label_and_env() -> None:
    f = finder([pod("dns-100"), pod("evil", key="guessed")], state())
    assert f.find(RUN, "10.0.0.7").pod_name == "dns-100"


def test_a_look_alike_sending_the_runs_uuid_from_its_own_address_is_told_apart_by_that_address() -> None:
    pods = [pod("dns-100"), pod("evil", key="copied", ip="10.0.0.9")]
    f = finder(pods, state())
    caller = f.find(RUN, "10.0.0.9")  # the uuid names the run; the run's pod is dns-100 ...
    assert caller.pod_name == "dns-100"
    assert source_verdict(caller, "10.0.0.9", Cache("pods", pods)) == SOURCE_OTHER_POD  # ... not the sender
    assert source_verdict(caller, "10.0.0.7", Cache("pods", pods)) == SOURCE_OK
    assert source_verdict(caller, "[::ffff:192.168.1.2]", Cache("pods", pods)) == SOURCE_OK  # the node (SNAT)
    assert source_verdict(caller, "172.16.0.1", Cache("pods", pods)) == SOURCE_FOREIGN


def test_a_look_alike_found_by_its_address_is_refused_as_not_the_runs_pod() -> None:
    f = finder([pod("evil", key="copied", ip="10.0.0.9")], state(), read=[])
    with pytest.raises(NotTheRunsPod, match="evil is not the pod run run-1"):
        f.find(None, "10.0.0.9")


def test_a_look_alike_that_copied_the_secret_but_not_the_name_is_refused() -> None:
    f = finder([pod("dns-100"), pod("copycat")], state())  # same key annotation, another name
    with pytest.raises(NotTheRunsPod):
        f.find_pod(pod("copycat"), 10**9)
    assert f.find(RUN, "10.0.0.7").pod_name == "dns-100"


def test_a_pod_that_took_the_claimed_name_first_without_the_secret_is_refused() -> None:
    f = finder([pod("dns-100", key="not-the-runs")], state(), read=[pod("dns-100", key="not-the-runs")])
    with pytest.raises(NotTheRunsPod):
        f.find(RUN, "10.0.0.7")


def test_the_runs_pod_the_cache_has_not_seen_is_found_by_one_read() -> None:
    f = finder([pod("evil", key="x")], state(), read=[pod("dns-100"), pod("evil", key="x")])
    assert f.find(RUN, "10.0.0.7").pod_name == "dns-100"


def test_a_report_from_a_finished_pod_is_refused() -> None:
    with pytest.raises(RunIsOver, match="has finished"):
        finder([pod("dns-100", phase="Succeeded")], state()).find(RUN, "10.0.0.7")


def test_a_report_for_a_run_recorded_as_over_is_refused_while_its_pod_still_runs() -> None:
    with pytest.raises(RunIsOver):
        finder([pod("dns-100")], state(finished=RUN)).find(RUN, "10.0.0.7")


def test_a_report_for_an_earlier_run_is_left_to_the_stale_check_with_v2s_reason() -> None:
    caller = finder([pod("dns-99", run="run-0")], state()).find("run-0", "10.0.0.7")
    assert caller.run_uuid == "run-0"  # record_report then refuses it as stale: nothing is written


def test_by_source_address_only_the_runs_pod_counts_among_pods_sharing_the_address() -> None:
    host_net = [pod("dns-100", ip="192.168.1.2"), pod("other", key="k2", ip="192.168.1.2")]
    assert finder(host_net, state()).find(None, "192.168.1.2").pod_name == "dns-100"


def test_a_claim_by_an_older_daemon_binds_to_the_earliest_created_pod() -> None:
    pods = [pod("late", created="2026-12-01T08:00:05Z"), pod("first", created="2026-12-01T08:00:01Z")]
    assert finder(pods, state(run_pod="")).find(RUN, "10.0.0.7").pod_name == "first"


def test_without_a_khstate_cache_v2s_two_or_more_rule_still_applies() -> None:
    plain = CallerFinder(Cache("pods", [pod("a"), pod("b")]), Notifier(), wait=0.0)
    with pytest.raises(UnknownCaller, match="two or more"):
        plain.find(RUN, "10.0.0.7")


def test_the_caller_carries_the_addresses_the_source_check_compares_with() -> None:
    caller = finder([pod("dns-100")], state()).find(RUN, "10.0.0.7")
    assert caller.pod_ips == ("10.0.0.7",) and caller.host_ip == "192.168.1.2"


# --- the khstate annotations ---------------------------------------------------------------------


class Api:
    """update_with_retry over one stored object, as the khstate writers use it."""

    def __init__(self, obj: Obj | None = None) -> None:
        self.obj = obj

    def update_with_retry(self, res: Any, namespace: str, name: str, mutate: Any, **_: Any) -> Obj | None:
        out = mutate(copy.deepcopy(self.obj))
        if out is not None:
            self.obj = out
        return out


def write(api: Api, run: str = RUN) -> khstate.RunWrite:
    return khstate.RunWrite(api, NS, CHECK, run, "kh-0")  # type: ignore[arg-type]


def test_a_claim_names_the_pod_and_the_secrets_hash_and_the_last_write_finishes_the_run() -> None:
    api = Api()
    khstate.claim_run(write(api), run_pod="dns-100", run_key_sha256="h")
    claim = khstate.RunClaim.of(api.obj)
    assert (claim.uuid, claim.pod, claim.key_sha256, claim.finished) == (RUN, "dns-100", "h", False)
    khstate.record_result(write(api), "1s", "node-a")
    assert khstate.RunClaim.of(api.obj).finished and khstate.finished_uuid(api.obj) == RUN
    khstate.claim_run(write(api, "run-2"), run_pod="dns-200", run_key_sha256="h2")
    assert not khstate.RunClaim.of(api.obj).finished and khstate.finished_uuid(api.obj) == RUN


def test_a_recorded_failure_finishes_the_run_too() -> None:
    api = Api()
    khstate.claim_run(write(api), run_pod="dns-100", run_key_sha256="h")
    khstate.record_error(write(api), ["boom"])
    assert khstate.RunClaim.of(api.obj).finished


# --- the rate limiter ----------------------------------------------------------------------------


def test_the_rate_limiter_allows_a_burst_then_refuses_with_the_wait_until_the_next_token() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=2.0, burst=3, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("a") == pytest.approx(0.5)
    assert limiter.take("b") == 0.0  # another source has its own bucket
    now[0] += 0.5
    assert limiter.take("a") == 0.0
    assert RateLimiter.retry_after(0.2) == "1" and RateLimiter.retry_after(2.1) == "3"


def test_the_rate_limiter_forgets_the_least_recent_sources_beyond_its_bound() -> None:
    limiter = RateLimiter(rate=1.0, burst=1, clock=lambda: 0.0, max_sources=2)
    for source in ("a", "b", "c"):
        assert limiter.take(source) == 0.0
    assert limiter.take("a") == 0.0  # forgotten: a full bucket again
    assert limiter.take("c") > 0


# --- the token review ----------------------------------------------------------------------------


def review(authenticated: bool = True, audiences: tuple[str, ...] = ("kuberhealthy",), pod_name: str = "dns-100",
           error: str = "") -> Obj:
    return {"status": {"authenticated": authenticated, "audiences": list(audiences), "error": error,
                       "user": {"username": f"system:serviceaccount:{NS}:default",
                                "extra": {"authentication.kubernetes.io/pod-name": [pod_name],
                                          "authentication.kubernetes.io/pod-uid": ["uid-" + pod_name]}}}}


class ReviewApi:
    def __init__(self, answer: Obj | Exception) -> None:
        self.answer = answer
        self.calls: list[Obj] = []

    def create(self, res: Any, namespace: str, body: Obj, timeout: float = 5.0, dry_run: bool = False) -> Obj:
        self.calls.append(body)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_a_valid_token_names_its_pod_and_is_reviewed_once() -> None:
    api = ReviewApi(review())
    verifier = TokenVerifier(api)  # type: ignore[arg-type]
    who = verifier.verify("tok", 5.0)
    assert (who.namespace, who.name, who.uid) == (NS, "dns-100", "uid-dns-100")
    assert verifier.verify("tok", 5.0) == who and len(api.calls) == 1
    assert api.calls[0]["spec"] == {"token": "tok", "audiences": ["kuberhealthy"]}


@pytest.mark.parametrize("answer,why", [
    (review(authenticated=False, error="token has expired"), "expired"),
    (review(audiences=("https://kubernetes.default.svc",)), "audience"),
    ({"status": {"authenticated": True, "audiences": ["kuberhealthy"], "user": {"username": "alice"}}}, "bound"),
])
def test_a_token_that_fails_review_is_invalid_with_its_reason(answer: Obj, why: str) -> None:
    with pytest.raises(InvalidToken, match=why):
        TokenVerifier(ReviewApi(answer)).verify("tok", 5.0)  # type: ignore[arg-type]


def test_an_api_server_that_is_away_defers_the_token_instead_of_refusing_it() -> None:
    with pytest.raises(TokenNotYetVerified):
        TokenVerifier(ReviewApi(Unreachable("down"))).verify("tok", 5.0)  # type: ignore[arg-type]


def test_the_bearer_scheme_is_read_case_insensitively_and_other_schemes_are_not_tokens() -> None:
    assert bearer("Bearer abc") == "abc" and bearer("bearer  abc ") == "abc"
    assert bearer("Basic abc") is None and bearer("") is None
    assert identity_of(review()).name == "dns-100"
