"""Kuberhealthy v3's own HealthCheck CRD (tests/fixtures/v3/healthcheck-crd.yaml) in place of ours, for a
while: the API server then prunes our status fields, as on a cluster that runs upstream v3's chart."""
from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import hcs
from testbed.cluster.crds import load_crds
from testbed.wait import wait_for

GROUP = "kuberhealthy.github.io"
CRD_NAME = f"healthchecks.{GROUP}"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
V3_CRD = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "v3" / "healthcheck-crd.yaml"
PROBE_NS = "default"
PROBE = "kh-crd-probe"


def _keeps_ours(cluster: TestCluster) -> bool:
    """A dry-run status write keeps a field of ours (`node`): our CRD is in force."""
    obj = cluster.request("GET", hcs(PROBE_NS, PROBE))
    obj["status"] = {"ok": True, "node": "n"}
    stored = cluster.request("PUT", hcs(PROBE_NS, PROBE) + "/status?dryRun=All", obj)
    return "node" in (stored.get("status") or {})


@contextmanager
def v3_crd_in_place(cluster: TestCluster) -> Iterator[None]:
    """v3's CRD in force inside the block, ours back (and in force) after."""
    (ours,) = [c for c in load_crds() if c["metadata"]["name"] == CRD_NAME]
    (v3,) = [d for d in yaml.safe_load_all(V3_CRD.read_text()) if d]
    cluster.request("POST", hcs(PROBE_NS), {
        "apiVersion": f"{GROUP}/v2", "kind": "HealthCheck", "metadata": {"name": PROBE},
        "spec": {"runInterval": "1m", "timeout": "30s",
                 "podSpec": {"spec": {"containers": [{"name": "main", "image": "kh-sim/ok"}]}}}})

    def put(crd: dict[str, Any]) -> None:
        current = cluster.request("GET", f"{CRDS}/{CRD_NAME}")
        body = copy.deepcopy(crd)
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        cluster.request("PUT", f"{CRDS}/{CRD_NAME}", body)

    put(v3)
    try:
        wait_for(lambda: not _keeps_ours(cluster), 30, what="v3's CRD in force")
        yield
    finally:
        put(ours)
        wait_for(lambda: _keeps_ours(cluster), 30, what="our CRD back in force")
        cluster.request("DELETE", hcs(PROBE_NS, PROBE))
