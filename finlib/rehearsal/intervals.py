"""The rehearsal's check of Fin-Bias intervals and p-values, recomputed without stage 04.

Why: a table whose point values are right can still print a 90 % interval as a 95 % one, resample
answers instead of firms (intervals too narrow), drop Holm's correction (a marker moves from ** to
***) or count McNemar's discordant pairs wrongly. The point-value check cannot see those, so this
one recomputes them from what the simulated servers replied:

* each answer read from the reply in the simulator's own format (an optional `<think>` block, then
  the JSON object it writes, `{"answer": ..., "reason": ...}`, the first one when a reply cut at the
  token limit repeats; anything else is no answer, inside N as Eq. 1 counts it), scored against the generator's analyst rating, the fake rating stage 02 says
  it wrote, or the planted label (`finlib.finbias.data.synth_planted.planted_labels`);
* intervals: the firm-clustered standard error of a ratio in closed form (the linearised variance
  sum_c (S_c - R n_c)^2 / N^2 that a percentile bootstrap over firms estimates), so a written
  interval's width must be about 2 z SE at the params' level; the median ratio over the pooled cells
  and paired differences must lie within a tolerance set by the bootstrap's replicates and the number
  of intervals (`width_tolerance`);
* p-values: exact McNemar from the discordant pairs by scipy's binomial test, Holm's step-down across
  the models by statsmodels, the `*`/`**`/`***` thresholds written out here; each compared with the
  paired-test table and with the marker printed after each pooled cell of Tables 4-7;
* Stuart-Maxwell (the answer-shift rows of the paired-test table): the 3 x 3 table of both parsed
  answers, the statistic d' V^+ d written out here with the Moore-Penrose inverse of the full
  covariance (the discordant-pair Laplacian; its rank is the df, so no category is dropped by hand as
  stage 04 does), p from scipy's chi-square, Holm across the models by statsmodels; n_pairs,
  statistic, df, p and Holm p compared with the table.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import binomtest, chi2, norm

from finlib.finbias.vocab import POOLED

_THINK = re.compile(r"^\s*<think>.*?</think>\s*", re.S)
# McNemar tests recomputed: name -> (condition a, condition b, what both are scored against: the reference of
# a's item (herding), the planted label (accuracy)); stated here, not read from stage 04's test list
MCNEMAR_TESTS: dict[str, tuple[str, str, str]] = {
    "herding_with_vs_without": ("original", "no_rating", "herding"),
    "fake_herding_fake_vs_original": ("fake_rating", "original", "herding"),
    "herding_no_opinion_vs_no_rating": ("no_opinion", "no_rating", "herding"),
    "accuracy_with_vs_without": ("original", "no_rating", "accuracy"),
    "accuracy_no_opinion_vs_no_rating": ("no_opinion", "no_rating", "accuracy"),
}
# Table -> (conditions in the cell's "a/b" order, metric, the test whose marker follows the pooled cell)
MARKED_TABLES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "table4_herding_with_without": (("original", "no_rating"), "herding", "herding_with_vs_without"),
    "table5_herding_fake": (("fake_rating",), "herding", "fake_herding_fake_vs_original"),
    "table6_accuracy_with_without": (("original", "no_rating"), "accuracy", "accuracy_with_vs_without"),
    "table7_accuracy_no_opinion": (("no_opinion",), "accuracy", "accuracy_no_opinion_vs_no_rating"),
}
# Stuart-Maxwell tests recomputed: name -> (condition a, condition b); stated here, not read from stage 04
STUART_MAXWELL_TESTS: dict[str, tuple[str, str]] = {
    "answer_shift_with_vs_without": ("original", "no_rating"),
    "answer_shift_no_opinion_vs_no_rating": ("no_opinion", "no_rating"),
    "answer_shift_fake_vs_original": ("fake_rating", "original"),
}
CATEGORIES = ("bullish", "neutral", "bearish")
P_RTOL = 2e-3  # the paired-test table prints 4 significant digits


def reply_answer(text: object) -> str | None:
    """The rating a simulated reply states in the simulator's JSON, or None (no JSON answer)."""
    if not isinstance(text, str):
        return None
    try:  # the first object: a reply cut at the token limit repeats itself after it
        obj, _ = json.JSONDecoder().raw_decode(_THINK.sub("", text, count=1).strip())
    except ValueError:
        return None
    answer = obj.get("answer") if isinstance(obj, dict) else None
    return answer if isinstance(answer, str) else None


def scored_items(
    pred: pd.DataFrame, fake: pd.Series, analyst: pd.Series, labels: pd.Series, ticker: pd.Series
) -> pd.DataFrame:
    """One row per answered item: model, condition, item_id, report_id, ticker, answer, the herding
    reference (the fake rating for the fake condition, else the analyst's) and the planted label."""
    d = pred[pred["answered"].astype(bool)].copy()
    d["answer"] = d["raw_text"].map(reply_answer)
    d["ticker"] = d["report_id"].map(ticker)
    d["reference"] = np.where(d["condition"] == "fake_rating", d["item_id"].map(fake), d["report_id"].map(analyst))
    d["label"] = d["report_id"].map(labels)
    return d[["model", "condition", "item_id", "report_id", "ticker", "answer", "reference", "label"]]


def clustered(x: np.ndarray, clusters: np.ndarray) -> tuple[float, float, int]:
    """(mean, firm-clustered SE, N) of `x`: sqrt(sum over firms of (S_c - mean n_c)^2) / N."""
    n = len(x)
    if not n:
        return np.nan, np.nan, 0
    r = float(np.mean(x))
    resid = pd.Series(np.asarray(x, float) - r).groupby(np.asarray(clusters)).sum().to_numpy()
    return r, float(np.sqrt(np.sum(resid**2)) / n), n


def _hits(d: pd.DataFrame, target: str) -> pd.DataFrame:
    d = d[d[target].notna()]
    return d.assign(hit=(d["answer"] == d[target]).astype(float))


def cell_errors(items: pd.DataFrame) -> pd.DataFrame:
    """Pooled rate and clustered SE of every model x condition x metric (Eq. 1: every answered item)."""
    out = []
    for (model, cond), g in items.groupby(["model", "condition"], sort=True):
        for metric, target in (("herding", "reference"), ("accuracy", "label")):
            h = _hits(g, target)
            value, se, n = clustered(h["hit"].to_numpy(), h["ticker"].to_numpy())
            out.append({"model": model, "condition": cond, "metric": metric, "value": value, "se": se, "n": n})
    return pd.DataFrame(out)


def _pairs(items: pd.DataFrame, model: str, cond_a: str, cond_b: str, metric: str) -> pd.DataFrame:
    """Items of `cond_a` joined to the same report's `cond_b` item, both scored against a's target."""
    a = items[(items["model"] == model) & (items["condition"] == cond_a)]
    b = items[(items["model"] == model) & (items["condition"] == cond_b)]
    target = "reference" if metric == "herding" else "label"
    p = a.merge(b[["report_id", "answer"]], on="report_id", suffixes=("_a", "_b"))
    p = p[p[target].notna()]
    return p.assign(hit_a=(p["answer_a"] == p[target]), hit_b=(p["answer_b"] == p[target]))


def significance(p: float) -> str:
    """The tables' markers: *** below 0.001, ** below 0.01, * below 0.05 (Holm-adjusted p)."""
    if not np.isfinite(p):
        return ""
    return next((m for cut, m in ((0.001, "***"), (0.01, "**"), (0.05, "*")) if p < cut), "")


def mcnemar_recomputed(items: pd.DataFrame) -> pd.DataFrame:
    """Every pooled McNemar test per model: discordant counts, exact p (scipy), Holm across the models
    (statsmodels), marker, and the paired difference's clustered SE."""
    from statsmodels.stats.multitest import multipletests

    rows = []
    for test, (ca, cb, metric) in MCNEMAR_TESTS.items():
        for model in sorted(items["model"].unique()):
            p = _pairs(items, model, ca, cb, metric)
            if not len(p):
                continue
            only_a, only_b = int((p["hit_a"] & ~p["hit_b"]).sum()), int((~p["hit_a"] & p["hit_b"]).sum())
            pval = binomtest(only_a, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
            diff, se, n = clustered((p["hit_a"].astype(float) - p["hit_b"]).to_numpy(), p["ticker"].to_numpy())
            rows.append(
                {
                    "test": test,
                    "model": model,
                    "n_pairs": n,
                    "only_a": only_a,
                    "only_b": only_b,
                    "pvalue": float(pval),
                    "diff": diff,
                    "se": se,
                }
            )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["p_holm"] = np.nan
    for _, idx in out.groupby("test").groups.items():
        out.loc[idx, "p_holm"] = multipletests(out.loc[idx, "pvalue"].to_numpy(), method="holm")[1]
    out["marker"] = out["p_holm"].map(significance)
    return out


def stuart_maxwell_by_hand(a: list[str], b: list[str]) -> tuple[float, float, float]:
    """(statistic, df, p) of the Stuart-Maxwell test of marginal homogeneity of paired 3-class answers.

    d_i = n_i. - n_.i (row minus column margin), V_ii = n_i. + n_.i - 2 n_ii, V_ij = -(n_ij + n_ji);
    the statistic is d' V^+ d with the Moore-Penrose inverse and df = rank V (k - 1 when every
    category changes place with another, fewer when some never do). No change at all: (0, 0, 1).
    Why not statsmodels' SquareTable: stage 04 calls it, so it cannot check itself."""
    idx = {c: i for i, c in enumerate(CATEGORIES)}
    n = np.zeros((len(CATEGORIES), len(CATEGORIES)))
    np.add.at(n, ([idx[x] for x in a], [idx[y] for y in b]), 1.0)
    d = n.sum(axis=1) - n.sum(axis=0)
    v = -(n + n.T)
    np.fill_diagonal(v, n.sum(axis=1) + n.sum(axis=0) - 2 * np.diag(n))
    df = int(np.linalg.matrix_rank(v))
    if df == 0:
        return 0.0, 0.0, 1.0
    stat = float(d @ np.linalg.pinv(v) @ d)
    return stat, float(df), float(chi2.sf(stat, df))


def _holm_by_test(out: pd.DataFrame) -> pd.DataFrame:
    """Holm across the models of each test (statsmodels; NaN p-values are no test), and the marker."""
    from statsmodels.stats.multitest import multipletests

    out["p_holm"] = np.nan
    for _, idx in out.groupby("test").groups.items():
        p = out.loc[idx, "pvalue"]
        ok = p.notna()
        if ok.any():
            out.loc[p.index[ok], "p_holm"] = multipletests(p[ok].to_numpy(), method="holm")[1]
    out["marker"] = out["p_holm"].map(significance)
    return out


def stuart_maxwell_recomputed(items: pd.DataFrame) -> pd.DataFrame:
    """Every pooled Stuart-Maxwell test per model over the pairs whose two answers are both read from
    the replies: n_pairs, statistic, df, p (scipy) and Holm across the models (statsmodels)."""
    rows = []
    for test, (ca, cb) in STUART_MAXWELL_TESTS.items():
        for model in sorted(items["model"].unique()):
            a = items[(items["model"] == model) & (items["condition"] == ca)]
            b = items[(items["model"] == model) & (items["condition"] == cb)]
            p = a.merge(b[["report_id", "answer"]], on="report_id", suffixes=("_a", "_b"))
            if not len(p):
                continue
            p = p[p["answer_a"].isin(CATEGORIES) & p["answer_b"].isin(CATEGORIES)]
            stat, df, pval = (
                stuart_maxwell_by_hand(list(p["answer_a"]), list(p["answer_b"])) if len(p) else (np.nan, np.nan, np.nan)
            )
            rows.append(
                {"test": test, "model": model, "n_pairs": int(len(p)), "statistic": stat, "df": df, "pvalue": pval}
            )
    out = pd.DataFrame(rows)
    return _holm_by_test(out) if len(out) else out


def _close(a: float, b: float) -> bool:
    return bool(np.isclose(a, b, rtol=P_RTOL, atol=1e-12))


def paired_test_problems(ours: pd.DataFrame, recomputed: pd.DataFrame) -> list[str]:
    """The paired-test table's pooled McNemar rows against the recomputed counts, p, Holm p and marker."""
    mine = ours[(ours["sector"] == POOLED) & ours["test"].isin(list(MCNEMAR_TESTS))]
    both = recomputed.merge(mine, on=["test", "model"], how="left", suffixes=("", "_ours"))
    bad = []
    for r in both.itertuples():
        fields = [
            f
            for f, ok in (
                ("only_a", r.only_a == r.only_a_ours),
                ("only_b", r.only_b == r.only_b_ours),
                ("pvalue", _close(r.pvalue, r.pvalue_ours)),
                ("p_holm", _close(r.p_holm, r.p_holm_ours)),
                ("marker", r.marker == ("" if pd.isna(r.marker_ours) else str(r.marker_ours))),
            )
            if not ok
        ]
        if fields:
            bad.append(
                f"{r.test} {r.model}: {', '.join(fields)} (recomputed only_a {r.only_a}, only_b {r.only_b}, "
                f"p {r.pvalue:.4g}, Holm {r.p_holm:.4g} '{r.marker}'; table {r.only_a_ours}, {r.only_b_ours}, "
                f"{r.pvalue_ours}, {r.p_holm_ours} '{r.marker_ours}')"
            )
    return (
        [f"{len(bad)} of {len(both)} pooled McNemar tests differ from their recomputation: " + "; ".join(bad[:6])]
        if bad
        else []
    )


def _same(a: float, b: float) -> bool:
    """Equal to the printed digits, or both missing (a test without parsed pairs)."""
    return bool(np.isclose(float(a), float(b), rtol=P_RTOL, atol=1e-12, equal_nan=True))


def stuart_maxwell_problems(ours: pd.DataFrame, recomputed: pd.DataFrame) -> list[str]:
    """The paired-test table's pooled Stuart-Maxwell rows against the recomputed n_pairs, statistic, df,
    p and Holm p; a recomputed test missing from the table is a difference too."""
    mine = ours[(ours["sector"] == POOLED) & ours["test"].isin(list(STUART_MAXWELL_TESTS))]
    both = recomputed.merge(mine, on=["test", "model"], how="left", suffixes=("", "_ours"))
    bad = []
    for r in both.itertuples():
        fields = [
            f
            for f in ("n_pairs", "df", "statistic", "pvalue", "p_holm")
            if not _same(getattr(r, f), getattr(r, f"{f}_ours"))
        ]
        if fields:
            bad.append(
                f"{r.test} {r.model}: {', '.join(fields)} (recomputed n {r.n_pairs}, statistic "
                f"{r.statistic:.4g}, df {r.df}, p {r.pvalue:.4g}, Holm {r.p_holm:.4g}; table "
                f"{r.n_pairs_ours}, {r.statistic_ours}, {r.df_ours}, {r.pvalue_ours}, {r.p_holm_ours})"
            )
    return (
        [
            f"{len(bad)} of {len(both)} pooled Stuart-Maxwell tests differ from their recomputation: "
            + "; ".join(bad[:6])
        ]
        if bad
        else []
    )


def _printed(cell: str) -> tuple[list[float], str]:
    """A printed "a/b***" cell: its numbers (percent) and its marker."""
    s = str(cell).strip()
    marker = re.search(r"\*+$", s)
    nums = []
    for part in re.sub(r"\*+$", "", s).split("/"):
        try:
            nums.append(float(part))
        except ValueError:
            nums.append(np.nan)
    return nums, marker.group(0) if marker else ""


def _intervals(cell: str) -> list[tuple[float, float]]:
    """A printed "[lo, hi]/[lo, hi]" interval cell (percent)."""
    out = []
    for lo, hi in re.findall(r"\[([^,\]]+),\s*([^\]]+)\]", str(cell)):
        try:
            out.append((float(lo), float(hi)))
        except ValueError:
            out.append((np.nan, np.nan))
    return out


def printed_cells(tables: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(pooled intervals, markers) printed in Tables 4-7 (`tables`: name -> the written table, captions
    skipped), our model rows only: model, condition, metric, ci_low, ci_high (fractions); table, model,
    test, marker."""
    intervals, markers = [], []
    for table, (conds, metric, test) in MARKED_TABLES.items():
        t = tables[table]
        t = t[t["Source"].astype(str).eq("ours")]  # not the Analyst's row, not the published ones
        ci_col = next(c for c in t.columns if " CI" in c)
        for rec in t.to_dict("records"):
            model = str(rec["Registry name"])
            markers.append({"table": table, "model": model, "test": test, "marker": _printed(rec["Average"])[1]})
            for cond, (lo, hi) in zip(conds, _intervals(rec[ci_col])):
                intervals.append(
                    {
                        "model": model,
                        "condition": cond,
                        "metric": metric,
                        "table": table,
                        "ci_low": lo / 100,
                        "ci_high": hi / 100,
                    }
                )
    return pd.DataFrame(intervals), pd.DataFrame(markers)


def width_tolerance(level: float, reps: int, intervals: int) -> float:
    """Allowed |log(median printed width / 2 z SE)| over `intervals` intervals: three SDs of the median
    of the Monte Carlo error of percentile intervals from `reps` bootstrap replicates (each end's
    quantile has SD sqrt(a(1 - a) / reps) / phi(z) in SE units, a = (1 - level) / 2; a median of k
    such errors 1.25 / sqrt(k) times one's), plus 0.05 for the percentile interval's skew and the printed
    digits. Why a median: one interval's width is too noisy to tell 90 % from 95 % (a log gap of
    0.17); the median of a run's few dozen is not."""
    a = (1.0 - level) / 2.0
    z = float(norm.isf(a))
    one = np.sqrt(2) * np.sqrt(a * (1 - a) / max(reps, 1)) / norm.pdf(z) / (2 * z)
    return float(3 * 1.2533 * one / np.sqrt(max(intervals, 1)) + 0.05)


def interval_widths(
    printed: pd.DataFrame, cells: pd.DataFrame, tests: pd.DataFrame, recomputed: pd.DataFrame, level: float
) -> pd.DataFrame:
    """Every printed pooled interval (Tables 4-7) and paired difference's interval (the paired-test
    table) with its width and the closed-form one, 2 z SE."""
    z = float(norm.isf((1.0 - level) / 2.0))
    c = printed.merge(cells, on=["model", "condition", "metric"], how="inner")
    c = c.assign(kind="cell", width=c["ci_high"] - c["ci_low"], expected=2 * z * c["se"])
    mine = tests[(tests["sector"] == POOLED) & tests["test"].isin(list(MCNEMAR_TESTS))]
    d = recomputed.merge(mine[["test", "model", "diff_ci_low", "diff_ci_high"]], on=["test", "model"], how="inner")
    d = d.assign(
        kind="paired difference",
        condition=d["test"],
        metric="diff",
        table="table_paired_tests",
        width=d["diff_ci_high"] - d["diff_ci_low"],
        expected=2 * z * d["se"],
    )
    cols = ["kind", "table", "model", "condition", "metric", "width", "expected"]
    out = pd.concat([c[cols], d[cols]], ignore_index=True)
    return out[(out["expected"] > 0) & out["width"].notna()].assign(ratio=lambda f: f["width"] / f["expected"])


def interval_problems(widths: pd.DataFrame, level: float, reps: int) -> tuple[dict[str, Any], list[str]]:
    """The median width ratio must be 1 within `width_tolerance` (log scale)."""
    tol = width_tolerance(level, reps, len(widths))
    med = float(np.exp(np.median(np.log(widths["ratio"])))) if len(widths) else np.nan
    summary = {"intervals": int(len(widths)), "median_width_ratio": med, "log_tolerance": tol}
    if not len(widths):
        return summary, ["no printed interval to compare with its firm-clustered closed form"]
    if not abs(np.log(med)) <= tol:
        return summary, [
            f"printed {100 * level:g} % intervals are {med:.3f} x the width of the firm-clustered "
            f"closed form (median over {len(widths)}; allowed exp(+-{tol:.3f}))"
        ]
    return summary, []


def marker_problems(markers: pd.DataFrame, recomputed: pd.DataFrame) -> list[str]:
    """The marker after each pooled cell of Tables 4-7 against the recomputed Holm marker."""
    m = markers.merge(
        recomputed[["test", "model", "marker"]], on=["test", "model"], how="left", suffixes=("", "_recomputed")
    )
    m["marker_recomputed"] = m["marker_recomputed"].fillna("")
    bad = m[m["marker"] != m["marker_recomputed"]]
    shown = "; ".join(
        f"{r.table} {r.model}: printed '{r.marker}', recomputed '{r.marker_recomputed}'"
        for r in bad.head(6).itertuples()
    )
    return (
        [f"{len(bad)} of {len(m)} printed markers differ from the recomputed Holm markers: {shown}"] if len(bad) else []
    )
