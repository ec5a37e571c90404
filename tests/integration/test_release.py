"""The release rehearsal (release/rehearse.py, `make release-test`) inside `make test`.

One test runs every step against the session's test bed API server: the sdist and the wheels (daemon and
checker client), the image on the Debian-made base, the chart package; Debian's docker-registry on
127.0.0.1; `podman push --tls-verify=false` and `helm push --plain-http`; `helm install` from
oci://127.0.0.1:<port>/charts/kuberhealthy with the registry's image reference; on the real node (where one
can start) the pod pulling that image from the registry and becoming Ready; the wheels pip-installed into
fresh venvs with --no-index. Each step's time is printed against its budget (`[release] ...`), never
asserted.

It skips only where a tool cannot exist here: no container engine that can run (hack/image.sh probe), no
helm, no docker-registry and no way to install it; under CI=true a skip fails the run instead. The real
node's step follows KH_RELEASE_NODE (auto: where a node can start, the default; never; always), and
KH_NODE_LOCK names a file to flock around it when several people share the machine.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from release.build import IMAGE_PATH, IMAGE_SH, Budget, project_version
from release.registry import RegistryError, ensure_installed
from release.rehearse import rehearse, write_hosts_toml
from testbed.cluster.apiserver import TestCluster
from testbed.node.e2e import helm_binary
from testbed.node.realnode import RealNode
from testbed.terminal import say
from testbed.tools.helm import Helm


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the release rehearsal cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.mark.timeout(2400)
def test_the_release_is_built_pushed_to_a_local_registry_installed_from_it_and_pip_installed_from_its_wheels(
        cluster: TestCluster, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    probe = subprocess.run(["bash", str(IMAGE_SH), "probe"], capture_output=True, text=True, timeout=60, check=True)
    if probe.stdout.startswith("SKIP="):
        _skip_or_fail(probe.stdout.strip().removeprefix("SKIP="))
    binary = helm_binary()
    if binary is None:
        _skip_or_fail("no helm binary (bash hack/tools.sh could not fetch it)")
    try:
        ensure_installed()
    except RegistryError as e:
        _skip_or_fail(str(e))
    assert binary is not None

    budget = Budget(say=lambda text: say(request.config, "release", text))
    try:
        seen = rehearse(budget, Helm(binary, tmp_path / "helm"), out=tmp_path / "out", cluster=cluster,
                        node=os.environ.get("KH_RELEASE_NODE", "auto"), node_lock=os.environ.get("KH_NODE_LOCK", ""))
    finally:
        say(request.config, "release", budget.summary())
    version = project_version()
    assert seen["artifacts"]["wheel"] == f"kuberhealthy-{version}-py3-none-any.whl"
    assert seen["artifacts"]["sdist"] == f"kuberhealthy-{version}.tar.gz"
    assert seen["artifacts"]["client_wheel"].startswith("kuberhealthy_checkclient-"), seen["client_skipped"]
    assert seen["image"].endswith(f"/{IMAGE_PATH}:{version}") and seen["image"].startswith("127.0.0.1:")
    assert seen["install"] == f"Deployment image {seen['image']} (CRDs already there)"
    assert seen["venv"].startswith(f"kuberhealthy {version} from ")
    assert "kuberhealthy_checkclient imported alone, no dependencies" in seen["venv"]
    if os.environ.get("KH_RELEASE_NODE") == "always":
        assert " Ready, pulled " in seen["node"]


def test_a_hosts_toml_naming_the_plain_http_registry_is_written_under_the_config_path_containerd_names(
        tmp_path: Path) -> None:
    node = RealNode({}, state_dir=tmp_path)
    (tmp_path / "containerd").mkdir()
    config = tmp_path / "containerd" / "config.toml"
    config.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri".cni]\n  conf_dir = "/x"\n')
    assert "no hosts.toml" in write_hosts_toml(node, "127.0.0.1:5000", "auto")
    assert not (tmp_path / "containerd" / "certs.d").exists()

    certs = tmp_path / "certs.d"
    config.write_text(f'[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "{certs}"\n')
    assert write_hosts_toml(node, "127.0.0.1:5000", "auto") == f"wrote {certs}/127.0.0.1:5000/hosts.toml"
    lines = [line.strip() for line in (certs / "127.0.0.1:5000" / "hosts.toml").read_text().splitlines()]
    assert 'server = "http://127.0.0.1:5000"' in lines
    assert lines.index('[host."http://127.0.0.1:5000"]') < lines.index('capabilities = ["pull", "resolve"]')
    assert write_hosts_toml(node, "127.0.0.1:5000", "no") == "no hosts.toml (--containerd-hosts no)"
