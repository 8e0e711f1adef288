"""The rehearsal's recomputation of intervals and p-values (finlib.rehearsal.intervals), on hand-made
replies and counts. Oracles: statsmodels' exact McNemar and cluster-robust OLS (other code than the
module's scipy binomial test and closed-form sum), hand-computed values and the simulator's own replies."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from finlib.rehearsal import intervals as iv
from finlib.rehearsal.simulated_servers import default_profile, finbias_reply


def test_the_simulators_replies_are_read_thinking_or_not():
    for thinks in (False, True):
        p = default_profile("m", "org/m", 8192, thinks, unparsed=0.0)
        text, _, _ = finbias_reply(p, "We rate Acme Bullish. Sales rose.", "k1")
        assert iv.reply_answer(text) in ("bullish", "neutral", "bearish")
    unparsed = default_profile("m", "org/m", 8192, False, unparsed=1.0)
    assert iv.reply_answer(finbias_reply(unparsed, "We rate Acme Bullish.", "k2")[0]) is None
    assert iv.reply_answer(None) is None and iv.reply_answer('["bullish"]') is None
    assert iv.reply_answer('{"answer": "bearish", "reason": "x"}') == "bearish"


def test_a_reply_cut_at_the_token_limit_is_read_by_its_first_answer():
    import asyncio
    import json as js

    from finlib.finbias.prompts import build_messages
    from finlib.rehearsal.simulated_servers import SimulatedServer

    for thinks in (False, True):
        p = default_profile("m", "org/m", 8192, thinks, unparsed=0.0, runaway=1.0)
        server = SimulatedServer(p, None, 0.0)
        messages = build_messages("We rate Acme Bullish. Sales rose 5 percent.")
        body = js.dumps({"model": "org/m", "max_tokens": 4000, "messages": messages})
        raw, _ = asyncio.run(server.handle_request("POST", "/v1/chat/completions", {}, body.encode()))
        reply = js.loads(raw.split(b"\r\n\r\n", 1)[1])["choices"][0]
        assert reply["finish_reason"] == "length"
        assert iv.reply_answer(reply["message"]["content"]) in ("bullish", "neutral", "bearish")


def test_clustered_se_is_statsmodels_cluster_robust_se_without_small_sample_correction():
    import statsmodels.api as sm

    rng = np.random.default_rng(3)
    clusters = rng.integers(0, 12, size=200)
    x = (rng.random(200) < 0.3 + 0.04 * clusters).astype(float)
    mean, se, n = iv.clustered(x, clusters)
    fit = sm.OLS(x, np.ones((n, 1))).fit(cov_type="cluster", cov_kwds={"groups": clusters, "use_correction": False})
    assert mean == pytest.approx(fit.params[0]) and n == 200
    assert se == pytest.approx(fit.bse[0], rel=1e-9)


def test_clustered_se_by_hand():
    # firms a: (1, 1), b: (0,), c: (1, 0, 0): mean 1/2; firm sums of x - 1/2: 1, -1/2, -1/2
    mean, se, n = iv.clustered(np.array([1, 1, 0, 1, 0, 0.0]), np.array(list("aabccc")))
    assert (mean, n) == (0.5, 6) and se == pytest.approx(np.sqrt(1 + 0.25 + 0.25) / 6)


def items_frame(rows) -> pd.DataFrame:
    return pd.DataFrame(
        rows, columns=["model", "condition", "item_id", "report_id", "ticker", "answer", "reference", "label"]
    )


def test_mcnemar_matches_statsmodels_and_holm_runs_across_models():
    from statsmodels.stats.contingency_tables import mcnemar

    rows = []
    # model m1: 9 reports herd with the rating only, 1 only without; m2: 3 and 2; every report its own firm
    for model, (only_a, only_b, both) in {"m1": (9, 1, 4), "m2": (3, 2, 4)}.items():
        for i in range(only_a + only_b + both):
            a_hit, b_hit = (True, False) if i < only_a else (False, True) if i < only_a + only_b else (True, True)
            rid = f"R{i}"
            rows.append(
                (model, "original", f"{rid}:o", rid, f"T{i}", "bullish" if a_hit else "bearish", "bullish", "neutral")
            )
            rows.append(
                (model, "no_rating", f"{rid}:n", rid, f"T{i}", "bullish" if b_hit else "neutral", "bullish", "neutral")
            )
    got = iv.mcnemar_recomputed(items_frame(rows)).query("test == 'herding_with_vs_without'").set_index("model")
    assert (got.loc["m1", "only_a"], got.loc["m1", "only_b"]) == (9, 1)
    for model, (a, b) in {"m1": (9, 1), "m2": (3, 2)}.items():
        expect = mcnemar(np.array([[4, a], [b, 0]]), exact=True).pvalue
        assert got.loc[model, "pvalue"] == pytest.approx(expect)
    p1, p2 = sorted(got["pvalue"])
    assert sorted(got["p_holm"]) == pytest.approx(sorted([min(1, 2 * p1), max(min(1, 2 * p1), p2)]))
    assert got.loc["m1", "marker"] == iv.significance(got.loc["m1", "p_holm"])


@pytest.mark.parametrize(
    "p, marker",
    [(0.0009, "***"), (0.001, "**"), (0.0099, "**"), (0.01, "*"), (0.049, "*"), (0.05, ""), (float("nan"), "")],
)
def test_markers_by_threshold(p, marker):
    assert iv.significance(p) == marker


def test_width_tolerance_separates_90_from_95_percent_at_the_rehearsals_shape():
    gap = np.log(1.959964 / 1.644854)  # a 90 % interval printed as 95 %: 0.175 narrower in log width
    assert iv.width_tolerance(0.95, 1000, 30) < gap and iv.width_tolerance(0.95, 400, 33) < gap
    assert iv.width_tolerance(0.95, 20, 1) > gap  # one interval from 20 replicates cannot tell them apart


def test_a_narrow_median_interval_is_a_problem_and_a_right_one_is_not():
    widths = pd.DataFrame({"ratio": np.exp(np.linspace(-0.05, 0.05, 30))})
    assert iv.interval_problems(widths, 0.95, 1000)[1] == []
    _, problems = iv.interval_problems(widths.assign(ratio=widths["ratio"] * 0.84), 0.95, 1000)
    assert problems and "0.84" in problems[0]


def test_printed_cells_and_markers_are_read_from_the_table():
    table = pd.DataFrame(
        {
            "Source": ["ours", "ours (analyst baseline)", "Fin-Bias (published)"],
            "Registry name": ["m1", "", ""],
            "Average": ["61.3/40.2***", "55.0", "70.1/50.2"],
            "Average (pooled) 95 % CI": ["[55.0, 67.5]/[33.1, 47.0]", "", ""],
        }
    )
    tables = {t: table for t in iv.MARKED_TABLES}
    intervals, markers = iv.printed_cells(tables)
    t4 = intervals[intervals["table"] == "table4_herding_with_without"].set_index("condition")
    assert t4.loc["original", "ci_low"] == pytest.approx(0.55) and t4.loc["no_rating", "ci_high"] == pytest.approx(0.47)
    assert set(markers["model"]) == {"m1"} and set(markers["marker"]) == {"***"}


def _pairs(table) -> tuple[list[str], list[str]]:
    """Paired answers (a, b) with n_ij pairs answering category i in a and j in b."""
    a, b = [], []
    for i, ci in enumerate(iv.CATEGORIES):
        for j, cj in enumerate(iv.CATEGORIES):
            a += [ci] * int(table[i][j])
            b += [cj] * int(table[i][j])
    return a, b


def test_stuart_maxwell_by_hand_matches_statsmodels_homogeneity_not_symmetry():
    from statsmodels.stats.contingency_tables import SquareTable

    t = np.array([[20, 10, 5], [3, 30, 15], [0, 5, 40]], float)
    stat, df, p = iv.stuart_maxwell_by_hand(*_pairs(t))
    sm = SquareTable(t, shift_zeros=False).homogeneity(method="stuart_maxwell")
    assert (stat, df, p) == (pytest.approx(sm.statistic), sm.df, pytest.approx(sm.pvalue))
    bowker = SquareTable(t, shift_zeros=False).symmetry()  # the other test of a square table: df 3, not 2
    assert bowker.df == 3 and not np.isclose(p, bowker.pvalue, rtol=iv.P_RTOL)


def test_stuart_maxwell_by_hand_two_active_categories_is_mcnemars_chi_square():
    # bearish never changes: the statistic is McNemar's (n_12 - n_21)^2 / (n_12 + n_21) with one df
    stat, df, p = iv.stuart_maxwell_by_hand(*_pairs([[10, 6, 0], [1, 8, 0], [0, 0, 4]]))
    assert (stat, df) == (pytest.approx(25 / 7), 1) and p == pytest.approx(0.0587, abs=1e-4)
    assert iv.stuart_maxwell_by_hand(["bullish", "neutral"], ["bullish", "neutral"]) == (0.0, 0.0, 1.0)


def _shift_items(tables: dict[str, list[list[int]]]) -> pd.DataFrame:
    """Items of answer_shift_with_vs_without per model from its 3 x 3 table (one report per pair), plus one
    pair whose b answer was not read (left out of n_pairs)."""
    rows = []
    for model, t in tables.items():
        a, b = _pairs(t)
        for i, (x, y) in enumerate([*zip(a, b), ("bullish", None)]):
            rows.append((model, "original", f"R{i}:o", f"R{i}", f"T{i}", x, "bullish", "neutral"))
            rows.append((model, "no_rating", f"R{i}:n", f"R{i}", f"T{i}", y, "bullish", "neutral"))
    return items_frame(rows)


def test_stuart_maxwell_recomputed_per_model_with_holm_across_models():
    from statsmodels.stats.contingency_tables import SquareTable

    tables = {"m1": [[20, 10, 5], [3, 30, 15], [0, 5, 40]], "m2": [[9, 2, 1], [3, 7, 2], [1, 2, 8]]}
    got = iv.stuart_maxwell_recomputed(_shift_items(tables)).set_index("model")
    assert list(got["test"].unique()) == ["answer_shift_with_vs_without"]
    p = {m: SquareTable(np.array(t, float), shift_zeros=False).homogeneity().pvalue for m, t in tables.items()}
    for model, t in tables.items():
        assert got.loc[model, "n_pairs"] == np.sum(t) and got.loc[model, "df"] == 2
        assert got.loc[model, "pvalue"] == pytest.approx(p[model])
    lo, hi = sorted(p.values())  # Holm by hand over two tests: 2 p_(1), then max(that, p_(2))
    assert sorted(got["p_holm"]) == pytest.approx(sorted([min(1, 2 * lo), max(min(1, 2 * lo), hi)]))


def _table_rows(recomputed: pd.DataFrame) -> pd.DataFrame:
    """The paired-test table's pooled rows as stage 04 writes them (4 significant digits)."""
    t = recomputed.assign(sector="Average (pooled)", method="Stuart-Maxwell")
    for col in ("statistic", "pvalue", "p_holm"):
        t[col] = t[col].map(lambda x: float(f"{x:.4g}"))
    return t


def test_stuart_maxwell_problems_name_what_differs():
    items = _shift_items({"m1": [[20, 10, 5], [3, 30, 15], [0, 5, 40]], "m2": [[9, 2, 1], [3, 7, 2], [1, 2, 8]]})
    recomputed = iv.stuart_maxwell_recomputed(items)
    table = _table_rows(recomputed)
    assert iv.stuart_maxwell_problems(table, recomputed) == []
    wrong_df = table.assign(df=3, pvalue=[float(chi2_sf(s, 3)) for s in table["statistic"]])
    problems = iv.stuart_maxwell_problems(wrong_df, recomputed)
    assert len(problems) == 1 and "2 of 2 pooled Stuart-Maxwell tests differ" in problems[0]
    assert "df, pvalue" in problems[0]
    missing = iv.stuart_maxwell_problems(table[table["model"] == "m1"], recomputed)
    assert missing and "1 of 2" in missing[0] and "m2: n_pairs, df, statistic, pvalue, p_holm" in missing[0]


def chi2_sf(x: float, df: int) -> float:
    from scipy.stats import chi2

    return float(chi2.sf(x, df))


def _stage04_rows(tables: dict[str, list[list[int]]]) -> pd.DataFrame:
    """Stage 04's scored rows for original vs no_rating from each model's 3 x 3 answer table, plus one
    pair per model whose no_rating answer did not parse."""
    rows = []
    for model, t in tables.items():
        a, b = _pairs(t)
        for i, (x, y) in enumerate([*zip(a, b), ("neutral", None)]):
            for cond, ans in (("original", x), ("no_rating", y)):
                rows.append(
                    {
                        "model": model,
                        "condition": cond,
                        "mode": "generate",
                        "report_id": f"R{i}",
                        "ticker": f"T{i % 7}",
                        "sector": "Energy",
                        "answer": ans,
                        "parsed": ans is not None,
                        "reference_rating": "bullish",
                        "label": "neutral",
                        "p_bullish": np.nan,
                        "p_neutral": np.nan,
                        "p_bearish": np.nan,
                    }
                )
    return pd.DataFrame(rows)


def test_the_check_agrees_with_stage_04s_answer_shift_rows():
    """Stage 04's paired-test code (through a CSV round trip, as the table is written) against the
    rehearsal's recomputation from the same answers: no difference. A wrong df, Bowker's symmetry test
    or a Stuart-Maxwell over other pairs in stage 04 makes this fail (tests/faults/seeded.py)."""
    import io

    from finlib.finbias.scoring.metrics import PAIRED_TESTS, paired_tests

    tables = {
        "m1": [[20, 10, 5], [3, 30, 15], [0, 5, 40]],
        "m2": [[9, 2, 1], [3, 7, 2], [1, 2, 8]],
        "m3": [[12, 0, 0], [4, 9, 0], [0, 0, 6]],
    }
    rows = _stage04_rows(tables)
    shifts = [t for t in PAIRED_TESTS if t.name == "answer_shift_with_vs_without"]
    written = io.StringIO()
    paired_tests(rows, shifts, reps=0).to_csv(written, index=False)
    table = pd.read_csv(io.StringIO(written.getvalue()))
    items = rows.assign(item_id=rows["report_id"] + rows["condition"], reference="bullish")
    recomputed = iv.stuart_maxwell_recomputed(items[items["model"].isin(tables)])
    assert list(recomputed["df"]) == [2.0, 2.0, 1.0] and list(recomputed["n_pairs"]) == [128, 35, 31]
    assert iv.stuart_maxwell_problems(table, recomputed) == []
