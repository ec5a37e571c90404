"""The status page's prepared bytes: built when the checks change or the UTC hour turns, never per request.

`/status` is meant for people outside the team, so it may be polled by many and reached through
proxies: a request costs a lookup of bytes prepared before (plain and gzipped, with their ETag), no
rendering and no API request. The page is built again only when one of the caches it reads changed (a
listener counts the changes), the UTC hour turned (so a new UTC day moves the 30-day bars at once), a pause
it shows ended, or showErrors was switched; and after a change at most once per MIN_AGE seconds, so a
cluster whose checks finish every second does not rebuild it per request. One build at a time: while
one runs, other requests get the last page (never one built with error texts after showErrors went off).
Each check's part of the page (its 30 UTC days and their uptime) is kept with the version of its
entry and rendered again only when that changes or the UTC day turns: a build after the hour turned or
one check changed renders that check at most, then joins the parts.

What it does not do: serve HTTP (routes.py), decide what the page says (board.py), draw (web/charts.py).
"""
from __future__ import annotations

import gzip
import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kuberhealthy.base.times import parse_time
from kuberhealthy.kube import Cache, Obj
from kuberhealthy.web.entries import Built, ViewCache
from kuberhealthy.web.statuspage.board import Board, Item, arrange
from kuberhealthy.web.uptime import Uptime

HOUR = 3600
DAY = 86400
MIN_AGE = 5.0  # seconds: after a change, the page is built again at most this often
GZIP_LEVEL = 6
DAYS = "30d"  # the timeline each check's bar draws (one bucket per UTC day)

Key = tuple[str, str, str]  # an entry's (kind, namespace, name)


class Renderer(Protocol):
    """Turns the page into HTML (routes.py's, over the Jinja templates)."""

    def check(self, item: Item, days: list[dict[str, Any]]) -> str: ...

    def page(self, board: Board, checks: Mapping[Key, str]) -> str: ...


@dataclass(frozen=True)
class Prepared:
    """One build of the page."""

    body: bytes
    gzipped: bytes
    etag: str  # of the content: the same for both encodings (sent weak)


@dataclass(frozen=True)
class _Build:
    prepared: Prepared
    generation: int
    hour: int
    show_errors: bool
    pause_ends: float  # unix seconds: the first pause the page shows ends then (inf: none)
    at: float  # monotonic seconds


def key_of(view: Mapping[str, Any]) -> Key:
    return str(view["kind"]), str(view["namespace"]), str(view["name"])


def _pause_ends(built: Iterable[Built]) -> float:
    ends = [parse_time(str(b.view["paused"].get("until") or "")) for b in built if b.view.get("paused")]
    return min((e for e in ends if e is not None), default=float("inf"))


class PreparedStatusPage:
    """The page over the JSON API's entries (ViewCache) and the checks' rollups (Uptime); `caches` are the
    ones those entries are built from (khchecks, khjobs, khstates, HealthChecks): their changes mark the
    page stale."""

    def __init__(self, views: ViewCache, uptime: Uptime, caches: Iterable[Cache],
                 wall: Callable[[], float] = time.time, clock: Callable[[], float] = time.monotonic) -> None:
        self._views, self._uptime, self._caches = views, uptime, tuple(caches)
        self._wall, self._clock = wall, clock
        self._lock = threading.Lock()  # guards _generation
        self._build_lock = threading.Lock()  # one build at a time; guards _memo
        self._generation = 0
        self._current: _Build | None = None
        self._memo: dict[Key, tuple[tuple[object, ...], str]] = {}  # key -> ((version, hour, errors), html)
        self.builds = 0  # pages built so far (for tests and figures)

    def attach(self) -> PreparedStatusPage:
        """Listen to the caches; call once."""
        for cache in self._caches:
            cache.add_listener(self._changed)
        return self

    def _changed(self, _etype: str, _obj: Obj, _prev: Obj | None) -> None:
        with self._lock:
            self._generation += 1

    def _fresh(self, cur: _Build | None, show_errors: bool) -> bool:
        """Whether `cur` may be served as it is."""
        if cur is None or cur.show_errors != show_errors:
            return False
        wall = self._wall()
        if cur.hour != int(wall // HOUR):
            return False
        with self._lock:
            generation = self._generation
        if generation == cur.generation and wall < cur.pause_ends:
            return True
        return self._clock() - cur.at < MIN_AGE  # changed, but built a moment ago

    def prepared(self, show_errors: bool, renderer: Renderer) -> Prepared:
        """The page as it is to be served now."""
        cur = self._current
        if self._fresh(cur, show_errors):
            assert cur is not None
            return cur.prepared
        # Another request may be building: serve the last page meanwhile (an hour old is fine), unless there
        # is none or it shows error texts that are no longer to be shown.
        blocking = cur is None or (cur.show_errors and not show_errors)
        if not self._build_lock.acquire(blocking=blocking):
            assert cur is not None
            return cur.prepared
        try:
            cur = self._current
            if self._fresh(cur, show_errors):
                assert cur is not None
                return cur.prepared
            cur = self._build(show_errors, renderer)
            self._current = cur
            return cur.prepared
        finally:
            self._build_lock.release()

    def _build(self, show_errors: bool, renderer: Renderer) -> _Build:
        with self._lock:
            generation = self._generation  # taken first: a change during the build marks the result stale
        at, wall = self._clock(), self._wall()
        hour = int(wall // HOUR)
        built = self._views.entries()
        by_key = {key_of(b.view): b for b in built}
        board = arrange(((b.view, b.labels) for b in built), show_errors)
        memo: dict[Key, tuple[tuple[object, ...], str]] = {}
        for group in board.groups:
            for item in group.items:
                key = (item.kind, item.namespace, item.name)
                stamp = (by_key[key].version, int(wall // DAY), show_errors)  # the bar moves by the UTC day
                old = self._memo.get(key)
                if old is not None and old[0] == stamp:
                    memo[key] = old
                    continue
                days = self._uptime.timeline(item.kind, item.namespace, item.name, DAYS)
                memo[key] = (stamp, renderer.check(item, days))
        self._memo = memo
        body = renderer.page(board, {k: html for k, (_, html) in memo.items()}).encode("utf-8")
        old_page = self._current
        if old_page is not None and old_page.prepared.body == body:
            prepared = old_page.prepared  # nothing the page shows changed: the same bytes, the same ETag
        else:
            prepared = Prepared(body, gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0),
                                hashlib.sha256(body).hexdigest()[:24])
        self.builds += 1
        return _Build(prepared, generation, hour, show_errors, _pause_ends(built), at)
