"""Artifacts round-trip atomically; tables come out in three formats with the caveat."""
from __future__ import annotations

import pandas as pd
import pytest

from finlib.core.artifacts import (
    MissingArtifactError,
    UnreadableArtifactError,
    read_frame,
    read_frame_head,
    read_json,
    write_frame,
    write_json,
)
from finlib.core.tables import PAPER_TABLES, SYNTHETIC_CAVEAT, latex_escape, paper_table, read_table_csv, write_table


def test_frame_roundtrip_and_no_temp_files_left(tmp_run):
    df = pd.DataFrame({"report_id": ["a", "b"], "car": [0.1, -0.2]})
    write_frame(tmp_run, "labels", df)
    pd.testing.assert_frame_equal(read_frame(tmp_run, "labels"), df)
    assert not [p for p in tmp_run.processed_dir.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("n", [0, 1, 7, 250, 1000, 5000])
def test_the_head_of_an_artifact_equals_pandas_reading_it_whole(tmp_run, n):
    """Row groups and batches cut anywhere: the first n rows, with the dtypes pandas' own reader gives."""
    rows = 1000
    df = pd.DataFrame({"item_id": [f"i{i:04d}" for i in range(rows)],
                       "room": pd.array([None if i % 7 == 0 else i for i in range(rows)], dtype="Int64"),
                       "ok": pd.array([None if i % 5 == 0 else i % 2 == 0 for i in range(rows)], dtype="boolean"),
                       "p": [i / 3 for i in range(rows)], "text": [None if i % 11 == 0 else "x" * i for i in range(rows)]})
    write_frame(tmp_run, "predictions", df, row_group_size=97)  # groups that do not divide the batches
    head, total = read_frame_head(tmp_run, "predictions", n)
    assert total == rows
    pd.testing.assert_frame_equal(head, read_frame(tmp_run, "predictions").head(n))
    cols, _ = read_frame_head(tmp_run, "predictions", n, ["item_id", "room"])
    pd.testing.assert_frame_equal(cols, read_frame(tmp_run, "predictions", ["item_id", "room"]).head(n))


def test_the_head_of_a_missing_or_broken_artifact_says_which_stage(tmp_run):
    with pytest.raises(MissingArtifactError, match=r"run stage 03 first"):
        read_frame_head(tmp_run, "predictions", 5)
    tmp_run.processed_dir.mkdir(parents=True, exist_ok=True)
    (tmp_run.processed_dir / "predictions.parquet").write_bytes(b"PAR1 cut short")
    with pytest.raises(UnreadableArtifactError, match=r"predictions.parquet is not a readable Parquet file"):
        read_frame_head(tmp_run, "predictions", 5)


def test_missing_artifact_names_the_producing_stage(tmp_run):
    with pytest.raises(MissingArtifactError, match=r"run stage 01 first"):
        read_frame(tmp_run, "labels")
    with pytest.raises(MissingArtifactError, match=r"stage 00"):
        read_json(tmp_run, "data_report")


def test_json_roundtrip(tmp_run):
    write_json(tmp_run, "data_report", {"n": 3, "excluded": {"empty_text": 1}})
    assert read_json(tmp_run, "data_report")["excluded"] == {"empty_text": 1}


def test_write_table_three_formats_with_synthetic_caveat(tmp_run):
    df = pd.DataFrame({"sector": ["Energy", "Utilities"], "share": [12.3456, 7.0]})
    paths = write_table(tmp_run, "t", df, "Shares (%) by sector, see *_ci & co")
    assert set(paths) == {"csv", "md", "tex"}
    pd.testing.assert_frame_equal(read_table_csv(paths["csv"]), df)  # full precision kept
    first_line = paths["csv"].read_text().splitlines()[0]
    assert first_line.startswith("# Shares (%)") and SYNTHETIC_CAVEAT in first_line
    md = paths["md"].read_text()
    assert "12.35" in md and SYNTHETIC_CAVEAT in md
    tex = paths["tex"].read_text()
    assert "\\begin{table}" in tex and "Shares (\\%) by sector, see *\\_ci \\& co" in tex


def test_latex_escape_leaves_no_raw_specials():
    escaped = latex_escape("a_b 50% #1 & $x$ {y} ~ ^ back\\slash")
    for raw in ("_", "%", "#", "&", "$"):
        assert all(escaped[i - 1] == "\\" for i, ch in enumerate(escaped) if ch == raw), raw
    assert "\\textbackslash{}" in escaped


def test_every_paper_table_is_carried_and_matches_its_printed_totals():
    for key in PAPER_TABLES:
        assert len(paper_table(key)) > 0, key
    t2 = paper_table("finbias_table2")
    assert t2.loc[t2.sector == "Total", "num"].item() == 8868
    assert t2.loc[t2.sector != "Total", "num"].sum() == 8868
    t4 = paper_table("finbias_table4")
    assert t4.model.nunique() == 19 and t4.sector.nunique() == 10
    with pytest.raises(KeyError, match="unknown paper table"):
        paper_table("finbias_table99")


def test_require_columns_names_source_and_fields():
    from finlib.core.artifacts import require_columns

    require_columns(pd.DataFrame({"a": [1], "b": [2]}), ["a", "b"], "labels.parquet")
    with pytest.raises(ValueError, match=r"labels\.parquet: missing column\(s\) \['c'\]"):
        require_columns(pd.DataFrame({"a": [1]}), ["a", "c"], "labels.parquet")


def test_save_figure_writes_png_and_pdf_with_synthetic_title(tmp_run):
    import matplotlib.pyplot as plt

    from finlib.core.tables import save_figure, synthetic_title

    fig, ax = plt.subplots()
    ax.set_title(synthetic_title(tmp_run, "CAR by year"))
    paths = save_figure(tmp_run, fig, "car")
    assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size > 0 for p in paths)
    assert ax.get_title() == "CAR by year (synthetic data)"
    plt.close(fig)


def test_every_paper_artifact_list_is_found_through_the_entry_points():
    """The ground floor imports no paper, yet its errors name the stage that writes each artifact."""
    from finlib.bizfin.artifacts import PRODUCERS as BIZFIN
    from finlib.core.artifacts import producer, producers
    from finlib.finbias.artifacts import PRODUCERS as FINBIAS

    assert producers() == {**FINBIAS, **BIZFIN}
    assert producer("labels") == "01" and producer("bizfin_items") == "07" and producer("nothing") == "??"


def test_an_artifact_claimed_by_two_stages_is_refused(monkeypatch):
    from finlib.core import artifacts

    class Entry:
        def __init__(self, value, lists):
            self.value, self._lists = value, lists

        def load(self):
            return self._lists

    monkeypatch.setattr(artifacts, "entry_points", lambda group: [Entry("a:X", {"labels": "01"}),
                                                                   Entry("b:Y", {"labels": "04"})])
    artifacts.producers.cache_clear()
    try:
        with pytest.raises(ValueError, match="'labels' is written by stage 01 and by stage 04"):
            artifacts.producers()
    finally:
        artifacts.producers.cache_clear()
