"""A real kube-apiserver + etcd on loopback, for tests, benchmarks and the demo.

Binaries come from hack/testbed/setup.sh (built once, cached). Every start picks free loopback ports,
so several test beds can run side by side. RBAC is on; the admin identity authenticates with a static
token; ServiceAccount tokens are minted with the TokenRequest API so a daemon can be run under the
chart's least-privilege account. The audit log (one JSON line per request) lets benchmarks count the
API requests a component makes; writes to khstates are logged with their request bodies, so a fault
scenario can see every OK/Errors the daemon wrote even across API server restarts.

Fault controls (for testbed/faults/faultbed.py, which bench/faults_bench.py and tests/integration/test_faults.py use):
the API server can be killed or stopped and started again on the same etcd, port, certificates, token
file, ServiceAccount keys and audit log (so kubeconfigs and minted tokens stay valid and the audit log
keeps appending), and frozen with SIGSTOP / thawed with SIGCONT. stop() always thaws first, so no API
server is left stopped.

Nothing here is imported by the product.
"""
from __future__ import annotations

import atexit
import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3

from testbed.cluster.loopback import free_port
from testbed.paths import REPO
from testbed.procs import end_group

# The test bed's API server has a self-signed certificate; every client here skips verification.
urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)

SETUP = REPO / "hack" / "testbed" / "setup.sh"
ADMIN_TOKEN = "kh-testbed-admin-token"

# First matching rule wins. Writes to khstates carry their request bodies (level Request) so an
# observer can read every OK/Errors written; everything else stays at Metadata (counts by userAgent).
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Request
  verbs: ["create", "update", "patch"]
  resources:
  - group: comcast.github.io
    resources: ["khstates"]
- level: Request
  verbs: ["create", "update", "patch"]
  resources:
  - group: kuberhealthy.github.io
    resources: ["healthchecks", "healthchecks/status"]
- level: Metadata
"""


def etcd_data_dir(workdir: Path) -> Path:
    """Where etcd keeps its data: in memory (/dev/shm) when the machine has it, else in the work dir.

    etcd fsyncs every commit. On this machine kind's virtual disk that took 0.5-0.9 s per write under
    load (the API server's traces: "Object stored in database 720ms"), so the test bed, not the code
    under test, set the pace of every write and of `make scale`'s schedule lag. Production etcd runs
    on SSDs with millisecond fsyncs; tmpfs stands in for that. KH_ETCD_ON_DISK=1 keeps it on disk.
    """
    shm = Path("/dev/shm")
    if not os.environ.get("KH_ETCD_ON_DISK") and shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="kh-etcd-", dir=shm))
    path = workdir / "etcd"
    path.mkdir(exist_ok=True)
    return path


def resolve_binaries() -> dict[str, str]:
    """Run the idempotent set-up script and return the binary paths it prints."""
    out = subprocess.run(["bash", str(SETUP)], check=True, capture_output=True, text=True).stdout
    paths: dict[str, str] = {}
    for line in out.splitlines():
        if "=" in line and line.split("=", 1)[0] in ("KUBE_APISERVER", "KUBE_CONTROLLER_MANAGER", "ETCD"):
            k, v = line.split("=", 1)
            paths[k] = v
    return paths


def kubeconfig_text(server: str, token: str, namespace: str = "default") -> str:
    return f"""apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster:
    server: {server}
    insecure-skip-tls-verify: true
users:
- name: user
  user:
    token: {token}
contexts:
- name: testbed
  context: {{cluster: testbed, user: user, namespace: {namespace}}}
current-context: testbed
"""


@dataclass
class TestCluster:
    """etcd + kube-apiserver (+ optional kube-controller-manager) as child processes."""

    workdir: Path
    with_kcm: bool = False
    api_port: int = 0
    etcd_port: int = 0
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    binaries: dict[str, str] = field(default_factory=dict)
    argv: dict[str, list[str]] = field(default_factory=dict)  # kept so a process can be respawned
    etcd_dir: Path | None = None
    frozen: bool = False  # the API server is SIGSTOPped

    __test__ = False  # not a pytest test class

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    @property
    def sa_key(self) -> Path:
        """The ServiceAccount token signing key (PEM, RSA): the simulated kubelet forges expired tokens."""
        return self.workdir / "sa.key"

    def start(self) -> TestCluster:
        self.binaries = resolve_binaries()
        self.workdir.mkdir(parents=True, exist_ok=True)
        wd = self.workdir
        self.etcd_dir = etcd_data_dir(wd)
        subprocess.run(["openssl", "genrsa", "-out", str(self.sa_key), "2048"], check=True, capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", str(self.sa_key), "-pubout", "-out", str(wd / "sa.pub")],
                       check=True, capture_output=True)
        (wd / "tokens.csv").write_text(f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n')
        (wd / "audit-policy.yaml").write_text(AUDIT_POLICY)
        etcd_port, peer_port = free_port(), free_port()
        self.etcd_port = etcd_port
        self.api_port = free_port()
        self._spawn("etcd", [
            self.binaries["ETCD"], "--name", "testbed", "--data-dir", str(self.etcd_dir),
            "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"testbed=http://127.0.0.1:{peer_port}",
            "--initial-cluster-state", "new",
        ])
        self._wait_http(f"http://127.0.0.1:{etcd_port}/health", "etcd", 30)
        self._spawn("apiserver", [
            self.binaries["KUBE_APISERVER"],
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.api_port}",
            "--endpoint-reconciler-type=none",
            f"--cert-dir={wd / 'certs'}",
            f"--token-auth-file={wd / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={wd / 'sa.pub'}",
            f"--service-account-signing-key-file={self.sa_key}",
            "--service-cluster-ip-range=127.96.0.0/16",
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true", "--profiling=false",
            # pods/log is proxied to the simulated kubelet (testbed/sim/logs.py) at the node's InternalIP: its
            # Hostname address resolves nowhere. No kubelet CA or client certificate: TLS unverified both ways.
            "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
            f"--audit-policy-file={wd / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}", "--audit-log-maxsize=0",
        ])
        self.wait_ready(90)
        self.kubeconfig.write_text(kubeconfig_text(self.server, ADMIN_TOKEN))
        if self.with_kcm and self.binaries.get("KUBE_CONTROLLER_MANAGER"):
            self._spawn("kcm", [
                self.binaries["KUBE_CONTROLLER_MANAGER"], f"--kubeconfig={self.kubeconfig}",
                "--port=0", "--secure-port=0", "--leader-elect=false",
                f"--service-account-private-key-file={self.sa_key}",
                f"--root-ca-file={wd / 'certs' / 'apiserver.crt'}", "--controllers=*",
            ])
        return self

    def _spawn(self, name: str, argv: list[str], append: bool = False) -> None:
        self.argv[name] = list(argv)
        with open(self.workdir / f"{name}.log", "ab" if append else "wb") as log:
            self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True)

    def wait_ready(self, limit: float = 90) -> None:
        """Block until the API server answers /readyz with 200 (raises if it exits or takes too long)."""
        self._wait_http(f"{self.server}/readyz", "apiserver", limit, token=ADMIN_TOKEN)

    # --- fault controls ------------------------------------------------------------------------------

    @property
    def apiserver_running(self) -> bool:
        proc = self.procs.get("apiserver")
        return proc is not None and proc.poll() is None

    def stop_apiserver(self, sig: int = signal.SIGKILL, timeout: float = 30) -> None:
        """End the API server (SIGKILL: a crash; SIGTERM: a graceful stop). etcd keeps running.

        A frozen server is thawed first, or SIGTERM would stay pending forever."""
        proc = self.procs.get("apiserver")
        if proc is None or proc.poll() is not None:
            return
        self.thaw()
        end_group(proc, sig, timeout)

    def start_apiserver(self, ready_timeout: float = 90) -> None:
        """Start the API server again with the argv of the first start: same etcd, port, certificates,
        token file, ServiceAccount keys and audit log (appended to). Returns once /readyz is 200."""
        if self.apiserver_running:
            raise RuntimeError("the API server is still running")
        if "apiserver" not in self.argv:
            raise RuntimeError("the API server was never started")
        self._spawn("apiserver", self.argv["apiserver"], append=True)
        self.frozen = False
        # Go listeners set SO_REUSEADDR, so the new process rebinds the same port at once.
        self.wait_ready(ready_timeout)

    def restart_apiserver(self, down_seconds: float = 0.0, sig: int = signal.SIGKILL,
                          ready_timeout: float = 90) -> None:
        """stop_apiserver(sig), stay down for down_seconds, start_apiserver()."""
        self.stop_apiserver(sig)
        if down_seconds > 0:
            time.sleep(down_seconds)
        self.start_apiserver(ready_timeout)

    def advance_etcd_revision(self, writes: int = 1) -> int:
        """Write a key of our own straight to etcd (its v3 JSON gateway), bypassing the API server.

        etcd's revision is global, so while the API server is down this stands in for the other
        writers of a real cluster (other API servers, controllers): a restarted API server then starts
        its watch cache past every resourceVersion its clients saw, and their watches get 410 Gone, as
        they would in production. Returns the new revision."""
        revision = 0
        for i in range(writes):
            body = json.dumps({"key": base64.b64encode(b"/kh-testbed/revision-bump").decode(),
                               "value": base64.b64encode(str(i).encode()).decode()}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{self.etcd_port}/v3/kv/put", data=body,
                                         method="POST", headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as resp:
                revision = int(json.loads(resp.read())["header"]["revision"])
        return revision

    def freeze(self) -> None:
        """SIGSTOP the API server: connections stay open, nothing answers (a hung process)."""
        proc = self.procs.get("apiserver")
        if proc is None or proc.poll() is not None:
            raise RuntimeError("the API server is not running")
        self.frozen = True  # first, so a thaw after any failure here still sends SIGCONT
        os.killpg(proc.pid, signal.SIGSTOP)

    def thaw(self, always: bool = False) -> None:
        """SIGCONT a frozen API server (a no-op otherwise; `always`: send it anyway)."""
        proc = self.procs.get("apiserver")
        if (self.frozen or always) and proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.frozen = False

    def _wait_http(self, url: str, name: str, limit: float, token: str | None = None) -> None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            proc = self.procs[name]
            if proc.poll() is not None:
                tail = (self.workdir / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")
            req = urllib.request.Request(url)
            if token:
                req.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{name} not ready after {limit}s")

    def stop(self) -> None:
        self.thaw(always=True)  # a SIGSTOPped server would never act on SIGTERM
        for name in ("kcm", "apiserver", "etcd"):
            proc = self.procs.pop(name, None)
            if proc is not None:
                end_group(proc, grace=10)
        if self.etcd_dir is not None and not self.etcd_dir.is_relative_to(self.workdir):
            shutil.rmtree(self.etcd_dir, ignore_errors=True)  # memory, not disk: free it with the bed

    # --- helpers for tests -------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, token: str = ADMIN_TOKEN,
                content_type: str = "application/json") -> Any:
        """A raw authenticated API request, independent of the product's client code."""
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token}")
        req.add_header("Content-Type", content_type)
        with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def get_raw(self, path: str, accept: str = "*/*", token: str = ADMIN_TOKEN) -> tuple[int, bytes]:
        """GET as an authenticated client and return (status, body) whatever the status: for answers
        that are not JSON (pods/log) or that a test expects to be errors, and for `Accept` variants
        (`application/json;as=Table;v=v1;g=meta.k8s.io` is what `kubectl get` asks for)."""
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        req = urllib.request.Request(self.server + path, headers={"Authorization": f"Bearer {token}",
                                                                  "Accept": accept})
        try:
            with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
                return int(resp.status), bytes(resp.read())
        except urllib.error.HTTPError as e:
            return int(e.code), bytes(e.read())

    def mint_token(self, namespace: str, service_account: str, seconds: int = 3600) -> str:
        """A bound ServiceAccount token from the TokenRequest API (creating the account if needed)."""
        try:
            self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                         {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": service_account}})
        except urllib.error.HTTPError as e:
            if e.code != 409:
                raise
        tr = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
                          {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                           "spec": {"audiences": ["https://kubernetes.default.svc.cluster.local"],
                                    "expirationSeconds": seconds}})
        return str(tr["status"]["token"])

    def sa_kubeconfig(self, namespace: str, service_account: str) -> Path:
        token = self.mint_token(namespace, service_account)
        path = self.workdir / f"kubeconfig-{namespace}-{service_account}"
        path.write_text(kubeconfig_text(self.server, token, namespace))
        return path

    def audit_events(self) -> list[dict[str, Any]]:
        events = []
        with open(self.audit_log, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    events.append(json.loads(line))
        return events

    def audit_offset(self) -> int:
        return self.audit_log.stat().st_size if self.audit_log.exists() else 0

    def audit_events_since(self, offset: int) -> list[dict[str, Any]]:
        with open(self.audit_log, encoding="utf-8") as f:
            f.seek(offset)
            return [json.loads(line) for line in f if line.strip()]


def start_cluster(with_kcm: bool = False, workdir: Path | None = None) -> TestCluster:
    """Start a test bed; its processes are stopped at interpreter exit even if the caller forgets."""
    wd = workdir or Path(tempfile.mkdtemp(prefix="kh-testbed-"))
    cluster = TestCluster(workdir=wd, with_kcm=with_kcm)
    atexit.register(cluster.stop)
    try:
        return cluster.start()
    except BaseException:
        cluster.stop()
        raise


def cleanup(cluster: TestCluster) -> None:
    cluster.stop()
    shutil.rmtree(cluster.workdir, ignore_errors=True)
