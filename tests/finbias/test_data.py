"""Stage 00 loaders, validation, cleaning, the run entry point and Tables 2-3.

Fixtures are small files written into tmp_path; every validation error must name the file,
the row (1-based data row) and the column. No network: HF and yfinance are monkeypatched.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from finlib.finbias.data import stage as data
from finlib.finbias.data.prices import fetch_yfinance_prices, load_market, load_prices
from finlib.finbias.data.validation import (
    CLEANING_RULES,
    DataSourceError,
    DataValidationError,
    clean_text,
    clean_text_logged,
    read_table,
)

THEIRS = {"report_id": "id", "ticker": "symbol", "company": "name", "sector": "industry_sector",
          "date": "published", "text": "clean_content"}
GOOD = [
    {"id": "r1", "symbol": "aaa", "name": "Alpha Co", "industry_sector": "Information Technology",
     "published": "2021-03-04", "clean_content": "We maintain our Bullish rating on Alpha Co. Revenue rose 5%."},
    {"id": "r2", "symbol": "BBB", "name": "Beta Co", "industry_sector": "Health Care",
     "published": "2021-05-06 14:30", "clean_content": "We rate Beta Co a Sell. Margins declined."},
    {"id": "r3", "symbol": "CCC", "name": "Gamma Co", "industry_sector": "Utilities",
     "published": "2021-07-08", "clean_content": "Gamma reported its third quarter. We rate it Hold."},
]


def _csv(tmp_path: Path, rows: list[dict], name: str = "reports.csv") -> Path:
    p = tmp_path / name
    pd.DataFrame(rows).to_csv(p, index=False)
    return p


def _assert_names(msg: str, path: Path, row: int | None, column: str) -> None:
    assert str(path) in msg, msg
    if row is not None:
        assert f"row {row}" in msg, msg
    assert f"'{column}" in msg, msg


# ---------------------------------------------------------------- loaders on fixtures

@pytest.mark.parametrize("fmt", ["csv", "csv.gz", "parquet", "jsonl"])
def test_load_reports_all_formats(tmp_path, fmt):
    df = pd.DataFrame(GOOD)
    p = tmp_path / f"reports.{fmt}"
    if fmt == "jsonl":
        df.to_json(p, orient="records", lines=True)
    elif fmt == "parquet":
        df.to_parquet(p, index=False)
    else:
        df.to_csv(p, index=False)
    out, notes = data.load_reports_file(p, THEIRS)
    assert list(out["report_id"]) == ["r1", "r2", "r3"]
    assert list(out["ticker"]) == ["AAA", "BBB", "CCC"]
    assert list(out["sector"]) == ["Technology", "Healthcare", "Utilities"]  # aliases mapped
    assert out["date"].dtype == "datetime64[ns]"
    assert list(out["date"].dt.strftime("%Y-%m-%d")) == ["2021-03-04", "2021-05-06", "2021-07-08"]
    assert notes["outside_paper_sectors"] == {}


def test_missing_mapped_column_names_file_and_column(tmp_path):
    p = _csv(tmp_path, [{k: v for k, v in r.items() if k != "clean_content"} for r in GOOD])
    with pytest.raises(DataValidationError) as e:
        data.load_reports_file(p, THEIRS)
    _assert_names(str(e.value), p, None, "clean_content")
    assert "missing" in str(e.value)


def test_unmapped_required_and_unknown_keys(tmp_path):
    p = _csv(tmp_path, GOOD)
    with pytest.raises(DataValidationError, match="required column 'text'"):
        data.load_reports_file(p, {**THEIRS, "text": None})
    with pytest.raises(DataValidationError, match="unknown key"):
        data.load_reports_file(p, {**THEIRS, "body": "clean_content"})


def test_optional_column_mapped_to_null_is_none(tmp_path):
    p = _csv(tmp_path, GOOD)
    out, notes = data.load_reports_file(p, {**THEIRS, "company": None, "sector": None})
    assert out["company"].isna().all() and out["sector"].isna().all()
    assert notes["missing_sector"] == 3


def test_empty_text_names_row_and_column(tmp_path):
    rows = [dict(r) for r in GOOD]
    rows[1]["clean_content"] = "   "
    p = _csv(tmp_path, rows)
    with pytest.raises(DataValidationError, match="empty text") as e:
        data.load_reports_file(p, THEIRS)
    _assert_names(str(e.value), p, 2, "clean_content")


def test_duplicate_ids_name_both_rows(tmp_path):
    rows = [dict(r) for r in GOOD]
    rows[2]["id"] = "r1"
    p = _csv(tmp_path, rows)
    with pytest.raises(DataValidationError, match="duplicate report_id") as e:
        data.load_reports_file(p, THEIRS)
    msg = str(e.value)
    _assert_names(msg, p, None, "id")
    assert "'r1' in rows 1, 3" in msg


def test_unparseable_date_names_row_column_value(tmp_path):
    rows = [dict(r) for r in GOOD]
    rows[2]["published"] = "31/31/2021"
    p = _csv(tmp_path, rows)
    with pytest.raises(DataValidationError, match="unparseable date") as e:
        data.load_reports_file(p, THEIRS)
    _assert_names(str(e.value), p, 3, "published")
    assert "31/31/2021" in str(e.value)


def test_unknown_sector_error_and_keep(tmp_path):
    rows = [dict(r) for r in GOOD]
    rows[1]["industry_sector"] = "Widgets"
    rows[2]["industry_sector"] = "Consumer Discretionary"  # a known alias outside the paper's nine
    p = _csv(tmp_path, rows)
    with pytest.raises(DataValidationError, match="unknown sector") as e:
        data.load_reports_file(p, THEIRS)
    _assert_names(str(e.value), p, 2, "industry_sector")
    assert "Widgets" in str(e.value)
    out, notes = data.load_reports_file(p, THEIRS, on_unknown_sector="keep")
    assert list(out["sector"]) == ["Technology", "Widgets", "Consumer Cyclical"]
    assert notes["unmapped_sectors_kept"] == {"Widgets": 1}
    assert notes["outside_paper_sectors"] == {"Consumer Cyclical": 1, "Widgets": 1}


def test_non_utf8_names_offset_row_and_column(tmp_path):
    p = _csv(tmp_path, GOOD)
    raw = p.read_bytes().replace(b"Margins declined", "Margins d\xe9clin\xe9".encode("latin-1"))
    p.write_bytes(raw)
    with pytest.raises(DataValidationError, match="not valid UTF-8") as e:
        data.load_reports_file(p, THEIRS)
    msg = str(e.value)
    _assert_names(msg, p, 2, "clean_content")
    offset = raw.index(bytes([0xE9]))
    assert f"byte offset {offset}" in msg


def test_non_utf8_jsonl_gz(tmp_path):
    import gzip

    p = tmp_path / "reports.jsonl.gz"
    body = pd.DataFrame(GOOD).to_json(orient="records", lines=True).encode()
    p.write_bytes(gzip.compress(body.replace(b"Margins", bytes([0x93]) + b"Margins")))
    with pytest.raises(DataValidationError, match="not valid UTF-8") as e:
        data.load_reports_file(p, THEIRS)
    _assert_names(str(e.value), p, 2, "clean_content")


def test_unsupported_suffix(tmp_path):
    p = tmp_path / "reports.xlsx"
    p.write_bytes(b"x")
    with pytest.raises(DataValidationError, match="unsupported file type"):
        read_table(p)


# ---------------------------------------------------------------- cleaning

@pytest.mark.parametrize("dirty, clean", [
    ("the firm\u00e2\u20ac\u2122s margin", "the firm\u2019s margin"),
    ("a\u00a0b\u202fc", "a b c"),
    ("manage-\nment said", "management said"),
    ("well-known  brand", "well-known brand"),
    ("U.S.-\nBased", "U.S.-\nBased"),         # not lowercase on both sides: not joined
    ("line one \n line two\n\n\nnext para  ", "line one\nline two\n\nnext para"),  # line breaks kept
    ("zero\u200bwidth soft\u00adhyphen", "zerowidth softhyphen"),
])
def test_clean_text(dirty, clean):
    assert clean_text(dirty) == clean


def test_clean_text_leaves_clean_text_alone():
    t = "We maintain our Bullish rating on X Inc. (XXXX).\n\nRevenue rose 5.2% vs. $1.2 bn in the U.S."
    assert clean_text_logged(t) == (t, ())


# ---------------------------------------------------------------- prices and market

def _prices(tmp_path: Path, rows: list[tuple], name: str = "prices.csv") -> Path:
    p = tmp_path / name
    pd.DataFrame(rows, columns=["date", "ticker", "adj_close"]).to_csv(p, index=False)
    return p


def test_load_prices_sorted_and_typed(tmp_path):
    p = _prices(tmp_path, [("2021-01-05", "BBB", 10.0), ("2021-01-04", "BBB", 9.5), ("2021-01-04", "aaa", 1.0),
                           ("2021-01-05", "AAA", "")])
    out, notes = load_prices(p)
    assert list(out["ticker"]) == ["AAA", "BBB", "BBB"]
    assert list(out["date"].dt.day) == [4, 4, 5]
    assert out["adj_close"].dtype == "float64" and out["date"].dtype == "datetime64[ns]"
    assert notes["missing_adj_close_dropped"] == 1
    sub, _ = load_prices(p, tickers=["BBB"])
    assert set(sub["ticker"]) == {"BBB"}


@pytest.mark.parametrize("bad, row, column, what", [
    (("not a date", "AAA", 1.0), 2, "date", "unparseable date"),
    (("2021-01-06", "AAA", "abc"), 2, "adj_close", "non-numeric"),
    (("2021-01-06", "AAA", -3.0), 2, "adj_close", "non-positive"),
])
def test_price_errors_name_row_and_column(tmp_path, bad, row, column, what):
    p = _prices(tmp_path, [("2021-01-05", "AAA", 1.0), bad])
    with pytest.raises(DataValidationError, match=what) as e:
        load_prices(p)
    _assert_names(str(e.value), p, row, column)


def test_price_duplicates_and_missing_columns(tmp_path):
    p = _prices(tmp_path, [("2021-01-05", "AAA", 1.0), ("2021-01-05", "AAA", 1.1)])
    with pytest.raises(DataValidationError, match="duplicate") as e:
        load_prices(p)
    assert "row 2" in str(e.value) and str(p) in str(e.value)
    q = tmp_path / "wide.csv"
    pd.DataFrame({"date": ["2021-01-05"], "AAA": [1.0]}).to_csv(q, index=False)
    with pytest.raises(DataValidationError, match="missing column") as e:
        load_prices(q)
    assert "'ticker'" in str(e.value) and str(q) in str(e.value)


def test_load_market_and_its_errors(tmp_path):
    p = tmp_path / "market.csv"
    pd.DataFrame({"date": ["2021-01-05", "2021-01-04"], "idx": [101.0, 100.0]}).to_csv(p, index=False)
    out, notes = load_market(p, "idx")
    assert list(out["market_close"]) == [100.0, 101.0] and notes["market_missing_dropped"] == 0
    with pytest.raises(DataValidationError, match="'spx'") as e:
        load_market(p, "spx")
    assert str(p) in str(e.value)
    pd.DataFrame({"date": ["2021-01-04", "2021-01-05"], "idx": [100.0, "n/a"]}).to_csv(p, index=False)
    with pytest.raises(DataValidationError, match="row 2"):
        load_market(p, "idx")
    pd.DataFrame({"date": ["2021-01-04", "2021-01-05"], "idx": [100.0, None]}).to_csv(p, index=False)
    out, notes = load_market(p, "idx")
    assert len(out) == 1 and notes["market_missing_dropped"] == 1


def test_real_prices_slice_loads_and_validates(shared_data):
    prices, notes = load_prices(shared_data / "prices" / "us_daily_adjclose.csv.gz", nrows=20000)
    assert len(prices) > 19000 and prices["adj_close"].gt(0).all()
    assert prices.groupby("ticker")["date"].is_monotonic_increasing.all()
    market, _ = load_market(shared_data / "prices" / "market_daily.csv", "sp500_tr_close")
    assert market["date"].is_monotonic_increasing and len(market) > 2000
    assert market["date"].dt.day_of_week.lt(5).all()


# ---------------------------------------------------------------- offline sources

def test_hf_offline_message():
    def offline(*a, **k):
        raise ConnectionError("Couldn't reach 'Rain1998/Analyst-Report-Bias' on the Hub (LocalEntryNotFoundError)")

    with pytest.raises(DataSourceError) as e:
        data.load_reports_hf("Rain1998/Analyst-Report-Bias", "train", THEIRS, loader=offline)
    msg = str(e.value)
    assert "Rain1998/Analyst-Report-Bias" in msg and "data.source: local" in msg and "data.reports.path" in msg


def test_hf_datasets_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(DataSourceError, match="pip install"):
        data.load_reports_hf("x/y", "train", THEIRS)


def test_hf_success_path_maps_columns():
    class FakeDS:
        def to_pandas(self):
            return pd.DataFrame(GOOD)

    out, _ = data.load_reports_hf("x/y", "train", THEIRS, loader=lambda name, split: FakeDS())
    assert list(out["report_id"]) == ["r1", "r2", "r3"]


def test_yfinance_not_installed(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "yfinance", None)
    with pytest.raises(DataSourceError, match=r"yfinance is not installed.*data\.prices\.path"):
        fetch_yfinance_prices(["AAA"], "2021-01-01", "2021-02-01", tmp_path)


def test_yfinance_offline_and_empty(tmp_path):
    def offline(*a, **k):
        raise OSError("Failed to resolve 'query1.finance.yahoo.com'")

    with pytest.raises(DataSourceError, match="offline") as e:
        fetch_yfinance_prices(["AAA"], "2021-01-01", "2021-02-01", tmp_path, downloader=offline)
    assert "data.prices.path" in str(e.value)
    with pytest.raises(DataSourceError, match="no prices for 'AAA'"):
        fetch_yfinance_prices(["AAA"], "2021-01-01", "2021-02-01", tmp_path,
                                   downloader=lambda *a, **k: pd.DataFrame())


def test_yfinance_cache_is_used(tmp_path):
    calls = []

    def fake(t, start, end, **k):
        calls.append(t)
        idx = pd.DatetimeIndex(["2021-01-04", "2021-01-05"], name="Date")
        return pd.DataFrame({"Close": [10.0, 11.0]}, index=idx)

    a = fetch_yfinance_prices(["AAA"], "2021-01-01", "2021-02-01", tmp_path, downloader=fake)
    b = fetch_yfinance_prices(["AAA"], "2021-01-01", "2021-02-01", tmp_path, downloader=fake)
    assert calls == ["AAA"] and a.equals(b) and (tmp_path / "AAA.parquet").is_file()


# ---------------------------------------------------------------- run and tables

def test_run_synthetic_writes_contract_artifacts(tmp_run):
    from finlib.core import artifacts

    rep = data.run(tmp_run)
    r = artifacts.read_frame(tmp_run, "reports")
    assert list(r.columns) == ["report_id", "ticker", "company", "sector", "date", "text", "analyst_rating"]
    assert r["date"].dtype == "datetime64[ns]"
    assert set(r["analyst_rating"].dropna()) <= {"bullish", "neutral", "bearish"}
    p = artifacts.read_frame(tmp_run, "prices")
    assert list(p.columns) == ["date", "ticker", "adj_close"] and p["adj_close"].dtype == "float64"
    assert list(artifacts.read_frame(tmp_run, "market").columns) == ["date", "market_close"]
    from finlib.finbias.data.synth import PLANTED_COLUMNS
    assert set(artifacts.read_frame(tmp_run, "truth").columns) == {"report_id", "q", "drift", "beta", *PLANTED_COLUMNS}
    summary = artifacts.read_json(tmp_run, "data_report")
    n = tmp_run.params["data"]["synthetic"]["n_reports"]
    assert summary["n_reports"] == len(r) == n
    assert summary["rating_extraction_check"]["given_vs_extracted_agree"] == n
    assert (tmp_run.raw_dir / "synthetic" / tmp_run.name / "reports.parquet").is_file()
    assert rep.truth is not None


def _local_run(tmp_run, tmp_path, rows):
    params = tmp_run.params_file
    cfg = yaml.safe_load(params.read_text())
    reports = _csv(tmp_path, rows)
    prices = _prices(tmp_path, [("2021-03-04", "AAA", 1.0), ("2021-03-05", "AAA", 1.1)])
    market = tmp_path / "mkt.csv"
    pd.DataFrame({"date": ["2021-03-04", "2021-03-05"], "spx": [1.0, 1.01]}).to_csv(market, index=False)
    cfg["data"] = {"source": "local",
                   "reports": {"path": str(reports), "columns": THEIRS},
                   "prices": {"path": str(prices), "market_path": str(market), "market_column": "spx"}}
    out = params.parent / "local.yaml"
    out.write_text(yaml.safe_dump(cfg))
    from finlib.core.config import load_run

    return load_run("local", root=tmp_run.root)


def test_run_local_counts_missing_ratings(tmp_run, tmp_path):
    cfg = _local_run(tmp_run, tmp_path, GOOD)
    rep = data.run(cfg)
    assert list(rep.reports["analyst_rating"]) == ["bullish", "bearish", None]  # r3: rating not in 1st sentence
    s = json.loads((cfg.processed_dir / "data_report.json").read_text())
    assert s["no_rating_in_first_sentence"] == 1 and s["no_rating_report_ids"] == ["r3"]
    assert s["reports_without_prices"] == 2 and s["n_reports"] == 3
    assert s["synthetic"] is False and "truth" not in rep.paths


def test_run_local_missing_path_is_clear(tmp_run, tmp_path):
    cfg = _local_run(tmp_run, tmp_path, GOOD)
    cfg.params["data"]["reports"]["path"] = None
    with pytest.raises(DataSourceError, match="data.reports.path"):
        data.load_data(cfg)


def test_table2_and_table3_beside_the_paper():
    reports = pd.DataFrame({
        "sector": ["Technology"] * 3 + ["Energy", "Consumer Cyclical"],
        "analyst_rating": ["bullish", "bullish", "neutral", None, "bearish"],
    })
    t2 = data.sector_table(reports)
    row = t2.set_index("sector")
    assert row.loc["Technology", "num"] == 3 and row.loc["Technology", "percentage"] == 60.0
    assert row.loc["Technology", "paper_num"] == 1491 and row.loc["Real Estate", "num"] == 0
    assert row.loc["Consumer Cyclical", "num"] == 1 and pd.isna(row.loc["Consumer Cyclical", "paper_num"])
    assert row.loc["Total", "num"] == 5 and row.loc["Total", "paper_num"] == 8868
    assert t2["sector"].iloc[-1] == "Total"
    t3 = data.analyst_rating_table(reports).set_index("rating")
    # shares are over the 4 rated reports, as the paper's are over its (all rated) reports
    assert t3.loc["Bullish", "num"] == 2 and t3.loc["Bullish", "percentage"] == 50.0
    assert t3.loc["Neutral", "percentage"] == 25.0 and t3.loc["Total", "percentage"] == 100.0
    assert t3.loc["Bullish", "paper_num"] == 6410 and t3.loc["Bearish", "paper_percentage"] == 0.29
    assert t3.loc["No rating in first sentence", "num"] == 1
    assert pd.isna(t3.loc["No rating in first sentence", "paper_num"])
    assert t3.loc["Total", "num"] == 4 and t3.loc["Total", "paper_num"] == 8868
    assert list(t3.index) == ["Bullish", "Bearish", "Neutral", "Total", "No rating in first sentence"]


def test_summary_table_flattens_nested_counts():
    t = data.summary_table({"n_reports": 3, "excluded": {"prices": {"missing_adj_close": 2}},
                            "date_range": ["2021-01-01", "2021-02-01"], "ids": ["a"]})
    assert dict(zip(t["count"], t["value"])) == {"n_reports": "3", "excluded.prices.missing_adj_close": "2",
                                                 "date_range": "2021-01-01 .. 2021-02-01"}


# ---------------------------------------------------------------- review fixes: params keys, market, cache

def _fake_yf(calls: list, dates=("2021-03-04", "2021-03-05")):
    def fake(t, start, end, **k):
        calls.append((t, start, end, k.get("auto_adjust")))
        idx = pd.DatetimeIndex(list(dates), name="Date")
        return pd.DataFrame({"Close": [100.0 + i for i in range(len(idx))]}, index=idx)
    return fake


def test_real_run_without_market_file_fetches_adjusted_spy(tmp_run, tmp_path, monkeypatch):
    import types

    cfg = _local_run(tmp_run, tmp_path, GOOD)
    cfg.params["data"]["prices"]["market_path"] = None
    calls: list = []
    monkeypatch.setitem(sys.modules, "yfinance", types.SimpleNamespace(download=_fake_yf(calls)))
    rep = data.load_data(cfg)
    assert [(c[0], c[3]) for c in calls] == [("SPY", True)]       # total-return proxy, not ^GSPC
    assert list(rep.market.columns) == ["date", "market_close"] and len(rep.market) == 2
    assert "SPY" in rep.report["market_source"]
    cfg.params["data"]["prices"]["market_ticker"] = "^SP500TR"     # configurable
    data.load_data(cfg)
    assert calls[-1][0] == "^SP500TR"


def test_yfinance_cache_refetched_when_it_does_not_cover_the_range(tmp_path):
    calls: list = []
    fake = _fake_yf(calls, dates=("2021-01-04", "2021-01-05", "2021-06-01"))
    fetch_yfinance_prices(["AAA"], "2021-01-01", "2021-02-01", tmp_path, downloader=fake)
    fetch_yfinance_prices(["AAA"], "2021-01-01", "2021-02-01", tmp_path, downloader=fake)
    assert len(calls) == 1                                        # covered: cache reused
    out = fetch_yfinance_prices(["AAA"], "2021-01-01", "2021-07-01", tmp_path, downloader=fake)
    assert len(calls) == 2 and calls[1][1:3] == ("2021-01-01", "2021-07-01")  # end not covered -> refetch
    assert out["date"].max() == pd.Timestamp("2021-06-01")
    fetch_yfinance_prices(["AAA"], "2020-12-01", "2021-03-01", tmp_path, downloader=fake)
    assert len(calls) == 3 and calls[2][1:3] == ("2020-12-01", "2021-07-01")  # start not covered: union
    narrow = fetch_yfinance_prices(["AAA"], "2021-01-05", "2021-01-31", tmp_path, downloader=fake)
    assert len(calls) == 3 and list(narrow["date"]) == [pd.Timestamp("2021-01-05")]  # only the range asked


def test_yfinance_cache_without_range_record_is_refetched(tmp_path):
    pd.DataFrame({"date": pd.to_datetime(["2021-01-04"]), "ticker": "AAA", "adj_close": [1.0]}).to_parquet(
        tmp_path / "AAA.parquet", index=False)                    # a cache written before range records
    calls: list = []
    fetch_yfinance_prices(["AAA"], "2021-01-01", "2021-02-01", tmp_path, downloader=_fake_yf(calls))
    assert len(calls) == 1 and (tmp_path / "AAA.range.json").is_file()


@pytest.mark.parametrize("section,bad", [(None, "sorce"), ("reports", "colums"), ("prices", "market_pth")])
def test_misspelled_data_keys_are_errors(tmp_run, tmp_path, section, bad):
    from finlib.core.config import ConfigError

    cfg = _local_run(tmp_run, tmp_path, GOOD)
    target = cfg.params["data"] if section is None else cfg.params["data"][section]
    target[bad] = "x"
    dotted = "data." + (f"{section}." if section else "") + bad
    with pytest.raises(ConfigError, match=rf"invalid params:\n  - unknown key '{re.escape(dotted)}'"):
        data.load_data(cfg)


def test_text_empty_after_cleaning_names_file_row_and_column(tmp_run, tmp_path):
    rows = [dict(r) for r in GOOD]
    rows[2]["clean_content"] = "\u200b\u00ad"                    # not blank to str.strip(), empty once cleaned
    cfg = _local_run(tmp_run, tmp_path, rows)
    with pytest.raises(DataValidationError, match="empty after cleaning") as e:
        data.load_data(cfg)
    _assert_names(str(e.value), tmp_path / "reports.csv", 3, "clean_content")
    assert "'r3'" in str(e.value)


def test_stage_00_keeps_the_text_as_the_authors_send_it_unless_a_cleaning_is_named(tmp_run, tmp_path):
    """Default `data.text_cleaning: []`: tabs, indentation and runs of spaces reach the models as in
    the corpus (`clean_content`); `whitespace` named in params normalises them and is counted."""
    messy = "We rate AAA a Buy with a $50 target.\n\tRevenue\t2023\t2024\n  - margins  rose"
    cfg = _local_run(tmp_run, tmp_path, [dict(GOOD[0], clean_content=messy)])
    assert data.data_params(cfg)["text_cleaning"] == []
    rep = data.load_data(cfg)
    assert rep.reports["text"].iloc[0] == messy and rep.report["cleaning"] == {}
    cfg.params["data"]["text_cleaning"] = ["whitespace"]
    rep = data.load_data(cfg)
    assert rep.reports["text"].iloc[0] == ("We rate AAA a Buy with a $50 target.\nRevenue\t2023\t2024\n"
                                           "- margins rose")   # lines stripped; tabs inside a line are `nbsp`'s
    assert rep.report["cleaning"] == {"whitespace": 1}


def test_cleaning_rule_names_are_one_list_in_code_and_schema():
    from typing import get_args

    from finlib.core.params import DataSection

    ann = DataSection.model_fields["text_cleaning"].annotation
    literal = get_args(get_args(ann)[0])  # list[Literal[...]]
    assert tuple(literal) == CLEANING_RULES
    with pytest.raises(ValueError, match="unknown text cleaning rule"):
        clean_text("x", ["tabs"])
