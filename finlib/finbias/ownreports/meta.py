"""Each report's date and ticker: from a sidecar CSV, a file-name pattern, or the text, rule recorded.

The order is fixed and written next to every value (`date_rule`, `ticker_rule`): a sidecar row is what
the user stated, a file name follows a convention the user named, and the text is a guess read from the
front matter, so the card says which of the three each report's date and ticker came from.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from finlib.finbias.data.validation import DataValidationError, read_table

# "ACME_2024-03-01.pdf", "ACME-20240301.html": ticker, separator, ISO or compact date.
DEFAULT_NAME_PATTERN = r"(?P<ticker>[A-Z][A-Z0-9.]{0,9})[_\- ](?P<date>\d{4}-?\d{2}-?\d{2})"
SIDECAR_COLUMNS = ("file", "ticker", "date")
# How far into a report the text rules look (front matter, not the body's references to other dates).
FRONT_CHARS = 1500

_MONTHS = (
    "jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec|january|february|march|april|june|july|"
    "august|september|october|november|december"
)
TEXT_DATES = (
    re.compile(r"\b(\d{4}-\d{2}-\d{2})\b"),
    re.compile(rf"\b((?:{_MONTHS})\.? \d{{1,2}},? \d{{4}})\b", re.IGNORECASE),
    re.compile(rf"\b(\d{{1,2}} (?:{_MONTHS})\.? \d{{4}})\b", re.IGNORECASE),
)
TEXT_TICKERS = (
    re.compile(r"\b(?:ticker|symbol)\s*[:=]\s*([A-Z][A-Z0-9.]{0,9})\b", re.IGNORECASE),
    re.compile(r"\((?:NYSE|NASDAQ|Nasdaq|AMEX|LSE|TSX|NYSEARCA|OTC)\s*:\s*([A-Z][A-Z0-9.]{0,9})\)"),
    re.compile(r"\(([A-Z]{1,5}(?:\.[A-Z]{1,2})?)\)"),
)


def load_sidecar(path: str | Path) -> pd.DataFrame:
    """A CSV with `file,ticker,date` (more columns allowed: `sector` is used); one row per file name."""
    df = read_table(Path(path))
    missing = [c for c in SIDECAR_COLUMNS if c not in df.columns]
    if missing:
        raise DataValidationError(f"{path}: sidecar lacks column(s) {missing}; found {list(df.columns)}")
    dup = df["file"][df["file"].duplicated()]
    if len(dup):
        raise DataValidationError(f"{path}: row {int(dup.index[0]) + 2}: file {dup.iloc[0]!r} listed twice")
    return df.set_index("file")


def _date(value: str) -> pd.Timestamp | None:
    ts = pd.to_datetime(value, errors="coerce", format="mixed")
    return None if pd.isna(ts) else ts.normalize()


def from_name(name: str, pattern: str) -> tuple[str | None, pd.Timestamp | None]:
    """Ticker and date from a file name by a regex with named groups `ticker` and/or `date`."""
    m = re.search(pattern, name)
    if not m:
        return None, None
    groups = m.groupdict()
    return groups.get("ticker"), _date(groups["date"]) if groups.get("date") else None


def date_in_text(text: str) -> pd.Timestamp | None:
    """The first date written in the front matter (ISO, "March 1, 2024", "1 March 2024")."""
    front = text[:FRONT_CHARS]
    hits = [(m.start(), m.group(1)) for rx in TEXT_DATES for m in rx.finditer(front)]
    for _, value in sorted(hits):
        ts = _date(value)
        if ts is not None:
            return ts
    return None


def ticker_in_text(text: str) -> str | None:
    """A ticker named in the front matter: "Ticker: ACME", "(NASDAQ: ACME)", then "(ACME)"."""
    front = text[:FRONT_CHARS]
    for rx in TEXT_TICKERS:
        m = rx.search(front)
        if m:
            return m.group(1)
    return None


def report_meta(name: str, text: str, sidecar: pd.DataFrame | None, pattern: str | None) -> dict:
    """Ticker, date, sector and the rule that gave each (sidecar > file name > text > missing)."""
    out: dict = {"ticker": None, "date": None, "sector": None, "ticker_rule": "missing", "date_rule": "missing"}
    if sidecar is not None and name in sidecar.index:
        row = sidecar.loc[name]
        if str(row["ticker"]).strip():
            out.update(ticker=str(row["ticker"]).strip(), ticker_rule="sidecar")
        if _date(str(row["date"])) is not None:
            out.update(date=_date(str(row["date"])), date_rule="sidecar")
        if "sector" in sidecar.columns and str(row["sector"]).strip():
            out["sector"] = str(row["sector"]).strip()
    if pattern:
        ticker, date = from_name(name, pattern)
        if out["ticker"] is None and ticker:
            out.update(ticker=ticker, ticker_rule="file name")
        if out["date"] is None and date is not None:
            out.update(date=date, date_rule="file name")
    if out["ticker"] is None and (t := ticker_in_text(text)):
        out.update(ticker=t, ticker_rule="text")
    if out["date"] is None and (d := date_in_text(text)) is not None:
        out.update(date=d, date_rule="text")
    return out
