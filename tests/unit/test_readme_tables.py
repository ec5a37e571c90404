"""README's tables name exactly what the code has, so the user's document cannot drift from it.

The truth comes from the code: the config keys from kuberhealthy/base/config.py, the metric families
from what `/metrics` of a web app built as the daemon builds it serves, the chart values from
helm/kuberhealthy/values.yaml, the flags from the command's own argparse parsers. The README side is
read from its tables, found by section heading. A key cell names one or more keys in backticks; one
that starts with `.` is relative to the first key's parent (`image.registry` / `.tag` is
`image.tag`). `check.<check>.x` stands for the same value of every bundled check, whose names are the
"Bundled checks" table. The same for the `kubectl get` columns (the CRDs' additionalPrinterColumns), the
daemon's RBAC (the rules `helm template` binds to its ServiceAccount) and the env vars of checker pods
(README's and docs/interface.md's tables). Also here: `/metrics` exports no `_created` series, and the
README's links to its own sections (and those of the docs into it) resolve.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kuberhealthy import cli
from kuberhealthy.base import config
from kuberhealthy.daemon.httpworker import PollingWorker
from kuberhealthy.records import checkpod
from kuberhealthy.web import create_app
from testbed.fakes import FakeServices
from testbed.tools.helm import Helm

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
VALUES = ROOT / "helm" / "kuberhealthy" / "values.yaml"
# The config file's nested sections, read into these dataclasses (their fields, in camelCase, are the keys).
NESTED_CONFIG = {"leaderElection": config.LeaderElection, "promMetricsConfig": config.PromMetrics,
                 "statusPage": config.StatusPage}
# Chart values that are maps free by nature: one row, whatever keys they hold.
FREE_MAPS = {"resources", "extraEnvs", "env", "nodeSelector", "affinity", "podAnnotations", "podLabels",
             "annotations", "additionalLabels", "labels"}


# --- the README side ---------------------------------------------------------------------------------

def section(heading: str, text: str | None = None) -> str:
    """The text under a heading (any level) up to the next heading of the same or a higher level."""
    lines = (README.read_text(encoding="utf-8") if text is None else text).splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"(#+) (.*)$", line)
        if m and m.group(2).strip() == heading:
            level = len(m.group(1))
            body = []
            for rest in lines[i + 1:]:
                h = re.match(r"(#+) ", rest)
                if h and len(h.group(1)) <= level:
                    break
                body.append(rest)
            return "\n".join(body)
    pytest.fail(f"README.md has no section {heading!r}")


def cells(row: str) -> list[str]:
    """A table row's cells; a `|` inside backticks belongs to its cell."""
    out, cur, code = [], "", False
    for ch in row.strip().strip("|"):
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return out


def table(text: str, first_header: str) -> list[list[str]]:
    """The body rows of the table whose first header cell is `first_header`."""
    blocks: list[list[list[str]]] = [[]]
    for line in text.splitlines():
        if line.startswith("|"):
            blocks[-1].append(cells(line))
        elif blocks[-1]:
            blocks.append([])
    for rows in blocks:
        if len(rows) > 1 and rows[0][0] == first_header and set(rows[1][0]) <= set("-:"):
            return rows[2:]
    pytest.fail(f"no table with the header {first_header!r} in:\n{text[:300]}")


def keys(cell: str) -> list[str]:
    """The keys a key cell names; `.x` is relative to the first key's parent."""
    names = re.findall(r"`([^`]+)`", cell)
    out: list[str] = []
    for name in names:
        if name.startswith(".") and out:
            out.append(out[0].rpartition(".")[0] + name)
        else:
            out.append(name)
    return out


def column_keys(heading: str, first_header: str) -> set[str]:
    return {key for row in table(section(heading), first_header) for key in keys(row[0])}


def differences(truth: set[str], readme: set[str]) -> str:
    return (f"missing from the README: {sorted(truth - readme)}; "
            f"named by the README but not in the code: {sorted(readme - truth)}")


# --- the code side -----------------------------------------------------------------------------------

def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def config_keys() -> set[str]:
    out = {key for key in config._KNOWN_KEYS if key not in NESTED_CONFIG}
    for key, cls in NESTED_CONFIG.items():
        out |= {f"{key}.{camel(f.name)}" for f in dataclasses.fields(cls)}
    return out


def metrics_text(services: FakeServices, accept: str = "") -> str:
    app = create_app(services, caller_wait=0.0, server_collectors=PollingWorker.metrics.collectors())
    resp = app.test_client().get("/metrics", headers={"Accept": accept} if accept else {})
    assert resp.status_code == 200
    return resp.get_data(as_text=True)


def metric_families(services: FakeServices) -> set[str]:
    """Names as queries use them: a counter's with `_total`."""
    return {fam.name + ("_total" if fam.type == "counter" else "")
            for fam in text_string_to_metric_families(metrics_text(services))}


def chart_values() -> set[str]:
    values = yaml.safe_load(VALUES.read_text(encoding="utf-8"))
    out: set[str] = set()

    def walk(node: dict[str, Any], path: list[str]) -> None:
        for key, value in node.items():
            here = [*path, str(key)]
            if isinstance(value, dict) and value and key not in FREE_MAPS:
                walk(value, here)
            else:
                out.add(".".join(["check", "<check>", *here[2:]] if here[0] == "check" else here))

    walk(values, [])
    return out


class _Parsed(Exception):
    pass


def cli_parsers(monkeypatch: pytest.MonkeyPatch) -> Iterator[argparse.ArgumentParser]:
    """Every parser the command builds: each `parse_*` function of cli.py is called and its parser caught
    as it parses; subparsers, should there be any, are walked."""
    caught: list[argparse.ArgumentParser] = []

    def catch(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> NoReturn:
        caught.append(self)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", catch)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", catch)
    for name, fn in sorted(vars(cli).items()):
        if name.startswith("parse") and callable(fn) and getattr(fn, "__module__", "") == cli.__name__:
            with pytest.raises(_Parsed):
                fn([])
    seen: set[int] = set()
    while caught:
        parser = caught.pop()
        if id(parser) in seen:
            continue
        seen.add(id(parser))
        yield parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                caught.extend(action.choices.values())


# --- the tests ---------------------------------------------------------------------------------------

def test_the_config_table_names_every_config_key_and_no_other() -> None:
    readme = column_keys("Configure", "key")
    assert readme == config_keys(), differences(config_keys(), readme)


def test_the_nested_config_sections_are_the_ones_this_test_knows() -> None:
    nested = {f.type for f in dataclasses.fields(config.Config)
              if f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory)}
    assert nested == {cls.__name__ for cls in NESTED_CONFIG.values()}
    assert set(NESTED_CONFIG) <= config._KNOWN_KEYS


def test_the_metrics_table_names_every_family_metrics_exports_and_no_other(fake_services: FakeServices) -> None:
    truth = metric_families(fake_services)
    assert len(truth) > 10  # the app was built with every collector
    readme = {key for key in column_keys("Metrics", "metric") if key.startswith("kuberhealthy_")}
    assert readme == truth, differences(truth, readme)


def test_the_chart_table_names_every_value_of_values_yaml_and_no_other() -> None:
    readme = column_keys("Chart values", "value")
    assert readme == chart_values(), differences(chart_values(), readme)


def test_the_bundled_checks_table_names_every_check_of_the_chart() -> None:
    values = yaml.safe_load(VALUES.read_text(encoding="utf-8"))
    readme = column_keys("Bundled checks", "check")
    assert readme == set(values["check"]), differences(set(values["check"]), readme)


def test_the_flag_table_names_every_flag_of_every_command_and_no_other(monkeypatch: pytest.MonkeyPatch) -> None:
    truth = {(p.prog, opt) for p in cli_parsers(monkeypatch) for a in p._actions for opt in a.option_strings}
    assert {prog for prog, _ in truth} >= {"kuberhealthy", f"kuberhealthy {cli.STOP_RELEASE}"}
    readme = set()
    for row in table(section("Command line"), "command"):
        commands, flags = keys(row[0]), [k.split()[0] for k in keys(row[1]) if k.startswith("-")]
        assert len(commands) == 1 and flags, row
        readme |= {(commands[0], flag) for flag in flags}
    assert readme == truth, differences({" ".join(t) for t in truth}, {" ".join(r) for r in readme})


def test_metrics_exports_no_created_series(fake_services: FakeServices) -> None:
    # The labelled counters start with their children, so each would have a `_created` sample.
    for accept in ("", "application/openmetrics-text; version=1.0.0"):
        text = metrics_text(fake_services, accept)
        assert "kuberhealthy_http_connections_closed_total" in text
        assert "_created" not in text, [line for line in text.splitlines() if "_created" in line][:3]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_every_link_to_a_readme_section_finds_its_heading() -> None:
    anchors = {slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", README.read_text(encoding="utf-8"), re.M)}
    links = {(README.name, a) for a in re.findall(r"\]\(#([^)]+)\)", README.read_text(encoding="utf-8"))}
    for doc in (ROOT / "docs").glob("*.md"):
        links |= {(doc.name, a) for a in re.findall(r"\]\(\.\./README\.md#([^)]+)\)", doc.read_text(encoding="utf-8"))}
    assert links, "no links found"
    assert {link for link in links if link[1] not in anchors} == set()


def test_the_columns_table_shows_every_printer_column_of_the_crds() -> None:
    rows = {keys(row[0])[0]: row[1] for row in table(section("History"), "resource")}
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's where built: the same objects, 7 times faster
    crds = [yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
            for path in sorted((ROOT / "helm" / "kuberhealthy" / "crds").glob("*.yaml"))]
    assert set(rows) == {crd["spec"]["names"]["plural"] for crd in crds}
    for crd in crds:
        plural, (version,) = crd["spec"]["names"]["plural"], crd["spec"]["versions"]
        columns = version.get("additionalPrinterColumns") or []
        cell = rows[plural]
        assert keys(cell) == [c["name"] for c in columns], plural
        wide = {c["name"] for c in columns if c.get("priority", 0) > 0}
        assert {name for name in keys(cell) if f"`{name}` (wide" in cell} == wide, plural


VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


def test_the_rbac_table_names_every_rule_of_the_daemons_service_account(helm: Helm) -> None:
    objs = helm.template()
    (deployment,) = [o for o in objs if o["kind"] == "Deployment"]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    roles = {(b["roleRef"]["kind"], b["roleRef"]["name"]) for b in objs
             if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
             and any(s.get("kind") == "ServiceAccount" and s.get("name") == account for s in b.get("subjects") or [])}
    truth = {(resource, verb) for o in objs if (o["kind"], o["metadata"]["name"]) in roles
             for rule in o.get("rules") or [] for resource in rule["resources"] for verb in rule["verbs"]}
    assert truth and "*" not in {v for _, v in truth} | {r for r, _ in truth}
    readme = {(resource, verb) for row in table(section("Helm"), "API resource")
              for resource in keys(row[0]) for verb in re.findall(rf"\b({'|'.join(VERBS)})\b", row[1])}
    assert readme == truth, differences({" ".join(t) for t in truth}, {" ".join(r) for r in readme})


def test_the_checker_env_tables_name_every_variable_a_checker_pod_is_given() -> None:
    readme = column_keys("Checks", "env var")
    assert readme == set(checkpod.INJECTED_ENV), differences(set(checkpod.INJECTED_ENV), readme)
    interface = (ROOT / "docs" / "interface.md").read_text(encoding="utf-8")
    documented = {k for row in table(section("Checker environment", interface), "variable") for k in keys(row[0])}
    assert documented == set(checkpod.INJECTED_ENV), differences(set(checkpod.INJECTED_ENV), documented)
