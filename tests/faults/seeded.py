"""Seeded faults in the published statistics: one record per fault, and the import hook that plants one.

A record names the module, the change as a source replacement (`old` must occur exactly once in
the module's source, so a record that no longer applies fails loudly instead of testing nothing),
the statistic it moves and the tests that must catch it. `test_seeded_faults.py` runs each record's
tests in a child interpreter whose import system reads the module's source with the replacement
made (the file on disk is never touched), and requires that at least one of them fails, and that
all of them pass without the fault.

The catching test is deliberately one that shares no code with the statistic: a closed form, an
independent library (scipy, statsmodels), or numbers worked out by hand.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Fault:
    name: str
    module: str  # dotted module name under finlib
    old: str  # text that occurs exactly once in the module's source
    new: str  # its replacement: the fault
    statistic: str  # the published number it moves (paper, table, quantity)
    catchers: tuple[str, ...]  # pytest node ids (relative to the repository root) expected to catch it


TRUTHS = "tests/faults/test_fidelity_truths.py"
INTERVALS = "tests/rehearsal/test_intervals.py"
REHEARSAL_FAULTS = "tests/rehearsal/test_rehearsal_faults.py"
STATS = "finlib.core.stats"
METRICS = "finlib.finbias.scoring.metrics"
MARKET = "finlib.finbias.labels.market_model"
SCORING_STAGE = "finlib.finbias.scoring.stage"
BIZ_RESULTS = "finlib.bizfin.benchmark.results"
CALIBRATION = "finlib.bizfin.iterajudge.calibration"

FAULTS: tuple[Fault, ...] = (
    # ------------------------------------------------------------ intervals (Fin-Bias Tables 4-7, 8)
    Fault(
        "interval_level_90_in_bootstrap",
        STATS,
        "alpha = (1.0 - ci) / 2.0",
        "alpha = (1.0 - ci)",
        "every percentile interval (Fin-Bias Tables 4-7 cells, paired differences; BizFinBench Table 3): "
        "a 95 % interval computed at 90 %",
        (f"{TRUTHS}::test_herding_interval_is_a_95_percent_bootstrap_over_firms",),
    ),
    Fault(
        "interval_level_90_in_stage04",
        METRICS,
        "stats.bootstrap_ci(sums, statistic, reps, seed, ci,",
        "stats.bootstrap_ci(sums, statistic, reps, seed, 0.90,",
        "Fin-Bias Tables 4-7 intervals: stage 04 asks for 90 % whatever params say",
        (
            f"{TRUTHS}::test_herding_interval_is_a_95_percent_bootstrap_over_firms",
            f"{TRUTHS}::test_paired_difference_interval_resamples_firms_at_95_percent",
        ),
    ),
    Fault(
        "resample_answers_not_firms",
        METRICS,
        "codes = pd.factorize(firm)[0]",
        "codes = np.arange(len(firm))",
        "Fin-Bias Tables 4-7 intervals: the cluster bootstrap resamples answers, not firms (intervals shrink)",
        (f"{TRUTHS}::test_herding_interval_is_a_95_percent_bootstrap_over_firms",),
    ),
    Fault(
        "paired_difference_resamples_answers",
        METRICS,
        'stats.cluster_sums(d["ticker"],',
        "stats.cluster_sums(d.index,",
        "Fin-Bias Tables 4-7 paired differences' intervals: pairs resampled one by one, not by firm",
        (f"{TRUTHS}::test_paired_difference_interval_resamples_firms_at_95_percent",),
    ),
    # ------------------------------------------------------------ paired tests and Holm (Tables 4, 7 markers)
    Fault(
        "holm_dropped",
        METRICS,
        'out.loc[idx, "p_holm"] = stats.holm(out.loc[idx, "pvalue"].to_numpy())',
        'out.loc[idx, "p_holm"] = out.loc[idx, "pvalue"].to_numpy()',
        "Fin-Bias Tables 4-7 significance markers: Holm's correction across models left out",
        (f"{TRUTHS}::test_holm_runs_across_models_and_sets_the_marker",),
    ),
    Fault(
        "holm_is_bonferroni",
        STATS,
        "(m - np.arange(m)) * p[order]",
        "m * p[order]",
        "Fin-Bias Tables 4-7 markers: Bonferroni's factor m for every rank instead of Holm's m - i",
        (
            "tests/core/test_stats.py::test_holm_matches_statsmodels_and_keeps_nan",
            f"{TRUTHS}::test_holm_runs_across_models_and_sets_the_marker",
        ),
    ),
    Fault(
        "holm_family_pools_sectors",
        METRICS,
        'out.groupby(["test", "sector"]).groups',
        'out.groupby(["test"]).groups',
        "Fin-Bias Tables 4-7 markers: one Holm family per test over all sectors instead of per sector",
        (f"{TRUTHS}::test_holm_runs_across_models_and_sets_the_marker",),
    ),
    Fault(
        "mcnemar_asymptotic",
        STATS,
        "exact=True",
        "exact=False",
        "Fin-Bias Tables 4-7 McNemar p-values: chi-square approximation instead of the exact binomial test",
        (
            "tests/core/test_stats.py::test_mcnemar_hand_value",
            f"{TRUTHS}::test_mcnemar_pvalues_are_binomial_tests_on_hand_counted_discordant_pairs",
        ),
    ),
    Fault(
        "mcnemar_counts_unparsed_as_dropped",
        METRICS,
        "d = pr[pr[target].notna()].reset_index(drop=True)",
        'd = pr[pr[target].notna() & pr["parsed_a"] & pr["parsed_b"]].reset_index(drop=True)',
        "Fin-Bias Tables 4-7 McNemar: pairs with an unparsed answer left out instead of counted as no match",
        (f"{TRUTHS}::test_mcnemar_pvalues_are_binomial_tests_on_hand_counted_discordant_pairs",),
    ),
    Fault(
        "stuart_maxwell_is_bhapkar",
        STATS,
        'method="stuart_maxwell"',
        'method="bhapkar"',
        "Fin-Bias stage 04 answer-shift tests (beside Tables 4-7): Bhapkar's statistic instead of Stuart-Maxwell's",
        ("tests/core/test_stats.py::test_stuart_maxwell_hand_example",),
    ),
    Fault(
        "stuart_maxwell_is_bowker_symmetry",
        STATS,
        '.homogeneity(method="stuart_maxwell")',
        ".symmetry()",
        "Fin-Bias stage 04 answer-shift tests (paired-test table beside Tables 4-7): Bowker's test of symmetry "
        "(df 3) instead of Stuart-Maxwell's marginal homogeneity (df 2); the rehearsal's recomputation must see it",
        (
            f"{INTERVALS}::test_the_check_agrees_with_stage_04s_answer_shift_rows",
            f"{REHEARSAL_FAULTS}::test_a_correct_run_passes",
        ),
    ),
    Fault(
        "stuart_maxwell_pvalue_one_df_too_many",
        STATS,
        "return StuartMaxwellResult(len(a), stat, int(res.df), float(res.pvalue))",
        'return StuartMaxwellResult(len(a), stat, int(res.df), float(__import__("scipy.stats").stats.chi2.sf(stat, res.df + 1)))',
        "Fin-Bias stage 04 answer-shift p-values (paired-test table beside Tables 4-7): chi-square with k instead of "
        "k - 1 degrees of freedom; the rehearsal's recomputation must see it",
        (f"{REHEARSAL_FAULTS}::test_a_correct_run_passes",),
    ),
    # ------------------------------------------------------------ Eq. 1 and the cells (Tables 2, 4-6)
    Fault(
        "eq1_denominator_parsed_only",
        METRICS,
        "return np.c_[_eq(answers, targets).astype(float), np.ones(len(answers))]",
        "return np.c_[_eq(answers, targets).astype(float), answers.notna().to_numpy(float)]",
        "Fin-Bias Eq. 1 (Tables 4-7 herding and accuracy): N counts parsed answers only",
        ("tests/finbias/test_scoring.py::test_herding_and_accuracy_by_hand_through_the_pipeline_specs",),
    ),
    Fault(
        "macro_f1_over_truth_classes_only",
        STATS,
        "present = denom > 0",
        "present = support > 0",
        "Fin-Bias macro-F1 (stage 04 metrics beside Table 6): classes that occur only among the predictions left out",
        (f"{TRUTHS}::test_macro_f1_is_sklearns_over_classes_in_truth_or_answers",),
    ),
    Fault(
        "kl_reversed",
        METRICS,
        "(p * np.log(p / q)).sum(axis=-1)",
        "(q * np.log(q / p)).sum(axis=-1)",
        "Fin-Bias KL between conditions: KL(q||p) instead of KL(p||q)",
        ("tests/finbias/test_scoring.py::test_kl_divergence_against_scipy",),
    ),
    Fault(
        "fake_herding_target_original",
        METRICS,
        '"fake_herding": "reference_rating_a"',
        '"fake_herding": "reference_rating_b"',
        "Fin-Bias Table 5 marker (fake-rating herding): agreement with the analyst's rating instead of the fake",
        ("tests/finbias/test_scoring.py::test_paired_mcnemar_pairs",),
    ),
    # ------------------------------------------------------------ join keys
    Fault(
        "label_join_misaligned",
        SCORING_STAGE,
        'merge(labels[["report_id", "label"]], on="report_id", how="left"',
        'merge(labels[["report_id", "label"]].assign(label=labels["label"].shift(1)), on="report_id", how="left"',
        "Fin-Bias accuracy (Tables 6, 7): each model's answer graded against its neighbour report's label",
        (f"{TRUTHS}::test_labels_and_sectors_join_each_answer_by_report_id",),
    ),
    Fault(
        "analyst_label_join_misaligned",
        SCORING_STAGE,
        'labels[["report_id", "label"]], on="report_id", how="inner"',
        'labels[["report_id", "label"]].assign(label=labels["label"].shift(1)), on="report_id", how="inner"',
        "Fin-Bias Table 6 analyst row: the analyst's rating graded against its neighbour's label",
        (
            "tests/finbias/test_scoring.py::test_analyst_baseline",
            f"{TRUTHS}::test_labels_and_sectors_join_each_answer_by_report_id",
        ),
    ),
    Fault(
        "sector_join_misaligned",
        SCORING_STAGE,
        'reports[["report_id", "ticker", "sector"]], on="report_id"',
        'reports[["report_id", "ticker", "sector"]].assign(sector=reports["sector"].shift(-1)), on="report_id"',
        "Fin-Bias per-sector cells (Tables 4-7): each report counted in its neighbour's sector",
        (
            "tests/finbias/test_scoring.py::test_empty_sector_is_nan_with_zero_n",
            f"{TRUTHS}::test_labels_and_sectors_join_each_answer_by_report_id",
        ),
    ),
    # ------------------------------------------------------------ stage 01 labels: window edges, buckets
    Fault(
        "event_window_starts_on_day_0",
        MARKET,
        "ew = window_sums(panel, day0, col, 1, window)",
        "ew = window_sums(panel, day0, col, 0, window)",
        "Fin-Bias labels (Table 3 lower half, accuracy in Tables 6-8): the 60-day CAR window is days 0..59 instead of +1..+60",
        (f"{TRUTHS}::test_car_sums_the_abnormal_return_of_days_1_to_60",),
    ),
    Fault(
        "event_window_one_day_short",
        MARKET,
        "ew = window_sums(panel, day0, col, 1, window)",
        "ew = window_sums(panel, day0, col, 1, window - 1)",
        "Fin-Bias labels: the CAR window stops at day +59",
        (f"{TRUTHS}::test_car_sums_the_abnormal_return_of_days_1_to_60",),
    ),
    Fault(
        "event_bad_price_window_skips_day_0",
        MARKET,
        "bad = _any_bad(panel, day0, col, 0, window + 1)",
        "bad = _any_bad(panel, day0, col, 1, window)",
        "Fin-Bias labels: a NaN price on day 0 (the base of day +1's return) no longer excludes the report",
        (f"{TRUTHS}::test_mackinlay_bad_price_window_is_days_minus_281_to_60",),
    ),
    Fault(
        "mackinlay_bad_price_window_off_by_one",
        MARKET,
        "bad |= _any_bad(panel, day0, col, -(gap + L) - 1, L + 1)",
        "bad |= _any_bad(panel, day0, col, -(gap + L), L)",
        "MacKinlay labels: a NaN price on day -281 (the base of day -280's return) no longer excludes the report",
        (f"{TRUTHS}::test_mackinlay_bad_price_window_is_days_minus_281_to_60",),
    ),
    Fault(
        "mackinlay_estimation_window_shifted",
        MARKET,
        "est = ols_from_sums(window_sums(panel, day0, col, -(gap + L), L), panel.cx, cy)",
        "est = ols_from_sums(window_sums(panel, day0, col, -(gap + L) + 1, L), panel.cx, cy)",
        "MacKinlay labels: the estimation window is days -279..-30 instead of -280..-31",
        (f"{TRUTHS}::test_mackinlay_estimation_window_is_250_returns_ending_31_days_before",),
    ),
    Fault(
        "coverage_edge_off_by_one",
        MARKET,
        "(day0 + window > panel.last_row[col])",
        "(day0 + window >= panel.last_row[col])",
        "Fin-Bias labels: a report whose 60-day window ends on the ticker's last price is excluded",
        (f"{TRUTHS}::test_window_ending_on_the_last_price_is_covered",),
    ),
    Fault(
        "day0_holiday_report_moves_forward",
        MARKET,
        'side="right") - 1',
        'side="left") - 1',
        "Fin-Bias labels: day 0 of a report dated on a trading day becomes the day before",
        ("tests/finbias/test_labels.py::test_day0_is_the_report_date_or_the_last_trading_day_before",),
    ),
    Fault(
        "year_buckets_pooled",
        MARKET,
        "year = pd.DatetimeIndex(pd.to_datetime(np.asarray(dates))).year.to_numpy()",
        "year = np.zeros(len(car), dtype=int)",
        "Fin-Bias labels: 30/40/30 buckets over all years pooled instead of within each report year",
        ("tests/finbias/test_labels.py::test_year_buckets_30_40_30_per_year_and_independent_of_order",),
    ),
    Fault(
        "bucket_rounding_half_up",
        MARKET,
        "k_bear = max(0, math.ceil(q_lo * n - 0.5 - _EPS))",
        "k_bear = max(0, math.floor(q_lo * n + 0.5))",
        "Fin-Bias labels: bearish count rounded half up (n=5 gives 2/2/1, not 1/3/1)",
        ("tests/finbias/test_labels.py::test_bucket_counts",),
    ),
    Fault(
        "bucket_boundary_inclusive",
        MARKET,
        "np.where(pos < k_bear,",
        "np.where(pos <= k_bear,",
        "Fin-Bias labels: the first neutral event of a year labelled bearish (31/39/30)",
        ("tests/finbias/test_labels.py::test_year_buckets_ties_broken_by_report_id",),
    ),
    Fault(
        "bucket_upper_boundary_exclusive",
        MARKET,
        "np.where(pos >= n - k_bull,",
        "np.where(pos > n - k_bull,",
        "Fin-Bias labels (Table 3 lower half): the lowest bullish event of a year labelled neutral (30/41/29)",
        ("tests/finbias/test_labels.py::test_year_buckets_ties_broken_by_report_id",),
    ),
    Fault(
        "paper_car_over_valid_days_only",
        MARKET,
        "car = window * alpha",
        "car = n_obs * alpha",
        "Fin-Bias labels (Table 3 lower half): Eq. 7 sums alpha over the valid days only, not the 60-day window",
        ("tests/finbias/test_labels.py::test_paper_car_is_window_times_alpha_with_missing_days",),
    ),
    # ------------------------------------------------------------ Fin-Bias Tables 2, 3 and 8
    Fault(
        "table2_empty_sector_counted_once",
        "finlib.finbias.data.stage",
        'df["num"] = df["sector"].map(counts).fillna(0).astype(int)',
        'df["num"] = df["sector"].map(counts).fillna(1).astype(int)',
        "Fin-Bias Table 2 reports per sector: a sector without reports shows one",
        ("tests/finbias/test_data.py::test_table2_and_table3_beside_the_paper",),
    ),
    Fault(
        "table3_share_over_all_reports",
        "finlib.finbias.data.stage",
        "n = int(len(rated))",
        "n = int(len(ratings))",
        "Fin-Bias Table 3 rating shares: reports without a rating inside the denominator",
        ("tests/finbias/test_data.py::test_table2_and_table3_beside_the_paper",),
    ),
    Fault(
        "table8_delta_reversed",
        "finlib.finbias.dpo.evaluate",
        "delta = {c: vt[c] - vb[c] for c",
        "delta = {c: vb[c] - vt[c] for c",
        "Fin-Bias Table 8: the DPO - base accuracy difference signed base - DPO",
        ("tests/finbias/test_dpo.py::test_table8_layout_ours_and_the_papers_rows",),
    ),
    # ------------------------------------------------------------ BizFinBench Tables 3, 4, 6
    Fault(
        "bizfin_average_pools_items",
        BIZ_RESULTS,
        "est = bootstrap_ci(sums, mean_over_groups(ratio, k, 2), reps, seed, ci)",
        "est = bootstrap_ci(sums, lambda s: ratio(s.reshape(*s.shape[:-1], k, 2).sum(axis=-2)), reps, seed, ci)",
        "BizFinBench Table 3 Average: items pooled over tasks instead of the plain mean of the nine task scores",
        ("tests/bizfin/test_bizfin_stage.py::test_average_is_the_plain_mean_of_all_nine_tasks",),
    ),
    Fault(
        "bizfin_unscored_counted_as_zero",
        BIZ_RESULTS,
        "ok = np.isfinite(values)",
        "ok, values = np.ones(len(values), dtype=bool), np.nan_to_num(values)",
        "BizFinBench Table 3 task scores: an unscored item (NaN) counted as 0 inside N",
        (
            f"{TRUTHS}::test_bizfin_task_score_leaves_unscored_items_out_of_n",
            "tests/bizfin/test_bizfin_stage.py::test_average_is_the_plain_mean_of_all_nine_tasks",
        ),
    ),
    Fault(
        "judge_spearman_without_ranks",
        CALIBRATION,
        "rx = rankdata(np.atleast_2d(x), axis=1)",
        "rx = np.atleast_2d(np.asarray(x, dtype=float))",
        "BizFinBench Table 4: Pearson on the judge's raw scores instead of Spearman's rank correlation",
        ("tests/bizfin/test_bizfin_calibration.py::test_spearman_matches_scipy",),
    ),
    Fault(
        "judge_interval_resamples_answers",
        CALIBRATION,
        "if groups is None:\n        return list(rng.integers(0, n, size=(int(reps), n)))",
        "if True:\n        return list(rng.integers(0, n, size=(int(reps), n)))",
        "BizFinBench Table 4 intervals: answers resampled one by one instead of whole questions",
        ("tests/bizfin/test_bizfin_calibration.py::test_clustered_resamples_keep_whole_questions",),
    ),
    Fault(
        "table6_mean_is_median",
        BIZ_RESULTS,
        '"avg": float(n.mean())',
        '"avg": float(np.median(n))',
        "BizFinBench Table 6: mean query tokens computed as the median",
        (f"{TRUTHS}::test_bizfin_table6_min_max_mean_and_count_of_query_tokens",),
    ),
    # ------------------------------------------------------------ stage 02's rating statement (Tables 4-7 conditions)
    Fault(
        "rating_statement_in_first_unit_only",
        "finlib.finbias.perturb.statement",
        "units = list(islice(iter_sentence_spans(text), max(1, reading.front_matter_units)))",
        "units = list(islice(iter_sentence_spans(text), 1))",
        "Fin-Bias Tables 4-7 conditions: the rating statement looked for in the first sentence unit only, so "
        "reports whose front page opens with a title, header block or provider box leave every condition",
        (
            "tests/rehearsal/test_statement_check.py::test_a_correct_stage02_passes_on_provider_pages",
            "tests/finbias/test_provider_layouts.py::test_stage02_finds_removes_and_fakes_every_layout_and_rating",
        ),
    ),
)


def fault_named(name: str) -> Fault:
    hits = [f for f in FAULTS if f.name == name]
    if len(hits) != 1:
        raise KeyError(f"no seeded fault named {name!r} (known: {[f.name for f in FAULTS]})")
    return hits[0]


def module_path(module: str) -> Path:
    """The module's source file, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(module)
    return Path(spec.origin)


def patched_source(fault: Fault) -> str:
    """The module's source with the fault planted; `old` must occur exactly once."""
    src = module_path(fault.module).read_text(encoding="utf-8")
    count = src.count(fault.old)
    if count != 1:
        raise ValueError(f"seeded fault {fault.name}: {fault.old!r} occurs {count} times in {fault.module}, not once")
    return src.replace(fault.old, fault.new)


class _PatchedLoader(importlib.machinery.SourceFileLoader):
    """Compiles the patched text (never the cached bytecode of the file on disk)."""

    def __init__(self, fullname: str, path: str, source: str) -> None:
        super().__init__(fullname, path)
        self._source = source

    def get_code(self, fullname: str):
        return compile(self._source, self.path, "exec", dont_inherit=True)


class _PatchFinder(importlib.abc.MetaPathFinder):
    def __init__(self, fault: Fault) -> None:
        self.fault = fault
        self.origin = str(module_path(fault.module))  # found before this finder is installed
        self.source = patched_source(fault)

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.fault.module:
            return None
        loader = _PatchedLoader(fullname, self.origin, self.source)
        return importlib.util.spec_from_file_location(fullname, self.origin, loader=loader)


def plant(name: str) -> None:
    """Install the fault before anything imports its module (call first in a fresh interpreter)."""
    fault = fault_named(name)
    if fault.module in sys.modules:
        raise RuntimeError(f"{fault.module} is already imported: the fault must be planted first")
    sys.meta_path.insert(0, _PatchFinder(fault))


def main(argv: list[str]) -> int:
    """`python seeded.py FAULT_NAME PYTEST_ARGS...`: pytest with one fault planted (`-` = none)."""
    if argv[0] != "-":
        plant(argv[0])
    import pytest

    return int(pytest.main(argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
