"""A check's run history and counters, kept in its khstate: the write side, the read side, the size rules.

v2 keeps only the latest result. We add to the khstate `spec` (docs/interface.md#history-and-counters):
  consecutiveFailures, successCount, failureCount   integers
  lastOK, lastFailure                               RFC3339 UTC, whole seconds (absent until the first one)
  history                                           newest first, at most historyLength entries:
      uuid, start (RFC3339), duration (Go duration, ms precision), OK, errors, node, pod, outcome
      ("reported" | "failed: <v2 reason>" | "skipped") and, for failed runs, logs (the checker's tail)

Counting. A run is judged when it was reported or failed: reported with OK true is a success (streak
reset, lastOK); reported with OK false, or failed, is a failure (streak +1, lastFailure). A skipped run
says nothing about the checked thing, so it changes no counter and does not break or extend a streak;
it may still be listed in the history (outcome "skipped", `OK` null, no errors or logs) when the caller
writes it, and it takes a history slot like any run. Skipped runs are excluded from uptime and
percentiles. A record whose uuid is already in the history is not applied twice (a write retried after
a lost answer); with historyLength 0 there is nothing to recognise it by.

Size. Each error in an entry is capped (ERROR_CHARS, at most ERRORS_PER_ENTRY of them), a log tail is
at most LOG_LINES lines and LOG_BYTES bytes, and only the newest LOG_FAILURES failures keep theirs.
Whatever the inputs, the added keys serialise (as Go's encoding/json writes them) to at most
BUDGET_BYTES: older entries lose error text first, then logs (oldest first), then whole entries
(oldest first). The current result's own fields (OK, Errors, ...) are never touched here.

Pure functions on plain dicts: no I/O, no clock (callers pass `now`, unix seconds), no kube imports.
Reading the pod log, writing the khstate and serving the API are the callers' business; whether the
installed khstate CRD keeps these keys is outputs/schemacheck.py's.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kuberhealthy.base.config import Config
from kuberhealthy.base.durations import format_duration, parse_duration
from kuberhealthy.base.times import format_time, parse_time

HISTORY_LENGTH = Config.history_length  # the config key historyLength's default; 0 turns the history off
ERROR_CHARS = 512  # characters kept of each error in an entry
ERRORS_PER_ENTRY = 5  # errors kept per entry; a note says how many more there were
SHORT_ERROR_CHARS = 128  # what an older entry keeps of its first error when the budget is tight
LOG_LINES = 40
LOG_BYTES = 4096  # UTF-8 bytes of one log tail
LOG_FAILURES = 3  # newest failures that keep their log tail
BUDGET_BYTES = 64 * 1024  # the added keys together, serialised
DAY = 24 * 3600.0

REPORTED = "reported"
SKIPPED = "skipped"
FAILED_PREFIX = "failed: "

COUNTER_KEYS = ("consecutiveFailures", "successCount", "failureCount")
ADDED_KEYS = (*COUNTER_KEYS, "lastOK", "lastFailure", "history")
ENTRY_KEYS = ("uuid", "start", "duration", "OK", "errors", "node", "pod", "outcome", "logs")

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True)
class RunFacts:
    """What every history entry says of its run, however it ended: which run, when it started (unix
    seconds), how long it took (seconds), and the node and pod it ran on ("" when it had none)."""

    uuid: str
    start: float
    duration: float
    node: str = ""
    pod: str = ""


@dataclass(frozen=True)
class RunRecord:
    """One finished run, as the runner knows it. `start` is unix seconds, `duration` seconds."""

    uuid: str
    start: float
    duration: float
    ok: bool
    errors: tuple[str, ...]
    node: str
    pod: str
    outcome: str  # REPORTED, SKIPPED or FAILED_PREFIX + v2 reason (see failed())
    logs: str | None = None  # the checker's log (any length: it is tailed here), or log_unavailable()

    @classmethod
    def reported(cls, run: RunFacts, spec: Mapping[str, Any], logs: str | None = None) -> RunRecord:
        """A run whose pod reported: OK and Errors as the report stored them in the khstate `spec`."""
        errors = spec.get("Errors")
        return cls(run.uuid, run.start, run.duration, spec.get("OK") is True,
                   tuple(str(e) for e in errors) if isinstance(errors, list) else (), run.node, run.pod, REPORTED,
                   logs)

    @classmethod
    def failed(cls, run: RunFacts, reason: str, errors: Sequence[str], logs: str | None = None) -> RunRecord:
        """A run that failed with one of v2's reasons (runner.ERR_*); `errors` as written to Errors."""
        return cls(run.uuid, run.start, run.duration, False, tuple(errors), run.node, run.pod,
                   FAILED_PREFIX + reason, logs)

    @classmethod
    def skipped(cls, run: RunFacts) -> RunRecord:
        return cls(run.uuid, run.start, run.duration, False, (), run.node, run.pod, SKIPPED)

    @property
    def judged(self) -> bool:
        return self.outcome != SKIPPED


# --- text ---------------------------------------------------------------------------------------------------

def log_tail(text: str | bytes, max_lines: int = LOG_LINES, max_bytes: int = LOG_BYTES) -> str:
    """The last `max_lines` lines of a log in at most `max_bytes` UTF-8 bytes, cut on a line boundary
    where one is in reach and never inside a character. Terminal escapes and control characters
    (other than newline and tab) are removed: they are noise in kubectl and JSON, and cost 6 bytes each."""
    reach = 16 * max_bytes + 1024  # the tail is in the end; a megabyte log need not be scanned whole
    if isinstance(text, bytes):
        text = text[-reach:].decode("utf-8", "replace")
    text = _ANSI.sub("", text[-reach:]).replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out = "\n".join(lines[-max_lines:]) if max_lines > 0 else ""
    data = out.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return out
    cut = data[len(data) - max_bytes:]
    if data[len(data) - max_bytes - 1] != 0x0A:  # cut mid-line: start at the next whole line, if any
        newline = cut.find(b"\n")
        if 0 <= newline < len(cut) - 1:
            cut = cut[newline + 1:]
    return cut.decode("utf-8", "ignore")  # drops the continuation bytes of a character cut in two


def log_unavailable(why: str) -> str:
    """What a history entry says in `logs` when the checker's log could not be read."""
    return f"(log not available: {_cap(why, SHORT_ERROR_CHARS)})"


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _cap_errors(errors: Iterable[Any]) -> list[str]:
    items = [str(e) for e in errors]
    kept = [_cap(e, ERROR_CHARS) for e in items[:ERRORS_PER_ENTRY]]
    if len(items) > ERRORS_PER_ENTRY:
        kept.append(f"... and {len(items) - ERRORS_PER_ENTRY} more errors")
    return kept


def encoded_size(value: Any) -> int:
    """Bytes of `value` as Go's encoding/json writes it (the API server's form): compact, raw UTF-8,
    with <, > and & as \\u003c.. (6 bytes), U+2028/9 escaped, \\b and \\f counted as \\u0008 (the worst)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    extra = (text.count("<") + text.count(">") + text.count("&")) * 5
    extra += (text.count("\u2028") + text.count("\u2029")) * 3
    extra += (text.count("\\b") + text.count("\\f")) * 4
    return len(text.encode("utf-8", "surrogatepass")) + extra


# --- the write side -------------------------------------------------------------------------------------------

def _int(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def _is_failure(entry: Mapping[str, Any]) -> bool:
    return entry.get("OK") is False and entry.get("outcome") != SKIPPED


def _clean(entry: Any, capture_logs: bool) -> dict[str, Any] | None:
    """An entry as we write it, from whatever a khstate holds (None: not an entry)."""
    if not isinstance(entry, dict):
        return None
    out: dict[str, Any] = {k: str(entry.get(k) or "") for k in ("uuid", "start", "duration", "node", "pod",
                                                                  "outcome")}
    ok = entry.get("OK")
    out["OK"] = ok if isinstance(ok, bool) and out["outcome"] != SKIPPED else None
    errors = entry.get("errors")
    out["errors"] = _cap_errors(errors) if isinstance(errors, list) else []
    logs = entry.get("logs")
    if capture_logs and isinstance(logs, str) and _is_failure(out):
        out["logs"] = log_tail(logs)
    return out


def new_entry(record: RunRecord, capture_logs: bool) -> dict[str, Any]:
    """The history entry apply_run writes for `record` (log tail only for a failure, when captured)."""
    entry: dict[str, Any] = {
        "uuid": record.uuid, "start": format_time(record.start),
        "duration": format_duration(round(max(0.0, record.duration), 3)),
        "OK": record.ok if record.judged else None,
        "errors": _cap_errors(record.errors) if record.judged else [],
        "node": record.node, "pod": record.pod, "outcome": record.outcome,
    }
    if capture_logs and record.logs is not None and record.judged and not record.ok:
        entry["logs"] = log_tail(record.logs)
    return entry


def apply_run(spec: Mapping[str, Any], record: RunRecord, history_length: int, now: float,
              capture_logs: bool = True, budget: int = BUDGET_BYTES) -> dict[str, Any]:
    """The added keys of a khstate `spec` after `record`: counters, lastOK/lastFailure and history.

    Returns a new dict of exactly ADDED_KEYS (lastOK/lastFailure only once set) for `spec.update()`;
    `spec` is not changed. `now` (unix seconds) stamps lastOK or lastFailure. historyLength 0 (or less)
    writes an empty history and keeps counting. captureLogs false writes no log tails and drops old ones.
    """
    old = spec.get("history")
    history = [e for e in [_clean(x, capture_logs) for x in (old if isinstance(old, list) else [])] if e]
    keys: dict[str, Any] = {k: _int(spec.get(k)) for k in COUNTER_KEYS}
    for k in ("lastOK", "lastFailure"):
        if parse_time(spec.get(k)) is not None:
            keys[k] = spec[k]
    length = max(0, history_length)
    if not (length and record.uuid in [e["uuid"] for e in history]):  # else: already applied
        if record.judged and record.ok:
            keys["successCount"] += 1
            keys["consecutiveFailures"] = 0
            keys["lastOK"] = format_time(now)
        elif record.judged:
            keys["failureCount"] += 1
            keys["consecutiveFailures"] += 1
            keys["lastFailure"] = format_time(now)
        history.insert(0, new_entry(record, capture_logs))
    history = history[:length]
    with_logs = 0
    for entry in history:
        if "logs" in entry:
            with_logs += 1
            if with_logs > LOG_FAILURES:
                del entry["logs"]
    keys["history"] = history
    _fit(keys, budget)
    return keys


def _fit(keys: dict[str, Any], budget: int) -> None:
    """Shrink keys["history"] in place until the keys serialise to at most `budget` bytes.

    In order, each step only while still too big: older entries keep only a short first error (oldest
    first); older entries lose their log tails (oldest first); whole entries go (oldest first); the
    newest entry keeps a short first error, then loses its log tail; the history is emptied (which
    the caps make unreachable). Sizes are kept per entry: linear in the history however long it is.
    """
    history: list[dict[str, Any]] = keys["history"]
    sizes = [encoded_size(e) for e in history]
    base = encoded_size({**keys, "history": []})

    def fits() -> bool:
        return base + sum(sizes) + max(0, len(sizes) - 1) <= budget

    def shorten(i: int) -> None:
        errors = history[i]["errors"]
        history[i]["errors"] = [_cap(errors[0], SHORT_ERROR_CHARS)] if errors else []
        sizes[i] = encoded_size(history[i])

    def drop_logs(i: int) -> None:
        if history[i].pop("logs", None) is not None:
            sizes[i] = encoded_size(history[i])

    for step in (shorten, drop_logs):
        for i in range(len(history) - 1, 0, -1):
            if fits():
                return
            step(i)
    while len(history) > 1 and not fits():
        history.pop()
        sizes.pop()
    for step in (shorten, drop_logs):
        if history and not fits():
            step(0)
    if history and not fits():
        history.clear()
        sizes.clear()


# --- the read side ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HistoryStats:
    """What the JSON API says about a check beside its last result. Fractions in [0, 1]; seconds."""

    consecutive_failures: int
    success_count: int
    failure_count: int
    last_ok: str | None
    last_failure: str | None
    uptime: float | None  # OK share of the judged runs in the kept history; None without any
    uptime_24h: float | None  # the same over the last 24 h; None until the history reaches back 24 h
    duration_p50: float | None
    duration_p95: float | None


def entries(spec: Mapping[str, Any], expose_logs: bool = False) -> list[dict[str, Any]]:
    """The history as the JSON API serves it: well-formed entries only, log tails only if exposed."""
    old = spec.get("history")
    out = [e for e in [_clean(x, True) for x in (old if isinstance(old, list) else [])] if e]
    if not expose_logs:
        for e in out:
            e.pop("logs", None)
    return out


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (an observed value, never an interpolation); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _uptime(judged: Sequence[Mapping[str, Any]]) -> float | None:
    return sum(1 for e in judged if e["OK"] is True) / len(judged) if judged else None


def stats(spec: Mapping[str, Any], now: float, kept: list[dict[str, Any]] | None = None) -> HistoryStats:
    """The figures of a khstate's spec; `kept`: its entries() already made (with log tails or not)."""
    kept = entries(spec) if kept is None else kept
    judged = [e for e in kept if e["outcome"] != SKIPPED and isinstance(e["OK"], bool)]
    starts = [t for t in (parse_time(e["start"]) for e in kept) if t is not None]
    covered = bool(starts) and min(starts) <= now - DAY
    recent = [e for e in judged if (parse_time(e["start"]) or 0.0) > now - DAY]
    durations: list[float] = []
    for e in judged:
        try:
            durations.append(parse_duration(e["duration"]))
        except ValueError:
            continue
    last_ok, last_failure = spec.get("lastOK"), spec.get("lastFailure")
    return HistoryStats(
        consecutive_failures=_int(spec.get("consecutiveFailures")), success_count=_int(spec.get("successCount")),
        failure_count=_int(spec.get("failureCount")),
        last_ok=last_ok if parse_time(last_ok) is not None else None,
        last_failure=last_failure if parse_time(last_failure) is not None else None,
        uptime=_uptime(judged), uptime_24h=_uptime(recent) if covered else None,
        duration_p50=percentile(durations, 50), duration_p95=percentile(durations, 95))
