"""A full disk while stage 03 writes a model's part file: the error names the part and no truncated
part is left for the join to read (the rest of the disk-full drill: tests/pipeline/test_disk_full.py)."""
from __future__ import annotations

import errno
from pathlib import Path

import pandas as pd
import pytest


def test_disk_full_writing_a_stage_03_part_names_it_and_leaves_no_truncated_part(tmp_run, monkeypatch):
    """Drill: disk full while stage 03 writes a model's part file."""
    from test_circuit_breaker import _stage_on

    from finlib.finbias.inference.stage import run as run_inference
    from finlib.rehearsal.stub_server import ThreadedStub

    real = pd.DataFrame.to_parquet
    parts = tmp_run.processed_dir / ".predictions-parts"

    def to_parquet(self, path, *args, **kwargs):
        if Path(path).parent == parts:
            Path(path).write_bytes(b"PAR1 cut")  # a truncated part
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, path, *args, **kwargs)

    monkeypatch.setenv("STUB_RELIABILITY_KEY", "k")
    with ThreadedStub() as stub:
        _stage_on(tmp_run, stub.base_url)
        monkeypatch.setattr(pd.DataFrame, "to_parquet", to_parquet)
        with pytest.raises(OSError, match=r"cannot write .*\.predictions-parts/000-00000\.parquet: No space left"):
            run_inference(tmp_run)
    assert [p.name for p in parts.iterdir()] == []  # no truncated part a later join would read
    assert not (tmp_run.processed_dir / "predictions.parquet").exists()
