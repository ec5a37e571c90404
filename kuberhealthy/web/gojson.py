"""Go's encoding/json, byte for byte, for what v2 served from Go and we now serve from Python.

v2's status page (web/status/page.py) and its report endpoint's checks (web/report/body.py) behave as Go's
encoding/json and strings packages do, and clients depend on it: `<`, `>`, `&` and U+2028/U+2029 are
escaped as `\\u....`, control characters as `\\u00xx`, invalid UTF-8 (lone surrogates here) becomes
U+FFFD, "blank" is Go's strings.TrimSpace leaving nothing (Python's str.isspace disagrees on
\\x1c-\\x1f), and a `metav1.Time` re-marshals as UTC whole seconds, or `null` for the zero time.

go_time is not the package's RFC 3339 parser (base/times.py): Go decodes a metav1.Time strictly
(`2006-01-02T15:04:05Z07:00`, fraction optional, nothing else), so this one does too; it only shares
the output form. Nothing here knows khstates or HTTP.
"""
from __future__ import annotations

import datetime as dt
import json
import re

from kuberhealthy.base.times import format_datetime

# Go's unicode.IsSpace, which strings.TrimSpace uses (Python's str.isspace also counts \x1c-\x1f).
GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
           "\u2028\u2029\u202f\u205f\u3000"

_SURROGATE = re.compile("[\ud800-\udfff]")
_NEEDS_SLOW_PATH = re.compile("[\b\f<>&\u2028\u2029\ud800-\udfff]")
_RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_HEX = "0123456789abcdef"


def is_blank(text: str) -> bool:
    """True when Go's strings.TrimSpace would leave nothing."""
    return not text.strip(GO_SPACE)


def valid_text(text: str) -> str:
    """Replace lone surrogates (invalid UTF-8 on the wire) with U+FFFD, as Go's decoder does."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def go_json_string(text: str) -> str:
    """A JSON string literal exactly as Go's encoding/json writes it (HTML-safe escaping on)."""
    if not _NEEDS_SLOW_PATH.search(text):
        return json.dumps(text, ensure_ascii=False)
    out = ['"']
    for c in text:
        o = ord(c)
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif o < 0x20 or c in "<>&":
            out.append("\\u00" + _HEX[o >> 4] + _HEX[o & 0xF])
        elif c in "\u2028\u2029":
            out.append(f"\\u{o:04x}")
        elif 0xD800 <= o <= 0xDFFF:
            out.append("\\ufffd")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def go_time(value: object) -> str | None:
    """`LastRun` as metav1.Time re-marshals it: RFC3339 in UTC, whole seconds; None (omitted) if unset.

    Go fails to decode a khstate whose LastRun is not RFC3339; we omit the field instead.
    The zero time marshals as the literal `null`, returned here as "null".
    """
    if not isinstance(value, str):
        return None
    m = _RFC3339.match(value)
    if not m:
        return None
    try:
        offset = dt.timezone.utc
        zone = m.group(8)
        if zone != "Z":
            sign = -1 if zone[0] == "-" else 1
            offset = dt.timezone(sign * dt.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
        when = dt.datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)),
                           int(m.group(5)), int(m.group(6)), tzinfo=offset).astimezone(dt.timezone.utc)
    except (ValueError, OverflowError):
        return None
    if when == dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc):
        return "null"
    return '"' + format_datetime(when) + '"'
