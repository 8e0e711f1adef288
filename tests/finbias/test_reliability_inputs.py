"""Bad inputs, one per row of the table in docs/reliability.md: each gives a clear error naming
file / row (or line) / field, or a counted exclusion. The messages asserted here are the ones a
user sees (the docs table quotes them)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from finlib.finbias.data.prices import load_market, load_prices
from finlib.finbias.data.stage import extract_ratings, load_reports_file
from finlib.finbias.data.validation import DataValidationError, read_table

COLS = {"report_id": "report_id", "ticker": "ticker", "company": "company", "sector": "sector", "date": "date",
        "text": "text"}
GOOD = "We rate ACME a Buy. Revenue grew 5 percent."


def _csv(tmp: Path, rows: list[dict], name: str = "reports.csv") -> Path:
    path = tmp / name
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _row(i: int, **kw) -> dict:
    return {"report_id": f"r{i}", "ticker": "ACME", "company": "Acme", "sector": "Technology",
            "date": "2021-03-01", "text": GOOD, **kw}


def _raises(match: str, fn, *args, **kw) -> str:
    with pytest.raises(DataValidationError, match=match) as info:
        fn(*args, **kw)
    return str(info.value)


def test_malformed_csv_names_the_line(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text('report_id,ticker,text\nr1,ACME,"fine"\nr2,ACME,"unclosed quote\n')
    _raises(r"r\.csv: cannot parse as \.csv: .*EOF inside string starting at row 2", read_table, p)


def test_malformed_jsonl_names_line_and_column_not_a_char_offset(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"report_id": "r1", "text": "a"}\n{"report_id": "r2", "text": "b"\n{"report_id": "r3"}\n')
    msg = _raises(r"r\.jsonl: line 2, column \d+: invalid JSON \(Expecting ',' delimiter\)", read_table, p)
    assert "position" not in msg and "char" not in msg
    p.write_text('{"report_id": "r1"}\n[1, 2]\n')
    _raises(r"r\.jsonl: line 2: expected one JSON object per line, got list", read_table, p)


def test_missing_or_misnamed_column(tmp_path):
    p = _csv(tmp_path, [_row(1)])
    _raises(r"column 'clean_content' \(mapped to 'text' by data.reports.columns\) is missing; available columns",
            load_reports_file, p, {**COLS, "text": "clean_content"})
    _raises(r"required column 'date' is not mapped", load_reports_file, p, {**COLS, "date": None})
    _raises(r"unknown key\(s\) \['txt'\]", load_reports_file, p, {**COLS, "txt": "text"})


@pytest.mark.parametrize("text", ["", "   ", "\u200b\u200b"])
def test_empty_or_whitespace_report(tmp_path, text):
    from finlib.finbias.data.stage import check_text_after_cleaning, clean_reports

    p = _csv(tmp_path, [_row(1), _row(2, text=text)])
    if text.strip():  # invisible characters pass the first check and are caught after cleaning
        reports, _ = load_reports_file(p, COLS)
        _raises(r"row 2 \(report_id 'r2'\)", check_text_after_cleaning, clean_reports(reports)[0])
    else:
        _raises(r"reports\.csv: empty text in column 'text' at row 2", load_reports_file, p, COLS)


def test_report_without_a_rating_sentence_is_counted_not_dropped(tmp_path):
    from finlib.finbias.data.stage import summarise

    p = _csv(tmp_path, [_row(1), _row(2, text="Revenue grew. Margins fell.")])
    reports, _ = load_reports_file(p, COLS)
    reports["analyst_rating"] = extract_ratings(reports["text"]).astype(object)
    assert reports["analyst_rating"].tolist() == ["bullish", None]
    prices = pd.DataFrame({"date": pd.to_datetime(["2021-03-01"]), "ticker": ["ACME"], "adj_close": [1.0]})
    market = pd.DataFrame({"date": pd.to_datetime(["2021-03-01"]), "market_close": [1.0]})
    s = summarise(reports, prices, market, {})
    assert s["no_rating_in_first_sentence"] == 1 and s["no_rating_report_ids"] == ["r2"]


def test_non_utf8_bytes_name_offset_row_and_column(tmp_path):
    p = tmp_path / "r.csv"
    p.write_bytes("report_id,ticker,text\nr1,ACME,ok\nr2,ACME,caf\xe9 au lait\n".encode("latin-1"))
    _raises(r"not valid UTF-8 at byte offset 44, row 2, column 'text' \(line 3\).*iconv", read_table, p)


def test_duplicate_report_ids(tmp_path):
    p = _csv(tmp_path, [_row(1), _row(2), {**_row(3), "report_id": "r1"}])
    _raises(r"duplicate report_id in column 'report_id': 'r1' in rows 1, 3", load_reports_file, p, COLS)


def test_unknown_sector_is_an_error_or_kept_and_counted(tmp_path):
    p = _csv(tmp_path, [_row(1), _row(2, sector="Tech & Stuff")])
    _raises(r"unknown sector in column 'sector': 'Tech & Stuff' \(first at row 2\).*on_unknown_sector: keep",
            load_reports_file, p, COLS)
    reports, notes = load_reports_file(p, COLS, on_unknown_sector="keep")
    assert notes["unmapped_sectors_kept"] == {"Tech & Stuff": 1}


def test_bad_dates_name_row_and_value(tmp_path):
    p = _csv(tmp_path, [_row(1), _row(2, date="31/31/2021")])
    _raises(r"unparseable date in column 'date' at row 2 \('31/31/2021'\)", load_reports_file, p, COLS)


@pytest.mark.parametrize("value, match", [
    ("0", r"non-positive price in column 'adj_close' at row 2 \('0'\)"),
    ("-3.5", r"non-positive price in column 'adj_close' at row 2 \('-3.5'\)"),
    ("n/a", r"non-numeric value in column 'adj_close' at row 2 \('n/a'\)"),
])
def test_zero_negative_and_non_numeric_prices(tmp_path, value, match):
    p = _csv(tmp_path, [{"date": "2021-01-04", "ticker": "ACME", "adj_close": "10"},
                        {"date": "2021-01-05", "ticker": "ACME", "adj_close": value}], "prices.csv")
    _raises(r"prices\.csv: " + match, load_prices, p)


def test_blank_prices_are_dropped_and_counted(tmp_path):
    p = _csv(tmp_path, [{"date": "2021-01-04", "ticker": "ACME", "adj_close": "10"},
                        {"date": "2021-01-05", "ticker": "ACME", "adj_close": ""}], "prices.csv")
    prices, notes = load_prices(p)
    assert len(prices) == 1 and notes["missing_adj_close_dropped"] == 1


def test_price_file_without_its_columns_and_duplicate_days(tmp_path):
    p = _csv(tmp_path, [{"date": "2021-01-04", "symbol": "ACME", "close": "10"}], "prices.csv")
    _raises(r"prices\.csv: missing column\(s\) \['ticker', 'adj_close'\]", load_prices, p)
    p = _csv(tmp_path, [{"date": "2021-01-04", "ticker": "ACME", "adj_close": "10"}] * 2, "prices.csv")
    _raises(r"duplicate \(ticker, date\) .*ACME 2021-01-04 at row 1", load_prices, p)
    m = _csv(tmp_path, [{"date": "2021-01-04", "spx": "10"}], "market.csv")
    _raises(r"market\.csv \(set data\.prices\.market_column\): missing column\(s\) \['sp500_tr_close'\]",
            load_market, m, "sp500_tr_close")


def test_tickers_without_prices_and_dates_outside_coverage_are_counted_exclusions():
    from finlib.finbias.labels.market_model import compute_labels

    days = pd.bdate_range("2021-01-01", periods=200)
    rng = np.random.default_rng(0)
    mkt = pd.DataFrame({"date": days, "market_close": 100 * np.exp(np.cumsum(rng.normal(0, 0.01, len(days))))})
    prices = pd.DataFrame({"date": days, "ticker": "ACME",
                           "adj_close": 50 * np.exp(np.cumsum(rng.normal(0, 0.01, len(days))))})
    bad = prices.copy()
    bad["ticker"] = "BADP"
    bad.loc[bad.index[30], "adj_close"] = np.nan
    events = pd.DataFrame({"report_id": ["ok", "noprice", "late", "early", "nanprice"],
                           "ticker": ["ACME", "ZZZZ", "ACME", "ACME", "BADP"],
                           "date": pd.to_datetime(["2021-02-01", "2021-02-01", "2021-09-20", "2020-06-01",
                                                   "2021-02-01"])})
    out = compute_labels(events, pd.concat([prices, bad]), mkt, window=60)
    reasons = dict(zip(out["report_id"], out["excluded_reason"]))
    assert reasons["ok"] is None
    assert reasons["noprice"] == "no_prices"
    assert reasons["late"] == reasons["early"] == "outside_price_coverage"
    assert reasons["nanprice"] in ("invalid_price", "too_few_event_obs")


def test_lexicon_in_the_wrong_format(tmp_path):
    from finlib.finbias.perturb.lexicon import LexiconError, load_lexicon

    p = tmp_path / "lex.tff"
    p.write_text("word,polarity\nabandon,negative\n")
    with pytest.raises(LexiconError) as info:
        load_lexicon(p)
    assert str(p) in str(info.value) and "line" in str(info.value)


def test_registry_record_without_its_key_variable(tmp_path, monkeypatch):
    import yaml
    from llm_helpers import api_record

    from finlib.llm.registry import RegistryError, load_registry
    from finlib.llm.spec import MissingKeyError

    rec = api_record("m", "http://127.0.0.1:1/v1", "RELIABILITY_UNSET_KEY")
    p = tmp_path / "models.yaml"
    p.write_text(yaml.safe_dump({"models": [rec]}))
    monkeypatch.delenv("RELIABILITY_UNSET_KEY", raising=False)
    with pytest.raises(MissingKeyError, match="RELIABILITY_UNSET_KEY"):
        load_registry(p)["m"].api_key()
    p.write_text(yaml.safe_dump({"models": [{k: v for k, v in rec.items() if k != "api_key_env"}]}))
    with pytest.raises(RegistryError, match=r"models\[0\] 'm', field 'api_key_env': missing"):
        load_registry(p)
