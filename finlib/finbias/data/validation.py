"""Reading and checking stage 00's input files: tables in any supported format, required columns
and values, unique ids, dates, closes, sectors, and the conservative text cleaning.

Error policy: bad input raises `DataValidationError` naming the file, the row and the column.
Rows are counted 1-based over data rows (the header is not a row), so "row 3" is the third
record of the file. Kept apart from the loaders (`finlib.finbias.data.stage` for reports,
`finlib.finbias.data.prices` for prices) so each source reads through the same checks.

Cleaning: none by default -- the authors send `clean_content` as it is, tabs, indentation and runs
of spaces included. Each rule of `clean_text` is a named option (`data.text_cleaning`, a list of
`CLEANING_RULES`): common UTF-8-read-as-cp1252 mojibake ("â€™" -> "’"), non-breaking spaces and tabs
to spaces (`nbsp`), zero-width characters and soft hyphens (`invisible`), control characters, words
hyphenated across a line break ("manage-\\nment" -> "management", lowercase on both sides only), and
`whitespace` (blank lines kept as paragraph breaks, runs of spaces collapsed, lines stripped). Single
line breaks are always kept; joining them is the named option `perturb.join_lines`.
"""
from __future__ import annotations

import gzip
import io
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from finlib.core.artifacts import require_columns
from finlib.finbias.vocab import SECTOR_ALIASES, SECTORS

REPORT_COLUMNS: tuple[str, ...] = ("report_id", "ticker", "company", "sector", "date", "text")
REQUIRED_REPORT_COLUMNS: tuple[str, ...] = ("report_id", "ticker", "date", "text")
# Optional: a rating column shipped with the corpus, used only to check the extractor.
OPTIONAL_REPORT_COLUMNS: tuple[str, ...] = ("company", "sector", "analyst_rating")
PRICE_COLUMNS: tuple[str, ...] = ("date", "ticker", "adj_close")


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
    except Exception:  # noqa: BLE001 - the locating parse is best effort; the byte offset is always exact
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
        try:
            df = pd.read_parquet(path, columns=usecols)
        except (pa.ArrowException, OSError) as exc:  # pyarrow's own message names no file
            raise DataValidationError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {exc}); it may "
                                      "be cut short (an interrupted copy or download): copy it again") from exc
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
    """Duplicate report ids would silently merge two reports' labels downstream. Compared as they
    are used (stripped): 'SYN00001' and 'SYN00001 ' are one id."""
    ids = df["report_id"].astype(str).str.strip()
    dup = ids[ids.duplicated(keep=False)]
    if len(dup):
        parts = []
        for rid, idx in dup.groupby(dup, sort=False).groups.items():
            parts.append(f"'{rid}' in rows " + ", ".join(str(_row(i)) for i in idx))
        raise DataValidationError(
            f"{source}: duplicate report_id in column '{_col(df, 'report_id')}': {_listing(parts)}")


UTC_OFFSET = re.compile(r"(?<=\d)(?:Z|[+-]\d{2}:?\d{2})$")  # a time's offset: 'T10:00+08:00', '…Z'
MAX_CLOSE = 1e7  # no listed share trades above this (BRK.A ~ 7e5): a larger close is a unit or parsing error
GAP_MARKERS = frozenset({"nan", "na", "null", "none"})  # missing values as pandas and JSON write them: gaps, like blanks


def _is_number_not_date(value: object) -> bool:
    """A number where a date belongs: an int or float (JSON, Parquet), or a string of digits that is
    not YYYYMMDD (8 digits) -- epoch seconds, milliseconds or days."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float, np.integer, np.floating)):
        return not np.isnan(value)
    return isinstance(value, str) and value.isdigit() and len(value) != 8


def parse_dates(values: pd.Series, source: str, column: str, rows: np.ndarray | None = None) -> pd.Series:
    """Parse dates one format at a time; unparseable or missing values are an error naming the row.

    ``rows``: the source file's positional row of each value, when ``values`` is a subset.
    """
    raw = values.astype(object).reset_index(drop=True)
    rows = np.arange(len(raw)) if rows is None else np.asarray(rows)
    # the calendar date as written: "2020-01-02T01:00+08:00" is 2 January (its UTC date, 1 January,
    # would move event day 0); the offset is dropped, not applied
    raw = raw.map(lambda v: UTC_OFFSET.sub("", v.strip()) if isinstance(v, str) else v)
    numbers = np.flatnonzero(raw.map(_is_number_not_date).to_numpy())
    if len(numbers):  # pandas reads 1609459200 as nanoseconds after 1970: a 1970 date, blamed on the prices
        shown = [raw.iloc[i] if isinstance(raw.iloc[i], str) else raw.iloc[i].item() for i in numbers]
        items = [f"row {_row(rows[i])} ({v!r})" for i, v in zip(numbers, shown, strict=True)]
        raise DataValidationError(f"{source}: a number, not a date, in column '{column}' at {_listing(items)} "
                                  "(epoch seconds or days?): write dates as YYYY-MM-DD")
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
    blank = close.isna() if pd.api.types.is_numeric_dtype(raw) else \
        _blank(raw) | raw.astype(str).str.strip().str.lower().isin(GAP_MARKERS)
    implausible = (~np.isfinite(close) & close.notna()) | (close > MAX_CLOSE)
    for what, mask in (("non-numeric value", close.isna() & ~blank), ("non-positive price", (close <= 0).fillna(False)),
                       (f"implausible price (infinite or above {MAX_CLOSE:g})", implausible.fillna(False))):
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
                "Add the spelling to finlib.finbias.vocab.SECTOR_ALIASES or set data.reports.on_unknown_sector: keep")
        mapped = mapped.where(~unknown, raw.astype(str).str.strip())
        notes["unmapped_sectors_kept"] = {v: int((raw.astype(str).str.strip() == v).sum()) for v in first}
    outside = sorted(set(mapped.dropna()) - set(SECTORS))
    notes["outside_paper_sectors"] = {s: int((mapped == s).sum()) for s in outside}
    return mapped.where(~missing, None), notes


# ---------------------------------------------------------------- cleaning

MOJIBAKE: dict[str, str] = {
    # UTF-8 bytes decoded as cp1252: the most frequent offenders in PDF/HTML extractions.
    "â€™": "\u2019", "â€˜": "\u2018", "â€œ": "\u201c", "â€\u009d": "\u201d",
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


CLEANING_RULES: tuple[str, ...] = ("mojibake", "nbsp", "invisible", "control", "hyphenation", "whitespace")


def clean_text_logged(text: str, rules: Iterable[str] = CLEANING_RULES) -> tuple[str, tuple[str, ...]]:
    """`clean_text` with only `rules` applied, plus the names of those that changed something (for
    the data report)."""
    rules = set(rules)
    unknown = rules - set(CLEANING_RULES)
    if unknown:
        raise ValueError(f"unknown text cleaning rule(s) {sorted(unknown)}; known: {list(CLEANING_RULES)}")
    applied = []
    out = text
    if "mojibake" in rules:
        for bad, good in MOJIBAKE.items():
            if bad in out:
                out = out.replace(bad, good)
                if "mojibake" not in applied:
                    applied.append("mojibake")
    for name, pattern, repl in (("nbsp", _SPACES, " "), ("invisible", _INVISIBLE, ""),
                                ("control", _CONTROL, ""), ("hyphenation", _HYPHEN_BREAK, "")):
        if name not in rules:
            continue
        new = pattern.sub(repl, out)
        if new != out:
            applied.append(name)
            out = new
    if "whitespace" in rules:
        paragraphs = ("\n".join(_RUNS.sub(" ", line).strip() for line in _LINE.split(p)).strip()
                      for p in _PARA.split(out))
        new = "\n\n".join(p for p in paragraphs if p)
        if new != out:
            applied.append("whitespace")
        out = new
    return out, tuple(applied)


def clean_text(text: str, rules: Iterable[str] = CLEANING_RULES) -> str:
    """Conservative cleaning with `rules` (all by default here; stage 00 applies only the ones named
    in `data.text_cleaning`, none by default): fix known mojibake and odd spaces, join hyphenated
    line breaks, keep blank lines as paragraph breaks (the sentence splitter treats them as boundaries)."""
    return clean_text_logged(text, rules)[0]
