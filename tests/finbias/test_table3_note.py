"""Table 3 footnote: a printed share that disagrees with the paper's own counts is annotated, not corrected."""
from __future__ import annotations

import pandas as pd

from finlib.finbias.data.stage import analyst_rating_table, table3_footnote


def test_the_inconsistent_neutral_share_gets_a_note() -> None:
    t3 = analyst_rating_table(pd.DataFrame({"analyst_rating": ["bullish", "neutral", "bearish", None]}))
    t3 = t3.set_index("rating")
    assert t3.loc["Neutral", "paper_percentage"] == 24.74       # carried as printed
    assert "2,432 / 8,868 = 27.42 %" in t3.loc["Neutral", "paper_note"]
    assert t3.loc["Bullish", "paper_note"] == "" and t3.loc["Bearish", "paper_note"] == ""


def test_footnote_only_where_counts_and_share_disagree() -> None:
    assert table3_footnote(2432, 27.42, 8868) == ""
    assert table3_footnote(2432, 24.74, 8868).startswith("printed 24.74 %")
