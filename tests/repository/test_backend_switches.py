"""Callers ask a model's backend record what it can do; none compares backend names.

docs/architecture.md ("Model backends") says the engine, the stages, the plan and the preflight read the
record (`finlib.llm.backends.backend_of`). This reads every finlib module with `ast` and lists each
comparison of a `backend` value with a string or a tuple of strings, outside `finlib/llm/backends.py`,
where the records are declared.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DECLARED_IN = ROOT / "finlib" / "llm" / "backends.py"


def _names_backend(node: ast.AST) -> bool:
    """`spec.backend`, `backend`, `s.backend`, `rec["backend"]`."""
    if isinstance(node, ast.Attribute):
        return node.attr == "backend"
    if isinstance(node, ast.Name):
        return node.id == "backend"
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.slice.value == "backend"
    return False


def _is_literal(node: ast.AST) -> bool:
    """A string, or a tuple / list / set of strings."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(_is_literal(e) for e in node.elts)


def backend_switches(source: str) -> list[int]:
    """Lines that compare a backend value with a literal name (==, !=, in, not in)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if any(_names_backend(s) for s in sides) and any(_is_literal(s) for s in sides):
            lines.append(node.lineno)
    return lines


def test_the_scan_finds_planted_switches():
    planted = (
        'if spec.backend == "local":\n    pass\nx = s.backend in ("local", "llamacpp")\n'
        'y = rec["backend"] != "openai"\nz = backend_of(spec).in_process\n'
    )
    assert backend_switches(planted) == [1, 3, 4]


def test_no_module_outside_the_declarations_switches_on_backend_names():
    found = {}
    for path in sorted((ROOT / "finlib").rglob("*.py")):
        if path == DECLARED_IN:
            continue
        lines = backend_switches(path.read_text(encoding="utf-8"))
        if lines:
            found[str(path.relative_to(ROOT))] = lines
    assert found == {}, f"ask the backend record (finlib.llm.backends.backend_of) instead: {found}"
