"""Readers of what the product writes, written from the interface (docs/interface.md#runs, #http-endpoints,
#influxdb), not from the product: Prometheus text (and promtool's verdict on it), Go durations, RFC 3339 timestamps and
InfluxDB line protocol. Nothing here imports `kuberhealthy`, so black-box tests can use it.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from datetime import datetime

# --- Prometheus text -----------------------------------------------------------------------------------

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    samples = []
    for line in text.split("\n"):  # only \n ends a line: label values may hold U+2028 and the like
        if not line.strip() or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"unparseable metrics line: {line!r}"
        labels: dict[str, str] = {}
        rest = m.group(2) or ""
        pos = 0
        while pos < len(rest):
            lm = _LABEL.match(rest, pos)
            assert lm, f"unparseable labels in {line!r}"
            labels[lm.group(1)] = lm.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
            pos = lm.end()
        samples.append((m.group(1), labels, float(m.group(3))))
    return samples


def promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    """`promtool check metrics` on the text (promtool from PATH, else Debian's /usr/bin/promtool)."""
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    return subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                          timeout=60, check=False)


# --- Go durations ------------------------------------------------------------------------------------

_GO_DUR = re.compile(r"^(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(s: str) -> float:
    assert isinstance(s, str) and s, f"not a Go duration: {s!r}"
    if s == "0s":
        return 0.0
    rest, total = s, 0.0
    while rest:
        m = _GO_DUR.match(rest)
        assert m, f"not a Go duration: {s!r}"
        total += float(m.group(1)) * _UNITS[m.group(2)]
        rest = rest[m.end():]
    return total


_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def parse_rfc3339(s: str) -> datetime:
    """An RFC 3339 timestamp (as Kubernetes writes them, fractions allowed); ValueError when it is not one."""
    if not isinstance(s, str) or not _RFC3339.match(s):
        raise ValueError(f"not RFC3339: {s!r}")
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


# --- InfluxDB line protocol -------------------------------------------------------------------------

def split_line_protocol(line: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """measurement, tags, fields of one line (handles backslash escapes)."""
    parts: list[str] = []
    cur, esc, in_quotes = "", False, False
    for ch in line:
        if esc:
            cur += "\\" + ch
            esc = False
        elif ch == "\\":
            esc = True
        elif ch == '"':
            in_quotes = not in_quotes
            cur += ch
        elif ch == " " and not in_quotes:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    key, fields_s = parts[0], parts[1]

    def split(s: str, sep: str, keep_escapes: bool) -> list[str]:
        """Split on unescaped `sep`; `keep_escapes`: leave the backslashes in (unescape later)."""
        out, buf, e = [], "", False
        for ch in s:
            if e:
                buf += ("\\" + ch) if keep_escapes else ch
                e = False
            elif ch == "\\":
                e = True
            elif ch == sep:
                out.append(buf)
                buf = ""
            else:
                buf += ch
        out.append(buf)
        return out

    def raw_split(s: str, sep: str) -> list[str]:  # unescape only after splitting on unescaped separators
        return split(s, sep, keep_escapes=True)

    def unescape(s: str) -> str:
        return "".join(split(s, "\0", keep_escapes=False))

    key_parts = raw_split(key, ",")
    measurement = unescape(key_parts[0])
    tags = {}
    for kv in key_parts[1:]:
        k, v = raw_split(kv, "=")[0], "=".join(raw_split(kv, "=")[1:])
        tags[unescape(k)] = unescape(v)
    fields = {}
    for kv in raw_split(fields_s, ","):
        k, _, v = kv.partition("=")
        fields[unescape(k)] = v
    return measurement, tags, fields
