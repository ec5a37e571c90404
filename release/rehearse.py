"""The release, built and rehearsed here: `make release-test` runs `python -m release rehearse`.

    python -m release rehearse [--node auto|always|never] [--node-lock FILE] [--out DIR]
                                       [--containerd-hosts auto|write|no]
    python -m release build --out dist [--engine docker|podman] [--base debian|dockerfile|IMAGE]
                                    [--expect-tag v0.1.0] [--platforms linux/amd64,linux/arm64]
    python -m release multiarch [--platforms linux/amd64,linux/arm64] [--base debian|IMAGE] [--out DIR]
    python -m release push --out dist [--image-repo ghcr.io/kuberhealthy-py/kuberhealthy]
                                   [--chart-repo oci://ghcr.io/kuberhealthy-py/charts] [--tag TAG]

`build` and `push` are release/build.py's (the release workflow runs them); `multiarch` is
release/multiarch.py's (the image for several platforms, checked over HTTP: `make image-multiarch`).
`rehearse` builds, then checks what was built as a user gets it:

1. registry: Debian's docker-registry started by hand on 127.0.0.1 (release/registry.py);
2. push: the image (`podman push --tls-verify=false`) as <registry>/kuberhealthy-py/kuberhealthy:<appVersion>
   and the chart (`helm push --plain-http`) to oci://<registry>/charts; both tags are then read back;
3. install: `helm install` from oci://<registry>/charts/kuberhealthy into a test bed API server with only
   image.registry and image.repository set (the tag defaults to the appVersion); the live Deployment
   must name the pushed image;
4. node (where a real node can start, hack/node/node.sh; --node-lock FILE is flocked around it): the same
   install on it with imagePullPolicy Always; containerd pulls from the registry, the pod becomes Ready,
   and its imageID is the digest the registry holds. A certs.d/<host:port>/hosts.toml names the
   plain-HTTP registry where containerd's config has a registry `config_path` (containerd 1.6's CRI
   pulls from a loopback registry over plain HTTP with or without one: measured on 1.6.20);
5. venv: the daemon's wheel into a fresh venv with `--no-index --find-links` (a wheelhouse of its
   dependencies made with `pip wheel` first), then `kuberhealthy --version`; the client's wheel alone
   into another fresh venv, where it must pull in nothing, then `import kuberhealthy_checkclient`.

Each step prints its time against a budget, and all of them at the end (`[release] time budget: ...`).
Every problem found is named in the one failure at the end. docs/release.md describes the release.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from release.build import (
    IMAGE_PATH,
    LOCAL_IMAGE,
    PUBLISHED_CHARTS,
    PUBLISHED_IMAGE,
    Artifacts,
    Budget,
    ImageBuild,
    ReleaseError,
    build,
    project_version,
    push,
    remove_image,
    run,
)
from release.multiarch import PLATFORMS
from release.multiarch import main as multiarch_main
from release.registry import LocalRegistry
from testbed.cluster.apiserver import TestCluster, cleanup, start_cluster
from testbed.cluster.objects import create_namespace
from testbed.node.e2e import helm_binary
from testbed.node.realnode import NODE_SH, RealNode, RealNodeError
from testbed.paths import REPO
from testbed.tools.helm import Helm

RELEASE = "kh-release"
NODE_NAMESPACE = "kh-release"
READY_TIMEOUT = 240.0
LOCK_TIMEOUT = 1800.0
BUILD_TIMEOUT = 1800.0  # node.sh build on a cold cache (the Debian 1.20.2 tree is the test bed's)
HOSTS_TOML = """# Written by release/rehearse.py: the rehearsal's registry speaks plain HTTP.
server = "http://{addr}"

[host."http://{addr}"]
  capabilities = ["pull", "resolve"]
  skip_verify = true
"""
CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/khchecks.comcast.github.io"


@dataclass(frozen=True)
class Pushed:
    """What the rehearsal pushed to its local registry, and the chart values that install from there."""

    registry: str  # host:port
    image: str  # host:port/path:tag
    chart: str  # oci://host:port/charts/kuberhealthy
    values: list[str]  # --set values: the image's registry and repository


def rehearse(budget: Budget, helm: Helm, *, out: Path | None = None, node: str = "auto", node_lock: str = "",
             containerd_hosts: str = "auto", cluster: TestCluster | None = None) -> dict[str, Any]:
    """Every step; raises ReleaseError naming every problem found. Returns what was seen, per step."""
    keep = out is not None
    out = out or Path(tempfile.mkdtemp(prefix="kh-release-"))
    try:
        return _rehearse(budget, helm, out, node=node, node_lock=node_lock, containerd_hosts=containerd_hosts,
                         cluster=cluster)
    finally:
        if not keep:
            shutil.rmtree(out, ignore_errors=True)


def _rehearse(budget: Budget, helm: Helm, out: Path, *, node: str, node_lock: str, containerd_hosts: str,
              cluster: TestCluster | None) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    # A local tag of this run's own: two rehearsals on one machine never untag each other's image.
    art = build(out, budget, helm, image=ImageBuild(
        "podman", "debian", local_tag=f"{LOCAL_IMAGE}:{project_version()}-rehearsal-{os.getpid()}"))
    problems = list(art.problems)
    seen["artifacts"] = {k: Path(v).name for k, v in (("sdist", art.sdist), ("wheel", art.wheel),
                                                      ("client_wheel", art.client_wheel), ("chart", art.chart)) if v}
    seen["client_skipped"] = art.client_skipped
    try:
        with budget.part("registry"):
            registry = LocalRegistry().start()
        try:
            with budget.part("push"):
                image, chart = push(art, helm, image_repo=f"{registry.address}/{IMAGE_PATH}",
                                    chart_repo=f"oci://{registry.address}/charts", insecure=True)
                for repo, tag in ((IMAGE_PATH, art.app_version), ("charts/kuberhealthy", art.chart_version)):
                    if tag not in registry.tags(repo):
                        problems.append(f"the registry lists no {repo}:{tag} after the push")
            seen.update(image=image, chart=chart)
            pushed = Pushed(registry.address, image, chart,
                            [f"image.registry={registry.address}", f"image.repository={IMAGE_PATH}"])
            with budget.part("install"), _step("install", seen, problems):
                seen["install"] = install_on_testbed(helm, art, pushed, cluster)
            with _step("node", seen, problems):
                seen["node"] = node_step(budget, helm, art, pushed, mode=node, lock=node_lock, hosts=containerd_hosts)
        finally:
            registry.stop()
    finally:
        remove_image(art)
    with budget.part("venv"), _step("venv", seen, problems), tempfile.TemporaryDirectory(prefix="kh-venv-") as tmp:
        seen["venv"] = venv_check(art, Path(tmp))
    for step, what in seen.items():
        budget.say(f"{step}: {what}")
    for problem in problems:
        budget.say(f"PROBLEM: {problem}")
    if problems:
        raise ReleaseError("; ".join(problems))
    return seen




@contextlib.contextmanager
def _step(name: str, seen: dict[str, Any], problems: list[str]) -> Iterator[None]:
    """A check whose failure is recorded (the rehearsal goes on, and fails at the end naming it)."""
    try:
        yield
    except (ReleaseError, AssertionError, subprocess.SubprocessError, OSError) as e:
        seen[name] = "FAILED"
        problems.append(f"{name}: {str(e)[:3000]}")


# --- the test bed ----------------------------------------------------------------------------------------

def install_on_testbed(helm: Helm, art: Artifacts, pushed: Pushed, cluster: TestCluster | None) -> str:
    """Install from the OCI registry into `cluster` (or a test bed of its own); the Deployment's image."""
    chart, values, image = pushed.chart, pushed.values, pushed.image
    own = cluster is None
    bed = start_cluster() if cluster is None else cluster
    try:
        ns = create_namespace(bed, prefix="release")
        # A test bed whose CRDs a test session installed: --skip-crds; a fresh one gets the chart's own.
        skip = ["--skip-crds"] if _exists(bed, CRD) else []
        sets = [arg for v in values for arg in ("--set", v)]
        helm.run("install", RELEASE, chart, "--version", art.chart_version, "--plain-http", "--namespace", ns,
                 *skip, *sets, kubeconfig=bed.kubeconfig)
        try:
            dep = bed.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/kuberhealthy")
            images = [c["image"] for c in dep["spec"]["template"]["spec"]["containers"]]
            if images != [image]:
                raise ReleaseError(f"the Deployment installed from {chart} runs {images}, not [{image}]")
            listed = json.loads(helm.run("list", "--namespace", ns, "-o", "json", kubeconfig=bed.kubeconfig).stdout)
            charts = [(r["chart"], r["app_version"]) for r in listed]
            if charts != [(f"kuberhealthy-{art.chart_version}", art.app_version)]:
                raise ReleaseError(f"helm list shows {charts}")
        finally:
            helm.run("uninstall", RELEASE, "--no-hooks", "--namespace", ns, kubeconfig=bed.kubeconfig, check=False)
        return f"Deployment image {images[0]} ({'chart CRDs' if not skip else 'CRDs already there'})"
    finally:
        if own:
            cleanup(bed)


def _exists(bed: TestCluster, path: str) -> bool:
    try:
        bed.request("GET", path)
        return True
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return False
        raise


# --- the real node ---------------------------------------------------------------------------------------

@contextlib.contextmanager
def _flock(path: str) -> Iterator[None]:
    if not path:
        yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        deadline = time.monotonic() + LOCK_TIMEOUT
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ReleaseError(f"{path} stayed locked for {LOCK_TIMEOUT:.0f} s") from None
                time.sleep(1)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def containerd_config_path(node: RealNode) -> Path | None:
    """The CRI registry `config_path` of the node's containerd config, if it names one."""
    text = (node.state_dir / "containerd" / "config.toml").read_text()
    found = re.search(r'^\s*config_path\s*=\s*"([^"]+)"', text, re.M)
    return Path(found.group(1).split(":")[0]) if found else None


def write_hosts_toml(node: RealNode, addr: str, mode: str) -> str:
    """certs.d/<addr>/hosts.toml naming the plain-HTTP registry; what was done, in words."""
    if mode == "no":
        return "no hosts.toml (--containerd-hosts no)"
    config_path = containerd_config_path(node)
    if config_path is None and mode == "auto":
        return "containerd's config has no registry config_path: no hosts.toml (1.6 pulls from loopback over HTTP)"
    target = (config_path or node.state_dir / "containerd" / "certs.d") / addr / "hosts.toml"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(HOSTS_TOML.format(addr=addr))
    return f"wrote {target}" + ("" if config_path else " (containerd's config names no config_path: not read)")


def manifest_digest(addr: str, repo: str, tag: str) -> str:
    accept = ", ".join(("application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json",
                        "application/vnd.docker.distribution.manifest.v2+json",
                        "application/vnd.docker.distribution.manifest.list.v2+json"))
    req = urllib.request.Request(f"http://{addr}/v2/{repo}/manifests/{tag}", method="HEAD", headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=10) as answer:
        return str(answer.headers["Docker-Content-Digest"])


def node_step(budget: Budget, helm: Helm, art: Artifacts, pushed: Pushed, *, mode: str, lock: str, hosts: str) -> str:
    addr, chart, values, image = pushed.registry, pushed.chart, pushed.values, pushed.image
    if mode == "never":
        return "skipped (--node never)"
    with _flock(lock), budget.part("node"):
        reason = RealNode.unavailable()
        if reason and os.geteuid() == 0:  # as tests/e2e does: build what is missing (idempotent), look again
            build_log = subprocess.run(["bash", str(NODE_SH), "build"], capture_output=True, text=True, check=False,
                                       timeout=BUILD_TIMEOUT, stdin=subprocess.DEVNULL)
            reason = RealNode.unavailable()
            if reason and build_log.returncode != 0:
                reason += f" (node.sh build failed: {(build_log.stdout + build_log.stderr)[-1500:]})"
        if reason:
            if mode == "always" or os.environ.get("CI") == "true":
                raise ReleaseError(f"the real node cannot start ({'CI=true' if mode == 'auto' else '--node always'}):"
                                   f" {reason}")
            budget.say(f"node: skipped: {reason}")
            return f"skipped: {reason}"
        try:
            node = RealNode.start()
        except (RealNodeError, subprocess.TimeoutExpired) as e:
            raise ReleaseError(f"node.sh start failed: {e}") from None
        try:
            said = write_hosts_toml(node, addr, hosts)
            budget.say(f"node: {said}")
            sets = [arg for v in [*values, "deployment.replicas=1", "config.enableForceMaster=true",
                                  "deployment.imagePullPolicy=Always", "check.daemonset.enabled=false",
                                  "check.deployment.enabled=false", "check.dnsInternal.enabled=false"]
                    for arg in ("--set", v)]
            helm.run("install", RELEASE, chart, "--version", art.chart_version, "--plain-http", "--namespace",
                     NODE_NAMESPACE, "--create-namespace", *sets, kubeconfig=node.kubeconfig)
            pod = _await_ready_pod(node)
            status = pod["status"]["containerStatuses"][0]
            want = manifest_digest(addr, IMAGE_PATH, art.app_version)
            if status["image"] != image or not status["imageID"].endswith(want):
                raise ReleaseError(f"the pod runs {status['image']} ({status['imageID']}), not {image}@{want}")
            return f"pod {pod['metadata']['name']} Ready, pulled {image}@{want[:19]}...; {said}"
        finally:
            node.stop()
            left = subprocess.run(["bash", str(NODE_SH), "leftovers"], capture_output=True, text=True, check=False,
                                  timeout=120, stdin=subprocess.DEVNULL)
            if left.returncode != 0:
                raise ReleaseError(f"node.sh leftovers after the stop: {(left.stdout + left.stderr)[-1500:]}")


def _await_ready_pod(node: RealNode) -> dict[str, Any]:
    deadline = time.monotonic() + READY_TIMEOUT
    pods: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        pods = json.loads(node.kubectl("get", "pods", "-n", NODE_NAMESPACE, "-l", "app=kuberhealthy", "-o", "json",
                                       check=False) or '{"items": []}')["items"]
        for pod in pods:
            conds = pod.get("status", {}).get("conditions") or []
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conds):
                return pod
        time.sleep(2)
    events = node.kubectl("get", "events", "-n", NODE_NAMESPACE, check=False)
    states = [(p["metadata"]["name"], p.get("status", {}).get("containerStatuses")) for p in pods]
    raise ReleaseError(f"no Ready daemon pod after {READY_TIMEOUT:.0f} s: {states}\n{events[-3000:]}")


# --- fresh venvs -----------------------------------------------------------------------------------------

def _venv(path: Path) -> Path:
    run([sys.executable, "-m", "venv", str(path)], timeout=120, what="python -m venv")
    return path / "bin"


def venv_check(art: Artifacts, work: Path) -> str:
    pip = ["-m", "pip", "--disable-pip-version-check", "--quiet"]
    house = work / "wheelhouse"
    run([sys.executable, *pip, "wheel", "-w", str(house), art.wheel], timeout=900, what="pip wheel (dependencies)")
    daemon = _venv(work / "daemon")
    run([str(daemon / "python"), *pip, "install", "--no-index", "--find-links", str(house),
         f"kuberhealthy=={art.version}"], timeout=600, what="pip install --no-index kuberhealthy")
    shown = run([str(daemon / "kuberhealthy"), "--version"], timeout=60, what="kuberhealthy --version").stdout.strip()
    if shown != f"kuberhealthy {art.version}":
        raise ReleaseError(f"kuberhealthy --version printed {shown!r}, not 'kuberhealthy {art.version}'")
    said = f"{shown} from {len(list(house.glob('*.whl')))} wheels"
    if not art.client_wheel:
        return said + f"; client skipped: {art.client_skipped}"
    alone = work / "client-wheel"
    alone.mkdir()
    shutil.copy(art.client_wheel, alone)
    client = _venv(work / "client")
    run([str(client / "python"), *pip, "install", "--no-index", "--find-links", str(alone),
         "kuberhealthy-checkclient"], timeout=300, what="pip install --no-index kuberhealthy-checkclient")
    where = run([str(client / "python"), "-c", "import kuberhealthy_checkclient as m; print(m.__file__)"],
                timeout=60, what="import kuberhealthy_checkclient").stdout.strip()
    if not Path(where).resolve().is_relative_to((work / "client").resolve()):
        raise ReleaseError(f"kuberhealthy_checkclient imported from {where}, not the fresh venv")
    listed = json.loads(run([str(client / "python"), "-m", "pip", "list", "--format", "json"], timeout=60).stdout)
    extra = sorted(p["name"] for p in listed if p["name"].lower() not in ("pip", "setuptools", "wheel",
                                                                          "kuberhealthy-checkclient"))
    if extra:
        raise ReleaseError(f"the client's wheel pulled in {extra}: it must install with no dependencies")
    if not any(n.endswith("kuberhealthy_checkclient/py.typed") for n in _names(art.client_wheel)):
        raise ReleaseError("the client's wheel has no py.typed")
    return said + "; kuberhealthy_checkclient imported alone, no dependencies, py.typed"


def _names(wheel: str) -> list[str]:
    return zipfile.ZipFile(wheel).namelist()


# --- the command ----------------------------------------------------------------------------------------

def _helm(home: Path) -> Helm:
    binary = helm_binary()
    if binary is None:
        raise ReleaseError("no helm binary (bash hack/tools.sh could not fetch it)")
    return Helm(binary, home)


def _platforms(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m release", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    reh = sub.add_parser("rehearse", help="build, push to a local registry, install, pip-install (make release-test)")
    reh.add_argument("--node", choices=("auto", "always", "never"), default="auto",
                     help="the real-node step: auto = where a real node can start (default)")
    reh.add_argument("--node-lock", default=os.environ.get("KH_NODE_LOCK", ""),
                     help="a file to flock around the real-node step (several users of one machine)")
    reh.add_argument("--containerd-hosts", choices=("auto", "write", "no"), default="auto",
                     help="write certs.d/<registry>/hosts.toml under the node's containerd dir")
    reh.add_argument("--out", type=Path, help="keep the artifacts here (default: a temporary directory)")
    bld = sub.add_parser("build", help="build the sdist, wheels, chart package and image into --out")
    bld.add_argument("--out", type=Path, default=REPO / "dist")
    bld.add_argument("--engine", choices=("docker", "podman"), default="podman")
    bld.add_argument("--base", default="debian", help="debian (hack/image.sh's Debian-made base), dockerfile "
                     "(the Dockerfile's python:3.11-slim) or an image reference")
    bld.add_argument("--expect-tag", default="", help="fail unless this git tag is v<version>")
    bld.add_argument("--platforms", default="", help="linux/amd64,linux/arm64: one image per platform in an "
                     "OCI image index (podman; qemu-user-static for a foreign one); default: the host's only")
    mul = sub.add_parser("multiarch", help="the image for several platforms: build, push to a local registry, "
                         "check the index over HTTP, start each (make image-multiarch)")
    mul.add_argument("--platforms", default=",".join(PLATFORMS))
    mul.add_argument("--base", default="debian", help="debian (a Debian-made base per platform) or an image")
    mul.add_argument("--out", type=Path, help="keep the build log here (default: a temporary directory)")
    psh = sub.add_parser("push", help="push the image and chart that build made")
    psh.add_argument("--out", type=Path, default=REPO / "dist")
    psh.add_argument("--image-repo", default=PUBLISHED_IMAGE)
    psh.add_argument("--chart-repo", default=PUBLISHED_CHARTS)
    psh.add_argument("--tag", default="", help="the image tag (default: the chart's appVersion)")
    psh.add_argument("--insecure", action="store_true", help="plain HTTP (a local registry)")
    args = parser.parse_args(argv)
    if args.command == "multiarch":
        return multiarch_main(_platforms(args.platforms), args.base, args.out)
    budget = Budget()
    with tempfile.TemporaryDirectory(prefix="kh-release-helm-") as home:
        helm = _helm(Path(home))
        try:
            if args.command == "rehearse":
                rehearse(budget, helm, out=args.out, node=args.node, node_lock=args.node_lock,
                         containerd_hosts=args.containerd_hosts)
            elif args.command == "build":
                art = build(args.out, budget, helm, expect_tag=args.expect_tag,
                            image=ImageBuild(args.engine, args.base, platforms=_platforms(args.platforms)))
                if art.problems:
                    raise ReleaseError("; ".join(art.problems))
            else:
                image, chart = push(Artifacts.load(args.out), helm, image_repo=args.image_repo,
                                    chart_repo=args.chart_repo, tag=args.tag, insecure=args.insecure)
                budget.say(f"pushed {image} and {chart}")
        except (ReleaseError, AssertionError) as e:  # AssertionError: a helm command failed (testbed.tools.helm)
            budget.say(f"FAILED: {e}")
            return 1
        finally:
            if budget.spent:
                budget.say(budget.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
