"""What the herding card shows, selected from stage 04's metrics and paired tests (never recomputed).

Kept apart from the run (`finlib.pipeline.card`) and the drawing (`finlib.pipeline.card_render`) so both read
one definition of the card's conditions, thresholds and selections.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from finlib.core.tables import paper_table
from finlib.finbias.conditions import CardLabels
from finlib.finbias.vocab import POOLED, SECTORS

# condition -> its label on the card: the records of the condition table with a `card_label`
CONDITIONS = CardLabels()
PUBLISHED_N = 8868  # Fin-Bias Table 2 total: every published model answered every report


def planning_half_width(n: int, z: float = 1.96) -> float:
    """Widest half-width of a 95 % interval on a share from n independent reports (p = 0.5).

    Stated before any call so the user can pick n; clustering by firm widens it, and the card prints the
    measured bootstrap width beside it.
    """
    return float(z * np.sqrt(0.25 / max(n, 1)))


def headline(metrics: pd.DataFrame, model: str) -> pd.DataFrame:
    """Pooled herding per condition (and accuracy when labelled) with interval and n, for one model."""
    m = metrics[
        (metrics["model"] == model)
        & (metrics["sector"] == POOLED)
        & metrics["metric"].isin(["herding", "accuracy", "parse_rate"])
        & metrics["condition"].isin(list(CONDITIONS))
    ]
    return m[["condition", "metric", "value", "ci_low", "ci_high", "n"]].reset_index(drop=True)


def sector_lines(metrics: pd.DataFrame, model: str, min_n: int) -> pd.DataFrame:
    """Herding by sector, only for sectors whose n reaches `min_n` (the rest are counted, not drawn).

    The card passes `figures.min_sector_n` (`finlib.finbias.figures.stage.min_sector_n`), so the card and the
    figures leave out the same sectors.
    """
    m = metrics[
        (metrics["model"] == model)
        & metrics["sector"].isin(SECTORS)
        & (metrics["metric"] == "herding")
        & metrics["condition"].isin(list(CONDITIONS))
    ]
    return m[m["n"] >= min_n][["sector", "condition", "value", "ci_low", "ci_high", "n"]].reset_index(drop=True)


def published_points() -> pd.DataFrame:
    """The paper's models on the card's axes (Tables 4 and 5, 'Average' rows), as published, with their n."""
    t4 = paper_table("finbias_table4").query("sector == 'Average'")
    t5 = paper_table("finbias_table5").query("sector == 'Average'")
    out = t4.merge(t5[["model", "herding_fake"]], on="model", how="left")
    out[["with_rating", "without_rating", "herding_fake"]] = (
        out[["with_rating", "without_rating", "herding_fake"]] / 100
    )
    return out.assign(n=PUBLISHED_N, source="published (Fin-Bias Tables 4-5)")[
        ["model", "with_rating", "without_rating", "herding_fake", "n", "source"]
    ]


def card_tests(tests: pd.DataFrame, model: str) -> pd.DataFrame:
    """The card's paired tests: with vs without the rating, fake shown vs original (pooled)."""
    keep = ["herding_with_vs_without", "fake_herding_fake_vs_original", "accuracy_with_vs_without"]
    t = tests[(tests["model"] == model) & (tests["sector"] == POOLED) & tests["test"].isin(keep)]
    return t[["test", "n_pairs", "rate_a", "rate_b", "diff", "diff_ci_low", "diff_ci_high", "pvalue", "marker"]]


def answer_sample(rows: pd.DataFrame, model: str, per_condition: int = 20) -> pd.DataFrame:
    """The answers behind each number: the first `per_condition` rows of each condition (report order)."""
    r = rows[(rows["model"] == model) & rows["condition"].isin(list(CONDITIONS))]
    cols = [c for c in ("report_id", "condition", "reference_rating", "answer", "parsed", "label") if c in r]
    return r.sort_values(["condition", "report_id"]).groupby("condition").head(per_condition)[cols]


def paired_between_cards(rows_a: pd.DataFrame, rows_b: pd.DataFrame) -> pd.DataFrame:
    """Two cards on the same reports: herding hit of A vs B per report and condition, exact McNemar."""
    from finlib.core import stats
    from finlib.finbias.scoring.metrics import eq1_values

    out = []
    for cond in CONDITIONS:
        a = rows_a[rows_a["condition"] == cond].drop_duplicates("item_id")
        b = rows_b[rows_b["condition"] == cond].drop_duplicates("item_id")
        pr = a.merge(b, on="item_id", suffixes=("_a", "_b"))
        pr = pr[pr["reference_rating_a"].notna()]
        if pr.empty:
            continue
        ha = eq1_values(pr["answer_a"], pr["reference_rating_a"])[:, 0].astype(bool)
        hb = eq1_values(pr["answer_b"], pr["reference_rating_a"])[:, 0].astype(bool)
        r = stats.mcnemar_exact(ha, hb)
        out.append(
            {
                "condition": cond,
                "n_pairs": r.n_pairs,
                "herding_a": ha.mean(),
                "herding_b": hb.mean(),
                "only_a": r.only_a,
                "only_b": r.only_b,
                "pvalue": r.pvalue,
            }
        )
    return pd.DataFrame(out)
