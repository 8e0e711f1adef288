"""finlib's packages are layered and its modules form an acyclic import graph.

Layers (`RANKS`): core <- llm <- finbias, bizfin <- pipeline <- rehearsal. A module may import its own
package or a package of a LOWER rank, never one of the same or a higher rank (finbias and bizfin do not
import each other).

Every import of a finlib module counts, at module level or inside a function, and so does a module named
in a string (not a docstring) for loading at run time: a function-level
import only hides a cycle until the first call (and makes the load order matter). The graph is
read from the source with `ast`, so nothing is imported to build it.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RANKS: dict[str, int] = {"core": 0, "llm": 1, "finbias": 2, "bizfin": 2, "pipeline": 3, "rehearsal": 4, "harness": 5}
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


def package_of(module: str) -> str:
    """`finlib.finbias.labels.stage` -> `finbias` (the top-level package below `finlib`)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def upward_edges(graph: dict[str, set[str]]) -> list[str]:
    """Every import that points to another package of the same or a higher rank."""
    out = []
    for src in sorted(graph):
        a = package_of(src)
        for dst in sorted(graph[src]):
            b = package_of(dst)
            if a in RANKS and b in RANKS and a != b and RANKS[b] >= RANKS[a]:
                out.append(f"{src} -> {dst}")
    return out


def test_every_finlib_package_has_a_rank():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages - set(RANKS) == set(), "a package without a rank: add it to RANKS"


def test_rank_check_finds_planted_upward_and_sideways_edges():
    graph = {"finlib.core.a": {"finlib.llm.b"}, "finlib.finbias.c": {"finlib.bizfin.d", "finlib.core.a"},
             "finlib.rehearsal.e": {"finlib.pipeline.f", "finlib.core.a"}, "finlib.llm.b": {"finlib.llm.g"}}
    assert upward_edges(graph) == ["finlib.core.a -> finlib.llm.b", "finlib.finbias.c -> finlib.bizfin.d"]


def test_imports_point_only_down():
    edges = upward_edges(import_graph())
    assert edges == [], f"{len(edges)} imports point up or sideways:\n" + "\n".join(edges)


def docstring_nodes(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants of a module, its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def string_references(source: str, me: str, modules: set[str]) -> set[str]:
    """finlib modules a file names in a string that is not a docstring (`"finlib.bizfin.tasks:task_names"`,
    `"finlib.bizfin"`): a module imported by its name at run time is an import like any other."""
    tree = ast.parse(source)
    docs = docstring_nodes(tree)
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            name = node.value.strip().partition(":")[0]
            if name.startswith("finlib.") and name.replace(".", "").replace("_", "").isalnum():
                target = resolve(name, modules)
                if target and target != me:
                    out.add(target)
    return out


def string_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {m: string_references(p.read_text(encoding="utf-8"), m, set(files)) for m, p in files.items()}


def test_the_string_check_catches_a_planted_module_name_in_a_core_module_copy():
    source = (PACKAGE / "core" / "params.py").read_text(encoding="utf-8")
    modules = set(import_graph())
    assert upward_edges({"finlib.core.params": string_references(source, "finlib.core.params", modules)}) == []
    planted = source + '\nPAPER = "finlib.bizfin"\nREADER = "finlib.bizfin.tasks:task_names"\n'
    edges = upward_edges({"finlib.core.params": string_references(planted, "finlib.core.params", modules)})
    assert edges == ["finlib.core.params -> finlib.bizfin", "finlib.core.params -> finlib.bizfin.tasks"]


def test_module_names_in_strings_point_only_down():
    edges = upward_edges(string_graph())
    assert edges == [], f"{len(edges)} module names in strings point up or sideways:\n" + "\n".join(edges)
