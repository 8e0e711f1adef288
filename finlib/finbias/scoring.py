"""Stage 04: turn model outputs into ratings, score herding and accuracy, write Tables 4-7.

Three layers, each a set of small pure functions:

1. Parsing (`parse_rating`, `answer_from_probs`): a model's text becomes a `Rating` or
   `None` (unparsed). Unparsed is never turned into "neutral": a default answer would
   silently move herding and accuracy towards whatever the default happens to be.
2. Metrics (`METRIC_SPECS` evaluated by `metrics_long`; `confusion`, `macro_f1`): Fin-Bias
   Section 4.1 plus parse rates, confusion and macro-F1, by sector and overall, with cluster
   bootstrap intervals over firms from `finlib.core.stats`.
3. The stage (`score_run`): reads the stage 00-03 artifacts, writes `metrics.parquet`,
   `paired_tests.parquet`, `scoring_report.json` and Tables 4-7 beside the paper's numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from finlib.core import stats
from finlib.core.artifacts import read_frame, require_columns, write_frame, write_json
from finlib.core.config import RunConfig
from finlib.llm.registry import load_registry
from finlib.llm.answers import condition_texts, parse_predictions
from finlib.core.vocab import POOLED, RATINGS, SECTOR_MEAN, SECTORS, Condition, Rating
from finlib.core.tables import write_table

# --------------------------------------------------------------------------------------
# 2. Joining the artifacts
# --------------------------------------------------------------------------------------

PRED_COLUMNS = ("item_id", "report_id", "condition", "model", "mode", "raw_text",
                "p_bullish", "p_neutral", "p_bearish", "status")
COND_COLUMNS = ("item_id", "report_id", "condition", "analyst_rating", "fake_rating",
                "reference_rating", "status", "skip_reason")
PROB_COLUMNS = {Rating.BULLISH: "p_bullish", Rating.NEUTRAL: "p_neutral", Rating.BEARISH: "p_bearish"}


def _check_ratings(df: pd.DataFrame, column: str, artifact: str) -> None:
    allowed = {r.value for r in RATINGS}
    bad = df[df[column].notna() & ~df[column].isin(allowed)]
    if len(bad):
        row = bad.index[0]
        raise ValueError(f"{artifact}.parquet row {row}: field '{column}' = {bad[column].iloc[0]!r} "
                         f"is not one of {sorted(allowed)}")


@dataclass
class Scored:
    """One row per (model, item) that was run, with everything the metrics need."""

    rows: pd.DataFrame
    skipped: pd.DataFrame          # model, condition, reason, n
    counts: dict = field(default_factory=dict)
    not_answered: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["model", "condition", "error",
                                                                                     "n"]))


def label_model_modes(pred: pd.DataFrame) -> pd.DataFrame:
    """Name a model run in two modes as two rows ("m [score]", "m [generate]"): label scoring and
    free generation are different measurements and must never be pooled into one score."""
    modes = pred.groupby("model")["mode"].nunique()
    multi = set(modes[modes > 1].index)
    if not multi:
        return pred
    out = pred.copy()
    hit = out["model"].isin(multi)
    out.loc[hit, "model"] = out.loc[hit, "model"] + " [" + out.loc[hit, "mode"] + "]"
    return out


def score_frame(predictions: pd.DataFrame, conditions: pd.DataFrame, labels: pd.DataFrame,
                reports: pd.DataFrame) -> Scored:
    """Parse answers and attach reference rating, sector, firm and return-based label.

    Skipped items (condition or inference status "skipped") are set aside with their reason:
    they are not zeros. Not-answered items (inference status "error": the server or network
    failed after retries) are set aside too and counted with their error: the model
    never answered, so they are outside N, unlike an answer that did not parse (inside N).
    Predictions for items missing from conditions/reports are an error.
    """
    require_columns(predictions, PRED_COLUMNS, "predictions.parquet")
    require_columns(conditions, COND_COLUMNS, "conditions.parquet")
    require_columns(labels, ("report_id", "label"), "labels.parquet")
    require_columns(reports, ("report_id", "ticker", "sector", "analyst_rating"), "reports.parquet")
    for frame, col, name in ((conditions, "reference_rating", "conditions"), (labels, "label", "labels"),
                             (reports, "analyst_rating", "reports")):
        _check_ratings(frame, col, name)
    pred = label_model_modes(parse_predictions(predictions, condition_texts(conditions)))
    cond = conditions[list(COND_COLUMNS)].rename(columns={"status": "condition_status",
                                                          "condition": "condition_c", "report_id": "report_id_c"})
    rows = pred.merge(cond, on="item_id", how="left", validate="many_to_one", indicator=True)
    orphan = rows[rows["_merge"] == "left_only"]
    if len(orphan):
        raise ValueError(f"predictions.parquet: {len(orphan)} item_id(s) not in conditions.parquet, "
                         f"e.g. row {orphan.index[0]} item_id={orphan['item_id'].iloc[0]!r} (predictions made from "
                         "older conditions? rerun stage 03 after stage 02)")
    mismatch = rows[(rows["condition"] != rows["condition_c"]) | (rows["report_id"] != rows["report_id_c"])]
    if len(mismatch):
        raise ValueError(f"predictions.parquet row {mismatch.index[0]}: condition/report_id disagree with "
                         f"conditions.parquet for item_id={mismatch['item_id'].iloc[0]!r}")
    rows = rows.drop(columns=["_merge", "condition_c", "report_id_c"])
    rows = rows.merge(reports[["report_id", "ticker", "sector"]], on="report_id", how="left",
                      validate="many_to_one", indicator=True)
    orphan = rows[rows["_merge"] == "left_only"]
    if len(orphan):
        raise ValueError(f"conditions/predictions: report_id={orphan['report_id'].iloc[0]!r} not in reports.parquet")
    rows = rows.drop(columns="_merge").merge(labels[["report_id", "label"]], on="report_id", how="left",
                                             validate="many_to_one")
    skip_mask = (rows["status"] == "skipped") | (rows["condition_status"] == "skipped")
    reason = rows["skip_reason"].where(rows["condition_status"] == "skipped")
    if "error" in rows.columns:
        reason = reason.fillna(rows["error"].where(rows["status"] == "skipped"))
    reason = reason.fillna("skipped (no reason recorded)")
    skipped = (rows[skip_mask].assign(reason=reason[skip_mask])
               .groupby(["model", "condition", "reason"], as_index=False).size().rename(columns={"size": "n"}))
    na_mask = ~skip_mask & ~rows["answered"].astype(bool)
    errors = (rows["error"] if "error" in rows.columns else pd.Series(None, index=rows.index, dtype=object))
    not_answered = (rows[na_mask].assign(error=errors[na_mask].fillna("error (no message)").astype(str).str[:160])
                    .groupby(["model", "condition", "error"], as_index=False).size().rename(columns={"size": "n"}))
    kept = rows[~skip_mask & ~na_mask].reset_index(drop=True)
    notes = kept.groupby(["model", "condition", "parse_note"]).size()
    counts = {
        "parse_notes": [{"model": m, "condition": c, "parse_note": n, "n": int(v)} for (m, c, n), v in notes.items()],
        "predictions": int(len(rows)),
        "skipped": int(skip_mask.sum()),
        "not_answered": int(na_mask.sum()),   # server/transport errors after retries: outside N
        "scored_rows": int(len(kept)),         # answered rows: the N of every rate
        "unparsed": int((~kept["parsed"]).sum()),   # answered but unparsed (incl. truncated): inside N
        "truncated": int((kept["parse_note"] == "truncated").sum()),
        "rows_without_label": int(kept["label"].isna().sum()),
        "rows_without_reference_rating": int(kept["reference_rating"].isna().sum()),
        "rows_outside_paper_sectors": int((~kept["sector"].isin(SECTORS)).sum()),
    }
    return Scored(kept, skipped, counts, not_answered)


def analyst_rows(reports: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """The analyst as a pseudo-model on `original`: the baseline row of Tables 6 and 7.

    Its "parse rate" is the share of labelled reports whose first sentence carries a rating.
    """
    df = reports[["report_id", "ticker", "sector", "analyst_rating"]].merge(
        labels[["report_id", "label"]], on="report_id", how="inner")
    return pd.DataFrame({
        "model": "Analyst", "mode": "analyst", "condition": Condition.ORIGINAL.value,
        "report_id": df["report_id"], "ticker": df["ticker"], "sector": df["sector"],
        "answer": df["analyst_rating"].astype(object), "parsed": df["analyst_rating"].notna(),
        "reference_rating": df["analyst_rating"].astype(object), "label": df["label"],
        "p_bullish": np.nan, "p_neutral": np.nan, "p_bearish": np.nan,
    })


# --------------------------------------------------------------------------------------
# 3. Metrics
# --------------------------------------------------------------------------------------

def _eq(a: pd.Series, b: pd.Series) -> np.ndarray:
    """Elementwise equality where a missing value on either side is False (never a match)."""
    return (a.notna() & b.notna() & (a.astype(object) == b.astype(object))).to_numpy(bool)


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
        MetricSpec("herding", has("reference_rating"),
                   lambda d: np.c_[col(_eq(d["answer"], d["reference_rating"])), col(d["parsed"])], 2, "ratio"),
        MetricSpec("herding_all", has("reference_rating"),
                   lambda d: np.c_[col(_eq(d["answer"], d["reference_rating"])), ones(d)], 2, "ratio"),
        MetricSpec("accuracy", has("label"),
                   lambda d: np.c_[col(_eq(d["answer"], d["label"])), col(d["parsed"])], 2, "ratio"),
        MetricSpec("accuracy_all", has("label"),
                   lambda d: np.c_[col(_eq(d["answer"], d["label"])), ones(d)], 2, "ratio"),
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
    `n` is the metric's denominator (parsed rows for herding/accuracy, all eligible rows for
    the `_all` variants); `parse_rate` is the share parsed among the rows the metric is defined on.

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
    """Pairs where both answers parsed (and the target exists) and the two binary outcomes.

    fake_herding: does the answer equal the *fake* rating, when it is shown (a) vs on the
    original report (b)? An increase is herding towards the fake, not mere agreement.
    """
    target = {"herding": "reference_rating_a", "fake_herding": "reference_rating_a", "accuracy": "label_a"}[outcome]
    ok = pr["parsed_a"] & pr["parsed_b"] & pr[target].notna()
    d = pr[ok].reset_index(drop=True)
    return d, _eq(d["answer_a"], d[target]), _eq(d["answer_b"], d[target])


def paired_tests(rows: pd.DataFrame, tests: Iterable[PairedTest] = PAIRED_TESTS, reps: int = 0,
                 seed: int = 0, ci: float = 0.95) -> pd.DataFrame:
    """Every paired test per model, pooled and by sector, with Holm across models.

    Holm's family is one test x one sector across all models (the paper's claims are per
    table and column: "does *each* model herd?"). Pairs need both answers parsed. McNemar rows
    also carry the paired difference rate_a - rate_b with a cluster-bootstrap CI (reps > 0).
    """
    names = [r.value for r in RATINGS]
    records = []
    models = sorted(m for m in rows["model"].unique() if m != "Analyst")
    groups = model_condition_groups(rows)
    for t in tests:
        for model in models:
            pr = paired_rows(rows, model, t.cond_a.value, t.cond_b.value, groups)
            if pr.empty:
                continue
            for sector in (POOLED, *SECTORS):
                sub = pr if sector == POOLED else pr[pr["sector"] == sector]
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
    out = pd.DataFrame.from_records(records)
    if out.empty:
        return out
    out["p_holm"] = np.nan
    for _, idx in out.groupby(["test", "sector"]).groups.items():
        out.loc[idx, "p_holm"] = stats.holm(out.loc[idx, "pvalue"].to_numpy())
    out["marker"] = out["p_holm"].map(stats.significance_marker)
    return out


# --------------------------------------------------------------------------------------
# 5. Tables 4-7 in the paper's layout, with the published numbers beside ours
# --------------------------------------------------------------------------------------

# Tables 4-7 live in finlib/finbias/paper_layout.py (layout changes for other reasons than the
# statistics); their names stay importable from here.
from finlib.finbias.paper_layout import (AVERAGE, OURS, PAPER, POOLED_CI, SIGNIF_NOTE, TABLE_SPECS,  # noqa: E402,F401
                                   TableSpec, averaging_note, base_model, build_table, caption_for, ci_table,
                                   index_cells, paper_row_name, paper_rows, printed_average_agreement)


# --------------------------------------------------------------------------------------
# 6. The stage
# --------------------------------------------------------------------------------------



@dataclass
class ScoringResult:
    """Everything stage 04 produced, for the notebook to display."""

    rows: pd.DataFrame
    metrics: pd.DataFrame
    tests: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    transitions: pd.DataFrame
    confusion: pd.DataFrame
    report: dict
    plumbing: tuple[str, ...] = ()    # table rows whose registry record has `plumbing: true`


def confusion_long(rows: pd.DataFrame) -> pd.DataFrame:
    """Confusion matrices (label x answer counts) per model x condition, parsed & labelled rows,
    with each label row's N (all rows with that label) and parse rate (share of them parsed)."""
    recs = []
    for (model, cond), g in rows.groupby(["model", "condition"], sort=True):
        tab = confusion(g["answer"], g["label"])
        for lab in tab.index:
            with_label = g[g["label"] == lab]
            n = int(len(with_label))
            recs.append({"model": model, "condition": cond, "label": lab, **tab.loc[lab].to_dict(), "n": n,
                         "parse_rate": float(with_label["parsed"].mean()) if n else np.nan})
    return pd.DataFrame.from_records(recs)


def score_all(predictions: pd.DataFrame, conditions: pd.DataFrame, labels: pd.DataFrame,
              reports: pd.DataFrame, reps: int, seed: int, ci: float = 0.95,
              registry: dict | None = None) -> ScoringResult:
    """Pure core of the stage (no disk): parse, score, test and lay out the tables.

    `registry` (name -> `ModelSpec`) supplies each model's `paper_name` (to point at the paper's
    row) and `plumbing` flag; without it no model is matched or flagged.
    """
    registry = registry or {}
    paper_names = {n: s.paper_name for n, s in registry.items() if getattr(s, "paper_name", None)}
    scored = score_frame(predictions, conditions, labels, reports)
    analyst = analyst_rows(reports, labels)
    all_rows = pd.concat([scored.rows, analyst], ignore_index=True)
    metrics = pd.concat([metrics_long(all_rows, reps, seed, ci), kl_metrics(scored.rows, reps, seed, ci)],
                        ignore_index=True)
    tests = paired_tests(scored.rows, reps=reps, seed=seed, ci=ci)
    tables = {}
    for spec in TABLE_SPECS:
        for parsed in (False, True):
            tables[spec.parsed_name if parsed else spec.name] = build_table(
                spec, metrics, tests, all_rows, scored.skipped, paper_names, ci, scored.not_answered, parsed)
        tables[f"{spec.name}_ci"] = ci_table(spec, metrics)
    parse = (scored.rows.groupby(["model", "condition"])["parsed"].agg(["size", "mean"])
             .rename(columns={"size": "n", "mean": "parse_rate"}).reset_index())
    report = {**scored.counts, "bootstrap_reps": reps, "ci": ci, "seed": seed,
              "skipped": scored.skipped.to_dict(orient="records"),
              "not_answered_by_error": scored.not_answered.to_dict(orient="records"),
              "parse_rate": parse.to_dict(orient="records"),
              "analyst_reports_with_label": int(len(analyst)),
              "main_cells": "Eq. 1 over all answered items (unparsed = no match); *_parsed tables: parsed only",
              "averages": f"'{AVERAGE}' = pooled rate ('{POOLED}'); '{SECTOR_MEAN}' beside it",
              "printed_average_agreement": printed_average_agreement()}
    plumbing = tuple(sorted(m for m in scored.rows["model"].unique()
                            if getattr(registry.get(base_model(m)), "plumbing", False)))
    return ScoringResult(all_rows, metrics, tests, tables, fake_transitions(scored.rows),
                         confusion_long(all_rows), report, plumbing)


SCORING_KEYS = ("bootstrap_reps", "ci")  # params `scoring:`; a misspelled or missing key is an error


def scoring_params(cfg: RunConfig) -> dict:
    """The `scoring:` section, checked: every key documented in params/default.yaml, none defaulted."""
    return cfg.section("scoring", known=SCORING_KEYS, required=SCORING_KEYS)


def score_run(cfg: RunConfig) -> ScoringResult:
    """Stage 04 entry: read the 00-03 artifacts, score, write metrics/tests/report and Tables 4-7."""
    from finlib.finbias.inference import inference_params  # here, not at the top: stage 03 imports this module's parser

    sc = scoring_params(cfg)
    registry = load_registry(cfg.path(inference_params(cfg)["registry"]))
    res = score_all(read_frame(cfg, "predictions"), read_frame(cfg, "conditions"), read_frame(cfg, "labels"),
                    read_frame(cfg, "reports"), reps=int(sc["bootstrap_reps"]), seed=cfg.seed,
                    ci=float(sc["ci"]), registry=registry)
    write_frame(cfg, "metrics", res.metrics)
    write_frame(cfg, "paired_tests", res.tests)
    write_json(cfg, "scoring_report", res.report)
    note = averaging_note(res.report["printed_average_agreement"])
    for spec in TABLE_SPECS:
        write_table(cfg, spec.name, res.tables[spec.name], caption_for(spec, note))
        write_table(cfg, spec.parsed_name, res.tables[spec.parsed_name], caption_for(spec, note, parsed=True))
        write_table(cfg, f"{spec.name}_ci", res.tables[f"{spec.name}_ci"],
                    f"{spec.caption}: values ({spec.metric} = Eq. 1 over all answers, {spec.parsed_metric} = parsed "
                    "only), 95 % cluster-bootstrap CIs over firms, N and parse rate (long form)")
    write_table(cfg, "table5_fake_transitions", res.transitions,
                "Fake-rating transitions: analyst rating -> fake rating shown -> model answer (counts, shares; "
                "parse_rate = share of the analyst x fake group's answers that parsed)")
    write_table(cfg, "table_paired_tests", res.tests,
                "Paired tests between conditions on the same reports (exact McNemar with the paired difference "
                "rate_a - rate_b and its cluster-bootstrap CI; Stuart-Maxwell; p_holm: Holm across models)",
                float_format="{:.4g}")
    extra = res.metrics[res.metrics["metric"].isin(["prob_herding", "kl_divergence"])]
    write_table(cfg, "table_prob_herding_kl", extra,
                "Beyond the paper (label-scored models): mean probability on the reference rating per condition, "
                "and mean per-report KL divergence between conditions' label distributions", float_format="{:.4f}")
    write_table(cfg, "table_confusion", res.confusion,
                "Confusion matrices: return-based label (rows) x answer, over parsed answers; n = rows with "
                "that label, parse_rate = share of them parsed")
    return res


# --------------------------------------------------------------------------------------
# 7. Notebook helpers (display only)
# --------------------------------------------------------------------------------------

def plumbing_summary(rows: pd.DataFrame, model: str) -> pd.DataFrame:
    """This run's own numbers for a plumbing model, per condition: N, parse rate, mean
    p_bullish (label-scored rows) and share of parsed answers that are bullish."""
    g = rows[rows["model"] == model]
    out = g.groupby("condition").agg(n=("parsed", "size"), parse_rate=("parsed", "mean"),
                                     mean_p_bullish=("p_bullish", "mean"))
    parsed = g[g["parsed"]]
    out["share_bullish"] = (parsed["answer"] == Rating.BULLISH.value).groupby(parsed["condition"]).mean()
    order = [c.value for c in CONDITIONS_ORDER]
    return out.reindex([c for c in order if c in out.index] + [c for c in out.index if c not in order])


def _summary_line(model: str, summ: pd.DataFrame) -> str:
    parts = []
    for cond, r in summ.iterrows():
        p = f"mean p_bullish {r['mean_p_bullish']:.2f}, " if np.isfinite(r["mean_p_bullish"]) else ""
        sb = f"{100 * r['share_bullish']:.0f} %" if np.isfinite(r["share_bullish"]) else "–"
        parts.append(f"{cond}: {p}bullish answers {sb}, parsed {100 * r['parse_rate']:.0f} % of {int(r['n'])}")
    return (f"**Plumbing model: {model}** (registry `plumbing: true`): it only tests the pipeline. Measured "
            f"in this run — {'; '.join(parts)}. When one label dominates whatever the report says, herding "
            "and accuracy mostly reflect how often the reference rating or the label is that label.")


def caveat_banner(cfg: RunConfig, res: ScoringResult) -> str:
    """Markdown warning shown above the tables: synthetic data, plumbing model(s) with this run's
    own measured label preference (never a number quoted from another run)."""
    lines = []
    if cfg.is_synthetic:
        lines.append("**Synthetic data.** These numbers come from the seeded synthetic market and synthetic "
                     "reports: they test the pipeline, they are not research results.")
    for model in res.plumbing:
        lines.append(_summary_line(model, plumbing_summary(res.rows, model)))
    return "\n\n".join(f"> ⚠️ {line}" for line in lines) or "(real data, no plumbing model)"


def pooled_views(res: ScoringResult) -> dict[str, pd.DataFrame]:
    """The pooled rows the notebook shows: Table 4's intervals, paired tests, probability-level
    herding and KL, and the confusion matrices."""
    t4 = res.tables["table4_herding_with_without_ci"]
    m = res.metrics
    return {
        "table4_ci_pooled": t4[t4["sector"] == POOLED].reset_index(drop=True),
        "paired_tests_pooled": (res.tests[res.tests["sector"] == POOLED].reset_index(drop=True)
                                if not res.tests.empty else res.tests),
        "prob_herding_kl_pooled": m[m["metric"].isin(["prob_herding", "kl_divergence"])
                                    & (m["sector"] == POOLED)].reset_index(drop=True),
        "confusion": res.confusion,
    }


def parse_rate_table(res: ScoringResult) -> pd.DataFrame:
    """Parse rate and row counts per model x condition (skipped conditions listed with reason)."""
    pr = pd.DataFrame(res.report["parse_rate"])
    if pr.empty:
        pr = pd.DataFrame(columns=["model", "condition", "n", "parse_rate"])
    sk = pd.DataFrame(res.report["skipped"])
    if not sk.empty:
        sk = sk.rename(columns={"n": "n_skipped", "reason": "skip_reason"})
        pr = pr.merge(sk, on=["model", "condition"], how="outer")
    return pr.sort_values(["model", "condition"]).reset_index(drop=True)


def parse_note_table(res: ScoringResult) -> pd.DataFrame:
    """How each model x condition's answers were read (json, statement, echo, ambiguous, …)."""
    notes = pd.DataFrame(res.report.get("parse_notes", []))
    if notes.empty:
        return notes
    return notes.pivot_table(index=["model", "condition"], columns="parse_note", values="n",
                             fill_value=0, aggfunc="sum").reset_index()


def plot_herding(cfg: RunConfig, res: ScoringResult):
    """Pooled herding (and accuracy) per condition with 95 % CIs; PNG + PDF under figures/<run>/.

    Bars are the tables' main cells (the paper's Eq. 1 over all answered items, unparsed = no
    match), with N (answered items) on each bar and "no parsed answers" in the legend when none parsed.

    The title says "synthetic data" on synthetic runs and names the plumbing models when any
    (registry `plumbing: true`): their numbers only test the pipeline.
    """
    import matplotlib.pyplot as plt

    from finlib.core.tables import save_figure, synthetic_title

    m = res.metrics[(res.metrics["sector"] == POOLED) & res.metrics["metric"].isin(["herding_all", "accuracy_all"])
                    & (res.metrics["model"] != "Analyst")]
    models = sorted(m["model"].unique())
    conds = [c.value for c in CONDITIONS_ORDER]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    width = 0.8 / max(len(models), 1)
    for ax, metric in zip(axes, ["herding_all", "accuracy_all"]):
        for i, model in enumerate(models):
            d = m[(m["model"] == model) & (m["metric"] == metric)].set_index("condition").reindex(conds)
            x = np.arange(len(conds)) + i * width
            err = np.vstack([d["value"] - d["ci_low"], d["ci_high"] - d["value"]]).clip(min=0)
            shown = model if (d["parse_rate"].fillna(0) > 0).any() else f"{model} (no parsed answers)"
            bars = ax.bar(x, 100 * d["value"], width, yerr=100 * np.nan_to_num(err), label=shown, capsize=3)
            # N under each bar: a 100 % from one answer must not read like a result.
            ax.bar_label(bars, labels=[f"N={int(n)}" if pd.notna(n) else "" for n in d["n"]],
                         label_type="center", fontsize=6)
        ax.set_xticks(np.arange(len(conds)) + width * (len(models) - 1) / 2, conds, rotation=20)
        ax.set_title(f"{metric.removesuffix('_all')} (Eq. 1, pooled, 95 % cluster-bootstrap CI)")
        ax.set_ylabel("%")
    axes[0].legend(fontsize=7)
    title = synthetic_title(cfg, "Herding and accuracy by condition (N = answered items; unparsed = no match)")
    if res.plumbing:  # name them only when some bars are not plumbing models
        which = "" if set(res.plumbing) >= set(models) else f" ({', '.join(res.plumbing)})"
        title += f" — plumbing model{which}: not a research result"
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(cfg, fig, "fig_herding_accuracy")
    return fig


CONDITIONS_ORDER = (Condition.ORIGINAL, Condition.NO_RATING, Condition.NO_OPINION, Condition.FAKE_RATING)
