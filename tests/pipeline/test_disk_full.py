"""A full disk at every place the pipeline writes: the response store (created and written), a
stage's tables and figures and the executed notebook (stage 03's part files:
tests/finbias/test_disk_full_parts.py; the manifest and the artifacts: tests/pipeline/test_runner_failures.py). Each error names the file; nothing half-written is
left where a reader would take it for whole. ENOSPC is seeded by monkeypatching the write."""
from __future__ import annotations

import errno
import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from test_runner import _notebook, mini_repo  # noqa: F401 -- the fixture
from test_runner_failures import _disk_full_for

from finlib.llm import store as store_module
from finlib.llm.store import ResponseStore, Result, StoreError
from finlib.pipeline import runner

FULL = "database or disk is full"


def _result(key: str) -> Result:
    return Result(key=key, model="m", backend="openai", mode="generate", status="ok", raw_text="x")


def test_disk_full_creating_the_response_store_names_it_and_leaves_no_empty_file(tmp_path, monkeypatch):
    """Drill: disk full while the response store is created (the file exists, its tables cannot be written)."""
    real = store_module.connect_wal

    def full(path, **kwargs):
        conn = real(path, **kwargs)  # the file is created, as SQLite does before it finds the disk full
        conn.close()
        raise sqlite3.OperationalError(FULL)

    monkeypatch.setattr(store_module, "connect_wal", full)
    path = tmp_path / "cache" / "responses.sqlite"
    with pytest.raises(StoreError, match=rf"cannot open the response store {path}: {FULL} \(the new, empty store "
                                         r"file was removed\)"):
        ResponseStore(path)
    assert sorted(p.name for p in path.parent.iterdir()) == []  # no 0-byte store a rerun would take as empty


class _FullConnection:
    """A connection whose writes fail as on a full disk (reads pass through)."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self):
        return self.conn.__enter__()

    def __exit__(self, *exc):
        return self.conn.__exit__(*exc)

    def execute(self, sql, *args):
        if sql.startswith("BEGIN"):
            raise sqlite3.OperationalError(FULL)
        return self.conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self.conn, name)


def test_disk_full_writing_the_response_store_names_it_and_keeps_what_was_stored(tmp_path):
    """Drill: disk full while answers are committed to the response store."""
    path = tmp_path / "responses.sqlite"
    with ResponseStore(path) as s:
        s.put_many([_result("a")])
        s.conn = _FullConnection(s.conn)
        with pytest.raises(StoreError, match=rf"cannot write to the response store {path}: {FULL} \(1 result"):
            s.put_many([_result("b")])
        s.conn = s.conn.conn
    with ResponseStore(path) as s:
        assert set(s.answered(["a", "b"])) == {"a"}  # the earlier group intact, the failed one absent


def test_disk_full_writing_a_table_names_it_and_leaves_no_partial_file(tmp_run, monkeypatch):
    """Drill: disk full while a stage writes a table (the Markdown file of three)."""
    from finlib.core.tables import write_table

    _disk_full_for(monkeypatch, ".md")
    with pytest.raises(OSError, match=r"cannot write .*table4_test\.md: No space left on device") as err:
        write_table(tmp_run, "table4_test", pd.DataFrame({"x": [1.0]}), "caption")
    assert err.value.errno == errno.ENOSPC
    assert sorted(p.name for p in tmp_run.tables_dir.iterdir()) == ["table4_test.csv"]  # whole, or absent


def test_disk_full_saving_a_figure_names_it_and_leaves_no_partial_file(tmp_run, monkeypatch):
    """Drill: disk full while a stage saves a figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from finlib.core.tables import save_figure

    real = plt.Figure.savefig

    def savefig(self, fname, *args, **kwargs):
        if str(kwargs.get("format")) == "pdf":
            Path(fname).write_bytes(b"%PDF-1.4 cut")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, fname, *args, **kwargs)

    monkeypatch.setattr(plt.Figure, "savefig", savefig)
    fig = plt.figure()
    with pytest.raises(OSError, match=r"cannot write .*fig_test\.pdf: No space left on device"):
        save_figure(tmp_run, fig, "fig_test")
    plt.close(fig)
    assert sorted(p.name for p in tmp_run.figures_dir.iterdir() if p.is_file()) == ["fig_test.png"]


def test_disk_full_writing_the_executed_notebook_names_it(mini_repo, monkeypatch, capsys):  # noqa: F811
    """Drill: disk full while papermill writes the executed notebook."""
    import papermill

    _notebook(mini_repo / "notebooks" / "00_write.ipynb", "pass")
    (mini_repo / "notebooks" / "01_read.ipynb").unlink()
    old = mini_repo / "runs" / "smoke" / "notebooks" / "00_write.ipynb"

    def execute(input_path, output_path, **kwargs):
        Path(output_path).write_text('{"cells": [{"cell_type": "co')  # cut mid-JSON
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(papermill, "execute_notebook", execute)
    assert runner.main(["--run", "smoke"]) == 1
    err = capsys.readouterr().err
    assert "cannot write the executed notebook" in err and "00_write.ipynb: No space left on device" in err
    assert "was not written" not in err  # the manifest was written and says why
    manifest = json.loads((mini_repo / "runs" / "smoke" / "manifest.json").read_text())
    assert manifest["stages"]["00"]["status"] == "failed" and "00_write.ipynb" in manifest["failed"]["error"]
    assert [p.name for p in old.parent.iterdir()] == []  # neither a cut notebook nor a partial file


def test_a_cut_executed_notebook_is_never_moved_into_place(tmp_path):
    """The stage ran but the notebook papermill wrote is not whole: the previous one stays, the error names it."""
    partial, output = tmp_path / ".00.ipynb.partial-1", tmp_path / "00.ipynb"
    output.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    partial.write_text('{"cells": [{"cell_type": "co')
    problem = runner.finish_notebook(partial, output, tmp_path)
    assert problem and str(output) in problem
    assert not partial.exists() and json.loads(output.read_text())["cells"] == []
