"""Go-style durations: parse `1m30s`/`500ms`/`1.5h` into seconds and format seconds as Go's Duration.String().

v2 stores RunDuration as Go formats it (e.g. "1.234567s", "2m3.5s"), and users write durations the Go
way in khchecks and config, so both directions must match Go exactly.
"""
from __future__ import annotations

import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")  # ASCII digits only, as Go


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string. Raises ValueError on anything Go's ParseDuration rejects."""
    s = text  # no stripping: Go's ParseDuration refuses surrounding space
    if not s:
        raise ValueError("empty duration")
    sign = 1.0
    if s[0] in "+-":
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(s):
        m = _PART.match(s, pos)
        if not m:
            raise ValueError(f"invalid duration {text!r}")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos == 0:
        raise ValueError(f"invalid duration {text!r}")
    return sign * total


def _trim(frac: str) -> str:
    frac = frac.rstrip("0")
    return "." + frac if frac else ""


def format_duration(seconds: float) -> str:
    """Go's time.Duration.String() for a number of seconds (nanosecond precision)."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    neg = ns < 0
    ns = abs(ns)
    if ns < 1_000_000_000:
        if ns < 1_000:
            out = f"{ns}ns"
        elif ns < 1_000_000:
            out = f"{ns // 1_000}{_trim(f'{ns % 1_000:03d}')}µs"
        else:
            out = f"{ns // 1_000_000}{_trim(f'{ns % 1_000_000:06d}')}ms"
    else:
        whole_s, frac_ns = divmod(ns, 1_000_000_000)
        hours, rem = divmod(whole_s, 3600)
        minutes, secs = divmod(rem, 60)
        out = f"{secs}{_trim(f'{frac_ns:09d}')}s"
        if hours or minutes:
            out = f"{minutes}m" + out
        if hours:
            out = f"{hours}h" + out
    return "-" + out if neg else out
