"""say(): a progress line printed from inside a test, past pytest's output capture."""
from __future__ import annotations

import contextlib

import pytest


def say(config: pytest.Config, prefix: str, text: str) -> None:
    """Write `[prefix] text` on its own line of pytest's terminal (print() when there is none)."""
    reporter = config.pluginmanager.getplugin("terminalreporter")
    capture = config.pluginmanager.getplugin("capturemanager")
    if reporter is None:
        print(f"[{prefix}] {text}")
        return
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        reporter.ensure_newline()
        reporter.write_line(f"[{prefix}] {text}")
