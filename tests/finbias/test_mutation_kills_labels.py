"""Stage 01's market model and its tables against truths computed here, independently of finlib.

The reference below is a per-event loop over a price dictionary (no prefix sums, no clipping, no
vectorised masks): day 0, the event and estimation windows, the bad-price windows, the coverage
checks, the exclusion order and the half-down year buckets written straight from the module's
docstring. Small calendars with short windows put events on every calendar day, so every window
edge is crossed by some event; the edge tests then name each edge with a fixture where moving it by
one trading day changes the result.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from finlib.finbias.labels import stage as L
from finlib.finbias.labels.market_model import assign_year_buckets, build_panel, compute_labels, market_series
from finlib.finbias.vocab import POOLED as POOLED_9
from finlib.finbias.vocab import SECTOR_MEAN as MEAN_9
from finlib.finbias.vocab import SECTORS as SECTORS_9

# --------------------------------------------------------------------------- the reference


def _good(p) -> bool:
    return p is not None and np.isfinite(p) and p > 0


def _half_down(x: Fraction) -> int:
    """round(x) with exact halves sent down."""
    return max(0, math.ceil(x - Fraction(1, 2)))


def reference_buckets(cars: dict, years: dict, quantiles) -> dict:
    """Per year, sorted by (car, report_id): the first round_half_down(lo*n) bearish, the last
    round_half_down((1-hi)*n) bullish, exact fractions."""
    lo, hi = (Fraction(str(q)) for q in quantiles)
    out = {}
    for year in set(years.values()):
        ids = sorted((cars[r], r) for r in cars if years[r] == year)
        n = len(ids)
        k_bear, k_bull = _half_down(lo * n), _half_down((1 - hi) * n)
        for i, (_, rid) in enumerate(ids):
            out[rid] = "bearish" if i < k_bear else ("bullish" if i >= n - k_bull else "neutral")
    return out


def _fit(pairs: list[tuple[float, float]]) -> tuple[float, float] | None:
    """OLS of firm on market by least squares; None when the market does not move."""
    x = np.array([p[0] for p in pairs])
    y = np.array([p[1] for p in pairs])
    if len(x) == 0 or np.ptp(x) == 0:
        return None
    (a, b), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(x), x]), y, rcond=None)
    return float(a), float(b)


class Reference:
    """Prices as {ticker: {calendar row: close}}, the market as a list, returns on demand."""

    def __init__(self, prices: pd.DataFrame, market: pd.Series):
        self.cal = list(market.index)
        self.mkt = [float(v) for v in market.to_numpy()]
        row = {d: i for i, d in enumerate(self.cal)}
        self.table: dict[str, dict[int, float]] = {}
        for d, t, p in prices[["date", "ticker", "adj_close"]].itertuples(index=False):
            rows = self.table.setdefault(t, {})
            if pd.Timestamp(d) in row:
                rows[row[pd.Timestamp(d)]] = float(p)
        finite = [i for i, v in enumerate(self.mkt) if np.isfinite(v)]
        self.m_first, self.m_last = finite[0], finite[-1]

    def pair(self, t: str, r: int):
        """(market return, firm return) of calendar row r, or None."""
        if r < 1 or r >= len(self.cal):
            return None
        p1, p0 = self.table[t].get(r), self.table[t].get(r - 1)
        m1, m0 = self.mkt[r], self.mkt[r - 1]
        if not (_good(p1) and _good(p0) and np.isfinite(m1) and np.isfinite(m0)):
            return None
        return m1 / m0 - 1.0, p1 / p0 - 1.0

    def pairs(self, t: str, first: int, last: int) -> list:
        return [p for r in range(first, last + 1) if (p := self.pair(t, r)) is not None]

    def any_bad(self, t: str, first: int, last: int) -> bool:
        return any(r in self.table[t] and not _good(self.table[t][r]) for r in range(first, last + 1))

    def day0(self, date) -> int:
        return max((i for i, d in enumerate(self.cal) if d <= date), default=-1)

    def event(self, ticker, date, *, window, method, est_len, gap, min_obs, min_event_obs) -> dict:
        """One event: reason (or None), car, alpha, beta, n_obs, n_est_obs."""
        # an event that cannot be placed (no fields, no prices, outside coverage) reads nothing: 0 pairs
        out = {"reason": None, "car": np.nan, "alpha": np.nan, "beta": np.nan, "n_obs": 0, "n_est_obs": 0}
        if ticker is None or pd.isna(date):
            return {**out, "reason": "missing_event_fields"}
        if ticker not in self.table:
            return {**out, "reason": "no_prices"}
        rows = self.table[ticker]
        d0 = self.day0(pd.Timestamp(date).normalize())
        if (d0 < 0 or not rows or d0 < min(rows) or d0 + window > max(rows)
                or d0 < self.m_first or d0 + window > self.m_last):
            return {**out, "reason": "outside_price_coverage"}
        ev = self.pairs(ticker, d0 + 1, d0 + window)
        est_first, est_last = d0 - gap - est_len, d0 - gap - 1
        est = self.pairs(ticker, est_first, est_last)
        out.update(n_obs=len(ev), n_est_obs=len(est))
        bad = self.any_bad(ticker, d0, d0 + window)
        if method == "mackinlay":
            bad = bad or self.any_bad(ticker, est_first - 1, est_last)
        if bad:
            return {**out, "reason": "invalid_price"}
        if len(ev) < min_event_obs:
            return {**out, "reason": "too_few_event_obs"}
        if method == "paper":
            fit = _fit(ev)
            if fit is None:
                return {**out, "reason": "zero_market_variance"}
            return {**out, "alpha": fit[0], "beta": fit[1], "car": window * fit[0]}
        if len(est) < min_obs:
            return {**out, "reason": "too_few_estimation_obs"}
        fit = _fit(est)
        if fit is None:
            return {**out, "reason": "zero_market_variance"}
        a, b = fit
        return {**out, "alpha": a, "beta": b, "car": sum(y - a - b * x for x, y in ev)}


def reference_labels(events, prices, market, *, window, method, est_len=250, gap=30, min_obs=120,
                     min_event_obs=None, quantiles=(0.3, 0.7)) -> pd.DataFrame:
    ref = Reference(prices, market)
    mev = math.ceil(Fraction(2 * window, 3)) if min_event_obs is None else min_event_obs
    rows = {}
    for rid, t, d in events[["report_id", "ticker", "date"]].itertuples(index=False):
        t = None if t is None or (isinstance(t, float) and np.isnan(t)) else t
        rows[rid] = ref.event(t, d, window=window, method=method, est_len=est_len, gap=gap, min_obs=min_obs,
                              min_event_obs=mev)
    ok = {r: v["car"] for r, v in rows.items() if v["reason"] is None}
    years = {r: pd.Timestamp(d).year for r, d in zip(events["report_id"], events["date"]) if r in ok}
    labels = reference_buckets(ok, years, quantiles)
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame["label"] = [labels.get(r) for r in frame.index]
    return frame


# --------------------------------------------------------------------------- a small market with every edge

CAL = pd.bdate_range("2019-11-25", periods=42)   # crosses into 2020: two year buckets


def small_market(seed: int, *, market_holes: bool, flat: bool):
    """Three tickers on a 42-day calendar: A full, B listed late and delisted early with missing rows,
    C with NaN (on the first calendar day too) / zero / negative closes; D has only a weekend row (off the calendar)."""
    rng = np.random.default_rng(seed)
    rm = rng.normal(0.0, 0.01, len(CAL))
    if flat:
        rm[18:26] = 0.0
    m = 100 * np.cumprod(1 + rm)
    if market_holes:
        m[[0, 1, 40, 41]] = np.nan
        m[20] = np.nan
    market = pd.Series(m, index=CAL)
    recs = []
    for t, beta in (("A", 0.8), ("B", 1.3), ("C", 1.0)):
        p = 50 * np.cumprod(1 + beta * rm + rng.normal(0.001, 0.02, len(CAL)))
        for i, d in enumerate(CAL):
            recs.append((d, t, p[i]))
    prices = pd.DataFrame(recs, columns=["date", "ticker", "adj_close"])
    drop = (prices.ticker == "B") & (~prices.date.isin(CAL[6:37]) | prices.date.isin(CAL[[15, 16, 30]]))
    prices = prices[~drop].copy()
    for i, v in ((0, np.nan), (12, np.nan), (27, 0.0), (33, -1.0)):
        prices.loc[(prices.ticker == "C") & (prices.date == CAL[i]), "adj_close"] = v
    prices = pd.concat([prices, pd.DataFrame({"date": [pd.Timestamp("2019-12-07")], "ticker": ["D"],
                                              "adj_close": [10.0]})], ignore_index=True)
    return prices.sample(frac=1.0, random_state=seed).reset_index(drop=True), market


def every_day_events() -> pd.DataFrame:
    """Every ticker (and an unknown one, and none) on every calendar day, a weekend, and dates
    before and after the calendar, with intraday times."""
    days = [*CAL, pd.Timestamp("2019-12-14"), pd.Timestamp("2019-11-20"), pd.Timestamp("2020-03-02")]
    rows = [(f"{t}{i:02d}", t, d + pd.Timedelta(hours=13)) for t in ("A", "B", "C", "D", "ZZ")
            for i, d in enumerate(days)]
    rows += [("none", None, CAL[10]), ("nat", "A", pd.NaT)]
    return pd.DataFrame(rows, columns=["report_id", "ticker", "date"])


def _compare(got: pd.DataFrame, want: pd.DataFrame, method: str) -> None:
    got = got.set_index("report_id")
    assert list(got.index) == list(want.index)
    assert got["excluded_reason"].tolist() == [None if pd.isna(r) else r for r in want["reason"]]
    assert got["label"].tolist() == [None if pd.isna(r) else r for r in want["label"]]
    for k in ("car", "alpha", "beta"):
        np.testing.assert_allclose(got[k].to_numpy(float), want[k].to_numpy(float), rtol=0, atol=1e-10,
                                   err_msg=k)
    assert got["n_obs"].dtype == "int64"
    assert got["n_obs"].tolist() == want["n_obs"].astype(int).tolist()
    if method == "mackinlay":
        assert got["n_est_obs"].dtype == "int64"
        assert got["n_est_obs"].tolist() == want["n_est_obs"].astype(int).tolist()


CASES = [
    # (seed, market holes, flat market, window, min_event_obs, est_len, gap, min_obs, quantiles)
    (0, False, False, 5, None, 7, 2, 5, (0.3, 0.7)),
    (1, True, False, 5, 3, 6, 3, 4, (0.25, 0.6)),
    (2, False, True, 4, None, 5, 1, 4, (0.3, 0.7)),
    (3, True, True, 6, 2, 8, 0, 6, (0.1, 0.5)),
]


@pytest.mark.parametrize("method", ["paper", "mackinlay"])
@pytest.mark.parametrize("case", CASES, ids=[f"seed{c[0]}" for c in CASES])
def test_every_event_on_every_day_matches_the_reference(method, case):
    seed, holes, flat, window, mev, est_len, gap, min_obs, q = case
    prices, market = small_market(seed, market_holes=holes, flat=flat)
    events = every_day_events()
    if method == "paper" and mev is not None:
        mev = max(mev, 3)
    got = compute_labels(events, prices, market, window=window, method=method, min_event_obs=mev,
                         estimation_window=est_len, gap=gap, min_obs=min_obs, quantiles=q)
    want = reference_labels(events, prices, market, window=window, method=method, est_len=est_len, gap=gap,
                            min_obs=min_obs, min_event_obs=mev, quantiles=q)
    _compare(got, want, method)
    reasons = set(want["reason"].dropna())
    assert {"missing_event_fields", "no_prices", "outside_price_coverage", "invalid_price"} <= reasons
    assert want["label"].notna().sum() >= 20


# --------------------------------------------------------------------------- each edge by one day

def _clean(n_days: int = 60, seed: int = 5):
    """One ticker with a noisy market model on n_days weekdays, no holes."""
    rng = np.random.default_rng(seed)
    cal = pd.bdate_range("2021-01-04", periods=n_days)
    rm = rng.normal(0.0, 0.01, n_days)
    market = pd.Series(100 * np.cumprod(1 + rm), index=cal)
    p = 40 * np.cumprod(1 + 1.2 * rm + rng.normal(0.0, 0.02, n_days))
    prices = pd.DataFrame({"date": cal, "ticker": "A", "adj_close": p})
    return prices, market


def _one(prices, market, day0: int, **kw) -> pd.Series:
    ev = pd.DataFrame({"report_id": ["r"], "ticker": ["A"], "date": [market.index[day0]]})
    return compute_labels(ev, prices, market, **kw).iloc[0]


def _with_price(prices, market, row: int, value: float):
    p = prices.copy()
    p.loc[p.date == market.index[row], "adj_close"] = value
    return p


@pytest.mark.parametrize(("offset", "excluded"), [(-1, False), (0, True), (5, True), (6, False)])
def test_paper_bad_price_window_is_day0_to_the_window_end(offset, excluded):
    """A NaN close on day 0 or day +window breaks a return the window needs: excluded; one day
    outside either end it does not."""
    prices, market = _clean()
    got = _one(_with_price(prices, market, 30 + offset, np.nan), market, 30, window=5, min_event_obs=3)
    assert (got["excluded_reason"] == "invalid_price") is excluded


@pytest.mark.parametrize(("offset", "excluded"), [(-13, False), (-12, True), (-3, True), (-2, False)])
def test_mackinlay_bad_price_window_runs_from_one_day_before_the_estimation_window(offset, excluded):
    """Estimation rows -(gap+L)..-(gap+1) = -11..-3 with L = 9, gap = 2: their returns need the
    closes of rows -12..-3, so a NaN on -12 or -3 excludes and one on -13 or -2 does not."""
    prices, market = _clean()
    got = _one(_with_price(prices, market, 40 + offset, np.nan), market, 40, window=5, min_event_obs=3,
               method="mackinlay", estimation_window=9, gap=2, min_obs=5)
    assert (got["excluded_reason"] == "invalid_price") is excluded


def _jump(prices, market, row: int, factor: float = 1.10):
    """Multiply every close from `row` on: only the return of `row` moves."""
    p = prices.copy()
    p.loc[p.date >= market.index[row], "adj_close"] *= factor
    return p


@pytest.mark.parametrize(("offset", "moves"), [(0, False), (1, True), (5, True), (6, False)])
def test_event_window_is_days_1_to_window(offset, moves):
    """A jump in the firm's return moves the CAR when it falls on day +1..+window only."""
    prices, market = _clean()
    for method in ("paper", "mackinlay"):
        kw = dict(window=5, min_event_obs=3, method=method, estimation_window=9, gap=2, min_obs=5)
        base = _one(prices, market, 40, **kw)["car"]
        moved = _one(_jump(prices, market, 40 + offset), market, 40, **kw)["car"]
        assert bool(abs(moved - base) > 1e-6) is moves, (method, offset)


@pytest.mark.parametrize(("offset", "moves"), [(-12, False), (-11, True), (-3, True), (-2, False)])
def test_estimation_window_is_gap_plus_l_to_gap_plus_1_days_before(offset, moves):
    """MacKinlay's alpha moves with a jump on rows -11..-3 (L = 9, gap = 2) and not one day outside."""
    prices, market = _clean()
    kw = dict(window=5, min_event_obs=3, method="mackinlay", estimation_window=9, gap=2, min_obs=5)
    base = _one(prices, market, 40, **kw)["alpha"]
    moved = _one(_jump(prices, market, 40 + offset), market, 40, **kw)["alpha"]
    assert bool(abs(moved - base) > 1e-6) is moves


def _drop_rows(prices, market, rows):
    return prices[~prices.date.isin(market.index[list(rows)])]


@pytest.mark.parametrize(("dropped", "labelled"), [(1, True), (2, False)])
def test_min_event_obs_is_the_fewest_pairs_labelled(dropped, labelled):
    """window 6 (rows 31..36), min_event_obs 4: one missing close (row 32) breaks two returns -> 4 pairs,
    labelled; two non-adjacent missing closes (rows 32, 35) break four -> 2 pairs, excluded."""
    prices, market = _clean()
    p = _drop_rows(prices, market, [32, 35][:dropped])
    got = _one(p, market, 30, window=6, min_event_obs=4)
    assert got["n_obs"] == 6 - 2 * dropped
    assert (got["excluded_reason"] is None) is labelled
    if not labelled:
        assert got["excluded_reason"] == "too_few_event_obs"


def test_default_min_event_obs_is_two_thirds_of_the_window_rounded_up():
    """window 6 -> 4 pairs needed (ceil(12/3)); window 5 -> 4 (ceil(10/3)), so 3 pairs exclude."""
    prices, market = _clean()
    assert _one(_drop_rows(prices, market, [33]), market, 30, window=6)["excluded_reason"] is None
    got = _one(_drop_rows(prices, market, [33]), market, 30, window=5)
    assert got["n_obs"] == 3 and got["excluded_reason"] == "too_few_event_obs"
    assert _one(prices, market, 30, window=5)["n_obs"] == 5


@pytest.mark.parametrize(("min_obs", "reason"), [(9, None), (10, "too_few_estimation_obs")])
def test_min_obs_is_the_fewest_estimation_pairs_labelled(min_obs, reason):
    prices, market = _clean()
    got = _one(prices, market, 40, window=5, min_event_obs=3, method="mackinlay", estimation_window=9, gap=2,
               min_obs=min_obs)
    assert got["n_est_obs"] == 9 and got["excluded_reason"] == reason


@pytest.mark.parametrize(("day0", "last", "excluded"), [(30, 35, False), (30, 34, True), (10, 35, False)])
def test_coverage_needs_prices_through_day_window(day0, last, excluded):
    """The window's last day (day0 + 5) must be on or before the ticker's last price row, and day 0 on
    or after its first (row 10 here)."""
    prices, market = _clean()
    p = prices[(prices.date >= market.index[10]) & (prices.date <= market.index[last])]
    got = _one(p, market, day0, window=5, min_event_obs=3)
    assert (got["excluded_reason"] == "outside_price_coverage") is excluded
    assert _one(p, market, 9, window=5, min_event_obs=3)["excluded_reason"] == "outside_price_coverage"


@pytest.mark.parametrize(("m_last", "excluded"), [(35, False), (34, True)])
def test_coverage_needs_the_market_through_day_window(m_last, excluded):
    prices, market = _clean()
    m = market.copy()
    m.iloc[m_last + 1:] = np.nan
    m.iloc[:3] = np.nan
    assert (_one(prices, m, 30, window=5, min_event_obs=3)["excluded_reason"] == "outside_price_coverage") is excluded
    assert _one(prices, m, 2, window=5, min_event_obs=3)["excluded_reason"] == "outside_price_coverage"
    assert _one(prices, m, 3, window=5, min_event_obs=3)["excluded_reason"] is None


def _long(n_days: int = 420):
    return _clean(n_days=n_days, seed=9)


@pytest.mark.parametrize(("offset", "excluded"), [(-282, False), (-281, True), (-31, True), (-30, False)])
def test_default_mackinlay_bad_price_window_is_day_minus_281_to_minus_31(offset, excluded):
    """Defaults L = 250, gap = 30: estimation returns on -280..-31 read the closes of -281..-31."""
    prices, market = _long()
    got = _one(_with_price(prices, market, 400 + offset, np.nan), market, 400, method="mackinlay", window=5,
               min_event_obs=3)
    assert (got["excluded_reason"] == "invalid_price") is excluded
    if not excluded:
        assert got["n_est_obs"] == 250


@pytest.mark.parametrize(("day0", "reason"), [(400, None), (151, None), (150, "too_few_estimation_obs")])
def test_default_min_obs_is_120_estimation_pairs(day0, reason):
    """Day 151: of estimation rows -129..120 the returns of rows 1..120 exist (120); day 150 has 119."""
    prices, market = _long()
    got = _one(prices, market, day0, method="mackinlay", window=5, min_event_obs=3)
    assert got["excluded_reason"] == reason
    assert got["n_est_obs"] == min(250, day0 - 31)


def test_default_window_is_60_and_quantiles_30_40_30():
    prices, market = _long()
    ev = pd.DataFrame({"report_id": [f"r{i}" for i in range(10)], "ticker": "A",
                       "date": market.index[200:300:10]})
    got = compute_labels(ev, prices, market)
    assert (got["n_obs"] == 60).all()
    want = reference_labels(ev, prices, market, window=60, method="paper")
    _compare(got, want, "paper")
    assert got["label"].value_counts().to_dict() == {"neutral": 4, "bearish": 3, "bullish": 3}


def test_unknown_ticker_on_a_one_ticker_panel_is_no_prices():
    """The unknown ticker's stand-in column must exist when the panel holds a single ticker."""
    prices, market = _clean()
    ev = pd.DataFrame({"report_id": ["u", "a"], "ticker": ["ZZ", "A"], "date": [market.index[30]] * 2})
    got = compute_labels(ev, prices, market, window=5, min_event_obs=3).set_index("report_id")
    assert got.loc["u", "excluded_reason"] == "no_prices" and np.isnan(got.loc["u", "car"])
    assert got.loc["a", "excluded_reason"] is None


# --------------------------------------------------------------------------- buckets

@pytest.mark.parametrize("quantiles", [(0.3, 0.7), (0.25, 0.75), (0.1, 0.6), (0.5, 0.5), (0.0, 1.0)])
def test_year_buckets_match_exact_half_down_rounding(quantiles):
    """Years of 1..23 events with tied CARs: counts and order from exact fractions."""
    rng = np.random.default_rng(3)
    rows = []
    for k, year in enumerate(range(2000, 2023)):
        for i in range(k + 1):
            rows.append((f"{year}-{rng.integers(0, 1000):03d}-{i}", round(float(rng.normal()), 1),
                         pd.Timestamp(f"{year}-06-01")))
    frame = pd.DataFrame(rows, columns=["rid", "car", "date"]).sample(frac=1.0, random_state=1)
    got = dict(zip(frame["rid"], assign_year_buckets(frame["car"], frame["date"], frame["rid"], quantiles)))
    want = reference_buckets(dict(zip(frame["rid"], frame["car"])),
                             {r: d.year for r, d in zip(frame["rid"], frame["date"])}, quantiles)
    assert got == want


@pytest.mark.parametrize("quantiles", [(0.3, 1.2), (-0.1, 0.5), (0.6, 0.4)])
def test_year_buckets_refuse_cut_offs_outside_0_lo_hi_1(quantiles):
    with pytest.raises(ValueError, match="quantiles"):
        assign_year_buckets([0.1, 0.2], ["2020-01-02"] * 2, ["a", "b"], quantiles)


# --------------------------------------------------------------------------- stage tables

def _two_methods() -> pd.DataFrame:
    return pd.DataFrame({
        "report_id": list("abcdefgh"),
        "label": ["bullish", "bullish", "neutral", "bearish", None, "neutral", None, "bearish"],
        "label_mackinlay": ["bullish", "neutral", "neutral", "bullish", "bearish", None, None, "bearish"],
        "beta": [0.5, 1.5, np.nan, 1.0, 2.0, 0.0, np.nan, 3.0],
        "beta_mackinlay": [1.0, np.nan, np.nan, np.nan, 0.2, 0.4, np.nan, 0.6],
    })


def test_method_agreement_cross_tabulation_by_hand():
    tab = L.method_agreement(_two_methods(), "paper")
    cats = ["bullish", "neutral", "bearish", "excluded"]
    assert list(tab.columns) == ["paper \\ mackinlay", *cats, "total"]
    assert tab["paper \\ mackinlay"].tolist() == cats
    assert all(tab[c].dtype.kind == "i" for c in [*cats, "total"])  # counts, written as integers
    counts = tab[cats].to_numpy().tolist()
    assert counts == [[1, 1, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0], [0, 0, 1, 1]]
    assert tab["total"].tolist() == [2, 2, 2, 2]
    flipped = L.method_agreement(_two_methods().rename(columns={"label": "label_paper",
                                                                "label_mackinlay": "label"}), "mackinlay")
    assert flipped[cats].to_numpy().T.tolist() == counts


def test_agreement_rate_by_hand():
    rate = L.agreement_rate(_two_methods(), "paper")
    assert rate == {"n_both": 5, "n_same": 3, "rate": pytest.approx(0.6)}
    empty = _two_methods().assign(label=None)
    assert L.agreement_rate(empty, "paper") == {"n_both": 0, "n_same": 0, "rate": None}


def test_beta_distribution_by_hand():
    tab = L.beta_distribution(_two_methods(), "paper").set_index("method")
    assert list(tab.index) == ["paper", "mackinlay"]
    assert list(tab.columns) == ["n", "mean", "std", "min", "p5", "p25", "median", "p75", "p95", "max"]
    for m, col in (("paper", "beta"), ("mackinlay", "beta_mackinlay")):
        b = _two_methods()[col].dropna().to_numpy()
        want = {"n": len(b), "mean": b.mean(), "std": b.std(ddof=1), "min": b.min(), "max": b.max(),
                **{k: np.quantile(b, q) for k, q in (("p5", 0.05), ("p25", 0.25), ("median", 0.5),
                                                    ("p75", 0.75), ("p95", 0.95))}}
        for k, v in want.items():
            assert tab.loc[m, k] == pytest.approx(v, abs=1e-15), (m, k)


def test_beta_distribution_of_a_method_without_betas_is_nan_not_an_error():
    frame = _two_methods().assign(beta_mackinlay=np.nan)
    tab = L.beta_distribution(frame, "paper").set_index("method")
    assert tab.loc["mackinlay", "n"] == 0
    assert tab.loc["mackinlay"].drop("n").isna().all()
    assert tab.loc["paper", "n"] == 6


SHARE_COLUMNS = ["year", "n", "bearish", "neutral", "bullish", "share_bearish", "share_neutral", "share_bullish",
                 "small_year"]
CAR_COLUMNS = ["year", "n", "mean", "std", "min", "p25", "median", "p75", "max", "bearish_max", "bullish_min"]


def test_label_shares_by_year_every_share_by_hand():
    labels = pd.DataFrame({"report_id": list("abcdefg"),
                           "label": ["bearish", "bearish", "neutral", "bullish", "bearish", "neutral", None]})
    reports = pd.DataFrame({"report_id": list("gfedcba"), "date": pd.to_datetime(["2020-03-02"] * 3 + ["2021-06-01"] * 4)})
    got = L.label_shares_by_year(labels, reports)
    assert list(got.columns) == SHARE_COLUMNS
    # 2021: a, b, c, d -> 2 bearish, 1 neutral, 1 bullish; 2020: e, f labelled (g is not)
    assert got[["year", "n", "bearish", "neutral", "bullish"]].to_numpy().tolist() == [[2020, 2, 1, 1, 0],
                                                                                      [2021, 4, 2, 1, 1]]
    np.testing.assert_allclose(got[["share_bearish", "share_neutral", "share_bullish"]].to_numpy(float),
                               [[50.0, 50.0, 0.0], [50.0, 25.0, 25.0]])


def test_year_tables_without_a_labelled_report_keep_their_columns():
    labels = pd.DataFrame({"report_id": ["a", "b"], "label": [None, None], "car": [np.nan, np.nan]})
    reports = pd.DataFrame({"report_id": ["a", "b"], "date": pd.to_datetime(["2020-03-02", "2021-06-01"])})
    shares = L.label_shares_by_year(labels, reports)
    cars = L.car_by_year(labels, reports)
    assert shares.empty and list(shares.columns) == SHARE_COLUMNS
    assert cars.empty and list(cars.columns) == CAR_COLUMNS


def test_market_series_picks_the_column_of_a_market_frame():
    """market_close when present (even beside other numbers); else the only numeric column; a frame
    indexed by date needs no date column; an unknown column is named in the error."""
    dates = pd.bdate_range("2022-01-03", periods=4)
    close, spy = [100.0, 101.0, 99.0, 102.0], [400.0, 404.0, 396.0, 408.0]
    both = pd.DataFrame({"date": dates, "spy_adj_close": spy, "market_close": close})
    assert market_series(both).tolist() == close
    assert market_series(both, "spy_adj_close").tolist() == spy
    one = pd.DataFrame({"date": dates, "source": "index provider", "spy_adj_close": spy})
    assert market_series(one).tolist() == spy
    indexed = pd.DataFrame({"market_close": close}, index=dates)
    got = market_series(indexed)
    assert got.tolist() == close and list(got.index) == list(dates)
    with pytest.raises(ValueError, match="no column 'zz'"):
        market_series(both, "zz")
    with pytest.raises(ValueError, match="cannot choose"):
        market_series(pd.DataFrame({"date": dates, "a": spy, "b": close}))


def _tiny_prices() -> tuple[pd.DataFrame, pd.Series]:
    """Two tickers on a six-day calendar, A priced below 1 (a valid close), B above."""
    cal = pd.bdate_range("2022-01-03", periods=6)
    market = pd.Series([100.0, 101.0, 99.0, 102.0, 103.0, 101.0], index=cal)
    a = [0.50, 0.52, 0.49, 0.55, 0.56, 0.54]
    b = [20.0, 20.5, 19.0, 21.0, 22.0, 21.5]
    prices = pd.DataFrame({"date": list(cal) * 2, "ticker": ["A"] * 6 + ["B"] * 6, "adj_close": a + b})
    return prices, market


def test_panel_places_intraday_and_off_calendar_price_rows_by_day():
    """An intraday timestamp is its day's close; a weekend row and a row after the calendar are
    counted off the calendar and change no return; a close below 1 is a valid price."""
    prices, market = _tiny_prices()
    shifted = prices.assign(date=prices["date"] + pd.Timedelta(hours=16))
    extra = pd.DataFrame({"date": [pd.Timestamp("2022-01-08"), pd.Timestamp("2022-02-01")], "ticker": ["A", "A"],
                          "adj_close": [9.0, 9.0]})
    panel = build_panel(pd.concat([shifted, extra], ignore_index=True), market)
    a = panel.tickers.get_loc("A")
    want = np.array(prices.adj_close[:6]) / np.array(prices.adj_close[:6]).take(range(-1, 5)) - 1
    np.testing.assert_allclose(panel.returns[1:, a], want[1:], rtol=0, atol=1e-15)
    np.testing.assert_allclose(panel.market[1:], market.to_numpy()[1:] / market.to_numpy()[:-1] - 1, atol=1e-15)
    assert not panel.bad.any()
    assert panel.diagnostics == {"calendar_days": 6, "calendar_start": "2022-01-03", "calendar_end": "2022-01-10",
                                 "tickers_with_prices": 2, "price_rows": 14, "price_rows_off_market_calendar": 2,
                                 "price_rows_invalid": 0, "market_days_missing": 0}
    assert (panel.first_row.tolist(), panel.last_row.tolist()) == ([0, 0], [5, 5])


def test_panel_bad_inputs_name_the_row_and_field():
    prices, market = _tiny_prices()
    nat = prices.copy()
    nat["date"] = nat["date"].astype(object)
    nat.loc[[2, 7], "date"] = None
    with pytest.raises(ValueError, match=r"^prices: row 2: field 'date' is missing$"):
        build_panel(nat, market)
    no_ticker = prices.copy()
    no_ticker.loc[[3, 8], "ticker"] = None
    with pytest.raises(ValueError, match=r"^prices: row 3: field 'ticker' is missing$"):
        build_panel(no_ticker, market)
    dup = pd.concat([prices, prices.iloc[[0]]], ignore_index=True)
    with pytest.raises(ValueError, match=r"^prices: row 12: duplicate \(date, ticker\) = \(2022-01-03, A\)$"):
        build_panel(dup, market)
    with pytest.raises(ValueError, match=r"^prices: the table has no rows$"):
        build_panel(prices.iloc[:0], market)
    with pytest.raises(ValueError, match=r"^prices: missing column\(s\) \['adj_close'\]"):
        build_panel(prices.drop(columns="adj_close"), market)
    ev = pd.DataFrame({"report_id": ["r"], "ticker": ["A"], "date": [market.index[0]]})
    with pytest.raises(ValueError, match=r"^events: missing column\(s\) \['ticker'\]"):
        compute_labels(ev.drop(columns="ticker"), prices, market, window=2, min_event_obs=1, method="mackinlay")
    with pytest.raises(ValueError, match=r"^market: 1 dates; at least two are needed for a return$"):
        build_panel(prices, market.iloc[:1])
    assert len(build_panel(prices[prices.date <= market.index[1]], market.iloc[:2]).dates) == 2


def test_a_market_without_any_close_excludes_every_event():
    prices, market = _tiny_prices()
    empty = pd.Series(np.nan, index=market.index)
    ev = pd.DataFrame({"report_id": ["r"], "ticker": ["A"], "date": [market.index[1]]})
    got = compute_labels(ev, prices, empty, window=2, min_event_obs=1, method="mackinlay", min_obs=1)
    assert got.loc[0, "excluded_reason"] == "outside_price_coverage"


def test_market_series_and_options_refuse_bad_input_by_name():
    dates = pd.bdate_range("2022-01-03", periods=3)
    assert market_series(pd.Series([1.0, 0.5, 0.8], index=dates)).tolist() == [1.0, 0.5, 0.8]  # below 1 is valid
    with pytest.raises(ValueError, match=r"^market: non-positive close 0.0 on 2022-01-04$"):
        market_series(pd.Series([100.0, 0.0, -1.0], index=dates))
    with pytest.raises(ValueError, match=r"^market: a date is missing \(NaT\) in the market series$"):
        market_series(pd.Series([1.0, 2.0], index=pd.DatetimeIndex([dates[0], pd.NaT])))
    with pytest.raises(TypeError, match=r"^market must be a Series or DataFrame, got list$"):
        market_series([1.0, 2.0])
    frame = pd.DataFrame({"date": dates, "spy": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match=r"^market frame has no column 'zz' \(columns: \['spy'\]\)$"):
        market_series(frame, "zz")
    prices, market = _tiny_prices()
    ev = pd.DataFrame({"report_id": ["r"], "ticker": ["A"], "date": [market.index[1]]})
    assert compute_labels(ev, prices, market, window=2, min_event_obs=1, method="mackinlay",
                          min_obs=1).loc[0, "n_obs"] == 2
    with pytest.raises(ValueError, match=r"^window must be >= 2 trading days, got 1$"):
        compute_labels(ev, prices, market, window=1, min_event_obs=1, method="mackinlay")


def test_options_from_params_read_every_key_of_the_section():
    """Every key of a labels section (values unlike the defaults) reaches compute_labels' options;
    a misspelt key is refused naming the section."""
    from finlib.core.config import ConfigError
    from finlib.finbias.labels.market_model import options_from_params

    section = {"window": 40, "method": "mackinlay", "quantiles": [0.2, 0.8], "min_event_obs": 25,
               "mackinlay": {"estimation_window": 200, "gap": 20, "min_obs": 100}}
    assert options_from_params(section) == {"window": 40, "quantiles": (0.2, 0.8), "min_event_obs": 25,
                                            "estimation_window": 200, "gap": 20, "min_obs": 100}
    with pytest.raises(ConfigError, match=r"^params labels: invalid params"):
        options_from_params({**section, "quantile": [0.3, 0.7]})


# --------------------------------------------------------------------------- stage 01's report and tables

def _stage_inputs(tmp_run, seed: int = 9, n: int = 60):
    """Stage 00's artifacts for a small run: random prices, reports over three years (one small), a planted truth."""
    from finlib.core.artifacts import write_frame

    rng = np.random.default_rng(seed)
    cal = pd.bdate_range("2017-01-02", periods=1100)
    tickers = [f"T{i:02d}" for i in range(8)]
    rm = rng.normal(0.0003, 0.01, len(cal))
    betas = rng.uniform(0.3, 1.8, len(tickers))
    p = 20 * np.cumprod(1 + betas * rm[:, None] + rng.normal(0.0, 0.02, (len(cal), len(tickers))), axis=0)
    prices = pd.DataFrame({"date": np.repeat(cal, len(tickers)), "ticker": np.tile(tickers, len(cal)),
                           "adj_close": p.ravel()})
    prices = prices[rng.random(len(prices)) > 0.03].reset_index(drop=True)   # missing days: n_obs varies
    days = list(rng.integers(300, 800, n - 6)) + list(rng.integers(820, 1000, 5)) + [len(cal) - 5]
    reports = pd.DataFrame({
        "report_id": [f"R{i:03d}" for i in range(n)],
        "ticker": list(rng.choice(tickers, n - 1)) + ["NOPE"],
        "company": "x",
        "sector": rng.choice(["Energy", "Technology"], n),
        "text": "t",
        "date": [cal[d] for d in days],
        "analyst_rating": list(rng.choice(["bullish", "neutral", "bearish"], n - 1)) + [None],
    })
    truth = pd.DataFrame({"report_id": reports["report_id"], "q": rng.normal(size=n),
                          "drift": rng.normal(0, 0.001, n), "beta": rng.uniform(0.3, 1.8, n)})
    write_frame(tmp_run, "reports", reports)
    write_frame(tmp_run, "prices", prices)
    write_frame(tmp_run, "market", pd.DataFrame({"date": cal, "market_close": 1000 * np.cumprod(1 + rm)}))
    write_frame(tmp_run, "truth", truth)
    return reports, truth


def test_stage_report_every_key_by_hand(tmp_run):
    """labels_report.json: every key, counts by hand from the labels, shares by year from the report dates,
    the planted-signal correlations against scipy; the file on disk equals the report returned."""
    from scipy.stats import pearsonr, spearmanr

    from finlib.core.artifacts import read_json

    reports, truth = _stage_inputs(tmp_run)
    res = L.run(tmp_run)
    rep, lab = res.report, res.labels
    assert set(rep) == {"stage", "method", "other_method", "options", "timing", "tie_rule", "n_events", "methods",
                        "agreement", "years", "small_years", "small_year_threshold", "panel", "synthetic_recovery"}
    assert (rep["stage"], rep["method"], rep["other_method"]) == ("01_labels", "paper", "mackinlay")
    assert rep["n_events"] == len(reports) and rep["small_year_threshold"] == L.SMALL_YEAR
    section = tmp_run.section("labels")
    assert rep["options"]["window"] == section["window"] == 60
    assert rep["options"]["quantiles"] == list(section["quantiles"]) and isinstance(rep["options"]["quantiles"], list)
    for method, s in (("paper", ""), ("mackinlay", "_mackinlay")):
        m = rep["methods"][method]
        assert m["n_labelled"] == int(lab[f"label{s}"].notna().sum())
        assert m["n_excluded"] == int(lab[f"excluded_reason{s}"].notna().sum()) >= 1
        assert m["label_counts"] == {r: int((lab[f"label{s}"] == r).sum()) for r in ("bullish", "neutral", "bearish")}
    year = pd.to_datetime(reports.set_index("report_id").loc[lab["report_id"], "date"]).dt.year.to_numpy()
    want_years = {}
    for y in sorted(set(year[lab["label"].notna().to_numpy()])):
        g = lab.loc[(year == y) & lab["label"].notna().to_numpy(), "label"]
        want_years[str(y)] = {"n": len(g), **{r: int((g == r).sum()) for r in ("bearish", "neutral", "bullish")}}
    assert rep["years"] == want_years and len(want_years) >= 2
    assert rep["small_years"] == [int(y) for y, v in want_years.items() if v["n"] < L.SMALL_YEAR] != []
    df = lab.merge(truth, on="report_id", suffixes=("", "_true"))
    want = []
    for method, s in (("paper", ""), ("mackinlay", "_mackinlay")):
        mean_ar = df["alpha"] if method == "paper" else df[f"car{s}"] / df[f"n_obs{s}"]
        for quantity, est, true in (("CAR vs planted quality q", df[f"car{s}"], df["q"]),
                                    ("mean daily AR vs planted drift", mean_ar, df["drift"]),
                                    ("estimated vs true beta", df[f"beta{s}"], df["beta_true"])):
            ok = (est.notna() & true.notna()).to_numpy()
            want.append((method, quantity, int(ok.sum()), pearsonr(est[ok], true[ok])[0],
                         spearmanr(est[ok], true[ok])[0]))
    got = [(r["method"], r["quantity"], r["n"], r["pearson"], r["spearman"]) for r in rep["synthetic_recovery"]]
    assert [g[:3] for g in got] == [w[:3] for w in want]
    assert [g[3:] for g in got] == [pytest.approx(w[3:], abs=1e-12) for w in want]
    assert read_json(tmp_run, "labels_report") == rep
    assert lab["n_obs"].nunique() > 1   # alpha and CAR / n_obs differ for the paper's method
    pd.testing.assert_frame_equal(res.truth.reset_index(drop=True), truth.reset_index(drop=True), check_dtype=False)
    assert set(res.figures) == {"labels_car_by_year", "labels_beta_distribution"}
    assert all(f is not None for f in res.figures.values())


def test_stage_tables_are_written_by_name_with_their_formats(tmp_run):
    """Every stage-01 table is returned and written under its name; the CSV on disk holds the returned frame and
    a caption naming the method, the window and the bucket split; CAR and beta tables print 4 and 3 decimals."""
    from finlib.core.tables import read_table_csv

    _stage_inputs(tmp_run)
    res = L.run(tmp_run)
    names = {"labels_exclusions", "table3_return_ratings", "labels_shares_by_year", "labels_car_by_year",
             "labels_beta_distribution", "labels_method_agreement", "analyst_accuracy_by_sector",
             "labels_synthetic_recovery"}
    assert set(res.tables) == names
    for name, table in res.tables.items():
        assert isinstance(table, pd.DataFrame) and len(table), name
        path = tmp_run.tables_dir / f"{name}.csv"
        on_disk = read_table_csv(path)
        assert list(on_disk.columns) == [str(c) for c in table.columns], name
        assert len(on_disk) == len(table), name
        caption = path.read_text(encoding="utf-8").split("\n", 1)[0]
        assert caption.startswith("# ") and len(caption) > 40, name
    assert "paper market model, 60-day CAR, year-specific 30/40/30 buckets" in \
        (tmp_run.tables_dir / "table3_return_ratings.csv").read_text(encoding="utf-8").split("\n", 1)[0]
    car_md = (tmp_run.tables_dir / "labels_car_by_year.md").read_text(encoding="utf-8")
    beta_md = (tmp_run.tables_dir / "labels_beta_distribution.md").read_text(encoding="utf-8")
    import re

    assert re.search(r"\| *-?\d+\.\d{4} *\|", car_md) and not re.search(r"\d\.\d{5}", car_md)
    assert re.search(r"\| *-?\d+\.\d{3} *\|", beta_md) and not re.search(r"\d\.\d{4}", beta_md)
    rec_md = (tmp_run.tables_dir / "labels_synthetic_recovery.md").read_text(encoding="utf-8")
    assert re.search(r"\| *-?\d+\.\d{3} *\|", rec_md) and not re.search(r"\d\.\d{4}", rec_md)
    assert "XX" not in car_md + beta_md + rec_md
    assert (tmp_run.tables_dir / "labels_synthetic_recovery.csv").read_text(encoding="utf-8").startswith(
        "# Recovery of the planted signal")
    rec = read_table_csv(tmp_run.tables_dir / "labels_synthetic_recovery.csv")
    assert rec["pearson"].tolist() == pytest.approx([r["pearson"] for r in res.report["synthetic_recovery"]])


@pytest.mark.parametrize(("quantiles", "split"), [((0.3, 0.7), "30/40/30"), ((0.25, 0.8), "25/55/20"),
                                                  ((0.1234567, 0.5), "12.3457/37.6543/50"),
                                                  ((0.01234567, 0.5), "1.2346/48.7654/50")])
def test_bucket_split_prints_percent_to_four_decimals(quantiles, split):
    assert L.bucket_split(quantiles) == split


def test_analyst_accuracy_every_cell_by_hand():
    """Every row and column: the paper's nine sectors in order, a sector outside them, pooled, the mean of the
    nine and the paper's printed Average; a report with no label row counts as unlabelled; the paper's Analyst
    cells read from the published CSVs here."""
    from importlib import resources

    PRINTED = "Average (printed in the paper)"

    reports = pd.DataFrame({"report_id": list("abcdefg"),
                            "sector": ["Energy", "Energy", "Energy", "Utilities", "Utilities", "Crypto", "Energy"],
                            "analyst_rating": ["bullish", "bullish", None, "neutral", "bearish", "bullish", "neutral"]})
    labels = pd.DataFrame({"report_id": list("abcdef"),
                           "label": ["bullish", "bearish", "bullish", "neutral", None, "neutral"]})
    got = L.analyst_accuracy_by_sector(labels, reports)
    ref = resources.files("finlib") / "reference" / "paper_tables"
    t6 = pd.read_csv(ref / "finbias_table6_accuracy_with_without.csv")
    t6 = t6[t6["model"] == "Analyst"].set_index("sector")["with_rating"]
    t7 = pd.read_csv(ref / "finbias_table7_accuracy_opinions_removed.csv")
    t7 = t7[t7["model"] == "Analyst"].set_index("sector")["accuracy"]
    counts = {"Energy": (4, 2, 1, 1, 50.0), "Utilities": (2, 1, 0, 1, 100.0), "Crypto": (1, 1, 0, 0, 0.0)}
    want = []
    for sector in [*SECTORS_9, "Crypto", POOLED_9]:
        if sector == POOLED_9:
            n = (7, 4, 1, 2, 50.0)
        else:
            n = counts.get(sector, (0, 0, 0, 0, np.nan))
        want.append([sector, *n, t6.get(sector, np.nan), t7.get(sector, np.nan)])
    nine = [w for w in want if w[0] in SECTORS_9]
    want.append([MEAN_9, 6, 3, 1, 2, 75.0, float(np.mean([w[6] for w in nine])), float(np.mean([w[7] for w in nine]))])
    want.append([PRINTED, pd.NA, pd.NA, pd.NA, pd.NA, np.nan, t6["Average"], t7["Average"]])
    assert list(got.columns) == ["sector", "n_reports", "n_scored", "n_no_analyst_rating", "n_no_label", "accuracy",
                                 "paper_table6", "paper_table7"]
    assert list(got.index) == list(range(len(want)))
    assert [str(got[c].dtype) for c in ("n_reports", "n_scored", "n_no_analyst_rating", "n_no_label")] == ["Int64"] * 4
    for row, w in zip(got.itertuples(index=False), want):
        assert row[0] == w[0]
        for a, b in zip(row[1:5], w[1:5]):
            assert (a is pd.NA and b is pd.NA) or a == b, (w[0], row, w)
        for a, b in zip(row[5:], w[5:]):
            assert (np.isnan(a) and np.isnan(b)) or a == pytest.approx(b), (w[0], row, w)
    with pytest.raises(pd.errors.MergeError):
        L.analyst_accuracy_by_sector(pd.concat([labels, labels.iloc[:1]]), reports)


def test_recovery_table_of_a_run_without_truth_says_why(tmp_run):
    assert L.write_recovery_table(tmp_run, {"stage": "01_labels"}) == \
        "No truth.parquet in this run (real data): there is no planted signal to recover."
    assert not (tmp_run.tables_dir / "labels_synthetic_recovery.csv").exists()


def test_the_run_reads_its_own_bucket_quantiles(tmp_run, tmp_path):
    """labels.quantiles [0.2, 0.8]: the result, the report, the year shares and the caption use them."""
    import yaml

    from finlib.core.config import load_run

    (tmp_run.root / "params" / "q.yaml").write_text(yaml.safe_dump({"extends": "smoke.yaml",
                                                                    "labels": {"quantiles": [0.2, 0.8]}}))
    cfg = load_run("q", root=tmp_run.root)
    _stage_inputs(cfg)
    res = L.run(cfg)
    assert res.quantiles == (0.2, 0.8) and res.report["options"]["quantiles"] == [0.2, 0.8]
    caption = (cfg.tables_dir / "table3_return_ratings.csv").read_text(encoding="utf-8").split("\n", 1)[0]
    assert "year-specific 20/60/20 buckets" in caption


@pytest.mark.parametrize("n", [2, 3])
def test_recovery_correlations_need_three_pairs(n):
    """A correlation of two points is +-1 whatever the estimates: the recovery table leaves it out (NaN)."""
    rng = np.random.default_rng(n)
    ids = [f"r{i}" for i in range(n)]
    labels = pd.DataFrame({"report_id": ids, "car": rng.normal(size=n), "alpha": rng.normal(size=n),
                           "beta": rng.normal(size=n), "n_obs": [60] * n, "car_mackinlay": rng.normal(size=n),
                           "beta_mackinlay": rng.normal(size=n), "n_obs_mackinlay": [58] * n})
    truth = pd.DataFrame({"report_id": ids, "q": rng.normal(size=n), "drift": rng.normal(size=n),
                          "beta": rng.normal(size=n)})
    got = L.synthetic_recovery(labels, truth, "paper")
    assert (got["n"] == n).all() and len(got) == 6
    if n == 2:
        assert got["pearson"].isna().all() and got["spearman"].isna().all()
    else:
        assert got["pearson"].notna().all() and got["spearman"].notna().all()
        assert got.loc[0, "pearson"] == pytest.approx(np.corrcoef(labels["car"], truth["q"])[0, 1])
