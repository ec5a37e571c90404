"""The config watcher applies a changed, valid file once and keeps the running config on a bad one."""
from pathlib import Path

import pytest

from kuberhealthy.base.config import Config, load
from kuberhealthy.daemon.configwatch import ConfigWatcher


def test_a_changed_valid_file_is_applied_once(tmp_path: Path) -> None:
    f = tmp_path / "kh.yaml"
    f.write_text("maxCheckPodAge: 1h\n")
    applied: list[Config] = []
    w = ConfigWatcher(str(f), load(str(f)), applied.append)
    assert w.check_once() is False
    f.write_text("maxCheckPodAge: 2h\n")
    assert w.check_once() is True and w.check_once() is False
    assert [c.max_check_pod_age for c in applied] == [7200]


def test_an_invalid_change_keeps_the_running_config(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    f = tmp_path / "kh.yaml"
    f.write_text("maxCheckPodAge: 1h\n")
    applied: list[Config] = []
    w = ConfigWatcher(str(f), load(str(f)), applied.append)
    f.write_text("maxCheckPodAge: forever\n")
    assert w.check_once() is False and applied == []
    assert "maxCheckPodAge" in caplog.text


def test_a_change_that_only_reformats_the_file_restarts_nothing(tmp_path: Path) -> None:
    f = tmp_path / "kh.yaml"
    f.write_text("maxCheckPodAge: 1h\n")
    applied: list[Config] = []
    w = ConfigWatcher(str(f), load(str(f)), applied.append)
    f.write_text("# a comment\nmaxCheckPodAge: 60m\n")
    assert w.check_once() is False and applied == []


def test_the_watcher_thread_stops_promptly(tmp_path: Path) -> None:
    f = tmp_path / "kh.yaml"
    f.write_text("{}\n")
    w = ConfigWatcher(str(f), load(str(f)), lambda c: None, interval=3600)
    w.start()
    w.stop()
    w.join(30)
    assert not w._thread.is_alive()
