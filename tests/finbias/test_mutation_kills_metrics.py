"""Stage 04's Eq. 1 cells and KL rows on small hand-built frames, against counts and scipy computed here.

The KL truth is scipy's entropy per report pair, averaged per sector by hand; the interval is the
firm-cluster bootstrap of the firms' hand-summed (KL, 1) columns, so the seed, level and clusters
the stage passes on are checked and not only the point value.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import entropy

from finlib.core import stats
from finlib.finbias.scoring.metrics import eq1_by_sector, eq1_rate, kl_metrics
from finlib.finbias.vocab import POOLED, SECTOR_MEAN, SECTORS

ENERGY, TECH = "Energy", "Technology"


# --------------------------------------------------------------------------- Eq. 1


def _eq1_rows() -> pd.DataFrame:
    """Two models, two conditions, two sectors; an unparsed answer (None) stays in N, a row
    without a target leaves it."""
    recs = [
        # model, condition, sector, answer, reference_rating, label
        ("m1", "original", ENERGY, "bullish", "bullish", "bearish"),
        ("m1", "original", ENERGY, None, "bullish", "bullish"),
        ("m1", "original", TECH, "neutral", "neutral", None),
        ("m1", "original", TECH, "bearish", "bullish", "bearish"),
        ("m1", "original", TECH, "bullish", None, "bullish"),
        ("m1", "no_rating", ENERGY, "neutral", "bullish", "neutral"),
        ("m2", "original", TECH, "bullish", "bullish", "bullish"),
        ("m2", "original", TECH, "bullish", "bullish", "neutral"),
    ]
    return pd.DataFrame(recs, columns=["model", "condition", "sector", "answer", "reference_rating", "label"])


@pytest.mark.parametrize(
    ("outcome", "want"),
    [
        ("herding", {("m1", "original", ENERGY): (1, 2), ("m1", "original", TECH): (1, 2),
                     ("m1", "original", POOLED): (2, 4), ("m1", "no_rating", ENERGY): (0, 1),
                     ("m1", "no_rating", POOLED): (0, 1), ("m2", "original", TECH): (2, 2),
                     ("m2", "original", POOLED): (2, 2)}),
        ("accuracy", {("m1", "original", ENERGY): (0, 2), ("m1", "original", TECH): (2, 2),
                      ("m1", "original", POOLED): (2, 4), ("m1", "no_rating", ENERGY): (1, 1),
                      ("m1", "no_rating", POOLED): (1, 1), ("m2", "original", TECH): (1, 2),
                      ("m2", "original", POOLED): (1, 2)}),
    ],
)
def test_eq1_by_sector_counts_by_hand(outcome, want):
    got = eq1_by_sector(_eq1_rows(), outcome)
    assert list(got.columns) == ["model", "condition", "sector", "metric", "value", "n"]
    assert list(got.index) == list(range(len(got)))
    assert (got["metric"] == outcome).all()
    assert got["n"].dtype.kind == "i"
    cells = {(r.model, r.condition, r.sector): (r.value, r.n) for r in got.itertuples()}
    assert set(cells) == set(want)
    for key, (hits, n) in want.items():
        assert cells[key][1] == n, key
        assert cells[key][0] == pytest.approx(hits / n), key


def test_eq1_rate_by_hand_and_nan_without_targets():
    rows = _eq1_rows()
    m1 = rows[(rows.model == "m1") & (rows.condition == "original")]
    assert eq1_rate(m1["answer"], m1["reference_rating"]) == pytest.approx(2 / 4)
    assert eq1_rate(m1["answer"], m1["label"]) == pytest.approx(2 / 4)
    none = pd.Series([None, None], dtype=object)
    assert np.isnan(eq1_rate(pd.Series(["bullish", "neutral"]), none))


# --------------------------------------------------------------------------- KL

P = ("p_bullish", "p_neutral", "p_bearish")


def _kl_rows() -> pd.DataFrame:
    """Score-mode model "sc": eight reports of seven firms in two sectors, under original, no_rating,
    no_opinion and two fake ratings per report. Model "sc2" has original and no_opinion only (the
    first KL pair is empty for it); "sc3" has no scores under no_rating (the first two pairs have rows
    but no usable pair). Model "gen" answers in generate mode: its probabilities are
    finite but not scores, and gives no KL row."""
    rng = np.random.default_rng(4)
    firms = {"r1": ("AAA", ENERGY), "r2": ("AAA", ENERGY), "r3": ("BBB", TECH), "r4": ("CCC", TECH),
             "r5": ("DDD", ENERGY), "r6": ("EEE", TECH), "r7": ("FFF", ENERGY), "r8": ("GGG", TECH)}
    recs = []

    def add(model, mode, cond, rid, p):
        t, s = firms[rid]
        recs.append({"model": model, "mode": mode, "condition": cond, "report_id": rid, "ticker": t, "sector": s,
                     "answer": "bullish", "parsed": True, "reference_rating": "bullish", "label": "neutral",
                     **dict(zip(P, p))})

    def draw():
        p = rng.uniform(0.05, 1.0, 3)
        return p / p.sum()

    for rid in firms:
        for cond in ("original", "no_rating", "no_opinion"):
            add("sc", "score", cond, rid, draw())
            add("gen", "generate", cond, rid, draw())
        for _ in range(2):
            add("sc", "score", "fake_rating", rid, draw())
        add("sc2", "score", "original", rid, draw())
        add("sc2", "score", "no_opinion", rid, draw())
        for cond in ("original", "no_rating", "no_opinion"):
            add("sc3", "score", cond, rid, (np.nan, np.nan, np.nan) if cond == "no_rating" else draw())
    rows = pd.DataFrame(recs)
    # a report without scores under no_rating leaves the pairs that need it
    rows.loc[(rows.model == "sc") & (rows.condition == "no_rating") & (rows.report_id == "r4"), P[0]] = np.nan
    return rows


def _kl_truth(rows: pd.DataFrame, model: str, ca: str, cb: str) -> pd.DataFrame:
    """Per pair of one report's rows under ca and cb (a fake-rating report gives one pair per fake):
    report, firm, sector and scipy's KL(P_a || P_b); pairs with a missing probability left out."""
    g = rows[rows.model == model]
    a, b = g[g.condition == ca], g[g.condition == cb]
    out = []
    if b.report_id.duplicated().any():
        pairs = [(ra, rb) for _, rb in b.iterrows() for _, ra in a[a.report_id == rb.report_id].iterrows()]
    else:
        pairs = [(ra, rb) for _, ra in a.iterrows() for _, rb in b[b.report_id == ra.report_id].iterrows()]
    for ra, rb in pairs:
        pa, pb = ra[list(P)].to_numpy(float), rb[list(P)].to_numpy(float)
        if np.isfinite(pa).all() and np.isfinite(pb).all():
            out.append({"report_id": ra.report_id, "ticker": ra.ticker, "sector": ra.sector, "kl": entropy(pa, pb)})
    return pd.DataFrame(out)


KL_PAIRS = [("original", "no_rating"), ("no_rating", "no_opinion"), ("original", "no_opinion"),
            ("original", "fake_rating")]


def test_kl_metrics_values_and_counts_by_hand():
    rows = _kl_rows()
    got = kl_metrics(rows, reps=50, seed=3, ci=0.9)
    assert set(got["model"]) == {"sc", "sc2", "sc3"}
    assert (got["metric"] == "kl_divergence").all() and got["parse_rate"].isna().all()
    want_conditions = {("sc", f"{a}||{b}") for a, b in KL_PAIRS} | {("sc2", "original||no_opinion"), ("sc3", "original||no_opinion")}
    assert set(zip(got["model"], got["condition"])) == want_conditions
    for model, cond in want_conditions:
        ca, cb = cond.split("||")
        truth = _kl_truth(rows, model, ca, cb)
        cells = got[(got.model == model) & (got.condition == cond)].set_index("sector")
        assert list(cells.index) == [*SECTORS, POOLED, SECTOR_MEAN]
        per_sector = truth.groupby("sector")["kl"].mean()
        for sector in SECTORS:
            n = int((truth.sector == sector).sum())
            assert cells.loc[sector, "n"] == n, (cond, sector)
            if n:
                assert cells.loc[sector, "value"] == pytest.approx(per_sector[sector], abs=1e-12), (cond, sector)
            else:
                assert np.isnan(cells.loc[sector, "value"])
        assert cells.loc[POOLED, "n"] == len(truth) == cells.loc[SECTOR_MEAN, "n"]
        assert cells.loc[POOLED, "value"] == pytest.approx(truth["kl"].mean(), abs=1e-12)
        assert cells.loc[SECTOR_MEAN, "value"] == pytest.approx(per_sector.mean(), abs=1e-12)


def _firm_sums(truth: pd.DataFrame) -> np.ndarray:
    """(sum of KL, pairs) per firm, firms in order of first appearance."""
    firms = list(dict.fromkeys(truth["ticker"]))
    return np.array([[truth.loc[truth.ticker == f, "kl"].sum(), (truth.ticker == f).sum()] for f in firms], float)


@pytest.mark.parametrize(("seed", "ci"), [(3, 0.9), (11, 0.95)])
def test_kl_pooled_interval_is_the_firm_cluster_bootstrap_with_the_seed_and_level_given(seed, ci):
    rows = _kl_rows()
    got = kl_metrics(rows, reps=100, seed=seed, ci=ci)
    cell = got[(got.model == "sc") & (got.condition == "original||no_opinion") & (got.sector == POOLED)].iloc[0]
    truth = _kl_truth(rows, "sc", "original", "no_opinion")
    want = stats.bootstrap_ci(_firm_sums(truth), stats.ratio, 100, seed, ci)
    assert (cell["ci_low"], cell["ci_high"]) == pytest.approx((want.ci_low, want.ci_high), abs=1e-12)
    assert cell["ci_low"] < cell["value"] < cell["ci_high"]
    other = stats.bootstrap_ci(_firm_sums(truth), stats.ratio, 100, seed + 1, ci)
    assert (other.ci_low, other.ci_high) != (want.ci_low, want.ci_high)


def test_kl_metrics_without_score_rows_is_empty():
    rows = _kl_rows()
    got = kl_metrics(rows[rows["mode"] != "score"], reps=10, seed=1)
    assert got.empty
    assert list(got.columns) == ["model", "condition", "sector", "metric", "value", "ci_low", "ci_high", "n",
                                 "parse_rate"]
