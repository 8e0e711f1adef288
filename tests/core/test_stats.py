"""finlib.core.stats against independent oracles: scipy's binomial test, a hand-computed
Stuart-Maxwell statistic, statsmodels' Holm, and a simulated coverage check."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest, chi2
from statsmodels.stats.multitest import multipletests

from finlib.core import stats

# ---------------------------------------------------------------- cluster sums / bootstrap


def test_cluster_sums_by_hand():
    labels, sums = stats.cluster_sums(["b", "a", "b", "c"], np.array([[1, 1], [0, 1], [1, 0], [0, 1]]))
    assert list(labels) == ["a", "b", "c"]
    np.testing.assert_array_equal(sums, [[0, 1], [2, 1], [0, 1]])


def test_cluster_sums_rejects_missing_cluster():
    with pytest.raises(ValueError, match="cluster"):
        stats.cluster_sums(["a", None], np.ones((2, 2)))


def test_bootstrap_weights_are_multinomial_draws_of_all_clusters():
    w = stats.bootstrap_weights(7, 50, seed=3)
    assert w.shape == (50, 7)
    assert (w.sum(axis=1) == 7).all() and (w >= 0).all()


def test_bootstrap_is_seeded_and_reproducible():
    sums = np.array([[3, 5], [1, 4], [0, 2], [4, 4], [2, 6]], float)
    a = stats.bootstrap_ci(sums, stats.ratio, reps=300, seed=11)
    b = stats.bootstrap_ci(sums, stats.ratio, reps=300, seed=11)
    c = stats.bootstrap_ci(sums, stats.ratio, reps=300, seed=12)
    assert a == b
    assert (a.ci_low, a.ci_high) != (c.ci_low, c.ci_high)
    assert a.value == pytest.approx(10 / 21)
    assert a.ci_low <= a.value <= a.ci_high


def test_bootstrap_replicate_equals_resampled_clusters():
    """The matrix form must equal the naive 'stack the drawn clusters and recompute' form."""
    sums = np.array([[3, 5], [1, 4], [0, 2]], float)
    w = stats.bootstrap_weights(3, 4, seed=5)
    rng = np.random.default_rng(5)
    for r in range(4):
        draws = rng.multinomial(3, np.full(3, 1 / 3))
        np.testing.assert_array_equal(draws, w[r])
        stacked = np.repeat(sums, draws.astype(int), axis=0).sum(axis=0)
        assert stats.ratio(w[r] @ sums) == pytest.approx(stacked[0] / stacked[1])


def test_bootstrap_single_cluster_gives_degenerate_interval():
    est = stats.bootstrap_ci(np.array([[2.0, 4.0]]), stats.ratio, reps=100, seed=0)
    assert (est.value, est.ci_low, est.ci_high) == (0.5, 0.5, 0.5)


def test_bootstrap_empty_or_undefined_is_nan_not_zero():
    empty = stats.bootstrap_ci(np.zeros((0, 2)), stats.ratio, reps=100, seed=0)
    assert np.isnan(empty.value) and np.isnan(empty.ci_low)
    undefined = stats.bootstrap_ci(np.array([[0.0, 0.0], [0.0, 0.0]]), stats.ratio, reps=100, seed=0)
    assert np.isnan(undefined.value) and undefined.reps_defined == 0


def test_cluster_bootstrap_coverage_on_a_simulated_clustered_share():
    """~95 % of intervals should cover the true share when firms share a random effect.

    200 simulated data sets x 400 replicates (~0.1 s); the binomial sd of coverage at n=200
    is 1.5 points, so [0.88, 0.99] fails only for a real bug (e.g. row-level resampling
    would under-cover badly here, because of the strong firm effect).
    """
    rng = np.random.default_rng(2026)
    true_p, n_firms, per_firm, covered = 0.6, 40, 5, 0
    for sim in range(200):
        firm_p = np.clip(true_p + rng.normal(0, 0.2, n_firms), 0, 1)
        hits = rng.binomial(per_firm, firm_p)
        sums = np.c_[hits, np.full(n_firms, per_firm)].astype(float)
        est = stats.bootstrap_ci(sums, stats.ratio, reps=400, seed=sim)
        covered += est.ci_low <= true_p <= est.ci_high
    assert 0.88 <= covered / 200 <= 0.99


def test_mean_over_groups_skips_empty_groups():
    # group 0: 1/2, group 1: empty, group 2: 3/4  -> mean (0.5 + 0.75) / 2
    stat = stats.mean_over_groups(stats.ratio, 3, 2)
    assert stat(np.array([1, 2, 0, 0, 3, 4], float)) == pytest.approx(0.625)
    batch = stat(np.array([[1, 2, 0, 0, 3, 4], [0, 0, 0, 0, 0, 0]], float))
    assert batch[0] == pytest.approx(0.625) and np.isnan(batch[1])


def test_macro_f1_by_hand():
    # rows truth, cols prediction: bull: 2 right, 1 as neutral; neutral: 1 right; bear: 1 as bull.
    conf = np.array([[2, 1, 0], [0, 1, 0], [1, 0, 0]], float)
    f_bull = 2 * 2 / (3 + 3)  # support 3, predicted 3
    f_neut = 2 * 1 / (1 + 2)  # support 1, predicted 2
    f_bear = 0.0  # support 1, predicted 0
    assert stats.macro_f1_from_confusion(conf.ravel()) == pytest.approx((f_bull + f_neut + f_bear) / 3)


def test_macro_f1_ignores_a_class_absent_everywhere():
    conf = np.array([[2, 0, 0], [0, 0, 0], [1, 0, 0]], float)  # neutral never true nor predicted
    f_bull, f_bear = 2 * 2 / (2 + 3), 0.0
    assert stats.macro_f1_from_confusion(conf.ravel()) == pytest.approx((f_bull + f_bear) / 2)
    assert np.isnan(stats.macro_f1_from_confusion(np.zeros(9)))


# ---------------------------------------------------------------- McNemar


@pytest.mark.parametrize(("only_a", "only_b", "both", "neither"), [(7, 1, 10, 5), (0, 6, 3, 3), (12, 9, 0, 4)])
def test_mcnemar_exact_matches_a_hand_binomial_test(only_a, only_b, both, neither):
    a = np.array([1] * only_a + [0] * only_b + [1] * both + [0] * neither, bool)
    b = np.array([0] * only_a + [1] * only_b + [1] * both + [0] * neither, bool)
    res = stats.mcnemar_exact(a, b)
    expected = binomtest(min(only_a, only_b), only_a + only_b, 0.5).pvalue
    assert (res.only_a, res.only_b, res.n_pairs) == (only_a, only_b, a.size)
    assert res.pvalue == pytest.approx(expected)


def test_mcnemar_hand_value():
    # 7 vs 1 discordant pairs: p = 2 * P(X <= 1 | n=8) = 2 * 9/256
    res = stats.mcnemar_exact([1] * 7 + [0], [0] * 7 + [1])
    assert res.pvalue == pytest.approx(18 / 256)


def test_mcnemar_without_discordant_pairs_is_p_one():
    assert stats.mcnemar_exact([True, False], [True, False]).pvalue == 1.0


def test_mcnemar_rejects_unpaired_input():
    with pytest.raises(ValueError):
        stats.mcnemar_exact([True], [True, False])


# ---------------------------------------------------------------- Stuart-Maxwell


def _pairs_from_table(table: np.ndarray, cats: list[str]) -> tuple[list[str], list[str]]:
    a, b = [], []
    for i, ci in enumerate(cats):
        for j, cj in enumerate(cats):
            a += [ci] * int(table[i, j])
            b += [cj] * int(table[i, j])
    return a, b


def test_stuart_maxwell_hand_example():
    cats = ["bullish", "neutral", "bearish"]
    t = np.array([[20, 10, 5], [3, 30, 15], [0, 5, 40]], float)
    # Hand formula (first k-1 categories): d = row - col margins,
    # V_ii = n_i. + n_.i - 2 n_ii, V_ij = -(n_ij + n_ji).
    d = np.array([35 - 23, 48 - 45])
    v = np.array([[35 + 23 - 40, -(10 + 3)], [-(10 + 3), 48 + 45 - 60]], float)
    chi = float(d @ np.linalg.solve(v, d))
    res = stats.stuart_maxwell(*_pairs_from_table(t, cats), cats)
    assert res.df == 2
    assert res.statistic == pytest.approx(chi)
    assert res.pvalue == pytest.approx(chi2.sf(chi, 2))


def test_stuart_maxwell_drops_a_category_without_changes():
    cats = ["bullish", "neutral", "bearish"]
    t = np.array([[10, 6, 0], [1, 8, 0], [0, 0, 4]], float)  # bearish never changes -> McNemar-like
    res = stats.stuart_maxwell(*_pairs_from_table(t, cats), cats)
    assert res.df == 1
    assert res.statistic == pytest.approx((6 - 1) ** 2 / (6 + 1))


def test_stuart_maxwell_no_change():
    res = stats.stuart_maxwell(["bullish", "neutral"], ["bullish", "neutral"], ["bullish", "neutral", "bearish"])
    assert res.pvalue == 1.0 and res.note


# ---------------------------------------------------------------- Holm, markers


def test_holm_matches_statsmodels_and_keeps_nan():
    p = [0.01, np.nan, 0.04, 0.03]
    out = stats.holm(p)
    expected = multipletests([0.01, 0.04, 0.03], method="holm")[1]
    assert np.isnan(out[1])
    np.testing.assert_allclose(out[[0, 2, 3]], expected)
    # by hand: sorted 0.01*3, 0.03*2, 0.04*1 -> 0.03, 0.06, 0.06 (monotone)
    np.testing.assert_allclose(out[[0, 3, 2]], [0.03, 0.06, 0.06])


@pytest.mark.parametrize(("p", "marker"), [(0.0005, "***"), (0.005, "**"), (0.02, "*"), (0.2, ""), (np.nan, "")])
def test_significance_marker(p, marker):
    assert stats.significance_marker(p) == marker


def test_cluster_sums_accept_pandas_series():
    labels, sums = stats.cluster_sums(pd.Series(["x", "x"]), np.array([1.0, 2.0]))
    assert list(labels) == ["x"] and sums.tolist() == [[3.0]]


# ---------------------------------------------------------------- edges found by mutation testing


def _hand_stuart_maxwell(t: np.ndarray) -> float:
    """d' V^-1 d over the first k-1 categories (the hand formula of test_stuart_maxwell_hand_example)."""
    k = t.shape[0] - 1
    d = (t.sum(axis=1) - t.sum(axis=0))[:k]
    v = -(t + t.T)[:k, :k]
    np.fill_diagonal(v, (t.sum(axis=1) + t.sum(axis=0) - 2 * np.diag(t))[:k])
    return float(d @ np.linalg.solve(v, d))


def test_stuart_maxwell_keeps_a_category_that_only_receives_or_changes_once():
    cats = ["bullish", "neutral", "bearish"]
    # bearish only receives changes (its row has none off the diagonal); neutral changes exactly once
    t = np.array([[10, 0, 3], [1, 6, 0], [0, 0, 4]], float)
    res = stats.stuart_maxwell(*_pairs_from_table(t, cats), cats)
    assert res.df == 2 and res.statistic == pytest.approx(_hand_stuart_maxwell(t))
    only_receives = np.array([[10, 0, 3], [0, 6, 0], [0, 0, 4]], float)  # two active categories: McNemar-like
    res = stats.stuart_maxwell(*_pairs_from_table(only_receives, cats), cats)
    assert (res.df, res.statistic) == (1, pytest.approx(3.0)) and res.pvalue == pytest.approx(chi2.sf(3.0, 1))


def test_stuart_maxwell_no_change_result_in_full():
    res = stats.stuart_maxwell(["bullish", "neutral"], ["bullish", "neutral"], ["bullish", "neutral", "bearish"])
    assert res == stats.StuartMaxwellResult(2, 0.0, 0, 1.0, "no answer changed")


@pytest.mark.parametrize("p, marker", [(0.001, "**"), (0.01, "*"), (0.05, ""), (None, ""), (np.nan, "")])
def test_significance_marker_thresholds_are_strict(p, marker):
    assert stats.significance_marker(p) == marker


def test_ratio_of_one_over_one_is_one():
    assert stats.ratio(np.array([1.0, 1.0])) == 1.0
    assert np.isnan(stats.ratio(np.array([1.0, 0.0])))


def test_mean_over_groups_and_macro_f1_with_a_single_defined_group_or_class():
    mean = stats.mean_over_groups(stats.ratio, 2, 2)
    assert mean(np.array([3.0, 4.0, 0.0, 0.0])) == pytest.approx(0.75)  # group 2 empty: the mean of one
    only_bullish = np.array([[3, 0, 0], [0, 0, 0], [0, 0, 0]], float)
    assert stats.macro_f1_from_confusion(only_bullish.ravel()) == 1.0


def test_bootstrap_replicates_of_grouped_statistics_are_computed_row_by_row():
    """Each replicate's mean-of-groups and macro-F1 equals the statistic of that replicate alone."""
    rng = np.random.default_rng(2)
    sums_g = rng.integers(0, 5, (12, 4)).astype(float)
    sums_g[:, 1] += sums_g[:, 0]
    sums_g[:, 3] += sums_g[:, 2]
    conf = rng.integers(0, 4, (12, 9)).astype(float)
    w = stats.bootstrap_weights(12, 50, seed=3)
    for sums, stat in ((sums_g, stats.mean_over_groups(stats.ratio, 2, 2)), (conf, stats.macro_f1_from_confusion)):
        loop = np.array([float(stat(row @ sums)) for row in w])
        np.testing.assert_allclose(stat(w @ sums), loop, rtol=1e-12)
        est = stats.bootstrap_ci(sums, stat, reps=50, seed=99, weights=w)
        assert (est.ci_low, est.ci_high) == tuple(np.quantile(loop, [0.025, 0.975]))
        assert est.reps_defined == 50


def test_bootstrap_uses_the_weights_it_is_given_and_counts_defined_replicates():
    sums = np.array([[1.0, 2.0], [3.0, 4.0]])
    none_defined = stats.bootstrap_ci(sums, stats.ratio, reps=1, seed=0, weights=np.zeros((1, 2)))
    assert none_defined.value == pytest.approx(4 / 6) and none_defined.reps_defined == 0
    assert np.isnan(none_defined.ci_low) and np.isnan(none_defined.ci_high)
    one = stats.bootstrap_ci(sums, stats.ratio, reps=2, seed=0, weights=np.array([[0.0, 0.0], [2.0, 0.0]]))
    assert (one.ci_low, one.ci_high, one.reps_defined) == (0.5, 0.5, 1)
    empty = stats.bootstrap_ci(np.zeros((0, 2)), stats.ratio, reps=10, seed=0)
    assert np.isnan(empty.ci_low) and np.isnan(empty.ci_high) and empty.reps_defined == 0


def test_bootstrap_weights_without_clusters_are_an_empty_matrix():
    assert stats.bootstrap_weights(0, 5, seed=1).shape == (5, 0)


def test_mcnemar_results_in_full():
    """No discordant pair: p 1 with every count; tied discordant pairs: the exact test's statistic is
    min(b, c) (statsmodels' convention) and scipy's binomial p-value."""
    none = stats.mcnemar_exact([True, False, True], [True, False, True])
    assert none == stats.McNemarResult(3, 0, 0, 0.0, 1.0)
    tied = stats.mcnemar_exact([True, True, False, False, True], [False, False, True, True, True])
    assert (tied.n_pairs, tied.only_a, tied.only_b, tied.statistic) == (5, 2, 2, 2.0)
    assert tied.pvalue == pytest.approx(binomtest(2, 4, 0.5).pvalue)
    lopsided = stats.mcnemar_exact([True] * 6 + [False], [False] * 6 + [True])
    assert (lopsided.statistic, lopsided.pvalue) == (1.0, pytest.approx(binomtest(6, 7, 0.5).pvalue))


def test_holm_adjusted_pvalues_are_capped_at_one():
    np.testing.assert_allclose(stats.holm([0.6, 0.7]), multipletests([0.6, 0.7], method="holm")[1])
    assert stats.holm([0.6, 0.7]).max() == 1.0
