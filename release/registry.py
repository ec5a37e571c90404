"""A throw-away OCI registry on 127.0.0.1: Debian's `docker-registry` (the CNCF distribution, 2.8),
started by hand from a temporary config and storage directory, for the release rehearsal
(release/rehearse.py).

apt starts no services on this machine kind, so the package is only installed (`ensure_installed`, with
apt-get as hack/tools.sh installs its Debian packages) and `/usr/bin/docker-registry serve CONFIG` runs
as a child of ours, in its own process group, on a free loopback port: plain HTTP, no auth, deletes
enabled, nothing kept after `stop()`. Image pushes need `--tls-verify=false` (podman) and chart pushes
`--plain-http` (helm).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from testbed.cluster.loopback import free_port
from testbed.procs import end_group

BINARY = "/usr/bin/docker-registry"
PACKAGE = "docker-registry"
START_TIMEOUT = 30.0

CONFIG = """# Written by release/registry.py: a throw-away registry for the release rehearsal.
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {storage}
  delete:
    enabled: true
http:
  addr: {addr}
  secret: kh-release-rehearsal
"""


# What a manifest request accepts: an image index or list, or one image's manifest (OCI or Docker's).
MANIFEST_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.list.v2+json",
                  "application/vnd.docker.distribution.manifest.v2+json")


@dataclass(frozen=True)
class Served:
    """A manifest as the registry serves it."""

    media_type: str      # the Content-Type header
    digest: str          # the Docker-Content-Digest header, checked against the body
    document: dict[str, Any]


class RegistryError(RuntimeError):
    """The registry could not be installed or did not start; the message says why."""


def binary() -> str | None:
    """The registry's binary ($KH_DOCKER_REGISTRY, else Debian's path, else PATH), or None."""
    for candidate in (os.environ.get("KH_DOCKER_REGISTRY"), BINARY, shutil.which("docker-registry")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def ensure_installed() -> str:
    """The binary, apt-installing Debian's docker-registry first when it is missing (root, or sudo)."""
    found = binary()
    if found:
        return found
    sudo: list[str] = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if shutil.which("apt-get") is None:
        raise RegistryError("docker-registry is not installed and there is no apt-get to install it")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in ([*sudo, "apt-get", "update", "-qq"],
                 [*sudo, "apt-get", "install", "-y", "-qq", "-o", "DPkg::Lock::Timeout=300",
                  "--no-install-recommends", PACKAGE]):
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900, check=False)
        if proc.returncode != 0:
            raise RegistryError(f"{' '.join(argv)} failed ({proc.returncode}): {(proc.stdout + proc.stderr)[-1500:]}")
    found = binary()
    if not found:
        raise RegistryError(f"apt-get installed {PACKAGE} but {BINARY} is not there")
    return found


class LocalRegistry:
    """`with LocalRegistry() as reg:` a registry at `reg.address` (127.0.0.1:<port>) until the block ends."""

    def __init__(self, workdir: Path | None = None) -> None:
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="kh-registry-"))
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / "registry.log"

    def start(self) -> LocalRegistry:
        exe = ensure_installed()
        storage = self.workdir / "storage"
        storage.mkdir(parents=True, exist_ok=True)
        last = ""
        for _ in range(3):  # a port taken between free_port() and the bind: try another
            self.port = free_port()
            config = self.workdir / "config.yml"
            config.write_text(CONFIG.format(storage=storage, addr=self.address))
            with open(self.log, "ab") as out:
                self.proc = subprocess.Popen([exe, "serve", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
            if self._wait_ready():
                return self
            last = self.log.read_text(errors="replace")[-1500:]
            self.stop(keep_files=True)
        raise RegistryError(f"docker-registry did not answer on /v2/: {last}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2) as answer:
                    if answer.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        return False

    def tags(self, repository: str) -> list[str]:
        """The tags the registry holds for a repository (empty when it has none)."""
        try:
            with urllib.request.urlopen(f"http://{self.address}/v2/{repository}/tags/list", timeout=10) as answer:
                return list(json.loads(answer.read()).get("tags") or [])
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return []
            raise

    def manifest(self, repository: str, reference: str) -> Served:
        """GET /v2/<repository>/manifests/<reference> (a tag or a digest), any manifest type."""
        req = urllib.request.Request(f"http://{self.address}/v2/{repository}/manifests/{reference}",
                                     headers={"Accept": ", ".join(MANIFEST_TYPES)})
        with urllib.request.urlopen(req, timeout=30) as answer:
            body = answer.read()
            media_type = answer.headers.get_content_type()
            digest = str(answer.headers["Docker-Content-Digest"])
        if digest != f"sha256:{hashlib.sha256(body).hexdigest()}":
            raise RegistryError(f"{repository}:{reference}: the body's digest is not {digest}")
        return Served(media_type, digest, json.loads(body))

    def blob(self, repository: str, digest: str) -> bytes:
        """GET /v2/<repository>/blobs/<digest>, checked against the digest."""
        with urllib.request.urlopen(f"http://{self.address}/v2/{repository}/blobs/{digest}", timeout=60) as answer:
            body: bytes = answer.read()
        if digest != f"sha256:{hashlib.sha256(body).hexdigest()}":
            raise RegistryError(f"{repository}@{digest}: the blob's content has another digest")
        return body

    def stop(self, keep_files: bool = False) -> None:
        if self.proc is not None:
            end_group(self.proc, grace=10)
            self.proc = None
        if not keep_files:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalRegistry:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
