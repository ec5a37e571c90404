"""The daemon's pods as the chart deploys them on a real node: Ready through the chart's own probes, and
hardened as the running container shows it (not as the manifest says)."""
from __future__ import annotations

import json

from testbed.node.e2e import E2E

# Run inside the daemon's container with its own interpreter (the image has no shell): what the kernel
# says about PID 1, the daemon.
INSPECT = r"""
import errno, json
status = dict(line.split(":", 1) for line in open("/proc/1/status").read().splitlines() if ":" in line)
root = [l.split() for l in open("/proc/1/mounts") if l.split()[1] == "/"][-1]
try:
    open("/e2e-write-probe", "w")
    write = "written"
except OSError as e:
    write = errno.errorcode.get(e.errno, str(e.errno))
keys = ("Uid", "Gid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs")
print(json.dumps({k: status[k].split() for k in keys} | {"root_options": root[3].split(","), "write": write}))
"""


def test_the_daemon_pods_become_ready_through_the_charts_probes_as_uid_999_read_only_with_every_capability_dropped(
        kh: E2E) -> None:
    pods = kh.ready_daemon_pods()
    assert len(pods) == 2
    for pod in pods:
        (container,) = pod["spec"]["containers"]
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"] is True and status["restartCount"] == 0, status

        seen = json.loads(kh.kubectl("exec", pod["metadata"]["name"], "-n", kh.namespace, "-c", "kuberhealthy", "--",
                                     "/opt/kuberhealthy/bin/python", "-c", INSPECT))

        assert seen["Uid"] == ["999"] * 4 and seen["Gid"] == ["999"] * 4, seen
        for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(seen[caps][0], 16) == 0, (caps, seen[caps])
        assert seen["NoNewPrivs"] == ["1"]
        assert "ro" in seen["root_options"], seen["root_options"]
        assert seen["write"] == "EROFS"
