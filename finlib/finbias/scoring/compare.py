"""Fin-Bias Tables 2-8: which of our numbers each published column is compared with.

The joining, labelling and saving are `finlib.core.compare` (shared with BizFinBench); this module says
only where our side of each Fin-Bias table comes from, read from the tables' own specs so a comparison
takes exactly the statistic our tables print.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from finlib.core.compare import long_comparison, paper_vs_ours
from finlib.core.tables import paper_table
from finlib.finbias.vocab import POOLED, Condition


@dataclass(frozen=True)
class MetricView:
    """How one published Fin-Bias column is read from our `metrics` artifact."""

    paper_key: str
    column: str          # the paper table's value column
    metric: str          # our metric name
    condition: Condition


def finbias_views() -> tuple[MetricView, ...]:
    """One view per published column of Tables 4-7, read from the tables' own specs
    (`finlib.finbias.scoring.paper_layout.TABLE_SPECS`): the comparison takes exactly the statistic our
    Tables 4-7 print (Eq. 1 over all N, `finlib.finbias.scoring.metrics.HERDING` / `ACCURACY`), never a
    second choice of metric that could drift from them."""
    from finlib.finbias.scoring.paper_layout import TABLE_SPECS

    return tuple(MetricView(spec.paper_key, column, spec.metric, cond)
                 for spec in TABLE_SPECS for column, cond in zip(spec.paper_columns, spec.conditions))


def paper_model_rows(metrics: pd.DataFrame, paper_names: dict[str, str]) -> pd.DataFrame:
    """Our metrics rows renamed to the paper's model names (registry `paper_name`), one row per
    paper model: a model run both ways keeps its generated answers (the paper's protocol)."""
    from finlib.finbias.scoring.paper_layout import base_model

    m = metrics.copy()
    m["base"] = m["model"].map(base_model)
    m["paper_model"] = m["base"].map(lambda b: "Analyst" if b == "Analyst" else paper_names.get(b))
    m = m[m["paper_model"].notna()]
    m["rank"] = (~m["model"].str.endswith("[generate]")).astype(int)  # generate first
    keep = m.sort_values("rank").groupby("paper_model")["model"].first()
    return m[m["model"].isin(keep.to_numpy())].drop(columns=["rank"])


def finbias_metric_comparisons(metrics: pd.DataFrame, paper_names: dict[str, str]) -> pd.DataFrame:
    """Fin-Bias Tables 4-7 in the long comparison layout (percent), pooled vs the printed Average."""
    ours_all = paper_model_rows(metrics, paper_names)
    parts = []
    for view in finbias_views():
        paper = paper_table(view.paper_key)
        paper = paper[paper[view.column].notna()]
        # the analysts' accuracy is one number per sector, printed in Tables 6 and 7 alike: ours is on `original`
        wanted = np.where(ours_all["paper_model"] == "Analyst", Condition.ORIGINAL.value, view.condition.value)
        o = ours_all[(ours_all["metric"] == view.metric) & (ours_all["condition"] == wanted)]
        if "Analyst" not in set(paper["model"]):
            o = o[o["paper_model"] != "Analyst"]
        o = o.assign(sector=o["sector"].replace({POOLED: "Average"}), value=100 * o["value"])
        o = o[o["sector"].isin(set(paper["sector"]))].drop(columns=["model"]).rename(columns={"paper_model": "model"})
        cmp = paper_vs_ours(o[["model", "sector", "value"]], paper, ["model", "sector"], "value", view.column,
                            table=view.paper_key)
        parts.append(long_comparison(cmp, ["model", "sector"], view.column))
    return pd.concat(parts, ignore_index=True)


def finbias_data_comparisons(reports: pd.DataFrame, labels: pd.DataFrame | None) -> pd.DataFrame:
    """Fin-Bias Tables 2 (sectors) and 3 (analyst and return-based ratings): counts and percent."""
    sec = reports["sector"].value_counts().rename_axis("sector").reset_index(name="num")
    sec = pd.concat([sec, pd.DataFrame({"sector": ["Total"], "num": [len(reports)]})], ignore_index=True)
    sec["percentage"] = 100 * sec["num"] / len(reports)
    p2 = paper_table("finbias_table2")
    parts = [long_comparison(paper_vs_ours(sec, p2, ["sector"], col, table="finbias_table2"), ["sector"], col)
             for col in ("num", "percentage")]
    ratings = [("analyst", reports["analyst_rating"])]
    if labels is not None:
        ratings.append(("return_based", labels["label"]))
    rows = []
    for source, values in ratings:
        v = values.dropna().astype(str).str.capitalize()
        counts = v.value_counts()
        for rating, n in counts.items():
            rows.append({"source": source, "rating": rating, "num": int(n), "percentage": 100 * n / len(v)})
        rows.append({"source": source, "rating": "Total", "num": len(v), "percentage": 100.0})
    ours3 = pd.DataFrame(rows)
    p3 = paper_table("finbias_table3")
    for col in ("num", "percentage"):
        cmp = paper_vs_ours(ours3, p3, ["source", "rating"], col, table="finbias_table3")
        parts.append(long_comparison(cmp, ["source", "rating"], col))
    return pd.concat(parts, ignore_index=True)


def finbias_dpo_comparison(dpo: pd.DataFrame, paper_names: dict[str, str]) -> pd.DataFrame:
    """Fin-Bias Table 8 (accuracy after DPO) from stage 05's per-sector accuracy of the tuned models
    (`accuracy`: Eq. 1 over all N, the `finlib.finbias.scoring.metrics.ACCURACY` rows of `dpo_metrics`)."""
    need = {"model", "sector", "accuracy"}
    if not need <= set(dpo.columns):
        raise ValueError(f"stage 05 DPO table: needs columns {sorted(need)}, has {list(dpo.columns)}")
    paper = paper_table("finbias_table8")
    o = dpo.assign(model=dpo["model"].map(lambda m: paper_names.get(m, m)),
                   sector=dpo["sector"].replace({POOLED: "Average"}))
    o = o[o["sector"].isin(set(paper["sector"]))]
    cmp = paper_vs_ours(o[["model", "sector", "accuracy"]], paper, ["model", "sector"], "accuracy",
                        table="finbias_table8")
    return long_comparison(cmp, ["model", "sector"], "accuracy")
