"""Which report endpoint the report scenarios ("flood", and "slow"'s stalled bodies) attack: v2's
`/externalCheckStatus` by default, v3's `/check` with `python -m bench.attack --report-path /check`.
Both endpoints run the same rules, so each target must hold on either."""
from __future__ import annotations

from testbed.clients.rawhttp import REPORT_PATH, REPORT_PATHS

_chosen = [REPORT_PATH]


def choose(path: str) -> None:
    if path not in REPORT_PATHS:
        raise ValueError(f"not a report endpoint: {path!r} (one of {', '.join(REPORT_PATHS)})")
    _chosen[0] = path


def report_path() -> str:
    return _chosen[0]


def label(scenario: str) -> str:
    """The scenario's name in the table, with the endpoint when it is not v2's."""
    return scenario if report_path() == REPORT_PATH else f"{scenario} {report_path()}"
