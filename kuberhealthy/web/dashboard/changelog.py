"""Which of the dashboard's rows a poll must be sent: generations of row versions, like resourceVersions.

The overview's script holds a token `<epoch>.<generation>` and asks `/dashboard/live?since=<token>`;
ChangeLog says which rows changed or went away after it, so a poll costs what changed (and a 304 when
nothing did). The versions are checkview.Built.version (the resourceVersions an entry was built from).
No Flask, no I/O, no clock.
"""
from __future__ import annotations

import hashlib
import re
import threading
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

CHANGES_KEPT = 10_000  # removals remembered for deltas; a client further behind gets everything again
TOKEN_MAX = 128  # characters; a token this process issues has 8 + 1 + at most 19 + 1 + 16
# `<epoch>.<generation>[.<digest>]`, ASCII only: str.isdigit() and int() also take "²" and "٣", and
# int() of a 5,000-digit string is refused (or slow); so digits are matched by class, with a bound.
TOKEN = re.compile(r"[0-9a-zA-Z]{1,32}\.([0-9]{1,19})(?:\.[0-9a-zA-Z]{1,64})?")


@dataclass
class Delta:
    token: str
    full: bool  # True: `changed` is every row and the client drops what it has
    changed: list[str] = field(default_factory=list)  # row ids
    removed: list[str] = field(default_factory=list)


class ChangeLog:
    """Generations of the overview's rows, so a poll gets only the rows that changed since the last.

    `observe()` is given every entry's version (checkview.Built.version: the resourceVersions it was
    built from) and the master; whatever differs from the last call starts a new generation. A token
    is `<epoch>.<generation>.<digest>`: `since(token)` names the rows changed after its generation. The
    epoch is per process; the digest (of every version and the master) is the same on every replica,
    since resourceVersions come from the API server. So a token from another replica behind a Service,
    or from before a restart, still tells that nothing changed (`unchanged`); if something did, it gets
    everything, as does a token older than the removals remembered.
    """

    def __init__(self, keep: int = CHANGES_KEPT) -> None:
        self.epoch = uuid.uuid4().hex[:8]
        self._lock = threading.Lock()
        self._gen = 0
        self._rows: dict[str, tuple[object, int]] = {}  # row id -> (version, generation it changed in)
        self._master = ""
        self._digest = _digest({}, "")
        self._removed: deque[tuple[int, str]] = deque()
        self._floor = 0  # deltas from generations before this cannot be told (removals forgotten)
        self._keep = keep

    def _token(self) -> str:
        return f"{self.epoch}.{self._gen}.{self._digest}"

    def observe(self, versions: Mapping[str, object], master: str) -> str:
        """Record the current versions (row id -> version); the token for this state."""
        with self._lock:
            changed = [k for k, v in versions.items() if k not in self._rows or self._rows[k][0] != v]
            gone = [k for k in self._rows if k not in versions]
            if changed or gone or master != self._master:
                self._gen += 1
                for k in changed:
                    self._rows[k] = (versions[k], self._gen)
                for k in gone:
                    del self._rows[k]
                    self._removed.append((self._gen, k))
                while len(self._removed) > self._keep:
                    self._floor = self._removed.popleft()[0]
                self._master = master
                self._digest = _digest({k: v for k, (v, _) in self._rows.items()}, master)
            return self._token()

    def unchanged(self, token: str) -> bool:
        """The state `token` names is the current one (whichever replica or process issued it)."""
        with self._lock:
            return token.rpartition(".")[2] == self._digest

    def since(self, token: str) -> Delta:
        """The rows changed (and removed) after `token`; everything when the token is not understood."""
        with self._lock:
            current = self._token()
            epoch, _, digest = [*token.split("."), "", ""][:3]
            if digest == self._digest:
                return Delta(current, False)
            gen = generation(token)
            if epoch != self.epoch or gen < self._floor or gen > self._gen:
                return Delta(current, True, sorted(self._rows))
            return Delta(current, False, sorted(k for k, (_, g) in self._rows.items() if g > gen),
                         [k for g, k in self._removed if g > gen])


def well_formed(token: str) -> bool:
    """`token` has the shape of one a ChangeLog issues (this process's, another replica's, an older one's)."""
    return generation(token) >= 0


def generation(token: str) -> int:
    """The generation a token names; -1 when it is not well formed."""
    m = TOKEN.fullmatch(token) if len(token) <= TOKEN_MAX else None
    return int(m.group(1)) if m else -1


def _digest(versions: Mapping[str, object], master: str) -> str:
    text = repr((sorted(versions.items()), master))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
