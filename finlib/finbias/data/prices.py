"""Daily prices for stage 00: a long `date,ticker,adj_close` file, a market series file, or
yfinance (optional extra) with a per-ticker cache that records the date range it covers, so a run
needing a wider range refetches and offline runs fail with what to do instead.

Every loader reads through `finlib.finbias.data.validation` (same row/column error messages as the reports).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from finlib.finbias.data.validation import (
    PRICE_COLUMNS,
    DataSourceError,
    DataValidationError,
    _listing,
    _require_columns,
    _row,
    parse_closes,
    parse_dates,
    read_table,
)


def load_prices(path: str | Path, tickers: list[str] | None = None, nrows: int | None = None
                ) -> tuple[pd.DataFrame, dict]:
    """Long daily adjusted closes (date, ticker, adj_close), validated and sorted.

    Missing closes (gaps in vendor data) are dropped and counted; non-numeric or non-positive
    closes, bad dates and duplicate (ticker, date) rows are errors naming file/row/column.
    """
    path = Path(path)
    df = read_table(path, nrows=nrows)
    _require_columns(df, PRICE_COLUMNS, str(path))
    df = df[list(PRICE_COLUMNS)].reset_index(drop=True)
    if tickers is not None:
        df = df[df["ticker"].astype(str).str.strip().str.upper().isin(set(tickers))].reset_index(drop=False).rename(
            columns={"index": "src_row"})
    else:
        df["src_row"] = np.arange(len(df))
    rows = df["src_row"].to_numpy()
    dates = parse_dates(df["date"], str(path), "date", rows)
    close, blank = parse_closes(df["adj_close"], str(path), "adj_close", rows)
    out = pd.DataFrame({"date": dates, "ticker": df["ticker"].astype(str).str.strip().str.upper(),
                        "adj_close": close, "src_row": rows})
    dup = out.duplicated(["ticker", "date"], keep=False)
    if dup.any():
        first = out[dup].iloc[:2]
        raise DataValidationError(
            f"{path}: duplicate (ticker, date) in columns 'ticker','date': "
            + _listing([f"{r.ticker} {r.date.date()} at row {_row(r.src_row)}" for r in first.itertuples()]))
    notes = {"price_rows": int(len(out)), "missing_adj_close_dropped": int(blank.sum())}
    out = out[~blank.to_numpy()].drop(columns="src_row")
    return out.sort_values(["ticker", "date"], kind="stable").reset_index(drop=True), notes


def load_market(path: str | Path, column: str = "market_close") -> tuple[pd.DataFrame, dict]:
    """A market index series as (date, market_close), from `date,<column>`.

    Empty values (e.g. an index series that ends before the file's other columns) are dropped
    and counted; non-numeric or non-positive values are errors naming the row.
    """
    path = Path(path)
    df = read_table(path)
    _require_columns(df, ("date", column), f"{path} (set data.prices.market_column)")
    dates = parse_dates(df["date"], str(path), "date")
    close, blank = parse_closes(df[column], str(path), column)
    out = pd.DataFrame({"date": dates, "market_close": close})
    if out["date"].duplicated().any():
        i = int(np.flatnonzero(out["date"].duplicated().to_numpy())[0])
        raise DataValidationError(f"{path}: duplicate date in column 'date' at row {_row(i)}")
    out = out[~blank.to_numpy()]
    return out.sort_values("date").reset_index(drop=True), {"market_missing_dropped": int(blank.sum())}


def _cache_range_path(cache_dir: Path, ticker: str) -> Path:
    return cache_dir / f"{ticker}.range.json"


def cached_range(cache_dir: Path, ticker: str) -> tuple[str, str] | None:
    """The [start, end] a cached ticker was downloaded for, or None (no cache, or an old one without
    its range record: it cannot be shown to cover anything, so it is refetched)."""
    import json

    f, r = cache_dir / f"{ticker}.parquet", _cache_range_path(cache_dir, ticker)
    if not (f.is_file() and r.is_file()):
        return None
    rec = json.loads(r.read_text(encoding="utf-8"))
    return str(rec["start"]), str(rec["end"])


def cache_covers(have: tuple[str, str] | None, start: str, end: str) -> bool:
    """Does a download for `have` = (start, end) contain the requested [start, end]?

    Judged on the requested ranges, not on the first/last cached price: a ticker listed after
    `start` never has a price on `start`, and must not be refetched on every run.
    """
    return have is not None and pd.Timestamp(have[0]) <= pd.Timestamp(start) \
        and pd.Timestamp(have[1]) >= pd.Timestamp(end)


def fetch_yfinance_prices(tickers: list[str], start: str, end: str, cache_dir: Path,
                          downloader: Callable | None = None) -> pd.DataFrame:
    """Adjusted closes from yfinance, one cached parquet per ticker under `cache_dir`.

    A cached ticker is reused only when its recorded download range (`<ticker>.range.json`)
    covers [start, end]; otherwise it is downloaded again over the union of both ranges.
    yfinance is optional (`pip install 'finlib[yfinance]'`) and needs network; both failures
    raise DataSourceError saying how to use a local price file instead.
    """
    import json

    cache_dir = Path(cache_dir)
    frames, todo = [], []
    for t in tickers:
        have = cached_range(cache_dir, t)
        if cache_covers(have, start, end):
            frames.append(pd.read_parquet(cache_dir / f"{t}.parquet"))
        else:
            todo.append((t, have))
    if todo:
        if downloader is None:
            try:
                import yfinance  # optional extra
            except ImportError as exc:
                raise DataSourceError(
                    "yfinance is not installed: `pip install 'finlib[yfinance]'`, or set data.prices.path to a "
                    "long date,ticker,adj_close file (CSV/CSV.gz/parquet)") from exc
            downloader = yfinance.download
        cache_dir.mkdir(parents=True, exist_ok=True)
        for t, have in todo:
            lo = min(start, have[0], key=pd.Timestamp) if have else start
            hi = max(end, have[1], key=pd.Timestamp) if have else end
            try:
                raw = downloader(t, start=lo, end=hi, auto_adjust=True, progress=False)
            except Exception as exc:
                raise DataSourceError(
                    f"yfinance download of '{t}' failed ({type(exc).__name__}: {exc}); offline? Set "
                    "data.prices.path to a local long date,ticker,adj_close file instead") from exc
            if raw is None or len(raw) == 0:
                raise DataSourceError(
                    f"yfinance returned no prices for '{t}' ({lo}..{hi}); offline or unknown ticker. "
                    "Set data.prices.path to a local price file instead")
            close = raw["Close"]
            close = close.iloc[:, 0] if isinstance(close, pd.DataFrame) else close
            df = pd.DataFrame({"date": pd.to_datetime(close.index).tz_localize(None).normalize(),
                               "ticker": t, "adj_close": close.to_numpy(dtype="float64")})
            df.to_parquet(cache_dir / f"{t}.parquet", index=False)
            _cache_range_path(cache_dir, t).write_text(json.dumps({"start": lo, "end": hi}), encoding="utf-8")
            frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    out["date"] = out["date"].astype("datetime64[ns]")
    # Only the requested range: what an earlier, wider download cached must not change this run.
    out = out[out["date"].between(pd.Timestamp(start), pd.Timestamp(end))]
    return out.sort_values(["ticker", "date"]).reset_index(drop=True)
