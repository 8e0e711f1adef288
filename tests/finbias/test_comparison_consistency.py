"""Every "ours" cell of paper_vs_ours_finbias_table{4..8} is the cell our own Tables 4-8 print.

A run's stage 04 (Tables 4-7), a Table 8 as stage 05 writes it, and stage 06's comparisons are
produced on a corpus where a third of the answers do not parse, so the parsed-only rate and
Fin-Bias Eq. 1 (all N) differ in almost every cell; the check reads the written files back.
Seeded fault: the comparison reads the parsed-only rate -> the check and stage 06 fail.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from finlib.core import compare
from finlib.core.artifacts import write_frame
from finlib.core.tables import write_table
from finlib.finbias.figures import stage as figures
from finlib.finbias.scoring import compare as finbias_compare
from finlib.finbias.scoring import consistency
from finlib.finbias.scoring import stage as scoring
from finlib.finbias.scoring.metrics import (
    ACCURACY,
    ACCURACY_PARSED,
    HERDING,
    HERDING_PARSED,
    eq1_by_sector,
    eq1_rate,
    metrics_long,
)
from finlib.finbias.vocab import POOLED, SECTORS

MODELS = ("gpt-4.1", "qwen2-7b-it")          # registry names with a paper row (GPT-4, Qwen2-7B-it)
CONDS = ("original", "no_rating", "fake_rating", "no_opinion")
REPLIES = ('{"answer": "bullish"}', '{"answer": "neutral"}', '{"answer": "bearish"}', "I cannot tell.")
RATINGS = ("bullish", "neutral", "bearish")


def corpus(seed: int = 3, n_reports: int = 60) -> tuple[pd.DataFrame, ...]:
    """Predictions, conditions, labels and reports; ~1/3 of replies unparseable, unevenly by model."""
    rng = np.random.default_rng(seed)
    reports = pd.DataFrame({"report_id": [f"r{i}" for i in range(n_reports)],
                            "ticker": [f"T{i % 25}" for i in range(n_reports)],
                            "company": [f"C{i % 25}" for i in range(n_reports)],
                            "sector": [SECTORS[i % 3] for i in range(n_reports)],
                            "analyst_rating": rng.choice(RATINGS, n_reports)})
    labels = pd.DataFrame({"report_id": reports["report_id"], "label": rng.choice(RATINGS, n_reports),
                           "car": 0.0, "excluded_reason": None})
    cond, preds = [], []
    for r, a in zip(reports["report_id"], reports["analyst_rating"]):
        for c in CONDS:
            fake = rng.choice([x for x in RATINGS if x != a]) if c == "fake_rating" else None
            cond.append({"item_id": f"{r}:{c}", "report_id": r, "condition": c, "text": "t", "analyst_rating": a,
                         "fake_rating": fake, "reference_rating": fake or a, "status": "ok", "skip_reason": None})
    base = {"input_tokens": 1, "output_tokens": 1, "cost_usd": 0.0, "latency_s": 0.0, "truncated": False,
            "cache_key": "k", "p_bullish": np.nan, "p_neutral": np.nan, "p_bearish": np.nan, "status": "ok",
            "error": None, "mode": "generate"}
    for j, model in enumerate(MODELS):
        unparsed = 0.2 + 0.25 * j
        for row in cond:
            p = [(1 - unparsed) / 3] * 3 + [unparsed]
            preds.append({**base, "item_id": row["item_id"], "report_id": row["report_id"],
                          "condition": row["condition"], "model": model, "raw_text": rng.choice(REPLIES, p=p)})
    return pd.DataFrame(preds), pd.DataFrame(cond), labels, reports


def write_table8(cfg, rows: pd.DataFrame, seed: int = 5) -> None:
    """A Table 8 as stage 05 writes it: base and a tuned copy (answers reshuffled) of qwen2-7b-it."""
    from finlib.finbias.dpo import evaluate as ev

    rng = np.random.default_rng(seed)
    base = rows[(rows["model"] == "qwen2-7b-it") & (rows["condition"] == "original")]
    tuned = base.assign(model="qwen2-7b-it" + ev.DPO_SUFFIX, answer=rng.permutation(base["answer"].to_numpy()))
    tuned = tuned.assign(parsed=tuned["answer"].notna())
    m = metrics_long(pd.concat([base, tuned], ignore_index=True), reps=20, seed=1)
    write_frame(cfg, figures.DPO_METRICS, m)
    t8 = ev.table8(m.assign(measure=ev.GENERATED, test_part=ev.WHOLE), pd.DataFrame(), ["qwen2-7b-it"])
    write_table(cfg, "table8_accuracy_dpo", t8, "Table 8")


@pytest.fixture()
def run(tmp_run):
    pred, cond, labels, reports = corpus()
    for name, df in (("predictions", pred), ("conditions", cond), ("labels", labels), ("reports", reports)):
        write_frame(tmp_run, name, df)
    tmp_run.params["scoring"]["bootstrap_reps"] = 20
    res = scoring.run(tmp_run)
    write_table8(tmp_run, res.rows)
    return tmp_run, res


def paper_names(cfg) -> dict[str, str]:
    return figures.FigureSet(cfg).paper_names()


def test_every_comparison_cell_is_our_tables_cell(run):
    cfg, res = run
    m = res.metrics[(res.metrics["sector"] == POOLED) & (res.metrics["model"] != "Analyst")]
    m = m.set_index(["model", "condition", "metric"])["value"].astype(float)
    # the corpus separates the two statistics: a check that compared parsed-only with itself would show it
    assert (m.xs(HERDING, level="metric") - m.xs(HERDING_PARSED, level="metric")).abs().min() > 0.02
    assert (m.xs(ACCURACY, level="metric") - m.xs(ACCURACY_PARSED, level="metric")).abs().min() > 0.02
    figures.FigureSet(cfg).write_comparisons()          # runs the check; raises on any disagreement
    check = consistency.comparison_consistency(cfg.tables_dir, paper_names(cfg))
    per_table = check.groupby("table").size()
    for key in ("finbias_table4", "finbias_table5", "finbias_table6", "finbias_table7", "finbias_table8"):
        assert per_table.get(key, 0) >= 4, (key, per_table.to_dict())      # >= 3 sectors + Average
    assert check["agrees"].all(), check[~check["agrees"]].head()
    assert check["table_cell"].notna().all()
    # the Average cell of Table 4 "with rating" is the pooled Eq. 1 rate
    cmp = compare.read_comparisons(cfg)
    avg = cmp[(cmp["table"] == "finbias_table4") & (cmp["column"] == "with_rating") & (cmp["row"] == "GPT-4 | Average")]
    assert avg["ours"].item() == pytest.approx(100 * m[("gpt-4.1", "original", HERDING)])


def test_a_comparison_reading_parsed_only_rates_is_caught(run, monkeypatch):
    cfg, _ = run
    real = finbias_compare.finbias_views

    def parsed_only():
        swap = {HERDING: HERDING_PARSED, ACCURACY: ACCURACY_PARSED}
        return tuple(finbias_compare.MetricView(v.paper_key, v.column, swap[v.metric], v.condition) for v in real())

    monkeypatch.setattr(finbias_compare, "finbias_views", parsed_only)
    with pytest.raises(ValueError, match="disagrees with our own tables"):
        figures.FigureSet(cfg).write_comparisons()
    bad = consistency.disagreements(cfg.tables_dir, paper_names(cfg))
    assert set(bad["table"]) == {"finbias_table4", "finbias_table5", "finbias_table6", "finbias_table7"}


def test_a_table8_comparison_from_parsed_only_accuracy_is_caught(run, monkeypatch):
    cfg, _ = run
    real = figures.dpo_accuracy

    def parsed_only(dpo_metrics: pd.DataFrame) -> pd.DataFrame:
        m = dpo_metrics[dpo_metrics["metric"] != ACCURACY].replace({"metric": {ACCURACY_PARSED: ACCURACY}})
        return real(m)

    monkeypatch.setattr(figures, "dpo_accuracy", parsed_only)
    with pytest.raises(ValueError, match="disagrees with our own tables"):
        figures.FigureSet(cfg).write_comparisons()
    bad = consistency.disagreements(cfg.tables_dir, paper_names(cfg))
    assert set(bad["table"]) == {"finbias_table8"}


def test_printed_cells_are_read_part_by_part():
    assert consistency.cell_number("82.0/70.2**", 0) == 82.0
    assert consistency.cell_number("82.0/70.2**", 1) == 70.2
    assert np.isnan(consistency.cell_number("skipped/70.2", 0))
    assert np.isnan(consistency.cell_number("–", 0)) and np.isnan(consistency.cell_number(np.nan, 0))


def test_eq1_helpers_agree_with_metrics_long():
    pred, cond, labels, reports = corpus(seed=11, n_reports=30)
    rows = scoring.score_frame(pred, cond, labels, reports).rows
    direct = eq1_by_sector(rows, HERDING).set_index(["model", "condition", "sector"])["value"]
    long = metrics_long(rows, reps=10, seed=1)
    long = long[(long["metric"] == HERDING) & long["sector"].isin([*SECTORS[:3], POOLED])]
    long = long.set_index(["model", "condition", "sector"])["value"]
    assert np.allclose(direct.reindex(long.index).to_numpy(), long.to_numpy())
    # by hand: hits / all rows with a target, an unparsed answer counting as no match
    one = rows[(rows["model"] == "gpt-4.1") & (rows["condition"] == "original")]
    hand = float((one["answer"] == one["reference_rating"]).sum()) / len(one)
    assert eq1_rate(one["answer"], one["reference_rating"]) == pytest.approx(hand)
