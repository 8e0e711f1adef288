"""Checks of published statistics against truths that share no code with them: closed forms of the
firm bootstrap's spread, statsmodels' Holm, scipy's binomial test, and labels computed from a drift
planted on a known day. Each one catches a seeded fault of tests/faults/seeded.py that no other test
sees (the records name them)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest, norm
from sklearn.metrics import f1_score
from statsmodels.stats.multitest import multipletests
from test_scoring import frames

from finlib.finbias.labels.market_model import compute_labels
from finlib.finbias.scoring import stage as scoring
from finlib.finbias.scoring.metrics import macro_f1, metrics_long, paired_tests
from finlib.finbias.vocab import POOLED

FIRMS = 60
PER_FIRM = 8
REPS = 4000


def clustered_hits(seed: int) -> np.ndarray:
    """FIRMS x PER_FIRM booleans where a firm mostly herds or mostly does not: the answers of one
    firm are strongly correlated, so resampling answers instead of firms would shrink the interval
    by about sqrt(PER_FIRM)."""
    rng = np.random.default_rng(seed)
    per_firm = rng.choice([0, 1, 2, 6, 7, 8], size=FIRMS)
    return np.arange(PER_FIRM)[None, :] < per_firm[:, None]


def herding_rows(hits: np.ndarray, model: str = "m", condition: str = "original") -> pd.DataFrame:
    """Stage 04's scored rows: firm f answers PER_FIRM reports, a hit when the answer is the rating shown."""
    n_firms, per = hits.shape
    answer = np.where(hits.ravel(), "bullish", "bearish")
    return pd.DataFrame(
        {
            "model": model,
            "condition": condition,
            "mode": "generate",
            "report_id": [f"r{f}-{j}" for f in range(n_firms) for j in range(per)],
            "ticker": np.repeat([f"F{f:02d}" for f in range(n_firms)], per),
            "sector": "Energy",
            "answer": pd.Series(answer, dtype=object),
            "parsed": True,
            "reference_rating": "bullish",
            "label": "bullish",
            "p_bullish": np.nan,
            "p_neutral": np.nan,
            "p_bearish": np.nan,
        }
    )


def firm_bootstrap_width(firm_means: np.ndarray, level: float) -> float:
    """Width of a normal-theory interval for the mean of iid draws from the firms' means: what a
    percentile bootstrap over firms converges to (variance of the resampled mean = population
    variance / number of firms)."""
    se = np.std(firm_means) / np.sqrt(len(firm_means))
    return 2 * norm.ppf(0.5 + level / 2) * se


@pytest.mark.parametrize("seed", [3, 11])
def test_herding_interval_is_a_95_percent_bootstrap_over_firms(seed):
    hits = clustered_hits(seed)
    m = metrics_long(herding_rows(hits), reps=REPS, seed=seed, ci=0.95)
    cell = m[(m.metric == "herding") & (m.sector == POOLED)].iloc[0]
    assert cell["value"] == pytest.approx(hits.mean(), abs=1e-12)
    width = cell["ci_high"] - cell["ci_low"]
    truth = firm_bootstrap_width(hits.mean(axis=1), 0.95)
    # 90 % would give 0.84 of the width, answers resampled about 1/sqrt(8) = 0.35 of it
    assert width / truth == pytest.approx(1.0, abs=0.06), (width, truth)


def paired_frame(seed: int) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """One model, original vs no_rating, each firm's reports herding together in each condition."""
    a, b = clustered_hits(seed), clustered_hits(seed + 100)
    rows = pd.concat([herding_rows(a, "m", "original"), herding_rows(b, "m", "no_rating")], ignore_index=True)
    return rows, a, b


def test_paired_difference_interval_resamples_firms_at_95_percent():
    rows, a, b = paired_frame(5)
    t = paired_tests(rows, reps=REPS, seed=5, ci=0.95)
    row = t[(t.test == "herding_with_vs_without") & (t.sector == POOLED)].iloc[0]
    diff = a.astype(float) - b
    assert row["diff"] == pytest.approx(diff.mean(), abs=1e-12)
    truth = firm_bootstrap_width(diff.mean(axis=1), 0.95)
    assert (row["diff_ci_high"] - row["diff_ci_low"]) / truth == pytest.approx(1.0, abs=0.06)


def three_models_rows() -> pd.DataFrame:
    """Three models whose herding falls by different amounts once the rating is hidden; one model's
    answers partly unparsed (no match, inside N)."""
    rng = np.random.default_rng(7)
    frames = []
    for model, drop in (("m1", 0.05), ("m2", 0.15), ("m3", 0.3)):
        a = rng.random((20, 3)) < 0.6
        b = a & (rng.random(a.shape) > drop / 0.6)
        frames += [herding_rows(a, model, "original"), herding_rows(b, model, "no_rating")]
    rows = pd.concat(frames, ignore_index=True)
    unparsed = (rows.model == "m2") & (rows.condition == "original") & (rows.index % 7 == 0)
    rows.loc[unparsed, "answer"] = None
    rows.loc[unparsed, "parsed"] = False
    return rows


def test_mcnemar_pvalues_are_binomial_tests_on_hand_counted_discordant_pairs():
    rows = three_models_rows()
    t = paired_tests(rows, reps=0).set_index(["test", "model", "sector"])
    for model in ("m1", "m2", "m3"):
        a = rows[(rows.model == model) & (rows.condition == "original")].set_index("report_id")["answer"]
        b = rows[(rows.model == model) & (rows.condition == "no_rating")].set_index("report_id")["answer"]
        hit_a = a.eq("bullish").to_numpy()  # unparsed (None) is no match
        hit_b = b.reindex(a.index).eq("bullish").to_numpy()
        n10, n01 = int((hit_a & ~hit_b).sum()), int((~hit_a & hit_b).sum())
        got = t.loc[("herding_with_vs_without", model, POOLED)]
        assert (got["only_a"], got["only_b"], got["n_pairs"]) == (n10, n01, len(a))
        assert got["pvalue"] == pytest.approx(binomtest(n10, n10 + n01, 0.5).pvalue, rel=1e-9)


def test_holm_runs_across_models_and_sets_the_marker():
    t = paired_tests(three_models_rows(), reps=0)
    changed = 0
    for _, g in t.groupby(["test", "sector"]):
        ok = g["pvalue"].notna().to_numpy()
        if not ok.any():
            continue
        want = multipletests(g["pvalue"].to_numpy()[ok], method="holm")[1]
        np.testing.assert_allclose(g["p_holm"].to_numpy()[ok], want, rtol=1e-12)
        changed += int((np.abs(want - g["pvalue"].to_numpy()[ok]) > 1e-12).sum())
    assert changed > 0  # the fixture has families where Holm moves a p-value
    for p, marker in zip(t["p_holm"], t["marker"]):
        want = "" if not np.isfinite(p) else "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""
        assert marker == want


@pytest.mark.parametrize("order_seed", [0, 1])
def test_labels_and_sectors_join_each_answer_by_report_id(order_seed):
    """Whatever order the labels and reports frames come in, every scored row (models' and the analyst's)
    carries its own report's label and sector, looked up here by report_id in plain dicts."""
    predictions, conditions, labels, reports = frames()
    labels = labels.sample(frac=1, random_state=order_seed).reset_index(drop=True)
    reports = reports.sample(frac=1, random_state=order_seed + 10).reset_index(drop=True)
    label_of = dict(zip(labels["report_id"], labels["label"]))
    sector_of = dict(zip(reports["report_id"], reports["sector"]))
    rows = pd.concat(
        [scoring.score_frame(predictions, conditions, labels, reports).rows, scoring.analyst_rows(reports, labels)],
        ignore_index=True,
    )
    assert len(rows) and rows["model"].eq("Analyst").any()
    assert rows["label"].tolist() == [label_of[r] for r in rows["report_id"]]
    assert rows["sector"].tolist() == [sector_of[r] for r in rows["report_id"]]


@pytest.mark.parametrize("seed", range(4))
def test_macro_f1_is_sklearns_over_classes_in_truth_or_answers(seed):
    """sklearn's macro average runs over the labels found in the truth or the predictions; here the
    truth never holds "bearish" while the answers do (a class only predicted still counts, with F1 0)."""
    rng = np.random.default_rng(seed)
    truth = rng.choice(["bullish", "neutral"], 40)
    answers = rng.choice(["bullish", "neutral", "bearish"], 40)
    want = f1_score(truth, answers, average="macro", zero_division=0)
    assert macro_f1(pd.Series(answers, dtype=object), pd.Series(truth, dtype=object)) == pytest.approx(want, abs=1e-12)


# --------------------------------------------------------------------------- label windows from a planted drift

DAY0 = 350  # calendar row of the report
JUMP = 0.10  # abnormal return planted on one day


def planted_panel(jump_day: int | None, nan_day: int | None = None, days: int = 480):
    """Firm return = market return exactly (alpha 0, beta 1) except JUMP on day `jump_day` relative
    to the report; optionally a NaN price on day `nan_day`. The market return on the jump day is set
    to the mean of the other event-window days, so the paper's in-window OLS keeps beta = 1."""
    rng = np.random.default_rng(1)
    cal = pd.bdate_range("2015-01-05", periods=days)
    rm = rng.normal(0.0004, 0.01, days)
    rm[0] = 0.0
    if jump_day is not None and 1 <= jump_day <= 60:
        window = [DAY0 + d for d in range(1, 61) if d != jump_day]
        rm[DAY0 + jump_day] = rm[window].mean()
    r = rm.copy()
    if jump_day is not None:
        r[DAY0 + jump_day] += JUMP
    market = pd.Series(100 * np.cumprod(1 + rm), index=cal)
    firm = 50 * np.cumprod(1 + r)
    if nan_day is not None:
        firm[DAY0 + nan_day] = np.nan
    prices = pd.DataFrame({"date": cal, "ticker": "F", "adj_close": firm})
    events = pd.DataFrame({"report_id": ["e"], "ticker": ["F"], "date": [cal[DAY0]]})
    return events, prices, market


@pytest.mark.parametrize("method", ["paper", "mackinlay"])
@pytest.mark.parametrize("jump_day, car", [(0, 0.0), (1, JUMP), (60, JUMP), (61, 0.0)])
def test_car_sums_the_abnormal_return_of_days_1_to_60(method, jump_day, car):
    got = compute_labels(*planted_panel(jump_day), window=60, method=method).iloc[0]
    assert got["excluded_reason"] is None
    assert got["car"] == pytest.approx(car, abs=1e-9)
    assert got["n_obs"] == 60


@pytest.mark.parametrize(
    "nan_day, excluded",
    [
        (-282, False),
        (-281, True),
        (-280, True),
        (-31, True),
        (-30, False),
        (-1, False),
        (0, True),
        (60, True),
        (61, False),
    ],
)
def test_mackinlay_bad_price_window_is_days_minus_281_to_60(nan_day, excluded):
    """Returns of days -280..-31 (estimation) need prices -281..-31; returns +1..+60 need 0..60."""
    got = compute_labels(*planted_panel(None, nan_day), window=60, method="mackinlay").iloc[0]
    assert got["excluded_reason"] == ("invalid_price" if excluded else None)


def test_mackinlay_estimation_window_is_250_returns_ending_31_days_before():
    """A jump inside days -280..-31 moves alpha (estimated on those days); one on day -281 or -30 does not."""
    for day, inside in ((-281, False), (-280, True), (-31, True), (-30, False)):
        events, prices, market = planted_panel(None)
        firm = prices["adj_close"].to_numpy().copy()
        firm[DAY0 + day :] *= 1 + JUMP  # one return of JUMP on `day` (prices after it scaled)
        got = compute_labels(events, prices.assign(adj_close=firm), market, window=60, method="mackinlay").iloc[0]
        assert got["n_est_obs"] == 250
        assert (abs(got["alpha"]) > 1e-6) == inside, (day, got["alpha"])


@pytest.mark.parametrize("days, covered", [(DAY0 + 61, True), (DAY0 + 60, False)])
def test_window_ending_on_the_last_price_is_covered(days, covered):
    """Day +60 is the last price the window needs: a panel ending there covers the report, one day
    shorter does not."""
    got = compute_labels(*planted_panel(None, days=days), window=60).iloc[0]
    assert got["excluded_reason"] == (None if covered else "outside_price_coverage")


def test_bizfin_task_score_leaves_unscored_items_out_of_n():
    """BizFinBench Table 3: an item without a score (NaN: not answered, or a verdict ours leaves out)
    is outside N, so FTR scores 2 of 3 = 66.7 %, not 2 of 4."""
    from finlib.bizfin.benchmark.results import task_scores

    base = {"model": "m", "task": "FTR", "source": "benchmark", "parsed": True, "judge_status": None, "status": "ok"}
    values = [1.0, 0.0, np.nan, 1.0]
    items = pd.DataFrame([{**base, "official": v, "ours": v} for v in values])
    ftr = task_scores(items, reps=20, seed=0).set_index(["rule", "task"]).loc[("ours", "FTR")]
    assert ftr["score"] == pytest.approx(100 * 2 / 3) and ftr["n_scored"] == 3 and ftr["n_items"] == 4


def test_bizfin_table6_min_max_mean_and_count_of_query_tokens():
    """BizFinBench Table 6 from token counts planted by a stand-in tokenizer: lengths 1, 2 and 9 give
    min 1, max 9, mean 4 (the median would be 2)."""
    from finlib.bizfin.benchmark.results import token_lengths
    from finlib.bizfin.tasks import TASK_ORDER

    class Item:
        source = "benchmark"

        def __init__(self, text: str) -> None:
            self.text = text

        def query_text(self) -> str:
            return self.text

    task = TASK_ORDER[0]
    row = token_lengths(
        {task: [Item("a"), Item("a b"), Item("a b c d e f g h i")]}, lambda texts: [len(t.split()) for t in texts]
    ).iloc[0]
    assert (row["task"], row["min"], row["max"], row["avg"], row["count"]) == (task, 1, 9, 4.0, 3)
