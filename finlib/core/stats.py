"""Uncertainty and paired tests for stage 04 (the paper reports neither).

Cluster bootstrap over firms: reports on the same ticker share firm news and price paths, so
resampling reports as if independent would make intervals too narrow. Every metric here is a
smooth function of *sums* over rows (counts of hits, of parsed answers, confusion cells), so a
replicate is `weights @ per_cluster_sums` with multinomial cluster weights: one matrix product
for all replicates, no per-replicate pandas groupby.

Paired tests compare two conditions on the same reports: exact McNemar for a binary outcome
(herding / correct), Stuart-Maxwell for the shift of the 3-class answer distribution, Holm
across models (statsmodels implements all three; we only shape the inputs).
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from statsmodels.stats.contingency_tables import SquareTable, mcnemar

Statistic = Callable[[np.ndarray], np.ndarray]


def cluster_sums(clusters: Sequence, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster column sums of `values` (n_rows x K) -> (cluster labels, C x K sums)."""
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    codes, labels = pd.factorize(np.asarray(clusters, dtype=object), sort=True)
    if (codes < 0).any():
        raise ValueError("cluster ids must not be missing (a row without a ticker cannot be resampled)")
    return np.asarray(labels), sums_by_code(codes, len(labels), values)


def sums_by_code(codes: np.ndarray, n_clusters: int, values: np.ndarray) -> np.ndarray:
    """C x K column sums of `values` by integer cluster code (the fast path of cluster_sums)."""
    values = np.asarray(values, dtype=float).reshape(len(codes), -1)
    sums = np.zeros((n_clusters, values.shape[1]))
    np.add.at(sums, codes, values)
    return sums


def bootstrap_weights(n_clusters: int, reps: int, seed: int) -> np.ndarray:
    """reps x n_clusters multinomial counts: how often each cluster is drawn in each replicate."""
    rng = np.random.default_rng(seed)
    if n_clusters == 0:
        return np.zeros((reps, 0))
    return rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=reps).astype(float)


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its percentile bootstrap interval (NaN when undefined)."""

    value: float
    ci_low: float
    ci_high: float
    reps_defined: int  # replicates where the statistic was defined (denominator > 0)


def bootstrap_ci(sums: np.ndarray, statistic: Statistic, reps: int, seed: int, ci: float = 0.95,
                 weights: np.ndarray | None = None) -> Estimate:
    """Point estimate `statistic(sums.sum(0))` and a percentile CI from cluster resampling.

    `statistic` maps an (..., K) array of summed columns to (...) values and must be
    vectorised over the leading axes; it may return NaN (e.g. 0/0) for a replicate.
    """
    sums = np.asarray(sums, dtype=float)
    if sums.ndim != 2:
        raise ValueError("sums must be a clusters x K matrix")
    point = float(statistic(sums.sum(axis=0)))
    if sums.shape[0] == 0 or not np.isfinite(point):
        return Estimate(point, np.nan, np.nan, 0)
    w = bootstrap_weights(sums.shape[0], reps, seed) if weights is None else weights
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = np.asarray(statistic(w @ sums), dtype=float)
    ok = boot[np.isfinite(boot)]
    if ok.size == 0:
        return Estimate(point, np.nan, np.nan, 0)
    alpha = (1.0 - ci) / 2.0
    lo, hi = np.quantile(ok, [alpha, 1.0 - alpha])
    return Estimate(point, float(lo), float(hi), int(ok.size))


def ratio(sums: np.ndarray) -> np.ndarray:
    """Column 0 / column 1 (NaN when the denominator is 0): a share such as herding or accuracy."""
    num, den = sums[..., 0], sums[..., 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def mean_over_groups(stat: Statistic, n_groups: int, k: int) -> Statistic:
    """Unweighted mean over groups (e.g. sectors) of a per-group statistic.

    Columns are the groups' K sums side by side ([g0 c0..cK-1, g1 c0..]). A group with no
    rows in a replicate (statistic NaN) is left out of that replicate's mean.
    """
    def mean_stat(sums: np.ndarray) -> np.ndarray:
        per_group = stat(sums.reshape(*sums.shape[:-1], n_groups, k))
        defined = np.isfinite(per_group)
        cnt = defined.sum(axis=-1)
        tot = np.where(defined, per_group, 0.0).sum(axis=-1)
        return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)
    return mean_stat


def macro_f1_from_confusion(conf: np.ndarray) -> np.ndarray:
    """Macro-F1 from flattened k x k confusion counts (rows = truth, columns = prediction).

    Averages over classes that occur in the truth or in the predictions (a class absent from
    both carries no information); F1 of such a present class with no true positive is 0.
    """
    k = int(round(np.sqrt(conf.shape[-1])))
    c = conf.reshape(*conf.shape[:-1], k, k)
    tp = np.diagonal(c, axis1=-2, axis2=-1)
    support = c.sum(axis=-1)
    predicted = c.sum(axis=-2)
    denom = support + predicted
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(denom > 0, 2 * tp / np.where(denom > 0, denom, 1), np.nan)
        present = denom > 0
        cnt = present.sum(axis=-1)
        return np.where(cnt > 0, np.where(present, f1, 0.0).sum(axis=-1) / np.maximum(cnt, 1), np.nan)


# ------------------------------------------------------------------ paired tests


@dataclass(frozen=True)
class McNemarResult:
    n_pairs: int
    only_a: int   # pairs with outcome true in A only (b)
    only_b: int   # pairs with outcome true in B only (c)
    statistic: float
    pvalue: float


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> McNemarResult:
    """Exact (binomial) McNemar test of paired binary outcomes, e.g. herding with vs without rating.

    Only discordant pairs carry information; with none, the p-value is 1 (no evidence of a change).
    """
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError("paired outcomes must have the same length")
    n10, n01 = int((a & ~b).sum()), int((~a & b).sum())
    n11, n00 = int((a & b).sum()), int((~a & ~b).sum())
    if n10 + n01 == 0:
        return McNemarResult(int(a.size), n10, n01, 0.0, 1.0)
    res = mcnemar(np.array([[n11, n10], [n01, n00]]), exact=True)
    return McNemarResult(int(a.size), n10, n01, float(res.statistic), float(res.pvalue))


@dataclass(frozen=True)
class StuartMaxwellResult:
    n_pairs: int
    statistic: float
    df: int
    pvalue: float
    note: str = ""


def stuart_maxwell(a: Sequence[str], b: Sequence[str], categories: Sequence[str]) -> StuartMaxwellResult:
    """Stuart-Maxwell test of marginal homogeneity between paired 3-class answers.

    Categories without discordant pairs are dropped first (see below); with no discordant
    pair at all nothing changed, and the p-value is 1 with a note.
    """
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError("paired answers must have the same length")
    idx = {c: i for i, c in enumerate(categories)}
    table = np.zeros((len(categories), len(categories)))
    for x, y in zip(a, b):
        table[idx[x], idx[y]] += 1
    # A category with no discordant pairs has d_i = 0 and variance 0: dropping it is the
    # generalised-inverse form of the statistic (its off-diagonal cells are all zero, so the
    # other margins are unchanged) and avoids statsmodels' singular-matrix NaN.
    active = (table.sum(axis=0) + table.sum(axis=1) - 2 * np.diag(table)) > 0
    if active.sum() < 2:
        return StuartMaxwellResult(len(a), 0.0, 0, 1.0, "no answer changed")
    table = table[np.ix_(active, active)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = SquareTable(table, shift_zeros=False).homogeneity(method="stuart_maxwell")
    stat = float(res.statistic)
    if not np.isfinite(stat):
        return StuartMaxwellResult(len(a), np.nan, int(res.df), np.nan, "singular covariance")
    return StuartMaxwellResult(len(a), stat, int(res.df), float(res.pvalue))


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm step-down adjusted p-values (NaN entries stay NaN and do not count as tests).

    Written out (a sort and a running max) rather than calling statsmodels' multipletests,
    which runs a full garbage collection per call (~80 ms); tests check equality with it.
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.size
    if m:
        order = ok[np.argsort(p[ok], kind="stable")]
        adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
        out[order] = adj
    return out


def significance_marker(p: float) -> str:
    """`***` p<0.001, `**` p<0.01, `*` p<0.05 (Holm-adjusted), '' otherwise or when untested."""
    if p is None or not np.isfinite(p):
        return ""
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""
