"""Resources.pod_log gets the end of a log even when its last lines are long: the kubelet counts
limitBytes from the start of the tail (testbed/sim/logs.py answers the same way)."""
from __future__ import annotations

from typing import Any

from kuberhealthy.kube import Resources
from testbed.sim.logs import PodLog


class KubeletBehindApi:
    """Stands in for Kube.request_bytes on pods/log, answering as the kubelet does."""

    def __init__(self, log: PodLog) -> None:
        self.log = log
        self.asked: list[int] = []

    def request_bytes(self, method: str, path: str, *, query: dict[str, Any], timeout: float) -> bytes:
        assert method == "GET" and path.endswith("/pods/checker/log") and timeout > 0
        self.asked.append(int(query["tailLines"]))
        return self.log.select(int(query["tailLines"]), int(query["limitBytes"]))


def pod_log_of(lines: list[str]) -> tuple[str, list[int]]:
    log = PodLog(("main",))
    log.write(*lines)
    kube = KubeletBehindApi(log)
    text = Resources(kube).pod_log("ns", "checker", tail_lines=40, limit_bytes=16384)  # type: ignore[arg-type]
    return text, kube.asked


def test_a_log_of_short_lines_is_read_in_one_request() -> None:
    lines = [f"line {i}" for i in range(100)]
    assert pod_log_of(lines) == ("\n".join(lines[-40:]) + "\n", [40])


def test_long_last_lines_are_asked_for_again_with_fewer_lines_until_the_end_of_the_log_fits() -> None:
    lines = [f"step {i}: " + "x" * 900 for i in range(50)] + ["error: the final word"]
    text, asked = pod_log_of(lines)
    assert asked == [40, 20, 10]  # 40 and 20 lines fill 16 KiB; 10 fit
    assert text == "\n".join(lines[-10:]) + "\n"


def test_a_single_line_longer_than_the_limit_is_given_as_its_beginning() -> None:
    text, asked = pod_log_of(["short", "y" * 20000])
    assert asked == [40, 20, 10, 5, 2, 1] and text == "y" * 16384
