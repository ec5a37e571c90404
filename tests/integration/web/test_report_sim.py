"""Reports sent by simulated checker pods (testbed/sim): real pod lifecycle, real source addresses."""
from __future__ import annotations

import uuid

from kuberhealthy.daemon.services import Services
from testbed.daemons.inprocess import PodMaker, WebServer, wait_cached
from testbed.sim import SimKubelet
from testbed.wait import wait_for


def test_simulated_checkers_report_by_header_by_address_and_from_the_host_network(
        server: WebServer, maker: PodMaker, services: Services, kubelet: SimKubelet) -> None:
    url = server.url + "/externalCheckStatus"
    ns = maker.namespace
    cases = {
        "by-header": ("kh-sim/fail", {"SIM_ERRORS": "disk full|dns slow"}, False),
        "by-address": ("kh-sim/fail", {"SIM_ERRORS": "no header", "SIM_NO_UUID_HEADER": "1"}, False),
        # the host-network pods share their node's address and stay Running a while after reporting
        "host-a": ("kh-sim/fail", {"SIM_ERRORS": "from host a", "SIM_EXIT_DELAY": "30"}, True),
        "host-b": ("kh-sim/hang", {}, True),
        "host-no-header": ("kh-sim/ok", {"SIM_NO_UUID_HEADER": "1", "SIM_DELAY": "0.5"}, True),
    }
    pods = {}
    for check, (image, env, host) in cases.items():
        run = str(uuid.uuid4())
        maker.khstate(check, run, OK=check == "host-no-header", Errors=[] if check == "host-no-header" else ["old"])
        pods[check] = maker.pod(check, run, running=False, wait=False, image=image,
                                env={"KH_REPORTING_URL": url, **env}, host_network=host,
                                node_name=kubelet.nodes[0][0] if host else None)
    wait_for(lambda: len(kubelet.report_results) == len(cases), timeout=60, what="every simulated pod to report")
    results = kubelet.report_results
    status = {check: results[f"{ns}/{pod.name}"].status for check, pod in pods.items()}
    assert status == {"by-header": 200, "by-address": 200, "host-a": 200, "host-b": 200,
                      "host-no-header": 400}
    assert maker.get_khstate("by-header")["spec"]["Errors"] == ["disk full", "dns slow"]
    assert maker.get_khstate("by-address")["spec"]["Errors"] == ["no header"]
    assert maker.get_khstate("host-a")["spec"]["Errors"] == ["from host a"]
    assert maker.get_khstate("host-b")["spec"]["OK"] is True
    assert "two or more" in results[f"{ns}/{pods['host-no-header'].name}"].response_body
    wait_cached(services, ns, "host-b", lambda o: o["spec"]["OK"] is True)
