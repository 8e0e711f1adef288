"""Benchmark: finlib.finbias.labels.market_model.compute_labels (vectorised) vs a per-event statsmodels.OLS loop.

Panel: 500 tickers x 10 years of weekdays (2,610 days), built here with numpy (fat-tailed
returns, ~1 % missing price rows); 8,868 events (the size of the Fin-Bias corpus) at
random tickers and dates, some on weekends. Both sides start from the same long
`date, ticker, adj_close` frame and market series. The baseline pivots prices once (its
fairest form), then loops over events: slice the windows, `sm.OLS(y, add_constant(x))`,
and compute alpha, beta, CAR, n_obs exactly as the stage defines them.

The loop is timed on a random subset (default 1,500 events per method) and extrapolated
per event to all 8,868 (`--full` times all of them); the subset is also where the largest
absolute differences are measured. Usage: `python benchmarks/bench_labels.py [--full]`.
The figures go to benchmarks/results/labels.json (benchmarks/results.py) as well as to the terminal.
"""
from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import statsmodels.api as sm

from finlib.finbias.labels.market_model import build_panel, compute_labels, labels_from_panel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import machine, write_result

N_TICKERS, N_EVENTS, WINDOW, L, GAP = 500, 8868, 60, 250, 30


def make_panel(seed: int = 0):
    rng = np.random.default_rng(seed)
    cal = pd.bdate_range("2014-01-01", "2023-12-31")
    T = len(cal)
    rm = 0.0003 + 0.01 * rng.standard_t(4, T) / np.sqrt(2)
    beta = rng.uniform(0.4, 1.8, N_TICKERS)
    r = beta * rm[:, None] + 0.02 * rng.standard_t(5, (T, N_TICKERS)) / np.sqrt(5 / 3)
    p = 30 * np.cumprod(1 + np.clip(r, -0.5, None), axis=0)
    tickers = np.array([f"T{i:03d}" for i in range(N_TICKERS)])
    prices = pd.DataFrame({"date": np.tile(cal.values, N_TICKERS), "ticker": np.repeat(tickers, T),
                           "adj_close": p.T.ravel()})
    prices = prices[rng.random(len(prices)) > 0.01].reset_index(drop=True)
    market = pd.Series(2000 * np.cumprod(1 + rm), index=cal)
    days = rng.integers(L + GAP + 5, T - WINDOW - 5, N_EVENTS)
    dates = cal[days] + pd.to_timedelta(rng.choice([0, 0, 0, 1, 2], N_EVENTS), unit="D")
    events = pd.DataFrame({"report_id": [f"E{i:05d}" for i in range(N_EVENTS)],
                           "ticker": rng.choice(tickers, N_EVENTS), "date": dates})
    return prices, market, events


def pivot_returns(prices: pd.DataFrame, market: pd.Series):
    """The baseline's one-off preparation: a wide return matrix on the market calendar."""
    wide = prices.pivot(index="date", columns="ticker", values="adj_close").reindex(market.index)
    ret = (wide / wide.shift(1) - 1).to_numpy()
    rm = (market / market.shift(1) - 1).to_numpy()
    return ret, rm, {t: i for i, t in enumerate(wide.columns)}, market.index.to_numpy()


def statsmodels_loop(prepared, events: pd.DataFrame, method: str) -> pd.DataFrame:
    """The lean per-event implementation: numpy slices of the pivoted matrix, one OLS fit per event."""
    ret, rm, col, cal = prepared
    out = []
    for ev in events.itertuples(index=False):
        i0 = int(np.searchsorted(cal, np.datetime64(ev.date.normalize()), side="right")) - 1  # day 0: <= date
        k = col[ev.ticker]
        y, x = ret[i0 + 1:i0 + 1 + WINDOW, k], rm[i0 + 1:i0 + 1 + WINDOW]
        ok = np.isfinite(y) & np.isfinite(x)
        y, x = y[ok], x[ok]
        if method == "paper":
            a, b = sm.OLS(y, sm.add_constant(x)).fit().params
            car = WINDOW * float(a)  # Eq. 7: alpha over the window, however many days were valid
        else:
            ey, ex = ret[i0 - GAP - L:i0 - GAP, k], rm[i0 - GAP - L:i0 - GAP]
            eok = np.isfinite(ey) & np.isfinite(ex)
            a, b = sm.OLS(ey[eok], sm.add_constant(ex[eok])).fit().params
            car = float(np.sum(y - a - b * x))
        out.append((ev.report_id, car, a, b, int(ok.sum())))
    return pd.DataFrame(out, columns=["report_id", "car", "alpha", "beta", "n_obs"])


def naive_loop(prices: pd.DataFrame, market: pd.Series, events: pd.DataFrame, method: str) -> pd.DataFrame:
    """The straightforward script: per event, select the ticker's prices with pandas, then OLS."""
    rm_all = market / market.shift(1) - 1
    out = []
    for ev in events.itertuples(index=False):
        firm = prices[prices["ticker"] == ev.ticker].set_index("date")["adj_close"].reindex(market.index)
        ri = firm / firm.shift(1) - 1
        i0 = int(np.searchsorted(market.index, ev.date.normalize(), side="right")) - 1
        w = pd.DataFrame({"y": ri.iloc[i0 + 1:i0 + 1 + WINDOW], "x": rm_all.iloc[i0 + 1:i0 + 1 + WINDOW]}).dropna()
        if method == "paper":
            a, b = sm.OLS(w["y"], sm.add_constant(w["x"])).fit().params
            car = WINDOW * float(a)
        else:
            e = pd.DataFrame({"y": ri.iloc[i0 - GAP - L:i0 - GAP], "x": rm_all.iloc[i0 - GAP - L:i0 - GAP]}).dropna()
            a, b = sm.OLS(e["y"], sm.add_constant(e["x"])).fit().params
            car = float((w["y"] - a - b * w["x"]).sum())
        out.append((ev.report_id, car, float(a), float(b), len(w)))
    return pd.DataFrame(out, columns=["report_id", "car", "alpha", "beta", "n_obs"])


def best_of(fn, reps: int) -> tuple[float, object]:
    best, res = float("inf"), None
    for _ in range(reps):
        t = time.perf_counter()
        res = fn()
        best = min(best, time.perf_counter() - t)
    return best, res


def max_diff(ours: pd.DataFrame, ref: pd.DataFrame) -> tuple[float, int]:
    got = ours.set_index("report_id").loc[ref["report_id"]]
    diff = max(float(np.max(np.abs(got[c].to_numpy() - ref[c].to_numpy()))) for c in ("car", "alpha", "beta"))
    return diff, int((got["n_obs"].to_numpy() != ref["n_obs"].to_numpy()).sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="time the lean statsmodels loop on all events")
    ap.add_argument("--subset", type=int, default=1500, help="events in the timed lean-loop subset")
    ap.add_argument("--naive-subset", type=int, default=100, help="events in the timed naive-loop subset")
    args = ap.parse_args()
    before = machine()
    results: dict = {"events": N_EVENTS, "tickers": N_TICKERS}
    prices, market, events = make_panel()
    E = len(events)
    print(f"panel: {N_TICKERS} tickers x {len(market)} days, {len(prices):,} price rows; {E:,} events")
    n_sub = E if args.full else min(args.subset, E)
    subset = events.sample(n=n_sub, random_state=1) if n_sub < E else events
    naive_sub = events.sample(n=min(args.naive_subset, E), random_state=2)
    t_pivot, prepared = best_of(lambda: pivot_returns(prices, market), reps=3)
    t_panel, panel = best_of(lambda: build_panel(prices, market), reps=3)
    extrap = "all events" if n_sub == E else f"{n_sub:,} events, extrapolated per event to {E:,}"
    print(f"one-off preparation: baseline pivot {t_pivot:.3f} s; finlib build_panel {t_panel:.3f} s")
    ok = True
    for method in ("paper", "mackinlay"):
        kw = dict(window=WINDOW, method=method, estimation_window=L, gap=GAP, min_obs=120)
        t_e2e, ours = best_of(partial(compute_labels, events, prices, market, **kw), reps=5)
        t_hot, hot = best_of(partial(labels_from_panel, events, panel, **kw), reps=5)
        assert ours["excluded_reason"].isna().all(), ours["excluded_reason"].value_counts()
        t_lean, ref = best_of(partial(statsmodels_loop, prepared, subset, method), reps=2)
        lean_all = t_lean / n_sub * E
        t_naive, ref_naive = best_of(partial(naive_loop, prices, market, naive_sub, method), reps=1)
        naive_all = t_naive / len(naive_sub) * E
        d_lean, nd_lean = max_diff(ours, ref)
        d_naive, nd_naive = max_diff(ours, ref_naive)
        d_hot = float(np.nanmax(np.abs(hot["car"].to_numpy() - ours["car"].to_numpy())))
        r_hot, r_e2e, r_naive = lean_all / t_hot, (t_pivot + lean_all) / t_e2e, naive_all / t_e2e
        print(f"[{method}] finlib: {t_hot * 1e3:.0f} ms on a prebuilt panel, {t_e2e * 1e3:.0f} ms end to end "
              f"(long prices in, year buckets included; best of 5) for {E:,} events")
        print(f"[{method}] lean statsmodels loop: {lean_all:.2f} s per {E:,} events ({extrap}) "
              f"+ {t_pivot:.2f} s pivot")
        print(f"[{method}] naive statsmodels loop (pandas selection per event): {naive_all:.1f} s "
              f"({len(naive_sub)} events, extrapolated per event to {E:,})")
        print(f"[{method}] speed ratio: {r_hot:.0f}x (hot path: prebuilt panel vs lean loop on pivoted matrix) | "
              f"{r_e2e:.0f}x (end to end vs pivot + lean loop) | {r_naive:.0f}x (end to end vs naive loop)")
        print(f"[{method}] max abs diff (car, alpha, beta): {d_lean:.2e} vs lean loop ({n_sub:,} events), "
              f"{d_naive:.2e} vs naive loop; n_obs mismatches {nd_lean + nd_naive}; hot vs end to end {d_hot:.1e}")
        met = r_hot >= 50 and max(d_lean, d_naive) <= 1e-10 and nd_lean + nd_naive == 0
        ok &= met
        results[method] = {"hot_path_ms": round(t_hot * 1e3, 1), "end_to_end_ms": round(t_e2e * 1e3, 1),
                           "lean_loop_s": round(lean_all, 3), "naive_loop_s": round(naive_all, 1),
                           "ratio_hot_path": round(r_hot, 1), "ratio_end_to_end": round(r_e2e, 1),
                           "ratio_naive": round(r_naive, 1), "max_abs_diff": max(d_lean, d_naive), "goal_met": met}
        print(f"[{method}] goal (>= 50x on the hot path, diff <= 1e-10): {'MET' if met else 'NOT MET'}; "
              f"end to end vs the lean loop: {'>= 50x' if r_e2e >= 50 else 'below 50x'}")
    print("overall:", "goal met" if ok else "goal NOT met")
    results["goal_met"] = ok
    print("written:", write_result("labels", results, before))


if __name__ == "__main__":
    main()
