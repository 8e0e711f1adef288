"""finlib's modules form an acyclic import graph: core <- llm <- finbias / bizfin, one way.

Every import of a finlib module counts, at module level or inside a function: a function-level
import only hides a cycle until the first call (and makes the load order matter). The graph is
read from the source with `ast`, so nothing is imported to build it.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "finlib"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolve(name: str, modules: set[str]) -> str | None:
    """The finlib module a dotted import name loads (`finlib.core.config.RunConfig` -> `finlib.core.config`)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """finlib modules imported anywhere in a file (relative imports resolved against its package)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names = [f"{base}.{a.name}" for a in node.names] or [base]
        for name in names:
            target = resolve(name, modules)
            if target and target != me:
                out.add(target)
    return out


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    return {m: imported_modules(p, modules) for m, p in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path [a, b, ..., a], or None (iterative depth-first search, sorted for a stable report)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_relative_and_function_level_imports_are_edges(tmp_path: Path):
    src = tmp_path / "finlib" / "pkg"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "a.py").write_text("def f():\n    from finlib.pkg.b import g\n    return g\n")
    (src / "b.py").write_text("from . import a\n")
    global ROOT
    saved = ROOT
    try:
        ROOT = tmp_path
        mods = {"finlib.pkg", "finlib.pkg.a", "finlib.pkg.b"}
        assert imported_modules(src / "a.py", mods) == {"finlib.pkg.b"}
        assert imported_modules(src / "b.py", mods) == {"finlib.pkg.a"}
    finally:
        ROOT = saved


def test_finlib_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 30, "the graph must cover every finlib module"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
