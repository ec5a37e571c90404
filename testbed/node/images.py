"""The images of the end-to-end tests, built here and saved as tarballs for the real node's containerd.

No container registry is reachable on this machine kind, so every image is built with podman in the
private configuration of `hack/image.sh` (`env`) on a base made from Debian packages: the daemon from
the repository's Dockerfile (`hack/image.sh build`, BASE_IMAGE=debian), the examples in
examples/checks (their Dockerfiles take `BASE_IMAGE` like the daemon's; each builds from its own
directory, with the checker client's wheel, built here from clients/python, in wheels/), a shell checker that reports
with the checkclient command line (tests/e2e/images/shell-check) and a v2-style checker that POSTs
with curl and no `kh-run-uuid` header (tests/e2e/images/curl-check, on a second Debian-made base with
curl) and a checker on a v3-style client (tests/e2e/images/v3-check: it refuses a reporting URL whose
path is not /check, then POSTs with curl; same base). Each is saved with `podman save` for
`RealNode.import_image`.

The build contexts are assembled in a temporary directory with only the files each Dockerfile copies:
the repository's .dockerignore is an allow-list for the daemon's build and would hide examples/.

It does not start a node or import images; `python -m testbed.node.images [OUT_DIR]` builds them alone
and prints the tarballs.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from testbed.paths import REPO

IMAGE_SH = REPO / "hack" / "image.sh"
E2E_IMAGES = REPO / "tests" / "e2e" / "images"
EXAMPLES = REPO / "examples" / "checks"
CLIENT = REPO / "clients" / "python"  # the checker client's distribution, whose wheel the examples install
TAG = "e2e"
DAEMON = "localhost/kuberhealthy-python"
DAEMON_NEXT_TAG = "e2e-next"  # the same build under a second tag: `helm upgrade` to a new tag rolls the pods
PREFIX = "localhost/kh-e2e"
BUILD_TIMEOUT = 600.0
CURL_BASE_PACKAGES = "curl,ca-certificates"


def testbed_root() -> Path:
    return Path(os.environ.get("KH_TESTBED_DIR", Path.home() / ".cache" / "kuberhealthy-testbed"))


def _key_values(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if re.match(r"^[A-Z_]+=", line))


@dataclass
class Built:
    """What was built: image name -> tarball, and seconds per step (for the session's time budget)."""

    tars: dict[str, Path] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def image(self, short: str) -> str:
        """The full name of an image by its short name (daemon, daemon-next, shell-check, ...)."""
        for name in self.tars:
            if short == "daemon" and name == f"{DAEMON}:{TAG}":
                return name
            if short == "daemon-next" and name == f"{DAEMON}:{DAEMON_NEXT_TAG}":
                return name
            if name == f"{PREFIX}/{short}:{TAG}":
                return name
        raise KeyError(short)


class Builder:
    """podman with hack/image.sh's private configuration; `log` gets every command's output."""

    def __init__(self, out_dir: Path, log: Path) -> None:
        self.out_dir = out_dir
        self.log = log
        out_dir.mkdir(parents=True, exist_ok=True)
        env = _key_values(self._run(["bash", str(IMAGE_SH), "env"], env=dict(os.environ)).stdout)
        self.env = dict(os.environ, **{k: v for k, v in env.items() if k.startswith("CONTAINERS_")})
        self.ulimits = ["--ulimit", f"nofile={env['NOFILE']}:{env['NOFILE']}",
                        "--ulimit", f"nproc={env['NPROC']}:{env['NPROC']}"]

    def _run(self, args: list[str], env: dict[str, str] | None = None,
             timeout: float = BUILD_TIMEOUT) -> subprocess.CompletedProcess[str]:
        with open(self.log, "a") as out:
            out.write(f"\n$ {' '.join(args)}\n")
        proc = subprocess.run(args, capture_output=True, text=True, env=env or self.env, timeout=timeout,
                              check=False, stdin=subprocess.DEVNULL)
        with open(self.log, "a") as out:
            out.write(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            output = (proc.stdout + proc.stderr)[-4000:]
            raise RuntimeError(f"{' '.join(args[:3])} failed ({proc.returncode}):\n{output}")
        return proc

    def podman(self, *args: str, timeout: float = BUILD_TIMEOUT) -> str:
        return self._run(["podman", *args], timeout=timeout).stdout

    def python_base(self) -> str:
        """The daemon's Debian-made base (python3 + venv), made or reused by hack/image.sh."""
        env = dict(self.env, KH_IMAGE_PRIVATE="1")
        return _key_values(self._run(["bash", str(IMAGE_SH), "base"], env=env).stdout)["BASE_IMAGE"]

    def curl_base(self) -> str:
        """A Debian-made base with sh and curl (mmdebstrap, essential variant), cached like the other."""
        suite = os.environ.get("KH_IMAGE_BASE_SUITE", "bookworm")
        mirror = os.environ.get("KH_IMAGE_BASE_MIRROR", "http://deb.debian.org/debian")
        key = hashlib.sha256(f"{suite}\n{mirror}\n{CURL_BASE_PACKAGES}".encode()).hexdigest()[:10]
        tag = f"localhost/kh-e2e-curl-base:{suite}-{key}"
        if subprocess.run(["podman", "image", "exists", tag], env=self.env, check=False, timeout=60).returncode == 0:
            return tag
        tar = testbed_root() / "image-base" / f"curl-{suite}-{key}.tar"
        tar.parent.mkdir(parents=True, exist_ok=True)
        if not tar.is_file():
            tmp = tar.with_suffix(".tmp")
            self._run(["mmdebstrap", "--mode=auto", "--format=tar", "--variant=essential",
                       f"--include={CURL_BASE_PACKAGES}", "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
                       "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/doc/*",
                       "--dpkgopt=path-exclude=/usr/share/locale/*", '--aptopt=Acquire::Languages "none"',
                       '--aptopt=Acquire::Retries "5"', suite, str(tmp), f"deb {mirror} {suite} main"])
            tmp.rename(tar)
        self.podman("import", "--change", 'CMD ["/bin/sh"]', str(tar), tag)
        return tag

    def build(self, tag: str, context: Path, dockerfile: Path, base: str) -> None:
        args = ["build", "--network", "host", "--force-rm", "--layers", "--pull=never", *self.ulimits,
                "--build-arg", f"BASE_IMAGE={base}", "-f", str(dockerfile), "-t", tag]
        ca = Path("/etc/ssl/certs/ca-certificates.crt")
        if ca.is_file():
            args += ["--secret", f"id=ca-bundle,src={ca}"]
        self.podman(*args, str(context))

    def save(self, tag: str, *more: str) -> Path:
        """One docker-archive tarball (what `ctr images import` reads) with `tag` and any `more` names."""
        tar = self.out_dir / (re.sub(r"[^A-Za-z0-9_.-]+", "_", tag) + ".tar")
        tar.unlink(missing_ok=True)
        multi = ["-m"] if more else []
        self.podman("save", *multi, "--format", "docker-archive", "-o", str(tar), tag, *more, timeout=300)
        return tar


def _client_wheels(b: Builder, into: Path) -> Path:
    """A directory holding the checker client's wheel, built from a copy of clients/python (setuptools
    writes build/ and *.egg-info beside the sources) as a release builds it."""
    src = into / "client-src"
    shutil.copytree(CLIENT, src, ignore=shutil.ignore_patterns("__pycache__", "build", "dist", "*.egg-info"))
    wheels = into / "client-wheels"
    b._run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
            "-w", str(wheels), str(src)], env=dict(os.environ))
    return wheels


def _context_for_example(name: str, into: Path, wheels: Path) -> Path:
    """An example's directory, its Dockerfile's build context, with the client's wheel in wheels/."""
    ctx = into / name
    shutil.copytree(EXAMPLES / name, ctx, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "wheels"))
    shutil.copytree(wheels, ctx / "wheels")
    return ctx


def _context_for_test_image(name: str, into: Path) -> Path:
    ctx = into / name
    shutil.copytree(E2E_IMAGES / name, ctx)
    (ctx / "kuberhealthy").mkdir()
    shutil.copy(REPO / "kuberhealthy" / "checkclient.py", ctx / "kuberhealthy" / "checkclient.py")
    return ctx


def example_names() -> list[str]:
    return sorted(p.parent.name for p in EXAMPLES.glob("*/Dockerfile"))


def build_all(out_dir: Path, log: Path) -> Built:
    """Build and save every image of the end-to-end tests; raises RuntimeError with the failing output."""
    built = Built()
    b = Builder(out_dir, log)

    def step(what: str, started: float) -> None:
        built.seconds[what] = round(time.monotonic() - started, 1)

    t = time.monotonic()
    python_base = b.python_base()
    curl_base = b.curl_base()
    step("bases", t)

    t = time.monotonic()
    daemon = f"{DAEMON}:{TAG}"
    env = dict(b.env, KH_IMAGE_PRIVATE="1", KH_IMAGE_ENGINE="podman", BASE_IMAGE="debian")
    b._run(["bash", str(IMAGE_SH), "build", daemon], env=env)
    b.podman("tag", daemon, f"{DAEMON}:{DAEMON_NEXT_TAG}")
    step("daemon", t)

    t = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kh-e2e-ctx-") as tmp:
        wheels = _client_wheels(b, Path(tmp))
        for name in example_names():
            ctx = _context_for_example(name, Path(tmp), wheels)
            b.build(f"{PREFIX}/{name}:{TAG}", ctx, ctx / "Dockerfile", python_base)
        shell = _context_for_test_image("shell-check", Path(tmp))
        b.build(f"{PREFIX}/shell-check:{TAG}", shell, shell / "Dockerfile", python_base)
        curl = _context_for_test_image("curl-check", Path(tmp))
        b.build(f"{PREFIX}/curl-check:{TAG}", curl, curl / "Dockerfile", curl_base)
        v3 = _context_for_test_image("v3-check", Path(tmp))
        b.build(f"{PREFIX}/v3-check:{TAG}", v3, v3 / "Dockerfile", curl_base)
    step("checkers", t)

    t = time.monotonic()
    # The daemon's two tags share one tarball (and every layer).
    built.tars[daemon] = built.tars[f"{DAEMON}:{DAEMON_NEXT_TAG}"] = b.save(daemon, f"{DAEMON}:{DAEMON_NEXT_TAG}")
    for name in [*(f"{PREFIX}/{n}:{TAG}" for n in example_names()), f"{PREFIX}/shell-check:{TAG}",
                 f"{PREFIX}/curl-check:{TAG}", f"{PREFIX}/v3-check:{TAG}"]:
        built.tars[name] = b.save(name)
    step("save", t)
    return built


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else testbed_root() / "e2e-images"
    log = out / "build.log"
    out.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    try:
        built = build_all(out, log)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        print(f"(full log: {log})", file=sys.stderr)
        return 1
    for name, tar in built.tars.items():
        print(f"{name} {tar}")
    print(" ".join(f"{k}={v}s" for k, v in built.seconds.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
