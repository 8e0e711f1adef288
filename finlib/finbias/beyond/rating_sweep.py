"""Beyond the paper: the rating sweep, a counterfactual per report.

The paper shows each report once with its real rating, once without, and once with one fake
rating. The sweep (`perturb.sweep_reports`, conditions `sweep_<rating>`, built by stage 02 with
the fake-rating rewrite in the analyst's own phrasing) shows every chosen report with each of the
three ratings, beside `no_rating`: per report and model the answer (or, with k draws, the answer
distribution) under each shown rating. Metrics:

- the herding response matrix: shown rating (none = no_rating, bullish, neutral, bearish) x the
  answer (bullish, neutral, bearish, unparsed): counts of answered draws and row shares;
- the herding lift of a shown rating r: per report, share(answer = r | r shown) minus
  share(answer = r | no rating shown); averaged over reports, with a two-level bootstrap interval
  (`sampling_noise.two_level_bootstrap`) and paired tests on the report-level shares; overall and
  per sector. "bullish vs bearish" compares the two lifts report by report (does a shown bearish
  move the model as much as a shown bullish?);
- fully herded: the share of reports whose (modal) answer follows the shown rating in all three
  sweeps, in none, or in one or two. With k draws a report "follows" r when more than half of
  its answered draws under sweep_r say r.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from finlib.finbias.beyond.sampling_noise import hit, paired_share_test, two_level_bootstrap
from finlib.finbias.vocab import POOLED, RATINGS, SWEEP_CONDITIONS, Condition

SHOWN_ORDER = ("none (no_rating)", *(r.value for r in RATINGS))
ANSWER_ORDER = (*(r.value for r in RATINGS), "unparsed")


def sweep_draws(joined: pd.DataFrame) -> pd.DataFrame:
    """The sweep's draws and the no_rating draws of the same reports (the baseline), with the
    rating shown (`shown`: a rating, or "none (no_rating)")."""
    sweep_values = {c.value: r.value for r, c in SWEEP_CONDITIONS.items()}
    s = joined[joined["condition"].isin(sweep_values)]
    base = joined[(joined["condition"] == Condition.NO_RATING.value)
                  & joined.set_index(["model", "report_id"]).index.isin(s.set_index(["model", "report_id"]).index)]
    out = pd.concat([s, base], ignore_index=True)
    return out.assign(shown=out["condition"].map(sweep_values).fillna(SHOWN_ORDER[0]))


def response_matrix(sweep: pd.DataFrame) -> pd.DataFrame:
    """Per model: shown rating x answer, counts of answered draws and row shares (long form)."""
    rows = []
    for model, g in sweep.groupby("model"):
        ans = g["answer"].fillna("unparsed")
        tab = pd.crosstab(pd.Categorical(g["shown"], categories=SHOWN_ORDER),
                          pd.Categorical(ans, categories=ANSWER_ORDER), dropna=False)
        for shown in SHOWN_ORDER:
            total = int(tab.loc[shown].sum())
            for a in ANSWER_ORDER:
                c = int(tab.loc[shown, a])
                rows.append({"model": model, "shown": shown, "answer": a, "count": c, "row_total": total,
                             "share": c / total if total else np.nan})
    return pd.DataFrame(rows, columns=["model", "shown", "answer", "count", "row_total", "share"])


def report_lifts(sweep: pd.DataFrame, model: str, rating: str) -> pd.DataFrame:
    """Per report of `model`: draws and hits (answer = `rating`) under sweep_`rating` and under
    no_rating; only reports answered in both."""
    g = sweep[sweep["model"] == model]
    g = g[g["shown"].isin([rating, SHOWN_ORDER[0]])].assign(
        hit=lambda d: hit(d, pd.Series(rating, index=d.index)), arm=lambda d: np.where(d["shown"] == rating, "a", "b"))
    w = g.pivot_table(index=["report_id", "sector"], columns="arm", values="hit", aggfunc=["size", "sum"])
    if w.empty or ("size", "a") not in w.columns or ("size", "b") not in w.columns:
        return pd.DataFrame(columns=["report_id", "sector", "n_a", "hits_a", "n_b", "hits_b"])
    w = w.dropna()
    return pd.DataFrame({"report_id": w.index.get_level_values(0), "sector": w.index.get_level_values(1),
                         "n_a": w[("size", "a")].to_numpy(), "hits_a": w[("sum", "a")].to_numpy(),
                         "n_b": w[("size", "b")].to_numpy(), "hits_b": w[("sum", "b")].to_numpy()})


def _lift_row(r: pd.DataFrame, reps: int, seed: int, ci: float) -> dict:
    n, hits = r[["n_a", "n_b"]].to_numpy(float), r[["hits_a", "hits_b"]].to_numpy(float)
    est, lo, hi = two_level_bootstrap(n, hits, [1.0, -1.0], reps, seed, ci)
    test = paired_share_test(hits[:, 0] / n[:, 0], hits[:, 1] / n[:, 1]) if len(r) else {}
    return {"n_reports": int(len(r)), "share_shown": float((hits[:, 0] / n[:, 0]).mean()) if len(r) else np.nan,
            "share_no_rating": float((hits[:, 1] / n[:, 1]).mean()) if len(r) else np.nan,
            "lift": est, "ci_low": lo, "ci_high": hi, "p_t": test.get("p_t", np.nan),
            "p_wilcoxon": test.get("p_wilcoxon", np.nan)}


def lift_table(sweep: pd.DataFrame, reps: int, seed: int, ci: float = 0.95, by_sector: bool = False) -> pd.DataFrame:
    """Herding lift over no_rating per model x shown rating (x sector with `by_sector`; the pooled
    row is labelled as in every table), and per model "bullish vs bearish": the per-report
    difference of the two lifts with its paired tests."""
    rows = []
    for model in sorted(sweep["model"].unique()):
        per = {r.value: report_lifts(sweep, model, r.value) for r in RATINGS}
        for rating, r in per.items():
            groups = [(POOLED, r)] + (sorted(r.groupby("sector"), key=lambda x: x[0]) if by_sector else [])
            for sector, g in groups:
                rows.append({"model": model, "shown": rating, "sector": sector, **_lift_row(g, reps, seed, ci)})
        if by_sector:
            continue
        a, b = per[RATINGS[0].value], per[RATINGS[2].value]
        both = a.merge(b, on=["report_id", "sector"], suffixes=("_bull", "_bear"))
        la = both["hits_a_bull"] / both["n_a_bull"] - both["hits_b_bull"] / both["n_b_bull"]
        lb = both["hits_a_bear"] / both["n_a_bear"] - both["hits_b_bear"] / both["n_b_bear"]
        test = paired_share_test(la.to_numpy(), lb.to_numpy())
        rows.append({"model": model, "shown": "bullish vs bearish (lift difference)", "sector": POOLED,
                     "n_reports": test["n_pairs"], "share_shown": np.nan, "share_no_rating": np.nan,
                     "lift": test["mean_diff"], "ci_low": np.nan, "ci_high": np.nan, "p_t": test["p_t"],
                     "p_wilcoxon": test["p_wilcoxon"]})
    return pd.DataFrame(rows)


def followed(sweep: pd.DataFrame) -> pd.DataFrame:
    """Per model x report: in how many of the three sweeps the answer follows the shown rating
    (more than half of the answered draws equal it)."""
    s = sweep[sweep["shown"] != SHOWN_ORDER[0]]
    s = s.assign(hit=hit(s, s["shown"]))
    share = s.groupby(["model", "report_id", "shown"])["hit"].mean()
    per = (share > 0.5).groupby(["model", "report_id"]).agg(["sum", "size"])
    per = per[per["size"] == len(RATINGS)]  # only reports answered under all three shown ratings
    return per["sum"].rename("sweeps_followed").reset_index()


def herded_table(sweep: pd.DataFrame) -> pd.DataFrame:
    """Per model: reports, and the share following the shown rating in 3 (fully herded), 2, 1 or
    0 of the three sweeps."""
    f = followed(sweep)
    rows = []
    for model, g in f.groupby("model"):
        n = len(g)
        rec = {"model": model, "n_reports": n}
        for j, name in ((3, "fully_herded"), (2, "two_of_three"), (1, "one_of_three"), (0, "none")):
            rec[f"{name}_share"] = float((g["sweeps_followed"] == j).mean()) if n else np.nan
        rows.append(rec)
    return pd.DataFrame(rows, columns=["model", "n_reports", "fully_herded_share", "two_of_three_share",
                                       "one_of_three_share", "none_share"])
