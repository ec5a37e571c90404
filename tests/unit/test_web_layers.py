"""Inside kuberhealthy/web, imports point one way: down, or within a room. Checked from the source (AST;
nothing is imported), as test_layout.py does for the test bed.

The rule. Every module of kuberhealthy/web has a rank:
  * the app: `kuberhealthy.web` itself (web/__init__.py, create_app), which builds every part and
    registers every blueprint; it may import any module of web/;
  * a room: a subpackage of web/ (web/report/, web/status/, web/dashboard/), or a handler module
    directly in web/ (one that makes a flask Blueprint at its top level: api.py, health.py, openapi.py);
  * the ground: every other module directly in web/ (context, parts, answers, gojson, ratelimit,
    addresses, entries, origin): what the rooms share.
An import from module A to module B of web/ is allowed when
  * A is the app; or
  * B is ground (the ground lies below every room; ground modules may import each other); or
  * A and B are in the same room and B lies in A's folder or below it (a module's folder is its
    package; a package's `__init__` is the folder itself), so never the package above.
Anything else is upward (ground -> room, anything -> the app, a module -> a package above its own
folder) or sideways (one room -> another room), and is refused: a helper two rooms use lives in the
ground, below both, and what a room needs from another is handed in by create_app.
"""
from __future__ import annotations

import ast
from pathlib import Path

from testbed.modgraph import imports, modules
from testbed.paths import REPO

APP = "kuberhealthy.web"
WEB = REPO / "kuberhealthy" / "web"


def _makes_blueprint(path: Path) -> bool:
    """Whether the module assigns `Blueprint(...)` at its top level (a handler module)."""
    for node in ast.parse(path.read_text()).body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "Blueprint":
            return True
    return False


def _folder(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _room(name: str, mods: dict[str, Path]) -> str | None:
    """The room a module is in (`kuberhealthy.web.<first part>`), None for the app and the ground."""
    if name == APP:
        return None
    top = ".".join(name.split(".")[:3])
    top_path = mods[top]
    if top_path.name == "__init__.py" or _makes_blueprint(top_path):
        return top
    return None


def violations(web: Path) -> list[str]:
    """Every import inside `web` (a kuberhealthy/web directory) that breaks the module docstring's rule."""
    mods = {name: path for name, path in modules(web.parent).items() if name == APP or name.startswith(APP + ".")}
    found = []
    for a, path in mods.items():
        if a == APP:
            continue
        room_a = _room(a, mods)
        for b in imports(a, path, set(mods)):
            room_b = _room(b, mods)
            if b == APP:
                found.append(f"{a} -> {b}: upward (the app)")
            elif room_b is None:
                continue  # into the ground
            elif room_a is None:
                found.append(f"{a} -> {b}: upward (the ground into a room)")
            elif room_a != room_b:
                found.append(f"{a} -> {b}: sideways (room {room_a} into room {room_b})")
            else:
                folder = _folder(a, path)
                if not (b == folder or b.startswith(folder + ".")):
                    found.append(f"{a} -> {b}: upward (a package above the module's folder)")
    return sorted(found)


def test_imports_inside_web_point_down_or_stay_within_a_room() -> None:
    assert violations(WEB) == []


def test_the_rule_sees_the_rooms_the_ground_and_the_app() -> None:
    mods = {name: path for name, path in modules(WEB.parent).items() if name.startswith(APP)}
    rooms = {_room(name, mods) for name in mods} - {None}
    assert {f"{APP}.report", f"{APP}.status", f"{APP}.dashboard", f"{APP}.api", f"{APP}.health"} <= rooms
    assert all(_room(f"{APP}.{m}", mods) is None for m in ("context", "parts", "answers", "gojson", "entries"))


def test_the_rule_refuses_an_upward_and_a_sideways_import(tmp_path: Path) -> None:
    web = tmp_path / "kuberhealthy" / "web"
    (web / "report").mkdir(parents=True)
    (web / "status").mkdir()
    files = {
        "__init__.py": "from kuberhealthy.web.report import routes\n",
        "context.py": "from kuberhealthy.web.report.triage import Triage\n",  # ground -> room
        "report/__init__.py": "",
        "report/routes.py": "from kuberhealthy.web import context\nfrom kuberhealthy.web.status import gojson\n"
                            "from kuberhealthy.web.report import triage\n",
        "report/triage.py": "from kuberhealthy.web import create_app\n",  # -> the app
        "status/__init__.py": "",
        "status/gojson.py": "",
    }
    for name, text in files.items():
        (web / name).write_text(text)
    assert violations(web) == [
        "kuberhealthy.web.context -> kuberhealthy.web.report.triage: upward (the ground into a room)",
        "kuberhealthy.web.report.routes -> kuberhealthy.web.status.gojson: sideways (room kuberhealthy.web.report "
        "into room kuberhealthy.web.status)",
        "kuberhealthy.web.report.triage -> kuberhealthy.web: upward (the app)",
    ]


def test_the_report_route_asks_only_the_admission_and_only_the_caller_rules_use_the_pod_finder() -> None:
    mods = modules(WEB.parent)
    users = {name: set(imports(name, path, set(mods))) for name, path in mods.items() if name.startswith(APP)}
    route = users[f"{APP}.report.routes"]
    assert f"{APP}.report.admission" in route
    assert not route & {f"{APP}.report.{m}" for m in ("caller", "triage", "finder", "naming")}
    assert sorted(m for m, deps in users.items() if f"{APP}.report.finder" in deps) == [f"{APP}.report.caller"]
