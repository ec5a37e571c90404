"""A real single-node Kubernetes 1.20.2 (hack/node/node.sh) driven from Python, for tests/e2e.

The simulated kubelet (testbed/sim) stays the test bed for almost everything; this is the one place
where checker pods really run: containerd + runc start them, a CNI bridge gives them IPs from a range of
their own, kube-proxy routes Services, the memory cgroup OOM-kills them. All set-up and clean-up lives
in the shell script (so it can be run and debugged by hand); this wrapper only calls it, reads the env
file it writes, and offers kubectl and image import. It never imports `kuberhealthy`.

It does not make a node per test: starting takes ~25 s and one real node may run per machine (the
script holds /run/kuberhealthy-realnode.lock), so tests share one for a session.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from testbed.paths import REPO

NODE_SH = REPO / "hack" / "node" / "node.sh"
DEFAULT_DIR = Path("/run/kuberhealthy-realnode")
START_TIMEOUT = 600.0  # generous: a first start after a crash also cleans up what that run left
STOP_TIMEOUT = 300.0
ENV_KEYS = ("KUBECONFIG", "API_URL", "NODE_NAME", "NODE_IP", "POD_CIDR", "SERVICE_CIDR", "CONTAINERD_SOCK",
            "KUBECTL")


class RealNodeError(RuntimeError):
    """node.sh failed; the message carries the tail of its output."""


def _run_script(command: str, state_dir: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KH_NODE_DIR=str(state_dir))
    proc = subprocess.run(["bash", str(NODE_SH), command], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-4000:]
        raise RealNodeError(f"node.sh {command} exited {proc.returncode}:\n{tail}")
    return proc


def read_env(path: Path) -> dict[str, str]:
    """The KEY=VALUE lines node.sh writes once the node is up (the last thing `start` does)."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            env[key.strip()] = value.strip()
    missing = [k for k in ENV_KEYS if k not in env]
    if missing:
        raise RealNodeError(f"{path} lacks {', '.join(missing)}")
    return env


class RealNode:
    """One running real node: its env (kubeconfig, API URL, node IP, ranges, containerd socket)."""

    def __init__(self, env: dict[str, str], state_dir: Path = DEFAULT_DIR) -> None:
        self.env = env
        self.state_dir = state_dir

    # --- life cycle ------------------------------------------------------------------------------------

    @staticmethod
    def unavailable(state_dir: Path = DEFAULT_DIR) -> str | None:
        """Why a real node cannot start here (None: it can). Cheap checks only, for a pytest skip."""
        if os.name != "posix" or not hasattr(os, "geteuid"):
            return "a real node needs Linux"
        if os.geteuid() != 0:
            return "a real node needs root (it creates a bridge, iptables rules, cgroups and mounts)"
        if not Path("/sys/fs/cgroup/memory").is_dir() and not Path("/sys/fs/cgroup/cgroup.controllers").exists():
            return "no memory cgroup (/sys/fs/cgroup/memory)"
        for tool in ("containerd", "ctr", "runc", "iptables", "etcd", "ip", "flock", "openssl", "curl"):
            if shutil.which(tool) is None:
                return f"{tool} is not installed (run: hack/node/node.sh build)"
        cache = Path(os.environ.get("KH_TESTBED_DIR", Path.home() / ".cache" / "kuberhealthy-testbed"))
        binaries = cache / "k8s-v1.20.2" / "bin"
        for name in ("kube-apiserver", "kube-controller-manager", "kubelet", "kube-scheduler", "kube-proxy",
                     "kubectl"):
            if not (binaries / name).is_file():
                return f"{binaries / name} is not built (run: hack/node/node.sh build)"
        images = cache / "k8s-v1.20.2" / "node-images"
        if not (images / "pause.tar").is_file():
            return f"{images / 'pause.tar'} is missing (run: hack/node/node.sh build)"
        other = Path("/run/kuberhealthy-realnode.lock.dir")
        if other.is_file() and other.read_text().strip() not in ("", str(state_dir)):
            return f"another real node runs on this machine ({other.read_text().strip()})"
        return None

    @classmethod
    def start(cls, state_dir: Path = DEFAULT_DIR, timeout: float = START_TIMEOUT) -> RealNode:
        """Run `node.sh start` (a no-op when this node already runs and is healthy), read its env."""
        _run_script("start", state_dir, timeout)
        return cls(read_env(state_dir / "env"), state_dir)

    @classmethod
    def attach(cls, state_dir: Path = DEFAULT_DIR) -> RealNode:
        """The node already running from state_dir (no start): for a shell started with `make node-start`."""
        return cls(read_env(state_dir / "env"), state_dir)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """`node.sh stop`: delete every pod, stop everything, undo the host side effects. Idempotent."""
        _run_script("stop", self.state_dir, timeout)

    def status(self) -> str:
        """`node.sh status` output (raises RealNodeError when the node is not up and Ready)."""
        return _run_script("status", self.state_dir, 60).stdout

    # --- what tests use ---------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return Path(self.env["KUBECONFIG"])

    @property
    def api_url(self) -> str:
        return self.env["API_URL"]

    @property
    def node_name(self) -> str:
        return self.env["NODE_NAME"]

    @property
    def node_ip(self) -> str:
        """The bridge's gateway address: the API server and kubelet listen here, pods reach it."""
        return self.env["NODE_IP"]

    @property
    def pod_cidr(self) -> str:
        return self.env["POD_CIDR"]

    @property
    def service_cidr(self) -> str:
        return self.env["SERVICE_CIDR"]

    @property
    def busybox_image(self) -> str:
        """A locally made busybox image, imported at start (pods must use imagePullPolicy: Never)."""
        return self.env.get("BUSYBOX_IMAGE", "localhost/kh-node/busybox:1")

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60.0, stdin: str | None = None) -> str:
        """Run the node's kubectl (1.20.2, built with the API server) as admin; its stdout.

        With check=True a non-zero exit raises CalledProcessError carrying stderr."""
        proc = subprocess.run([self.env["KUBECTL"], "--kubeconfig", str(self.kubeconfig),
                               f"--request-timeout={max(1, int(timeout))}s", *args],
                              input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, proc.args, proc.stdout, proc.stderr)
        return proc.stdout

    def import_image(self, tar_path: Path | str, timeout: float = 300.0) -> None:
        """Load a docker-archive or OCI tar into containerd's k8s.io namespace (no registry here).

        hack/node/mkimage.sh makes such a tar from a directory; `podman save` does too."""
        ctr = self.env.get("CTR") or shutil.which("ctr") or "ctr"
        subprocess.run([ctr, "-a", self.env["CONTAINERD_SOCK"], "-n", "k8s.io", "images", "import", str(tar_path)],
                       check=True, capture_output=True, text=True, timeout=timeout)

    def images(self) -> list[str]:
        """The image references containerd holds for pods."""
        ctr = self.env.get("CTR") or shutil.which("ctr") or "ctr"
        out = subprocess.run([ctr, "-a", self.env["CONTAINERD_SOCK"], "-n", "k8s.io", "images", "ls", "-q"],
                             check=True, capture_output=True, text=True, timeout=60).stdout
        return [line for line in out.splitlines() if line]
