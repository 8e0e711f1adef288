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
from finlib.finbias.scoring.metrics import (
    confusion,
    eq1_by_sector,
    eq1_rate,
    fake_transitions,
    kl_divergence,
    kl_metrics,
    metrics_long,
)
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


def test_kl_divergence_of_a_vector_of_counts_and_of_a_zero_probability():
    """Counts are renormalised (one row or many); a zero in P contributes 0 (eps guards log 0)."""
    p, q = np.array([2, 1, 1]), np.array([1, 1, 2])
    assert float(kl_divergence(p, q)) == pytest.approx(entropy(p / 4, q / 4), abs=1e-12)
    rows = kl_divergence(np.array([[2.0, 1.0, 1.0], [1.0, 0.0, 0.0]]), np.array([[1.0, 1.0, 2.0], [2.0, 1.0, 1.0]]))
    assert rows == pytest.approx([entropy([0.5, 0.25, 0.25], [0.25, 0.25, 0.5]), np.log(2.0)], abs=1e-9)
    # a zero in Q where P is zero too: eps on both sides keeps the term at 0 instead of 0 * log(0 / 0)
    assert float(kl_divergence(np.array([1.0, 0.0, 0.0]), np.array([0.5, 0.5, 0.0]))) == pytest.approx(np.log(2.0))


# --------------------------------------------------------------------------- confusion, macro-F1, parse rates

NAMES = ["bullish", "neutral", "bearish"]


def test_confusion_counts_parsed_and_labelled_rows_like_sklearn():
    """Rows without an answer or a label leave the table; "bearish", absent from both, keeps its zero row
    and column; rows are the label, columns the answer, in the vocabulary's order."""
    from sklearn.metrics import confusion_matrix

    answers = pd.Series(["bullish", "neutral", None, "neutral", "bullish", "bullish", None], dtype=object)
    labels = pd.Series(["neutral", "neutral", "bullish", None, "bullish", "neutral", None], dtype=object)
    got = confusion(answers, labels)
    ok = answers.notna() & labels.notna()
    want = confusion_matrix(labels[ok], answers[ok], labels=NAMES)
    assert list(got.index) == NAMES and list(got.columns) == NAMES
    assert (got.index.name, got.columns.name) == ("label", "answer")
    assert got.to_numpy().tolist() == want.tolist() and got.to_numpy().dtype.kind == "i"
    assert int(got.to_numpy().sum()) == 4


def _metric_rows() -> pd.DataFrame:
    """One model in generate mode and one in score mode, original condition, two sectors, five firms;
    unparsed answers in Energy only, one row without a label; probabilities that do not sum to one."""
    recs = [
        # ticker, sector, answer, label, reference_rating, (p_bullish, p_neutral, p_bearish)
        ("AAA", ENERGY, "bullish", "bullish", "bullish", (2.0, 1.0, 1.0)),
        ("AAA", ENERGY, None, "bearish", "bullish", (1.0, 1.0, 2.0)),
        ("BBB", ENERGY, "bearish", "neutral", "neutral", (1.0, 3.0, 0.0)),
        ("BBB", ENERGY, None, "bullish", "bearish", (1.0, 1.0, 1.0)),
        ("CCC", TECH, "neutral", None, "neutral", (0.5, 0.25, 0.25)),
        ("DDD", TECH, "bullish", "neutral", "bullish", (0.2, 0.2, 0.6)),
        ("EEE", TECH, "neutral", "bearish", "bearish", (3.0, 3.0, 2.0)),
    ]
    out = []
    for model, mode in (("gen", "generate"), ("sc", "score")):
        for t, s, a, lab, ref, p in recs:
            out.append({"model": model, "mode": mode, "condition": "original", "ticker": t, "sector": s,
                        "answer": a, "parsed": a is not None, "label": lab, "reference_rating": ref,
                        **dict(zip(P, p))})
    return pd.DataFrame(out)


def test_metrics_long_macro_f1_prob_herding_and_parse_rates_by_hand():
    from sklearn.metrics import f1_score

    rows = _metric_rows()
    got = metrics_long(rows, reps=20, seed=1).set_index(["model", "metric", "sector"])
    g = rows[rows.model == "gen"]
    # parse rate of Eq. 1's herding: every row has a reference rating; Energy 2 of 4, Technology 3 of 3
    assert got.loc[("gen", "herding", ENERGY), "parse_rate"] == pytest.approx(0.5)
    assert got.loc[("gen", "herding", TECH), "parse_rate"] == pytest.approx(1.0)
    assert got.loc[("gen", "herding", POOLED), "parse_rate"] == pytest.approx(5 / 7)
    assert got.loc[("gen", "herding", SECTOR_MEAN), "parse_rate"] == pytest.approx(0.75)
    # accuracy's parse rate is over the labelled rows: 4 parsed of 6
    assert got.loc[("gen", "accuracy", POOLED), "parse_rate"] == pytest.approx(4 / 6)
    assert got.loc[("gen", "accuracy", POOLED), "n"] == 6
    # macro-F1 is defined on parsed rows; its parse rate is over the labelled rows it could have used
    assert got.loc[("gen", "macro_f1", POOLED), "parse_rate"] == pytest.approx(4 / 6)
    assert got.loc[("gen", "macro_f1", TECH), "parse_rate"] == pytest.approx(1.0)
    assert got.loc[("gen", "macro_f1", ENERGY), "parse_rate"] == pytest.approx(0.5)
    # answer shares: over parsed rows, parse rate over every row; they follow the metric no row is eligible for
    assert got.loc[("gen", "share_bullish", POOLED), ["value", "n", "parse_rate"]].tolist() == pytest.approx(
        [2 / 5, 5, 5 / 7])
    assert got.loc[("gen", "share_neutral", TECH), ["value", "n", "parse_rate"]].tolist() == pytest.approx(
        [2 / 3, 3, 1.0])
    # macro-F1 over parsed, labelled rows, classes present in truth or answers (sklearn's, on those labels)
    for sector, part in ((ENERGY, g[g.sector == ENERGY]), (TECH, g[g.sector == TECH]), (POOLED, g)):
        ok = part[part.parsed & part.label.notna()]
        present = sorted(set(ok.label) | set(ok.answer))
        want = f1_score(ok.label, ok.answer, labels=present, average="macro", zero_division=0)
        assert got.loc[("gen", "macro_f1", sector), "value"] == pytest.approx(want, abs=1e-12), sector
        assert got.loc[("gen", "macro_f1", sector), "n"] == len(ok), sector
    # probability on the reference rating, renormalised over the three labels: the score-mode model only
    probs = rows.loc[rows.model == "sc", list(P)].to_numpy(float)
    probs = probs / probs.sum(axis=1, keepdims=True)
    idx = rows.loc[rows.model == "sc", "reference_rating"].map({n: i for i, n in enumerate(NAMES)}).to_numpy()
    ref = probs[np.arange(len(idx)), idx]
    assert got.loc[("sc", "prob_herding", POOLED), "value"] == pytest.approx(ref.mean(), abs=1e-12)
    assert got.loc[("sc", "prob_herding", POOLED), "n"] == 7
    assert ("gen", "prob_herding", POOLED) not in got.index


def test_fake_transitions_by_hand():
    """fake_rating rows only; an unparsed answer is its own row; share and parse rate per (analyst, fake)."""
    recs = [
        # condition, analyst_rating, fake_rating, answer
        ("fake_rating", "bullish", "bearish", "bearish"),
        ("fake_rating", "bullish", "bearish", "bearish"),
        ("fake_rating", "bullish", "bearish", None),
        ("fake_rating", "bullish", "bearish", "bullish"),
        ("fake_rating", "bearish", "neutral", "neutral"),
        ("original", "bullish", None, "bullish"),
        ("no_rating", "bullish", None, None),
    ]
    rows = pd.DataFrame(recs, columns=["condition", "analyst_rating", "fake_rating", "answer"]).assign(model="m")
    got = fake_transitions(rows)
    assert list(got.columns) == ["model", "analyst_rating", "fake_rating", "answer", "n", "share", "parse_rate"]
    want = [
        ("m", "bearish", "neutral", "neutral", 1, 1.0, 1.0),
        ("m", "bullish", "bearish", "bearish", 2, 0.5, 0.75),
        ("m", "bullish", "bearish", "bullish", 1, 0.25, 0.75),
        ("m", "bullish", "bearish", "unparsed", 1, 0.25, 0.75),
    ]
    assert [tuple(r) for r in got.itertuples(index=False)] == want
    empty = fake_transitions(rows[rows.condition != "fake_rating"])
    assert empty.empty and list(empty.columns) == list(got.columns)


# --------------------------------------------------------------------------- paired tests, column by column

PAIRED_COLUMNS = ["test", "model", "condition_a", "condition_b", "sector", "diff", "diff_ci_low", "diff_ci_high",
                  "method", "n_pairs", "rate_a", "rate_b", "only_a", "only_b", "statistic", "df", "pvalue", "note",
                  "p_holm", "marker"]
PAIR_FIRMS = {"r1": ("AAA", ENERGY), "r2": ("AAA", ENERGY), "r3": ("BBB", ENERGY), "r4": ("CCC", TECH),
              "r5": ("DDD", TECH), "r6": ("DDD", TECH), "r7": ("EEE", TECH), "r8": ("FFF", ENERGY)}


def _paired_rows() -> pd.DataFrame:
    """Models m1, m2 and the analysts' own rows ("Analyst", never tested) on eight reports of six firms in two
    sectors, four conditions (one fake per report); answers drawn with unparsed ones among them."""
    rng = np.random.default_rng(12)
    recs = []
    for model in ("m1", "m2", "Analyst"):
        for rid, (ticker, sector) in PAIR_FIRMS.items():
            analyst = NAMES[int(rng.integers(3))]
            label = NAMES[int(rng.integers(3))] if rid != "r8" else None
            fake = NAMES[(NAMES.index(analyst) + 1 + int(rng.integers(2))) % 3]
            for cond, ref in (("original", analyst), ("no_rating", analyst), ("no_opinion", analyst),
                              ("fake_rating", fake)):
                answer = None if rng.random() < 0.15 else NAMES[int(rng.integers(3))]
                recs.append({"model": model, "condition": cond, "report_id": rid, "ticker": ticker, "sector": sector,
                             "answer": answer, "parsed": answer is not None, "reference_rating": ref, "label": label,
                             "p_bullish": np.nan, "p_neutral": np.nan, "p_bearish": np.nan})
    return pd.DataFrame(recs)


def _pairs(rows: pd.DataFrame, model: str, ca: str, cb: str, sector: str) -> pd.DataFrame:
    g = rows[rows.model == model]
    a, b = g[g.condition == ca], g[g.condition == cb]
    out = a.merge(b[["report_id", "answer", "parsed"]], on="report_id", suffixes=("_a", "_b"))
    return out if sector == POOLED else out[out.sector == sector]


def _mcnemar_truth(pr: pd.DataFrame, target: str, reps: int, seed: int, ci: float) -> dict:
    from statsmodels.stats.contingency_tables import mcnemar

    d = pr[pr[target].notna()]
    xa = (d["answer_a"] == d[target]).to_numpy()
    xb = (d["answer_b"] == d[target]).to_numpy()
    n10, n01 = int((xa & ~xb).sum()), int((~xa & xb).sum())
    n11, n00 = int((xa & xb).sum()), int((~xa & ~xb).sum())
    if n10 + n01:
        res = mcnemar(np.array([[n11, n10], [n01, n00]]), exact=True)
        stat, p = float(res.statistic), float(res.pvalue)
    else:
        stat, p = 0.0, 1.0
    want = {"method": "exact McNemar", "n_pairs": len(d), "only_a": n10, "only_b": n01, "statistic": stat,
            "df": np.nan, "note": "", "rate_a": xa.mean() if len(d) else np.nan,
            "rate_b": xb.mean() if len(d) else np.nan, "pvalue": p if len(d) else np.nan,
            "diff": np.nan, "diff_ci_low": np.nan, "diff_ci_high": np.nan}
    if len(d) and reps > 0:
        firms = list(dict.fromkeys(d["ticker"]))
        sums = np.array([[(xa.astype(float) - xb)[(d["ticker"] == f).to_numpy()].sum(), (d["ticker"] == f).sum()]
                         for f in firms], float)
        est = stats.bootstrap_ci(sums, stats.ratio, reps, seed, ci)
        want.update(diff=xa.mean() - xb.mean(), diff_ci_low=est.ci_low, diff_ci_high=est.ci_high)
    return want


def _stuart_maxwell_truth(pr: pd.DataFrame) -> dict:
    d = pr[pr["parsed_a"] & pr["parsed_b"]]
    want = {"method": "Stuart-Maxwell", "n_pairs": len(d), "rate_a": np.nan, "rate_b": np.nan, "only_a": np.nan,
            "only_b": np.nan, "diff": np.nan, "diff_ci_low": np.nan, "diff_ci_high": np.nan}
    if len(d):
        r = stats.stuart_maxwell(d["answer_a"], d["answer_b"], NAMES)
        want.update(statistic=r.statistic, df=r.df, pvalue=r.pvalue, note=r.note)
    else:
        want.update(statistic=np.nan, df=np.nan, pvalue=np.nan, note="no parsed pairs")
    return want


def _check_row(row: dict, want: dict, where: tuple) -> None:
    for col, value in want.items():
        got = row[col]
        if isinstance(value, str):
            assert got == value, (where, col)
        elif np.isnan(value):
            assert got is not None and np.isnan(got), (where, col, got)
        else:
            assert got == pytest.approx(value, abs=1e-12), (where, col, got, value)


@pytest.mark.parametrize(("kwargs", "reps", "seed", "ci"), [({}, 0, 0, 0.95), ({"reps": 1}, 1, 0, 0.95),
                                                            ({"reps": 40}, 40, 0, 0.95)])
def test_paired_tests_every_column_by_hand(kwargs, reps, seed, ci):
    """Every paired test for two models, pooled and per sector (a sector without reports included): McNemar
    against statsmodels, the paired difference against the firm-cluster bootstrap with the defaults
    (no bootstrap, seed 0, 95 %) or the values given, Stuart-Maxwell's wiring, Holm across the two models."""
    from statsmodels.stats.multitest import multipletests

    from finlib.finbias.scoring.metrics import PAIRED_TESTS, paired_tests

    rows = _paired_rows()
    got = paired_tests(rows, **kwargs)
    assert list(got.columns) == PAIRED_COLUMNS
    assert set(got["model"]) == {"m1", "m2"}
    empty = next(s for s in SECTORS if s not in (ENERGY, TECH))
    assert len(got) == len(PAIRED_TESTS) * 2 * (len(SECTORS) + 1)
    cells = {(r["test"], r["model"], r["sector"]): r for r in got.to_dict("records")}
    targets = {"herding": "reference_rating", "fake_herding": "reference_rating", "accuracy": "label"}
    for t in PAIRED_TESTS:
        for model in ("m1", "m2"):
            for sector in (POOLED, ENERGY, TECH, empty):
                row = cells[(t.name, model, sector)]
                assert (row["condition_a"], row["condition_b"]) == (t.cond_a.value, t.cond_b.value)
                pr = _pairs(rows, model, t.cond_a.value, t.cond_b.value, sector)
                if t.kind == "mcnemar":
                    want = _mcnemar_truth(pr, targets[t.outcome], reps, seed, ci)
                else:
                    want = _stuart_maxwell_truth(pr)
                _check_row(row, want, (t.name, model, sector))
        for sector in (POOLED, ENERGY, TECH):
            p = [cells[(t.name, m, sector)]["pvalue"] for m in ("m1", "m2")]
            holm = multipletests(p, method="holm")[1]
            assert [cells[(t.name, m, sector)]["p_holm"] for m in ("m1", "m2")] == pytest.approx(holm)
            for m in ("m1", "m2"):
                q = cells[(t.name, m, sector)]["p_holm"]
                assert cells[(t.name, m, sector)]["marker"] == ("***" if q < 0.001 else "**" if q < 0.01
                                                                    else "*" if q < 0.05 else "")


def test_a_row_without_a_ticker_is_refused_by_name():
    rows = _metric_rows()
    rows.loc[0, "ticker"] = None
    with pytest.raises(ValueError, match=r"^a scored row has no ticker: cannot cluster the bootstrap by firm$"):
        metrics_long(rows, reps=5, seed=1)


def test_eq1_values_with_missing_values_on_either_side_and_pandas_na():
    """A missing answer or target is never a match, also as pandas' NA in a string column (as parquet reads back)."""
    from finlib.finbias.scoring.metrics import eq1_values

    answers = pd.Series(["bullish", pd.NA, "neutral", pd.NA, "bearish"], dtype="string")
    targets = pd.Series(["bullish", "bullish", None, None, "neutral"], dtype=object)
    assert eq1_values(answers, targets).tolist() == [[1.0, 1.0], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0]]
    with pytest.raises(ValueError, match=r"^cannot compare 5 answers with 2 targets$"):
        eq1_values(answers, targets[:2])


def test_paired_rows_without_the_groups_joins_one_model_by_report():
    from finlib.finbias.scoring.metrics import model_condition_groups, paired_rows

    rows = _paired_rows()
    alone = paired_rows(rows, "m2", "original", "no_rating")
    grouped = paired_rows(rows, "m2", "original", "no_rating", model_condition_groups(rows))
    keep = ["answer", "parsed", "reference_rating", "label", "p_bullish", "p_neutral", "p_bearish"]
    assert list(alone.columns) == ["report_id", "ticker", "sector", *[f"{c}_a" for c in keep],
                                   *[f"{c}_b" for c in keep]]
    assert list(alone.index) == list(range(len(PAIR_FIRMS)))
    want = _pairs(rows, "m2", "original", "no_rating", POOLED)
    assert alone["answer_a"].tolist() == want["answer_a"].tolist()
    assert alone["answer_b"].tolist() == want["answer_b"].tolist()
    pd.testing.assert_frame_equal(alone, grouped)
    twice = pd.concat([rows, rows])
    with pytest.raises(ValueError, match=r"^m1: both original and no_rating have several rows per report; "
                                         r"cannot pair them$"):
        paired_rows(twice, "m1", "original", "no_rating")


@pytest.mark.parametrize("kind", ["mcnemar", "stuart_maxwell"])
def test_paired_tests_of_one_kind_keep_every_column_numeric(kind):
    """Run alone, McNemar rows or Stuart-Maxwell rows still carry every column, the numeric ones as floats
    (NaN where a test does not apply), not as None."""
    from finlib.finbias.scoring.metrics import PAIRED_TESTS, paired_tests

    got = paired_tests(_paired_rows(), tests=[t for t in PAIRED_TESTS if t.kind == kind])
    assert list(got.columns) == PAIRED_COLUMNS
    numeric = ["diff", "diff_ci_low", "diff_ci_high", "rate_a", "rate_b", "only_a", "only_b", "statistic", "df",
               "pvalue", "p_holm"]
    assert all(got[c].dtype.kind in "fi" for c in numeric), {c: str(got[c].dtype) for c in numeric}
    assert got["diff"].isna().all()   # no bootstrap by default; Stuart-Maxwell has no paired difference
    if kind == "stuart_maxwell":
        assert got[["rate_a", "rate_b", "only_a", "only_b"]].isna().all().all()
    else:
        assert got["df"].isna().all()
