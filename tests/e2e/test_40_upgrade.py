"""`helm upgrade` on the real node: to a new image tag (a rolling update of both replicas) and with a
changed config value (`reportAuth: token`, applied live), with no false alarm: every run of a good check
stays OK, never two live checker pods of it, and each run's `AuthoritativePod` was the Lease holder."""
from __future__ import annotations

import threading

from testbed.node.e2e import E2E, Sampler, daemon_logs, history, metric, newest_run, poll
from testbed.node.images import DAEMON_NEXT_TAG

SHELL = "localhost/kh-e2e/shell-check:e2e"
CURL = "localhost/kh-e2e/curl-check:e2e"
CHECK = "upgrade-ok"


def _ok_runs_since(kh: E2E, check: str, seen: frozenset[str]) -> list[dict[str, object]]:
    return [r for r in history(kh.khstate(check)) if r["uuid"] not in seen]


def test_a_rolling_upgrade_to_a_new_image_tag_raises_no_false_alarm(kh: E2E) -> None:
    kh.apply(kh.khcheck(CHECK, kh.pod_spec(SHELL, {"MODE": "ok"}), run_interval="15s", timeout="40s"))
    first = newest_run(kh, CHECK, timeout=120)
    seen = frozenset({first["uuid"]})
    old_pods = {p["metadata"]["name"] for p in kh.daemon_pods()}
    stop = threading.Event()
    sampler = Sampler(kh, [CHECK], stop)
    sampler.start()
    assert sampler.ready.wait(60), sampler.errors
    try:
        kh.upgrade(f"image.tag={DAEMON_NEXT_TAG}")

        def rolled() -> bool:
            pods = kh.ready_daemon_pods()
            return (len(pods) == 2 and all(p["spec"]["containers"][0]["image"].endswith(f":{DAEMON_NEXT_TAG}")
                                           for p in pods)
                    and not ({p["metadata"]["name"] for p in kh.daemon_pods(live_only=False)} & old_pods))
        poll(rolled, 300, "both replicas rolled to the new tag")
        leader = poll(kh.leader, 60, "a leader after the upgrade")
        assert leader not in old_pods
        last = newest_run(kh, CHECK, seen=frozenset(r["uuid"] for r in history(kh.khstate(CHECK))), timeout=120)
        assert last["OK"] is True
    finally:
        stop.set()
        sampler.join(30)

    runs = _ok_runs_since(kh, CHECK, seen)
    assert runs and all(r["OK"] is True for r in runs), runs
    state = kh.khstate(CHECK)
    assert state is not None and state["consecutiveFailures"] == 0
    assert sampler.errors == []
    assert sampler.max_live(CHECK) <= 1, sampler.live_counts(CHECK)
    for run_uuid, authoritative, holders in sampler.runs:
        assert authoritative in holders, (run_uuid, authoritative, holders)


def test_an_upgrade_with_a_changed_config_value_applies_it_live_with_no_false_alarm(kh: E2E) -> None:
    """reportAuth: token: the shell checker (checkclient sends the projected token the kubelet mounts)
    stays OK; a v2 curl checker, which sends no token, is now refused with 401 token-required."""
    pods_before = {p["metadata"]["name"] for p in kh.daemon_pods()}
    seen = frozenset(r["uuid"] for r in history(kh.khstate(CHECK)))

    kh.upgrade("config.reportAuth=token")
    kh.apply(kh.khcheck("curl-needs-token", kh.pod_spec(CURL, {"MODE": "ok"}), run_interval="15s", timeout="30s"))

    def refused() -> bool:
        return sum(metric(kh.pod_metrics(p), "kuberhealthy_report_rejected_total", reason="token-required") or 0.0
                   for p in kh.daemon_pods()) > 0
    try:
        poll(refused, 240, "the ConfigMap change to reach the daemons (a token-less report refused)")
        after = frozenset(r["uuid"] for r in history(kh.khstate(CHECK)))
        run = newest_run(kh, CHECK, seen=after, timeout=120)  # a run wholly under reportAuth: token
        assert run["OK"] is True
        assert "(token): stored" in daemon_logs(kh)
    finally:
        kh.delete("khcheck", "curl-needs-token", kh.checks_namespace)
        kh.delete("khcheck", CHECK, kh.checks_namespace)

    assert {p["metadata"]["name"] for p in kh.daemon_pods()} == pods_before  # live: no restart
    runs = _ok_runs_since(kh, CHECK, seen)
    assert runs and all(r["OK"] is True for r in runs), runs
