"""Stage 04 metrics on a hand-made fixture whose every number is worked out in comments.

Five reports, two generate-mode answers per condition written as text, one label-scored model
with hand-picked probabilities; no_opinion is skipped (lexicon unavailable).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import entropy

from finlib.finbias.scoring import stage as scoring
from finlib.finbias.scoring.metrics import confusion, kl_divergence, macro_f1, metrics_long, paired_rows, paired_tests
from finlib.finbias.scoring.paper_layout import (
    AVERAGE,
    OURS,
    PAPER,
    TABLE_SPECS,
    averaging_note,
    build_table,
    index_cells,
    paper_row_name,
    paper_rows,
    printed_average_agreement,
)
from finlib.finbias.vocab import SECTORS

NAN = np.nan
# report, ticker, sector, analyst rating, return-based label
REPORTS = [
    ("r1", "T1", "Technology", "bullish", "bullish"),
    ("r2", "T1", "Technology", "bearish", "neutral"),
    ("r3", "T2", "Energy", "neutral", "neutral"),
    ("r4", "T3", "Energy", "bullish", "bearish"),
    ("r5", "T4", "Utilities", None, "bullish"),
]
FAKES = {"r1": "neutral", "r2": "bullish", "r3": "bearish", "r4": "neutral"}
GEN = {  # model "gen", free text
    "original": {
        "r1": '{"answer": "bullish"}',
        "r2": "Answer: Bearish",
        "r3": "bullish or neutral",
        "r4": '{"answer": "Buy"}',
        "r5": "Neutral.",
    },
    "no_rating": {
        "r1": "Bearish",
        "r2": '{"answer": "bearish"}',
        "r3": "my rating is **neutral**",
        "r4": "I cannot tell.",
        "r5": "Answer: bullish",
    },
    "fake_rating": {
        "r1": '{"answer": "neutral"}',
        "r2": "Bearish",
        "r3": "Final answer: bearish",
        "r4": '{"reason": "The outlook',
    },
}
SCORE = {  # model "sc", label probabilities (bullish, neutral, bearish); None = inference error
    "original": {
        "r1": (0.6, 0.3, 0.1),
        "r2": (0.2, 0.2, 0.6),
        "r3": (0.4, 0.4, 0.2),
        "r4": (0.5, 0.3, 0.2),
        "r5": (0.1, 0.8, 0.1),
    },
    "no_rating": {
        "r1": (0.5, 0.25, 0.25),
        "r2": (0.5, 0.25, 0.25),
        "r3": (0.2, 0.6, 0.2),
        "r4": None,
        "r5": (0.3, 0.3, 0.4),
    },
}


def frames():
    reports = pd.DataFrame(
        [{"report_id": r, "ticker": t, "company": t, "sector": s, "analyst_rating": a} for r, t, s, a, _ in REPORTS]
    )
    labels = pd.DataFrame(
        [{"report_id": r, "label": lab, "car": 0.0, "excluded_reason": None} for r, *_, lab in REPORTS]
    )
    cond = []
    for r, _, _, a, _ in REPORTS:
        for c in ("original", "no_rating", "no_opinion"):
            cond.append(
                {
                    "item_id": f"{r}:{c}",
                    "report_id": r,
                    "condition": c,
                    "text": "t",
                    "analyst_rating": a,
                    "fake_rating": None,
                    "reference_rating": a,
                    "status": "skipped" if c == "no_opinion" else "ok",
                    "skip_reason": "lexicon unavailable" if c == "no_opinion" else None,
                }
            )
        if r in FAKES:
            cond.append(
                {
                    "item_id": f"{r}:fake_rating",
                    "report_id": r,
                    "condition": "fake_rating",
                    "text": "t",
                    "analyst_rating": a,
                    "fake_rating": FAKES[r],
                    "reference_rating": FAKES[r],
                    "status": "ok",
                    "skip_reason": None,
                }
            )
    conditions = pd.DataFrame(cond)
    preds = []
    base = {
        "input_tokens": 1,
        "output_tokens": 1,
        "cost_usd": 0.0,
        "latency_s": 0.0,
        "truncated": False,
        "cache_key": "k",
    }
    for row in cond:
        c, r = row["condition"], row["report_id"]
        skipped = row["status"] == "skipped"
        preds.append(
            {
                **base,
                "item_id": row["item_id"],
                "report_id": r,
                "condition": c,
                "model": "gen",
                "mode": "generate",
                "raw_text": None if skipped else GEN[c][r],
                "p_bullish": NAN,
                "p_neutral": NAN,
                "p_bearish": NAN,
                "status": "skipped" if skipped else "ok",
                "error": None,
            }
        )
        if c in SCORE:
            p = SCORE[c][r]
            preds.append(
                {
                    **base,
                    "item_id": row["item_id"],
                    "report_id": r,
                    "condition": c,
                    "model": "sc",
                    "mode": "score",
                    "raw_text": None,
                    "p_bullish": NAN if p is None else p[0],
                    "p_neutral": NAN if p is None else p[1],
                    "p_bearish": NAN if p is None else p[2],
                    "status": "error" if p is None else "ok",
                    "error": "timeout" if p is None else None,
                }
            )
    return pd.DataFrame(preds), conditions, labels, reports


@pytest.fixture(scope="module")
def result():
    return scoring.score_all(*frames(), reps=50, seed=7)


def value(res, model, cond, metric, sector=scoring.POOLED, col="value"):
    m = res.metrics
    hit = m[(m.model == model) & (m.condition == cond) & (m.metric == metric) & (m.sector == sector)]
    assert len(hit) == 1, (model, cond, metric, sector, len(hit))
    return hit[col].iloc[0]


# ------------------------------------------------------------------- primitives


def primitive_rows(ans: list, ref: list, model: str = "m") -> pd.DataFrame:
    """Rows in the shape `metrics_long` reads, one firm per row, all in one sector."""
    n = len(ans)
    return pd.DataFrame(
        {
            "model": model,
            "condition": "original",
            "mode": "generate",
            "ticker": [f"T{i}" for i in range(n)],
            "sector": "Energy",
            "answer": pd.Series(ans, dtype=object),
            "parsed": pd.Series(ans, dtype=object).notna(),
            "reference_rating": pd.Series(ref, dtype=object),
            "label": pd.Series(ref, dtype=object),
            "p_bullish": NAN,
            "p_neutral": NAN,
            "p_bearish": NAN,
        }
    )


def pooled(rows: pd.DataFrame, metric: str) -> float:
    m = metrics_long(rows, reps=20, seed=1)
    hit = m[(m.metric == metric) & (m.sector == scoring.POOLED)]
    return hit["value"].iloc[0] if len(hit) else "absent"


def test_herding_and_accuracy_by_hand_through_the_pipeline_specs():
    rows = primitive_rows(["bullish", None, "neutral", "bearish"], ["bullish", "bullish", "bearish", None])
    assert pooled(rows, "herding_parsed") == pytest.approx(1 / 2)  # parsed with ref: rows 0, 2
    assert pooled(rows, "herding") == pytest.approx(1 / 3)  # rows with ref: 0, 1, 2
    assert pooled(rows, "accuracy_parsed") == pytest.approx(1 / 2)  # label = ref here
    assert pooled(rows, "accuracy") == pytest.approx(1 / 3)
    none = primitive_rows([None, None], ["bullish", "neutral"])
    assert np.isnan(pooled(none, "herding_parsed"))  # all unparsed: NaN, not 0
    assert pooled(none, "herding") == 0.0


def test_confusion_and_macro_f1_by_hand():
    ans = pd.Series(["bullish", "bullish", "neutral", "bullish", None])
    lab = pd.Series(["bullish", "neutral", "neutral", "bearish", "bearish"])
    conf = confusion(ans, lab)
    assert conf.loc["bullish", "bullish"] == 1 and conf.loc["neutral", "bullish"] == 1
    assert conf.loc["bearish", "bullish"] == 1 and conf.to_numpy().sum() == 4  # unparsed row left out
    # F1 bull = 2*1/(1+3) = .5, neutral = 2*1/(2+1) = 2/3, bearish = 0 (support 1, predicted 0)
    assert macro_f1(ans, lab) == pytest.approx((0.5 + 2 / 3 + 0) / 3)


def test_kl_divergence_against_scipy():
    p, q = np.array([[0.6, 0.3, 0.1]]), np.array([[0.5, 0.25, 0.25]])
    assert kl_divergence(p, q)[0] == pytest.approx(entropy(p[0], q[0]))
    assert kl_divergence(p, p)[0] == pytest.approx(0.0)


# ------------------------------------------------------------------- the fixture


def test_skipped_condition_is_set_aside_with_reason(result):
    assert "no_opinion" not in set(result.rows.loc[result.rows.model != "Analyst", "condition"])
    assert result.report["skipped"] and all(s["reason"] == "lexicon unavailable" for s in result.report["skipped"])
    # sc/no_rating/r4 failed at the server: not answered, outside N, counted apart from unparsed
    assert result.report["not_answered"] == 1
    assert result.report["not_answered_by_error"] == [
        {"model": "sc", "condition": "no_rating", "error": "timeout", "n": 1}
    ]
    assert not (
        (result.rows.model == "sc") & (result.rows.condition == "no_rating") & (result.rows.report_id == "r4")
    ).any()


def test_generate_model_original(result):
    assert value(result, "gen", "original", "parse_rate") == pytest.approx(4 / 5)  # r3 hedged
    assert value(result, "gen", "original", "herding_parsed") == pytest.approx(3 / 3)  # r1, r2, r4 herd
    assert value(result, "gen", "original", "herding_parsed", col="n") == 3
    assert value(result, "gen", "original", "herding_parsed", col="parse_rate") == pytest.approx(3 / 4)
    assert value(result, "gen", "original", "herding") == pytest.approx(3 / 4)
    assert value(result, "gen", "original", "accuracy_parsed") == pytest.approx(1 / 4)  # only r1 right
    assert value(result, "gen", "original", "accuracy") == pytest.approx(1 / 5)


def test_pooled_differs_from_mean_of_sectors(result):
    # accuracy: Technology 1/2, Energy 0/1 (r3 unparsed), Utilities 0/1
    assert value(result, "gen", "original", "accuracy_parsed", "Technology") == pytest.approx(0.5)
    assert value(result, "gen", "original", "accuracy_parsed", "Energy") == pytest.approx(0.0)
    assert value(result, "gen", "original", "accuracy_parsed", scoring.SECTOR_MEAN) == pytest.approx(0.5 / 3)
    assert value(result, "gen", "original", "accuracy_parsed", scoring.POOLED) == pytest.approx(0.25)


def test_empty_sector_is_nan_with_zero_n(result):
    assert np.isnan(value(result, "gen", "original", "herding_parsed", "Healthcare"))
    assert value(result, "gen", "original", "herding_parsed", "Healthcare", col="n") == 0
    # Utilities' only report has no analyst rating: no herding rows there at all
    assert np.isnan(value(result, "gen", "original", "herding_parsed", "Utilities"))


def test_all_unparsed_group_is_nan_not_zero(result):
    # fake_rating in Energy: r3 parsed (bearish = fake), r4 cut off -> 1/1; no_rating Energy: r4 unparsed
    assert value(result, "gen", "fake_rating", "herding_parsed", "Energy") == pytest.approx(1.0)
    sub = metrics_long(result.rows[(result.rows.model == "gen") & (result.rows.report_id == "r4")], reps=20, seed=1)
    h = sub[(sub.condition == "no_rating") & (sub.metric == "herding_parsed") & (sub.sector == scoring.POOLED)]
    assert np.isnan(h["value"].iloc[0]) and h["parse_rate"].iloc[0] == 0.0
    ha = sub[(sub.condition == "no_rating") & (sub.metric == "herding") & (sub.sector == scoring.POOLED)]
    assert ha["value"].iloc[0] == 0.0


def test_generate_model_no_rating_and_fake(result):
    assert value(result, "gen", "no_rating", "herding_parsed") == pytest.approx(2 / 3)  # r2, r3 of r1-r3
    assert value(result, "gen", "no_rating", "accuracy_parsed") == pytest.approx(2 / 4)  # r3, r5
    assert value(result, "gen", "no_rating", "herding_parsed", "Technology") == pytest.approx(1 / 2)
    assert value(result, "gen", "fake_rating", "herding_parsed") == pytest.approx(2 / 3)  # r1, r3 follow the fake
    assert value(result, "gen", "fake_rating", "parse_rate") == pytest.approx(3 / 4)


def test_score_model_argmax_tie_and_error(result):
    # original: r3 ties 0.4/0.4 -> unparsed (inside N); no_rating: r4 server error -> not answered (outside N)
    assert value(result, "sc", "original", "parse_rate") == pytest.approx(4 / 5)
    assert value(result, "sc", "no_rating", "parse_rate") == pytest.approx(4 / 4)
    assert value(result, "sc", "no_rating", "accuracy", col="n") == 4
    # original answers r1 bull, r2 bear, r4 bull vs analyst -> all herd
    assert value(result, "sc", "original", "herding_parsed") == pytest.approx(1.0)
    # shares of parsed answers: bull r1 r4, bear r2, neutral r5
    assert value(result, "sc", "original", "share_bullish") == pytest.approx(2 / 4)


def test_probability_level_herding(result):
    # p on the analyst rating: r1 .6 (bull), r2 .6 (bear), r3 .4 (neutral), r4 .5 (bull); r5 has none
    assert value(result, "sc", "original", "prob_herding") == pytest.approx((0.6 + 0.6 + 0.4 + 0.5) / 4)
    assert value(result, "sc", "original", "prob_herding", col="n") == 4


def test_kl_between_conditions(result):
    pairs = [
        ("r1", (0.6, 0.3, 0.1), (0.5, 0.25, 0.25)),
        ("r2", (0.2, 0.2, 0.6), (0.5, 0.25, 0.25)),
        ("r3", (0.4, 0.4, 0.2), (0.2, 0.6, 0.2)),
        ("r5", (0.1, 0.8, 0.1), (0.3, 0.3, 0.4)),
    ]
    expected = np.mean([entropy(p, q) for _, p, q in pairs])  # r4 has no no_rating probs
    assert value(result, "sc", "original||no_rating", "kl_divergence") == pytest.approx(expected)


def test_analyst_baseline(result):
    # analyst vs label: r1 right, r2 wrong, r3 right, r4 wrong; r5 has no rating (unparsed)
    assert value(result, "Analyst", "original", "accuracy_parsed") == pytest.approx(2 / 4)
    assert value(result, "Analyst", "original", "accuracy_parsed", col="parse_rate") == pytest.approx(4 / 5)


def test_macro_f1_in_metrics(result):
    # gen/original parsed & labelled: r1 bull->bull, r2 neutral->bear, r4 bear->bull, r5 bull->neutral
    ans = pd.Series(["bullish", "bearish", "bullish", "neutral"])
    lab = pd.Series(["bullish", "neutral", "bearish", "bullish"])
    assert value(result, "gen", "original", "macro_f1") == pytest.approx(macro_f1(ans, lab))
    # by hand: bull tp1 support2 pred2 -> .5; neutral 0; bearish 0 -> 1/6
    assert value(result, "gen", "original", "macro_f1") == pytest.approx(1 / 6)


def test_cis_bracket_the_estimate(result):
    m = result.metrics.dropna(subset=["ci_low"])
    assert len(m) > 0
    assert ((m.ci_low <= m.value + 1e-12) & (m.value <= m.ci_high + 1e-12)).all()


def test_fake_transitions(result):
    t = result.transitions[result.transitions.model == "gen"]
    row = t[(t.analyst_rating == "bullish") & (t.fake_rating == "neutral")].set_index("answer")
    assert row.loc["neutral", "n"] == 1 and row.loc["unparsed", "n"] == 1  # r1 and r4
    assert row.loc["neutral", "share"] == pytest.approx(0.5)
    assert (row["parse_rate"] == 0.5).all()  # 1 of r1, r4 parsed
    other = t[(t.analyst_rating == "bearish") & (t.fake_rating == "bullish")]  # r2 -> "Bearish"
    assert list(other["parse_rate"]) == [1.0]


def test_confusion_table_has_n_and_parse_rate(result):
    c = result.confusion
    # gen / no_rating: label bullish rows r1 ("Bearish") and r5 ("Answer: bullish"): both parsed;
    # label bearish: r4 ("I cannot tell.") unparsed
    g = c[(c.model == "gen") & (c.condition == "no_rating")].set_index("label")
    assert (g.loc["bullish", "n"], g.loc["bullish", "parse_rate"]) == (2, 1.0)
    assert (g.loc["bearish", "n"], g.loc["bearish", "parse_rate"]) == (1, 0.0)
    assert g.loc["bearish", ["bullish", "neutral", "bearish"]].sum() == 0


def test_paired_mcnemar_pairs(result):
    t = result.tests
    h = t[(t.test == "herding_with_vs_without") & (t.model == "gen") & (t.sector == scoring.POOLED)].iloc[0]
    # every pair with a reference, unparsed = no match (Eq. 1): r1 (herd -> not), r2 (herd -> herd),
    # r3 (unparsed -> herd), r4 (herd -> unparsed); r5 has no analyst rating
    assert (h.n_pairs, h.only_a, h.only_b, h.pvalue) == (4, 2, 1, 1.0)
    assert (h.rate_a, h.rate_b) == (pytest.approx(3 / 4), pytest.approx(2 / 4))  # the Eq. 1 rates on the pairs
    f = t[(t.test == "fake_herding_fake_vs_original") & (t.model == "gen") & (t.sector == scoring.POOLED)].iloc[0]
    # the fake followed by r1 (neutral) and r3 (bearish, unparsed on the original) -> only_a; r2, r4 neither
    assert (f.n_pairs, f.only_a, f.only_b) == (4, 2, 0)
    assert set(t.loc[t.test.str.startswith("answer_shift"), "method"]) == {"Stuart-Maxwell"}


# ------------------------------------------------------------------- tables


def test_table4_cells_and_paper_block(result):
    t = result.tables["table4_herding_with_without"]
    gen = t[(t.Source == OURS) & (t.Model == "gen")].iloc[0]
    assert gen["Technology"].startswith("100.0/50.0")
    assert gen["Healthcare"] == "–/–"
    # Eq. 1: all answered rows with a reference rating (r1-r4), the hedged r3 counting as no match
    assert gen["N"] == "4/4" and gen["Not answered"] == "0/0" and gen["Parse rate %"] == "75.0/75.0"
    assert gen[AVERAGE].startswith("75.0/50.0")  # original 3/4 herd; no_rating r2, r3 of 4
    assert gen["Group"] == "Not in the paper" and gen["Registry name"] == "gen"
    parsed = result.tables["table4_herding_with_without_parsed"]
    pgen = parsed[(parsed.Source == OURS) & (parsed.Model == "gen")].iloc[0]
    assert pgen["N"] == "3/3" and pgen[AVERAGE].startswith("100.0/66.7")
    paper = t[t.Source == PAPER]
    assert len(paper) == 19
    assert paper.set_index("Model").loc["GPT-5", "Communication Services"] == "82.7/70.2"
    assert paper.set_index("Model").loc["GPT-5", AVERAGE] == "94.6/87.4"
    assert list(dict.fromkeys(paper["Group"])) == ["Private Models", "Open-Source Models"]


def test_table4_pooled_interval_column(result):
    t = result.tables["table4_herding_with_without"]
    col = [c for c in t.columns if c.startswith(scoring.POOLED) and c.endswith("CI")]
    assert col == [f"{scoring.POOLED} 95 % CI"]
    gen = t[(t.Source == OURS) & (t.Model == "gen")].iloc[0][col[0]]
    lo_hi = [tuple(float(x) for x in part.strip("[]").split(", ")) for part in gen.split("/")]
    assert len(lo_hi) == 2  # with / without
    for (lo, hi), cond in zip(lo_hi, ("original", "no_rating")):
        v = 100 * value(result, "gen", cond, "herding")
        assert lo <= v + 0.05 and v - 0.05 <= hi and lo <= hi
    for spec in TABLE_SPECS:
        assert col[0] in result.tables[spec.name].columns


def test_table5_paper_keeps_printed_decimals(result):
    t = result.tables["table5_herding_fake"]
    assert t[t.Source == PAPER].set_index("Model").loc["GPT-5", "Communication Services"] == "50.00"


def test_table6_has_analyst_rows(result):
    t = result.tables["table6_accuracy_with_without"]
    ours = t[(t.Model == "Analyst") & (t.Source != PAPER)]
    assert ours.iloc[0][AVERAGE] == "40.0"  # Eq. 1: 2 right of 5 labelled (r5 has no rating)
    parsed = result.tables["table6_accuracy_with_without_parsed"]
    assert parsed[(parsed.Model == "Analyst") & (parsed.Source != PAPER)].iloc[0][AVERAGE] == "50.0"
    assert (t.Source == PAPER).any() and "Analyst" in set(t.loc[t.Source == PAPER, "Model"])


def test_every_registry_paper_model_maps_to_a_row_of_tables_4_to_7():
    from pathlib import Path

    from finlib.llm.registry import load_registry

    reg = load_registry(Path(__file__).resolve().parents[2] / "params" / "models.yaml")
    t4 = {m.lower() for m in paper_rows(TABLE_SPECS[0])["Model"]}
    # paper_name also names rows of other papers (BizFinBench records): keep the Fin-Bias ones
    names = {n: s.paper_name for n, s in reg.items() if s.paper_name and s.paper_name.lower() in t4}
    assert len(names) == 19
    for spec in TABLE_SPECS:
        rows = list(paper_rows(spec)["Model"])
        mapped = {m: paper_row_name(m, names, rows) for m in names}
        assert None not in mapped.values(), (spec.name, [m for m, r in mapped.items() if r is None])
        assert len(set(mapped.values())) == 19  # one-to-one
    t7 = list(paper_rows(TABLE_SPECS[3])["Model"])
    assert paper_row_name("mistral-7b-it-v0.3 [score]", names, t7) == "Mistral-7B-It-v0.3"
    assert paper_row_name("gpt-5.1", names, t7) == "GPT-5"
    assert paper_row_name("smollm2-135m", names, t7) is None


def test_table_notes_point_at_the_paper_row_via_the_registry():
    from types import SimpleNamespace

    pred, cond, labels, reports = frames()
    pred = pred.assign(model=pred.model.map({"gen": "gpt-5.1", "sc": "smollm2-135m"}))
    reg = {
        "gpt-5.1": SimpleNamespace(paper_name="GPT-5", plumbing=False),
        "smollm2-135m": SimpleNamespace(paper_name=None, plumbing=True),
    }
    res = scoring.score_all(pred, cond, labels, reports, reps=10, seed=1, registry=reg)
    t = res.tables["table4_herding_with_without"]
    ours = t[t.Source == OURS].set_index("Registry name")
    assert "in the paper as 'GPT-5'" in ours.loc["gpt-5.1", "Notes"]
    assert (ours.loc["gpt-5.1", "Model"], ours.loc["gpt-5.1", "Group"]) == ("GPT-5", "Private Models")
    assert "paper" not in ours.loc["smollm2-135m", "Notes"]
    assert ours.loc["smollm2-135m", "Model"] == "smollm2-135m"
    assert list(ours.index) == ["gpt-5.1", "smollm2-135m"]  # printed groups first, then ours only
    assert ours.loc["smollm2-135m", "Not answered"] == "0/1"  # the server error, outside N
    assert res.plumbing == ("smollm2-135m",)


def test_plumbing_banner_quotes_this_runs_numbers(result):
    from types import SimpleNamespace

    res = scoring.ScoringResult(
        result.rows,
        result.metrics,
        result.tests,
        result.tables,
        result.transitions,
        result.confusion,
        result.report,
        plumbing=("sc",),
    )
    text = scoring.summary(SimpleNamespace(is_synthetic=False), res)
    # sc original: p_bullish .6 .2 .4 .5 .1 -> mean 0.36; answers bullish, bearish, (tie), bullish,
    # neutral -> 2 of 4 parsed bullish; no_rating: .5 .5 .2 .3 (error row NaN) -> 0.375 ≈ 0.38
    assert "original: mean p_bullish 0.36, bullish answers 50 %, parsed 80 % of 5" in text
    assert "no_rating: mean p_bullish 0.38" in text
    assert "0.96" not in text and "gen" not in text
    none = scoring.ScoringResult(
        *[getattr(result, f) for f in ("rows", "metrics", "tests", "tables", "transitions", "confusion", "report")]
    )
    assert scoring.summary(SimpleNamespace(is_synthetic=False), none) == "(real data, no plumbing model)"


def test_herding_no_opinion_vs_no_rating_is_tested_and_marked_in_table7():
    # four reports, four firms; analyst ratings = reference; model herds on no_rating for r1-r3
    # and on no_opinion only for r1: pairs (a=no_opinion, b=no_rating) -> only_b = 2 (r2, r3)
    rows = []
    ans = {
        "no_rating": ["bullish", "bearish", "neutral", "neutral"],
        "no_opinion": ["bullish", "neutral", "bullish", None],
    }
    for cond, answers in ans.items():
        for i, (a, ref) in enumerate(zip(answers, ["bullish", "bearish", "neutral", "bullish"])):
            rows.append(
                {
                    "model": "m",
                    "condition": cond,
                    "mode": "generate",
                    "report_id": f"r{i}",
                    "ticker": f"T{i}",
                    "sector": "Energy",
                    "answer": a,
                    "parsed": a is not None,
                    "reference_rating": ref,
                    "label": "bullish",
                    "p_bullish": NAN,
                    "p_neutral": NAN,
                    "p_bearish": NAN,
                }
            )
    rows = pd.DataFrame(rows)
    tests = paired_tests(rows)
    h = tests[(tests.test == "herding_no_opinion_vs_no_rating") & (tests.sector == scoring.POOLED)].iloc[0]
    assert (h.n_pairs, h.only_a, h.only_b) == (4, 0, 2)  # r3: unparsed on no_opinion = no match
    assert h.pvalue == pytest.approx(0.5)  # exact binomial: 2 * 0.5**2
    assert (h.rate_a, h.rate_b) == (pytest.approx(1 / 4), pytest.approx(3 / 4))  # Eq. 1 over the 4 pairs
    spec = TABLE_SPECS[3]
    assert spec.extra_test == "herding_no_opinion_vs_no_rating"
    metrics = metrics_long(rows, reps=10, seed=1)
    t7 = build_table(spec, metrics, tests, rows, pd.DataFrame())
    # Table 7 prints 2 decimals; Holm p 0.5: no marker
    assert t7.set_index("Model").loc["m", spec.extra_label] == "25.00/75.00 (pairs 4)"


def test_table7_skipped_not_zero(result):
    t = result.tables["table7_accuracy_no_opinion"]
    gen = t[(t.Source == OURS) & (t.Model == "gen")].iloc[0]
    assert all(gen[s] == "skipped" for s in SECTORS)
    assert "lexicon unavailable" in gen["Notes"]


# ------------------------------------------------------------------- bad input


def test_bad_rating_value_names_file_row_and_field():
    pred, cond, labels, reports = frames()
    cond.loc[3, "reference_rating"] = "Buy"
    with pytest.raises(ValueError, match=r"conditions\.parquet row 3: field 'reference_rating'"):
        scoring.score_frame(pred, cond, labels, reports)


def test_prediction_for_unknown_item_is_an_error():
    pred, cond, labels, reports = frames()
    pred.loc[0, "item_id"] = "nope:original"
    with pytest.raises(ValueError, match="not in conditions"):
        scoring.score_frame(pred, cond, labels, reports)


def test_missing_column_is_named():
    pred, cond, labels, reports = frames()
    with pytest.raises(ValueError, match=r"predictions\.parquet: missing column\(s\) \['raw_text'\]"):
        scoring.score_frame(pred.drop(columns="raw_text"), cond, labels, reports)


# ------------------------------------------------------------------- the stage on disk


def test_run_writes_metrics_and_tables(tmp_run):
    from finlib.core.artifacts import read_frame, write_frame

    pred, cond, labels, reports = frames()
    for name, df in (("predictions", pred), ("conditions", cond), ("labels", labels), ("reports", reports)):
        write_frame(tmp_run, name, df)
    res = scoring.run(tmp_run)
    metrics = read_frame(tmp_run, "metrics")
    assert list(metrics.columns) == [
        "model",
        "condition",
        "sector",
        "metric",
        "value",
        "ci_low",
        "ci_high",
        "n",
        "parse_rate",
    ]
    assert len(metrics) == len(res.metrics)
    for spec in TABLE_SPECS:
        for ext in ("csv", "md", "tex"):
            assert (tmp_run.tables_dir / f"{spec.name}.{ext}").is_file()
    md = (tmp_run.tables_dir / "table4_herding_with_without.md").read_text()
    assert "Synthetic data" in md and "Mean of sectors" in md
    import matplotlib.pyplot as plt

    fig = res.figures["fig_herding_accuracy"]  # the stage's figure: saved by run, closed, shown later
    assert fig is not None and (tmp_run.figures_dir / "fig_herding_accuracy.png").is_file()
    assert fig.number not in plt.get_fignums()


def test_misspelled_scoring_key_is_an_error(tmp_run):
    from finlib.core.config import ConfigError

    tmp_run.params["scoring"]["bootstrap_rep"] = 10
    with pytest.raises(ConfigError, match="bootstrap_rep"):
        scoring.run(tmp_run)


def test_missing_scoring_key_is_an_error_not_a_default(tmp_run):
    from finlib.core.config import ConfigError

    del tmp_run.params["scoring"]["ci"]
    with pytest.raises(ConfigError, match=r"smoke\.yaml: invalid params:\n  - scoring\.ci: missing"):
        scoring.run(tmp_run)


def test_two_metric_rows_for_one_cell_is_an_error():
    row = {"model": "m", "condition": "original", "metric": "herding_parsed", "sector": "Energy", "value": 0.5}
    metrics = pd.DataFrame([row, {**row, "value": 0.7}])
    with pytest.raises(ValueError, match="more than one row for cell"):
        index_cells(metrics)
    assert index_cells(metrics.iloc[:1])[("m", "original", "herding_parsed", "Energy")]["value"] == 0.5


def test_run_flags_the_registry_plumbing_model(tmp_run):
    from finlib.core.artifacts import write_frame

    pred, cond, labels, reports = frames()
    pred = pred.assign(model=pred.model.map({"gen": "gpt-4.1", "sc": "smollm2-135m"}))
    for name, df in (("predictions", pred), ("conditions", cond), ("labels", labels), ("reports", reports)):
        write_frame(tmp_run, name, df)
    res = scoring.run(tmp_run)
    assert res.plumbing == ("smollm2-135m",)
    t6 = res.tables["table6_accuracy_with_without"]
    assert "in the paper as 'GPT-4'" in t6[t6.Source == OURS].set_index("Registry name").loc["gpt-4.1", "Notes"]
    assert set(scoring.pooled_views(res)) == {
        "table4_ci_pooled",
        "paired_tests_pooled",
        "prob_herding_kl_pooled",
        "confusion",
    }
    assert (scoring.pooled_views(res)["paired_tests_pooled"]["sector"] == scoring.POOLED).all()


def test_a_model_run_in_two_modes_is_two_rows():
    pred, cond, labels, reports = frames()
    both = pd.concat([pred[pred.model == "sc"], pred[pred.model == "sc"].assign(mode="generate", raw_text="Bullish")])
    scored = scoring.score_frame(both, cond, labels, reports)
    assert set(scored.rows.model) == {"sc [score]", "sc [generate]"}


def test_paired_difference_and_its_interval(result):
    t = result.tests
    h = t[(t.test == "herding_with_vs_without") & (t.model == "gen") & (t.sector == scoring.POOLED)].iloc[0]
    # pairs r1 (1 vs 0), r2 (1 vs 1), r3 (0 vs 1), r4 (1 vs 0): mean difference 0.25; firms T1 (r1, r2:
    # +0.5 each on average), T2 (r3: -1), T3 (r4: +1) -> the interval spans the resampled firm mixes
    assert h["diff"] == pytest.approx(0.25)
    assert h.diff_ci_low <= 0.25 <= h.diff_ci_high and h.diff_ci_low < h.diff_ci_high


def _with_second_fake():
    pred, cond, labels, reports = frames()
    extra_c = cond[cond.item_id == "r1:fake_rating"].assign(
        item_id="r1:fake_rating:bearish", fake_rating="bearish", reference_rating="bearish"
    )
    extra_p = pred[pred.item_id == "r1:fake_rating"].assign(item_id="r1:fake_rating:bearish", raw_text="Bearish")
    return pd.concat([pred, extra_p], ignore_index=True), pd.concat([cond, extra_c], ignore_index=True), labels, reports


def test_two_fakes_per_report_pair_with_the_one_original():
    rows = scoring.score_frame(*_with_second_fake()).rows
    pr = paired_rows(rows, "gen", "original", "fake_rating")
    assert len(pr) == 5  # 4 reports with a fake, r1 twice
    r1 = pr[pr.report_id == "r1"]
    assert set(r1.answer_a) == {"bullish"} and set(r1.answer_b) == {"neutral", "bearish"}
    res = scoring.score_all(*_with_second_fake(), reps=20, seed=1)
    # fake herding: r1 neutral (yes), r1 bearish (yes), r2 no, r3 yes; r4 unparsed -> 3/4
    assert value(res, "gen", "fake_rating", "herding_parsed") == pytest.approx(3 / 4)


def test_partially_skipped_condition_is_noted():
    pred, cond, labels, reports = frames()
    cond.loc[cond.item_id == "r5:no_rating", ["status", "skip_reason"]] = ["skipped", "too long"]
    res = scoring.score_all(pred, cond, labels, reports, reps=20, seed=1)
    gen = res.tables["table6_accuracy_with_without"].query("Model == 'gen'").iloc[0]
    assert "no_rating: some items skipped, too long (1)" in gen["Notes"]
    # r5 (the only correct-without-rating report besides r3) is gone: accuracy 1/3
    assert value(res, "gen", "no_rating", "accuracy_parsed") == pytest.approx(1 / 3)


def test_printed_averages_are_mostly_the_pooled_rate():
    """Measured on the published Tables 4-7 with Table 2's sector counts: the count-weighted
    (pooled) mean reproduces far more printed Averages than the plain mean of sectors."""
    a = printed_average_agreement()
    assert a["cells"] == 116  # T4 38 + T5 19 + T6 39 + T7 20
    assert a["pooled"] >= 55 and a["plain_mean"] <= 10 and a["pooled"] > 5 * a["plain_mean"]
    note = averaging_note(a)
    assert f"{a['pooled']} of its 116" in note and "pooled" in note


def test_cut_answers_are_inside_n_and_read_only_when_the_rating_is_there():
    pred, cond, labels, reports = frames()
    pred = pred.assign(truncated_output=False)
    hit = (pred.model == "gen") & (pred.item_id == "r1:original")  # '{"answer": "bullish"}'
    pred.loc[hit, "truncated_output"] = True
    res = scoring.score_all(pred, cond, labels, reports, reps=10, seed=1)
    assert value(res, "gen", "original", "herding") == pytest.approx(3 / 4)  # r1 still a match: read
    assert res.report["truncated_read"] == 1 and res.report["truncated"] == 0
    pred.loc[hit, "raw_text"] = '{"reason": "The company'  # cut before its answer
    res = scoring.score_all(pred, cond, labels, reports, reps=10, seed=1)
    assert value(res, "gen", "original", "herding") == pytest.approx(2 / 4)  # r1 no longer a match
    assert value(res, "gen", "original", "herding", col="n") == 4
    assert res.report["truncated"] == 1 and res.report["truncated_read"] == 0


def test_intervals_follow_the_seed():
    """The cluster bootstrap is drawn from the seed it is given: the same seed gives the same interval,
    another seed another one (30 firms of 4 answers, about half of them herding)."""
    rng = np.random.default_rng(0)
    n = 120
    rows = pd.DataFrame(
        {
            "model": "m",
            "condition": "original",
            "mode": "generate",
            "report_id": [f"r{i}" for i in range(n)],
            "ticker": [f"F{i // 4}" for i in range(n)],
            "sector": "Energy",
            "answer": rng.choice(["bullish", "bearish"], n),
            "parsed": True,
            "reference_rating": "bullish",
            "label": "bullish",
            "p_bullish": NAN,
            "p_neutral": NAN,
            "p_bearish": NAN,
        }
    )

    def interval(seed: int) -> tuple[float, float]:
        m = metrics_long(rows, reps=200, seed=seed)
        cell = m[(m.metric == "herding") & (m.sector == "Average (pooled)")].iloc[0]
        return float(cell["ci_low"]), float(cell["ci_high"])

    assert interval(1) == interval(1)
    assert interval(1) != interval(2)


def test_kl_metrics_cover_the_label_scored_model_only(result):
    """Called directly (the module's fixture ran stage 04 once, before this test): KL rows exist for the
    label-scored model "sc" only, pooled over r1, r2, r3, r5 as scipy's entropy gives it."""
    from finlib.finbias.scoring.metrics import kl_metrics

    kl = kl_metrics(result.rows, reps=10, seed=1, ci=0.95)
    assert set(kl["model"]) == {"sc"}
    pairs = [
        ((0.6, 0.3, 0.1), (0.5, 0.25, 0.25)),
        ((0.2, 0.2, 0.6), (0.5, 0.25, 0.25)),
        ((0.4, 0.4, 0.2), (0.2, 0.6, 0.2)),
        ((0.1, 0.8, 0.1), (0.3, 0.3, 0.4)),
    ]
    pooled = kl[(kl["condition"] == "original||no_rating") & (kl["sector"] == scoring.POOLED)]
    assert pooled["value"].iloc[0] == pytest.approx(np.mean([entropy(p, q) for p, q in pairs]))
