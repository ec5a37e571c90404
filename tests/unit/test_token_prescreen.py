"""A forged bearer token costs nothing (kuberhealthy/web/report/tokens.py; docs/interface.md#under-hostile-clients):
the free pre-screen refuses what no review could pass, a token already reviewed skips it, reviews are single-flight
per token and at most a few at once, and past that bound the report gets 503 with `Retry-After: 1` at once, holding no
slot."""
from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from kuberhealthy.kube import KHSTATES, PODS, Obj
from kuberhealthy.records import khstate
from kuberhealthy.records.checkpod import RUN_ID_LABEL, build_pod
from kuberhealthy.web.parts import part
from kuberhealthy.web.report.admission import Admission
from kuberhealthy.web.report.routes import ReportDesk
from kuberhealthy.web.report.tokens import (
    AT_ONCE,
    ForeignPod,
    InvalidToken,
    PodIdentity,
    ReviewsBusy,
    Screen,
    TokenVerifier,
)
from testbed.fakes import NS, REPORTING_URL, FakeServices, check_spec, khstate_of
from testbed.wait import wait_for

WAIT = 10.0  # seconds a thread of a test may wait for something that happens at once
NOW = 1_800_000_000.0  # the wall clock the pre-screen reads expiries against
OK = json.dumps({"OK": True, "Errors": []}).encode()
HEADER = base64.urlsafe_b64encode(b'{"alg":"RS256","kid":"k"}').rstrip(b"=").decode()


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(claims: Any = None, *, pod: Any = ("dns-1", "uid-1"), **over: Any) -> str:
    """A JWT-shaped token (the signature is junk: the pre-screen never checks it) with the claims of a
    projected checker pod token, `over` replacing some (None: drop the claim)."""
    if claims is None:
        claims = {"aud": ["kuberhealthy"], "exp": int(NOW) + 600, "iat": int(NOW) - 10,
                  "kubernetes.io": {"namespace": NS, "pod": {"name": pod[0], "uid": pod[1]}}}
        claims.update(over)
        claims = {k: v for k, v in claims.items() if v is not None}
    payload = claims if isinstance(claims, bytes) else json.dumps(claims).encode()
    return f"{HEADER}.{b64(payload)}.{b64(uuid.uuid4().bytes)}"


class Pods:
    """The pod cache as the pre-screen sees it: get by namespace and name."""

    def __init__(self, *pods: tuple[str, str]) -> None:
        self.pods = {name: {"metadata": {"namespace": NS, "name": name, "uid": uid}} for name, uid in pods}

    def get(self, namespace: str, name: str) -> Obj | None:
        return self.pods.get(name) if namespace == NS else None


class Reviews:
    """TokenReviews: every token authenticates as the pod its payload names; `gate` (when given) holds
    each review until set."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.gate = gate
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def create(self, res: Any, namespace: str, body: Obj, timeout: float = 5.0, dry_run: bool = False) -> Obj:
        with self.lock:
            self.calls.append(body["spec"]["token"])
        if self.gate is not None:
            assert self.gate.wait(WAIT)
        claims = json.loads(base64.urlsafe_b64decode(body["spec"]["token"].split(".")[1] + "=="))
        pod = claims["kubernetes.io"]["pod"]
        return {"status": {"authenticated": True, "audiences": ["kuberhealthy"], "user": {
            "username": f"system:serviceaccount:{NS}:default",
            "extra": {"authentication.kubernetes.io/pod-name": [pod["name"]],
                      "authentication.kubernetes.io/pod-uid": [pod["uid"]]}}}}


def verifier(reviews: Reviews, pods: Pods | None = None, behind: bool = False, **kw: Any) -> TokenVerifier:
    screen = Screen(pods or Pods(("dns-1", "uid-1")), lambda ns, name: behind, wall=lambda: NOW)  # type: ignore[arg-type]
    return TokenVerifier(reviews, screen=screen, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("token,why", [
    ("kh-sim-garbage-0123", "not a JWT"),
    ("a.b", "not a JWT"),
    ("a.b.c.d", "not a JWT"),
    ("a..c", "not a JWT"),
    ("a+b.c/d.e", "not a JWT"),
    (jwt(b"not json"), "not a JSON object"),
    (jwt(b"[1, 2]"), "not a JSON object"),
    (jwt(b"[" * 100_000), "not a JSON object"),
    (jwt(aud=["https://kubernetes.default.svc"]), "audience"),
    (jwt(aud="https://kubernetes.default.svc"), "audience"),
    (jwt(aud=None), "audience"),
    (jwt(exp=int(NOW) - 61), "expired"),
    (jwt(exp=None), "no expiry"),
    (jwt(exp="soon"), "no expiry"),
    (jwt(**{"kubernetes.io": {"namespace": NS}}), "not bound to a pod"),
    (jwt(**{"kubernetes.io": None}), "not bound to a pod"),
])
def test_a_token_no_review_could_pass_is_refused_without_a_review(token: str, why: str) -> None:
    reviews = Reviews()
    tokens = verifier(reviews)
    with pytest.raises(InvalidToken, match=why) as e:
        tokens.verify(token, 5.0)
    assert str(e.value).startswith("the token is not ")
    assert reviews.calls == [] and tokens.reviews == 0 and tokens.screened == 1


def test_an_audience_given_as_a_single_string_and_an_expiry_within_the_clock_skew_are_reviewed() -> None:
    reviews = Reviews()
    tokens = verifier(reviews)
    assert tokens.verify(jwt(aud="kuberhealthy", exp=int(NOW) - 30), 5.0) == PodIdentity(NS, "dns-1", "uid-1")
    assert len(reviews.calls) == 1


def test_a_token_naming_a_pod_the_current_cache_does_not_hold_is_refused_without_a_review() -> None:
    reviews = Reviews()
    tokens = verifier(reviews)
    with pytest.raises(ForeignPod, match=f"the token's pod {NS}/made-up is not a checker pod"):
        tokens.verify(jwt(pod=("made-up", "uid-x")), 5.0)
    with pytest.raises(InvalidToken, match=f"its pod {NS}/dns-1 is gone"):
        tokens.verify(jwt(pod=("dns-1", "uid-of-an-older-pod")), 5.0)
    with pytest.raises(ForeignPod):
        tokens.verify(jwt(**{"kubernetes.io": {"namespace": "other", "pod": {"name": "dns-1", "uid": "uid-1"}}}), 5.0)
    assert reviews.calls == []
    assert tokens.verify(jwt(pod=("dns-1", "uid-1")), 5.0).name == "dns-1" and len(reviews.calls) == 1


def test_while_the_caches_may_be_behind_a_pod_they_do_not_hold_yet_is_left_to_the_review() -> None:
    reviews = Reviews()
    tokens = verifier(reviews, behind=True)
    assert tokens.verify(jwt(pod=("too-new", "uid-new")), 5.0) == PodIdentity(NS, "too-new", "uid-new")
    with pytest.raises(InvalidToken, match="expired"):  # the rules that need no cache still hold
        tokens.verify(jwt(exp=int(NOW) - 3600), 5.0)
    assert len(reviews.calls) == 1


def test_a_token_already_reviewed_skips_the_pre_screen() -> None:
    reviews = Reviews()
    pods = Pods(("dns-1", "uid-1"))
    tokens = verifier(reviews, pods)
    token = jwt()
    who = tokens.verify(token, 5.0)
    pods.pods.clear()  # the pre-screen would now refuse it: the verified answer stands (CACHE_SECONDS)
    assert tokens.verify(token, 5.0) == who
    assert len(reviews.calls) == 1 and tokens.screened == 0


def test_reports_with_the_same_token_at_once_share_one_review() -> None:
    gate = threading.Event()
    reviews = Reviews(gate)
    tokens = verifier(reviews)
    token = jwt()
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(tokens.verify, token, WAIT) for _ in range(8)]
        wait_for(lambda: reviews.calls and tokens.shared == 7, WAIT, what="seven reports waiting for the review")
        gate.set()
        answers = {f.result(WAIT) for f in futures}
    assert answers == {PodIdentity(NS, "dns-1", "uid-1")} and reviews.calls == [token] and tokens.reviews == 1


def test_reports_waiting_for_a_shared_review_that_fails_get_its_refusal_each() -> None:
    gate = threading.Event()
    reviews = Reviews(gate)
    tokens = verifier(reviews)

    def refuse(*args: Any, **kwargs: Any) -> Obj:
        assert gate.wait(WAIT)
        return {"status": {"authenticated": False, "error": "invalid bearer token"}}
    reviews.create = refuse  # type: ignore[method-assign]
    token = jwt()
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(tokens.verify, token, WAIT) for _ in range(3)]
        wait_for(lambda: tokens.shared == 2, WAIT, what="two reports waiting for the review")
        gate.set()
        for f in futures:
            with pytest.raises(InvalidToken, match="invalid bearer token"):
                f.result(WAIT)


def test_past_the_bound_of_reviews_in_flight_a_new_token_is_told_to_retry_at_once() -> None:
    gate = threading.Event()
    reviews = Reviews(gate)
    pods = Pods(*((f"dns-{i}", f"uid-{i}") for i in range(AT_ONCE + 1)))
    tokens = verifier(reviews, pods)
    with ThreadPoolExecutor(AT_ONCE) as pool:
        futures = [pool.submit(tokens.verify, jwt(pod=(f"dns-{i}", f"uid-{i}")), WAIT) for i in range(AT_ONCE)]
        wait_for(lambda: len(reviews.calls) == AT_ONCE, WAIT, what="the bound's reviews under way")
        began = time.monotonic()
        with pytest.raises(ReviewsBusy):
            tokens.verify(jwt(pod=(f"dns-{AT_ONCE}", f"uid-{AT_ONCE}")), WAIT)
        assert time.monotonic() - began < WAIT / 2  # at once, not after waiting for a review (hang guard)
        assert tokens.busy == 1 and len(reviews.calls) == AT_ONCE
        gate.set()
        assert all(f.result(WAIT).uid == f"uid-{i}" for i, f in enumerate(futures))
    assert tokens.verify(jwt(pod=(f"dns-{AT_ONCE}", f"uid-{AT_ONCE}")), WAIT).name == f"dns-{AT_ONCE}"


# --- through the route -----------------------------------------------------------------------------------

def post(client: FlaskClient, token: str, source: str = "192.0.2.99") -> Any:
    return client.post("/externalCheckStatus", data=OK, headers={"Authorization": f"Bearer {token}"},
                       content_type="application/json", environ_base={"REMOTE_ADDR": source})


def install(app: Flask, fake: FakeServices, reviews: Reviews) -> Admission:
    ctx = part(ReportDesk, app).admission
    ctx.tokens = TokenVerifier(reviews, screen=Screen(fake.pods, ctx.triage.may_be_new))  # type: ignore[arg-type]
    return ctx


def test_forged_tokens_are_answered_401_with_the_challenge_or_400_and_cost_no_review(
        fake_services: FakeServices, app: Flask, client: FlaskClient) -> None:
    reviews = Reviews()
    install(app, fake_services, reviews)
    garbage = post(client, "kh-sim-garbage-1")
    assert garbage.status_code == 401 and garbage.text.startswith("the token is not valid")
    assert garbage.headers["WWW-Authenticate"].startswith("Bearer")
    made_up = post(client, jwt(pod=("made-up", "uid-x")))
    assert made_up.status_code == 400 and "is not a checker pod that may report" in made_up.text
    assert reviews.calls == []


def test_a_genuine_token_report_is_answered_200_after_one_review(
        fake_services: FakeServices, app: Flask, client: FlaskClient) -> None:
    reviews = Reviews()
    install(app, fake_services, reviews)
    run = str(uuid.uuid4())
    fake_services.api.put(KHSTATES, khstate_of("dns", uuid=run))
    pod = fake_services.kubelet.run(fake_services.api.put(PODS, build_pod(check_spec("dns"), run,
                                                                         fake_services.clock.wall(), REPORTING_URL)))
    meta = pod["metadata"]
    token = jwt(pod=(meta["name"], meta["uid"]), exp=int(time.time()) + 600)
    answer = post(client, token)
    assert answer.status_code == 200, answer.text
    assert reviews.calls == [token]


def test_a_report_past_the_bound_gets_503_retry_after_1_and_reports_waiting_for_a_review_hold_no_slot(
        fake_services: FakeServices, app: Flask) -> None:
    gate = threading.Event()
    reviews = Reviews(gate)
    ctx = install(app, fake_services, reviews)
    fake_services.pods.set_current(False)  # the caches may be behind: made-up pods go on to the review
    slots = ctx.slots._value
    exp = int(time.time()) + 600
    try:
        with ThreadPoolExecutor(AT_ONCE) as pool:
            futures = [pool.submit(post, app.test_client(), jwt(pod=(f"p{i}", f"u{i}"), exp=exp))
                       for i in range(AT_ONCE)]
            wait_for(lambda: len(reviews.calls) == AT_ONCE, WAIT, what="the bound's reviews under way")
            assert ctx.slots._value == slots
            answer = post(app.test_client(), jwt(pod=("p-next", "u-next"), exp=exp))
            assert answer.status_code == 503 and answer.headers["Retry-After"] == "1", answer.text
            assert "WWW-Authenticate" not in answer.headers
            gate.set()
            assert [f.result(WAIT).status_code for f in futures] == [400] * AT_ONCE  # reviewed: no checker pods
    finally:
        gate.set()
        fake_services.pods.set_current(True)


def test_while_a_run_starts_only_a_token_naming_its_pod_is_given_a_review_and_made_up_pods_are_refused(
        fake_services: FakeServices, app: Flask, client: FlaskClient) -> None:
    reviews = Reviews()
    ctx = install(app, fake_services, reviews)
    triage = ctx.triage
    fake_services.pods.pause()  # the pod watch trails: a fast checker reports before its pod is delivered
    # named for now on the app's own wall clock (the claim's pod name carries the run's start)
    body = build_pod(check_spec("dns"), str(uuid.uuid4()), time.time(), REPORTING_URL)
    name = body["metadata"]["name"]
    fake_services.api.put(KHSTATES, khstate_of("dns", uuid=body["metadata"]["labels"][RUN_ID_LABEL],
                                               annotations={khstate.RUN_POD: name}))
    try:
        assert triage.behind() and triage.may_be_new(NS, name) and not triage.may_be_new(NS, "made-up")
        exp = int(time.time()) + 600
        assert post(client, jwt(pod=("made-up", "uid-x"), exp=exp)).status_code == 400
        post(client, jwt(pod=(name, "uid-not-yet-seen"), exp=exp))  # the review names it: then the pod read decides
        assert len(reviews.calls) == 1
        fake_services.pods.set_current(False)
        assert triage.may_be_new(NS, "made-up")  # a cache not current: any pod may be new
    finally:
        fake_services.pods.set_current(True)
        fake_services.pods.resume()
