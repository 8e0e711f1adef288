"""Stage 04's statistics: Fin-Bias Section 4.1's metrics and the paired tests between conditions.

Metrics (`METRIC_SPECS` evaluated by `metrics_long`; `confusion`, `macro_f1`, `kl_metrics`) by
sector, pooled and as the mean of sectors, each with a cluster-bootstrap interval over firms
(`finlib.core.stats`); paired tests (`paired_tests`: exact McNemar, Stuart-Maxwell, Holm). Kept
apart from `finlib.finbias.scoring.stage` (reading the artifacts, the stage, the notebook's views) because
the statistics change for other reasons than the stage's inputs and outputs. Callers import these
names from here, their one home.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from finlib.core import stats
from finlib.finbias.vocab import POOLED, RATINGS, SECTOR_MEAN, SECTORS, Condition, Rating

PROB_COLUMNS = {Rating.BULLISH: "p_bullish", Rating.NEUTRAL: "p_neutral", Rating.BEARISH: "p_bearish"}

# --------------------------------------------------------------------------------------
# 3. Metrics
# --------------------------------------------------------------------------------------

def _eq(a: pd.Series, b: pd.Series) -> np.ndarray:
    """Elementwise equality where a missing value on either side is False (never a match).

    Compared on object arrays by position, only where both sides hold a value: converting both
    Series with `astype(object)` and comparing them as Series cost most of the paired tests' time."""
    if len(a) != len(b):
        raise ValueError(f"cannot compare {len(a)} answers with {len(b)} targets")
    x, y = a.to_numpy(dtype=object), b.to_numpy(dtype=object)
    ok = ~(pd.isna(x) | pd.isna(y))
    out = np.zeros(len(x), dtype=bool)
    out[ok] = x[ok] == y[ok]
    return out


def confusion(answers: pd.Series, labels: pd.Series) -> pd.DataFrame:
    """3x3 counts, rows = return-based label, columns = answer, over parsed & labelled rows."""
    names = [r.value for r in RATINGS]
    ok = answers.notna() & labels.notna()
    tab = pd.crosstab(pd.Categorical(labels[ok], categories=names),
                      pd.Categorical(answers[ok], categories=names), dropna=False)
    tab.index.name, tab.columns.name = "label", "answer"
    return tab.reindex(index=names, columns=names, fill_value=0)


def macro_f1(answers: pd.Series, labels: pd.Series) -> float:
    """Macro-F1 over the classes present in labels or answers (see stats.macro_f1_from_confusion)."""
    return float(stats.macro_f1_from_confusion(confusion(answers, labels).to_numpy(float).ravel()))


def _one_hot_confusion(answers: pd.Series, labels: pd.Series) -> np.ndarray:
    names = [r.value for r in RATINGS]
    a = answers.map({n: i for i, n in enumerate(names)}).to_numpy()
    t = labels.map({n: i for i, n in enumerate(names)}).to_numpy()
    out = np.zeros((len(a), 9))
    ok = ~(pd.isna(a) | pd.isna(t))
    out[np.flatnonzero(ok), (t[ok].astype(int) * 3 + a[ok].astype(int))] = 1.0
    return out


def _ref_prob(df: pd.DataFrame, column: str = "reference_rating") -> np.ndarray:
    """Probability the model gave to `column`'s rating (renormalised over the three labels)."""
    p = df[[PROB_COLUMNS[r] for r in RATINGS]].to_numpy(float)
    p = p / p.sum(axis=1, keepdims=True)
    idx = df[column].map({r.value: i for i, r in enumerate(RATINGS)}).to_numpy()
    out = np.full(len(df), np.nan)
    ok = ~pd.isna(idx)
    out[ok] = p[np.flatnonzero(ok), idx[ok].astype(int)]
    return out


# The published statistics, defined once. Fin-Bias Eq. 1: herding = share of ALL N answered items
# whose answer equals the rating shown in the report (the analyst's, or the fake); accuracy = share
# of all N whose answer equals the return-based label. An answer that did not parse (or was cut, or
# came back empty) stays inside N and counts as no match, as in the authors' scoring. Every table,
# comparison, figure, Table 8, the report and stage 09 read these names; the parsed-only rates are
# extra columns named `*_parsed` and are never printed as the paper's number.
HERDING = "herding"
ACCURACY = "accuracy"
HERDING_PARSED = "herding_parsed"
ACCURACY_PARSED = "accuracy_parsed"
OUTCOME_TARGETS: dict[str, str] = {HERDING: "reference_rating", ACCURACY: "label"}
PARSED_ONLY: dict[str, str] = {HERDING: HERDING_PARSED, ACCURACY: ACCURACY_PARSED}


def eq1_values(answers: pd.Series, targets: pd.Series) -> np.ndarray:
    """Per-row (hit, 1) columns of Eq. 1: summed over rows they give (hits, N).

    The denominator is every row, parsed or not: a model that answers less often must not look
    more accurate (a parsed-only rate rewards unparseable output). Rows without a target (no
    label, no rating shown) are the caller's to leave out, as `METRIC_SPECS`' `eligible` does.
    """
    return np.c_[_eq(answers, targets).astype(float), np.ones(len(answers))]


def eq1_rate(answers: pd.Series, targets: pd.Series) -> float:
    """Fin-Bias Eq. 1 on one cell: hits / N over rows with a target (unparsed = no match); NaN
    when no row has a target."""
    has = targets.notna().to_numpy()
    if not has.any():
        return float("nan")
    hits, n = eq1_values(answers[has], targets[has]).sum(axis=0)
    return float(hits / n)


def eq1_by_sector(rows: pd.DataFrame, outcome: str) -> pd.DataFrame:
    """Eq. 1 for `outcome` ("herding" | "accuracy") per model x condition x sector, plus the pooled
    rate (`POOLED`, all sectors' rows) — the published cells without bootstrap intervals.

    `rows`: stage 04's scored rows (model, condition, sector, answer and the outcome's target
    column). The same numbers as `metrics_long`'s `herding` / `accuracy` values; for callers that
    need the point estimates only (Table 8 deltas, checks).
    """
    target = OUTCOME_TARGETS[outcome]
    d = rows[rows[target].notna()]
    vals = eq1_values(d["answer"], d[target])
    d = d[["model", "condition", "sector"]].assign(hits=vals[:, 0], n=vals[:, 1])
    per = d.groupby(["model", "condition", "sector"], as_index=False)[["hits", "n"]].sum()
    pooled = d.groupby(["model", "condition"], as_index=False)[["hits", "n"]].sum().assign(sector=POOLED)
    out = pd.concat([per, pooled], ignore_index=True)
    out["value"] = out["hits"] / out["n"]
    out["n"] = out["n"].astype(int)
    return out.assign(metric=outcome)[["model", "condition", "sector", "metric", "value", "n"]]


@dataclass(frozen=True)
class MetricSpec:
    """A metric as (rows it is defined on, per-row summable columns, statistic of the sums)."""

    name: str
    eligible: Callable[[pd.DataFrame], np.ndarray]
    values: Callable[[pd.DataFrame], np.ndarray]
    k: int
    statistic: str  # "ratio" | "macro_f1"


def _specs() -> tuple[MetricSpec, ...]:
    def ones(d: pd.DataFrame) -> np.ndarray:
        return np.ones(len(d))

    def col(x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=float)

    def has(c: str) -> Callable[[pd.DataFrame], np.ndarray]:
        return lambda d: d[c].notna().to_numpy()

    def probs_ok(d: pd.DataFrame) -> np.ndarray:
        p = d[[PROB_COLUMNS[r] for r in RATINGS]].to_numpy(float)
        return (d["mode"] == "score").to_numpy() & np.isfinite(p).all(axis=1) & d["reference_rating"].notna().to_numpy()

    specs = [
        MetricSpec("parse_rate", lambda d: np.ones(len(d), bool),
                   lambda d: np.c_[col(d["parsed"]), ones(d)], 2, "ratio"),
        *(MetricSpec(outcome, has(target), lambda d, t=target: eq1_values(d["answer"], d[t]), 2, "ratio")
          for outcome, target in OUTCOME_TARGETS.items()),
        *(MetricSpec(PARSED_ONLY[outcome], has(target),
                     lambda d, t=target: np.c_[col(_eq(d["answer"], d[t])), col(d["parsed"])], 2, "ratio")
          for outcome, target in OUTCOME_TARGETS.items()),
        MetricSpec("macro_f1", lambda d: (d["label"].notna() & d["parsed"]).to_numpy(),
                   lambda d: _one_hot_confusion(d["answer"], d["label"]), 9, "macro_f1"),
        MetricSpec("prob_herding", probs_ok, lambda d: np.c_[_ref_prob(d), ones(d)], 2, "ratio"),
    ]
    for r in RATINGS:  # the answer distribution: a model that always says "bullish" shows here
        specs.append(MetricSpec(f"share_{r.value}", lambda d: d["parsed"].to_numpy(bool),
                                lambda d, r=r: np.c_[col(d["answer"] == r.value), ones(d)], 2, "ratio"))
    return tuple(specs)


METRIC_SPECS = _specs()


@lru_cache(maxsize=512)
def _weights(n_clusters: int, reps: int, seed: int) -> np.ndarray:
    """`stats.bootstrap_weights`, drawn once per (clusters, reps, seed) and shared read-only.

    The draw depends on nothing else, so every metric x model x condition x sector with the same
    number of firms reuses it (the same numbers as drawing afresh; at 1,000 replicates drawing
    them again for each of ~10,000 estimates was most of stage 04's time).
    """
    w = stats.bootstrap_weights(n_clusters, reps, seed)
    w.setflags(write=False)
    return w


def bootstrap(sums: np.ndarray, statistic: stats.Statistic, reps: int, seed: int, ci: float) -> stats.Estimate:
    """`stats.bootstrap_ci` with the cached replicate weights."""
    return stats.bootstrap_ci(sums, statistic, reps, seed, ci, weights=_weights(int(np.shape(sums)[0]), reps, seed))


def _statistic(kind: str) -> stats.Statistic:
    return stats.ratio if kind == "ratio" else stats.macro_f1_from_confusion


def _denominator(sums: np.ndarray, kind: str) -> int:
    return int(round(sums[:, 1].sum())) if kind == "ratio" else int(round(sums.sum()))


def _subset_sums(codes: np.ndarray, values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Cluster sums over the rows in `mask`, with only the clusters present there (so that a
    sector's bootstrap resamples that sector's firms, not empty ones)."""
    if not mask.any():
        return np.zeros((0, values.shape[1]))
    uniq, inv = np.unique(codes[mask], return_inverse=True)
    return stats.sums_by_code(inv, len(uniq), values[mask])


def _sector_index(sector: pd.Series) -> np.ndarray:
    """Position of each row's sector in SECTORS (NaN outside the paper's nine)."""
    return sector.map({s: i for i, s in enumerate(SECTORS)}).to_numpy(dtype=float)


def _estimate_rows(df: pd.DataFrame, values: np.ndarray, kind: str, k: int, reps: int, seed: int,
                   ci: float) -> list[dict]:
    """Per sector, pooled and mean-of-sectors estimates of one metric on rows `df`."""
    return _estimate_arrays(pd.factorize(df["ticker"].to_numpy(dtype=object))[0], _sector_index(df["sector"]),
                            values, kind, k, reps, seed, ci)


def _estimate_arrays(firm: np.ndarray, sec_idx: np.ndarray, values: np.ndarray, kind: str, k: int, reps: int,
                     seed: int, ci: float) -> list[dict]:
    """`_estimate_rows` on arrays: `firm` integer firm codes (-1 = no ticker), `sec_idx` sector
    positions. Firms are renumbered in order of first appearance, so the clusters (and hence the
    bootstrap draws) are the same whichever frame the codes were taken from."""
    stat = _statistic(kind)
    if (firm < 0).any():
        raise ValueError("a scored row has no ticker: cannot cluster the bootstrap by firm")
    codes = pd.factorize(firm)[0]
    out = []

    def add(label: str, sums: np.ndarray, statistic, n: int) -> None:
        est = bootstrap(sums, statistic, reps, seed, ci)
        out.append({"sector": label, "value": est.value if n else np.nan, "ci_low": est.ci_low,
                    "ci_high": est.ci_high, "n": n})

    for i, sector in enumerate(SECTORS):
        sums = _subset_sums(codes, values, sec_idx == i)
        add(sector, sums, stat, _denominator(sums, kind))
    pooled = _subset_sums(codes, values, np.ones(len(codes), bool))
    add(POOLED, pooled, stat, _denominator(pooled, kind))
    # Mean of sectors: each row's values go to its sector's block of columns.
    in_paper = np.isfinite(sec_idx)
    wide = np.zeros((len(codes), len(SECTORS) * k))
    rows_i = np.flatnonzero(in_paper)
    base = sec_idx[in_paper].astype(int) * k
    for j in range(k):
        wide[rows_i, base + j] = values[in_paper, j]
    wsums = _subset_sums(codes, wide, in_paper)
    add(SECTOR_MEAN, wsums, stats.mean_over_groups(stat, len(SECTORS), k),
        _denominator(_subset_sums(codes, values, in_paper), kind))
    return out


def _parse_rates(parsed: np.ndarray, sec_idx: np.ndarray) -> dict[str, float]:
    """Parse rate per sector / pooled / mean-of-sectors label, over the rows a metric uses."""
    rates = {}
    for i, s in enumerate(SECTORS):
        m = sec_idx == i
        rates[s] = float(parsed[m].mean()) if m.any() else np.nan
    rates[POOLED] = float(parsed.mean()) if len(parsed) else np.nan
    vals = [rates[s] for s in SECTORS if np.isfinite(rates[s])]
    rates[SECTOR_MEAN] = float(np.mean(vals)) if vals else np.nan
    return rates


def metrics_long(rows: pd.DataFrame, reps: int, seed: int, ci: float = 0.95,
                 specs: Iterable[MetricSpec] = METRIC_SPECS) -> pd.DataFrame:
    """Every metric x model x condition x sector (+ pooled + mean of sectors) with cluster CIs.

    Long format: model, condition, sector, metric, value, ci_low, ci_high, n, parse_rate.
    `n` is the metric's denominator (all rows with a target for Eq. 1's `herding` / `accuracy`,
    parsed rows for the `*_parsed` variants); `parse_rate` is the share parsed among the rows the metric is defined on.

    A spec's `eligible` and `values` are row-wise, so they are evaluated once on all rows and each
    model x condition takes its slice (per-group pandas filtering was most of the time at 674k rows).
    """
    records = []
    specs = tuple(specs)
    groups = rows.groupby(["model", "condition"], sort=True).indices if len(rows) else {}
    if groups:
        firm = pd.factorize(rows["ticker"].to_numpy(dtype=object))[0]
        sec_idx = _sector_index(rows["sector"])
        parsed = rows["parsed"].to_numpy(bool)
        labelled = rows["label"].notna().to_numpy()
        with np.errstate(invalid="ignore", divide="ignore"):  # rows outside a metric may give NaN there
            masks = [np.asarray(spec.eligible(rows), dtype=bool) for spec in specs]
            values = [np.asarray(spec.values(rows), dtype=float).reshape(len(rows), spec.k) for spec in specs]
    for model, condition in sorted(groups):
        g = groups[(model, condition)]
        for spec, mask, vals in zip(specs, masks, values):
            d = g[mask[g]]
            if not len(d):
                continue
            # macro-F1 and answer shares are defined on parsed rows only: report the parse rate
            # of the rows they could have used (labelled rows / all rows) instead of a trivial 100 %
            base = g[labelled[g]] if spec.name == "macro_f1" else g if spec.name.startswith("share_") else d
            rates = _parse_rates(parsed[base], sec_idx[base])
            for rec in _estimate_arrays(firm[d], sec_idx[d], vals[d], spec.statistic, spec.k, reps, seed, ci):
                records.append({"model": model, "condition": condition, "metric": spec.name,
                                "parse_rate": rates[rec["sector"]], **rec})
    cols = ["model", "condition", "sector", "metric", "value", "ci_low", "ci_high", "n", "parse_rate"]
    return pd.DataFrame.from_records(records, columns=cols)


KL_PAIRS: tuple[tuple[Condition, Condition], ...] = (
    (Condition.ORIGINAL, Condition.NO_RATING),
    (Condition.NO_RATING, Condition.NO_OPINION),
    (Condition.ORIGINAL, Condition.NO_OPINION),
    (Condition.ORIGINAL, Condition.FAKE_RATING),
)


def kl_divergence(p: np.ndarray, q: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Row-wise KL(p || q) in nats for probability rows (renormalised; eps guards log 0)."""
    p = np.clip(np.asarray(p, float), eps, None)
    q = np.clip(np.asarray(q, float), eps, None)
    p = p / p.sum(axis=-1, keepdims=True)
    q = q / q.sum(axis=-1, keepdims=True)
    return (p * np.log(p / q)).sum(axis=-1)


def model_condition_groups(rows: pd.DataFrame) -> dict[tuple[str, str], pd.DataFrame]:
    """(model, condition) -> its rows, split once for the many pairings of one stage run."""
    return dict(iter(rows.groupby(["model", "condition"], sort=False))) if len(rows) else {}


def paired_rows(rows: pd.DataFrame, model: str, cond_a: str, cond_b: str,
                groups: dict[tuple[str, str], pd.DataFrame] | None = None) -> pd.DataFrame:
    """Rows of `cond_a` joined to the same report's `cond_b` row (suffixes _a, _b).

    With two fake ratings per report each fake item is paired with the one original row.
    `groups` (from `model_condition_groups(rows)`) saves filtering all rows for every pair.
    """
    if groups is None:
        a = rows[(rows["model"] == model) & (rows["condition"] == cond_a)]
        b = rows[(rows["model"] == model) & (rows["condition"] == cond_b)]
    else:
        empty = rows.iloc[:0]
        a, b = groups.get((model, cond_a), empty), groups.get((model, cond_b), empty)
    keep = ["report_id", "ticker", "sector", "answer", "parsed", "reference_rating", "label",
            "p_bullish", "p_neutral", "p_bearish"]
    dup_a, dup_b = a["report_id"].duplicated().any(), b["report_id"].duplicated().any()
    if dup_a and dup_b:
        raise ValueError(f"{model}: both {cond_a} and {cond_b} have several rows per report; cannot pair them")
    if dup_b:  # e.g. (original, fake_rating) with two fakes per report: one original row per fake item
        merged = b[keep].merge(a[keep].drop(columns=["ticker", "sector"]), on="report_id", suffixes=("_b", "_a"))
    else:
        merged = a[keep].merge(b[keep].drop(columns=["ticker", "sector"]), on="report_id", suffixes=("_a", "_b"))
    return merged.reset_index(drop=True)


def kl_metrics(rows: pd.DataFrame, reps: int, seed: int, ci: float = 0.95) -> pd.DataFrame:
    """Mean per-report KL(P_a || P_b) between two conditions' label distributions (score mode).

    A herding-free model would give the same distribution whether or not the rating is shown
    (KL 0); the mean KL measures how far one sentence moves the model's belief.
    """
    records = []
    probs = [PROB_COLUMNS[r] for r in RATINGS]
    models = sorted(rows.loc[rows["mode"] == "score", "model"].unique())
    groups = model_condition_groups(rows) if models else {}
    for model in models:
        for ca, cb in KL_PAIRS:
            pr = paired_rows(rows, model, ca.value, cb.value, groups)
            if pr.empty:
                continue
            pa, pb = pr[[f"{c}_a" for c in probs]].to_numpy(float), pr[[f"{c}_b" for c in probs]].to_numpy(float)
            ok = np.isfinite(pa).all(axis=1) & np.isfinite(pb).all(axis=1)
            if not ok.any():
                continue
            d = pr[ok].reset_index(drop=True)
            vals = np.c_[kl_divergence(pa[ok], pb[ok]), np.ones(ok.sum())]
            for rec in _estimate_rows(d, vals, "ratio", 2, reps, seed, ci):
                records.append({"model": model, "condition": f"{ca.value}||{cb.value}", "metric": "kl_divergence",
                                "parse_rate": np.nan, **rec})
    cols = ["model", "condition", "sector", "metric", "value", "ci_low", "ci_high", "n", "parse_rate"]
    return pd.DataFrame.from_records(records, columns=cols)


def fake_transitions(rows: pd.DataFrame) -> pd.DataFrame:
    """Counts of original analyst rating -> fake rating shown -> model answer (fake_rating rows).

    Shows whether herding is asymmetric, e.g. a model that follows a fake "bullish" but not a
    fake "bearish". Unparsed answers appear as "unparsed", not dropped.
    """
    cols = ["model", "analyst_rating", "fake_rating", "answer", "n", "share", "parse_rate"]
    f = rows[rows["condition"] == Condition.FAKE_RATING.value]
    if f.empty:
        return pd.DataFrame(columns=cols)
    f = f.assign(answer=f["answer"].fillna("unparsed"))
    key = ["model", "analyst_rating", "fake_rating"]
    t = f.groupby([*key, "answer"], as_index=False).size()
    t = t.rename(columns={"size": "n"})
    total = t.groupby(key)["n"].transform("sum")
    t["share"] = t["n"] / total
    # parse rate of the (analyst, fake) group: a share of 100 % from one parsed answer out of 50 must show
    parsed_n = t["n"].where(t["answer"] != "unparsed", 0)
    t["parse_rate"] = parsed_n.groupby([t[k] for k in key]).transform("sum") / total
    return t.sort_values([*key, "answer"]).reset_index(drop=True)[cols]


# --------------------------------------------------------------------------------------
# 4. Paired tests between conditions (same reports)
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PairedTest:
    """Which binary outcome (or answer shift) is compared between two conditions."""

    name: str
    cond_a: Condition
    cond_b: Condition
    kind: str                      # "mcnemar" | "stuart_maxwell"
    outcome: str = ""              # "herding" | "fake_herding" | "accuracy"


PAIRED_TESTS: tuple[PairedTest, ...] = (
    PairedTest("herding_with_vs_without", Condition.ORIGINAL, Condition.NO_RATING, "mcnemar", "herding"),
    PairedTest("fake_herding_fake_vs_original", Condition.FAKE_RATING, Condition.ORIGINAL, "mcnemar",
               "fake_herding"),
    PairedTest("herding_no_opinion_vs_no_rating", Condition.NO_OPINION, Condition.NO_RATING, "mcnemar",
               "herding"),
    PairedTest("accuracy_with_vs_without", Condition.ORIGINAL, Condition.NO_RATING, "mcnemar", "accuracy"),
    PairedTest("accuracy_no_opinion_vs_no_rating", Condition.NO_OPINION, Condition.NO_RATING, "mcnemar",
               "accuracy"),
    PairedTest("answer_shift_with_vs_without", Condition.ORIGINAL, Condition.NO_RATING, "stuart_maxwell"),
    PairedTest("answer_shift_no_opinion_vs_no_rating", Condition.NO_OPINION, Condition.NO_RATING,
               "stuart_maxwell"),
    PairedTest("answer_shift_fake_vs_original", Condition.FAKE_RATING, Condition.ORIGINAL, "stuart_maxwell"),
)


def _outcomes(pr: pd.DataFrame, outcome: str) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Pairs with the target and the two binary outcomes, each Eq. 1's per-answer hit
    (`eq1_values`: an unparsed answer is no match), so a marker tests the difference of the rates
    the table prints. Both rows of a pair were answered (not-answered rows never reach scoring).

    fake_herding: does the answer equal the *fake* rating, when it is shown (a) vs on the
    original report (b)? An increase is herding towards the fake, not mere agreement.
    """
    target = {"herding": "reference_rating_a", "fake_herding": "reference_rating_a", "accuracy": "label_a"}[outcome]
    d = pr[pr[target].notna()].reset_index(drop=True)
    return (d, eq1_values(d["answer_a"], d[target])[:, 0].astype(bool),
            eq1_values(d["answer_b"], d[target])[:, 0].astype(bool))


def _sector_splits(pr: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The pooled pairs and each sector's, in the order the tests report them; none when nothing paired."""
    if pr.empty:
        return {}
    return {sector: pr if sector == POOLED else pr[pr["sector"] == sector] for sector in (POOLED, *SECTORS)}


def paired_tests(rows: pd.DataFrame, tests: Iterable[PairedTest] = PAIRED_TESTS, reps: int = 0,
                 seed: int = 0, ci: float = 0.95) -> pd.DataFrame:
    """Every paired test per model, pooled and by sector, with Holm across models.

    Holm's family is one test x one sector across all models (the paper's claims are per
    table and column: "does *each* model herd?"). McNemar pairs are every report answered in both
    conditions, an unparsed answer counting as no match (Eq. 1, as the cells); Stuart-Maxwell
    compares answer distributions and needs both answers parsed. McNemar rows also carry the
    paired difference rate_a - rate_b with a cluster-bootstrap CI (reps > 0).
    """
    names = [r.value for r in RATINGS]
    tests = tuple(tests)
    by_test: list[list[dict]] = [[] for _ in tests]
    models = sorted(m for m in rows["model"].unique() if m != "Analyst")
    groups = model_condition_groups(rows)
    for model in models:
        # Tests share condition pairs (the eight published ones use three): each pair is joined and split
        # by sector once per model; joining and filtering again for every test was most of their own time.
        splits: dict[tuple[str, str], dict[str, pd.DataFrame]] = {}
        for t, records in zip(tests, by_test):
            key = (t.cond_a.value, t.cond_b.value)
            if key not in splits:
                splits[key] = _sector_splits(paired_rows(rows, model, *key, groups))
            for sector, sub in splits[key].items():
                rec = {"test": t.name, "model": model, "condition_a": t.cond_a.value,
                       "condition_b": t.cond_b.value, "sector": sector}
                if t.kind == "mcnemar":
                    d, xa, xb = _outcomes(sub, t.outcome)
                    r = stats.mcnemar_exact(xa, xb)
                    diff = stats.Estimate(np.nan, np.nan, np.nan, 0)
                    if len(d) and reps > 0:
                        _, sums = stats.cluster_sums(d["ticker"], np.c_[xa.astype(float) - xb, np.ones(len(d))])
                        diff = bootstrap(sums, stats.ratio, reps, seed, ci)
                    rec.update(diff=diff.value, diff_ci_low=diff.ci_low, diff_ci_high=diff.ci_high)
                    rec.update(method="exact McNemar", n_pairs=r.n_pairs, rate_a=float(xa.mean()) if len(d) else np.nan,
                               rate_b=float(xb.mean()) if len(d) else np.nan, only_a=r.only_a, only_b=r.only_b,
                               statistic=r.statistic, df=np.nan, pvalue=r.pvalue if len(d) else np.nan, note="")
                else:
                    d = sub[sub["parsed_a"] & sub["parsed_b"]]
                    r = stats.stuart_maxwell(d["answer_a"], d["answer_b"], names) if len(d) else None
                    rec.update(diff=np.nan, diff_ci_low=np.nan, diff_ci_high=np.nan)
                    rec.update(method="Stuart-Maxwell", n_pairs=len(d), rate_a=np.nan, rate_b=np.nan,
                               only_a=np.nan, only_b=np.nan,
                               statistic=r.statistic if r else np.nan, df=r.df if r else np.nan,
                               pvalue=r.pvalue if r else np.nan, note=r.note if r else "no parsed pairs")
                records.append(rec)
    out = pd.DataFrame.from_records([rec for records in by_test for rec in records])
    if out.empty:
        return out
    out["p_holm"] = np.nan
    for _, idx in out.groupby(["test", "sector"]).groups.items():
        out.loc[idx, "p_holm"] = stats.holm(out.loc[idx, "pvalue"].to_numpy())
    out["marker"] = out["p_holm"].map(stats.significance_marker)
    return out
