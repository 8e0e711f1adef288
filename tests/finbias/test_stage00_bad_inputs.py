"""Stage 00 on inputs the world writes wrong: each is a clear error naming file, row and column, or a
counted exclusion in data_report.json -- never an IndexError, a silent shift of event day 0 or a run
that pays for answers no label can score."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from finlib.finbias.data.prices import load_prices
from finlib.finbias.data.stage import check_priced_share, load_reports_file
from finlib.finbias.data.validation import REPORT_COLUMNS, DataValidationError

IDENT = {c: c for c in (*REPORT_COLUMNS, "analyst_rating")}
HEADER = "report_id,ticker,company,sector,date,text,analyst_rating\n"


def _reports(tmp_path: Path, rows: str) -> Path:
    path = tmp_path / "reports.csv"
    path.write_text(HEADER + rows, encoding="utf-8")
    return path


def test_a_reports_file_with_only_a_header_names_the_file(tmp_path):
    """Drill: a reports CSV with only a header."""
    path = _reports(tmp_path, "")
    with pytest.raises(DataValidationError, match=rf"{path}: no reports \(the file has a header and 0 rows\)"):
        load_reports_file(path, IDENT)


def test_ids_that_differ_only_in_spaces_are_duplicates_naming_the_rows(tmp_path):
    """Drill: report ids 'SYN00001' and 'SYN00001 ' (one id once stripped) are refused as duplicates."""
    path = _reports(tmp_path, 'SYN00001,AAPL,Apple,Information Technology,2021-03-01,"Buy. Text one.",\n'
                              'SYN00001 ,MSFT,Microsoft,Information Technology,2021-03-02,"Sell. Text two.",\n')
    with pytest.raises(DataValidationError, match=rf"{path}: duplicate report_id .*'SYN00001' in rows 1, 2"):
        load_reports_file(path, IDENT)


def test_a_date_with_a_utc_offset_keeps_its_calendar_date(tmp_path):
    """Drill: report dates with a UTC offset keep the date as written."""
    path = _reports(tmp_path, 'R1,AAPL,Apple,Information Technology,2021-03-02T01:00:00+08:00,"Buy. Text.",\n'
                              'R2,MSFT,Microsoft,Information Technology,2021-03-02T22:30:00-05:00,"Sell. Text.",\n'
                              'R3,IBM,IBM,Information Technology,2021-03-02T10:00:00Z,"Hold. Text.",\n')
    reports, _ = load_reports_file(path, IDENT)
    assert [d.date().isoformat() for d in reports["date"]] == ["2021-03-02"] * 3


def _prices(tmp_path: Path, closes: list[str]) -> Path:
    path = tmp_path / "prices.csv"
    rows = [f"2021-03-0{i + 1},AAPL,{c}" for i, c in enumerate(closes)]
    path.write_text("date,ticker,adj_close\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("value", ["1e308", "inf", "2e7"])
def test_an_implausible_close_is_an_error_naming_the_row(value, tmp_path):
    """Drill: a close of 1e308 (or infinite) is refused naming file, row and column."""
    path = _prices(tmp_path, ["120.5", value, "121.0"])
    with pytest.raises(DataValidationError, match=rf"{path}: implausible price .* column 'adj_close' at row 2 "):
        load_prices(path)


@pytest.mark.parametrize("marker", ["NaN", "nan", "NA", "null", ""])
def test_a_written_out_gap_is_dropped_and_counted_like_a_blank(marker, tmp_path):
    """Drill: a literal NaN close is a vendor gap, dropped and counted like a blank one."""
    prices, notes = load_prices(_prices(tmp_path, ["120.5", marker, "121.0"]))
    assert len(prices) == 2 and notes["missing_adj_close_dropped"] == 1


def _frames(report_dates: list[str], price_days: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    reports = pd.DataFrame({"ticker": ["AAPL"] * len(report_dates), "date": pd.to_datetime(report_dates)})
    prices = pd.DataFrame({"ticker": ["AAPL"] * len(price_days), "date": pd.to_datetime(price_days)})
    return reports, prices


def test_a_corpus_with_no_report_inside_the_price_data_stops_before_paying():
    """Drill: every report falls after the price data (no label possible): stage 00 stops before any model call."""
    reports, prices = _frames(["2024-05-01", "2024-06-01"], ["2020-01-02", "2020-12-31"])
    with pytest.raises(DataValidationError, match=r"only 0 of 2 reports have prices on their date .* stopped before "
                                                   r"any model call"):
        check_priced_share(reports, prices, 0.0)


def test_the_priced_share_gate_follows_its_param():
    reports, prices = _frames(["2020-06-01", "2024-06-01"], ["2020-01-02", "2020-12-31"])
    assert check_priced_share(reports, prices, 0.0) == 1  # one of two: passes the default gate
    with pytest.raises(DataValidationError, match=r"only 1 of 2 .*data.min_priced_share 0.5"):
        check_priced_share(reports, prices, 0.5)
