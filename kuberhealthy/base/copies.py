"""Deep copies of JSON-shaped values (dicts, lists and scalars, as the API server sends them).

`copy.deepcopy` handles any object graph: a memo of every object it met, a dispatch per type and
`__deepcopy__` lookups. A check run copies the khstate it is about to rewrite and the podSpec it builds
its pod from, and for those trees the general machinery costs several times the copy itself.
"""
from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def json_copy(value: T) -> T:
    """A deep copy of a tree of dicts, lists and tuples (copied as lists are not: tuples stay tuples)
    whose leaves are immutable scalars (str, int, float, bool, None)."""
    return _copy(value)  # type: ignore[no-any-return]


def _copy(value: Any) -> Any:
    cls = type(value)
    if cls is dict:
        return {k: _copy(v) if type(v) in _CONTAINERS else v for k, v in value.items()}
    if cls is list:
        return [_copy(v) if type(v) in _CONTAINERS else v for v in value]
    if cls is tuple:
        return tuple(_copy(v) if type(v) in _CONTAINERS else v for v in value)
    return value


_CONTAINERS = frozenset((dict, list, tuple))
