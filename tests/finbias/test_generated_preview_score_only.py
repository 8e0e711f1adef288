"""Stage 03's preview of generated rows on a run whose models only scored (the embedded herding card)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from finlib.core.artifacts import artifact_path
from finlib.finbias.inference import stage


def test_preview_is_empty_when_no_row_was_generated(tmp_run):
    # written as pyarrow strings, as stage 03 writes them: a batch with no generated rows once failed here
    table = pa.table(
        {
            "model": pa.array(["m", "m"], pa.string()),
            "mode": pa.array(["score", "score"], pa.string()),
            "item_id": pa.array(["R1:original", "R1:no_rating"], pa.string()),
        }
    )
    path = artifact_path(tmp_run, "predictions")
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    assert stage.generated_rows(tmp_run, per_model=2).empty


def test_preview_takes_the_first_generated_rows_per_model(tmp_run):
    rows = pd.DataFrame(
        {
            "model": ["a", "a", "a", "b", "b"],
            "mode": ["generate", "score", "generate", "generate", "generate"],
            "item_id": ["1", "2", "3", "4", "5"],
        }
    )
    pq.write_table(pa.Table.from_pandas(rows, preserve_index=False), artifact_path(tmp_run, "predictions"))
    got = stage.generated_rows(tmp_run, per_model=1)
    assert got["item_id"].tolist() == ["1", "4"]
