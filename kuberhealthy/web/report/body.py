"""Decode and check a checker's report body the way v2 (Go's encoding/json into status.Report) did.

Existing checker images send `{"OK": bool, "Errors": [str]}` with whatever key case their author chose;
Go's decoder matched struct fields case-insensitively, let the last duplicate win, ignored unknown
keys, treated `null` as "leave unset" and refused wrong types. Reproducing that keeps old images
working. The checks after decoding are v2's (OK false needs at least one error, no blank error) plus
ours: OK true must come without errors. Pure functions: no HTTP, no cache.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kuberhealthy.web.gojson import is_blank, valid_text

MAX_BODY = 1 << 20  # bytes; a larger report is refused with 413

NO_ERRORS = "Client attempted to report OK false without any error strings"
BLANK_ERROR = "Client attempted to report a blank error string"
OK_WITH_ERRORS = "Client attempted to report OK true with error strings"


class BadReport(ValueError):
    """The body is not an acceptable report; str(e) is the one-line reason for the 400."""


@dataclass(frozen=True)
class Report:
    ok: bool
    errors: tuple[str, ...]


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its key/value pairs in order, so duplicates and key case can be judged like Go."""


def _no_constants(name: str) -> Any:
    raise ValueError(f"invalid character {name[:1]!r} looking for beginning of value")


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, _Pairs):
        return "object"
    if isinstance(value, list):
        return "array"
    return "null"


def _unmarshal_error(value: Any, field: str, go_type: str) -> BadReport:
    return BadReport(f"Failed to unmarshal state json: json: cannot unmarshal {_type_name(value)} "
                     f"into Go struct field Report.{field} of type {go_type}")


def decode(body: bytes) -> tuple[bool, list[str] | None]:
    """(OK, Errors) as Go's json.Unmarshal into status.Report leaves them; raises BadReport."""
    try:
        doc = json.loads(body.decode("utf-8", "replace"), object_pairs_hook=_Pairs,
                         parse_constant=_no_constants)
    except (ValueError, RecursionError) as e:
        raise BadReport(f"Failed to unmarshal state json: {e}") from None
    ok, errors = False, None
    if doc is None:  # a JSON null leaves the struct as it was
        return ok, errors
    if not isinstance(doc, _Pairs):
        raise BadReport(f"Failed to unmarshal state json: json: cannot unmarshal {_type_name(doc)} "
                        "into Go value of type status.Report")
    problem: BadReport | None = None  # Go keeps decoding after a type error and reports the first
    for key, value in doc:
        field = key.casefold()  # Go's field matching folds case (even the Kelvin sign and long s)
        if field == "ok":
            if isinstance(value, bool):
                ok = value
            elif value is not None:
                problem = problem or _unmarshal_error(value, "OK", "bool")
        elif field == "errors":
            if value is None:
                errors = None
            elif isinstance(value, list) and not isinstance(value, _Pairs):
                items: list[str] = []
                for item in value:
                    if isinstance(item, str):
                        items.append(valid_text(item))
                    elif item is None:
                        items.append("")
                    else:
                        problem = problem or _unmarshal_error(item, "Errors", "string")
                errors = items
            else:
                problem = problem or _unmarshal_error(value, "Errors", "[]string")
    if problem is not None:
        raise problem
    return ok, errors


def parse_report(body: bytes) -> Report:
    """A report that may be stored; raises BadReport with v2's reason where v2 had one."""
    ok, errors = decode(body)
    errs = tuple(errors or ())
    if ok:
        if errs:
            raise BadReport(OK_WITH_ERRORS)
    else:
        if not errs:
            raise BadReport(NO_ERRORS)
        if any(is_blank(e) for e in errs):
            raise BadReport(BLANK_ERROR)
    return Report(ok=ok, errors=errs)
