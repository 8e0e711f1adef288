"""Stage 00 (home of notebooks/00_data_prep.ipynb): load, validate and clean the inputs.

Sources (params `data.source`):
- `synthetic`   : finlib.finbias.synth generates a seeded market, writes it to
                  `data/raw/synthetic/<run>/`, and it is then read back through the *same*
                  loaders and validation as a real corpus.
- `local`       : reports from a CSV / CSV.gz / parquet / JSONL file (`data.reports.path`).
- `huggingface` : `datasets.load_dataset(data.reports.hf_dataset)` (needs network or a local
                  HF cache; offline -> a clear error saying how to switch to `local`).
Prices come from a long `date,ticker,adj_close` file (`data.prices.path`) or, when that is
null for a real corpus, from yfinance (optional extra, cached under `data/raw/yfinance/` with the
date range each ticker was downloaded for; a run needing a wider range refetches). The market
series comes from `data.prices.market_path` or, when null, dividend-adjusted SPY via yfinance
(`data.prices.market_ticker`). Unknown keys under `data:`, `data.reports:`, `data.prices:` are errors.

Error policy: bad input raises `DataValidationError` naming the file, the row and the
column. Rows are counted 1-based over data rows (the header is not a row), so "row 3" is the
third record of the file. Nothing is dropped silently: reports whose first sentence states no
rating are kept with `analyst_rating = None` and counted in `data_report.json`.

Cleaning (conservative, documented in `clean_text`): common UTF-8-read-as-cp1252 mojibake
("â€™" -> "’"), non-breaking/zero-width spaces, soft hyphens, words hyphenated across a line
break ("manage-\\nment" -> "management", lowercase on both sides only), line breaks inside a
paragraph -> spaces, blank lines kept as paragraph breaks, runs of spaces collapsed.
"""
from __future__ import annotations

import gzip
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from finlib.core.artifacts import require_columns
from finlib.core.config import RunConfig, check_known_keys
from finlib.core.vocab import RATINGS, SECTOR_ALIASES, SECTORS, Rating
from finlib.core.tables import paper_table

REPORT_COLUMNS: tuple[str, ...] = ("report_id", "ticker", "company", "sector", "date", "text")
REQUIRED_REPORT_COLUMNS: tuple[str, ...] = ("report_id", "ticker", "date", "text")
# Optional: a rating column shipped with the corpus, used only to check the extractor.
OPTIONAL_REPORT_COLUMNS: tuple[str, ...] = ("company", "sector", "analyst_rating")
PRICE_COLUMNS: tuple[str, ...] = ("date", "ticker", "adj_close")

# The keys stage 00 reads from params `data:` (a misspelled key is an error, never a silent default).
DATA_KEYS: tuple[str, ...] = ("source", "synthetic", "reports", "prices")
REPORTS_KEYS: tuple[str, ...] = ("path", "hf_dataset", "hf_revision", "hf_split", "columns", "on_unknown_sector")
PRICES_KEYS: tuple[str, ...] = ("path", "market_path", "market_column", "market_ticker", "yfinance_cache")
# The market return is a total return (S&P 500 total-return index or SPY), like the stocks' adjusted
# closes. Without a market file a real run fetches
# SPY with yfinance's auto_adjust (dividends reinvested), not the price-only ^GSPC index.
DEFAULT_MARKET_TICKER = "SPY"


class DataValidationError(ValueError):
    """Input data is malformed; the message names file, row and column."""


class DataSourceError(RuntimeError):
    """A data source cannot be reached (offline, package missing); the message says what to do."""


# ---------------------------------------------------------------- reading files

def _suffix(path: Path) -> str:
    name = path.name.lower()
    for suf in (".csv.gz", ".jsonl.gz", ".parquet", ".csv", ".tsv", ".jsonl", ".json"):
        if name.endswith(suf):
            return suf
    raise DataValidationError(
        f"{path}: unsupported file type; use .csv, .csv.gz, .tsv, .parquet, .jsonl or .jsonl.gz")


def _parse_text(buf: str, suffix: str, **kw: Any) -> pd.DataFrame:
    if suffix in (".csv", ".csv.gz"):
        return pd.read_csv(io.StringIO(buf), dtype=str, keep_default_na=False, **kw)
    if suffix == ".tsv":
        return pd.read_csv(io.StringIO(buf), sep="\t", dtype=str, keep_default_na=False, **kw)
    return pd.read_json(io.StringIO(buf), lines=suffix != ".json", dtype=False, **kw)


def _raw_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.name.lower().endswith(".gz") else data


def _utf8_error(path: Path, raw: bytes, suffix: str, exc: UnicodeDecodeError) -> DataValidationError:
    """Locate a non-UTF-8 byte: offset, line, and (when the file still parses) row and column."""
    off = exc.start
    line = raw.count(b"\n", 0, off) + 1
    where = f"line {line}"
    try:
        df = _parse_text(raw.decode("utf-8", errors="replace"), suffix)
        bad = df.apply(lambda col: col.astype(str).str.contains("\ufffd", regex=False))
        hit = np.argwhere(bad.to_numpy())
        if len(hit):
            r, c = hit[0]
            where = f"row {r + 1}, column '{df.columns[c]}' (line {line})"
    except Exception:  # the locating parse is best effort; the byte offset is always exact
        pass
    snippet = raw[max(0, off - 20): off + 20]
    return DataValidationError(
        f"{path}: not valid UTF-8 at byte offset {off}, {where}: {snippet!r}. "
        "Re-encode the file as UTF-8 (e.g. `iconv -f cp1252 -t utf-8 in.csv > out.csv`).")


def _jsonl_error(path: Path) -> DataValidationError | None:
    """The first bad line of a JSONL file by line number (pandas reports a character offset into
    the whole file, which no editor shows), or None when every line is a JSON object."""
    import json

    text = _raw_bytes(path).decode("utf-8", errors="replace")
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            return DataValidationError(f"{path}: line {n}, column {exc.colno}: invalid JSON ({exc.msg}): "
                                       f"{line[:80]!r}")
        if not isinstance(obj, dict):
            return DataValidationError(f"{path}: line {n}: expected one JSON object per line, got "
                                       f"{type(obj).__name__}: {line[:80]!r}")
    return None


def read_table(path: str | Path, usecols: list[str] | None = None, nrows: int | None = None) -> pd.DataFrame:
    """Read CSV/CSV.gz/TSV/JSONL/parquet; text formats must be UTF-8 (checked, located on failure)."""
    path = Path(path)
    if not path.is_file():
        raise DataValidationError(f"{path}: file not found")
    suffix = _suffix(path)
    if suffix == ".parquet":
        df = pd.read_parquet(path, columns=usecols)
        return df.head(nrows) if nrows else df
    try:
        if suffix in (".csv", ".csv.gz", ".tsv"):
            df = pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",", dtype=str, keep_default_na=False,
                             usecols=usecols, nrows=nrows, encoding="utf-8")
        else:
            df = pd.read_json(path, lines=suffix != ".json", dtype=False, encoding="utf-8", nrows=nrows) \
                if suffix != ".json" else pd.read_json(path, dtype=False, encoding="utf-8")
    except UnicodeDecodeError:
        raw = _raw_bytes(path)
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _utf8_error(path, raw, suffix, exc) from None
        raise
    except (ValueError, TypeError) as exc:  # TypeError: pandas on a JSONL line that is not an object
        if usecols and "Usecols do not match" in str(exc):
            header = pd.read_csv(path, nrows=0).columns.tolist()
            missing = [c for c in usecols if c not in header]
            raise DataValidationError(f"{path}: missing column(s) {missing}; found {header}") from None
        located = _jsonl_error(path) if suffix in (".jsonl", ".jsonl.gz") else None
        raise located or DataValidationError(f"{path}: cannot parse as {suffix}: {exc}") from None
    return df


# ---------------------------------------------------------------- report validation

def _row(i: int) -> int:
    """1-based data-row number of positional index i (the header is not a row)."""
    return int(i) + 1


def _require_columns(df: pd.DataFrame, columns: Iterable[str], source: str) -> None:
    """finlib.core.artifacts.require_columns, raised as this stage's DataValidationError."""
    try:
        require_columns(df, columns, source)
    except ValueError as exc:
        raise DataValidationError(str(exc)) from None


def _listing(items: list[str], limit: int = 5) -> str:
    more = f" (and {len(items) - limit} more)" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def apply_column_mapping(df: pd.DataFrame, mapping: dict[str, str | None], source: str) -> pd.DataFrame:
    """Rename the corpus's columns to ours (mapping `ours: theirs`), validating both sides.

    Unknown keys, unmapped required columns and mapped columns absent from the file are
    errors; an optional column mapped to null becomes all-None (and is reported).
    """
    known = set(REPORT_COLUMNS) | set(OPTIONAL_REPORT_COLUMNS)
    unknown = sorted(set(mapping) - known)
    if unknown:
        raise DataValidationError(
            f"{source}: data.reports.columns has unknown key(s) {unknown}; keys are our names {sorted(known)}")
    out = {}
    for ours in (*REPORT_COLUMNS, "analyst_rating"):
        theirs = mapping.get(ours)
        if theirs is None:
            if ours in REQUIRED_REPORT_COLUMNS:
                raise DataValidationError(
                    f"{source}: required column '{ours}' is not mapped in data.reports.columns "
                    f"(available columns: {list(df.columns)})")
            if ours != "analyst_rating" or "analyst_rating" in mapping:
                out[ours] = pd.Series([None] * len(df), index=df.index, dtype=object)
            continue
        if theirs not in df.columns:
            raise DataValidationError(
                f"{source}: column '{theirs}' (mapped to '{ours}' by data.reports.columns) is missing; "
                f"available columns: {list(df.columns)}")
        out[ours] = df[theirs]
    res = pd.DataFrame(out).reset_index(drop=True)
    res.attrs["source_columns"] = {k: v for k, v in mapping.items() if v is not None}
    return res


def _col(df: pd.DataFrame, ours: str) -> str:
    """The corpus's name of our column, for messages."""
    theirs = df.attrs.get("source_columns", {}).get(ours, ours)
    return theirs if theirs == ours else f"{theirs}' (our '{ours}"


def _blank(s: pd.Series) -> pd.Series:
    return s.isna() | s.astype(str).str.strip().eq("")


def check_required_values(df: pd.DataFrame, source: str) -> None:
    """report_id, ticker and text must be non-empty in every row."""
    for ours in ("report_id", "ticker", "text"):
        bad = np.flatnonzero(_blank(df[ours]).to_numpy())
        if len(bad):
            rows = [f"row {_row(i)}" for i in bad]
            what = "empty text" if ours == "text" else f"empty {ours}"
            raise DataValidationError(f"{source}: {what} in column '{_col(df, ours)}' at {_listing(rows)}")


def check_unique_ids(df: pd.DataFrame, source: str) -> None:
    """Duplicate report ids would silently merge two reports' labels downstream."""
    ids = df["report_id"].astype(str)
    dup = ids[ids.duplicated(keep=False)]
    if len(dup):
        parts = []
        for rid, idx in dup.groupby(dup, sort=False).groups.items():
            parts.append(f"'{rid}' in rows " + ", ".join(str(_row(i)) for i in idx))
        raise DataValidationError(
            f"{source}: duplicate report_id in column '{_col(df, 'report_id')}': {_listing(parts)}")


def parse_dates(values: pd.Series, source: str, column: str, rows: np.ndarray | None = None) -> pd.Series:
    """Parse dates one format at a time; unparseable or missing values are an error naming the row.

    ``rows``: the source file's positional row of each value, when ``values`` is a subset.
    """
    raw = values.astype(object).reset_index(drop=True)
    rows = np.arange(len(raw)) if rows is None else np.asarray(rows)
    parsed = pd.to_datetime(raw, errors="coerce", format="mixed", utc=True)
    bad = np.flatnonzero(parsed.isna().to_numpy())
    if len(bad):
        items = [f"row {_row(rows[i])} ({raw.iloc[i]!r})" for i in bad]
        raise DataValidationError(f"{source}: unparseable date in column '{column}' at {_listing(items)}")
    return parsed.dt.tz_localize(None).dt.normalize().astype("datetime64[ns]")


def parse_closes(values: pd.Series, source: str, column: str,
                 rows: np.ndarray | None = None) -> tuple[pd.Series, pd.Series]:
    """Closing prices as float64 and a mask of blank values (vendor gaps, dropped and counted by
    the caller); non-numeric or non-positive values are errors naming the row."""
    raw = values.reset_index(drop=True)
    rows = np.arange(len(raw)) if rows is None else np.asarray(rows)
    close = pd.to_numeric(raw, errors="coerce")
    blank = close.isna() if pd.api.types.is_numeric_dtype(raw) else _blank(raw)
    for what, mask in (("non-numeric value", close.isna() & ~blank), ("non-positive price", (close <= 0).fillna(False))):
        if mask.any():
            items = [f"row {_row(rows[i])} ({raw.iloc[i]!r})" for i in np.flatnonzero(mask.to_numpy())]
            raise DataValidationError(f"{source}: {what} in column '{column}' at {_listing(items)}")
    return close.astype("float64"), blank


def canonical_sector(value: Any) -> str | None:
    """The paper's Yahoo-style sector name for a corpus spelling, or None when unknown."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    v = str(value).strip()
    if v in SECTORS:
        return v
    return SECTOR_ALIASES.get(v.lower())


def map_sectors(df: pd.DataFrame, source: str, on_unknown: str = "error") -> tuple[pd.Series, dict]:
    """Map sectors via SECTOR_ALIASES; unmapped spellings are an error (or kept and reported)."""
    raw = df["sector"]
    mapped = raw.map(canonical_sector)
    missing = _blank(raw)
    unknown = mapped.isna() & ~missing
    notes: dict[str, Any] = {"missing_sector": int(missing.sum())}
    if unknown.any():
        first = {}
        for i in np.flatnonzero(unknown.to_numpy()):
            first.setdefault(str(raw.iloc[i]), _row(i))
        if on_unknown == "error":
            items = [f"'{v}' (first at row {r})" for v, r in first.items()]
            raise DataValidationError(
                f"{source}: unknown sector in column '{_col(df, 'sector')}': {_listing(items)}. "
                "Add the spelling to finlib.core.vocab.SECTOR_ALIASES or set data.reports.on_unknown_sector: keep")
        mapped = mapped.where(~unknown, raw.astype(str).str.strip())
        notes["unmapped_sectors_kept"] = {v: int((raw.astype(str).str.strip() == v).sum()) for v in first}
    outside = sorted(set(mapped.dropna()) - set(SECTORS))
    notes["outside_paper_sectors"] = {s: int((mapped == s).sum()) for s in outside}
    return mapped.where(~missing, None), notes


# ---------------------------------------------------------------- cleaning

MOJIBAKE: dict[str, str] = {
    # UTF-8 bytes decoded as cp1252: the most frequent offenders in PDF/HTML extractions.
    "â€™": "\u2019", "â€˜": "\u2018", "â€œ": "\u201c", "â€\u009d": "\u201d", "â€\x9d": "\u201d",
    "â€“": "\u2013", "â€”": "\u2014", "â€¦": "\u2026", "â€¢": "\u2022", "Ã©": "é", "Ã¨": "è",
    "Ã¼": "ü", "Ã¶": "ö", "Ã¤": "ä", "Â\u00a0": " ", "Â£": "£", "Â€": "€", "Â®": "®", "Â©": "©",
}
_SPACES = re.compile("[\u00a0\u2007\u202f\u2009\u200a\t\f\v]")
_INVISIBLE = re.compile("[\u200b\u200c\u200d\u2060\ufeff\u00ad]")
# NUL and other C0/C1 control characters (tab, newline, CR, VT, FF are whitespace, handled above/below):
# never meaningful in a report, and a NUL cuts some servers' prompts; removed, counted as "control"
_CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f]")
_HYPHEN_BREAK = re.compile(r"(?<=[a-z])-[ \t]*\r?\n[ \t]*(?=[a-z])")
_PARA = re.compile(r"[ \t]*(?:\r?\n[ \t]*){2,}")
_LINE = re.compile(r"[ \t]*\r?\n[ \t]*")
_RUNS = re.compile(r" {2,}")


def clean_text_logged(text: str) -> tuple[str, tuple[str, ...]]:
    """`clean_text` plus the names of the rules that changed something (for the data report)."""
    applied = []
    out = text
    for bad, good in MOJIBAKE.items():
        if bad in out:
            out = out.replace(bad, good)
            if "mojibake" not in applied:
                applied.append("mojibake")
    for name, pattern, repl in (("nbsp", _SPACES, " "), ("invisible", _INVISIBLE, ""),
                                ("control", _CONTROL, ""), ("hyphenation", _HYPHEN_BREAK, "")):
        new = pattern.sub(repl, out)
        if new != out:
            applied.append(name)
            out = new
    paragraphs = (_RUNS.sub(" ", _LINE.sub(" ", p)).strip() for p in _PARA.split(out))
    new = "\n\n".join(p for p in paragraphs if p)
    if new != out:
        applied.append("whitespace")
    return new, tuple(applied)


def clean_text(text: str) -> str:
    """Conservative cleaning: fix known mojibake and odd spaces, join hyphenated line breaks,
    keep blank lines as paragraph breaks (the sentence splitter treats them as boundaries)."""
    return clean_text_logged(text)[0]


# ---------------------------------------------------------------- reports: load + validate

def validate_reports(df: pd.DataFrame, source: str, on_unknown_sector: str = "error") -> tuple[pd.DataFrame, dict]:
    """Validate and normalise mapped reports; returns the frame (contract dtypes) and notes."""
    check_required_values(df, source)
    check_unique_ids(df, source)
    dates = parse_dates(df["date"], source, _col(df, "date"))
    sectors, notes = map_sectors(df, source, on_unknown_sector)
    out = pd.DataFrame({
        "report_id": df["report_id"].astype(str).str.strip(),
        "ticker": df["ticker"].astype(str).str.strip().str.upper(),
        "company": pd.Series([None if v is None or pd.isna(v) else str(v).strip() for v in df["company"]],
                             dtype=object),
        "sector": sectors.astype(object),
        "date": dates,
        "text": df["text"].astype(str),
    })
    if "analyst_rating" in df.columns:
        out["given_rating"] = df["analyst_rating"]
    # Rows stay in file order (nothing filtered), so later errors can still name file, row and column.
    out.attrs.update(source=source, source_columns=dict(df.attrs.get("source_columns", {})))
    return out, notes


def extract_ratings(texts: pd.Series) -> pd.Series:
    """Analyst rating from each first sentence via the stage-02 extractor (None = not stated)."""
    from finlib.finbias.perturb import extract_analyst_rating  # stage 02 owns the extraction policy

    found = [extract_analyst_rating(t) for t in texts]
    return pd.Series([None if r is None else Rating(r).value for r in found], index=texts.index, dtype=object)


def clean_reports(reports: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """Clean every text; count reports per cleaning rule. Texts empty after cleaning are an error."""
    logged = reports["text"].map(clean_text_logged)
    out = reports.copy()
    out["text"] = logged.map(lambda x: x[0])
    counts: dict[str, int] = {}
    for rules in logged.map(lambda x: x[1]):
        for r in rules:
            counts[r] = counts.get(r, 0) + 1
    return out, counts


def check_text_after_cleaning(reports: pd.DataFrame) -> None:
    """A text made only of invisible characters passes validation but is empty once cleaned: an error
    naming the source file, the data row and the corpus's text column (set by `validate_reports`)."""
    empty = np.flatnonzero(_blank(reports["text"]).to_numpy())
    if len(empty):
        source = reports.attrs.get("source", "reports")
        rows = [f"row {_row(i)} (report_id {reports['report_id'].iloc[i]!r})" for i in empty]
        raise DataValidationError(
            f"{source}: text empty after cleaning (only invisible/space characters) in column "
            f"'{_col(reports, 'text')}' at {_listing(rows)}")


def load_reports_file(path: str | Path, columns: dict[str, str | None], on_unknown_sector: str = "error"
                      ) -> tuple[pd.DataFrame, dict]:
    """Reports from a local file, mapped and validated (errors name file, row and column)."""
    path = Path(path)
    df = read_table(path)
    mapped = apply_column_mapping(df, columns, str(path))
    return validate_reports(mapped, str(path), on_unknown_sector)


def load_reports_hf(dataset: str, split: str, columns: dict[str, str | None],
                    on_unknown_sector: str = "error", loader: Callable | None = None,
                    revision: str | None = None) -> tuple[pd.DataFrame, dict]:
    """Reports from the Hugging Face hub (or its local cache) at a pinned `revision` (a commit of the
    dataset repository: the corpus cannot change under a run); offline -> DataSourceError with advice."""
    if loader is None:
        try:
            from datasets import load_dataset as loader  # optional extra: finlib[train]
        except ImportError as exc:
            raise DataSourceError(
                "the `datasets` package is not installed: `pip install 'finlib[train]'`, or download the "
                "corpus elsewhere and set data.source: local with data.reports.path") from exc
    try:
        ds = loader(dataset, split=split, **({"revision": revision} if revision else {}))
    except Exception as exc:
        raise DataSourceError(
            f"could not load Hugging Face dataset '{dataset}' (split '{split}'): {type(exc).__name__}: {exc}. "
            "If this machine is offline, run `datasets.load_dataset(...)[split].to_parquet('reports.parquet')` "
            "where the hub is reachable, copy the file under data/raw/, and set data.source: local and "
            "data.reports.path to it.") from exc
    df = ds.to_pandas() if hasattr(ds, "to_pandas") else pd.DataFrame(ds)
    source = f"hf://{dataset}@{revision or 'unpinned'}[{split}]"
    return validate_reports(apply_column_mapping(df, columns, source), source, on_unknown_sector)


# ---------------------------------------------------------------- prices

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


# ---------------------------------------------------------------- stage entry point

@dataclass
class DataReport:
    """What stage 00 produced: the four frames and the counts written to data_report.json."""

    reports: pd.DataFrame
    prices: pd.DataFrame
    market: pd.DataFrame
    truth: pd.DataFrame | None
    summary: dict[str, Any] = field(default_factory=dict)
    paths: dict[str, Path] = field(default_factory=dict)


def data_params(cfg: RunConfig) -> dict:
    """The `data:` section, its `reports:` and `prices:` sub-sections checked for unknown keys.

    (`data.synthetic` is checked by finlib.finbias.synth.SynthParams.from_section.)
    """
    d = cfg.section("data", known=DATA_KEYS)
    where = f"{cfg.params_file}: data"
    for name, known in (("reports", REPORTS_KEYS), ("prices", PRICES_KEYS)):
        sub = d.get(name)
        if sub is not None:
            if not isinstance(sub, dict):
                raise DataValidationError(f"{where}.{name} must be a mapping, got {type(sub).__name__}")
            check_known_keys(sub, known, f"{where}.{name}")
    return d


def _synthetic_inputs(cfg: RunConfig, d: dict) -> tuple[pd.DataFrame, dict, pd.DataFrame, dict, pd.DataFrame,
                                                       pd.DataFrame]:
    """Generate the synthetic market into data/raw/synthetic/<run>/ (once per params and seed), read it back."""
    from finlib.finbias.synth_corpus import cached_market

    raw = cached_market(d.get("synthetic", {}), cfg.seed, cfg.raw_dir / "synthetic" / cfg.name)
    ident = {c: c for c in (*REPORT_COLUMNS, "analyst_rating")}
    reports, notes = load_reports_file(raw["reports"], ident)
    prices, pnotes = load_prices(raw["prices"])
    mkt, mnotes = load_market(raw["market"], "market_close")
    return reports, notes, prices, {**pnotes, **mnotes}, mkt, pd.read_parquet(raw["truth"])


def _real_inputs(cfg: RunConfig, d: dict, source: str) -> tuple[pd.DataFrame, dict, pd.DataFrame, dict,
                                                                pd.DataFrame]:
    rp, pp = d.get("reports") or {}, d.get("prices") or {}
    cols, on_unknown = rp.get("columns", {}), rp.get("on_unknown_sector", "error")
    if source == "local":
        if not rp.get("path"):
            raise DataSourceError("data.source is 'local' but data.reports.path is not set")
        reports, notes = load_reports_file(cfg.path(rp["path"]), cols, on_unknown)
    elif source == "huggingface":
        reports, notes = load_reports_hf(rp["hf_dataset"], rp.get("hf_split", "train"), cols, on_unknown,
                                         revision=rp.get("hf_revision"))
    else:
        raise DataSourceError(f"data.source must be synthetic, local or huggingface, got {source!r}")
    tickers = sorted(reports["ticker"].unique())
    start = (reports["date"].min() - pd.Timedelta(days=600)).date().isoformat()
    end = (reports["date"].max() + pd.Timedelta(days=180)).date().isoformat()
    cache = cfg.path(pp.get("yfinance_cache", "data/raw/yfinance"))
    if pp.get("path"):
        prices, pnotes = load_prices(cfg.path(pp["path"]), tickers=tickers)
    else:
        prices = fetch_yfinance_prices(tickers, start, end, cache)
        pnotes = {"price_rows": int(len(prices)), "source": "yfinance"}
    if pp.get("market_path"):
        mkt, mnotes = load_market(cfg.path(pp["market_path"]), pp.get("market_column", "market_close"))
        pnotes = {**pnotes, **mnotes, "market_source": str(pp["market_path"])}
    else:
        ticker = pp.get("market_ticker") or DEFAULT_MARKET_TICKER
        m = fetch_yfinance_prices([ticker], start, end, cache)
        mkt = m.rename(columns={"adj_close": "market_close"})[["date", "market_close"]]
        pnotes = {**pnotes, "market_source": f"yfinance {ticker} (auto_adjust: dividends reinvested)"}
    return reports, notes, prices, pnotes, mkt


def summarise(reports: pd.DataFrame, prices: pd.DataFrame, market: pd.DataFrame, notes: dict) -> dict:
    """Counts for data_report.json: sizes, missing ratings, coverage, cleaning, exclusions."""
    no_rating = reports["analyst_rating"].isna()
    priced = set(prices["ticker"].unique())
    no_prices = ~reports["ticker"].isin(priced)
    return {
        "n_reports": int(len(reports)),
        "n_tickers": int(reports["ticker"].nunique()),
        "date_range": [str(reports["date"].min().date()), str(reports["date"].max().date())],
        "rating_counts": {r.value: int((reports["analyst_rating"] == r.value).sum()) for r in RATINGS},
        "no_rating_in_first_sentence": int(no_rating.sum()),
        "no_rating_report_ids": reports.loc[no_rating, "report_id"].head(50).tolist(),
        "reports_without_prices": int(no_prices.sum()),
        "reports_without_prices_ids": reports.loc[no_prices, "report_id"].head(50).tolist(),
        "price_rows": int(len(prices)), "price_tickers": int(len(priced)),
        "market_days": int(len(market)),
        "market_range": [str(market["date"].min().date()), str(market["date"].max().date())],
        "excluded": {"reports": {},
                     "prices": {"missing_adj_close": int(notes.get("missing_adj_close_dropped", 0))},
                     "market": {"missing_value": int(notes.get("market_missing_dropped", 0))}},
        **{k: v for k, v in notes.items() if k not in ("missing_adj_close_dropped", "market_missing_dropped")},
    }


def prepare_data(cfg: RunConfig, write: bool = True) -> DataReport:
    """Stage 00: load (or generate), validate, clean, extract ratings, write the artifacts."""
    from finlib.core import artifacts

    d = data_params(cfg)
    source = "synthetic" if cfg.is_synthetic else d["source"]
    truth = None
    if source == "synthetic":
        reports, notes, prices, pnotes, market, truth = _synthetic_inputs(cfg, d)
    else:
        reports, notes, prices, pnotes, market = _real_inputs(cfg, d, source)
    reports, cleaning = clean_reports(reports)
    check_text_after_cleaning(reports)
    reports["analyst_rating"] = extract_ratings(reports["text"]).astype(object)
    agreement = None
    if "given_rating" in reports.columns:
        given = reports["given_rating"].map(lambda v: None if v is None or pd.isna(v) else str(v).strip().lower())
        found = reports["analyst_rating"]
        agreement = {"given_vs_extracted_agree": int((given == found).sum()),
                     "given_vs_extracted_disagree": int(((given != found) & found.notna()).sum()),
                     "given_but_not_extracted": int((given.notna() & found.isna()).sum())}
        reports = reports.drop(columns="given_rating")
    reports = reports[["report_id", "ticker", "company", "sector", "date", "text", "analyst_rating"]]
    summary = summarise(reports, prices, market, {**notes, **pnotes})
    summary.update(source=source, cleaning=cleaning, synthetic=source == "synthetic")
    if agreement:
        summary["rating_extraction_check"] = agreement
    rep = DataReport(reports=reports, prices=prices, market=market, truth=truth, summary=summary)
    if write:
        for name in ("reports", "prices", "market"):
            rep.paths[name] = artifacts.write_frame(cfg, name, getattr(rep, name))
        if truth is not None:
            rep.paths["truth"] = artifacts.write_frame(cfg, "truth", truth)
        rep.paths["data_report"] = artifacts.write_json(cfg, "data_report", summary)
    return rep


# ---------------------------------------------------------------- tables 2 and 3

def sector_table(reports: pd.DataFrame) -> pd.DataFrame:
    """Table 2: reports per sector (ours) beside the paper's counts and shares."""
    paper = paper_table("finbias_table2").set_index("sector")
    counts = reports["sector"].fillna("(missing)").value_counts()
    order = [s for s in paper.index if s != "Total"] + sorted(set(counts.index) - set(paper.index))
    total = int(len(reports))
    df = pd.DataFrame({"sector": order})
    df["num"] = df["sector"].map(counts).fillna(0).astype(int)
    df["percentage"] = (100.0 * df["num"] / total).round(2) if total else np.nan
    df["paper_num"] = df["sector"].map(paper["num"]).astype("Int64")
    df["paper_percentage"] = df["sector"].map(paper["percentage"]).astype(float)
    tot = pd.DataFrame({"sector": ["Total"], "num": [total], "percentage": [100.0 if total else np.nan],
                        "paper_num": pd.array([int(paper.loc["Total", "num"])], dtype="Int64"),
                        "paper_percentage": [float(paper.loc["Total", "percentage"])]})
    return pd.concat([df, tot], ignore_index=True)


TABLE3_UNRATED = {"analyst": "No rating in first sentence", "return_based": "Excluded (no label)"}


def table3_half(ratings: pd.Series, source: str) -> pd.DataFrame:
    """One half of Fin-Bias Table 3 (``source`` "analyst" or "return_based"), ours beside the paper's.

    Rows in the paper's order, then Total; shares (%, 2 decimals) are over the rated items, as
    the paper's are (all its reports are rated). Items without a rating are counted on their own
    row after Total, without a share and without a paper value (the paper reports none).
    """
    paper = paper_table("finbias_table3")
    paper = paper[paper["source"] == source].set_index("rating")
    if paper.empty:
        raise ValueError(f"table3_half: unknown source {source!r}; known: {sorted(TABLE3_UNRATED)}")
    rated = ratings.dropna()
    n = int(len(rated))
    rows = [{"rating": name, "num": int((rated == name.lower()).sum()),
             "paper_num": int(paper.loc[name, "num"]), "paper_percentage": float(paper.loc[name, "percentage"])}
            for name in paper.index if name != "Total"]
    rows.append({"rating": "Total", "num": n, "paper_num": int(paper["num"].drop("Total", errors="ignore").sum()),
                 "paper_percentage": 100.0})
    df = pd.DataFrame(rows)
    df.insert(2, "percentage", (100.0 * df["num"] / n).round(2) if n else np.nan)
    unrated = pd.DataFrame({"rating": [TABLE3_UNRATED[source]], "num": [int(ratings.isna().sum())],
                            "percentage": [np.nan], "paper_num": [None], "paper_percentage": [np.nan]})
    df = pd.concat([df, unrated], ignore_index=True)
    df["paper_num"] = df["paper_num"].astype("Int64")
    return df


def analyst_rating_table(reports: pd.DataFrame) -> pd.DataFrame:
    """Table 3 (analyst half): the first-sentence analyst ratings beside the paper's."""
    return table3_half(reports["analyst_rating"], "analyst")


def example_report(reports: pd.DataFrame, rating: str = "bullish") -> pd.Series:
    """A report to show in the notebook (the first with the given analyst rating, else the first)."""
    hit = reports[reports["analyst_rating"] == rating]
    return (hit if len(hit) else reports).iloc[0]


def example_markdown(row: pd.Series, max_words: int = 250) -> str:
    """A report rendered for the notebook: header line, then the first `max_words` words."""
    words = row["text"].split(" ")
    body = " ".join(words[:max_words]) + (" …" if len(words) > max_words else "")
    return (f"**{row['report_id']}** · {row['company']} ({row['ticker']}) · {row['sector']} · "
            f"{pd.Timestamp(row['date']).date()} · analyst rating: **{row['analyst_rating']}**\n\n> "
            + body.replace("\n\n", "\n>\n> "))


def run_line(cfg: RunConfig) -> str:
    """Notebook 00's first output: which run, source and seed, and where the artifacts go."""
    data_params(cfg)  # a misspelled key fails here, before anything runs
    source = "synthetic" if cfg.is_synthetic else cfg["data"]["source"]
    return f"run {cfg.name!r}, source {source!r}, seed {cfg.seed}, artifacts -> {cfg.processed_dir}"


def summary_table(summary: dict) -> pd.DataFrame:
    """The scalar counts of data_report.json as a two-column table for display."""
    rows: list[tuple[str, Any]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif not isinstance(value, list):
            rows.append((prefix, value))
        elif prefix.endswith("range"):
            rows.append((prefix, " .. ".join(map(str, value))))

    walk("", summary)
    return pd.DataFrame(rows, columns=["count", "value"]).astype({"value": str})


def synthetic_checks(rep: DataReport) -> pd.DataFrame:
    """Does the synthetic corpus carry the paper's analyst-rating skew? Shares of first-sentence ratings.

    (Whether the planted return signal is recoverable is checked once, by the labels stage:
    ``labels_report.json["synthetic_recovery"]``.)
    """
    if rep.truth is None:
        return pd.DataFrame(columns=["check", "value", "target"])
    share = rep.reports["analyst_rating"].value_counts(normalize=True)
    rows = [
        ("share bullish", float(share.get("bullish", 0.0)), "~0.72"),
        ("share neutral", float(share.get("neutral", 0.0)), "~0.25"),
        ("share bearish", float(share.get("bearish", 0.0)), "a few %"),
    ]
    return pd.DataFrame(rows, columns=["check", "value", "target"])
