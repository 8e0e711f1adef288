"""Notebook outputs never reach a commit: .gitattributes routes notebooks through nbstripout, which
`make venv` installs into the clone's git config."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def _committed_outputs(repo: Path, install: bool) -> list:
    """Stage a notebook with an output in a fresh repository holding our .gitattributes; the staged
    blob's outputs (what a commit would record)."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    shutil.copy(ROOT / ".gitattributes", repo / ".gitattributes")
    if install:
        subprocess.run([sys.executable, "-m", "nbstripout", "--install", "--attributes", ".gitattributes"],
                       cwd=repo, check=True)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(1)", outputs=[nbformat.v4.new_output("stream", text="1\n")])
    nb.cells = [cell]
    nbformat.write(nb, repo / "x.ipynb")
    _git(repo, "add", "x.ipynb")
    staged = nbformat.reads(_git(repo, "show", ":x.ipynb"), as_version=4)
    return [c.get("outputs") for c in staged.cells if c.get("outputs")]


def test_gitattributes_and_make_venv_install_the_filter():
    assert "*.ipynb filter=nbstripout" in (ROOT / ".gitattributes").read_text()
    assert "nbstripout --install --attributes .gitattributes" in (ROOT / "Makefile").read_text()


def test_a_staged_notebook_loses_its_outputs(tmp_path: Path):
    pytest.importorskip("nbstripout", reason="nbstripout is installed by `make venv` (the lab extra)")
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    assert _committed_outputs(tmp_path / "with", install=True) == []
    # without the installed filter the same notebook keeps its output: the check can fail
    assert _committed_outputs(tmp_path / "without", install=False) != []
