"""Beyond the paper: how much of "herding" is sampling noise?

The paper answers every report x condition once at temperature 1.0 and compares conditions on
those single draws. With k draws per report (`inference.samples_per_item`, `draws.parquet`)
each report has a *share* of draws that herd (answer = the rating shown) or are accurate
(answer = the return-based label), and the run can separate two sources of variation:

- between reports: some reports pull every draw towards the rating, others never do;
- within a report: the same model on the same text answers differently from draw to draw.

Estimators (one model x condition x outcome; y_ij = 1 when draw j of report i hits):
- estimate: the mean over reports of the report shares (each report weighs the same);
- variance components: the one-way random-effects ANOVA (method of moments, unbalanced k_i):
  MSW = sum_i hits_i (1 - share_i) / (N - a), MSB = sum_i k_i (share_i - mean)^2 / (a - 1),
  k0 = (N - sum k_i^2 / N) / (a - 1); sigma2_within = MSW, sigma2_between = (MSB - MSW) / k0
  (cut at 0; the raw value is kept), ICC = sigma2_between / (sigma2_between + sigma2_within);
- a single-draw study's spread from sampling alone: its estimate is a mean of n one-draw
  reports, so with the reports held fixed its standard deviation is sqrt(sigma2_within / n);
  z times that is "a study of this size can move by +-x points from re-sampling alone";
- intervals: a two-level bootstrap (reports with replacement, then the draws within each
  resampled report with replacement: for binary draws that is a binomial draw from the report's
  share). It resamples the within-report noise twice (once inside the report means, once
  explicitly), so it is slightly conservative: wider than nominal when sigma2_within / k is
  large next to sigma2_between (Davison & Hinkley 1997, section 3.8);
- a paired test on report-level shares (the same reports in two conditions): the paired t-test
  on the per-report share differences, with the Wilcoxon signed-rank test beside it;
- draws needed: Var(estimate) = sigma2_between / n + sigma2_within / (n k), so a target half
  width h at n reports needs k = sigma2_within / (n (h / z)^2 - sigma2_between) draws, or more
  reports when n (h / z)^2 <= sigma2_between (no number of draws reaches h).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from finlib.core.artifacts import require_columns
from finlib.finbias.inference.draws import SWEEP_VALUES
from finlib.finbias.scoring.metrics import OUTCOME_TARGETS, eq1_values
from finlib.finbias.vocab import Condition

OUTCOMES = OUTCOME_TARGETS  # outcome -> the column an answer must equal (Eq. 1, finlib.finbias.scoring.metrics)
# The paper's with/without comparisons (Tables 4-5): (name, table, condition a, condition b, outcome)
COMPARISONS = (("herding_with_vs_without", "Table 4", Condition.ORIGINAL, Condition.NO_RATING, "herding"),
               ("fake_herding_fake_vs_original", "Table 5", Condition.FAKE_RATING, Condition.ORIGINAL, "herding"),
               ("accuracy_with_vs_without", "Table 6", Condition.ORIGINAL, Condition.NO_RATING, "accuracy"))


def z_value(ci: float) -> float:
    """Two-sided normal quantile of a `ci` interval (1.96 for 0.95)."""
    return float(sps.norm.ppf(0.5 + ci / 2))


def join_draws(draws: pd.DataFrame, conditions: pd.DataFrame, labels: pd.DataFrame,
               reports: pd.DataFrame) -> pd.DataFrame:
    """Answered draws with the rating shown (`reference_rating`), the return-based label, sector
    and firm. Not-answered draws (server errors) are outside N, as in stage 04; an unparsed
    answer stays inside N and hits nothing."""
    require_columns(draws, ("model", "item_id", "report_id", "condition", "sample", "answer", "answered"),
                    "draws.parquet")
    require_columns(conditions, ("item_id", "reference_rating", "analyst_rating"), "conditions.parquet")
    d = draws[draws["answered"].astype(bool)]
    d = d.merge(conditions[["item_id", "reference_rating", "analyst_rating"]], on="item_id", how="left",
                validate="many_to_one")
    d = d.merge(labels[["report_id", "label"]], on="report_id", how="left", validate="many_to_one")
    return d.merge(reports[["report_id", "ticker", "sector"]], on="report_id", how="left", validate="many_to_one")


def hit(joined: pd.DataFrame, target: str | pd.Series) -> pd.Series:
    """1.0 where the answer equals `target` (a column name or a series), else 0.0 (unparsed = 0):
    Eq. 1's per-answer hit, from `finlib.finbias.scoring.metrics.eq1_values` (the tables' definition)."""
    t = joined[target] if isinstance(target, str) else target
    return pd.Series(eq1_values(joined["answer"], t)[:, 0], index=joined.index)


def report_shares(joined: pd.DataFrame, outcome: str) -> pd.DataFrame:
    """Per model x condition x report: answered draws `n`, `hits` and `share` for one outcome
    (rows without the outcome's reference, e.g. no label, are left out)."""
    col = OUTCOMES[outcome]
    d = joined[joined[col].notna()].assign(hit=lambda x: hit(x, col))
    g = d.groupby(["model", "condition", "report_id"], as_index=False).agg(n=("hit", "size"), hits=("hit", "sum"),
                                                                            sector=("sector", "first"))
    return g.assign(share=g["hits"] / g["n"])


@dataclass(frozen=True)
class Components:
    """One-way random-effects ANOVA of binary draws nested in reports."""

    n_reports: int
    n_draws: int
    estimate: float          # mean over reports of the shares
    sigma2_within: float     # MSW: draw-to-draw variance inside a report (NaN when every report has one draw)
    sigma2_between: float    # cut at 0
    sigma2_between_raw: float
    icc: float               # share of the variance between reports


def variance_components(n: np.ndarray, hits: np.ndarray) -> Components:
    """The ANOVA estimator above from per-report draw counts `n` and hit counts `hits`."""
    n, hits = np.asarray(n, float), np.asarray(hits, float)
    keep = n > 0
    n, hits = n[keep], hits[keep]
    a, big_n = len(n), float(n.sum())
    if a == 0:
        return Components(0, 0, np.nan, np.nan, np.nan, np.nan, np.nan)
    share = hits / n
    grand = hits.sum() / big_n
    msw = float((hits * (1 - share)).sum() / (big_n - a)) if big_n > a else np.nan
    if a < 2:
        return Components(a, int(big_n), float(share.mean()), msw, np.nan, np.nan, np.nan)
    msb = float((n * (share - grand) ** 2).sum() / (a - 1))
    k0 = (big_n - (n ** 2).sum() / big_n) / (a - 1)
    raw = (msb - msw) / k0 if np.isfinite(msw) else np.nan
    between = max(raw, 0.0) if np.isfinite(raw) else np.nan
    total = between + msw
    icc = between / total if np.isfinite(total) and total > 0 else np.nan
    return Components(a, int(big_n), float(share.mean()), msw, between, float(raw), float(icc))


def two_level_bootstrap(n: np.ndarray, hits: np.ndarray, weights: np.ndarray, reps: int, seed: int,
                        ci: float = 0.95, chunk: int = 200) -> tuple[float, float, float]:
    """(estimate, low, high) of mean_i sum_c weights_c share_ic: reports resampled with replacement,
    then each resampled report's draws per condition (a binomial draw from its share). `n` and
    `hits` are reports x conditions; reports without a draw in some condition must be left out
    before (paired comparisons are on the same reports)."""
    n, hits = np.atleast_2d(np.asarray(n, float)), np.atleast_2d(np.asarray(hits, float))
    w = np.asarray(weights, float)
    if n.shape[0] == 0 or (n <= 0).any():
        if n.shape[0] == 0:
            return np.nan, np.nan, np.nan
        raise ValueError("two_level_bootstrap: every report needs >= 1 answered draw in every condition")
    est = float(((hits / n) @ w).mean())
    if reps <= 0:
        return est, np.nan, np.nan
    rng = np.random.default_rng(seed)
    p, r = hits / n, n.shape[0]
    stats = []
    for start in range(0, reps, chunk):
        m = min(chunk, reps - start)
        idx = rng.integers(0, r, size=(m, r))
        b = rng.binomial(n[idx].astype(np.int64), p[idx])
        stats.append(((b / n[idx]) @ w).mean(axis=1))
    s = np.concatenate(stats)
    return est, float(np.quantile(s, (1 - ci) / 2)), float(np.quantile(s, (1 + ci) / 2))


def paired_share_test(a: np.ndarray, b: np.ndarray) -> dict:
    """Paired tests of report-level shares a_i vs b_i (same reports): t-test and Wilcoxon."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    d = a - b
    out = {"n_pairs": int(len(d)), "mean_diff": float(d.mean()) if len(d) else np.nan, "p_t": np.nan,
           "p_wilcoxon": np.nan}
    if len(d) >= 2 and np.ptp(d) > 0:
        out["p_t"] = float(sps.ttest_rel(a, b).pvalue)
    elif len(d) >= 2 and d.mean() == 0:
        out["p_t"] = 1.0  # every report moved by exactly 0
    if len(d) >= 2 and (d != 0).any():
        out["p_wilcoxon"] = float(sps.wilcoxon(d, zero_method="zsplit").pvalue)
    elif len(d) >= 2:
        out["p_wilcoxon"] = 1.0
    return out


def single_draw_half_width(sigma2_within: float, n_reports: int, ci: float = 0.95) -> float:
    """+- half width of a single-draw study's estimate from re-sampling alone (reports fixed)."""
    if not n_reports or not np.isfinite(sigma2_within):
        return np.nan
    return z_value(ci) * float(np.sqrt(sigma2_within / n_reports))


def draws_needed(sigma2_between: float, sigma2_within: float, n_reports: int, half_width: float,
                 ci: float = 0.95) -> float:
    """Draws per report for a +-`half_width` interval at `n_reports` (inf: more reports needed)."""
    if not (np.isfinite(sigma2_between) and np.isfinite(sigma2_within)) or n_reports <= 0:
        return np.nan
    room = n_reports * (half_width / z_value(ci)) ** 2 - sigma2_between
    if room <= 0:
        return np.inf
    return float(max(1, np.ceil(sigma2_within / room)))


def _wide(shares: pd.DataFrame, model: str, conds: list[str]) -> pd.DataFrame:
    """Reports x conditions (n and hits) of one model, only reports answered in every condition."""
    s = shares[(shares["model"] == model) & shares["condition"].isin(conds)]
    w = s.pivot_table(index="report_id", columns="condition", values=["n", "hits"], aggfunc="sum")
    return w.dropna() if set(conds) <= set(s["condition"]) else w.iloc[0:0]


def noise_estimates(joined: pd.DataFrame, run_n: pd.DataFrame, reps: int, seed: int,
                    ci: float = 0.95) -> pd.DataFrame:
    """Per model x paper condition x outcome: the k-draw estimate with its two-level interval, the
    variance components and ICC, and a single-draw study's expected spread at the run's N
    (`run_n`: model, condition, n = the reports the paper-style table counted)."""
    rows = []
    paper = joined[~joined["condition"].isin(SWEEP_VALUES)]
    for outcome in OUTCOMES:
        shares = report_shares(paper, outcome)
        for (model, cond), g in shares.groupby(["model", "condition"]):
            comp = variance_components(g["n"].to_numpy(), g["hits"].to_numpy())
            est, lo, hi = two_level_bootstrap(g[["n"]].to_numpy(), g[["hits"]].to_numpy(), [1.0], reps, seed, ci)
            hit_n = run_n[(run_n["model"] == model) & (run_n["condition"] == cond)]["n"]
            n_run = int(hit_n.iloc[0]) if len(hit_n) else comp.n_reports
            rows.append({"model": model, "condition": cond, "outcome": outcome, "n_reports": comp.n_reports,
                         "draws_per_report": comp.n_draws / comp.n_reports if comp.n_reports else np.nan,
                         "estimate": est, "ci_low": lo, "ci_high": hi,
                         "sigma2_within": comp.sigma2_within, "sigma2_between": comp.sigma2_between,
                         "sigma2_between_raw": comp.sigma2_between_raw, "icc": comp.icc, "run_n": n_run,
                         "single_draw_pm_pp": 100 * single_draw_half_width(comp.sigma2_within, n_run, ci)})
    return pd.DataFrame(rows)


def paper_vs_noise(joined: pd.DataFrame, run_n: pd.DataFrame, reps: int, seed: int,
                   ci: float = 0.95) -> pd.DataFrame:
    """"Paper difference vs sampling noise" (Tables 4-6's with/without gaps), per model.

    single_draw_gap_pp: the gap a one-draw study of these reports shows (draw 0, the paper's
    protocol); gap_pp: the mean over reports of the share differences with its two-level
    interval; noise_pm_pp: how far that one-draw gap moves from re-sampling alone, sized on the
    reports it was measured on (`n_reports`, the k-draw subset: z * sqrt((sigma2_within_a +
    sigma2_within_b) / n_reports)); beyond_noise: |single-draw gap| > noise_pm_pp. A band sized at
    the run's N would be too narrow for a gap measured on a subset (200 of 8,868 reports: "beyond
    noise" in most runs with no gap at all); the run's projection is kept apart as
    noise_pm_run_pp (the spread a single-draw table of all `run_n` reports would have).
    p_t / p_wilcoxon: paired tests on the report-level shares."""
    rows = []
    for name, table, ca, cb, outcome in COMPARISONS:
        conds = [ca.value, cb.value]
        shares = report_shares(joined, outcome)
        first = report_shares(joined[joined["sample"] == joined.groupby(["model", "item_id"])["sample"]
                                     .transform("min")], outcome)
        for model in sorted(shares["model"].unique()):
            w = _wide(shares, model, conds)
            if w.empty:
                continue
            n, hits = w["n"][conds].to_numpy(), w["hits"][conds].to_numpy()
            est, lo, hi = two_level_bootstrap(n, hits, [1.0, -1.0], reps, seed, ci)
            test = paired_share_test(hits[:, 0] / n[:, 0], hits[:, 1] / n[:, 1])
            comps = [variance_components(n[:, j], hits[:, j]) for j in range(2)]
            f = _wide(first, model, conds)
            one = float((f["hits"][conds[0]] / f["n"][conds[0]] - f["hits"][conds[1]] / f["n"][conds[1]]).mean())
            sel = run_n[(run_n["model"] == model) & run_n["condition"].isin(conds)]["n"]
            n_run = int(sel.min()) if len(sel) else len(w)
            within = comps[0].sigma2_within + comps[1].sigma2_within
            noise = single_draw_half_width(within, gap_reports(f), ci)
            rows.append({"comparison": name, "paper_table": table, "model": model, "outcome": outcome,
                         "condition_a": conds[0], "condition_b": conds[1], "n_reports": len(w),
                         "draws_per_report": float(n.mean()), "single_draw_gap_pp": 100 * one,
                         "gap_pp": 100 * est, "ci_low_pp": 100 * lo, "ci_high_pp": 100 * hi, "run_n": n_run,
                         "noise_pm_pp": 100 * noise,
                         "noise_pm_run_pp": 100 * single_draw_half_width(within, n_run, ci),
                         "beyond_noise": bool(abs(one) > noise) if np.isfinite(noise) else None,
                         "p_t": test["p_t"], "p_wilcoxon": test["p_wilcoxon"]})
    return pd.DataFrame(rows)


def gap_reports(first: pd.DataFrame) -> int:
    """The N a single-draw gap was measured on: the reports with a first draw in both conditions
    (the rows of `_wide(first, ...)`), which is what sizes its noise band."""
    return int(len(first))


def draws_needed_table(estimates: pd.DataFrame, half_widths_pp: tuple[float, ...], corpus_n: int,
                       ci: float = 0.95) -> pd.DataFrame:
    """Draws per report for each target half width, at the run's reports and at the corpus size,
    from the measured variance components (herding and accuracy of the paper's conditions)."""
    rows = []
    for r in estimates.itertuples(index=False):
        for n_label, n in (("this run", int(r.n_reports)), ("corpus", int(corpus_n))):
            rec = {"model": r.model, "condition": r.condition, "outcome": r.outcome, "reports": n_label, "n": n}
            for h in half_widths_pp:
                rec[f"k_for_pm{h:g}pp"] = draws_needed(r.sigma2_between, r.sigma2_within, n, h / 100, ci)
            rows.append(rec)
    return pd.DataFrame(rows)


def run_sizes(predictions: pd.DataFrame) -> pd.DataFrame:
    """The run's N per model x condition: answered paper rows (what stage 04's tables count)."""
    p = predictions[predictions["answered"].astype(bool)]
    return p.groupby(["model", "condition"], as_index=False).agg(n=("report_id", "nunique"))
