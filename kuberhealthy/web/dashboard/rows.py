"""What the dashboard shows, computed from the JSON API's entries (web/entries.py's View): rows, groups, the
health summary, the filter, the text of times and durations, and which rows changed since a poll.

The dashboard's templates render these; its script keeps the page current by asking `/dashboard/live`
what changed since the generation it holds (changelog.py) and swapping in the server-rendered
rows, so the script never re-implements a row. Times are sent as RFC3339 in `datetime` attributes and their
text ("2 min ago", "in 40 s") is written here for the first paint and by the script afterwards, with
the same rules (relative() and countdown() below; dashboard.js mirrors them).

Pure: no Flask, no I/O, no clock (callers pass `now`, unix seconds).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from kuberhealthy.base.durations import parse_duration
from kuberhealthy.base.times import format_time, parse_time
from kuberhealthy.records import pause
from kuberhealthy.records.history import SKIPPED
from kuberhealthy.web.charts import duration_text
from kuberhealthy.web.entries import CHECK, FAILING, HEALTHCHECK, JOB, NEVER_RUN, OK, View, runs_once

RANK = {FAILING: 0, NEVER_RUN: 1, OK: 2}  # failing first, then never run, then OK
STATES = (FAILING, NEVER_RUN, OK)
STATE_TEXT = {OK: "OK", FAILING: "Failing", NEVER_RUN: "Never run"}
# Marks of the history strip: a shape for each outcome, so the strip reads without colour.
MARK_OK, MARK_FAIL, MARK_SKIP = "o", "f", "s"
GLYPH = {MARK_OK: "\u2713", MARK_FAIL: "\u2717", MARK_SKIP: "\u2013"}  # check mark, ballot x, en dash
ERROR_CHARS = 300  # of the first error in an overview row (the check page shows all of it)
PAUSE_EXAMPLE = 3600.0  # seconds: the example pause the check page's command sets (an hour from now)
# Each kind of entry as people read it: the tag beside its name, the heading on its check page, and
# the resource kubectl names it by.
TAG = {JOB: "job", HEALTHCHECK: "HealthCheck"}  # khchecks, v2's checks, carry none
HEADING = {CHECK: "Check", JOB: "Job", HEALTHCHECK: "HealthCheck"}
RESOURCE = {CHECK: "khcheck", JOB: "khjob", HEALTHCHECK: "healthcheck"}
NO_PICTURE = Markup("")


# --- text of numbers and times -------------------------------------------------------------------------

def _unit(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h"
    return f"{s // 86400} d"


def relative(when: float | None, now: float) -> str:
    """A past time as people say it: "just now", "40 s ago", "2 min ago", "3 h ago", "2 d ago"."""
    if when is None:
        return "never"
    age = now - when
    if age < 5:
        return "just now" if age > -5 else "in " + _unit(-age)
    return _unit(age) + " ago"


def countdown(when: float | None, now: float) -> str:
    """A coming time: "in 40 s", "in 4 min 5 s" (under 10 min), "in 12 min", "due now" once passed."""
    if when is None:
        return "\u2014"
    left = when - now
    if left < 1:
        return "due now"
    s = int(left)
    if 60 <= s < 600:
        return f"in {s // 60} min {s % 60} s"
    return "in " + _unit(s)


def percent(fraction: float | None) -> str:
    return "\u2014" if fraction is None else f"{fraction * 100:.1f} %"


def _seconds(go_duration: Any) -> float | None:
    try:
        return parse_duration(str(go_duration))
    except ValueError:
        return None


# --- rows ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mark:
    """A run of equal marks in the strip (run-length, so a steady check costs one element)."""

    kind: str  # MARK_OK | MARK_FAIL | MARK_SKIP
    count: int

    @property
    def glyphs(self) -> str:
        return GLYPH[self.kind] * self.count


@dataclass(frozen=True)
class Strip:
    marks: tuple[Mark, ...]  # oldest first
    label: str  # what a screen reader says instead of the glyphs


def mark_of(entry: Mapping[str, Any]) -> str:
    if entry.get("outcome") == SKIPPED or not isinstance(entry.get("OK"), bool):
        return MARK_SKIP
    return MARK_OK if entry["OK"] else MARK_FAIL


def strip(history: Sequence[Mapping[str, Any]]) -> Strip:
    """The kept history as marks, oldest first, with a summary for assistive technology."""
    kinds = [mark_of(e) for e in reversed(history)]
    marks: list[Mark] = []
    for kind in kinds:
        if marks and marks[-1].kind == kind:
            marks[-1] = Mark(kind, marks[-1].count + 1)
        else:
            marks.append(Mark(kind, 1))
    if not kinds:
        return Strip((), "no runs kept")
    counts = [(kinds.count(MARK_OK), "passed"), (kinds.count(MARK_FAIL), "failed"),
              (kinds.count(MARK_SKIP), "skipped")]
    said = ", ".join(f"{n} {word}" for n, word in counts if n)
    newest = {MARK_OK: "passed", MARK_FAIL: "failed", MARK_SKIP: "skipped"}[kinds[-1]]
    runs_ = f"{len(kinds)} run{'s' if len(kinds) != 1 else ''}"
    return Strip(tuple(marks), f"last {runs_}: {said}; newest {newest}")


def row_id(kind: str, namespace: str, name: str) -> str:
    return f"{kind}:{namespace}/{name}"


@dataclass(frozen=True)
class Row:
    """One check or job of the overview."""

    id: str  # "check:<ns>/<name>" (the element's key for the script)
    kind: str
    namespace: str
    name: str
    state: str
    running: str  # the phase of the run in flight ("" when none)
    last_run: str | None  # RFC3339
    last_run_text: str
    next_run: str | None
    next_run_text: str
    phase: str  # khjobs: spec.phase
    duration_text: str
    consecutive_failures: int
    strip: Strip
    first_error: str
    error_count: int
    paused_until: str | None = None  # RFC3339, while the check is paused
    paused_until_text: str = ""
    paused_reason: str = ""
    once: bool = False  # runs once (a khjob, a singleRunOnly HealthCheck): no next run
    day_bar: Markup = NO_PICTURE  # the 30-day bar (SVG, web/dashboard/pictures.py)
    spark: Markup = NO_PICTURE  # the sparkline of the kept runs' durations (SVG)

    @property
    def rank(self) -> int:
        return RANK.get(self.state, 1)

    @property
    def tag(self) -> str:
        """The kind's tag beside the name ("" for a khcheck)."""
        return TAG.get(self.kind, "")

    @property
    def query(self) -> str:
        """What the check page's URL adds to name this entry's kind: a HealthCheck's page asks for it, so
        its link never lands on a same-named khcheck."""
        return f"?kind={self.kind}" if self.kind == HEALTHCHECK else ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def sort(self) -> tuple[int, str, str]:
        return (self.rank, self.name, self.kind)

    def search_text(self) -> str:
        """What the text filter matches (case-insensitive substring); dashboard.js matches the same."""
        return f"{self.key} {self.first_error}".lower()


def row(v: View, now: float, day_bar: Markup = NO_PICTURE, spark: Markup = NO_PICTURE) -> Row:
    last = parse_time(v.get("lastRun"))
    nxt = parse_time(v.get("nextRun"))
    errors = [str(e) for e in v.get("errors") or []]
    first = errors[0] if errors else ""
    current = v.get("currentRun") or {}
    paused = v.get("paused") or {}
    return Row(
        id=row_id(v["kind"], v["namespace"], v["name"]), kind=v["kind"], namespace=v["namespace"],
        name=v["name"], state=v["state"], running=str(current.get("phase") or "") if current else "",
        last_run=v.get("lastRun"), last_run_text=relative(last, now),
        next_run=v.get("nextRun") if not runs_once(v) else None,
        next_run_text=countdown(nxt, now) if not runs_once(v) else "",
        phase=str(v.get("phase") or ""), duration_text=duration_text(v.get("runDuration")),
        consecutive_failures=int(v.get("consecutiveFailures") or 0), strip=strip(v.get("history") or []),
        first_error=first if len(first) <= ERROR_CHARS else first[:ERROR_CHARS - 1] + "\u2026",
        error_count=len(errors), paused_until=paused.get("until") if paused else None,
        paused_until_text=countdown(parse_time(paused.get("until")), now) if paused else "",
        paused_reason=str(paused.get("reason") or "") if paused else "", once=runs_once(v), day_bar=day_bar,
        spark=spark)


@dataclass
class Group:
    namespace: str
    rows: list[Row]

    @property
    def failing(self) -> int:
        return sum(1 for r in self.rows if r.state == FAILING)

    @property
    def summary(self) -> str:
        """"3 checks, 1 failing" (dashboard.js writes the same)."""
        n = len(self.rows)
        text = f"{n} check{'s' if n != 1 else ''}"
        return text + (f", {self.failing} failing" if self.failing else "")


def groups(rows: Iterable[Row]) -> list[Group]:
    """By namespace; namespaces with failing checks first, then by name; in each, failing rows first."""
    by_ns: dict[str, list[Row]] = {}
    for r in rows:
        by_ns.setdefault(r.namespace, []).append(r)
    out = [Group(ns, sorted(rs, key=lambda r: r.sort)) for ns, rs in by_ns.items()]
    return sorted(out, key=lambda g: (0 if g.failing else 1, g.namespace))


@dataclass(frozen=True)
class Banner:
    """The health banner above the overview: how many checks, failing, never run, running; who leads."""

    total: int
    failing: int  # paused checks left out, as from the status page's top-level OK
    never_run: int
    running: int
    master: str
    paused: int = 0

    @property
    def healthy(self) -> bool:
        return self.failing == 0

    @property
    def headline(self) -> str:
        if self.total == 0:
            return "No checks yet"
        if self.failing == 0:
            text = f"All {self.total} OK" if self.never_run == 0 else f"No failures ({self.never_run} not run yet)"
            if self.paused:
                text = f"No failures ({self.paused} paused)" if self.never_run == 0 else \
                    f"No failures ({self.never_run} not run yet, {self.paused} paused)"
        else:
            text = f"{self.failing} of {self.total} failing"
            if self.paused:
                text += f" ({self.paused} paused)"
        return text


def banner(views: Sequence[View], master: str) -> Banner:
    return Banner(total=len(views), failing=sum(1 for v in views if v["state"] == FAILING and not v.get("paused")),
                   never_run=sum(1 for v in views if v["state"] == NEVER_RUN),
                   running=sum(1 for v in views if v.get("currentRun")), master=master,
                   paused=sum(1 for v in views if v.get("paused")))


# --- the filter -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Filter:
    """The overview's filter, kept in the query string so a link shares it: ?q=&ns=&state=."""

    text: str = ""
    namespace: str = ""
    state: str = ""

    @classmethod
    def of(cls, args: Mapping[str, str]) -> Filter:
        state = args.get("state", "")
        return cls(text=args.get("q", "").strip()[:200], namespace=args.get("ns", "").strip()[:253],
                   state=state if state in STATES else "")

    def shows(self, rows: Iterable[Row]) -> bool:
        return any(self.matches(r) for r in rows)

    def matches(self, r: Row) -> bool:
        return ((not self.namespace or r.namespace == self.namespace)
                and (not self.state or r.state == self.state)
                and (not self.text or self.text.lower() in r.search_text()))


# --- the check page -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """One row of a check page's history table."""

    start: str | None
    start_text: str
    mark: str
    result: str
    duration_text: str
    outcome: str
    node: str
    pod: str
    errors: tuple[str, ...]
    logs: str | None  # only when exposeLogs is on (the JSON API's entries carry them then)


def runs(history: Sequence[Mapping[str, Any]], now: float) -> list[Run]:
    out = []
    for e in history:
        mark = mark_of(e)
        start = e.get("start") if isinstance(e.get("start"), str) else None
        logs = e.get("logs")
        out.append(Run(start=start, start_text=relative(parse_time(start), now), mark=mark,
                       result={MARK_OK: "OK", MARK_FAIL: "Failed", MARK_SKIP: "Skipped"}[mark],
                       duration_text=duration_text(_seconds(e.get("duration"))), outcome=str(e.get("outcome") or ""),
                       node=str(e.get("node") or ""), pod=str(e.get("pod") or ""),
                       errors=tuple(str(x) for x in e.get("errors") or []),
                       logs=logs if isinstance(logs, str) and logs else None))
    return out


def images(obj: Mapping[str, Any] | None) -> list[str]:
    """The container images of a khcheck's or khjob's podSpec (a HealthCheck's podSpec.spec)."""
    pod_spec = ((obj or {}).get("spec") or {}).get("podSpec") or {}
    if isinstance(pod_spec, Mapping) and "containers" not in pod_spec and isinstance(pod_spec.get("spec"), Mapping):
        pod_spec = pod_spec["spec"]
    containers = pod_spec.get("containers") if isinstance(pod_spec, Mapping) else None
    return [str(c.get("image") or "") for c in containers or [] if isinstance(c, Mapping)]


@dataclass(frozen=True)
class Detail:
    """One entry (check or job) of a check page."""

    view: View
    row: Row
    images: list[str]
    runs: list[Run]
    last_ok_text: str
    last_failure_text: str
    started_text: str  # of the run in flight
    resume_command: str = ""  # kubectl: end the pause (while paused)
    pause_command: str = ""  # kubectl: pause the check for an hour (a check, while not paused)
    plots: Any = None  # pictures.CheckPlots: its uptime figures and plots (None: none drawn)

    @property
    def kind(self) -> str:
        return self.row.kind

    @property
    def heading(self) -> str:
        return HEADING.get(self.kind, self.kind)

    @property
    def resource(self) -> str:
        """The resource kubectl names it by."""
        return RESOURCE.get(self.kind, self.kind)

    @property
    def runnable(self) -> bool:
        """A run may be requested for it (not a check that runs once)."""
        return not self.row.once


def pause_commands(namespace: str, name: str, now: float, resource: str = "khcheck") -> tuple[str, str]:
    """The `kubectl annotate` commands that end a pause, and that pause the check for an hour (pause.py:
    only an annotation pauses a check, so RBAC decides who may)."""
    base = f"kubectl -n {namespace} annotate {resource} {name}"
    resume = f"{base} {pause.PAUSED_UNTIL}- {pause.PAUSED_REASON}-"
    start = (f"{base} {pause.PAUSED_UNTIL}={format_time(now + PAUSE_EXAMPLE)} "
             f"{pause.PAUSED_REASON}='<why>' --overwrite")
    return resume, start


def detail(v: View, obj: Mapping[str, Any] | None, now: float, plots: Any = None) -> Detail:
    current = v.get("currentRun") or {}
    resume, start = pause_commands(v["namespace"], v["name"], now, RESOURCE.get(v["kind"], "khcheck")) \
        if not runs_once(v) else ("", "")
    paused = bool(v.get("paused"))
    return Detail(view=v, row=row(v, now), images=images(obj), runs=runs(v.get("history") or [], now),
                  last_ok_text=relative(parse_time(v.get("lastOK")), now),
                  last_failure_text=relative(parse_time(v.get("lastFailure")), now),
                  started_text=relative(parse_time(current.get("started")), now),
                  resume_command=resume if paused else "", pause_command=start if not paused else "",
                  plots=plots)
