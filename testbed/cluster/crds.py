"""Install the chart's CRDs into a test cluster and wait until they are served."""
from __future__ import annotations

import time
import urllib.error
from pathlib import Path
from typing import Any

import yaml

from testbed.cluster.apiserver import TestCluster
from testbed.paths import CRD_DIR


def load_crds() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(Path(CRD_DIR).glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def install_crds(cluster: TestCluster, timeout: float = 60) -> None:
    base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for crd in load_crds():
        try:
            cluster.request("POST", base, crd)
        except urllib.error.HTTPError as e:
            if e.code != 409:
                raise
    deadline = time.monotonic() + timeout
    for crd in load_crds():
        plural = crd["spec"]["names"]["plural"]
        served = next(v["name"] for v in crd["spec"]["versions"] if v.get("served", True))
        while True:
            try:
                cluster.request("GET", f"/apis/{crd['spec']['group']}/{served}/{plural}")
                break
            except urllib.error.HTTPError as e:
                if e.code != 404 or time.monotonic() > deadline:
                    raise
            time.sleep(0.1)
