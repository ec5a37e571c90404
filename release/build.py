"""What a release publishes, built and pushed (release/rehearse.py is the command, `python -m release`).

`build` writes into its output directory: python/ (the daemon's sdist and its wheel, the wheel built from
the sdist as `python -m build` does, and the checker client's wheel from clients/python/), chart/ (`helm
package`), the image (hack/image.sh, tagged localhost/kuberhealthy-py/kuberhealthy:<version>) and
release.json, which `push` reads to push that image and chart (PyPI gets python/ from the release
workflow, .github/workflows/release.yml, with trusted publishing). Each step is timed against a budget.

It imports nothing of `kuberhealthy` (the release is tested as users get it).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from testbed.budget import TimeBudget
from testbed.paths import CHART, REPO
from testbed.tools.helm import Helm

IMAGE_SH = REPO / "hack" / "image.sh"
CLIENT = REPO / "clients" / "python"
IMAGE_PATH = "kuberhealthy-py/kuberhealthy"          # the image's path in any registry
PUBLISHED_IMAGE = f"ghcr.io/{IMAGE_PATH}"           # the chart's default image.registry + image.repository
PUBLISHED_CHARTS = "oci://ghcr.io/kuberhealthy-py/charts"
LOCAL_IMAGE = f"localhost/{IMAGE_PATH}"
# Seconds per step on this machine kind (2 cores), warm caches (the image's base and pip's), with room.
BUDGETS = {"python": 120.0, "image": 420.0, "chart": 20.0, "registry": 30.0, "push": 120.0, "install": 90.0,
           "node": 420.0, "venv": 240.0}
SOURCES = ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in", "kuberhealthy")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "dist", "*.egg-info", ".venv", ".mypy_cache")


class ReleaseError(RuntimeError):
    """A step failed; the message says which and why."""


def _print(text: str) -> None:
    print(f"[release] {text}", flush=True)


class Budget(TimeBudget):
    """Seconds per step (BUDGETS), said as each ends (printed, unless `say` is given) and by summary()."""

    def __init__(self, say: Callable[[str], None] = _print) -> None:
        super().__init__(BUDGETS, say)


@dataclass
class Artifacts:
    """What `build` made (release.json in the output directory)."""

    out: str
    version: str                    # setup.py's
    chart_version: str
    app_version: str
    sdist: str = ""
    wheel: str = ""
    client_wheel: str = ""
    client_skipped: str = ""        # why there is no client wheel
    chart: str = ""
    image: str = ""                 # the local reference (a manifest list when `platforms` is set)
    engine: str = ""                # podman (private storage) or docker
    platforms: dict[str, str] = field(default_factory=dict)  # platform -> its image's local tag, in `image`
    notes: list[str] = field(default_factory=list)     # said, not failed on
    problems: list[str] = field(default_factory=list)  # the release would be wrong

    def save(self) -> None:
        (Path(self.out) / "release.json").write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, out: Path) -> Artifacts:
        return cls(**json.loads((out / "release.json").read_text()))


def run(argv: list[str], *, timeout: float, env: dict[str, str] | None = None, cwd: Path | None = None,
        what: str = "") -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd, check=False,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise ReleaseError(f"{what or argv[0]}: {' '.join(argv)} exited {proc.returncode}:\n"
                           f"{(proc.stdout + proc.stderr)[-4000:]}")
    return proc


def project_version() -> str:
    found = re.search(r'^\s*version="([^"]+)"', (REPO / "setup.py").read_text(), re.M)
    if not found:
        raise ReleaseError("setup.py names no version")
    return found.group(1)


def chart_meta(chart: Path = CHART) -> tuple[str, str]:
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    return str(meta["version"]), str(meta["appVersion"])


# --- python: sdist, wheels ------------------------------------------------------------------------------

def _copy_sources(dest: Path) -> Path:
    """The daemon's build inputs, copied (a build in the checkout would leave build/ and egg-info)."""
    dest.mkdir(parents=True)
    for name in SOURCES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=IGNORED)
        else:
            shutil.copy(src, dest / name)
    return dest


def build_python(art: Artifacts, work: Path) -> None:
    """The sdist (setuptools' PEP 517 hook in a copy of the sources), the wheel built from the sdist (so a
    file the sdist lacks is missing from the wheel too and fails here), and the client's wheel."""
    out = Path(art.out) / "python"
    out.mkdir(parents=True, exist_ok=True)
    src = _copy_sources(work / "src")
    name = run([sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
                "print(b.build_sdist(sys.argv[1]))", str(out)], cwd=src, timeout=300, what="sdist").stdout
    sdist = out / name.strip().splitlines()[-1]
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check", "-w", str(out),
         str(sdist)], timeout=600, what="the daemon's wheel")
    (wheel,) = out.glob(f"kuberhealthy-{art.version}-*.whl")
    art.sdist, art.wheel = str(sdist), str(wheel)
    _check_wheel(wheel, art.version)
    if not (CLIENT / "pyproject.toml").is_file():
        art.client_skipped = f"{CLIENT.relative_to(REPO)}/pyproject.toml does not exist (yet)"
        return
    client = work / "client"
    shutil.copytree(CLIENT, client, ignore=IGNORED)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check", "-w", str(out),
         str(client)], timeout=600, what="the client's wheel")
    wheels = list(out.glob("kuberhealthy_checkclient-*.whl"))
    if len(wheels) != 1:
        raise ReleaseError(f"expected one kuberhealthy_checkclient wheel in {out}, found {wheels}")
    art.client_wheel = str(wheels[0])
    client_version = wheels[0].name.split("-")[1]
    if client_version != art.version:
        art.notes.append(f"the client's version {client_version} differs from the daemon's {art.version}")


def _check_wheel(wheel: Path, version: str) -> None:
    """Every file of the package (modules, templates, assets, OpenAPI document) is in the wheel."""
    names = set(zipfile.ZipFile(wheel).namelist())
    package = REPO / "kuberhealthy"
    files = {f"kuberhealthy/{p.relative_to(package).as_posix()}" for p in package.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    missing = sorted(files - names)
    if missing:
        raise ReleaseError(f"the wheel built from the sdist lacks {missing[:10]} (MANIFEST.in, package_data?)")
    if f"kuberhealthy-{version}.dist-info/METADATA" not in names:
        raise ReleaseError(f"{wheel.name} has no kuberhealthy-{version}.dist-info")


# --- the image ------------------------------------------------------------------------------------------

def engine_env(engine: str) -> dict[str, str]:
    """The environment for hack/image.sh and the engine: podman uses the image tests' private storage."""
    env = dict(os.environ, KH_IMAGE_ENGINE=engine)
    if engine == "podman":
        out = run(["bash", str(IMAGE_SH), "env"], timeout=60, what="hack/image.sh env").stdout
        for line in out.splitlines():
            key, _, value = line.partition("=")
            if key.startswith("CONTAINERS_"):
                env[key] = value
        env["KH_IMAGE_PRIVATE"] = "1"
    return env


@dataclass(frozen=True)
class ImageBuild:
    """How to build the image: the engine (podman, docker), the base ("debian", "dockerfile" or an image),
    the local tag (default: LOCAL_IMAGE:<version>) and the platforms (none: the engine's own platform, one
    image; else one image per platform in a manifest list, podman only: `hack/image.sh multiarch`)."""

    engine: str
    base: str
    local_tag: str = ""
    platforms: tuple[str, ...] = ()


def build_image(art: Artifacts, how: ImageBuild, log: Path) -> None:
    tag = how.local_tag or f"{LOCAL_IMAGE}:{art.version}"
    engine = how.engine
    env = engine_env(engine)
    if how.base == "debian":
        env["BASE_IMAGE"] = "debian"
    elif how.base != "dockerfile":
        env["BASE_IMAGE"] = how.base
    if how.platforms and engine != "podman":
        raise ReleaseError(f"an image for {','.join(how.platforms)} is built with podman (--engine podman), "
                           f"not {engine}")
    argv = (["bash", str(IMAGE_SH), "multiarch", tag, ",".join(how.platforms)] if how.platforms
            else ["bash", str(IMAGE_SH), "build", tag])
    last = None
    for _attempt in (1, 2):  # a second try rides out a dropped download; a broken Dockerfile fails twice
        try:
            # A foreign platform's base (mmdebstrap) and build steps run under qemu: minutes, not seconds.
            proc = run(argv, env=env, timeout=3600 if how.platforms else 900, what=f"hack/image.sh {argv[2]}")
            log.write_text(proc.stdout + proc.stderr)
            break
        except ReleaseError as e:
            last = e
    else:
        raise ReleaseError(str(last))
    art.image, art.engine = tag, engine
    if how.platforms:
        built = dict(line.removeprefix("PLATFORM_IMAGE=").split("=", 1) for line in proc.stdout.splitlines()
                     if line.startswith("PLATFORM_IMAGE="))
        if sorted(built) != sorted(how.platforms):
            raise ReleaseError(f"hack/image.sh multiarch built {sorted(built)}, not {sorted(how.platforms)}")
        art.platforms = built


def push_image(art: Artifacts, dest: str, *, insecure: bool) -> None:
    """Push the local image to dest (registry/path:tag); plain HTTP with insecure (podman only)."""
    env = engine_env(art.engine)
    tls = ["--tls-verify=false"] if insecure else []
    if art.platforms:  # the list and every image in it, as an OCI image index
        run(["podman", "manifest", "push", "--quiet", "--all", "--format", "oci", *tls, art.image,
             f"docker://{dest}"], env=env, timeout=1200, what="podman manifest push")
    elif art.engine == "podman":
        argv = ["podman", "push", "--quiet", *tls, art.image, f"docker://{dest}"]
        run(argv, env=env, timeout=600, what="podman push")
    else:
        run([art.engine, "tag", art.image, dest], env=env, timeout=60, what="docker tag")
        run([art.engine, "push", dest], env=env, timeout=600, what="docker push")


def remove_image(art: Artifacts) -> None:
    """Untag the local image (its layers stay in the cache for the next build)."""
    if not art.image:
        return
    env = engine_env(art.engine)
    if art.platforms:
        subprocess.run(["podman", "manifest", "rm", art.image], env=env, capture_output=True, timeout=120,
                       check=False)
    for tag in list(art.platforms.values()) or [art.image]:
        subprocess.run([art.engine, "rmi", tag], env=env, capture_output=True, timeout=120, check=False)


# --- the chart ------------------------------------------------------------------------------------------

def package_chart(art: Artifacts, helm: Helm) -> None:
    out = Path(art.out) / "chart"
    out.mkdir(parents=True, exist_ok=True)
    helm.run("lint", "--strict", str(CHART))
    helm.run("package", str(CHART), "--destination", str(out))
    tgz = out / f"kuberhealthy-{art.chart_version}.tgz"
    if not tgz.is_file():
        raise ReleaseError(f"helm package wrote no {tgz.name}")
    with tarfile.open(tgz) as t:
        names = t.getnames()
    for needed in ("kuberhealthy/Chart.yaml", "kuberhealthy/values.schema.json", "kuberhealthy/crds"):
        if not any(n == needed or n.startswith(needed + "/") for n in names):
            raise ReleaseError(f"{tgz.name} lacks {needed}")
    art.chart = str(tgz)


def default_image(helm: Helm, chart: str) -> str:
    """The Deployment's image when the packaged chart is rendered with its defaults."""
    out = helm.run("template", "kh", chart, "--namespace", "kuberhealthy").stdout
    for doc in yaml.safe_load_all(out):
        if doc and doc.get("kind") == "Deployment":
            return str(doc["spec"]["template"]["spec"]["containers"][0]["image"])
    raise ReleaseError("the chart renders no Deployment")


def push_chart(art: Artifacts, helm: Helm, repo: str, *, plain_http: bool) -> str:
    """`helm push` to an OCI repository (oci://host/path); the chart's oci:// reference."""
    helm.run("push", art.chart, repo, *(["--plain-http"] if plain_http else []))
    return f"{repo.rstrip('/')}/kuberhealthy"


# --- build, push ----------------------------------------------------------------------------------------

def build(out: Path, budget: Budget, helm: Helm, *, image: ImageBuild | None, expect_tag: str = "") -> Artifacts:
    """The sdist, both wheels, the chart package and (unless `image` is None) the image, into `out`."""
    chart_version, app_version = chart_meta()
    art = Artifacts(out=str(out), version=project_version(), chart_version=chart_version, app_version=app_version)
    if art.version != app_version:
        raise ReleaseError(f"setup.py's version {art.version} is not the chart's appVersion {app_version}: the "
                           "image tag, which defaults to the appVersion, would name another release")
    if expect_tag and expect_tag != f"v{art.version}":
        raise ReleaseError(f"the tag {expect_tag} is not v{art.version} (setup.py and the chart's appVersion)")
    if out.exists() and any(out.iterdir()):
        if not (out / "release.json").is_file():
            raise ReleaseError(f"{out} is not empty and holds no release.json: not removing it")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kh-release-build-") as tmp:
        with budget.part("python"):
            build_python(art, Path(tmp))
        if art.client_skipped:
            budget.say(f"client wheel skipped: {art.client_skipped}")
        with budget.part("chart"):
            package_chart(art, helm)
            shown = default_image(helm, art.chart)
            if shown != f"{PUBLISHED_IMAGE}:{app_version}":
                art.problems.append(f"the chart's default image is {shown}, not what the release publishes "
                                 f"({PUBLISHED_IMAGE}:{app_version}): helm/kuberhealthy/values.yaml image.*")
        if image is not None:
            with budget.part("image"):
                build_image(art, image, out / "image-build.log")
    art.save()
    for note in art.notes:
        budget.say(f"note: {note}")
    for problem in art.problems:
        budget.say(f"PROBLEM: {problem}")
    return art


def push(art: Artifacts, helm: Helm, *, image_repo: str, chart_repo: str, tag: str = "",
         insecure: bool = False) -> tuple[str, str]:
    """Push the image as image_repo:<tag, default the appVersion> and the chart to chart_repo."""
    dest = f"{image_repo}:{tag or art.app_version}"
    push_image(art, dest, insecure=insecure)
    return dest, push_chart(art, helm, chart_repo, plain_http=insecure)
