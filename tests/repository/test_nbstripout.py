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


def _staged(repo: Path, install: str | None) -> nbformat.NotebookNode:
    """Stage a notebook (cell id "af8e2601", one output) in a fresh repository holding our .gitattributes,
    with the filter installed by `make nbstripout-filter` ("make"), by nbstripout's own --install ("plain")
    or not at all (None); the staged blob is what a commit would record."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    shutil.copy(ROOT / ".gitattributes", repo / ".gitattributes")
    if install == "make":
        venv = Path(sys.executable).parent.parent
        subprocess.run(["make", "-f", str(ROOT / "Makefile"), "--no-print-directory", "nbstripout-filter",
                        f"VENV={venv}"], cwd=repo, check=True, capture_output=True)
    elif install == "plain":
        subprocess.run([sys.executable, "-m", "nbstripout", "--install", "--attributes", ".gitattributes"],
                       cwd=repo, check=True)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(1)", outputs=[nbformat.v4.new_output("stream", text="1\n")])
    cell["id"] = "af8e2601"
    nb.cells = [cell]
    nbformat.write(nb, repo / "x.ipynb")
    _git(repo, "add", "x.ipynb")
    return nbformat.reads(_git(repo, "show", ":x.ipynb"), as_version=4)


def _committed_outputs(repo: Path, install: str | None) -> list:
    return [c.get("outputs") for c in _staged(repo, install).cells if c.get("outputs")]


def test_gitattributes_and_make_venv_install_the_filter():
    assert "*.ipynb filter=nbstripout" in (ROOT / ".gitattributes").read_text()
    make = (ROOT / "Makefile").read_text()
    assert "nbstripout --install --attributes .gitattributes" in make and "-m nbstripout --keep-id" in make


def test_a_staged_notebook_loses_its_outputs(tmp_path: Path):
    pytest.importorskip("nbstripout", reason="nbstripout is installed by `make venv` (the lab extra)")
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    assert _committed_outputs(tmp_path / "with", install="make") == []
    # without the installed filter the same notebook keeps its output: the check can fail
    assert _committed_outputs(tmp_path / "without", install=None) != []


def test_a_staged_notebook_keeps_its_cell_ids(tmp_path: Path):
    """Notebook cells are named by their ids; nbstripout's own install would renumber them on commit."""
    pytest.importorskip("nbstripout", reason="nbstripout is installed by `make venv` (the lab extra)")
    if not shutil.which("git") or not shutil.which("make"):
        pytest.skip("git and make are needed")
    assert [c["id"] for c in _staged(tmp_path / "make", "make").cells] == ["af8e2601"]
    assert [c["id"] for c in _staged(tmp_path / "plain", "plain").cells] == ["0"]   # the fault this guards
