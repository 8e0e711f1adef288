"""One home per name: a finlib module imports another module's names only to use them.

A name imported and never used is there for others to import through this module (a re-export):
then the name has two homes, callers drift between them and a reader cannot tell which one is
real. Read from the source with `ast` (not with the linter, whose `noqa` comments can silence it).
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def reexported_names(source: str) -> list[str]:
    """Names a module imports from a finlib module and never reads (a string annotation counts as a read)."""
    tree = ast.parse(source)
    imported: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("finlib") and node.level == 0:
            for alias in node.names:
                imported[alias.asname or alias.name] = node.lineno
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    read |= {n.value.split(".")[0].split("[")[0] for n in ast.walk(tree)
             if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier()}
    for node in ast.walk(tree):  # names inside string annotations ("Lexicon | None")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                read |= {n.id for n in ast.walk(ast.parse(node.value, mode="eval")) if isinstance(n, ast.Name)}
            except SyntaxError:
                pass
    return sorted(f"{name} (line {line})" for name, line in imported.items() if name not in read)


def test_the_check_finds_a_planted_reexport():
    planted = "from finlib.finbias.labels.market_model import METHODS, compute_labels\n\nprint(METHODS)\n"
    assert reexported_names(planted) == ["compute_labels (line 1)"]
    assert reexported_names("from finlib.core.config import RunConfig\n\ndef f(c: 'RunConfig'): ...\n") == []


def test_no_finlib_module_reexports_another_modules_names():
    found = {str(p.relative_to(ROOT)): names for p in sorted((ROOT / "finlib").rglob("*.py"))
             if p.name != "__init__.py" and (names := reexported_names(p.read_text(encoding="utf-8")))}
    assert not found, f"names imported only to be imported through this module (import them from their home): {found}"
