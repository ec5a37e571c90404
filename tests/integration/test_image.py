"""The daemon image, built and run for real.

No container registry is reachable here, so `hack/image.sh` makes the base from Debian packages
(mmdebstrap: python3 + venv, cached in $KH_TESTBED_DIR) and builds the repository's Dockerfile on it
with podman (runc runtime, private storage and configuration under $KH_TESTBED_DIR/containers, so the
base and the layer cache survive between runs). The image then runs as the chart runs it: uid/gid
999, read-only root filesystem with only /tmp writable, every capability dropped, no privilege
escalation, and every shell in the image masked, so the image is shown to need none. With the test
bed's API server on the host network the daemon runs a check that the simulated kubelet plays and
serves `/`.

`make image-test` runs this file alone; `make test` runs it with everything else. It skips (with the
reason) only where no engine can be installed or run: `hack/image.sh probe` decides. The Dockerfile
tests at the end need nothing but the files.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from kuberhealthy.kube import KHCHECKS, KHSTATES
from testbed.cluster.apiserver import TestCluster
from testbed.cluster.builders import khcheck
from testbed.cluster.loopback import free_port
from testbed.paths import CHART, REPO
from testbed.sim.kubelet import SimKubelet
from testbed.wait import wait_for

IMAGE_SH = REPO / "hack" / "image.sh"
CHART_VALUES = CHART / "values.yaml"
SESSION = uuid.uuid4().hex[:10]  # labels and names every container and image of this test session
LABEL = f"kuberhealthy-image-test={SESSION}"

pytestmark = pytest.mark.timeout(900)  # a cold build (base + wheels) takes a few minutes on 2 cores


def _report(request: pytest.FixtureRequest, text: str) -> None:
    """Show a figure in the test run's output, whatever the capture mode."""
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if reporter is None:
        return
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        reporter.ensure_newline()
        for line in text.splitlines():
            reporter.write_line(f"[image] {line}")


def _key_values(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if re.match(r"^[A-Z_]+=", line))


@dataclass
class Podman:
    """podman with the image tests' private configuration (from `hack/image.sh env`)."""

    env: dict[str, str]

    def __call__(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["podman", *args], capture_output=True, text=True, env=self.env, timeout=timeout,
                              check=False, stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def remove_session_containers(self) -> None:
        ids = self("ps", "-aq", "--filter", f"label={LABEL}", check=False).stdout.split()
        if ids:
            self("rm", "-f", "-t", "0", *ids, check=False, timeout=60)


@dataclass
class Image:
    tag: str
    base: str
    build_seconds: float
    size_bytes: int
    config: dict[str, Any]
    labels: dict[str, str]
    no_shell: list[str] = field(default_factory=list)  # -v options masking every shell with /dev/null


@pytest.fixture(scope="module")
def podman(request: pytest.FixtureRequest) -> Iterator[Podman]:
    probe = subprocess.run(["bash", str(IMAGE_SH), "probe"], capture_output=True, text=True, check=True, timeout=60)
    found = _key_values(probe.stdout)
    if "SKIP" in found:
        _report(request, f"SKIPPED, the image is not built or run here: {found['SKIP']}")
        pytest.skip(f"image tests: {found['SKIP']}")
    out = subprocess.run(["bash", str(IMAGE_SH), "env"], capture_output=True, text=True, check=True, timeout=60)
    env = dict(os.environ, **{k: v for k, v in _key_values(out.stdout).items() if k.startswith("CONTAINERS_")})
    engine = Podman(env)
    # Stopped containers left by an earlier run that was killed (running ones belong to live runs).
    engine("container", "prune", "-f", "--filter", "label=kuberhealthy-image-test", check=False)
    try:
        yield engine
    finally:
        engine.remove_session_containers()


@contextlib.contextmanager
def _storage_lock() -> Iterator[int]:
    """Shared while this session uses the private storage; clean-up takes it exclusively, if it can."""
    root = Path(os.environ.get("KH_TESTBED_DIR", Path.home() / ".cache" / "kuberhealthy-testbed")) / "containers"
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / ".in-use", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield fd
    finally:
        os.close(fd)


def _shell_masks(podman: Podman, tag: str) -> list[str]:
    """`-v /dev/null:<shell>:ro` for every shell the image contains (resolved through symlinks)."""
    script = ("import os\n"
              "found = {os.path.realpath(p) for p in ('/bin/sh', '/bin/dash', '/bin/bash', '/usr/bin/sh', "
              "'/usr/bin/dash', '/usr/bin/bash', '/bin/busybox') if os.path.exists(p)}\n"
              "print(' '.join(sorted(found)))")
    out = podman("run", "--rm", "--network", "none", "--label", LABEL, "--entrypoint", "/opt/kuberhealthy/bin/python",
                 tag, "-c", script).stdout.split()
    assert out, "found no shell to mask: the test would prove nothing"
    masks: list[str] = []
    for shell in out:
        masks += ["-v", f"/dev/null:{shell}:ro"]
    return masks


@pytest.fixture(scope="module")
def image(podman: Podman, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Image]:
    """The Dockerfile built on the Debian-made base; removed afterwards (its layers stay cached)."""
    tag = f"localhost/kuberhealthy-python:test-{SESSION}"
    log = tmp_path_factory.mktemp("image") / "build.log"
    env = dict(podman.env, KH_IMAGE_PRIVATE="1", KH_IMAGE_ENGINE="podman", BASE_IMAGE="debian")
    with _storage_lock() as lock:
        try:
            started = time.monotonic()
            for attempt in (1, 2):  # a second try rides out a dropped download; a broken Dockerfile fails twice
                with open(log, "a") as out:
                    out.write(f"=== build attempt {attempt}\n")
                    out.flush()
                    proc = subprocess.run(["bash", str(IMAGE_SH), "build", tag], stdout=out, stderr=subprocess.STDOUT,
                                          env=env, timeout=420, check=False, stdin=subprocess.DEVNULL)
                if proc.returncode == 0:
                    break
            seconds = time.monotonic() - started
            text = log.read_text(errors="replace")
            assert proc.returncode == 0, f"image build failed twice ({proc.returncode}):\n{text[-8000:]}"
            (info,) = json.loads(podman("image", "inspect", tag).stdout)
            base = info["Labels"]["org.opencontainers.image.base.name"]
            img = Image(tag=tag, base=base, build_seconds=seconds, size_bytes=int(info["Size"]),
                        config=info["Config"], labels=info["Labels"] or {})
            img.no_shell = _shell_masks(podman, tag)
            made = re.search(r"base made in (\d+) s", text)
            _report(request, f"{tag}: {img.size_bytes / 1e6:.0f} MB, built in {seconds:.0f} s on {base}"
                             + (f" (the base itself made in {made.group(1)} s)" if made else " (base cached)"))
            yield img
        finally:
            podman.remove_session_containers()
            podman("rmi", tag, check=False)  # only this tag: an identical build of another run keeps its own
            # Untagged layers of earlier builds go, unless another test run is using the storage now
            # (the pip download cache and the base image stay, so the next build is still quick).
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass
            else:
                podman("image", "prune", "-f", check=False, timeout=300)


def _chart_security() -> dict[str, Any]:
    values = yaml.safe_load(CHART_VALUES.read_text())
    sc = values["securityContext"]
    assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
    return dict(sc)


def _as_the_chart_runs_it(image: Image) -> list[str]:
    """podman options matching the chart's securityContext and volumes (/tmp is its only writable path)."""
    sc = _chart_security()
    return ["--user", f"{sc['runAsUser']}:{sc['fsGroup']}", "--read-only", "--read-only-tmpfs=false",
            "--tmpfs", "/tmp:rw,size=64m,mode=1777", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--label", LABEL, *image.no_shell]


# --- the image ---------------------------------------------------------------------------------------------

def test_the_image_is_built_on_a_debian_made_base_and_carries_oci_labels_and_the_chart_user(image: Image) -> None:
    assert image.base.startswith("localhost/kuberhealthy-base:"), image.base  # made here, never pulled
    version = re.search(r'version="([^"]+)"', (REPO / "setup.py").read_text())
    assert version is not None
    assert image.labels["org.opencontainers.image.version"] == version.group(1)
    for key in ("title", "description", "licenses", "url", "revision"):
        assert f"org.opencontainers.image.{key}" in image.labels, key
    sc = _chart_security()
    assert image.config["User"] == f"{sc['runAsUser']}:{sc['fsGroup']}"
    assert image.config["Entrypoint"] == ["/opt/kuberhealthy/bin/kuberhealthy"]
    assert image.config["Cmd"] == ["--config", "/etc/config/kuberhealthy.yaml"]
    assert "8080/tcp" in image.config["ExposedPorts"]
    assert image.size_bytes < 400e6, f"{image.size_bytes / 1e6:.0f} MB"


def test_kuberhealthy_help_runs_in_the_container_as_uid_999_on_a_read_only_root_without_a_shell(
        podman: Podman, image: Image, request: pytest.FixtureRequest) -> None:
    proc = podman("run", "--rm", "--network", "none", *_as_the_chart_runs_it(image), image.tag, "--help")
    assert proc.stdout.startswith("usage: kuberhealthy"), proc.stdout + proc.stderr
    assert "--config FILE" in proc.stdout
    version = podman("run", "--rm", "--network", "none", *_as_the_chart_runs_it(image), image.tag, "--version")
    assert version.stdout.strip().startswith("kuberhealthy ")
    _report(request, "$ kuberhealthy --help (in the container)\n" + "\n".join(proc.stdout.splitlines()[:3]))


def test_the_image_has_no_pip_and_no_build_files(podman: Podman, image: Image) -> None:
    script = ("import importlib.util, os, sys\n"
              "print(importlib.util.find_spec('pip') is None, os.path.exists('/src'), os.path.exists('/wheels'),"
              " sys.prefix)")
    out = podman("run", "--rm", "--network", "none", *_as_the_chart_runs_it(image), "--entrypoint",
                 "/opt/kuberhealthy/bin/python", image.tag, "-c", script).stdout.split()
    assert out == ["True", "False", "False", "/opt/kuberhealthy"]


# --- the daemon in the container -------------------------------------------------------------------------------

def _get(url: str) -> requests.Response | None:
    try:
        return requests.get(url, timeout=2)
    except requests.RequestException:
        return None


def test_the_daemon_in_the_container_runs_a_check_against_the_api_server_and_serves_the_status_page(
        podman: Podman, image: Image, cluster: TestCluster, namespace: str, kubelet: SimKubelet,
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config_dir = tmp_path / "config"
    config_dir.mkdir(mode=0o755)
    config_dir.chmod(0o755)
    (config_dir / "kuberhealthy.yaml").write_text(yaml.safe_dump({
        "listenAddress": f"127.0.0.1:{port}", "targetNamespace": namespace, "enableForceMaster": True,
        "externalCheckReportingURL": f"{url}/externalCheckStatus", "checkChangeDebounce": "0s",
        "logLevel": "info"}))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(cluster.kubeconfig.read_text())
    for f in (config_dir / "kuberhealthy.yaml", kubeconfig):
        f.chmod(0o644)
    cluster.request("POST", KHCHECKS.path(namespace), khcheck("in-image", interval="3s"))

    name = f"kh-image-{SESSION}"
    podman("run", "-d", "--name", name, "--network", "host", "--timeout", "600", *_as_the_chart_runs_it(image),
           "-v", f"{config_dir}:/etc/config:ro", "-v", f"{kubeconfig}:/etc/kuberhealthy/kubeconfig:ro",
           "-e", "KUBECONFIG=/etc/kuberhealthy/kubeconfig", "-e", "POD_NAME=kh-image-0",
           "-e", f"POD_NAMESPACE={namespace}", image.tag)
    try:
        def logs() -> str:
            p = podman("logs", name, check=False)
            return p.stdout + p.stderr

        def ready() -> bool:
            state = podman("inspect", "--format", "{{.State.Status}}", name, check=False).stdout.strip()
            assert state == "running", f"the container is {state}:\n{logs()}"
            answer = _get(f"{url}/readyz")
            return answer is not None and answer.status_code == 200

        wait_for(ready, 90, 0.2, what="the daemon in the container to be ready")

        def check_done() -> dict[str, Any] | None:
            spec = cluster.request("GET", KHSTATES.path(namespace, "in-image"))["spec"]
            return spec if spec.get("OK") and spec.get("RunDuration") else None

        try:
            spec = wait_for(check_done, 60, 0.2, what="a good run recorded by the daemon in the container")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{logs()}") from None
        assert spec["AuthoritativePod"] == "kh-image-0"
        assert spec["Errors"] == []

        status = requests.get(f"{url}/", timeout=5)
        assert status.status_code == 200
        body = status.json()
        detail = body["CheckDetails"][f"{namespace}/in-image"]
        assert detail["OK"] is True and body["CurrentMaster"] == "kh-image-0"
        metrics = requests.get(f"{url}/metrics", timeout=5).text
        assert f'kuberhealthy_check{{check="{namespace}/in-image"' in metrics

        podman("stop", "-t", "30", name, timeout=60)
        exit_code = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        assert exit_code == "0", f"exit code {exit_code} after SIGTERM:\n{logs()}"
        shown = {"OK": body["OK"], "CheckDetails": {f"{namespace}/in-image": {
            k: detail[k] for k in ("OK", "Errors", "RunDuration", "Node", "AuthoritativePod")}},
            "CurrentMaster": body["CurrentMaster"]}
        _report(request, f"$ curl {url}/   (the daemon in the container, uid 999, read-only root)\n"
                         + json.dumps(shown, indent=2) + f"\nstopped by SIGTERM: exit code {exit_code}")
    finally:
        podman("rm", "-f", "-t", "0", name, check=False, timeout=60)


# --- the Dockerfile (files only) ------------------------------------------------------------------------------

def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            instr, _, rest = line.partition(" ")
            out.append((instr.upper(), rest.strip()))
    return out


def test_the_dockerfile_builds_a_wheel_then_installs_it_into_a_virtualenv_on_a_base_given_as_build_argument() -> None:
    steps = _dockerfile()
    assert steps[0] == ("ARG", "BASE_IMAGE=python:3.11-slim")  # the default base stays the official slim image
    assert [a for i, a in steps if i == "FROM"] == ["${BASE_IMAGE} AS builder", "${BASE_IMAGE} AS runtime"]
    runs = [a for i, a in steps if i == "RUN"]
    assert any(re.search(r"pip wheel\b.*\s\.(\s|$)", a) for a in runs)
    assert any("from=builder" in a and "venv" in a and "install" in a for a in runs)
    runtime = steps[[i for i, (instr, _) in enumerate(steps) if instr == "FROM"][1]:]
    instrs = dict(runtime)  # the last of each instruction in the runtime stage
    assert json.loads(instrs["ENTRYPOINT"]) == ["/opt/kuberhealthy/bin/kuberhealthy"]  # exec form: no shell
    assert json.loads(instrs["CMD"]) == ["--config", "/etc/config/kuberhealthy.yaml"]
    assert instrs["EXPOSE"] == "8080"
    # The wheels are bind-mounted, never copied into a layer; only their checksums are, so the install
    # layer's cache key changes with them (a bind mount does not count in buildah's key: stale images).
    assert [a for i, a in runtime if i == "COPY"] == ["--from=builder /wheels.sha256 /opt/kuberhealthy-wheels.sha256"]
    labels = " ".join(a for i, a in runtime if i == "LABEL")
    for key in ("title", "description", "version", "revision", "licenses", "url"):
        assert f"org.opencontainers.image.{key}=" in labels, key

    user = instrs["USER"].split(":")[0]
    assert user.isdigit() and int(user) != 0  # numeric, so runAsNonRoot can verify it
    assert int(user) == _chart_security()["runAsUser"]

    # setup.py names the console script the ENTRYPOINT runs, and reads README.md: both must be copied.
    assert "kuberhealthy = kuberhealthy.cli:main" in (REPO / "setup.py").read_text()
    copied = " ".join(a for i, a in steps if i == "COPY")
    for needed in ("setup.py", "pyproject.toml", "README.md", "kuberhealthy"):
        assert needed in copied


def test_the_docker_build_context_keeps_only_what_the_wheel_is_built_from() -> None:
    patterns = [p.strip() for p in (REPO / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]

    def ignored(path: str) -> bool:  # Docker's rule: the last matching pattern wins
        result = False
        for pattern in patterns:
            negate = pattern.startswith("!")
            regex = re.escape(pattern.lstrip("!").rstrip("/")).replace(r"\*\*/", "(.*/)?").replace(r"\*", "[^/]*")
            parts = path.split("/")
            if any(re.fullmatch(regex, "/".join(parts[:n])) for n in range(1, len(parts) + 1)):
                result = not negate
        return result

    for kept in ("setup.py", "pyproject.toml", "README.md", "kuberhealthy/__init__.py", "kuberhealthy/kube/client.py"):
        assert not ignored(kept), kept
    for dropped in (".git/config", ".venv/bin/python", "tests/conftest.py", "kuberhealthy/__pycache__/x.pyc",
                    "kuberhealthy.egg-info/PKG-INFO", "build/lib/x.py", "helm/kuberhealthy/values.yaml",
                    "Dockerfile"):
        assert ignored(dropped), dropped
