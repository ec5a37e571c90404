"""The multi-arch image (release/multiarch.py): linux/amd64 and linux/arm64 in one OCI image index.

The build takes minutes (the arm64 half runs under qemu-user-static), so the test that builds it runs only
with KH_MULTIARCH=1, which `make image-multiarch` sets; elsewhere it skips saying so. It builds both
platforms with podman on the Debian-made bases (the arm64 one made with mmdebstrap --arch=arm64 under
qemu, cached like the amd64 one), pushes the list to Debian's docker-registry on 127.0.0.1, reads the
index, each image manifest and each config back over HTTP, and starts each platform's image pulled by
digest. It skips with hack/image.sh's reason where no container can run or binfmt_misc cannot be used;
under CI=true with KH_MULTIARCH=1 such a skip fails instead.

The tests before it judge served indexes made up here: they need nothing and always run.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from release.build import IMAGE_PATH, IMAGE_SH, ReleaseError, project_version
from release.multiarch import (
    BUDGETS,
    OCI_INDEX,
    PLATFORMS,
    EmulationUnavailable,
    Entry,
    build_times,
    index_problems,
    rehearse_multiarch,
)
from release.registry import RegistryError, ensure_installed
from testbed.budget import TimeBudget
from testbed.terminal import say

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _entry(platform: str, config: str, media_type: str = OCI_MANIFEST) -> Entry:
    os_, arch = config.split("/")
    return Entry(platform=platform, variant="", digest="sha256:" + "0" * 64, media_type=media_type,
                 config_os=os_, config_architecture=arch)


# --- the index, judged (no I/O) ------------------------------------------------------------------------------

def test_an_oci_index_of_an_amd64_and_an_arm64_image_with_matching_configs_has_no_problem() -> None:
    entries = [_entry("linux/amd64", "linux/amd64"), _entry("linux/arm64", "linux/arm64")]
    assert index_problems(OCI_INDEX, entries, PLATFORMS) == []


def test_an_arm64_entry_whose_config_says_amd64_is_a_problem_whatever_the_index_claims() -> None:
    entries = [_entry("linux/amd64", "linux/amd64"), _entry("linux/arm64", "linux/amd64")]
    (problem,) = index_problems(OCI_INDEX, entries, PLATFORMS)
    assert "linux/arm64 entry" in problem and "config for linux/amd64" in problem


def test_a_single_image_or_a_docker_manifest_list_or_a_missing_platform_is_a_problem() -> None:
    one = [_entry("linux/amd64", "linux/amd64")]
    problems = index_problems(OCI_MANIFEST, one, PLATFORMS)
    assert any("not an OCI image index" in p for p in problems)
    assert any("the index lists ['linux/amd64']" in p for p in problems)
    docker_list = "application/vnd.docker.distribution.manifest.list.v2+json"
    both = [_entry("linux/amd64", "linux/amd64", docker_list), _entry("linux/arm64", "linux/arm64")]
    assert index_problems(docker_list, both, PLATFORMS)[0].startswith(f"the tag serves {docker_list}")


def test_the_build_log_yields_the_seconds_per_platform_and_per_base() -> None:
    log = ("image: base (arm64) made in 312 s\n"
           "image: built localhost/kuberhealthy-py/kuberhealthy:0.1.0-multiarch-7-amd64 in 20 s\n"
           "image: built localhost/kuberhealthy-py/kuberhealthy:0.1.0-multiarch-7-arm64 in 251 s\n"
           "image: built localhost/kuberhealthy-py/kuberhealthy:0.1.0-multiarch-7 (linux/amd64,linux/arm64) in 583 s\n")
    assert build_times(log) == {"image amd64": "20 s", "image arm64": "251 s", "base arm64": "312 s",
                                "all platforms": "583 s"}


# --- the image, built and pushed (KH_MULTIARCH=1) -----------------------------------------------------------

def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true, KH_MULTIARCH=1 and the multi-arch image cannot be built: {reason}", pytrace=False)
    pytest.skip(reason)


@contextlib.contextmanager
def _storage_in_use() -> Iterator[None]:
    """Held shared while the build uses the image tests' private storage, so their clean-up (which prunes
    untagged layers only when it gets the lock exclusively) leaves this build's layers alone."""
    root = Path(os.environ.get("KH_TESTBED_DIR", Path.home() / ".cache" / "kuberhealthy-testbed")) / "containers"
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / ".in-use", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


@pytest.mark.timeout(5400)
def test_amd64_and_arm64_images_are_pushed_as_one_oci_index_whose_configs_match_and_both_start(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if os.environ.get("KH_MULTIARCH") != "1":
        pytest.skip("the multi-arch build takes minutes (arm64 under qemu): make image-multiarch runs it "
                    "(or KH_MULTIARCH=1)")
    probe = subprocess.run(["bash", str(IMAGE_SH), "probe"], capture_output=True, text=True, timeout=60, check=True)
    if probe.stdout.startswith("SKIP="):
        _skip_or_fail(probe.stdout.strip().removeprefix("SKIP="))
    try:
        ensure_installed()
    except RegistryError as e:
        _skip_or_fail(str(e))

    budget = TimeBudget(BUDGETS, lambda text: say(request.config, "multiarch", text))
    try:
        with _storage_in_use():
            seen = rehearse_multiarch(budget, out=tmp_path / "out")
    except EmulationUnavailable as e:
        _skip_or_fail(f"arm64 binaries cannot run here: {e}")
        raise
    except ReleaseError:
        log = tmp_path / "out" / "image-build.log"
        if log.is_file():
            say(request.config, "multiarch", "the build's log ends:\n" + log.read_text(errors="replace")[-4000:])
        raise
    finally:
        say(request.config, "multiarch", budget.summary())
    for key in ("binfmt", "build", "image", "index", "entries", "started"):
        say(request.config, "multiarch", f"{key}: {seen[key]}")

    version = project_version()
    assert seen["image"].endswith(f"/{IMAGE_PATH}:{version}")
    assert seen["index"] == OCI_INDEX
    configs = sorted((e["platform"], e["config_os"], e["config_architecture"]) for e in seen["entries"])
    assert configs == [("linux/amd64", "linux", "amd64"), ("linux/arm64", "linux", "arm64")]
    assert seen["started"] == {"linux/amd64": {"version": f"kuberhealthy {version}", "machine": "x86_64"},
                               "linux/arm64": {"version": f"kuberhealthy {version}", "machine": "aarch64"}}
