"""The fault-drill table of docs/reliability.md cannot drift from the tests: every test whose
docstring has a `Drill: <scenario>` line is a row (scenario and test named the same way), and every
row names a test that exists and says that scenario."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reliability.md"
START, END = "<!-- fault-drill table start -->", "<!-- fault-drill table end -->"


def drill_tests(root: Path = ROOT) -> dict[str, str]:
    """`path::test` -> scenario, for every test function under tests/ with a `Drill:` docstring line."""
    found = {}
    for path in sorted((root / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                for line in (ast.get_docstring(node) or "").splitlines():
                    if line.startswith("Drill: "):
                        found[f"{path.relative_to(root)}::{node.name}"] = line[len("Drill: "):].rstrip(".")
    return found


def table_rows(doc: str) -> dict[str, str]:
    """`path::test` -> scenario from the rows between the table markers (| scenario | `test` | counts |)."""
    body = doc.split(START, 1)[1].split(END, 1)[0]
    rows = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and (m := re.fullmatch(r"`([^`]+::test_\w+)`", cells[1])):
            assert m.group(1) not in rows, f"{m.group(1)} listed twice"
            rows[m.group(1)] = cells[0]
    return rows


def test_every_drill_test_is_a_row_and_every_row_a_drill_test():
    doc = DOC.read_text(encoding="utf-8")
    assert START in doc and END in doc, f"{DOC}: the fault-drill table markers are missing"
    rows, tests = table_rows(doc), drill_tests()
    assert len(tests) >= 20
    assert sorted(set(tests) - set(rows)) == [], "drill tests missing from the table"
    assert sorted(set(rows) - set(tests)) == [], "rows naming no drill test (renamed or removed?)"
    wrong = {t: (rows[t], tests[t]) for t in rows if rows[t] != tests[t]}
    assert wrong == {}, "scenario in the table differs from the test's Drill: line"


def test_the_checker_sees_a_drifted_row(tmp_path):
    doc = f"{START}\n| a scenario | `tests/x.py::test_y` | 1 lost |\n{END}\n"
    assert table_rows(doc) == {"tests/x.py::test_y": "a scenario"}
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text('def test_y():\n    """Drill: another scenario."""\n')
    assert drill_tests(tmp_path) == {"tests/test_x.py::test_y": "another scenario"}  # != the row: caught
