"""`kuberhealthy migrate to-v3|from-v3` (kuberhealthy/cli.py, docs/migrate-manifests.md): where it reads and
writes, its stderr lines and its exit codes: 0 converted, 1 nothing to convert, 2 bad arguments or input."""
from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
import yaml

from kuberhealthy import cli
from testbed.daemons.process import console_script

CHECK = """\
apiVersion: comcast.github.io/v1
kind: KuberhealthyCheck
metadata:
  name: probe
  namespace: kh
  uid: 0b1c
spec:
  runInterval: 5m
  timeout: 1m
  colour: blue
  podSpec:
    containers:
      - name: main
        image: kh/check:1
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: kh}
"""


def run(argv: list[str], stdin: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_to_v3_writes_healthchecks_to_stdout_and_names_what_it_skipped_or_carried_on_stderr(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(["migrate", "to-v3"], CHECK, monkeypatch, capsys)
    assert rc == 0
    (hc,) = yaml.safe_load_all(out)
    assert (hc["kind"], hc["spec"]["podSpec"]["spec"]["containers"][0]["image"]) == ("HealthCheck", "kh/check:1")
    assert err.splitlines() == [
        "kuberhealthy migrate to-v3: khcheck kh/probe: spec.colour has no place in a HealthCheck; kept in annotation "
        "kuberhealthy.github.io/v2-extra",
        "kuberhealthy migrate to-v3: skipped ConfigMap kh/settings: not a khcheck or khjob"]


def test_a_file_named_on_the_command_line_is_read_and_from_v3_gives_back_what_to_v3_was_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "checks.yaml"
    source.write_text(CHECK.split("---", maxsplit=1)[0], encoding="utf-8")
    rc, out, _ = run(["migrate", "to-v3", str(source)], "", monkeypatch, capsys)
    assert rc == 0
    (tmp_path / "v3.yaml").write_text(out, encoding="utf-8")
    rc, back, err = run(["migrate", "from-v3", str(tmp_path / "v3.yaml")], "", monkeypatch, capsys)
    expected = yaml.safe_load(CHECK.split("---", maxsplit=1)[0])
    del expected["metadata"]["uid"]
    assert (rc, err) == (0, "") and list(yaml.safe_load_all(back)) == [expected]


def test_a_dash_reads_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(["migrate", "to-v3", "-"], CHECK, monkeypatch, capsys)
    assert rc == 0 and out.startswith("---\napiVersion: kuberhealthy.github.io/v2\n")


@pytest.mark.parametrize("direction, stdin, wanted", [
    ("to-v3", "", "no khcheck or khjob"),
    ("to-v3", "apiVersion: v1\nkind: List\nitems: []\n", "no khcheck or khjob"),
    ("from-v3", CHECK, "no HealthCheck"),
])
def test_input_with_nothing_to_convert_exits_1_and_writes_nothing(
        direction: str, stdin: str, wanted: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(["migrate", direction], stdin, monkeypatch, capsys)
    assert (rc, out) == (1, "")
    assert err.splitlines()[-1] == f"kuberhealthy migrate {direction}: nothing to convert: {wanted} in the input"


def test_invalid_yaml_exits_2_naming_the_document_and_writes_nothing(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(["migrate", "to-v3"], CHECK + "---\nkind: [\n", monkeypatch, capsys)
    assert (rc, out) == (2, "")
    assert err.startswith("kuberhealthy migrate to-v3: error: document 3 (line 21, column 1): invalid YAML: ")


def test_an_unreadable_file_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(["migrate", "from-v3", str(tmp_path / "missing.yaml")], "", monkeypatch, capsys)
    assert (rc, out) == (2, "")
    assert err.startswith(f"kuberhealthy migrate from-v3: error: cannot read {tmp_path / 'missing.yaml'}: ")


@pytest.mark.parametrize("argv", [["migrate"], ["migrate", "sideways"], ["migrate", "to-v3", "a", "b"]])
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2 and "usage: kuberhealthy migrate" in capsys.readouterr().err


def test_the_subcommand_is_named_in_the_main_help_and_its_own_help_says_the_exit_codes(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "kuberhealthy migrate --help" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        cli.main(["migrate", "--help"])
    assert "Exits 0 (converted), 1 (nothing to convert) or 2" in " ".join(capsys.readouterr().out.split())


def test_the_console_script_converts_a_pipe() -> None:
    proc = subprocess.run([console_script(), "migrate", "to-v3"], input=CHECK, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert [d["kind"] for d in yaml.safe_load_all(proc.stdout)] == ["HealthCheck"]
    assert "skipped ConfigMap kh/settings" in proc.stderr


@pytest.mark.parametrize("argv, says", [
    (["migrate", "to-v3", "--in-cluster", "checks.yaml"], "--in-cluster takes no FILE"),
    (["migrate", "to-v3", "--dry-run"], "go with --in-cluster"),
    (["migrate", "to-v3", "--namespace", "kh"], "go with --in-cluster"),
    (["migrate", "to-v3", "--rollback"], "go with --in-cluster"),
    (["migrate", "from-v3", "--in-cluster"], "unrecognized arguments: --in-cluster"),
])
def test_the_live_flags_go_only_with_to_v3_in_cluster_and_without_a_file(
        argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_a_live_migration_with_an_unusable_kubeconfig_exits_2_and_touches_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    rc = cli.main(["migrate", "to-v3", "--in-cluster", "--kubeconfig", str(missing)])
    out, err = capsys.readouterr()
    assert (rc, out) == (2, "") and err.startswith("kuberhealthy migrate to-v3: error: ")


def test_to_v3_help_says_what_the_live_migration_changes_and_its_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["migrate", "to-v3", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--in-cluster" in text and "--rollback" in text and "kuberhealthy.github.io/migrated-to" in text
    assert "exits 0 (all done), 1 (a check refused or failed" in text
