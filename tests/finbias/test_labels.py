"""Stage 01 labels: independent oracles (statsmodels OLS per event, exact hand arithmetic),
year buckets incl. ties and tiny years, every exclusion reason, and real daily prices."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from finlib.finbias.labels import market_model as MM
from finlib.finbias.labels import stage as L
from finlib.finbias.labels.market_model import (
    EXCLUSION_REASONS,
    assign_year_buckets,
    bucket_counts,
    compute_labels,
    market_series,
)

TOL = 1e-10


# --------------------------------------------------------------------------- helpers


def random_panel(seed: int, n_tickers: int = 12, n_days: int = 700, hole_rate: float = 0.02):
    """A random long price panel with missing rows, and a market close Series on a weekday calendar."""
    rng = np.random.default_rng(seed)
    cal = pd.bdate_range("2017-01-02", periods=n_days)
    rm = rng.normal(0.0003, 0.01, n_days)
    market = pd.Series(1000 * np.cumprod(1 + rm), index=cal)
    betas = rng.uniform(0.3, 1.8, n_tickers)
    r = betas * rm[:, None] + rng.normal(0.0, 0.02, (n_days, n_tickers))
    p = 20 * np.cumprod(1 + r, axis=0)
    tickers = [f"T{i:02d}" for i in range(n_tickers)]
    prices = pd.DataFrame(
        {"date": np.repeat(cal, n_tickers), "ticker": np.tile(tickers, n_days), "adj_close": p.ravel()}
    )
    prices = prices[rng.random(len(prices)) > hole_rate].reset_index(drop=True)
    return prices, market, tickers


def oracle(
    prices: pd.DataFrame, market: pd.Series, ticker: str, date, window: int, method: str, L: int = 250, gap: int = 30
) -> dict:
    """Per-event statsmodels OLS, written independently of finlib.finbias.labels.stage."""
    cal = market.index
    firm = prices[prices.ticker == ticker].set_index("date")["adj_close"].reindex(cal)
    ri = firm / firm.shift(1) - 1
    rm = market / market.shift(1) - 1
    i0 = int(np.flatnonzero(cal <= pd.Timestamp(date))[-1])  # day 0: the date, or the last trading day before
    ev = pd.DataFrame({"y": ri.iloc[i0 + 1 : i0 + 1 + window], "x": rm.iloc[i0 + 1 : i0 + 1 + window]}).dropna()
    if method == "paper":
        fit = sm.OLS(ev["y"], sm.add_constant(ev["x"])).fit()
        a, b = fit.params["const"], fit.params["x"]
        car = window * float(a)  # Eq. 7: alpha summed over the window the paper defines
        if len(ev) == window:  # with no missing day, the same as the sum of R_i - beta R_m
            assert abs(car - float((ev["y"] - b * ev["x"]).sum())) < 1e-12
    else:
        es = pd.DataFrame({"y": ri.iloc[i0 - gap - L : i0 - gap], "x": rm.iloc[i0 - gap - L : i0 - gap]}).dropna()
        fit = sm.OLS(es["y"], sm.add_constant(es["x"])).fit()
        a, b = fit.params["const"], fit.params["x"]
        car = float((ev["y"] - a - b * ev["x"]).sum())
    return {"car": car, "alpha": float(a), "beta": float(b), "n_obs": len(ev)}


# --------------------------------------------------------------------------- statsmodels oracle


@pytest.mark.parametrize("method", ["paper", "mackinlay"])
def test_matches_statsmodels_on_random_events(method):
    prices, market, tickers = random_panel(seed=7)
    rng = np.random.default_rng(11)
    n = 60
    cal = market.index
    # report dates include weekends/holidays (day 0 = last trading day before) and intraday timestamps
    dates = (
        cal[rng.integers(300, 600, n)]
        - pd.to_timedelta(rng.integers(0, 3, n), unit="D")
        + pd.to_timedelta(rng.integers(0, 20, n), unit="h")
    )
    events = pd.DataFrame({"report_id": [f"r{i}" for i in range(n)], "ticker": rng.choice(tickers, n), "date": dates})
    got = compute_labels(events, prices, market, window=60, method=method, min_obs=100, min_event_obs=30)
    assert got["excluded_reason"].isna().all()
    assert (got["n_obs"] < 60).any(), "the panel has holes: some windows must have missing pairs"
    for i, ev in events.iterrows():
        exp = oracle(prices, market, ev.ticker, ev.date.normalize(), 60, method)
        row = got.iloc[i]
        assert row["report_id"] == ev.report_id
        assert row["n_obs"] == exp["n_obs"]
        for k in ("car", "alpha", "beta"):
            assert abs(row[k] - exp[k]) <= TOL, (method, i, k, row[k], exp[k])
    if method == "paper":  # CAR = window * alpha (Eq. 7), also where days were missing
        np.testing.assert_allclose(got["car"], 60 * got["alpha"], rtol=0, atol=1e-12)


def test_market_frame_and_series_give_the_same_result():
    prices, market, tickers = random_panel(seed=3, n_tickers=4, n_days=400)
    events = pd.DataFrame(
        {"report_id": ["a", "b"], "ticker": tickers[:2], "date": [market.index[100], market.index[200]]}
    )
    a = compute_labels(events, prices, market)
    frame = pd.DataFrame({"date": market.index, "market_close": market.to_numpy()})
    b = compute_labels(events, prices, frame)
    other = pd.DataFrame({"date": market.index, "sp500_close": 1.0, "spy": market.to_numpy()})
    c = compute_labels(events, prices, other, market_column="spy")
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(a, c)
    with pytest.raises(ValueError, match="market_column"):
        compute_labels(events, prices, other)


# --------------------------------------------------------------------------- hand-computed fixture


def _hand_fixture():
    """Four firms on a 10-day calendar with returns built as exact linear functions of the market.

    Report on Monday 2021-01-11, a trading day -> day 0 = row 5; window = 3 -> rows 6..8;
    MacKinlay estimation window L = 3, gap = 1 -> rows 1..3.
      A: R = 0.005 + 1.5 Rm on rows 1..5, 0.02 + 1.5 Rm afterwards
         paper: beta 1.5, alpha 0.02, CAR 0.06;  mackinlay: alpha 0.005, beta 1.5, CAR 3 * 0.015 = 0.045
      B: R = Rm everywhere                          -> CAR 0 for both
      C: R = 0.8 Rm on rows 1..5, -0.01 + 0.8 Rm after -> paper CAR -0.03, mackinlay CAR -0.03
    """
    cal = pd.bdate_range("2021-01-04", periods=10)
    rm = [0.0, 0.01, -0.02, 0.03, 0.005, -0.01, 0.02, -0.015, 0.01, 0.004]
    rules = {
        "A": [(0.005, 1.5)] * 6 + [(0.02, 1.5)] * 4,
        "B": [(0.0, 1.0)] * 10,
        "C": [(0.0, 0.8)] * 6 + [(-0.01, 0.8)] * 4,
    }
    m = [100.0]
    for r in rm[1:]:
        m.append(m[-1] * (1 + r))
    rows = []
    for tic, rule in rules.items():
        p = 50.0
        for t, d in enumerate(cal):
            if t:
                a, b = rule[t]
                p *= 1 + a + b * rm[t]
            rows.append((d, tic, p))
    prices = pd.DataFrame(rows, columns=["date", "ticker", "adj_close"])
    market = pd.Series(m, index=cal)
    events = pd.DataFrame(
        {"report_id": ["rC", "rA", "rB"], "ticker": ["C", "A", "B"], "date": pd.Timestamp("2021-01-11")}
    )
    return prices, market, events


def test_hand_computed_paper_and_mackinlay():
    prices, market, events = _hand_fixture()
    paper = compute_labels(events, prices, market, window=3, min_event_obs=3).set_index("report_id")
    assert paper.loc["rA", "car"] == pytest.approx(0.06, abs=1e-12)
    assert paper.loc["rA", "alpha"] == pytest.approx(0.02, abs=1e-12)
    assert paper.loc["rA", "beta"] == pytest.approx(1.5, abs=1e-12)
    assert paper.loc["rB", "car"] == pytest.approx(0.0, abs=1e-12)
    assert paper.loc["rB", "beta"] == pytest.approx(1.0, abs=1e-12)
    assert paper.loc["rC", "car"] == pytest.approx(-0.03, abs=1e-12)
    assert paper.loc["rC", "beta"] == pytest.approx(0.8, abs=1e-12)
    assert (paper["n_obs"] == 3).all()
    assert paper["label"].to_dict() == {"rA": "bullish", "rB": "neutral", "rC": "bearish"}

    mk = compute_labels(
        events, prices, market, window=3, method="mackinlay", estimation_window=3, gap=1, min_obs=3, min_event_obs=3
    ).set_index("report_id")
    assert mk.loc["rA", "alpha"] == pytest.approx(0.005, abs=1e-12)
    assert mk.loc["rA", "beta"] == pytest.approx(1.5, abs=1e-12)
    assert mk.loc["rA", "car"] == pytest.approx(0.045, abs=1e-12)
    assert mk.loc["rB", "car"] == pytest.approx(0.0, abs=1e-12)
    assert mk.loc["rC", "car"] == pytest.approx(-0.03, abs=1e-12)
    assert (mk["n_est_obs"] == 3).all()
    assert mk["label"].to_dict() == {"rA": "bullish", "rB": "neutral", "rC": "bearish"}


def test_hand_computed_exact_fractions():
    """Arbitrary prices; the paper's Eqs. 4-7 evaluated exactly with Fractions."""
    cal = pd.bdate_range("2022-03-01", periods=5)
    mk = [Fraction(200), Fraction(202), Fraction(199), Fraction(205), Fraction(204)]
    fp = [Fraction(40), Fraction(41), Fraction(39), Fraction(43), Fraction(42)]
    prices = pd.DataFrame({"date": cal, "ticker": "X", "adj_close": [float(v) for v in fp]})
    market = pd.Series([float(v) for v in mk], index=cal)
    events = pd.DataFrame({"report_id": ["x"], "ticker": ["X"], "date": [cal[0]]})
    got = compute_labels(events, prices, market, window=4, min_event_obs=4).iloc[0]

    ri = [fp[t] / fp[t - 1] - 1 for t in range(1, 5)]
    rmk = [mk[t] / mk[t - 1] - 1 for t in range(1, 5)]
    ri_bar, rm_bar = sum(ri) / 4, sum(rmk) / 4
    beta = sum((a - rm_bar) * (b - ri_bar) for a, b in zip(rmk, ri)) / sum((a - rm_bar) ** 2 for a in rmk)
    alpha = ri_bar - beta * rm_bar
    car = sum(b - beta * a for a, b in zip(rmk, ri))
    assert got["beta"] == pytest.approx(float(beta), abs=1e-12)
    assert got["alpha"] == pytest.approx(float(alpha), abs=1e-12)
    assert got["car"] == pytest.approx(float(car), abs=1e-12)
    assert got["n_obs"] == 4
    assert got["label"] == "neutral"  # a year with a single event: the middle bucket


def test_day0_is_the_report_date_or_the_last_trading_day_before():
    cal = pd.bdate_range("2021-01-04", periods=10).delete(5)  # Monday 2021-01-11 made a holiday
    dates = pd.to_datetime(
        ["2021-01-08", "2021-01-09 15:30", "2021-01-10", "2021-01-11", "2021-01-12", "2021-01-01", "2021-01-30"],
        format="ISO8601",
    )
    # Friday is itself day 0; Saturday, Sunday and the Monday holiday fall back to Friday (row 4);
    # before the calendar -1 (outside coverage); after it the last row
    assert MM.event_day0(cal, dates).tolist() == [4, 4, 4, 4, 5, -1, 8]


def _jump_fixture(holiday: bool):
    """Firm J moves with the market except for one +5 % abnormal return on the first trading day after
    the weekend of 2021-01-09/10 (Monday, or Tuesday when Monday 2021-01-11 is a holiday)."""
    cal = pd.bdate_range("2020-12-21", periods=20)
    if holiday:
        cal = cal.delete(cal.get_loc(pd.Timestamp("2021-01-11")))
    rm = np.resize([0.01, -0.02, 0.015, 0.005, -0.01], len(cal))
    rm[0] = 0.0
    first_after = int(np.searchsorted(cal, pd.Timestamp("2021-01-11")))
    rj = rm + np.where(np.arange(len(cal)) == first_after, 0.05, 0.0)
    market = pd.Series(100 * np.cumprod(1 + rm), index=cal)
    prices = pd.DataFrame({"date": cal, "ticker": "J", "adj_close": 50 * np.cumprod(1 + rj)})
    return prices, market


@pytest.mark.parametrize("holiday", [False, True])
def test_first_return_after_a_weekend_or_holiday_report_is_in_the_window(holiday):
    prices, market = _jump_fixture(holiday)
    report_days = ["2021-01-09", "2021-01-10"] + (["2021-01-11"] if holiday else [])  # Sat, Sun, holiday
    events = pd.DataFrame(
        {"report_id": [f"r{i}" for i in range(len(report_days))], "ticker": "J", "date": pd.to_datetime(report_days)}
    )
    kw = dict(window=3, method="mackinlay", estimation_window=5, gap=1, min_obs=5, min_event_obs=3)
    got = compute_labels(events, prices, market, **kw)
    friday = compute_labels(events.assign(date=pd.Timestamp("2021-01-08")), prices, market, **kw)
    np.testing.assert_allclose(got["car"], 0.05, atol=1e-12)  # the jump is day +1
    np.testing.assert_allclose(got["car"], friday["car"], atol=0)
    after = pd.Timestamp("2021-01-12" if holiday else "2021-01-11")  # a report on that trading day itself
    later = compute_labels(events.assign(date=after), prices, market, **kw)
    np.testing.assert_allclose(later["car"], 0.0, atol=1e-12)  # its own day-0 return is not in the window


def test_paper_car_is_window_times_alpha_with_missing_days():
    """R = 0.01 + 1.2 Rm exactly; one missing price breaks two of the six window returns. alpha is still
    0.01, and the paper's CAR is 6 x 0.01 (its window), not 4 x 0.01 (the valid days)."""
    cal = pd.bdate_range("2021-03-01", periods=12)
    rm = np.resize([0.01, -0.02, 0.015, 0.005, -0.01, 0.02], 12)
    rm[0] = 0.0
    firm = 40 * np.cumprod(1 + np.where(np.arange(12) > 0, 0.01 + 1.2 * rm, 0.0))
    prices = pd.DataFrame({"date": cal, "ticker": "F", "adj_close": firm}).drop(index=5)
    market = pd.Series(100 * np.cumprod(1 + rm), index=cal)
    events = pd.DataFrame({"report_id": ["f"], "ticker": ["F"], "date": [cal[2]]})
    got = compute_labels(events, prices, market, window=6, min_event_obs=4).iloc[0]
    assert got["n_obs"] == 4 and got["alpha"] == pytest.approx(0.01, abs=1e-12)
    assert got["car"] == pytest.approx(0.06, abs=1e-12)
    excluded = compute_labels(events, prices, market, window=6, min_event_obs=5).iloc[0]
    assert excluded["excluded_reason"] == "too_few_event_obs"  # min_event_obs still applies


# --------------------------------------------------------------------------- year buckets


@pytest.mark.parametrize(
    "n, expected",
    [
        (1, (0, 1, 0)),
        (2, (1, 0, 1)),
        (3, (1, 1, 1)),
        (4, (1, 2, 1)),
        (5, (1, 3, 1)),
        (10, (3, 4, 3)),
        (12, (4, 4, 4)),
        (100, (30, 40, 30)),
        (8868, (2660, 3548, 2660)),
    ],
)
def test_bucket_counts(n, expected):
    assert bucket_counts(n, (0.3, 0.7)) == expected


def test_year_buckets_30_40_30_per_year_and_independent_of_order():
    rng = np.random.default_rng(5)
    n = 230
    dates = pd.to_datetime("2018-01-01") + pd.to_timedelta(rng.integers(0, 3 * 365, n), unit="D")
    car = rng.normal(0, 0.1, n)
    rid = [f"id{i:04d}" for i in range(n)]
    lab = assign_year_buckets(car, dates, rid)
    df = pd.DataFrame({"year": dates.year, "car": car, "lab": lab})
    for _year, g in df.groupby("year"):
        k = len(g)
        counts = g["lab"].value_counts()
        assert counts["bearish"] == round(0.3 * k) or abs(counts["bearish"] - 0.3 * k) <= 0.5
        assert counts["bullish"] == counts["bearish"]
        # every bullish CAR exceeds every neutral one, which exceed every bearish one
        assert g.loc[g.lab == "bullish", "car"].min() > g.loc[g.lab == "neutral", "car"].max()
        assert g.loc[g.lab == "neutral", "car"].min() > g.loc[g.lab == "bearish", "car"].max()
    perm = rng.permutation(n)
    lab2 = assign_year_buckets(car[perm], dates[perm], [rid[i] for i in perm])
    assert list(lab2) == list(lab[perm])


def test_year_buckets_ties_broken_by_report_id():
    # ten events of one year, all with the same CAR: buckets follow report_id order
    rid = [f"r{i}" for i in (7, 2, 9, 0, 5, 1, 8, 3, 6, 4)]
    lab = assign_year_buckets([0.01] * 10, ["2020-05-01"] * 10, rid)
    got = dict(zip(rid, lab))
    assert [got[f"r{i}"] for i in range(10)] == ["bearish"] * 3 + ["neutral"] * 4 + ["bullish"] * 3


def test_year_buckets_few_events_and_nan():
    dates = ["2019-06-01", "2020-01-02", "2020-12-31", "2021-03-01", "2021-03-02", "2021-03-03", "2022-01-01"]
    car = [0.5, -0.1, 0.2, 0.0, -0.3, 0.3, np.nan]
    lab = assign_year_buckets(car, dates, list("abcdefg"))
    assert list(lab) == [
        "neutral",  # 2019: one event
        "bearish",
        "bullish",  # 2020: two events
        "neutral",
        "bearish",
        "bullish",  # 2021: three events
        None,
    ]  # no CAR -> no label


# --------------------------------------------------------------------------- exclusions


def test_every_exclusion_reason_is_reported():
    prices, market, tickers = random_panel(seed=1, n_tickers=6, n_days=500, hole_rate=0.0)
    cal = market.index
    p = prices.copy()
    late = p.ticker == "T01"  # T01 starts trading at row 200 (IPO)
    p = p[~late | (p.date >= cal[200])]
    p.loc[(p.ticker == "T02") & (p.date == cal[320]), "adj_close"] = np.nan
    p.loc[(p.ticker == "T03") & (p.date == cal[330]), "adj_close"] = 0.0
    p.loc[(p.ticker == "T03") & (p.date == cal[430]), "adj_close"] = -1.0
    p = p[~((p.ticker == "T04") & p.date.isin(cal[300:340]))]  # 40 missing rows in a 60-day window
    p = p[~((p.ticker == "T05") & (p.date > cal[350]))]  # T05 delisted after row 350
    flat = market.copy()
    flat.iloc[100:170] = flat.iloc[100]  # market constant on rows 100..169
    events = pd.DataFrame(
        [
            ("ok", "T00", cal[300]),
            ("no_ticker", None, cal[300]),
            ("no_date", "T00", pd.NaT),
            ("unknown", "ZZZ", cal[300]),
            ("after_end", "T00", cal[-1] + pd.Timedelta(days=3)),
            ("window_past_end", "T00", cal[-30]),
            ("before_ipo", "T01", cal[150]),
            ("delisted", "T05", cal[320]),
            ("nan_price", "T02", cal[300]),
            ("zero_price", "T03", cal[300]),
            ("negative_price", "T03", cal[400]),
            ("holes", "T04", cal[290]),
            ("flat_market", "T00", cal[105]),
            ("early", "T00", cal[150]),
        ],
        columns=["report_id", "ticker", "date"],
    )
    got = compute_labels(events, p, flat, window=60).set_index("report_id")["excluded_reason"]
    assert got.to_dict() == {
        "ok": None,
        "no_ticker": "missing_event_fields",
        "no_date": "missing_event_fields",
        "unknown": "no_prices",
        "after_end": "outside_price_coverage",
        "window_past_end": "outside_price_coverage",
        "before_ipo": "outside_price_coverage",
        "delisted": "outside_price_coverage",
        "nan_price": "invalid_price",
        "zero_price": "invalid_price",
        "negative_price": "invalid_price",
        "holes": "too_few_event_obs",
        "flat_market": "zero_market_variance",
        "early": None,
    }
    mk = compute_labels(events, p, flat, window=60, method="mackinlay").set_index("report_id")
    # estimation rows 150-280 .. 150-31 -> only rows 1..119 exist: 119 pairs < min_obs 120
    assert mk.loc["early", "excluded_reason"] == "too_few_estimation_obs"
    assert mk.loc["ok", "excluded_reason"] is None
    assert set(got.dropna()) | set(mk["excluded_reason"].dropna()) == set(EXCLUSION_REASONS)
    full = compute_labels(events, p, flat, window=60)
    excluded = full[full.excluded_reason.notna()]
    assert len(full) == len(events)  # nothing dropped
    assert excluded[["car", "alpha", "beta"]].isna().all().all() and excluded["label"].isna().all()
    assert full.loc[full.excluded_reason.isna(), "label"].notna().all()


def test_bad_price_outside_the_windows_does_not_exclude():
    prices, market, tickers = random_panel(seed=2, n_tickers=2, n_days=400, hole_rate=0.0)
    p = prices.copy()
    p.loc[(p.ticker == "T00") & (p.date == market.index[10]), "adj_close"] = np.nan
    ev = pd.DataFrame({"report_id": ["a"], "ticker": ["T00"], "date": [market.index[300]]})
    assert compute_labels(ev, p, market).loc[0, "excluded_reason"] is None
    assert (
        compute_labels(ev, p, market, method="mackinlay", gap=30, estimation_window=250).loc[0, "excluded_reason"]
        is None
    )


def test_bad_inputs_raise_clear_errors():
    prices, market, tickers = random_panel(seed=2, n_tickers=2, n_days=100, hole_rate=0.0)
    ev = pd.DataFrame({"report_id": ["a", "a"], "ticker": ["T00", "T01"], "date": [market.index[5]] * 2})
    with pytest.raises(ValueError, match="row 1: duplicate report_id 'a'"):
        compute_labels(ev, prices, market)
    dup = pd.concat([prices, prices.iloc[[3]]], ignore_index=True)
    with pytest.raises(ValueError, match=r"row \d+: duplicate \(date, ticker\)"):
        compute_labels(ev.iloc[:1], dup, market)
    with pytest.raises(ValueError, match="missing column"):
        compute_labels(ev.drop(columns="ticker"), prices, market)
    with pytest.raises(ValueError, match="non-positive close"):
        compute_labels(ev.iloc[:1], prices, market * 0)
    with pytest.raises(TypeError, match="unknown option"):
        compute_labels(ev.iloc[:1], prices, market, windw=5)
    with pytest.raises(ValueError, match="method"):
        compute_labels(ev.iloc[:1], prices, market, method="capm")


def test_market_series_rejects_duplicate_dates():
    s = pd.Series([1.0, 2.0], index=pd.to_datetime(["2020-01-02", "2020-01-02"]))
    with pytest.raises(ValueError, match="duplicate date 2020-01-02"):
        market_series(s)


# --------------------------------------------------------------------------- real daily prices


@pytest.fixture(scope="module")
def real(shared_data):
    path = shared_data / "prices" / "us_daily_adjclose.csv.gz"
    mpath = shared_data / "prices" / "market_daily.csv"
    if not path.is_file() or not mpath.is_file():
        pytest.skip(f"real daily prices not available at {path}")
    prices = pd.read_csv(path, parse_dates=["date"])
    market = pd.read_csv(mpath, parse_dates=["date"])
    return prices, market


@pytest.mark.shared_data
def test_real_prices_random_events(real):
    prices, market = real
    rng = np.random.default_rng(2016)
    tickers = np.array(sorted(set(prices.ticker) - {"SPY"}))
    n = 400
    days = pd.bdate_range("2016-01-01", "2024-12-31")
    events = pd.DataFrame(
        {"report_id": [f"e{i}" for i in range(n)], "ticker": rng.choice(tickers, n), "date": rng.choice(days, n)}
    )
    for method in ("paper", "mackinlay"):
        got = compute_labels(events, prices, market, market_column="sp500_tr_close", method=method)
        ok = got[got.excluded_reason.isna()]
        assert len(ok) > 0.9 * n, got.excluded_reason.value_counts()
        assert 0.6 <= ok["beta"].median() <= 1.4
        year = events.set_index("report_id").loc[ok.report_id, "date"].dt.year.to_numpy()
        for y in np.unique(year):
            labs = ok["label"].to_numpy()[year == y]
            k = len(labs)
            for rating, share in (("bearish", 0.3), ("neutral", 0.4), ("bullish", 0.3)):
                assert abs((labs == rating).sum() - share * k) <= 1.0, (method, y, rating, k)
    # a handful checked against the statsmodels oracle on real data too
    mser = market.set_index("date")["sp500_tr_close"]
    paper = compute_labels(events, prices, market, market_column="sp500_tr_close")
    for i in range(0, n, 80):
        if paper.loc[i, "excluded_reason"] is None:
            exp = oracle(prices, mser, events.ticker[i], events.date[i], 60, "paper")
            assert abs(paper.loc[i, "car"] - exp["car"]) <= TOL


@pytest.mark.shared_data
def test_real_spy_against_itself(real):
    prices, market = real
    days = pd.bdate_range("2016-01-04", "2024-09-30", freq="21B")
    events = pd.DataFrame({"report_id": [f"s{i}" for i in range(len(days))], "ticker": "SPY", "date": days})
    for method in ("paper", "mackinlay"):
        got = compute_labels(events, prices, market, market_column="spy_adj_close", method=method)
        assert got.excluded_reason.isna().all()
        np.testing.assert_allclose(got["beta"], 1.0, atol=1e-9)
        np.testing.assert_allclose(got["car"], 0.0, atol=1e-9)


def test_market_series_ending_early_is_outside_coverage():
    prices, market, tickers = random_panel(seed=4, n_tickers=2, n_days=400, hole_rate=0.0)
    m = market.copy()
    m.iloc[350:] = np.nan  # e.g. an index whose data stop before the prices do
    ev = pd.DataFrame(
        {"report_id": ["in", "out"], "ticker": ["T00", "T00"], "date": [market.index[250], market.index[300]]}
    )
    got = compute_labels(ev, prices, m).set_index("report_id")["excluded_reason"]
    assert got.to_dict() == {"in": None, "out": "outside_price_coverage"}


# --------------------------------------------------------------------------- stage entry point and tables


def test_run_writes_artifacts_and_counts(tmp_run):
    from finlib.core.artifacts import read_frame, read_json, write_frame
    from finlib.finbias.labels import stage as L

    prices, market, tickers = random_panel(seed=9, n_tickers=8, n_days=900, hole_rate=0.0)
    cal = market.index
    rng = np.random.default_rng(9)
    n = 40
    reports = pd.DataFrame(
        {
            "report_id": [f"R{i:03d}" for i in range(n)],
            "ticker": list(rng.choice(tickers, n - 2)) + ["NOPE", tickers[0]],
            "company": "x",
            "sector": rng.choice(["Energy", "Technology"], n),
            "text": "t",
            "date": list(cal[rng.integers(320, 830, n - 1)]) + [cal[-5]],  # last one: window past the end
            "analyst_rating": list(rng.choice(["bullish", "neutral", "bearish"], n - 1)) + [None],
        }
    )
    write_frame(tmp_run, "reports", reports)
    write_frame(tmp_run, "prices", prices)
    write_frame(tmp_run, "market", pd.DataFrame({"date": cal, "market_close": market.to_numpy()}))
    res = L.run(tmp_run)
    lab, rep = res.labels, res.report
    assert res.primary == "paper" and res.window == 60 and res.truth is None
    assert list(res.reports["report_id"]) == list(reports["report_id"])
    assert rep["panel"]["tickers_with_prices"] == 8  # diagnostics passed explicitly, not via attrs
    on_disk = read_frame(tmp_run, "labels")
    assert list(on_disk["report_id"]) == list(reports["report_id"])
    for col in (
        "car",
        "alpha",
        "beta",
        "n_obs",
        "label",
        "excluded_reason",
        "car_mackinlay",
        "label_mackinlay",
        "excluded_reason_mackinlay",
    ):
        assert col in on_disk.columns
    assert (
        read_json(tmp_run, "labels_report")["methods"]["paper"]["exclusions"] == rep["methods"]["paper"]["exclusions"]
    )
    assert rep["methods"]["paper"]["exclusions"]["no_prices"] == 1
    assert rep["methods"]["paper"]["exclusions"]["outside_price_coverage"] == 1
    assert rep["methods"]["paper"]["n_labelled"] + rep["methods"]["paper"]["n_excluded"] == n
    # the same call outside the stage gives the same numbers
    direct = compute_labels(reports[["report_id", "ticker", "date"]], prices, market, window=60, min_event_obs=40)
    np.testing.assert_allclose(on_disk["car"], direct["car"], rtol=0, atol=0)
    t3 = L.table3_return_ratings(lab).set_index("rating")
    assert t3.loc["Total", "num"] == n - 2 and t3.loc["Excluded (no label)", "num"] == 2
    assert t3.loc["Bullish", "paper_num"] == 2664 and t3.loc["Neutral", "paper_percentage"] == 40
    excl = L.exclusion_counts(lab, "paper").set_index("reason")
    assert excl.loc["total excluded", "n_paper"] == 2
    agree = L.method_agreement(lab, "paper")
    assert agree["total"].sum() == n


def test_analyst_accuracy_by_sector_by_hand():
    from finlib.finbias.labels.stage import analyst_accuracy_by_sector

    reports = pd.DataFrame(
        {
            "report_id": list("abcdef"),
            "sector": ["Energy", "Energy", "Energy", "Utilities", "Utilities", "Crypto"],
            "analyst_rating": ["bullish", "bullish", None, "neutral", "bearish", "bullish"],
        }
    )
    labels = pd.DataFrame(
        {"report_id": list("abcdef"), "label": ["bullish", "bearish", "bullish", "neutral", None, "neutral"]}
    )
    acc = analyst_accuracy_by_sector(labels, reports).set_index("sector")
    assert acc.loc["Energy", "accuracy"] == pytest.approx(50.0)  # a right, b wrong, c unrated
    assert acc.loc["Energy", "n_no_analyst_rating"] == 1
    assert acc.loc["Utilities", "accuracy"] == pytest.approx(100.0)  # d right, e unlabelled
    assert acc.loc["Utilities", "n_no_label"] == 1
    assert acc.loc["Crypto", "accuracy"] == pytest.approx(0.0)  # a sector outside the paper's nine
    assert acc.loc["Average (pooled)", "accuracy"] == pytest.approx(100.0 * 2 / 4)  # a, d hit; b, f miss
    assert acc.loc["Average (pooled)", "n_scored"] == 4
    assert acc.loc["Mean of sectors", "accuracy"] == pytest.approx((50.0 + 100.0) / 2)  # nine sectors only
    assert acc.loc["Mean of sectors", "paper_table6"] == pytest.approx(
        (29.0 + 33.8 + 32.4 + 33.8 + 31.6 + 32.0 + 31.1 + 36.5 + 33.0) / 9
    )  # the paper's sectors, typed here
    assert acc.loc["Average (printed in the paper)", "paper_table6"] == pytest.approx(33.1)
    assert np.isnan(acc.loc["Average (printed in the paper)", "accuracy"])
    assert "Average" not in acc.index
    assert acc.loc["Energy", "paper_table7"] == pytest.approx(32.36)
    assert np.isnan(acc.loc["Real Estate", "accuracy"])


# ---------------------------------------------------------------- params keys and notebook helpers


@pytest.mark.parametrize(
    "params",
    [
        {"window": 60, "method": "paper", "quantile": [0.2, 0.8]},  # `quantiles` misspelled
        {"window": 60, "method": "paper", "mackinlay": {"estimation_windw": 100}},
    ],
)
def test_misspelled_label_keys_are_errors(params):
    from finlib.core.config import ConfigError

    with pytest.raises(ConfigError, match="unknown key"):
        MM.options_from_params(params)


def test_run_refuses_a_misspelled_key(tmp_run):
    from finlib.core.config import ConfigError

    tmp_run.params["labels"]["quantile"] = [0.2, 0.8]
    with pytest.raises(ConfigError, match=r"invalid params:\n  - unknown key 'labels\.quantile'"):
        L.run(tmp_run)


def test_notebook_markdown_helpers():
    rep = {
        "method": "paper",
        "other_method": "mackinlay",
        "n_events": 12,
        "small_year_threshold": 10,
        "small_years": [2020, 2021],
        "panel": {"off_calendar_rows": 0},
        "methods": {"paper": {"n_labelled": 11, "n_excluded": 1}, "mackinlay": {"n_labelled": 10}},
    }
    md = L.report_markdown(rep)
    assert md.startswith("**12 reports**; paper: 11 labelled, 1 excluded; mackinlay: 10 labelled.")
    assert "(< 10 reports): [2020, 2021]" in md
    assert L.agreement_markdown({"n_same": 3, "n_both": 4, "rate": 0.75}) == "Agreement: **3 / 4** = 75.0 %"
    assert L.agreement_markdown({"n_same": 0, "n_both": 0, "rate": None}) == "Agreement: **0 / 0**"


@pytest.mark.parametrize("method, value", [("paper", 2), ("paper", 0), ("mackinlay", 0)])
def test_min_event_obs_below_the_method_minimum_is_refused_not_raised(method, value):
    """The paper's method fits alpha and beta on the event window, so fewer than 3 pairs cannot
    be asked for; the value is refused rather than silently lifted to the minimum."""
    dates = pd.bdate_range("2020-01-01", periods=40)
    prices = pd.DataFrame({"date": dates, "ticker": "A", "adj_close": np.linspace(10, 12, 40)})
    market = pd.Series(np.linspace(100, 101, 40) + np.sin(np.arange(40)), index=dates)
    events = pd.DataFrame({"report_id": ["r1"], "ticker": ["A"], "date": [dates[5]]})
    with pytest.raises(ValueError, match=rf"min_event_obs must be >= \d for method '{method}', got {value}"):
        compute_labels(
            events, prices, market, window=5, method=method, min_event_obs=value, estimation_window=3, gap=0, min_obs=2
        )


# --------------------------------------------------------------------------- both methods side by side


def test_other_method_and_its_error():
    assert (L.other_method("paper"), L.other_method("mackinlay")) == ("mackinlay", "paper")
    with pytest.raises(ValueError, match=r"labels.method must be one of \('paper', 'mackinlay'\), got 'capm'"):
        L.other_method("capm")


@pytest.mark.parametrize("primary", ["mackinlay", "paper"])
def test_both_methods_get_the_window_the_method_and_the_estimation_options(primary):
    """label_both_methods with a 20-day window and a 200-day estimation window ending 10 days before
    (none of them the defaults): each method's CAR is the statsmodels oracle's for exactly those
    settings, unsuffixed columns the primary's, suffixed ones the other method's."""
    prices, market, tickers = random_panel(seed=5, n_tickers=4, n_days=600, hole_rate=0.0)
    cal = market.index
    events = pd.DataFrame(
        {
            "report_id": [f"E{i}" for i in range(6)],
            "ticker": [tickers[i % 4] for i in range(6)],
            "date": [cal[300 + 37 * i] for i in range(6)],
        }
    )
    opts = {"window": 20, "estimation_window": 200, "gap": 10, "min_event_obs": 10, "min_obs": 100}
    lab, _ = L.label_both_methods(events, prices, market, primary, opts)
    other = L.other_method(primary)
    assert list(lab["report_id"]) == list(events["report_id"])
    for ev, row in zip(events.itertuples(), lab.to_dict("records")):
        for method, suffix in ((primary, ""), (other, f"_{other}")):
            want = oracle(prices, market, ev.ticker, ev.date, 20, method, L=200, gap=10)
            assert row[f"car{suffix}"] == pytest.approx(want["car"], abs=TOL), (method, ev.report_id)
            assert row[f"n_obs{suffix}"] == 20


def test_exclusion_counts_by_hand():
    """Three reports: paper excludes one for no prices; MacKinlay excludes two (no prices, too few
    estimation days). Every reason is a row, zeros included, and a total."""
    labels = pd.DataFrame(
        {
            "report_id": ["a", "b", "c"],
            "excluded_reason": ["no_prices", None, None],
            "excluded_reason_mackinlay": ["no_prices", "too_few_estimation_obs", None],
        }
    )
    got = L.exclusion_counts(labels, "paper")
    assert list(got.columns) == ["reason", "n_paper", "n_mackinlay"]
    assert list(got["reason"]) == [*MM.EXCLUSION_REASONS, "total excluded"]
    got = got.set_index("reason")
    assert got.loc["no_prices"].tolist() == [1, 1]
    assert got.loc["too_few_estimation_obs"].tolist() == [0, 1]
    assert got.loc["total excluded"].tolist() == [1, 2]
    assert int(got.drop(index=["no_prices", "too_few_estimation_obs", "total excluded"]).to_numpy().sum()) == 0
    mk = L.exclusion_counts(
        labels.rename(
            columns={"excluded_reason": "excluded_reason_paper", "excluded_reason_mackinlay": "excluded_reason"}
        ),
        "mackinlay",
    )
    assert mk.set_index("reason").loc["total excluded"].tolist() == [2, 1]


def test_label_shares_by_year_by_hand():
    """2021 listed before 2020 and a frame index that is not 0..n-1: per year, sorted, the counts of
    each label, their shares in percent, and the small-year flag (fewer than SMALL_YEAR = 10 events)."""
    labels_2021 = ["bullish"] * 3 + ["neutral"] * 4 + ["bearish"] * 3  # 10 events: not small
    labels_2020 = ["bearish", "neutral", "neutral", None]  # 3 labelled events: small
    ids = [f"A{i}" for i in range(10)] + [f"B{i}" for i in range(4)]
    labels = pd.DataFrame({"report_id": ids, "label": labels_2021 + labels_2020}, index=range(100, 114))
    reports = pd.DataFrame({"report_id": ids[::-1], "date": pd.to_datetime(["2020-05-04"] * 4 + ["2021-03-01"] * 10)})
    got = L.label_shares_by_year(labels, reports)
    assert list(got["year"]) == [2020, 2021]
    assert got[["n", "bearish", "neutral", "bullish"]].to_numpy().tolist() == [[3, 1, 2, 0], [10, 3, 4, 3]]
    assert got.loc[0, "share_neutral"] == pytest.approx(200 / 3) and got.loc[1, "share_bullish"] == 30.0
    assert got["small_year"].tolist() == [True, False]


def test_car_by_year_by_hand():
    """Years in sorted order whatever the frame's order; per year the CARs' count, mean, sd, quantiles
    and extremes (numpy's, computed here), and the largest bearish and smallest bullish CAR (the
    realised bucket boundaries); a report without a CAR left out."""
    cars = {2021: [0.05, -0.02, 0.01, 0.03], 2019: [-0.04, 0.02, 0.0]}
    labs = {2021: ["bullish", "bearish", "neutral", "bullish"], 2019: ["bearish", "bullish", "neutral"]}
    dates = {2021: "2021-02-01", 2019: "2019-05-06"}
    rows = [(f"{y}-{i}", c, lab, dates[y]) for y in (2021, 2019) for i, (c, lab) in enumerate(zip(cars[y], labs[y]))]
    rows.append(("none", np.nan, None, "2019-06-03"))
    frame = pd.DataFrame(rows, columns=["report_id", "car", "label", "date"])
    got = L.car_by_year(
        frame[["report_id", "car", "label"]],
        frame[["report_id", "date"]].assign(date=lambda d: pd.to_datetime(d["date"])),
    )
    assert list(got["year"]) == [2019, 2021]
    got = got.set_index("year")
    for year, x in cars.items():
        x = np.array(x)
        want = {
            "n": len(x),
            "mean": x.mean(),
            "std": x.std(ddof=1),
            "min": x.min(),
            "p25": np.quantile(x, 0.25),
            "median": np.median(x),
            "p75": np.quantile(x, 0.75),
            "max": x.max(),
        }
        for col, v in want.items():
            assert got.loc[year, col] == pytest.approx(v, abs=1e-15), (year, col)
    assert got.loc[2021, "bearish_max"] == pytest.approx(-0.02) and got.loc[2021, "bullish_min"] == pytest.approx(0.03)
    assert got.loc[2019, "bearish_max"] == pytest.approx(-0.04) and got.loc[2019, "bullish_min"] == pytest.approx(0.02)
