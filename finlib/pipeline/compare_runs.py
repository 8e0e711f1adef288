"""`make compare-tables RUN=name AGAINST=dir`: does a run write the same tables as another copy?

Compares every table CSV of a run (`figures/<run>/tables/*.csv`, written by
`finlib.core.tables.write_table`) with the CSVs of the same names in another folder — a saved copy
of a run's tables folder (`--against DIR`) or another run on disk (`--from-run OTHER`). Two tables
are identical when they have the same columns in the same order, the same number of rows and equal
values: numbers equal within `--rtol` (default 0: exactly equal), NaN equal to NaN, text exactly
equal. The verdict is pandas' own (`pandas.testing.assert_frame_equal`); the differing cells listed
under it come from `DataFrame.compare`. A table present on one side only is a difference too.

The caption line (`# ...`) is not a value: a changed caption is listed in the report, and counts as
a difference only with `--captions`.

Writes `runs/<run>/tables_vs_<name>.md` and exits 0 only when every table is identical, 1 otherwise
(2 for a usage error: a missing folder, no tables on either side, a folder compared with itself).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from finlib.core.artifacts import write_atomic
from finlib.core.config import RunConfig, repo_root, split_run_arg
from finlib.core.errors import ConfigError
from finlib.core.tables import read_table_csv

IDENTICAL, DIFFERS, ONLY_OURS, ONLY_THEIRS, UNREADABLE = (
    "identical",
    "differs",
    "only in ours",
    "only in theirs",
    "unreadable",
)
CELL_COLUMNS = ["row", "key", "column", "ours", "theirs"]


@dataclass
class TableComparison:
    """The verdict on one table name: its status, why (notes) and the first differing cells."""

    name: str
    status: str
    notes: list[str] = field(default_factory=list)
    cells: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=CELL_COLUMNS))
    n_cells: int = 0


def table_files(folder: Path) -> dict[str, Path]:
    """The table CSVs of a folder by table name (the `.md`/`.tex` beside them are renderings of the CSV)."""
    return {p.stem: p for p in sorted(Path(folder).glob("*.csv"))}


def caption_of(path: Path) -> str | None:
    """The `# caption` first line `write_table` puts above the header, or None."""
    with open(path, encoding="utf-8") as fh:
        first = fh.readline().rstrip("\n")
    return first[2:] if first.startswith("# ") else None


def frames_differ(ours: pd.DataFrame, theirs: pd.DataFrame, rtol: float) -> str | None:
    """pandas' verdict: None when the frames are equal (numbers within `rtol`, NaN == NaN), else its
    message. dtypes are not compared: 25 and 25.0 are the same number read back from two CSVs."""
    try:
        if rtol:
            pd.testing.assert_frame_equal(ours, theirs, check_dtype=False, check_exact=False, rtol=rtol, atol=0)
        else:
            pd.testing.assert_frame_equal(ours, theirs, check_dtype=False, check_exact=True)
    except (AssertionError, TypeError, ValueError) as exc:
        return " ".join(str(exc).split())
    return None


def _within_rtol(ours: pd.Series, theirs: pd.Series, rtol: float) -> pd.Series:
    """Which listed pairs are equal within `rtol` after all (DataFrame.compare knows no tolerance)."""
    a, b = pd.to_numeric(ours, errors="coerce"), pd.to_numeric(theirs, errors="coerce")
    both = a.notna() & b.notna()
    close = np.isclose(a.where(both, 0.0).astype(float), b.where(both, 0.0).astype(float), rtol=rtol, atol=0)
    return pd.Series(both.to_numpy() & close, index=ours.index)


def differing_cells(ours: pd.DataFrame, theirs: pd.DataFrame, rtol: float) -> pd.DataFrame:
    """Every differing cell of the part both tables share (common columns, the rows both have), as
    rows of (row, key, column, ours, theirs); `key` is the row's first-column value, to find it by eye."""
    columns = [c for c in ours.columns if c in theirs.columns]
    n = min(len(ours), len(theirs))
    left = ours[columns].iloc[:n].astype(object)
    right = theirs[columns].iloc[:n].astype(object)
    if not columns or not n:
        return pd.DataFrame(columns=CELL_COLUMNS)
    diff = left.compare(right, result_names=("ours", "theirs"), keep_shape=False)
    if diff.empty:
        return pd.DataFrame(columns=CELL_COLUMNS)
    cells = diff.stack(level=0, future_stack=True).reset_index()
    cells.columns = ["row", "column", "ours", "theirs"]
    cells = cells[cells["ours"].notna() | cells["theirs"].notna()]  # stack pads the cells that did not differ
    if rtol:
        cells = cells[~_within_rtol(cells["ours"], cells["theirs"], rtol)]
    order = {c: i for i, c in enumerate(columns)}
    cells = cells.assign(_c=cells["column"].map(order)).sort_values(["row", "_c"]).drop(columns="_c")
    cells.insert(1, "key", ours.iloc[cells["row"].to_numpy(), 0].to_numpy())
    return cells.reset_index(drop=True)


def shape_notes(ours: pd.DataFrame, theirs: pd.DataFrame) -> list[str]:
    """Differences in the frame's shape: columns only one side has, column order, row counts."""
    notes = []
    only_ours = [c for c in ours.columns if c not in theirs.columns]
    only_theirs = [c for c in theirs.columns if c not in ours.columns]
    if only_ours:
        notes.append(f"columns only in ours: {only_ours}")
    if only_theirs:
        notes.append(f"columns only in theirs: {only_theirs}")
    if not only_ours and not only_theirs and list(ours.columns) != list(theirs.columns):
        notes.append(f"same columns in another order: ours {list(ours.columns)}, theirs {list(theirs.columns)}")
    if len(ours) != len(theirs):
        notes.append(f"rows: ours {len(ours)}, theirs {len(theirs)}")
    return notes


def compare_table(
    name: str, ours_path: Path, theirs_path: Path, rtol: float = 0.0, max_cells: int = 10, captions: bool = False
) -> TableComparison:
    """One table of both sides: identical, or differs with the reasons and the first `max_cells` cells."""
    try:
        ours, theirs = read_table_csv(ours_path), read_table_csv(theirs_path)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        return TableComparison(name, UNREADABLE, [f"cannot read: {' '.join(str(exc).split())}"])
    shape = shape_notes(ours, theirs)
    notes = list(shape)
    verdict = frames_differ(ours, theirs, rtol) if not shape else None
    if verdict:
        notes.append(f"pandas.testing.assert_frame_equal: {verdict}")
    cells = differing_cells(ours, theirs, rtol)
    caption_changed = caption_of(ours_path) != caption_of(theirs_path)
    if caption_changed:
        notes.append(
            f"caption differs{'' if captions else ' (not counted; --captions counts it)'}: "
            f"ours {caption_of(ours_path)!r}, theirs {caption_of(theirs_path)!r}"
        )
    differs = bool(shape) or verdict is not None or (captions and caption_changed)
    return TableComparison(name, DIFFERS if differs else IDENTICAL, notes, cells.head(max_cells), len(cells))


def compare_dirs(
    ours_dir: Path, theirs_dir: Path, rtol: float = 0.0, max_cells: int = 10, captions: bool = False
) -> list[TableComparison]:
    """Every table name of either folder, compared (a name on one side only is reported as such)."""
    ours, theirs = table_files(ours_dir), table_files(theirs_dir)
    results = []
    for name in sorted(set(ours) | set(theirs)):
        if name not in theirs:
            results.append(TableComparison(name, ONLY_OURS, [f"no {name}.csv in {theirs_dir}"]))
        elif name not in ours:
            results.append(TableComparison(name, ONLY_THEIRS, [f"no {name}.csv in {ours_dir}"]))
        else:
            results.append(compare_table(name, ours[name], theirs[name], rtol, max_cells, captions))
    return results


def all_identical(results: list[TableComparison]) -> bool:
    return bool(results) and all(r.status == IDENTICAL for r in results)


def shown_value(value: object) -> str:
    """A cell as read, to the last digit (tabulate would round 66.66666666666667 and 66.66666666666666 alike)."""
    return repr(value) if isinstance(value, float) else str(value)


def render_report(results: list[TableComparison], ours_dir: Path, theirs_dir: Path, rtol: float) -> str:
    """The Markdown report: a summary line, a table of verdicts, then each non-identical table's details."""
    counts = pd.Series([r.status for r in results]).value_counts()
    verdict = "all tables identical" if all_identical(results) else "tables differ"
    lines = [
        f"# Tables: {verdict}",
        "",
        f"- ours: `{ours_dir}`",
        f"- theirs: `{theirs_dir}`",
        f"- numbers equal within rtol={rtol:g} (0: exactly equal); NaN equals NaN; text exact",
        "",
        ", ".join(f"{n} {status}" for status, n in counts.items()),
        "",
        pd.DataFrame(
            {
                "table": [r.name for r in results],
                "status": [r.status for r in results],
                "differing cells": [r.n_cells for r in results],
            }
        ).to_markdown(index=False),
        "",
    ]
    for r in results:
        if r.status == IDENTICAL and not r.notes:
            continue
        lines += [f"## {r.name}: {r.status}", ""] + [f"- {note}" for note in r.notes] + [""]
        if r.n_cells:
            shown = f"first {len(r.cells)} of {r.n_cells}" if r.n_cells > len(r.cells) else f"all {r.n_cells}"
            lines += [
                f"Differing cells ({shown}; row: position among the data rows, from 0):",
                "",
                r.cells.map(shown_value).to_markdown(index=False, disable_numparse=True),
                "",
            ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m finlib.pipeline.compare_runs",
        description="Compare a run's table CSVs with another copy of them.",
    )
    ap.add_argument("--run", required=True, help="run NAME (its tables: figures/NAME/tables/*.csv)")
    side = ap.add_mutually_exclusive_group(required=True)
    side.add_argument("--against", type=Path, metavar="DIR", help="a folder holding a copy of a run's table CSVs")
    side.add_argument("--from-run", metavar="OTHER", help="another run on disk (figures/OTHER/tables)")
    ap.add_argument("--rtol", type=float, default=0.0, help="relative tolerance for numbers (default 0: exactly equal)")
    ap.add_argument("--max-cells", type=int, default=10, help="differing cells listed per table (default 10)")
    ap.add_argument("--captions", action="store_true", help="count a changed caption line as a difference")
    args = ap.parse_args(argv)
    if args.rtol < 0 or args.max_cells < 1:
        ap.error("--rtol must be >= 0 and --max-cells >= 1")
    return args


def resolve_sides(args: argparse.Namespace, root: Path) -> tuple[RunConfig, Path, str]:
    """Our run's config (only its folders: no params are read), the other tables folder and its label."""
    ours = RunConfig(name=split_run_arg(args.run)[0], params={}, root=root)
    if args.from_run:
        other = RunConfig(name=split_run_arg(args.from_run)[0], params={}, root=root)
        theirs, label = other.tables_dir, other.name
    else:
        theirs = args.against if args.against.is_absolute() else root / args.against
        label = theirs.resolve().name
    for what, folder in (("ours", ours.tables_dir), ("theirs", theirs)):
        if not folder.is_dir():
            raise ConfigError(f"tables folder ({what}) not found: {folder}")
    if ours.tables_dir.resolve() == theirs.resolve():
        raise ConfigError(f"both sides are the same folder: {theirs}")
    if not table_files(ours.tables_dir) and not table_files(theirs):
        raise ConfigError(f"no table CSVs in {ours.tables_dir} nor in {theirs}")
    return ours, theirs, label


def main(argv: list[str] | None = None, root: Path | None = None) -> int:
    args = parse_args(argv)
    root = root or repo_root()
    try:
        ours, theirs, label = resolve_sides(args, root)
    except ConfigError as exc:
        print(f"compare_runs: {exc}", file=sys.stderr)
        return 2
    results = compare_dirs(ours.tables_dir, theirs, args.rtol, args.max_cells, args.captions)
    ours.run_dir.mkdir(parents=True, exist_ok=True)
    report = ours.run_dir / f"tables_vs_{label}.md"
    text = render_report(results, ours.tables_dir, theirs, args.rtol)
    write_atomic(report, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    for r in results:
        print(f"{r.status:>15}  {r.name}" + (f"  ({r.n_cells} cells)" if r.n_cells else ""))
    print(f"{'identical' if all_identical(results) else 'DIFFERENT'}: {report}")
    return 0 if all_identical(results) else 1


if __name__ == "__main__":
    sys.exit(main())
