"""The plain-text answers every handler gives: one line of text, v2's `?namespace=` list and `?kind=`.

Part of web/'s ground (the modules every room may import and that import no room): the report
endpoint, the status page, the JSON API, the dashboard and the probes all answer refusals this way.
"""
from __future__ import annotations

from flask import Response


def requested_namespaces(raw: str) -> list[str]:
    """`?namespace=a,b`: empty items (`?namespace=,`) are ignored, as in v2."""
    return [n for n in raw.split(",") if n]


def requested_kinds(raw: str) -> tuple[str, ...] | None:
    """`?kind=check,healthcheck`: the JSON API's entry kinds asked for; None (every kind) when none is."""
    return tuple(k for k in (p.strip() for p in raw.split(",")) if k) or None


def one_line(text: str, limit: int = 500) -> str:
    """A reason fit for a one-line plain-text answer: no line breaks or control characters, bounded."""
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return clean if len(clean) <= limit else clean[: limit - 3] + "..."


def plain(status: int, reason: str = "", headers: dict[str, str] | None = None) -> Response:
    """A plain-text answer; a non-empty reason becomes exactly one line."""
    body = one_line(reason) + "\n" if reason else ""
    return Response(body, status=status, content_type="text/plain; charset=utf-8", headers=headers)
