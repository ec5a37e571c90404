"""docs/interface.md#install-and-run and #configuration: installing, running, flags, environment and the config
file's validation."""
from __future__ import annotations

import contextlib
import importlib.metadata as md
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from testbed.clients.rawhttp import get_json, post_report
from testbed.cluster.apiserver import TestCluster, kubeconfig_text
from testbed.cluster.builders import khc, khcheck, pods_path
from testbed.cluster.loopback import free_port
from testbed.cluster.objects import create_lease, create_namespace, lease_holder
from testbed.daemons.process import console_script
from testbed.paths import REPO
from testbed.procs import end_group
from testbed.wait import wait_for


def run_cli(args: list[str], env: dict[str, str] | None = None, timeout: float = 30,
            exe: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI to completion; a process still running after `timeout` is killed and reported as rc None."""
    base = dict(os.environ)
    base.pop("KUBERNETES_SERVICE_HOST", None)
    base.update(env or {})
    argv = (exe or [console_script()]) + args
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=base,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
        return subprocess.CompletedProcess(argv, None, out, err)  # type: ignore[arg-type]


@contextlib.contextmanager
def running(argv: list[str], env: dict[str, str], log: Path, cwd: Path = REPO) -> Iterator[subprocess.Popen[bytes]]:
    """The daemon as a child process (own session), stopped with SIGTERM (then SIGKILL) on the way out."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        end_group(proc, grace=60)


def alive(proc: subprocess.Popen[bytes], log: Path) -> None:
    if proc.poll() is not None:
        raise RuntimeError(f"exited {proc.returncode}: {log.read_text(errors='replace')[-3000:]}")


def test_pip_install_provides_the_kuberhealthy_console_script() -> None:
    script = Path(sys.executable).parent / "kuberhealthy"
    assert script.exists(), f"no console script at {script}"
    out = run_cli(["--help"], exe=[str(script)])
    assert out.returncode == 0, out.stderr


def test_setup_py_names_the_package_kuberhealthy_with_a_console_script() -> None:
    assert "kuberhealthy" in (REPO / "setup.py").read_text()
    dist = md.distribution("kuberhealthy")
    assert dist.metadata["Name"].lower() == "kuberhealthy"
    assert any(ep.name == "kuberhealthy" for ep in dist.entry_points if ep.group == "console_scripts")


def test_help_documents_every_flag() -> None:
    out = run_cli(["--help"])
    assert out.returncode == 0, out.stderr
    for flag in ("--config", "-c", "--debug", "-d", "--help", "-h"):
        assert flag in out.stdout, f"--help does not document {flag}:\n{out.stdout}"


BAD_VALUES = [
    ("listenAddress: nowhere\n", "listenAddress"),
    ("listenAddress: '127.0.0.1:notaport'\n", "listenAddress"),
    ("enableForceMaster: maybe\n", "enableForceMaster"),
    ("logLevel: chatty\n", "logLevel"),
    ("enableInflux: sometimes\n", "enableInflux"),
    ("maxKHJobAge: forever\n", "maxKHJobAge"),
    ("maxCheckPodAge: 3 days\n", "maxCheckPodAge"),
    ("maxCompletedPodCount: many\n", "maxCompletedPodCount"),
    ("maxErrorPodCount: lots\n", "maxErrorPodCount"),
    ("leaderElection:\n  leaseDuration: soon\n", "leaseDuration"),
    ("leaderElection:\n  renewDeadline: 10 s\n", "renewDeadline"),
    ("leaderElection:\n  retryPeriod: x2\n", "retryPeriod"),
    ("checkChangeDebounce: 10 secs\n", "checkChangeDebounce"),
    ("stateReaperInterval: often\n", "stateReaperInterval"),
    ("checkReaperRunInterval: 30 seconds\n", "checkReaperRunInterval"),
    ("promMetricsConfig:\n  suppressErrorLabel: perhaps\n", "suppressErrorLabel"),
    ("promMetricsConfig:\n  errorLabelMaxLength: long\n", "errorLabelMaxLength"),
]


@pytest.mark.parametrize(("yaml_text", "key"), BAD_VALUES, ids=[f"{k}-{i}" for i, (_, k) in enumerate(BAD_VALUES)])
def test_a_bad_config_value_stops_start_up_with_an_error_naming_the_key(
        cluster: TestCluster, tmp_path: Path, yaml_text: str, key: str) -> None:
    f = tmp_path / "kh.yaml"
    f.write_text("listenAddress: '127.0.0.1:0'\ntargetNamespace: contract-nothing-here\n" + yaml_text
                 if not yaml_text.startswith("listenAddress") else yaml_text)
    out = run_cli(["--config", str(f)], {"POD_NAMESPACE": "contract-nothing-here", "POD_NAME": "kh-bad"}, timeout=10)
    assert out.returncode not in (0, None), f"started with a bad {key}:\n{out.stdout}\n{out.stderr}"
    assert key in out.stderr + out.stdout, f"the error does not name {key}:\n{out.stderr}\n{out.stdout}"


@pytest.mark.parametrize("value", ["10", "'10'", "1.5"])
def test_a_duration_without_a_unit_is_not_a_go_duration_and_stops_start_up(
        cluster: TestCluster, tmp_path: Path, value: str) -> None:
    """Go's time.ParseDuration rejects "10" (missing unit); only "0" is unitless."""
    f = tmp_path / "kh.yaml"
    f.write_text(f"listenAddress: '127.0.0.1:0'\ntargetNamespace: contract-nothing-here\nmaxKHJobAge: {value}\n")
    out = run_cli(["--config", str(f)], {"POD_NAMESPACE": "contract-nothing-here", "POD_NAME": "kh-bad"}, timeout=10)
    assert out.returncode not in (0, None), f"started with maxKHJobAge: {value}:\n{out.stderr[-1500:]}"
    assert "maxKHJobAge" in out.stderr + out.stdout


@pytest.mark.parametrize("level", ["debug", "info", "warning", "error"])
def test_every_documented_log_level_is_accepted(cluster: TestCluster, tmp_path: Path, level: str) -> None:
    """Probe: with logLevel valid and maxKHJobAge bad, start-up fails on maxKHJobAge alone."""
    f = tmp_path / "kh.yaml"
    f.write_text(f"listenAddress: '127.0.0.1:0'\nlogLevel: {level}\nmaxKHJobAge: bogus\n")
    out = run_cli(["--config", str(f)], {"POD_NAMESPACE": "contract-nothing-here"}, timeout=15)
    assert out.returncode not in (0, None)
    assert "maxKHJobAge" in out.stderr + out.stdout
    assert "logLevel" not in out.stderr + out.stdout, out.stderr


def test_a_bad_check_reaper_interval_from_the_environment_stops_start_up(cluster: TestCluster, tmp_path: Path) -> None:
    f = tmp_path / "kh.yaml"
    f.write_text("listenAddress: '127.0.0.1:0'\ntargetNamespace: contract-nothing-here\n")
    out = run_cli(["--config", str(f)], {"CHECK_REAPER_RUN_INTERVAL": "whenever",
                                         "POD_NAMESPACE": "contract-nothing-here", "POD_NAME": "kh-bad"})
    assert out.returncode not in (0, None), out.stderr
    text = out.stderr + out.stdout
    assert "CHECK_REAPER_RUN_INTERVAL" in text or "checkReaperRunInterval" in text, text


def test_a_config_file_named_explicitly_but_missing_stops_start_up(cluster: TestCluster, tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    out = run_cli(["--config", str(missing)], {"POD_NAMESPACE": "contract-nothing-here"})
    assert out.returncode not in (0, None), out.stderr
    assert str(missing) in out.stderr + out.stdout


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def test_without_a_config_file_the_daemon_starts_with_all_defaults_and_debug_logging(
        cluster: TestCluster, tmp_path: Path) -> None:
    """No --config and no /etc/config/kuberhealthy.yaml: listens on :8080; -d logs at debug level."""
    if Path("/etc/config/kuberhealthy.yaml").exists():
        pytest.skip("a default config file exists on this machine")
    if not port_free(8080):
        pytest.skip("port 8080 is taken")
    ns = create_namespace(cluster, "cdef")
    # Someone else holds the default Lease, so this all-namespaces daemon stays a follower and runs nothing.
    create_lease(cluster, ns, "kuberhealthy", "somebody-else", 3600)
    log = tmp_path / "out.log"
    env = dict(os.environ, POD_NAMESPACE=ns, POD_NAME="kh-defaults", PYTHONUNBUFFERED="1")
    env.pop("KUBERNETES_SERVICE_HOST", None)
    with running([console_script(), "-d"], env, log, cwd=tmp_path) as proc:
        def up() -> bool:
            alive(proc, log)
            try:
                return requests.get("http://127.0.0.1:8080/readyz", timeout=5).status_code == 200
            except requests.RequestException:
                return False
        wait_for(up, 60, what="the default listen address :8080")
        assert requests.get("http://127.0.0.1:8080/healthz", timeout=5).status_code == 200
        status = get_json("http://127.0.0.1:8080")
        assert status["CurrentMaster"] == "somebody-else"
        # give the daemon something to say: a report nobody can have sent (rejected)
        assert post_report(8080, {"OK": True, "Errors": []}, run_uuid="no-such-run").status == 400

        def debug_logged() -> bool:
            return " DEBUG " in log.read_text(errors="replace")
        try:
            wait_for(debug_logged, 10, what="a debug-level log line")
        except AssertionError:
            raise AssertionError(f"-d produced no debug-level log lines:\n{log.read_text()[-2000:]}") from None


def test_the_default_pod_namespace_is_kuberhealthy_and_pod_name_defaults_to_the_hostname(
        cluster: TestCluster, tmp_path: Path) -> None:
    """Without POD_NAME/POD_NAMESPACE the replica elects itself as <hostname> in a Lease in `kuberhealthy`,
    and with no reporting URL configured its checker pods report to the in-cluster default."""
    create_namespace(cluster, name="kuberhealthy")
    target = create_namespace(cluster, "cpn")
    cluster.request("POST", khc(target), khcheck("urlc", "example.invalid/never:1", interval="1h", timeout="10m"))
    port = free_port()
    lease_name = "contract-defaults"
    f = tmp_path / "kh.yaml"
    f.write_text(f"listenAddress: '127.0.0.1:{port}'\ntargetNamespace: {target}\n"
                 f"leaderElection:\n  leaseName: {lease_name}\n")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for k in ("POD_NAME", "POD_NAMESPACE", "KUBERNETES_SERVICE_HOST", "KH_EXTERNAL_REPORTING_URL"):
        env.pop(k, None)
    log = tmp_path / "out.log"
    with running([console_script(), "-c", str(f)], env, log) as proc:
        host = socket.gethostname()

        def holder() -> bool:
            alive(proc, log)
            return lease_holder(cluster, "kuberhealthy", lease_name) == host
        wait_for(holder, 60, what=f"Lease kuberhealthy/{lease_name} held by {host}")
        status = get_json(f"http://127.0.0.1:{port}")
        assert status["CurrentMaster"] == host

        def checker_pod() -> dict[str, Any]:
            items = cluster.request("GET", pods_path(target))["items"]
            assert items, "no checker pod yet"
            return items[0]
        pod = wait_for(checker_pod, 60, what="urlc's checker pod")
        env_vars = {v["name"]: v.get("value") for v in pod["spec"]["containers"][0].get("env") or []}
        assert env_vars.get("KH_REPORTING_URL") == \
            "http://kuberhealthy.kuberhealthy.svc.cluster.local/externalCheckStatus"


def test_without_kubeconfig_the_daemon_uses_home_kube_config(cluster: TestCluster, tmp_path: Path) -> None:
    ns = create_namespace(cluster, "chome")
    create_lease(cluster, ns, "kuberhealthy", "somebody-else", 3600)
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(cluster.kubeconfig.read_text())
    port = free_port()
    f = tmp_path / "kh.yaml"
    f.write_text(f"listenAddress: '127.0.0.1:{port}'\ntargetNamespace: {ns}\n")
    env = dict(os.environ, HOME=str(home), POD_NAMESPACE=ns, POD_NAME="kh-home", PYTHONUNBUFFERED="1")
    for k in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        env.pop(k, None)
    log = tmp_path / "out.log"
    with running([console_script(), "--config", str(f)], env, log) as proc:
        def master() -> bool:
            alive(proc, log)
            try:
                return requests.get(f"http://127.0.0.1:{port}/", timeout=5).json()["CurrentMaster"] == "somebody-else"
            except (requests.RequestException, ValueError, KeyError):
                return False
        wait_for(master, 60, what="the daemon reading the Lease through ~/.kube/config")


def test_healthz_is_up_while_readyz_waits_for_the_caches(tmp_path: Path) -> None:
    """With the API server unreachable the process is alive (/healthz 200) but never ready (/readyz not 200)."""
    kc = tmp_path / "kubeconfig"
    kc.write_text(kubeconfig_text(f"https://127.0.0.1:{free_port()}", "no-token"))
    port = free_port()
    f = tmp_path / "kh.yaml"
    f.write_text(f"listenAddress: '127.0.0.1:{port}'\ntargetNamespace: nowhere\n")
    env = dict(os.environ, KUBECONFIG=str(kc), POD_NAMESPACE="nowhere", POD_NAME="kh-unready", PYTHONUNBUFFERED="1")
    env.pop("KUBERNETES_SERVICE_HOST", None)
    log = tmp_path / "out.log"
    with running([console_script(), "--config", str(f)], env, log) as proc:
        def healthy() -> bool:
            alive(proc, log)
            try:
                return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
            except requests.RequestException:
                return False
        wait_for(healthy, 60, what="/healthz")
        assert requests.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code != 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
