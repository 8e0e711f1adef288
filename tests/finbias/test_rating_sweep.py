"""The rating sweep: stage 02's sweep rows, the response matrix, lifts and fully-herded shares
on hand-counted fixtures."""
from __future__ import annotations

import pandas as pd
import pytest

from finlib.finbias.beyond.rating_sweep import herded_table, lift_table, response_matrix, sweep_draws
from finlib.finbias.perturb.ratings import extract_analyst_rating
from finlib.finbias.perturb.stage import build_conditions, sweep_report_ids, sweep_rows
from finlib.finbias.vocab import CONDITIONS, POOLED, Condition, Rating, shown_rating

TEXT = "We rate ACME a Buy with a price target of $50. Revenue grew 5% on volume. Margins were stable."


def test_sweep_rows_show_each_rating_in_the_analysts_phrasing():
    rows = {r["condition"]: r for r in sweep_rows("r1", TEXT, Rating.BULLISH)}
    assert set(rows) == {"sweep_bullish", "sweep_neutral", "sweep_bearish"}
    assert rows["sweep_bullish"]["text"] == TEXT  # the analyst's own rating: the original text
    for cond, row in rows.items():
        assert extract_analyst_rating(row["text"]).value == row["reference_rating"] == shown_rating(cond).value
        assert row["text"].endswith("Revenue grew 5% on volume. Margins were stable.")
        assert row["analyst_rating"] == "bullish" and row["status"] == "ok"
    assert "a Hold" in rows["sweep_neutral"]["text"] and "a Sell" in rows["sweep_bearish"]["text"]


def test_sweep_is_off_unless_asked_and_picks_the_first_rated_reports():
    reports = pd.DataFrame({"report_id": ["b", "a", "c"],
                            "text": [TEXT, TEXT.replace("Buy", "Sell"), "Revenue grew. Nothing else."]})
    assert sweep_report_ids(reports, 0) == set()
    assert sweep_report_ids(reports, 1) == {"a"} and sweep_report_ids(reports, None) == {"a", "b"}
    off = build_conditions(reports, seed=1).conditions
    assert set(off["condition"]) == {c.value for c in CONDITIONS}
    on = build_conditions(reports, seed=1, sweep_ids={"a"}).conditions
    sweep = on[on["condition"].str.startswith("sweep_")]
    assert sorted(sweep["item_id"]) == ["a:sweep_bearish", "a:sweep_bullish", "a:sweep_neutral"]
    fake = on[(on["report_id"] == "a") & (on["condition"] == "fake_rating")]
    same = sweep[sweep["reference_rating"] == fake["fake_rating"].iloc[0]]
    assert same["text"].iloc[0] == fake["text"].iloc[0]  # the same rewrite as fake_rating: one stored call


def _draws(rows):
    return pd.DataFrame(rows, columns=["model", "report_id", "condition", "answer", "sector"])


# Hand-made answers of model m on reports r1, r2 (one draw each; r2 also two draws of no_rating)
ROWS = [
    ("m", "r1", "no_rating", "neutral", "Energy"), ("m", "r1", "sweep_bullish", "bullish", "Energy"),
    ("m", "r1", "sweep_neutral", "neutral", "Energy"), ("m", "r1", "sweep_bearish", "bearish", "Energy"),
    ("m", "r2", "no_rating", "bullish", "Utilities"), ("m", "r2", "no_rating", None, "Utilities"),
    ("m", "r2", "sweep_bullish", "bullish", "Utilities"), ("m", "r2", "sweep_neutral", "bullish", "Utilities"),
    ("m", "r2", "sweep_bearish", None, "Utilities"),
    ("m", "r3", "original", "bullish", "Energy"),  # not a sweep report: left out
]


def test_response_matrix_counts_by_hand():
    mat = response_matrix(sweep_draws(_draws(ROWS)))
    cell = mat.set_index(["shown", "answer"])
    assert cell.loc[("none (no_rating)", "neutral"), "count"] == 1
    assert cell.loc[("none (no_rating)", "bullish"), "count"] == 1
    assert cell.loc[("none (no_rating)", "unparsed"), "count"] == 1
    assert cell.loc[("bullish", "bullish"), "count"] == 2
    assert cell.loc[("neutral", "neutral"), "count"] == 1 and cell.loc[("neutral", "bullish"), "count"] == 1
    assert cell.loc[("bearish", "bearish"), "count"] == 1 and cell.loc[("bearish", "unparsed"), "count"] == 1
    assert mat["count"].sum() == 9
    assert cell.loc[("none (no_rating)", "neutral"), "share"] == pytest.approx(1 / 3)


def test_lifts_and_fully_herded_by_hand():
    sweep = sweep_draws(_draws(ROWS))
    lift = lift_table(sweep, reps=100, seed=0).set_index("shown")
    # bullish: r1 1 - 0, r2 1 - 1/2 -> mean .75; neutral: r1 1 - 1, r2 0 - 0 -> 0; bearish: r1 1 - 0, r2 0 - 0 -> .5
    assert lift.loc["bullish", "lift"] == pytest.approx(0.75)
    assert lift.loc["neutral", "lift"] == pytest.approx(0.0)
    assert lift.loc["bearish", "lift"] == pytest.approx(0.5)
    assert lift.loc["bullish", "n_reports"] == 2 and lift.loc["bullish", "sector"] == POOLED
    assert lift.loc["bullish vs bearish (lift difference)", "lift"] == pytest.approx(0.25)
    by_sector = lift_table(sweep, reps=50, seed=0, by_sector=True)
    energy = by_sector[(by_sector["sector"] == "Energy") & (by_sector["shown"] == "bullish")]
    assert energy["lift"].iloc[0] == pytest.approx(1.0)
    herded = herded_table(sweep).iloc[0]
    # r1 follows all three; r2 follows bullish only
    assert herded["n_reports"] == 2 and herded["fully_herded_share"] == 0.5 and herded["one_of_three_share"] == 0.5
    assert herded["none_share"] == 0


def test_condition_enum_keeps_the_papers_four_apart():
    assert len(CONDITIONS) == 4 and Condition.SWEEP_BULLISH not in CONDITIONS
    assert shown_rating("original") is None and shown_rating("sweep_neutral") is Rating.NEUTRAL
