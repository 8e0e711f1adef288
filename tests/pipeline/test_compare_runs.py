"""`python -m finlib.pipeline.compare_runs`: two table folders that match pass; each seeded fault fails
and is named by its table, row and column.

The folders are written by hand here (CSV text, not `write_table`), so the check does not read back
what its own writer wrote.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from finlib.pipeline import compare_runs

ACCURACY = """# Accuracy by sector (%).
sector,n_reports,accuracy,note
Energy,4,25.0,
Utilities,6,66.66666666666667,small
Technology,5,40.0,
"""
HERDING = """# Herding rate by model and condition.
model,condition,herding
smollm2,original,0.5
smollm2,removed,0.25
"""


def _tables(folder: Path, tables: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in tables.items():
        (folder / f"{name}.csv").write_text(text, encoding="utf-8")
        (folder / f"{name}.md").write_text(f"**{name}**\n", encoding="utf-8")  # renderings are not compared
    return folder


def _run(root: Path, theirs: dict[str, str], *extra: str, ours: dict[str, str] | None = None) -> tuple[int, str]:
    """Our run `mine` with ACCURACY and HERDING, compared against a folder holding `theirs`."""
    _tables(root / "figures" / "mine" / "tables", ours or {"accuracy": ACCURACY, "herding": HERDING})
    against = _tables(root / "saved" / "baseline", theirs)
    rc = compare_runs.main(["--run", "mine", "--against", str(against), *extra], root=root)
    report = root / "runs" / "mine" / "tables_vs_baseline.md"
    return rc, report.read_text(encoding="utf-8")


def _status(report: str, table: str) -> str:
    """The status column of a table's row in the report's verdict table."""
    return next(row[1] for row in _rows(report) if row[0] == table)


def _rows(report: str) -> list[list[str]]:
    """Every Markdown table row of the report as its stripped cells."""
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in report.splitlines() if line.startswith("|") and not line.startswith("|--")]


def test_matching_folders_exit_0(tmp_path):
    rc, report = _run(tmp_path, {"accuracy": ACCURACY, "herding": HERDING})
    assert rc == 0
    assert report.startswith("# Tables: all tables identical")
    assert _status(report, "accuracy") == "identical" and _status(report, "herding") == "identical"


def test_integer_and_float_spellings_of_a_number_are_equal(tmp_path):
    rc, _ = _run(tmp_path, {"accuracy": ACCURACY.replace("Energy,4,", "Energy,4.0,"), "herding": HERDING})
    assert rc == 0


def test_one_changed_cell_is_named(tmp_path):
    rc, report = _run(tmp_path, {"accuracy": ACCURACY.replace("Technology,5,40.0", "Technology,5,40.5"),
                                 "herding": HERDING})
    assert rc == 1
    assert _status(report, "accuracy") == "differs" and _status(report, "herding") == "identical"
    assert ["2", "Technology", "accuracy", "40.0", "40.5"] in _rows(report)


def test_a_missing_table_is_reported(tmp_path):
    rc, report = _run(tmp_path, {"accuracy": ACCURACY})
    assert rc == 1
    assert _status(report, "herding") == "only in ours"


def test_a_table_only_in_theirs_is_reported(tmp_path):
    rc, report = _run(tmp_path, {"accuracy": ACCURACY, "herding": HERDING, "extra": HERDING})
    assert rc == 1
    assert _status(report, "extra") == "only in theirs"


def test_an_extra_column_is_reported(tmp_path):
    widened = HERDING.replace("herding\n", "herding,n\n").replace("0.5\n", "0.5,4\n").replace("0.25\n", "0.25,4\n")
    rc, report = _run(tmp_path, {"accuracy": ACCURACY, "herding": widened})
    assert rc == 1
    assert _status(report, "herding") == "differs"
    assert "columns only in theirs: ['n']" in report


def test_nan_against_a_number_is_named(tmp_path):
    rc, report = _run(tmp_path, {"accuracy": ACCURACY.replace("Energy,4,25.0,", "Energy,4,,"), "herding": HERDING})
    assert rc == 1
    assert _status(report, "accuracy") == "differs"
    assert ["0", "Energy", "accuracy", "25.0", "nan"] in _rows(report)


def test_nan_equals_nan(tmp_path):
    both = ACCURACY.replace("Energy,4,25.0,", "Energy,4,,")
    rc, _ = _run(tmp_path, {"accuracy": both, "herding": HERDING}, ours={"accuracy": both, "herding": HERDING})
    assert rc == 0


def test_text_is_compared_exactly(tmp_path):
    rc, report = _run(tmp_path, {"accuracy": ACCURACY.replace(",small", ",Small"), "herding": HERDING})
    assert rc == 1
    assert ["1", "Utilities", "note", "small", "Small"] in _rows(report)


def test_a_missing_row_is_reported(tmp_path):
    rc, report = _run(tmp_path, {"accuracy": ACCURACY.replace("Technology,5,40.0,\n", ""), "herding": HERDING})
    assert rc == 1
    assert "rows: ours 3, theirs 2" in report


def test_rtol_accepts_a_last_digit_and_zero_refuses_it(tmp_path):
    nudged = {"accuracy": ACCURACY.replace("66.66666666666667", "66.66666666666666"), "herding": HERDING}
    assert _run(tmp_path, nudged)[0] == 1
    assert _run(tmp_path, nudged, "--rtol", "1e-12")[0] == 0
    far = {"accuracy": ACCURACY.replace("66.66666666666667", "66.7"), "herding": HERDING}
    assert _run(tmp_path, far, "--rtol", "1e-12")[0] == 1


def test_a_changed_caption_counts_only_when_asked(tmp_path):
    recaptioned = {"accuracy": ACCURACY.replace("Accuracy by sector", "Accuracy per sector"), "herding": HERDING}
    rc, report = _run(tmp_path, recaptioned)
    assert rc == 0 and "caption differs (not counted" in report
    assert _run(tmp_path, recaptioned, "--captions")[0] == 1


def test_from_run_compares_two_runs_on_disk(tmp_path):
    _tables(tmp_path / "figures" / "mine" / "tables", {"accuracy": ACCURACY})
    _tables(tmp_path / "figures" / "other" / "tables", {"accuracy": ACCURACY.replace("Energy,4", "Energy,5")})
    assert compare_runs.main(["--run", "mine", "--from-run", "other"], root=tmp_path) == 1
    report = (tmp_path / "runs" / "mine" / "tables_vs_other.md").read_text(encoding="utf-8")
    assert ["0", "Energy", "n_reports", "4", "5"] in _rows(report)


@pytest.mark.parametrize("setup", ["no_theirs", "same_folder", "both_empty"])
def test_usage_errors_exit_2(tmp_path, setup, capsys):
    ours = tmp_path / "figures" / "mine" / "tables"
    ours.mkdir(parents=True)
    if setup != "both_empty":
        _tables(ours, {"accuracy": ACCURACY})
    against = {"no_theirs": tmp_path / "nowhere", "same_folder": ours, "both_empty": tmp_path}[setup]
    assert compare_runs.main(["--run", "mine", "--against", str(against)], root=tmp_path) == 2
    assert "compare_runs:" in capsys.readouterr().err

