"""The `config` part of the chart's values.schema.json, generated from kuberhealthy/base/config.py.

    python hack/chart_schema.py           # rewrite properties.config in helm/kuberhealthy/values.schema.json
    python hack/chart_schema.py --check   # exit 1 (and say which keys) when the file differs

`config` is copied as-is into the daemon's config file, so its keys are exactly the daemon's: the
`_KNOWN_KEYS` of config.py, in their order there. Each key's type comes from the parser config.py calls
for it (`_bool`, `_str`, `_int`, `_duration`, `_choice`, `_labels`, `_container_names`, `_address`, ...),
read from config.py's syntax tree, so a new key or a new parser shows up here without a list to keep in
step; a key with no recognisable parser stops the script. Nested mappings (leaderElection, promMetricsConfig,
healthCheckDefaults) are the variables assigned `_section(raw, "<key>", ...)` (or `raw.get("<key>")`).
A key read with `_str` and then tested with `not in CONSTANT` (logLevel) gets CONSTANT as its values, plus
the keys of a module-level dict it is looked up in first (V3_LOG_LEVELS: v3's spellings). The chart's own
constraints sit in CHART below. tests/integration/test_helm_chart.py fails when the schema and this
script's output differ. Everything else in the schema is written by hand (checkReaper.logLevel is a $ref
to config's logLevel, so it follows too).
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CONFIG_PY = REPO / "kuberhealthy" / "base" / "config.py"
SCHEMA = REPO / "helm" / "kuberhealthy" / "values.schema.json"

# Go durations as durations.py parses them (1m30s, 500ms, .5s, 1.5h, µs/us); positive keys refuse a sign and 0.
_PARTS = r"((\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h))+"
DURATION = {"type": "string", "pattern": f"^\\+?{_PARTS}$",
            "description": "A Go duration string: 500ms, 90s, 1m30s, 1h"}
DURATION_OR_ZERO = {"type": "string", "pattern": f"^[-+]?(0|{_PARTS})$",
                    "description": "A Go duration string: 500ms, 90s, 1m30s, 1h; 0 = none"}

# host:port, :port or [v6]:port, the port 0-65535 (parse_listen_address).
_PORT = "0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
ADDRESS = {"type": "string", "pattern": f"^(\\[[^\\]]*\\]|[^\\[\\]]*):{_PORT}$",
           "description": "host:port, :port or [v6]:port"}

# Parsers that read a nested mapping: the keys parsed from the variable they are assigned to are its keys.
SECTION_PARSERS = {"_section"}

# What each parser of config.py accepts, as JSON schema.
PARSERS: dict[str, dict[str, Any]] = {
    "_bool": {"type": "boolean"},
    "_str": {"type": "string"},
    "_int": {"type": "integer", "minimum": 0},
    "_positive_int": {"type": "integer", "minimum": 1},
    "_rate": {"type": "number", "exclusiveMinimum": 0},
    "_origins": {"type": ["array", "null"], "items": {"type": "string", "pattern": "^https?://[^/?#@]+$"}},
    "_address": ADDRESS,
}

# The chart's own rules on top of config.py's: what the chart fixes, and what config.py checks in code.
CHART: dict[str, dict[str, Any]] = {
    "listenAddress": {"enum": [":8080"], "description": "Fixed by the chart: the container port"},
    "listenAddressTLS": {"enum": [":8443"], "description": "Fixed by the chart: the https container port"},
    "externalCheckReportingURL": {"pattern": "^(|https?://.+)$"},
}


def _parser_of(call: ast.Call) -> tuple[str, str, str] | None:
    """(parser, raw variable, key) of a call like `_int(raw, "historyLength", _DEFAULT.history_length)`."""
    if not isinstance(call.func, ast.Name) or not call.func.id.startswith("_") or len(call.args) < 2:
        return None
    var, key = call.args[0], call.args[1]
    if isinstance(var, ast.Name) and isinstance(key, ast.Constant) and isinstance(key.value, str):
        return call.func.id, var.id, key.value
    return None


def _known_keys(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_KNOWN_KEYS"
                                                  for t in node.targets) and isinstance(node.value, ast.Set)):
            return [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    raise SystemExit(f"{CONFIG_PY}: no _KNOWN_KEYS set literal")


def _string_literals(tree: ast.Module, of_dicts: bool = False) -> dict[str, list[str]]:
    """Module-level tuples of strings (LOG_LEVELS, REPORT_AUTHS, ...): their strings; with `of_dicts`,
    module-level dicts with string keys (V3_LOG_LEVELS): their keys."""
    out: dict[str, list[str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        value = node.value
        items = (value.keys if isinstance(value, ast.Dict) else None) if of_dicts else (
            value.elts if isinstance(value, ast.Tuple) else None)
        if items is None:
            continue
        strings = [e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if len(strings) == len(items):
            out.update((t.id, strings) for t in node.targets if isinstance(t, ast.Name))
    return out


def _regexes(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = re.compile(r"...")` (LABEL_NAME): their patterns."""
    out = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "compile"
                and node.value.args and isinstance(node.value.args[0], ast.Constant)
                and isinstance(node.value.args[0].value, str)):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = node.value.args[0].value
    return out


def _fullmatched(tree: ast.Module, function: str, regexes: dict[str, str]) -> str:
    """The pattern of the module-level regex that `function` calls `.fullmatch` of (one only)."""
    found = {node.func.value.id for func in tree.body if isinstance(func, ast.FunctionDef) and func.name == function
             for node in ast.walk(func)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "fullmatch"
             and isinstance(node.func.value, ast.Name) and node.func.value.id in regexes}
    if len(found) != 1:
        raise SystemExit(f"{CONFIG_PY}: {function} should fullmatch exactly one module-level regex, found {found}")
    return regexes[found.pop()]


def _names_schema(name: str, what: str) -> dict[str, Any]:
    """_labels, _container_names: a list of names, or one string of them separated by commas (blanks dropped)."""
    return {"type": ["array", "string", "null"], "items": {"type": "string", "pattern": f"^{name}$"},
            "pattern": f"^ *({name})? *(, *({name})? *)*$",
            "description": f"{what}: a list, or one string of them separated by commas"}


NAME_LISTS = {"_labels": "Label names", "_container_names": "Container names"}


def _schema_for(call: ast.Call, parser: str, constants: dict[str, list[str]], tree: ast.Module) -> dict[str, Any]:
    if parser == "_duration":
        positive = next((kw.value.value for kw in call.keywords
                         if kw.arg == "positive" and isinstance(kw.value, ast.Constant)), True)
        return dict(DURATION if positive else DURATION_OR_ZERO)
    if parser == "_choice":
        choices = call.args[2]
        if not isinstance(choices, ast.Name) or choices.id not in constants:
            raise SystemExit(f"{CONFIG_PY}:{call.lineno}: _choice without a module-level tuple of choices")
        return {"type": "string", "enum": constants[choices.id]}
    if parser in NAME_LISTS:
        return _names_schema(_fullmatched(tree, parser, _regexes(tree)), NAME_LISTS[parser])
    if parser not in PARSERS:
        raise SystemExit(f"{CONFIG_PY}:{call.lineno}: no JSON schema known for parser {parser}")
    return dict(PARSERS[parser])


def _enums_checked_in_code(func: ast.FunctionDef, constants: dict[str, list[str]],
                           dicts: dict[str, list[str]]) -> dict[str, list[str]]:
    """Keys read with _str into a variable later tested with `not in CONSTANT` (logLevel): that constant,
    plus the keys of a dict the variable is looked up in on the way (`V3_LOG_LEVELS.get(given, given)`:
    v3's spellings) and the strings it is compared with (`== "warn"`)."""
    read: dict[str, str] = {}  # variable -> key
    aliases: dict[str, list[str]] = {}
    assigns = [(node.targets[0].id, node.value) for node in ast.walk(func)
               if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)]
    for var, value in assigns:
        for sub in ast.walk(value):
            if isinstance(sub, ast.Call) and (p := _parser_of(sub)) and p[0] == "_str":
                read[var] = p[2]
    changed = True
    while changed:  # level = V3_LOG_LEVELS.get(given, given): level holds the key too
        changed = False
        for var, value in assigns:
            if (var not in read and isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                    and value.func.attr == "get" and isinstance(value.func.value, ast.Name)
                    and value.func.value.id in dicts and value.args and isinstance(value.args[0], ast.Name)
                    and value.args[0].id in read):
                read[var] = read[value.args[0].id]
                aliases.setdefault(read[var], []).extend(dicts[value.func.value.id])
                changed = True
    out: dict[str, list[str]] = {}
    for node in ast.walk(func):
        if not (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id in read):
            continue
        key = read[node.left.id]
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, ast.NotIn) and isinstance(right, ast.Name) and right.id in constants:
                out[key] = list(constants[right.id])
            elif isinstance(op, ast.Eq) and isinstance(right, ast.Constant) and isinstance(right.value, str):
                aliases.setdefault(key, []).append(right.value)
    return {key: values + list(dict.fromkeys(a for a in aliases.get(key, []) if a not in values))
            for key, values in out.items()}


def _sections(func: ast.FunctionDef) -> dict[str, str]:
    """Variables holding a nested mapping -> its key: `le_raw = _section(raw, "leaderElection", ...)`,
    `hc_raw, p = _section(raw, "healthCheckDefaults", ...), "..."` or `x = raw.get("key") or {}`."""
    out = {}
    for node in ast.walk(func):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        pairs = (list(zip(target.elts, value.elts, strict=False))
                 if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) else [(target, value)])
        for name, expr in pairs:
            if not isinstance(name, ast.Name):
                continue
            for sub in ast.walk(expr):
                if isinstance(sub, ast.Call) and (p := _parser_of(sub)) and p[0] in SECTION_PARSERS and p[1] == "raw":
                    out[name.id] = p[2]
                elif (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "get"
                      and isinstance(sub.func.value, ast.Name) and sub.func.value.id == "raw"
                      and sub.args and isinstance(sub.args[0], ast.Constant)):
                    out[name.id] = str(sub.args[0].value)
    return out


def config_schema(source: str | None = None) -> dict[str, Any]:
    """The JSON schema of the chart's `config` value."""
    tree = ast.parse(source if source is not None else CONFIG_PY.read_text(encoding="utf-8"))
    constants = _string_literals(tree)
    dicts = _string_literals(tree, of_dicts=True)
    nested_vars: dict[str, str] = {"raw": ""}  # variable -> the key it holds ("" = the document)
    fields: dict[str, dict[str, dict[str, Any]]] = {}  # parent key ("" = top) -> key -> schema
    enums: dict[str, list[str]] = {}
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    for func in functions:
        nested_vars.update(_sections(func))
        enums.update(_enums_checked_in_code(func, constants, dicts))
    for func in functions:
        for node in ast.walk(func):
            if (isinstance(node, ast.Call) and (found := _parser_of(node)) and found[1] in nested_vars
                    and found[0] not in SECTION_PARSERS):
                parser, var, key = found
                fields.setdefault(nested_vars[var], {}).setdefault(key, _schema_for(node, parser, constants, tree))
    for key, values in enums.items():
        fields[""][key]["enum"] = values

    def block(parent: str, keys: list[str]) -> dict[str, Any]:
        props: dict[str, Any] = {}
        for key in keys:
            if key in fields and key != "":
                props[key] = block(key, list(fields[key]))
            elif key in fields.get(parent, {}):
                props[key] = fields[parent][key] | CHART.get(key, {})
            else:
                raise SystemExit(f"{CONFIG_PY}: no parser call found for config key {key!r}")
        kind: Any = ["object", "null"] if parent == "" else "object"
        return {"type": kind, "additionalProperties": False, "properties": props}

    schema = block("", _known_keys(tree))
    schema["description"] = "Keys of the daemon's config file (kuberhealthy/base/config.py), copied as-is"
    return schema


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="only compare; exit 1 when values.schema.json differs")
    args = p.parse_args(argv)
    values_schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    wanted = config_schema()
    if args.check:
        if values_schema["properties"].get("config") != wanted:
            have = set((values_schema["properties"].get("config") or {}).get("properties", {}))
            want = set(wanted["properties"])
            print(f"{SCHEMA}: config differs from config.py (run python hack/chart_schema.py); "
                  f"missing {sorted(want - have)}, extra {sorted(have - want)}", file=sys.stderr)
            return 1
        return 0
    values_schema["properties"]["config"] = wanted
    SCHEMA.write_text(render(values_schema), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
