"""The multi-arch image, rehearsed here: `python -m release multiarch` (`make image-multiarch` runs
tests/integration/test_multiarch.py, which calls `rehearse_multiarch`).

One OCI image index lists linux/amd64 and linux/arm64. `hack/image.sh multiarch` builds the Dockerfile once
per platform with `podman build --platform` into a manifest list; a foreign platform's build steps (and, on
the Debian-made base, its mmdebstrap) run under Debian's qemu-user-static through binfmt_misc
(`hack/image.sh binfmt`). The list goes to Debian's docker-registry on 127.0.0.1 with `podman manifest push
--all --format oci` and is then judged by what the registry serves over HTTP, not by what podman says: the
tag is an OCI image index listing exactly the platforms, and each entry's manifest names a config whose
`os` and `architecture` are the entry's. Last, each platform's image is pulled back by its digest and
started: `kuberhealthy --version` (under emulation on a foreign platform), and Python's platform.machine().

The chart, the wheels and the real node are the release rehearsal's (release/rehearse.py), on the host's
platform only; the release workflow builds both platforms with `python -m release build --platforms`.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from release.build import (
    IMAGE_PATH,
    IMAGE_SH,
    LOCAL_IMAGE,
    Artifacts,
    ImageBuild,
    ReleaseError,
    build_image,
    chart_meta,
    engine_env,
    project_version,
    push_image,
    remove_image,
    run,
)
from release.registry import LocalRegistry, RegistryError
from testbed.budget import TimeBudget

PLATFORMS = ("linux/amd64", "linux/arm64")
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}  # what platform.machine() says on each architecture
# Seconds per step on this machine kind (2 cores): the image's budget is for a warm cache (both bases made,
# pip's cache full); a cold one (the arm64 base made under qemu) takes longer, and is said, not failed.
BUDGETS = {"binfmt": 300.0, "image": 900.0, "registry": 30.0, "push": 300.0, "index": 30.0, "start": 300.0}


class EmulationUnavailable(ReleaseError):
    """A foreign platform's binaries cannot run here (hack/image.sh binfmt says why)."""


def _print(text: str) -> None:
    print(f"[multiarch] {text}", flush=True)


@dataclass(frozen=True)
class Entry:
    """One platform's image as the registry serves it: the index's entry and the config it leads to."""

    platform: str            # os/architecture, as the index lists it
    variant: str             # the index's variant, if any (arm64: v8 or none)
    digest: str              # the image manifest's
    media_type: str          # the image manifest's
    config_os: str
    config_architecture: str


def arch_of(platform: str) -> str:
    return platform.split("/")[1]


def emulation(platforms: tuple[str, ...]) -> str:
    """`hack/image.sh binfmt` for the platforms' architectures: its BINFMT=... answer; raises
    EmulationUnavailable with its SKIP reason."""
    proc = run(["bash", str(IMAGE_SH), "binfmt", *sorted({arch_of(p) for p in platforms})], timeout=900,
               what="hack/image.sh binfmt")
    answer = (proc.stdout.strip().splitlines() or ["SKIP=hack/image.sh binfmt printed nothing"])[-1]
    if answer.startswith("SKIP="):
        raise EmulationUnavailable(answer.removeprefix("SKIP="))
    return answer.removeprefix("BINFMT=")


def read_index(registry: LocalRegistry, repository: str, tag: str) -> tuple[str, str, list[Entry]]:
    """The tag's media type and digest, and for each entry of the index its image manifest and config."""
    index = registry.manifest(repository, tag)
    entries = []
    for item in index.document.get("manifests") or []:
        shown = item.get("platform") or {}
        image = registry.manifest(repository, item["digest"])
        config = json.loads(registry.blob(repository, image.document["config"]["digest"]))
        entries.append(Entry(platform=f"{shown.get('os', '?')}/{shown.get('architecture', '?')}",
                             variant=str(shown.get("variant", "")), digest=item["digest"],
                             media_type=image.media_type, config_os=str(config.get("os")),
                             config_architecture=str(config.get("architecture"))))
    return index.media_type, index.digest, entries


def index_problems(media_type: str, entries: list[Entry], platforms: tuple[str, ...]) -> list[str]:
    """What is wrong with the served index: its type, its platforms, a config of another platform."""
    problems = []
    if media_type != OCI_INDEX:
        problems.append(f"the tag serves {media_type}, not an OCI image index ({OCI_INDEX})")
    listed = sorted(e.platform for e in entries)
    if listed != sorted(platforms):
        problems.append(f"the index lists {listed}, not {sorted(platforms)}")
    for e in entries:
        if f"{e.config_os}/{e.config_architecture}" != e.platform:
            problems.append(f"the index's {e.platform} entry ({e.digest[:19]}...) leads to a config for "
                            f"{e.config_os}/{e.config_architecture}")
        if not e.media_type.startswith("application/vnd.oci.image.manifest"):
            problems.append(f"the {e.platform} image's manifest is {e.media_type}, not an OCI image manifest")
    return problems


def start_pulled(env: dict[str, str], ref: str) -> tuple[str, str]:
    """Pull ref (host:port/path@digest) over plain HTTP and start it: (`kuberhealthy --version`, machine)."""
    run(["podman", "pull", "--quiet", "--tls-verify=false", ref], env=env, timeout=600, what="podman pull")
    try:
        version = run(["podman", "run", "--rm", "--network", "none", ref, "--version"], env=env, timeout=300,
                      what="kuberhealthy --version").stdout.strip()
        machine = run(["podman", "run", "--rm", "--network", "none", "--entrypoint", "/opt/kuberhealthy/bin/python",
                       ref, "-c", "import platform; print(platform.machine())"], env=env, timeout=300,
                      what="platform.machine()").stdout.strip()
    finally:
        subprocess.run(["podman", "rmi", ref], env=env, capture_output=True, timeout=120, check=False)
    return version, machine


def build_times(log: str) -> dict[str, str]:
    """The seconds hack/image.sh said it spent: per platform image, per base made, and in all."""
    times = {f"image {m[1]}": f"{m[2]} s" for m in re.finditer(r"built \S+-(\w+) in (\d+) s", log)}
    times.update({f"base {m[1] or 'host'}": f"{m[2]} s" for m in re.finditer(r"base(?: \((\w+)\))? made in (\d+) s",
                                                                          log)})
    total = re.search(r"built \S+ \(\S+\) in (\d+) s", log)
    if total:
        times["all platforms"] = f"{total[1]} s"
    return times


def rehearse_multiarch(budget: TimeBudget, *, platforms: tuple[str, ...] = PLATFORMS, base: str = "debian",
                       out: Path | None = None) -> dict[str, Any]:
    """Build, push to a loopback registry, check the index over HTTP, start each platform's image. Raises
    EmulationUnavailable where a foreign platform cannot run, ReleaseError naming every problem found."""
    seen: dict[str, Any] = {}
    with budget.part("binfmt"):
        seen["binfmt"] = emulation(platforms)
    version = project_version()
    chart_version, app_version = chart_meta()
    work = out or Path(tempfile.mkdtemp(prefix="kh-multiarch-"))
    work.mkdir(parents=True, exist_ok=True)
    art = Artifacts(out=str(work), version=version, chart_version=chart_version, app_version=app_version)
    log = work / "image-build.log"
    try:
        with budget.part("image"):
            build_image(art, ImageBuild("podman", base, f"{LOCAL_IMAGE}:{version}-multiarch-{os.getpid()}",
                                        platforms), log)
        seen["build"] = build_times(log.read_text())
        with budget.part("registry"):
            registry = LocalRegistry().start()
        try:
            dest = f"{registry.address}/{IMAGE_PATH}:{version}"
            with budget.part("push"):
                push_image(art, dest, insecure=True)
            with budget.part("index"):
                media_type, digest, entries = read_index(registry, IMAGE_PATH, version)
            seen.update(image=dest, index=media_type, digest=digest, entries=[asdict(e) for e in entries])
            problems = index_problems(media_type, entries, platforms)
            started: dict[str, dict[str, str]] = {}
            with budget.part("start"):
                env = engine_env("podman")
                for e in entries:
                    shown, machine = start_pulled(env, f"{registry.address}/{IMAGE_PATH}@{e.digest}")
                    started[e.platform] = {"version": shown, "machine": machine}
                    if shown != f"kuberhealthy {version}":
                        problems.append(f"the {e.platform} image's kuberhealthy --version printed {shown!r}")
                    want = MACHINES.get(arch_of(e.platform))
                    if want and machine != want:
                        problems.append(f"the {e.platform} image runs on {machine!r}, not {want!r}")
            seen["started"] = started
        finally:
            registry.stop()
    finally:
        remove_image(art)
    for problem in problems:
        budget.say(f"PROBLEM: {problem}")
    if problems:
        raise ReleaseError("; ".join(problems))
    return seen


def main(platforms: tuple[str, ...], base: str, out: Path | None, say: Callable[[str], None] = _print) -> int:
    """`python -m release multiarch`: 0 when the index is right and every image starts, 1 otherwise."""
    budget = TimeBudget(BUDGETS, say)
    try:
        seen = rehearse_multiarch(budget, platforms=platforms, base=base, out=out)
    except (ReleaseError, RegistryError, OSError) as e:  # OSError: urllib's errors reading the registry
        say(f"FAILED: {e}")
        return 1
    finally:
        if budget.spent:
            say(budget.summary())
    for key, value in seen.items():
        say(f"{key}: {value}")
    return 0
