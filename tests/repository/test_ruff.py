"""The linter: ruff with the project's configuration (pyproject.toml `[tool.ruff]`) finds nothing in
finlib, tests and benchmarks, and it does report a fault planted in a file (so a clean run means something)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINTED = ("finlib", "tests", "benchmarks")   # what `make test` lints


def _ruff() -> str:
    """The ruff beside this interpreter (the project's venv), else one on PATH; skip when there is none."""
    here = Path(sys.executable).with_name("ruff")
    found = str(here) if here.exists() else shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (it is in the `dev` extra: pip install -e '.[dev]')")
    return found


def _check(*paths: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`ruff check` with the project's configuration, whatever the working directory of the files."""
    return subprocess.run([_ruff(), "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"),
                           "--output-format", "concise", *map(str, paths)], cwd=cwd, capture_output=True, text=True)


def test_the_tree_is_clean_under_the_project_configuration():
    out = _check(*LINTED)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_an_unused_import_planted_in_a_file_is_reported(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import os\n\n\ndef f() -> int:\n    return 1\n")
    out = _check(planted, cwd=tmp_path)
    assert out.returncode == 1 and "F401" in out.stdout and "planted.py:1:" in out.stdout, out.stdout + out.stderr


def test_the_project_configuration_is_the_one_applied(tmp_path):
    """A line past 120 columns passes (E501 is not selected) but an unsorted import block does not: the
    checks above ran with pyproject.toml's rule set, not ruff's defaults."""
    planted = tmp_path / "planted.py"
    planted.write_text("import sys\nimport os\n\nx = " + repr("y" * 120) + "\nprint(os.sep, sys.argv, x)\n")
    out = _check(planted, cwd=tmp_path)
    assert "I001" in out.stdout and "E501" not in out.stdout, out.stdout + out.stderr
