"""The market model behind stage 01's return-based ratings (Fin-Bias Appendix A.1): returns,
CAR per event, exclusions and the per-year buckets; the stage itself (tables, report, figures)
is `finlib.finbias.labels.stage`.

Analyst ratings are biased upward, so the paper grades every rating (the analyst's and
each model's) against what the stock did next: the 60-trading-day cumulative abnormal
return (CAR) after the report under the market model, bucketed per report year into the
bottom 30 % (bearish), middle 40 % (neutral) and top 30 % (bullish).

Two estimators of the market model are offered:

* ``method="paper"`` — Appendix A.1 as written: OLS of the firm's on the market's simple
  returns over the event window itself (days +1..+window); ``alpha = mean(R_i) -
  beta * mean(R_m)`` and ``CAR = window * alpha`` (Eq. 7 sums the daily alpha over the window
  the paper defines, however many of its days had valid returns; ``min_event_obs`` still
  applies). With no missing day this is ``sum(R_i - beta R_m)``.
* ``method="mackinlay"`` — the textbook event study (MacKinlay 1997): alpha and beta from
  an estimation window that ends ``gap`` trading days before day 0 (days
  ``-(gap+L)..-(gap+1)``), abnormal returns ``R_i - alpha - beta R_m`` summed over the
  event window.

Timing. The trading calendar is the market series' dates. Day 0 is the report date when it
is a trading day, otherwise the last trading day before it, so the first return after the
report is issued (Monday's for a Saturday report, the next trading day's for a holiday report)
is day +1, inside the window +1..+window. The return of day t is ``P_t / P_{t-1} - 1`` and
needs valid prices on both calendar days (a missing day breaks two returns, it is never
bridged). ``n_obs`` counts the days in a window where both the firm's and the market's
return exist; the OLS moments (and MacKinlay's abnormal-return sum) run over those days only.

Everything is vectorised across events: prices are pivoted once into a date x ticker
return matrix, and prefix sums of the OLS moments over valid (firm, market) pairs
(n, x, y, xx, xy, computed on centred returns so the sums stay small) are taken down each
column. Each event maps to calendar row offsets, so any window's moments are two array
lookups, ``C[end] - C[start]``, and alpha/beta/CAR follow in closed form for all events
at once: O(1) per event whatever the window length. Against per-event statsmodels OLS the
results agree to ~1e-13 (tests require 1e-10; benchmarks/bench_labels.py measures both
speed and difference).

Exclusions are explicit (column ``excluded_reason``, first applicable reason in the
order of ``EXCLUSION_REASONS``); an excluded event keeps its row, with NaN estimates and
no label.

Buckets. Within each calendar year of the report date, the labelled events are sorted by
``(car, report_id)`` (stable, so tied CARs are ordered by report id — deterministic,
independent of input order). With n events in the year and cut-offs ``(q_lo, q_hi)``, the
first ``k_bear = round_half_down(q_lo * n)`` are bearish, the last
``k_bull = round_half_down((1 - q_hi) * n)`` bullish, the rest neutral. Rounding half
*down* sends ambiguous events to the neutral middle. Years with very few events still get
labels (n=1: neutral; n=2: one bearish, one bullish; n=3: one each; n=5: 1/3/1) and are
flagged as small in the stage report, because their 30/40/30 split is only approximate.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from finlib.core.artifacts import require_columns
from finlib.core.params import validate_section
from finlib.finbias.vocab import Rating

METHODS: tuple[str, ...] = ("paper", "mackinlay")
# Fewest valid event-window pairs a method can use: the paper's fits alpha and beta on the window
# itself (3 points leave one residual degree of freedom); MacKinlay's only sums abnormal returns.
MIN_EVENT_OBS: dict[str, int] = {"paper": 3, "mackinlay": 1}

# Order matters: an event gets the first reason that applies.
EXCLUSION_REASONS: tuple[str, ...] = (
    "missing_event_fields",     # report without ticker or date
    "no_prices",                # ticker absent from the price panel
    "outside_price_coverage",   # report date before the ticker's first price / after the calendar,
                                # or the event window runs past the ticker's (or the market's) last price
    "invalid_price",            # a NaN / zero / negative adj_close among the prices the windows need
    "too_few_event_obs",        # fewer than min_event_obs valid return pairs in the event window
    "too_few_estimation_obs",   # mackinlay: fewer than min_obs valid pairs in the estimation window
    "zero_market_variance",     # the market return is constant over the regression window
)
UNPLACED = EXCLUSION_REASONS[:3]   # the event has no firm or day in the panel: no pair is read for it

OPTION_DEFAULTS: dict[str, Any] = {
    "quantiles": (0.30, 0.70),
    "min_event_obs": None,       # None -> ceil(2/3 * window)
    "estimation_window": 250,
    "gap": 30,
    "min_obs": 120,              # minimum valid pairs in the MacKinlay estimation window
    "market_column": None,       # column of a market DataFrame (default: market_close / the only numeric one)
}

_EPS = 1e-9


# --------------------------------------------------------------------------- inputs

def market_series(market: pd.Series | pd.DataFrame, column: str | None = None) -> pd.Series:
    """The market's adjusted close as a float Series indexed by sorted, unique dates.

    Accepts a Series indexed by date, or a frame with a ``date`` column (the stage-00
    artifact ``date, market_close``; ``column`` picks another column, e.g. ``spy_adj_close``).
    """
    if isinstance(market, pd.DataFrame):
        frame = market.set_index("date") if "date" in market.columns else market
        if column is None:
            if "market_close" in frame.columns:
                column = "market_close"
            else:
                numeric = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])]
                if len(numeric) != 1:
                    raise ValueError(f"market frame: pass market_column=, cannot choose among {list(frame.columns)}")
                column = numeric[0]
        if column not in frame.columns:
            raise ValueError(f"market frame has no column '{column}' (columns: {list(frame.columns)})")
        series = frame[column]
    elif isinstance(market, pd.Series):
        series = market
    else:
        raise TypeError(f"market must be a Series or DataFrame, got {type(market).__name__}")
    series = pd.Series(np.asarray(series, dtype="float64"),
                       index=pd.DatetimeIndex(pd.to_datetime(series.index)).normalize(), name="market")
    if series.index.hasnans:
        raise ValueError("market: a date is missing (NaT) in the market series")
    dup = series.index[series.index.duplicated()]
    if len(dup):
        raise ValueError(f"market: duplicate date {dup[0].date()} ({len(dup)} duplicates)")
    bad = series[(series <= 0)]
    if len(bad):
        raise ValueError(f"market: non-positive close {bad.iloc[0]} on {bad.index[0].date()}")
    return series.sort_index()


_DAY_NS = 86_400_000_000_000


def _day_ns(values) -> np.ndarray:
    """Dates as int64 nanoseconds floored to midnight (NaT stays int64 min): fast normalisation."""
    arr = pd.to_datetime(pd.Series(values)).to_numpy(dtype="datetime64[ns]").view("i8")
    nat = arr == np.iinfo(np.int64).min
    return np.where(nat, arr, arr - arr % _DAY_NS)


@dataclass(frozen=True)
class ReturnPanel:
    """Simple returns on the market's calendar: ``returns[t, k]`` is ticker k's return on day t."""

    dates: pd.DatetimeIndex     # trading calendar (T)
    tickers: pd.Index           # K tickers
    returns: np.ndarray         # T x K float, NaN where either price is missing/invalid
    market: np.ndarray          # T float, NaN where either close is missing
    bad: np.ndarray             # T x K bool: a price row exists but is NaN / zero / negative
    first_row: np.ndarray       # K int: first calendar row with a price row
    last_row: np.ndarray        # K int: last calendar row with a price row
    market_first_row: int       # first / last calendar row with a market close (the index may start
    market_last_row: int        # later or stop earlier than the calendar, e.g. S&P TR data ending 2024)
    cum: dict                   # (T+1) x K prefix sums over valid pairs: n, x, y, xx, xy (centred), bad
    cx: float                   # centring constants (OLS is shift-invariant; centring keeps the
    cy: np.ndarray              # prefix sums small, so window differences lose no precision)
    diagnostics: dict


def build_panel(prices: pd.DataFrame, market: pd.Series | pd.DataFrame,
                market_column: str | None = None) -> ReturnPanel:
    """Pivot long prices once onto the market calendar; the hot path then only gathers."""
    require_columns(prices, ("date", "ticker", "adj_close"), "prices")
    if prices.empty:
        raise ValueError("prices: the table has no rows")
    mkt = market_series(market, market_column)
    dates = mkt.index
    if len(dates) < 2:
        raise ValueError(f"market: {len(dates)} dates; at least two are needed for a return")
    pdates = _day_ns(prices["date"])
    if (pdates == np.iinfo(np.int64).min).any():
        row = int(np.flatnonzero(pdates == np.iinfo(np.int64).min)[0])
        raise ValueError(f"prices: row {row}: field 'date' is missing")
    tickers_raw = prices["ticker"]
    if tickers_raw.isna().any():
        row = int(np.flatnonzero(tickers_raw.isna().to_numpy())[0])
        raise ValueError(f"prices: row {row}: field 'ticker' is missing")
    tick_codes, tickers = pd.factorize(tickers_raw.astype(str), sort=True)
    cal_ns = dates.to_numpy(dtype="datetime64[ns]").view("i8")
    rows = np.full(len(pdates), -1)
    if len(cal_ns):
        pos = np.clip(np.searchsorted(cal_ns, pdates), 0, len(cal_ns) - 1)
        rows = np.where(cal_ns[pos] == pdates, pos, -1)
    flat = rows.astype("int64") * len(tickers) + tick_codes
    on_cal_flat = flat[rows >= 0]
    if len(on_cal_flat) and np.bincount(on_cal_flat).max() > 1:
        dupe = pd.DataFrame({"d": pdates, "t": tick_codes}).duplicated().to_numpy()
        row = int(np.flatnonzero(dupe)[0])
        raise ValueError(f"prices: row {row}: duplicate (date, ticker) = "
                         f"({pd.Timestamp(pdates[row]).date()}, {tickers_raw.iloc[row]})")
    on_cal = rows >= 0
    T, K = len(dates), len(tickers)
    close = np.asarray(prices["adj_close"], dtype="float64")
    valid_close = np.isfinite(close) & (close > 0)
    P = np.full((T, K), np.nan)
    present = np.zeros((T, K), dtype=bool)
    bad = np.zeros((T, K), dtype=bool)
    r, c = rows[on_cal], tick_codes[on_cal]
    present[r, c] = True
    bad[r, c] = ~valid_close[on_cal]
    P[r, c] = np.where(valid_close[on_cal], close[on_cal], np.nan)
    R = np.full((T, K), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        R[1:] = P[1:] / P[:-1] - 1.0
        m = mkt.to_numpy()
        Rm = np.full(T, np.nan)
        Rm[1:] = m[1:] / m[:-1] - 1.0
    has_any = present.any(axis=0)
    first_row = np.where(has_any, present.argmax(axis=0), -1)
    last_row = np.where(has_any, T - 1 - present[::-1].argmax(axis=0), -1)
    diagnostics = {
        "calendar_days": int(T),
        "calendar_start": str(dates[0].date()) if T else None,
        "calendar_end": str(dates[-1].date()) if T else None,
        "tickers_with_prices": int(K),
        "price_rows": int(len(prices)),
        "price_rows_off_market_calendar": int((~on_cal).sum()),
        "price_rows_invalid": int((~valid_close).sum()),
        "market_days_missing": int(np.isnan(mkt.to_numpy()).sum()),
    }
    finite = np.flatnonzero(np.isfinite(mkt.to_numpy()))
    m_first, m_last = (int(finite[0]), int(finite[-1])) if len(finite) else (T, -1)
    cum, cx, cy = _prefix_sums(R, Rm, bad)
    return ReturnPanel(dates, pd.Index(tickers), R, Rm, bad, first_row, last_row, m_first, m_last,
                       cum, cx, cy, diagnostics)


def _prefix_sums(R: np.ndarray, Rm: np.ndarray, bad: np.ndarray) -> tuple[dict, float, np.ndarray]:
    """Prefix sums (with a leading zero row) of the OLS moments over valid (firm, market) pairs.

    Any window's moments are then two lookups, C[end] - C[start], whatever its length: the
    cost per event is O(1) instead of O(window).
    """
    valid = np.isfinite(R) & np.isfinite(Rm)[:, None]
    with np.errstate(invalid="ignore"):
        cx = float(np.nanmean(Rm)) if np.isfinite(Rm).any() else 0.0
        cy = np.nanmean(np.where(valid, R, np.nan), axis=0) if R.size else np.zeros(R.shape[1])
    cy = np.where(np.isfinite(cy), cy, 0.0)
    x = np.where(valid, Rm[:, None] - cx, 0.0)
    y = np.where(valid, R - cy[None, :], 0.0)

    def prefix(a: np.ndarray) -> np.ndarray:
        out = np.zeros((a.shape[0] + 1, a.shape[1]), dtype=np.int64 if a.dtype == bool else np.float64)
        np.cumsum(a, axis=0, out=out[1:])
        return out

    cum = {"n": prefix(valid), "x": prefix(x), "y": prefix(y), "xx": prefix(x * x), "xy": prefix(x * y),
           "bad": prefix(bad)}
    return cum, cx, cy


def _events_frame(events: pd.DataFrame) -> pd.DataFrame:
    require_columns(events, ("report_id", "ticker", "date"), "events")
    ev = events[["report_id", "ticker", "date"]].copy()
    dupe = ev["report_id"].duplicated()
    if dupe.any():
        row = int(np.flatnonzero(dupe.to_numpy())[0])
        raise ValueError(f"events: row {row}: duplicate report_id '{ev['report_id'].iloc[row]}'")
    ev["date"] = pd.DatetimeIndex(pd.to_datetime(ev["date"])).normalize()
    return ev.reset_index(drop=True)


# --------------------------------------------------------------------------- batch OLS

def window_sums(panel: ReturnPanel, day0: np.ndarray, col: np.ndarray, start: int, length: int,
                keys: tuple[str, ...] = ("n", "x", "y", "xx", "xy")) -> dict:
    """Moments over calendar rows day0+start .. day0+start+length-1 for each event (rows outside
    the calendar contribute nothing)."""
    T = len(panel.dates)
    s = np.clip(day0 + start, 0, T)
    e = np.clip(day0 + start + length, 0, T)
    return {k: panel.cum[k][e, col] - panel.cum[k][s, col] for k in keys}


def ols_from_sums(w: dict, cx: float, cy: np.ndarray) -> dict[str, np.ndarray]:
    """Row-wise OLS of firm on market returns from window moments (centred data, closed form)."""
    n = w["n"]
    with np.errstate(invalid="ignore", divide="ignore"):
        xm, ym = w["x"] / n, w["y"] / n
        sxx = w["xx"] - w["x"] * xm
        sxx = np.where(sxx > 1e-9 * w["xx"], sxx, 0.0)  # a constant market leaves rounding dust only
        sxy = w["xy"] - w["x"] * ym
        beta = sxy / sxx
        alpha = (ym + cy) - beta * (xm + cx)
    return {"alpha": alpha, "beta": beta, "n": n, "sxx": sxx}


def _any_bad(panel: ReturnPanel, day0: np.ndarray, col: np.ndarray, start: int, length: int) -> np.ndarray:
    """Whether any existing price row among calendar rows day0+start .. +length-1 is NaN/zero/negative."""
    return window_sums(panel, day0, col, start, length, keys=("bad",))["bad"] > 0


def event_day0(calendar: pd.DatetimeIndex, report_dates) -> np.ndarray:
    """Calendar row of day 0 for each report date: the date itself when it is a trading day, else the
    last trading day before it (-1 when the report predates the calendar)."""
    cal = calendar.to_numpy(dtype="datetime64[ns]")
    return np.searchsorted(cal, np.asarray(report_dates, dtype="datetime64[ns]"), side="right") - 1


# --------------------------------------------------------------------------- buckets

def bucket_counts(n: int, quantiles: tuple[float, float]) -> tuple[int, int, int]:
    """(bearish, neutral, bullish) counts for a year of n events, rounding half down."""
    q_lo, q_hi = quantiles
    k_bear = max(0, math.ceil(q_lo * n - 0.5 - _EPS))
    k_bull = max(0, math.ceil((1.0 - q_hi) * n - 0.5 - _EPS))
    if k_bear + k_bull > n:  # only possible for extreme cut-offs
        k_bull = n - k_bear
    return k_bear, n - k_bear - k_bull, k_bull


def assign_year_buckets(car: Iterable[float], dates: Iterable, report_ids: Iterable,
                        quantiles: tuple[float, float] = (0.30, 0.70)) -> np.ndarray:
    """Per calendar year, label the sorted CARs bearish / neutral / bullish (None where CAR is NaN).

    Ties are broken by report_id (stable sort by (year, car, report_id)), so the result
    does not depend on the input order.
    """
    q_lo, q_hi = quantiles
    if not 0.0 <= q_lo <= q_hi <= 1.0:
        raise ValueError(f"labels.quantiles must satisfy 0 <= lo <= hi <= 1, got {quantiles}")
    car = np.asarray(car, dtype="float64")
    year = pd.DatetimeIndex(pd.to_datetime(np.asarray(dates))).year.to_numpy()
    rid = np.asarray(report_ids, dtype=object).astype(str)
    out = np.full(len(car), None, dtype=object)
    ok = np.flatnonzero(np.isfinite(car))
    if not len(ok):
        return out
    order = ok[np.lexsort((rid[ok], car[ok], year[ok]))]   # last key sorts first: year, car, report_id
    ys = year[order]
    new_group = np.r_[True, ys[1:] != ys[:-1]]
    starts = np.flatnonzero(new_group)
    sizes = np.diff(np.r_[starts, len(ys)])
    pos = np.arange(len(ys)) - np.repeat(starts, sizes)
    n = np.repeat(sizes, sizes)
    counts = {int(v): bucket_counts(int(v), quantiles) for v in np.unique(sizes)}
    k = np.array([counts[int(v)] for v in sizes]).reshape(-1, 3)
    k_bear, k_bull = np.repeat(k[:, 0], sizes), np.repeat(k[:, 2], sizes)
    out[order] = np.where(pos < k_bear, Rating.BEARISH.value,
                          np.where(pos >= n - k_bull, Rating.BULLISH.value, Rating.NEUTRAL.value))
    return out


# --------------------------------------------------------------------------- public entry

def _check_options(method: str, window: int, options: dict) -> dict:
    unknown = set(options) - set(OPTION_DEFAULTS)
    if unknown:
        raise TypeError(f"compute_labels: unknown option(s) {sorted(unknown)}; known: {sorted(OPTION_DEFAULTS)}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got '{method}'")
    if int(window) < 2:
        raise ValueError(f"window must be >= 2 trading days, got {window}")
    return {**OPTION_DEFAULTS, **options}


def compute_labels(events: pd.DataFrame, prices: pd.DataFrame, market: pd.Series | pd.DataFrame,
                   *, window: int = 60, method: str = "paper", **options: Any) -> pd.DataFrame:
    """Market-model CAR over days +1..+window after each report, and its year-bucketed label.

    Returns one row per event, in input order: report_id, car, alpha, beta, n_obs,
    label ("bullish"/"neutral"/"bearish" or None), excluded_reason (None when labelled);
    with ``method="mackinlay"`` also n_est_obs. ``options``: see ``OPTION_DEFAULTS``.
    The panel's counts (off-calendar price rows…) are ``build_panel(...).diagnostics``.
    """
    opt = _check_options(method, window, options)
    panel = build_panel(prices, market, opt["market_column"])
    return labels_from_panel(events, panel, window=window, method=method, **options)


def labels_from_panel(events: pd.DataFrame, panel: ReturnPanel, *, window: int = 60, method: str = "paper",
                      **options: Any) -> pd.DataFrame:
    """compute_labels on a prebuilt ReturnPanel (reuse one panel for several methods/windows)."""
    opt = _check_options(method, window, options)
    window = int(window)
    min_event_obs = opt["min_event_obs"]
    min_event_obs = math.ceil(2 * window / 3) if min_event_obs is None else int(min_event_obs)
    lowest = MIN_EVENT_OBS[method]
    if min_event_obs < lowest:  # refused, never raised silently: the label rule must be the one asked for
        raise ValueError(f"min_event_obs must be >= {lowest} for method '{method}', got {min_event_obs}")

    ev = _events_frame(events)
    E, T = len(ev), len(panel.dates)

    reason = np.full(E, None, dtype=object)

    def flag(mask: np.ndarray, name: str) -> None:
        reason[mask & (reason == None)] = name  # noqa: E711 (elementwise on object array)

    flag((ev["ticker"].isna() | ev["date"].isna()).to_numpy(), "missing_event_fields")
    col = panel.tickers.get_indexer(ev["ticker"].astype(str))
    flag(col < 0, "no_prices")
    col = np.where(col < 0, 0, col)
    ev_dates = ev["date"].to_numpy(dtype="datetime64[ns]")
    day0 = event_day0(panel.dates, ev_dates)
    out_cov = ((day0 < 0) | (day0 < panel.first_row[col]) | (day0 + window > panel.last_row[col])
               | (day0 < panel.market_first_row) | (day0 + window > panel.market_last_row))
    flag(out_cov, "outside_price_coverage")
    day0 = np.clip(day0, 0, max(T - 1, 0))

    ew = window_sums(panel, day0, col, 1, window)
    cy = panel.cy[col]
    bad = _any_bad(panel, day0, col, 0, window + 1)
    est = None
    if method == "mackinlay":
        L, gap = int(opt["estimation_window"]), int(opt["gap"])
        est = ols_from_sums(window_sums(panel, day0, col, -(gap + L), L), panel.cx, cy)
        bad |= _any_bad(panel, day0, col, -(gap + L) - 1, L + 1)
    flag(bad, "invalid_price")
    n_obs = ew["n"]
    flag(n_obs < min_event_obs, "too_few_event_obs")

    # sums of the raw (uncentred) returns over the event window's valid pairs
    sy = ew["y"] + n_obs * cy
    sx = ew["x"] + n_obs * panel.cx
    with np.errstate(invalid="ignore"):
        if method == "paper":
            fit = ols_from_sums(ew, panel.cx, cy)
            alpha, beta = fit["alpha"], fit["beta"]
            flag(~(fit["sxx"] > 0), "zero_market_variance")
            car = window * alpha                       # Eq. 7: alpha summed over days +1..+window
        else:
            flag(est["n"] < int(opt["min_obs"]), "too_few_estimation_obs")
            flag(~(est["sxx"] > 0), "zero_market_variance")
            alpha, beta = est["alpha"], est["beta"]
            car = sy - n_obs * alpha - beta * sx       # sum of R - alpha - beta R_m

    excluded = reason != None  # noqa: E711
    nan = np.where(excluded, np.nan, 1.0)
    out = pd.DataFrame({
        "report_id": ev["report_id"].to_numpy(),
        "car": car * nan, "alpha": alpha * nan, "beta": beta * nan,
        "n_obs": n_obs.astype("int64"),
    })
    if method == "mackinlay":
        out["n_est_obs"] = est["n"].astype("int64")
    out["label"] = pd.Series(assign_year_buckets(out["car"], ev["date"].fillna(pd.Timestamp(0)),
                                                 out["report_id"], tuple(opt["quantiles"])), dtype=object)
    out["excluded_reason"] = pd.Series(reason, dtype=object)
    # nothing is read for an event that cannot be placed: the placeholder firm and day above only keep the
    # arrays aligned, so its pair counts are 0, not counts read there
    out.loc[out["excluded_reason"].isin(UNPLACED).to_numpy(), [c for c in ("n_obs", "n_est_obs") if c in out]] = 0
    return out


def options_from_params(params: Mapping[str, Any]) -> dict:
    """Keyword arguments of compute_labels from the ``labels:`` section of a params file.

    The section is checked against the params schema (finlib.core.params.LabelsSection): unknown
    keys (``quantile:`` for ``quantiles:``), missing keys, wrong types and out-of-range values raise
    ConfigError; every key is there after the check, so none needs a default here.
    """
    p = validate_section("labels", params, "params labels")
    mk = p["mackinlay"]
    opts = {
        "window": int(p["window"]),
        "quantiles": tuple(p["quantiles"]),
        "min_event_obs": p["min_event_obs"],
        "estimation_window": int(mk["estimation_window"]),
        "gap": int(mk["gap"]),
        "min_obs": int(mk["min_obs"]),
    }
    return opts
