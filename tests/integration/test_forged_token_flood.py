"""A flood of forged bearer tokens costs the API server almost nothing and never costs a genuine report
(docs/interface.md#report-authenticity; kuberhealthy/web/report/tokens.py): real API server (TokenReview
for real), simulated kubelet minting the checker's real projected token, the daemon in this process, every
report over real HTTP from loopback addresses as an attacker who can read pods (but not their token files)
would send it."""
from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from kuberhealthy.kube.client import USER_AGENT
from kuberhealthy.records.checkspec import CheckSpec
from kuberhealthy.run.runner import Outcome, Runner
from kuberhealthy.web.parts import part
from kuberhealthy.web.report.admission import Admission
from kuberhealthy.web.report.routes import ReportDesk
from testbed.clients.forgery import forged_token
from testbed.clients.rawhttp import REPORT_PATH, request
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khcheck
from testbed.cluster.loopback import outside_ip
from testbed.daemons.inprocess import InProcessDaemon
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

OK_BODY = b'{"OK": true, "Errors": []}'
N = 300  # forged reports, at least
EVERY = 30  # one in EVERY names the live checker pod's real name and UID (read from the API), the rest made-up pods
AGENT = USER_AGENT.split("/")[0] + "/"


@pytest.fixture
def daemon_settings() -> dict[str, Any]:
    """Rate limits out of the way: every forged report reaches the token path."""
    return {"reportRateLimit": 10000, "reportRateBurst": 10000}


def web(d: InProcessDaemon) -> Admission:
    return part(ReportDesk, d.app).admission


def token_reviews(cluster: TestCluster, offset: int) -> list[dict[str, Any]]:
    return [e for e in cluster.audit_events_since(offset) if str(e.get("userAgent", "")).startswith(AGENT)
            and e.get("verb") == "create" and e.get("stage") == "ResponseComplete"
            and (e.get("objectRef") or {}).get("resource") == "tokenreviews"]


def reviews_in_log(cluster: TestCluster, offset: int, made: int) -> list[dict[str, Any]] | None:
    """The daemon's TokenReviews since `offset`, once the audit log has (at least) the `made` ones."""
    got = token_reviews(cluster, offset)
    return got if len(got) >= made else None


def addressed_pod(d: InProcessDaemon) -> dict[str, Any] | None:
    """A checker pod the daemon's cache holds with its address."""
    return next((p for p in d.services.pods.list() if (p.get("status") or {}).get("podIP")), None)


def test_a_flood_of_forged_tokens_costs_far_fewer_than_one_review_per_ten_and_the_genuine_token_gets_200(
        cluster: TestCluster, namespace: str, daemon: InProcessDaemon, kubelet: SimKubelet) -> None:
    body = khcheck("probe", "kh-sim/ok", interval="1h", timeout="30s", env={"SIM_TOKEN": "file", "SIM_DELAY": "4"})
    body["metadata"]["namespace"] = namespace
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(Runner(daemon.services, CheckSpec.of(body), threading.Event()).run)
        pod = wait_for(lambda: addressed_pod(daemon), 20, what="the run's pod with its address")
        assert pod is not None
        wait_for(lambda: not web(daemon).triage.behind(), 10, what="caches that cannot be behind")
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        offset, reviews = cluster.audit_offset(), web(daemon).tokens.reviews
        lock, answers, on_the_pod = threading.Lock(), Counter[int](), [0]

        def attack(source: str) -> None:  # until the genuine report is in, and at least N forged reports sent
            while not run.done() or sum(answers.values()) < N:
                with lock:
                    real = sum(answers.values()) % EVERY == 0
                    on_the_pod[0] += real
                token = forged_token(namespace, name, uid) if real else forged_token(namespace)
                headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
                status = request(daemon.port, "POST", REPORT_PATH, OK_BODY, headers=headers, source_ip=source,
                                 timeout=10).status
                with lock:
                    answers[status] += 1
        with ThreadPoolExecutor(12) as flood:
            list(flood.map(attack, [outside_ip(20 + i % 3) for i in range(12)]))
        result = run.result(60)
    assert result.outcome is Outcome.REPORTED, result
    record = kubelet.reported_record(namespace, result.pod)
    assert record.report is not None and record.report.bearer
    assert record.report.status == 200, record.report.response_body
    sent = sum(answers.values())
    assert set(answers) <= {400, 401, 503} and answers[400] >= sent - on_the_pod[0], answers  # made-up pods: free
    made = web(daemon).tokens.reviews - reviews
    got = wait_for(lambda: reviews_in_log(cluster, offset, made), 10, what="the TokenReviews in the audit log")
    assert got is not None
    assert len(got) == made <= on_the_pod[0] + 1, (len(got), on_the_pod, answers)
    assert made * 10 < sent, (made, sent, answers)
