"""Static rules for the stage notebooks: story in the notebook, logic in finlib.

Executing them is nbval's job (`make test`); these checks keep them honest without running.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from finlib.pipeline.stages import STAGE_MODULES

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
HOME_MODULES = STAGE_MODULES  # each numbered notebook calls its stage's module


def test_the_five_fin_bias_stages_exist():
    assert [p.name[:2] for p in NOTEBOOKS][:5] == ["00", "01", "02", "03", "04"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_follows_the_conventions(path: Path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert nb.cells[0].cell_type == "markdown", "a notebook opens with markdown that explains the stage"
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, "exactly one cell tagged `parameters`"
    assert re.search(r"^run_name = None", params[0].source, re.M), \
        "run_name defaults to None: open_run resolves the most recent run (never a fixed test run)"
    assert re.search(r"^params_file = None", params[0].source, re.M)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    raw_cells = json.loads(path.read_text(encoding="utf-8"))["cells"]  # as written (nbformat.read fills ids in)
    assert all("id" in c for c in raw_cells), "every cell has an id (nbformat 4.5; papermill warns otherwise)"
    for cell in code:
        assert not re.search(r"^\s*(def|class|lambda)\b", cell.source, re.M), \
            f"logic belongs in finlib, not in a notebook cell:\n{cell.source[:200]}"
        assert not cell.get("outputs"), "notebooks are committed without outputs"
        assert not re.search(r"sk-[A-Za-z0-9]{10,}|api_key\s*=", cell.source), "no keys in notebooks"
    source = "\n".join(c.source for c in code)
    home = HOME_MODULES.get(path.name[:2])
    if home:
        package, _, module = home.rpartition(".")
        assert home in source or f"from {package} import {module}" in source, \
            f"{path.name} should call its home module {home}"
    assert "open_run(run_name, params_file)" in source


MAX_CODE_LINES = 60  # a notebook tells the story; anything longer belongs in its home module


def code_lines(source: str) -> int:
    """Lines that are code: neither blank nor a comment (IPython magics count as code)."""
    return sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))


def definitions(source: str) -> list[str]:
    """Functions, classes and lambdas anywhere in a cell, found by parsing it (indented or not);
    IPython magics and shell lines are blanked first so the cell parses as Python."""
    import ast

    text = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    nodes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
    return [type(n).__name__ for n in ast.walk(ast.parse(text)) if isinstance(n, nodes)]


def test_the_checks_find_what_they_look_for():
    assert definitions("x = 1\nif x:\n    def f():\n        pass\n") == ["FunctionDef"]
    assert definitions("y = sorted(z, key=lambda v: -v)") == ["Lambda"]
    assert definitions("%matplotlib inline\nimport finlib") == []
    assert code_lines("# a comment\n\nx = 1\n  # indented comment\ny = 2\n") == 2


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_no_definitions_and_few_code_lines(path: Path):
    nb = nbformat.read(path, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    found = [d for src in code for d in definitions(src)]
    assert not found, f"{path.name} defines {found}: logic belongs in its home module"
    n = sum(code_lines(src) for src in code)
    assert n <= MAX_CODE_LINES, f"{path.name} has {n} code lines (limit {MAX_CODE_LINES})"
