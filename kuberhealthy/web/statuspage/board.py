"""What the status page says: the checks arranged into groups, each group's and check's state in words.

People outside the team read this page, so it says less than the dashboard: a state per check (OK,
failing, no result yet, paused), a state per group and for the whole page, the 30-day uptime, and the
error texts only when the page is told to show them (they may name hosts and addresses inside the
cluster). Groups come from the check's label `kuberhealthy.io/status-group` (its value is the group's
name); checks without it are in DEFAULT_GROUP, listed last. A check that runs once (a khjob, a
singleRunOnly HealthCheck) has no state "now" to speak of: it is listed only when its label names a group.

A paused check says so and counts neither way in its group's state, as on `/`.

Pure: no Flask, no I/O, no clock; the entries are web/entries.py's.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kuberhealthy.base.times import parse_time
from kuberhealthy.web.entries import FAILING, LABEL_PREFIX, NEVER_RUN, OK, View, runs_once

GROUP_LABEL = LABEL_PREFIX + "status-group"
DEFAULT_GROUP = "Other"
PAUSED = "paused"
ERRORS_SHOWN = 5  # error texts per check, at most
ERROR_CHARS = 300  # characters of each
# A check's state as people read it: words, and a glyph so it reads without colour.
CHECK_TEXT = {OK: "OK", FAILING: "Failing", NEVER_RUN: "No result yet", PAUSED: "Paused"}
GLYPH = {OK: "\u2713", FAILING: "\u2717", NEVER_RUN: "?", PAUSED: "\u2016"}  # check, ballot x, ?, double bar
# A group's (and the page's) state: every counted check OK, some failing, or not known yet.
UNKNOWN = "unknown"
GROUP_GLYPH = {OK: "\u2713", FAILING: "\u2717", UNKNOWN: "?"}


@dataclass(frozen=True)
class Item:
    """One check on the page."""

    kind: str  # the entry's kind (check | job | healthcheck)
    namespace: str
    name: str
    state: str  # ok | failing | never-run | paused
    errors: tuple[str, ...]  # () unless the page shows errors and the check is failing
    last_run: str | None = None  # RFC3339: when the state now was found

    @property
    def text(self) -> str:
        return CHECK_TEXT[self.state]

    @property
    def glyph(self) -> str:
        return GLYPH[self.state]

    @property
    def since(self) -> str:
        """When its state was found, in UTC ("3 Dec 07:41 UTC"; "" before a first run)."""
        when = parse_time(self.last_run) if self.last_run else None
        if when is None:
            return ""
        t = time.gmtime(when)
        return f"{t.tm_mday} {time.strftime('%b %H:%M', t)} UTC"


@dataclass(frozen=True)
class Standing:
    """A group's or the whole page's state, with its words."""

    state: str  # ok | failing | unknown
    text: str  # "All OK", "1 of 3 failing", "No results yet"

    @property
    def glyph(self) -> str:
        return GROUP_GLYPH[self.state]


@dataclass(frozen=True)
class Group:
    name: str
    standing: Standing
    items: tuple[Item, ...]


@dataclass(frozen=True)
class Board:
    standing: Standing  # of every check on the page
    groups: tuple[Group, ...]

    @property
    def count(self) -> int:
        return sum(len(g.items) for g in self.groups)

    @property
    def headline(self) -> str:
        """The page's state in words, for its heading and title."""
        if not self.groups:
            return "No checks to show yet"
        if self.standing.state == OK:
            return "All checks OK" if self.count > 1 else "The check is OK"
        return self.standing.text


def group_of(labels: Mapping[str, str]) -> str | None:
    """The group a check's labels name (None: none)."""
    name = labels.get(GROUP_LABEL, "").strip()
    return name or None


def _errors(view: View) -> tuple[str, ...]:
    texts = [str(e).strip() for e in view.get("errors") or () if str(e).strip()]
    return tuple(t if len(t) <= ERROR_CHARS else t[:ERROR_CHARS - 1] + "\u2026" for t in texts[:ERRORS_SHOWN])


def item(view: View, show_errors: bool) -> Item:
    state = PAUSED if view.get("paused") else str(view.get("state") or NEVER_RUN)
    if state not in CHECK_TEXT:
        state = NEVER_RUN
    errors = _errors(view) if show_errors and state == FAILING else ()
    last_run = view.get("lastRun")
    return Item(str(view["kind"]), str(view["namespace"]), str(view["name"]), state, errors,
                last_run if isinstance(last_run, str) else None)


def standing(items: Iterable[Item], plural: str = "checks") -> Standing:
    """Failing when any check fails; OK when every check but the paused ones is OK (and one is); else unknown."""
    counted = [i for i in items if i.state != PAUSED]
    failing = sum(1 for i in counted if i.state == FAILING)
    if failing:
        return Standing(FAILING, f"{failing} of {len(counted)} {plural} failing" if len(counted) > 1 else "Failing")
    if counted and all(i.state == OK for i in counted):
        return Standing(OK, "All OK" if len(counted) > 1 else "OK")
    if any(i.state == OK for i in counted):
        return Standing(UNKNOWN, f"{sum(1 for i in counted if i.state != OK)} of {len(counted)} {plural} "
                                 "without a result yet")
    return Standing(UNKNOWN, "No results yet" if counted else "Paused")


def arrange(entries: Iterable[tuple[View, Mapping[str, str]]], show_errors: bool) -> Board:
    """The page's groups from (entry, its kuberhealthy.io/ labels): named groups by name, DEFAULT_GROUP
    last; checks by name, then namespace."""
    grouped: dict[str, list[Item]] = {}
    for view, labels in entries:
        group = group_of(labels)
        if group is None and runs_once(view):
            continue
        grouped.setdefault(group or DEFAULT_GROUP, []).append(item(view, show_errors))
    names = sorted((n for n in grouped if n != DEFAULT_GROUP), key=lambda n: (n.casefold(), n))
    if DEFAULT_GROUP in grouped:
        names.append(DEFAULT_GROUP)
    groups = tuple(Group(n, standing(grouped[n]), tuple(sorted(grouped[n], key=_order))) for n in names)
    return Board(standing([i for g in groups for i in g.items]), groups)


def _order(i: Item) -> tuple[str, str, str]:
    return (i.name, i.namespace, i.kind)


def _count(bucket: Mapping[str, Any], key: str) -> int:
    v = bucket.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def month(days: Iterable[Mapping[str, Any]]) -> tuple[float | None, int]:
    """The uptime over a check's daily buckets (OK / (OK + failed); None without a finished run) and how
    many of the days the rollups know anything of: the figure beside its bar, from the bar's own days."""
    ok = failed = known = 0
    for b in days:
        ok, failed = ok + _count(b, "ok"), failed + _count(b, "failed")
        coverage = b.get("coverage")
        known += isinstance(coverage, (int, float)) and coverage > 0
    return (ok / (ok + failed) if ok + failed else None), known

