"""Check that every "ours" number of a paper-vs-ours comparison is the number our own table prints.

The comparisons (`finlib.core.compare`, stage 06) and our Tables 4-8 (stages 04 and 05) are
written by different code from the same metrics artifact; if the two ever read different
statistics (e.g. a parsed-only rate beside an Eq. 1 table) the comparison reports a gap the
table does not have. This check reads both *written* tables back from disk and compares them
cell by cell, so it shares no code path with either writer beyond the files themselves.

Matching: a comparison row "<paper model> | <sector>" in column C is our table's row whose
`Model` (the paper's row name, a mode suffix removed) is that paper model, in the sector column
("Average" = our pooled column) and, for "with/without" cells, the part of C in the table's
`paper_columns`. When a model was run both ways, the comparison uses the generated answers
(the paper's protocol), so the " [generate]" row is taken. Table cells carry the paper's
decimals, so a cell agrees when |comparison - table| <= half a unit of the last printed digit.
Table 8 (stage 05's `table8_accuracy_dpo`) is checked when the run has it: the DPO rows of the
generated-answers measure, matched through the registry's `paper_name`.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from finlib.core.tables import read_table_csv
from finlib.finbias.vocab import POOLED

COMPARISON_FILE = "paper_vs_ours_{key}.csv"
TABLE8_FILE = "table8_accuracy_dpo.csv"
CHECK_COLUMNS = ["table", "row", "column", "comparison", "table_cell", "tolerance", "agrees", "note"]
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?")


def cell_number(cell: object, part: int) -> float:
    """The `part`-th number of a printed cell ("82.0/70.2**" -> 82.0 or 70.2; "–", "skipped",
    blank -> NaN)."""
    if cell is None or (isinstance(cell, float) and np.isnan(cell)):
        return np.nan
    parts = str(cell).split("/")
    if part >= len(parts):
        return np.nan
    m = _NUMBER.match(parts[part].strip())
    return float(m.group(0)) if m else np.nan


def _row_for(ours: pd.DataFrame, paper_model: str) -> pd.Series | None:
    """Our table row for a paper model: its `Model` without a mode suffix equals the paper's name
    (case-insensitive); the generated-answers row when both modes ran."""
    base = ours["Model"].astype(str).str.replace(r" \[(?:score|generate)\]$", "", regex=True).str.casefold()
    hits = ours[base == paper_model.casefold()]
    if hits.empty:
        return None
    gen = hits[hits["Model"].astype(str).str.endswith("[generate]")]
    return (gen if len(gen) else hits).iloc[0]


def _check(table: str, row: str, column: str, comparison: float, cell: float, digits: int,
           note: str = "") -> dict:
    tol = 0.5 * 10 ** -digits + 1e-9
    both_missing = np.isnan(comparison) and np.isnan(cell)
    agrees = bool(both_missing or (np.isfinite(comparison) and np.isfinite(cell) and abs(comparison - cell) <= tol))
    return {"table": table, "row": row, "column": column, "comparison": comparison, "table_cell": cell,
            "tolerance": tol, "agrees": agrees, "note": note}


def check_tables_4_7(tables_dir: Path) -> list[dict]:
    """One record per "ours" cell of `paper_vs_ours_finbias_table{4..7}` against Tables 4-7."""
    from finlib.finbias.scoring.paper_layout import AVERAGE, OURS, TABLE_SPECS

    out: list[dict] = []
    for spec in TABLE_SPECS:
        cmp_path = tables_dir / COMPARISON_FILE.format(key=spec.paper_key)
        table_path = tables_dir / f"{spec.name}.csv"
        if not cmp_path.is_file() or not table_path.is_file():
            continue
        cmp = read_table_csv(cmp_path)
        cmp = cmp[cmp["ours"].notna()]
        ours = read_table_csv(table_path)
        ours = ours[ours["Source"].astype(str).str.startswith(OURS)]
        for r in cmp.itertuples(index=False):
            model, sector = (s.strip() for s in str(r.row).split(" | ", 1))
            hit = _row_for(ours, model)
            col = AVERAGE if sector == "Average" else sector
            if hit is None or col not in hit.index:
                out.append(_check(spec.paper_key, r.row, r.column, float(r.ours), np.nan, spec.paper_digits,
                                  "no such row or column in our table"))
                continue
            part = 0 if model == "Analyst" else list(spec.paper_columns).index(r.column)
            out.append(_check(spec.paper_key, r.row, r.column, float(r.ours), cell_number(hit[col], part),
                              spec.paper_digits))
    return out


def check_table_8(tables_dir: Path, paper_names: dict[str, str]) -> list[dict]:
    """One record per "ours" cell of `paper_vs_ours_finbias_table8` against stage 05's Table 8
    (nothing when the run has no Table 8)."""
    cmp_path, table_path = tables_dir / COMPARISON_FILE.format(key="finbias_table8"), tables_dir / TABLE8_FILE
    if not cmp_path.is_file() or not table_path.is_file():
        return []
    cmp = read_table_csv(cmp_path)
    cmp = cmp[cmp["ours"].notna()]
    t8 = read_table_csv(table_path)
    need = {"model", "variant", "source"}
    if not need <= set(t8.columns):
        return [_check("finbias_table8", "", "", np.nan, np.nan, 2, f"{TABLE8_FILE} lacks {sorted(need)}")]
    t8 = t8[(t8["source"].astype(str) == "ours") & (t8["variant"].astype(str) == "DPO")]
    if "test part" in t8:   # the whole test split (its in-/out-of-time parts are rows of their own)
        from finlib.finbias.dpo.evaluate import WHOLE

        t8 = t8[t8["test part"].astype(str) == WHOLE]
    by_paper = {paper_names.get(m.removesuffix(" + DPO"), m.removesuffix(" + DPO")).casefold(): row
                for m, row in zip(t8["model"].astype(str), t8.to_dict("records"))}
    out = []
    for r in cmp.itertuples(index=False):
        model, sector = (s.strip() for s in str(r.row).split(" | ", 1))
        row = by_paper.get(model.casefold())
        col = POOLED if sector == "Average" else sector
        value = float(row[col]) if row is not None and col in row and pd.notna(row[col]) else np.nan
        out.append(_check("finbias_table8", r.row, r.column, float(r.ours), value, 6,
                          "" if row is not None else "no DPO row for this model in Table 8"))
    return out


def comparison_consistency(tables_dir: Path, paper_names: dict[str, str]) -> pd.DataFrame:
    """Every "ours" cell of the Fin-Bias comparisons beside the same cell of our Tables 4-8
    (`agrees` per cell); empty when the run wrote neither."""
    recs = check_tables_4_7(tables_dir) + check_table_8(tables_dir, paper_names)
    return pd.DataFrame.from_records(recs, columns=CHECK_COLUMNS)


def disagreements(tables_dir: Path, paper_names: dict[str, str]) -> pd.DataFrame:
    """The cells where a comparison's "ours" is not what our table prints (empty = consistent)."""
    c = comparison_consistency(tables_dir, paper_names)
    return c[~c["agrees"]].reset_index(drop=True)
