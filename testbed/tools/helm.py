"""Helm for tests: the binary from hack/tools.sh (or $KH_HELM, or PATH), run with a throw-away home.

The `helm` fixture is in testbed/pytest_plugin.py."""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.paths import CHART


def find_helm() -> str | None:
    """$KH_HELM, else the binary hack/tools.sh cached, else helm on PATH (None: none)."""
    if os.environ.get("KH_HELM"):
        return os.environ["KH_HELM"]
    root = Path(os.environ.get("KH_TESTBED_DIR", Path.home() / ".cache" / "kuberhealthy-testbed"))
    cached = root / f"helm-layer-v{os.environ.get('KH_HELM_LAYER', '33')}" / "helm"
    if cached.is_file() and os.access(cached, os.X_OK):
        return str(cached)
    return shutil.which("helm")


@dataclass
class Helm:
    binary: str
    home: Path

    def run(self, *args: str, kubeconfig: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        # Helm's cache/config/data under a temporary home: the tests never touch the user's helm set-up.
        env = dict(os.environ, HELM_CACHE_HOME=str(self.home / "cache"), HELM_CONFIG_HOME=str(self.home / "config"),
                   HELM_DATA_HOME=str(self.home / "data"))
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        proc = subprocess.run([self.binary, *args], capture_output=True, text=True, env=env, timeout=120,
                              check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def template(self, *values: str, namespace: str = "monitoring",
                 extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """Render the chart with --set values; returns the objects (empty documents dropped)."""
        args = ["template", "kh", str(CHART), "--namespace", namespace, *extra]
        for v in values:
            args += ["--set", v]
        out = self.run(*args).stdout
        return [d for d in yaml.safe_load_all(out) if d]


