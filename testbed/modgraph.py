"""Print the import graph of the kuberhealthy package (AST only; nothing is imported).

    python -m testbed.modgraph [PACKAGE_DIR]      one line per module: its kuberhealthy imports
    python -m testbed.modgraph --dot [DIR]        Graphviz dot
Lazy imports (inside functions) are marked with `~`. Used to compare the graph before and after a change of layout.
"""
from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def parse(path: Path) -> ast.Module:
    """The file's AST, parsed once per process while the file is unchanged: the layout tests walk the same
    few hundred files again and again. Shared: read it, never change it."""
    stat = path.stat()
    return _parse(path, stat.st_mtime_ns, stat.st_size)


@functools.cache
def _parse(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(path.read_text())


@functools.cache
def _import_nodes(path: Path, mtime_ns: int, size: int) -> tuple[tuple[ast.Import | ast.ImportFrom, bool], ...]:
    """The file's import statements, each with whether it sits inside a function (lazy)."""
    tree = _parse(path, mtime_ns, size)
    lazy: set[int] = set()
    for f in ast.walk(tree):  # outer functions come first: a nested one is already inside `lazy`
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(f) not in lazy:
            lazy.update(id(n) for n in ast.walk(f))
    return tuple((n, id(n) in lazy) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))


def imports(name: str, path: Path, known: set[str]) -> dict[str, bool]:
    """{imported kuberhealthy module: imported lazily (inside a function)}."""
    stat = path.stat()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: dict[str, bool] = {}
    for node, lazy in _import_nodes(path, stat.st_mtime_ns, stat.st_size):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            t = target
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out[t] = out.get(t, True) and lazy
    return out


def graph(root: Path) -> dict[str, dict[str, bool]]:
    mods = modules(root)
    return {m: imports(m, p, set(mods)) for m, p in mods.items()}


def cycles(g: dict[str, dict[str, bool]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in g:
        if v not in index:
            visit(v)
    return out


def main(argv: list[str]) -> int:
    dot = "--dot" in argv
    args = [a for a in argv if a != "--dot"]
    root = Path(args[0] if args else Path(__file__).resolve().parents[1] / "kuberhealthy")
    g = graph(root)
    short = lambda m: m.removeprefix("kuberhealthy.") or "kuberhealthy"  # noqa: E731
    if dot:
        print("digraph kuberhealthy {")
        for m, deps in g.items():
            for d, lazy in deps.items():
                print(f'  "{short(m)}" -> "{short(d)}"{" [style=dashed]" if lazy else ""};')
        print("}")
        return 0
    for m, deps in g.items():
        print(f"{short(m):22} -> " + ", ".join(("~" if lazy else "") + short(d) for d, lazy in sorted(deps.items())))
    found = cycles(g)
    print(f"\n{sum(len(d) for d in g.values())} edges, {sum(lazy for d in g.values() for lazy in d.values())} lazy; "
          f"cycles: {'; '.join(' <-> '.join(map(short, c)) for c in found) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
