"""A folder of the user's reports -> the reports table and the files left out, each with its reason.

Nothing is dropped silently: every file (or table row) is either a report or an exclusion row naming the
file, the reason ("encrypted", "no text layer", "no readable rating", "no date", ...) and a detail; the card
prints both counts and the list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from finlib.finbias.data.validation import DataValidationError, read_table
from finlib.finbias.ownreports.extract import PDF_LIBRARY, Unreadable, file_pages
from finlib.finbias.ownreports.meta import DEFAULT_NAME_PATTERN, load_sidecar, report_meta
from finlib.finbias.ownreports.pages import clean_pages
from finlib.finbias.perturb.ratings import extract_analyst_rating, rating_of_sentence

DOCUMENT_SUFFIXES = (".pdf", ".html", ".htm", ".txt", ".md")
TABLE_SUFFIXES = (".csv", ".parquet", ".jsonl")
REPORT_COLUMNS = (
    "report_id",
    "ticker",
    "date",
    "sector",
    "text",
    "analyst_rating",
    "source_file",
    "ticker_rule",
    "date_rule",
    "rating_rule",
    "front_matter",
    "pages",
    "running_lines_removed",
    "hyphens_joined",
)
# How many lines of front matter (date, firm, analyst names) may stand above the rating statement.
FRONT_MATTER_LINES = 12
EXCLUSION_COLUMNS = ("source_file", "reason", "detail")


@dataclass
class OwnReports:
    """What a folder gave: usable reports, the exclusions, and the rules used (for the card's notes)."""

    reports: pd.DataFrame
    exclusions: pd.DataFrame
    rules: dict = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """Reports kept and, per reason, reports left out."""
        return {
            "reports": int(len(self.reports)),
            **{f"excluded: {k}": int(v) for k, v in self.exclusions["reason"].value_counts().items()},
        }


def rating_statement(text: str) -> tuple[str | None, str, str]:
    """(rating, text from the rating statement on, front matter above it).

    The conditions the card compares (with, without and with a fake rating) act on a report's first sentence,
    as in the paper's corpus. A report whose first sentence states the rating is used whole; otherwise the
    first of the top FRONT_MATTER_LINES lines that states one starts the text and the lines above it (date,
    firm, authors) are kept apart in `front_matter`, shown in the card, not sent to the model.
    """
    rating = extract_analyst_rating(text)
    if rating is not None:
        return rating, text, ""
    lines = text.split("\n")
    for i, line in enumerate(lines[:FRONT_MATTER_LINES]):
        found = rating_of_sentence(line)
        if found is not None:
            return found, "\n".join(lines[i:]), "\n".join(lines[:i])
    return None, text, ""


def _row(source: str, report_id: str, text: str, meta: dict, stats: dict) -> tuple[dict | None, dict | None]:
    """A report row, or an exclusion when the text states no rating or no date can be found."""
    rating, body, front = rating_statement(text)
    if rating is None:
        first = text.strip().split("\n", 1)[0][:80]
        return None, {"source_file": source, "reason": "no readable rating", "detail": f"first line: {first!r}"}
    if meta["date"] is None:
        return None, {
            "source_file": source,
            "reason": "no date",
            "detail": "not in a sidecar row, the file name pattern or the front matter",
        }
    ticker = meta["ticker"] or f"?{report_id}"  # no ticker: the report is its own cluster, rule "missing"
    return {
        "report_id": report_id,
        "ticker": ticker,
        "date": meta["date"],
        "sector": meta["sector"],
        "text": body,
        "analyst_rating": rating,
        "source_file": source,
        "ticker_rule": meta["ticker_rule"],
        "date_rule": meta["date_rule"],
        "rating_rule": "front-matter line" if front else "first sentence",
        "front_matter": front,
        **stats,
    }, None


def _document(path: Path, root: Path, sidecar, pattern, pdf_library) -> tuple[dict | None, dict | None]:
    name = str(path.relative_to(root))
    try:
        pages = file_pages(path, pdf_library)
    except Unreadable as exc:
        return None, {"source_file": name, "reason": exc.reason, "detail": exc.detail}
    text, stats = clean_pages(pages)
    if not text.strip():
        return None, {"source_file": name, "reason": "empty text", "detail": f"{len(pages)} page(s)"}
    meta = report_meta(path.name, text, sidecar, pattern)
    return _row(name, path.stem, text, meta, {"pages": len(pages), **stats})


def _given(value: object) -> bool:
    """A table cell holds a value: not None, NaN, NaT or blank. A JSONL record without a key and a Parquet
    null both arrive as missing; as text they would read "nan" (a ticker, an id) and must not."""
    if value is None or (not isinstance(value, str) and bool(pd.isna(value))):
        return False
    return bool(str(value).strip())


def _table(path: Path, root: Path, text_column: str) -> tuple[list[dict], list[dict]]:
    """Rows of a CSV/Parquet/JSONL file with a text column; `ticker`, `date`, `sector`, `report_id` used if present."""
    df = read_table(path)
    if text_column not in df.columns:
        raise DataValidationError(f"{path}: no text column {text_column!r}; found {list(df.columns)}")
    name, rows, left = str(path.relative_to(root)), [], []
    for i, rec in enumerate(df.to_dict("records")):
        source = f"{name} row {i + 2 if path.suffix == '.csv' else i + 1}"
        text = str(rec[text_column]) if _given(rec.get(text_column)) else ""
        if not text.strip():
            left.append({"source_file": source, "reason": "empty text", "detail": f"column {text_column!r}"})
            continue
        meta = report_meta("", text, None, None)
        for col in ("ticker", "date", "sector"):
            value = rec.get(col)
            if _given(value) and not (
                col == "date" and pd.isna(pd.to_datetime(value, errors="coerce", format="mixed"))
            ):
                meta[col] = pd.to_datetime(value, format="mixed").normalize() if col == "date" else str(value)
                if col != "sector":
                    meta[f"{col}_rule"] = "column"
        rid = str(rec["report_id"]) if _given(rec.get("report_id")) else f"{path.stem}-{i + 1}"
        row, out = _row(
            source, rid, text.replace("\r\n", "\n"), meta, {"pages": 1, "running_lines_removed": 0, "hyphens_joined": 0}
        )
        (rows if row else left).append(row or out)
    return rows, left


def read_folder(
    folder: str | Path,
    sidecar: str | Path | None = None,
    name_pattern: str | None = DEFAULT_NAME_PATTERN,
    text_column: str = "text",
    pdf_library: str = PDF_LIBRARY,
) -> OwnReports:
    """Every report file under `folder` (recursively, in name order) read into one table."""
    root = Path(folder)
    if not root.is_dir():
        raise DataValidationError(f"{root}: reports folder not found")
    side_path = Path(sidecar) if sidecar else None
    side = load_sidecar(side_path) if side_path else None
    rows, left = [], []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if side_path and path.resolve() == side_path.resolve():
            continue
        suffix = path.suffix.lower()
        if suffix in TABLE_SUFFIXES:
            r, x = _table(path, root, text_column)
            rows += r
            left += x
        elif suffix in DOCUMENT_SUFFIXES:
            r1, x1 = _document(path, root, side, name_pattern, pdf_library)
            rows += [r1] if r1 else []
            left += [x1] if x1 else []
        else:
            left.append(
                {
                    "source_file": str(path.relative_to(root)),
                    "reason": "unsupported file type",
                    "detail": suffix or "no suffix",
                }
            )
    reports = pd.DataFrame(rows, columns=list(REPORT_COLUMNS))
    dup = reports["report_id"][reports["report_id"].duplicated()]
    if len(dup):
        raise DataValidationError(f"{root}: report id {dup.iloc[0]!r} given by two files; rename one")
    rules = {
        "sidecar": str(side_path) if side_path else None,
        "name_pattern": name_pattern,
        "text_column": text_column,
        "pdf_library": pdf_library,
    }
    return OwnReports(reports, pd.DataFrame(left, columns=list(EXCLUSION_COLUMNS)), rules)
