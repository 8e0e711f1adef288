"""JupyterLab's saves of the tracked notebooks carry no outputs; other notebooks keep theirs."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from finlib.pipeline import lab_server
from finlib.pipeline.notebook_save import strip_outputs


def executed() -> dict:
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("# prose"),
            nbformat.v4.new_code_cell(
                "print(1)", execution_count=3, outputs=[nbformat.v4.new_output("stream", name="stdout", text="1\n")]
            ),
        ]
    )
    nb.cells[1].metadata["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00Z"}
    return nbformat.from_dict(nb)


def test_tracked_notebooks_are_saved_without_outputs():
    model = {"type": "notebook", "content": executed()}
    ids = [c["id"] for c in model["content"]["cells"]]
    strip_outputs(model=model, path="notebooks/04_scoring.ipynb", contents_manager=None)
    code = model["content"]["cells"][1]
    assert code["outputs"] == [] and code["execution_count"] is None and "execution" not in code["metadata"]
    assert code["source"] == "print(1)" and [c["id"] for c in model["content"]["cells"]] == ids


@pytest.mark.parametrize("path", ["runs/default/notebooks/04_scoring.ipynb", "scratch/mine.ipynb"])
def test_other_notebooks_keep_their_outputs(path):
    model = {"type": "notebook", "content": executed()}
    strip_outputs(model=model, path=path)
    assert model["content"]["cells"][1]["outputs"]


def test_the_server_is_started_with_the_hook_and_jupyter_server_accepts_it(tmp_path: Path):
    launch = lab_server.plan_launch(tmp_path, token="t", env={}, euid=1000)
    assert "--FileContentsManager.pre_save_hook=finlib.pipeline.notebook_save.strip_outputs" in launch.argv
    contents = pytest.importorskip(
        "jupyter_server.services.contents.filemanager", reason="jupyter_server not installed"
    )
    (tmp_path / "notebooks").mkdir()
    cm = contents.FileContentsManager(
        root_dir=str(tmp_path), pre_save_hook="finlib.pipeline.notebook_save.strip_outputs"
    )
    cm.save({"type": "notebook", "format": "json", "content": executed()}, "notebooks/x.ipynb")
    saved = nbformat.read(tmp_path / "notebooks" / "x.ipynb", as_version=4)
    assert saved.cells[1].outputs == [] and saved.cells[1].source == "print(1)"
