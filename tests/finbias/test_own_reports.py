"""The user's own reports: PDFs built here with reportlab and fpdf2, HTML, text, Markdown and tables.

Truth is what the builders planted (tests/finbias/own_report_pdfs.py): the rating line, body sentences
written as a sell-side note reads, running header and footer, page numbers, a word split at a line end.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest
from own_report_pdfs import (
    FOOTER,
    HEADER,
    RATING_LINE,
    build_encrypted,
    build_fpdf,
    build_reportlab,
    build_scan,
)

from finlib.finbias.ownreports.collect import rating_statement, read_folder
from finlib.finbias.ownreports.extract import PDF_LIBRARY, PDF_READERS, Unreadable, html_text, pdf_pages
from finlib.finbias.ownreports.meta import date_in_text, from_name, report_meta, ticker_in_text
from finlib.finbias.ownreports.pages import clean_pages, join_hyphenated, running_shapes
from finlib.finbias.perturb.ratings import extract_analyst_rating

LAYOUTS = {
    "reportlab one column": lambda p: build_reportlab(p, columns=1),
    "reportlab two columns": lambda p: build_reportlab(p, columns=2),
    "reportlab no table": lambda p: build_reportlab(p, columns=1, table=False, pages=2),
    "fpdf2 three pages": lambda p: build_fpdf(p, pages=3),
}


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_rating_and_body_survive_extraction(tmp_path, layout):
    path = tmp_path / "report.pdf"
    planted = LAYOUTS[layout](path)
    text, stats = clean_pages(pdf_pages(path))
    lines = [x.strip() for x in text.split("\n")]
    assert planted.rating_line in lines, "the rating statement must stay one line"
    rating, body, front = rating_statement(text)
    assert (rating, body.split("\n")[0], front) == ("bullish", planted.rating_line, "12 March 2024")
    assert extract_analyst_rating(body) == "bullish"
    flat = _flat(text)
    positions = [flat.find(s) for s in planted.body]
    assert -1 not in positions, [s for s, p in zip(planted.body, positions, strict=True) if p < 0]
    assert positions[:6] == sorted(positions[:6]), "body sentences out of order"
    assert HEADER not in text and FOOTER not in text
    assert not re.search(r"Page \d+ of \d+", text)
    assert stats["running_lines_removed"] >= 2 * planted.pages


@pytest.mark.parametrize("library", sorted(PDF_READERS))
def test_every_reader_keeps_the_rating_line_in_one_column(tmp_path, library):
    path = tmp_path / "one.pdf"
    build_reportlab(path, columns=1)
    text, _ = clean_pages(pdf_pages(path, library))
    assert RATING_LINE in text and "transportation" in text and "transporta-" not in text


def test_scan_without_text_layer_is_refused_with_reason(tmp_path):
    build_scan(tmp_path / "scan.pdf")
    with pytest.raises(Unreadable) as exc:
        pdf_pages(tmp_path / "scan.pdf")
    assert exc.value.reason == "no text layer"


@pytest.mark.parametrize("library", sorted(PDF_READERS))
def test_encrypted_pdf_is_refused_with_reason(tmp_path, library):
    build_encrypted(tmp_path / "locked.pdf")
    with pytest.raises(Unreadable) as exc:
        pdf_pages(tmp_path / "locked.pdf", library)
    assert exc.value.reason == "encrypted"


def test_running_lines_found_by_hand_counted_fixture():
    pages = [
        ["ACME Research", "Rating: Buy on ACME", "body one", "Page 1 of 3"],
        ["ACME Research", "body two", "Page 2 of 3"],
        ["ACME Research", "body three", "Page 3 of 3"],
    ]
    assert running_shapes(pages) == {"acme research", "page # of #"}
    text, stats = clean_pages(["\n".join(p) for p in pages])
    assert text.split("\n") == ["Rating: Buy on ACME", "body one", "body two", "body three"]
    assert stats["running_lines_removed"] == 6


def test_first_page_keeps_a_repeated_header_that_states_the_rating():
    pages = ["ACME | Rating: BUY | 1 Mar 2024\nbody one\n1", "ACME | Rating: BUY | 1 Mar 2024\nbody two\n2"]
    text, _ = clean_pages(pages)
    assert text.split("\n") == ["ACME | Rating: BUY | 1 Mar 2024", "body one", "body two"]


def test_hyphenation_joins_lower_case_continuations_only():
    assert join_hyphenated("the analy-\nsts expect") == "the analysts expect"
    assert join_hyphenated("the S&P-\n500 index") == "the S&P-\n500 index"
    assert join_hyphenated("a Buy-\nRated name") == "a Buy-\nRated name"


def test_html_keeps_blocks_as_lines_and_skips_scripts():
    raw = (
        "<html><head><title>x</title><style>p{}</style></head><body><h1>ACME Corp (ACME)</h1>"
        "<p>Rating: <b>Buy</b></p><script>var a=1;</script><p>Margins &amp; volumes rose.</p>"
        "<table><tr><td>EPS</td><td>2.31</td></tr></table></body></html>"
    )
    assert html_text(raw).split("\n") == ["ACME Corp (ACME)", "Rating: Buy", "Margins & volumes rose.", "EPS | 2.31"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Equity Research\nMarch 12, 2024\nRating: Buy", "2024-03-12"),
        ("12 Mar 2024 | Harbour Lane", "2024-03-12"),
        ("Published 2023-11-02. Next update 2024-01-05", "2023-11-02"),
        ("No date written here", None),
    ],
)
def test_date_in_front_matter(text, expected):
    got = date_in_text(text)
    assert (None if got is None else got.strftime("%Y-%m-%d")) == expected


def test_ticker_in_text_and_file_name_pattern():
    assert ticker_in_text("Northwind Freight (NASDAQ: NWFT) Buy") == "NWFT"
    assert ticker_in_text("Ticker: BRK.B\nRating: Hold") == "BRK.B"
    assert ticker_in_text("Northwind Freight (NWFT): Buy") == "NWFT"
    ticker, date = from_name("NWFT_20240312.pdf", r"(?P<ticker>[A-Z]+)_(?P<date>\d{8})")
    assert ticker == "NWFT" and date == pd.Timestamp("2024-03-12")


def test_meta_rules_prefer_sidecar_then_file_name_then_text():
    side = pd.DataFrame(
        {"ticker": ["SIDE"], "date": ["2020-01-02"], "sector": ["Energy"]},
        index=pd.Index(["ACME_2021-05-06.txt"], name="file"),
    )
    text = "Northwind (NWFT) 7 July 2022\nRating: Buy"
    got = report_meta("ACME_2021-05-06.txt", text, side, r"(?P<ticker>[A-Z]+)_(?P<date>[\d-]+)")
    assert (got["ticker"], got["ticker_rule"], got["date_rule"], got["sector"]) == (
        "SIDE",
        "sidecar",
        "sidecar",
        "Energy",
    )
    got = report_meta("ACME_2021-05-06.txt", text, None, r"(?P<ticker>[A-Z]+)_(?P<date>[\d-]+)")
    assert (got["ticker"], got["date"], got["ticker_rule"]) == ("ACME", pd.Timestamp("2021-05-06"), "file name")
    got = report_meta("notes.txt", text, None, r"(?P<ticker>[A-Z]+)_(?P<date>[\d-]+)")
    assert (got["ticker"], got["date"], got["date_rule"]) == ("NWFT", pd.Timestamp("2022-07-07"), "text")


def test_folder_reads_every_format_and_names_every_exclusion(tmp_path):
    d = tmp_path / "reports"
    d.mkdir()
    build_reportlab(d / "NWFT_2024-03-12.pdf", columns=2)
    build_scan(d / "SCAN_2024-01-01.pdf")
    build_encrypted(d / "LOCK_2024-01-01.pdf")
    (d / "memo.html").write_text(
        "<p>Ridgeway Mills (RDGM)</p><p>5 June 2023</p><p>We downgrade Ridgeway Mills to Sell on weaker pricing.</p>",
        encoding="utf-8",
    )
    (d / "CLRW_2022-09-30.md").write_text(
        "# Clearwater Utilities\n\n**We rate CLRW Hold.** Rate cases pending.\n", encoding="utf-8"
    )
    (d / "undated.txt").write_text("Maintain Outperform on Pine Bay (PNBY).\nVolumes improved.\n", encoding="utf-8")
    (d / "norating_2024-02-02.txt").write_text(
        "Pine Bay (PNBY) reported results. Volumes improved.\n", encoding="utf-8"
    )
    pd.DataFrame(
        {
            "text": ["Reiterate Buy on Vale Park.\nStrong quarter.", "Results were mixed."],
            "ticker": ["VLPK", "VLPK"],
            "date": ["2021-04-01", "2021-07-01"],
        }
    ).to_csv(d / "batch.csv", index=False)
    (d / "chart.png").write_bytes(b"\x89PNG")
    got = read_folder(d)
    rep = got.reports.set_index("source_file")
    assert set(rep.index) == {"NWFT_2024-03-12.pdf", "memo.html", "CLRW_2022-09-30.md", "batch.csv row 2"}
    assert rep.loc["NWFT_2024-03-12.pdf", ["ticker", "ticker_rule", "analyst_rating"]].tolist() == [
        "NWFT",
        "file name",
        "bullish",
    ]
    assert rep.loc["memo.html", ["ticker", "date", "date_rule", "analyst_rating"]].tolist() == [
        "RDGM",
        pd.Timestamp("2023-06-05"),
        "text",
        "bearish",
    ]
    assert rep.loc["CLRW_2022-09-30.md", "analyst_rating"] == "neutral"
    assert rep.loc["batch.csv row 2", "date_rule"] == "column"
    reasons = dict(zip(got.exclusions["source_file"], got.exclusions["reason"], strict=True))
    assert reasons == {
        "SCAN_2024-01-01.pdf": "no text layer",
        "LOCK_2024-01-01.pdf": "encrypted",
        "undated.txt": "no date",
        "norating_2024-02-02.txt": "no readable rating",
        "batch.csv row 3": "no readable rating",
        "chart.png": "unsupported file type",
    }
    assert got.counts()["reports"] + len(got.exclusions) == 10
    assert got.rules["pdf_library"] == PDF_LIBRARY


def test_parquet_and_jsonl_rows_read_with_missing_fields_left_to_the_text(tmp_path):
    """One report per row of a Parquet and a JSONL file; a record without a ticker, an id or a text (a
    missing JSONL key, a Parquet null) takes the ticker from its text and a row-numbered id, never "nan"."""
    d = tmp_path / "reports"
    d.mkdir()
    pd.DataFrame(
        {
            "report_id": ["PQ-1", None],
            "text": ["Upgrade to Buy on Harbor Gas (NYSE: HBGS).\nDemand held.", "Reiterate Sell on Oak Rail (OKRL)."],
            "ticker": ["HBGS", None],
            "date": ["2022-03-01", "2022-04-01"],
        }
    ).to_parquet(d / "desk.parquet", index=False)
    (d / "feed.jsonl").write_text(
        '{"report_id": "J-1", "ticker": "LMNS", "date": "2023-01-05", "text": "We rate Lumen Soft Hold."}\n'
        '{"date": "2023-02-06", "text": "Maintain Outperform on Cobalt Works (NASDAQ: CBLT).\\nMargins widened."}\n'
        '{"report_id": "J-3", "date": "2023-03-07"}\n',
        encoding="utf-8",
    )
    got = read_folder(d)
    rep = got.reports.set_index("source_file")
    assert set(rep.index) == {"desk.parquet row 1", "desk.parquet row 2", "feed.jsonl row 1", "feed.jsonl row 2"}
    assert rep.loc["desk.parquet row 2", ["report_id", "ticker", "ticker_rule"]].tolist() == ["desk-2", "OKRL", "text"]
    assert rep.loc["feed.jsonl row 2", ["report_id", "ticker", "ticker_rule", "analyst_rating"]].tolist() == [
        "feed-2",
        "CBLT",
        "text",
        "bullish",
    ]
    assert rep.loc["feed.jsonl row 1", ["ticker", "date", "analyst_rating"]].tolist() == [
        "LMNS",
        pd.Timestamp("2023-01-05"),
        "neutral",
    ]
    assert rep.loc["desk.parquet row 1", "analyst_rating"] == "bullish"
    assert dict(zip(got.exclusions["source_file"], got.exclusions["reason"], strict=True)) == {
        "feed.jsonl row 3": "empty text"
    }
