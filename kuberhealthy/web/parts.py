"""The parts of one web app, looked up by their type: how a handler finds what create_app built.

create_app() (web/__init__.py) builds every part (the shared context, the status cache, the report
admission, ...) and installs it on the app; a handler asks for the part of the type it needs. So
the parts' modules are imported by create_app and their own room, and this module imports none of
them: it knows no part, only how to keep them.
"""
from __future__ import annotations

from typing import TypeVar

from flask import Flask, current_app

T = TypeVar("T")


_KEYS: dict[type[object], str] = {}  # part() is on every request's path (`/` is polled): each key formatted once


def _key(kind: type[object]) -> str:
    key = _KEYS.get(kind)
    if key is None:
        key = _KEYS[kind] = f"kuberhealthy:{kind.__module__}.{kind.__qualname__}"
    return key


def install(app: Flask, *parts: object) -> None:
    """Make each of `parts` the app's part of its type."""
    for part_ in parts:
        app.extensions[_key(type(part_))] = part_


def part(kind: type[T], app: Flask | None = None) -> T:
    """The part of type `kind` of `app` (default: the app handling the current request)."""
    value = (app or current_app).extensions.get(_key(kind))
    if not isinstance(value, kind):
        raise LookupError(f"the web app has no {kind.__qualname__}")
    return value
