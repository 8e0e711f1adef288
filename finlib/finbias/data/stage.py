"""Stage 00 (home of notebooks/00_data_prep.ipynb): load, validate and clean the inputs.

This module loads the reports per source and runs the stage; file reading, checks and cleaning
are `finlib.finbias.data.validation`, prices (files, yfinance) `finlib.finbias.data.prices`.

Sources (params `data.source`):
- `synthetic`   : finlib.finbias.data.synth generates a seeded market, writes it to
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

Error policy (`finlib.finbias.data.validation`): bad input raises `DataValidationError` naming the file,
the row and the column. Nothing is dropped silently: reports whose first sentence states no
rating are kept with `analyst_rating = None` and counted in `data_report.json`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from finlib.core.config import RunConfig
from finlib.core.tables import paper_table
from finlib.finbias.data.prices import (
    fetch_yfinance_prices,
    load_market,
    load_prices,
)
from finlib.finbias.data.validation import (
    CLEANING_RULES,
    REPORT_COLUMNS,
    DataSourceError,
    DataValidationError,
    _blank,
    _col,
    _listing,
    _row,
    apply_column_mapping,
    check_required_values,
    check_unique_ids,
    clean_text,
    clean_text_logged,
    map_sectors,
    parse_dates,
    read_table,
)
from finlib.finbias.vocab import RATINGS, Rating

# The market return is a total return (S&P 500 total-return index or SPY), like the stocks' adjusted
# closes. Without a market file a real run fetches `data.prices.market_ticker` (params/default.yaml: SPY)
# with yfinance's auto_adjust (dividends reinvested), not the price-only ^GSPC index.


# ---------------------------------------------------------------- reports: load + validate

def validate_reports(df: pd.DataFrame, source: str, on_unknown_sector: str = "error") -> tuple[pd.DataFrame, dict]:
    """Validate and normalise mapped reports; returns the frame (contract dtypes) and notes."""
    if len(df) == 0:
        raise DataValidationError(f"{source}: no reports (the file has a header and 0 rows)")
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


def extract_ratings(texts: pd.Series, reading=None) -> pd.Series:
    """Analyst rating from each report's rating statement via the stage-02 reader (None = not stated);
    ``reading``: `finlib.finbias.perturb.stage.reading_from_params` of the run (None = the default)."""
    from finlib.finbias.perturb.statement import DEFAULT_READING, find_rating_statement  # stage 02 owns the policy

    found = [find_rating_statement(t, reading or DEFAULT_READING).rating if isinstance(t, str) else None
             for t in texts]
    return pd.Series([None if r is None else Rating(r).value for r in found], index=texts.index, dtype=object)


def clean_reports(reports: pd.DataFrame, rules: Iterable[str] = CLEANING_RULES
                  ) -> tuple[pd.DataFrame, dict[str, int]]:
    """Apply the cleaning `rules` to every text (stage 00: `data.text_cleaning`, none by default --
    the authors' text as sent); count reports per rule that changed something."""
    rules = tuple(rules)
    logged = reports["text"].map(lambda t: clean_text_logged(t, rules))
    out = reports.copy()
    out["text"] = logged.map(lambda x: x[0])
    counts: dict[str, int] = {}
    for rules in logged.map(lambda x: x[1]):
        for r in rules:
            counts[r] = counts.get(r, 0) + 1
    return out, counts


def check_text_after_cleaning(reports: pd.DataFrame) -> None:
    """A text made only of invisible characters passes validation but is empty once cleaned (by every
    rule, whichever the run applies: a check, not a change): an error naming the source file, the
    data row and the corpus's text column (set by `validate_reports`)."""
    empty = np.flatnonzero(_blank(reports["text"].map(clean_text)).to_numpy())
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


# ---------------------------------------------------------------- stage entry point

SECTION = "data"
NOTEBOOK_API = ("example_markdown", "example_report")  # what notebook 00 calls besides `run` and `summary`
# the tables of `result.tables` notebook 00 shows by name
TABLES = ("data_report", "synthetic_checks", "table2_sectors", "table3_analyst_ratings")
REPORT_KEYS = ()  # the keys of `result.report` notebook 00 reads


@dataclass
class DataResult:
    """What stage 00 produced: the four frames, the counts written to data_report.json (`report`),
    the tables it wrote (`tables`: what notebook 00 shows) and the artifacts' paths."""

    reports: pd.DataFrame
    prices: pd.DataFrame
    market: pd.DataFrame
    truth: pd.DataFrame | None
    report: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    paths: dict[str, Path] = field(default_factory=dict)


def data_params(cfg: RunConfig) -> dict:
    """The `data:` section, checked by the params schema (`finlib.core.params.DataSection`, closed at
    every level: `reports:`, `prices:`, `synthetic:`), so misspelled keys never fall back to defaults."""
    return cfg.section("data")


def _synthetic_inputs(cfg: RunConfig, d: dict) -> tuple[pd.DataFrame, dict, pd.DataFrame, dict, pd.DataFrame,
                                                       pd.DataFrame]:
    """Generate the synthetic market into data/raw/synthetic/<run>/ (once per params and seed), read it back."""
    from finlib.finbias.data.synth_cache import cached_market

    raw = cached_market(d["synthetic"], cfg.seed, cfg.raw_dir / "synthetic" / cfg.name)
    ident = {c: c for c in (*REPORT_COLUMNS, "analyst_rating")}
    reports, notes = load_reports_file(raw["reports"], ident)
    prices, pnotes = load_prices(raw["prices"])
    mkt, mnotes = load_market(raw["market"], "market_close")
    return reports, notes, prices, {**pnotes, **mnotes}, mkt, pd.read_parquet(raw["truth"])


def _real_inputs(cfg: RunConfig, d: dict, source: str) -> tuple[pd.DataFrame, dict, pd.DataFrame, dict,
                                                                pd.DataFrame]:
    rp, pp = d["reports"], d["prices"]
    cols, on_unknown = rp["columns"], rp["on_unknown_sector"]
    if source == "local":
        if not rp["path"]:
            raise DataSourceError("data.source is 'local' but data.reports.path is not set")
        reports, notes = load_reports_file(cfg.path(rp["path"]), cols, on_unknown)
    elif source == "huggingface":
        reports, notes = load_reports_hf(rp["hf_dataset"], rp["hf_split"], cols, on_unknown,
                                         revision=rp["hf_revision"])
    else:
        raise DataSourceError(f"data.source must be synthetic, local or huggingface, got {source!r}")
    tickers = sorted(reports["ticker"].unique())
    start = (reports["date"].min() - pd.Timedelta(days=600)).date().isoformat()
    end = (reports["date"].max() + pd.Timedelta(days=180)).date().isoformat()
    cache = cfg.path(pp["yfinance_cache"])
    if pp["path"]:
        prices, pnotes = load_prices(cfg.path(pp["path"]), tickers=tickers)
    else:
        prices = fetch_yfinance_prices(tickers, start, end, cache)
        pnotes = {"price_rows": int(len(prices)), "source": "yfinance"}
    if pp["market_path"]:
        mkt, mnotes = load_market(cfg.path(pp["market_path"]), pp["market_column"])
        pnotes = {**pnotes, **mnotes, "market_source": str(pp["market_path"])}
    else:
        ticker = pp["market_ticker"]
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


def check_priced_share(reports: pd.DataFrame, prices: pd.DataFrame, min_share: float) -> int:
    """How many reports have prices on their date (ticker priced, date within its price data): only
    those can get a label. Stops stage 00 -- before any model is paid to answer reports that can
    never be scored -- when their share is at or below `data.min_priced_share` (0.0: none at all)."""
    span = prices.groupby("ticker")["date"].agg(["min", "max"])
    first = reports["ticker"].map(span["min"])
    last = reports["ticker"].map(span["max"])
    covered = int(((reports["date"] >= first) & (reports["date"] <= last)).sum())
    share = covered / len(reports) if len(reports) else 0.0
    if covered == 0 or share <= min_share:
        raise DataValidationError(
            f"only {covered} of {len(reports)} reports have prices on their date (share {share:.3f}; "
            f"data.min_priced_share {min_share}): reports {reports['date'].min().date()} to "
            f"{reports['date'].max().date()}, prices {prices['date'].min().date() if len(prices) else 'none'} to "
            f"{prices['date'].max().date() if len(prices) else 'none'}. No label could be computed for the rest; "
            "stopped before any model call. Give prices covering the reports' dates.")
    return covered


def rating_agreement(reports: pd.DataFrame) -> dict[str, int] | None:
    """Where the corpus carries its own rating column (the synthetic market does): how often it agrees
    with the first-sentence rating the extractor read (None without such a column)."""
    if "given_rating" not in reports.columns:
        return None
    given = reports["given_rating"].map(lambda v: None if v is None or pd.isna(v) else str(v).strip().lower())
    found = reports["analyst_rating"]
    return {"given_vs_extracted_agree": int((given == found).sum()),
            "given_vs_extracted_disagree": int(((given != found) & found.notna()).sum()),
            "given_but_not_extracted": int((given.notna() & found.isna()).sum())}


def load_data(cfg: RunConfig) -> DataResult:
    """Load (or generate), validate, clean and extract the ratings -- everything stage 00 does but
    writing: what `run` writes, and what a check of the inputs alone needs."""
    d = data_params(cfg)
    source = "synthetic" if cfg.is_synthetic else d["source"]
    truth = None
    if source == "synthetic":
        reports, notes, prices, pnotes, market, truth = _synthetic_inputs(cfg, d)
    else:
        reports, notes, prices, pnotes, market = _real_inputs(cfg, d, source)
    reports, cleaning = clean_reports(reports, d["text_cleaning"])
    check_text_after_cleaning(reports)
    from finlib.finbias.perturb.stage import reading_from_params

    reading = reading_from_params(cfg.section("perturb"))
    reports["analyst_rating"] = extract_ratings(reports["text"], reading).astype(object)
    agreement = rating_agreement(reports)
    reports = reports.drop(columns="given_rating", errors="ignore")
    reports = reports[["report_id", "ticker", "company", "sector", "date", "text", "analyst_rating"]]
    report = summarise(reports, prices, market, {**notes, **pnotes})
    report.update(source=source, cleaning=cleaning, synthetic=source == "synthetic")
    report["reports_priced_on_their_date"] = check_priced_share(reports, prices, float(d.get("min_priced_share") or 0))
    if agreement:
        report["rating_extraction_check"] = agreement
    return DataResult(reports=reports, prices=prices, market=market, truth=truth, report=report)


def write_tables(cfg: RunConfig, res: DataResult) -> dict[str, pd.DataFrame]:
    """Tables 2 and 3 (analyst half), written with their captions; plus what notebook 00 shows
    beside them (the counts of data_report.json, the synthetic skew check), not written."""
    from finlib.core.tables import write_table

    table2 = sector_table(res.reports)
    write_table(cfg, "table2_sectors", table2, "Table 2: analyst reports per sector (ours vs. Fin-Bias)")
    table3 = analyst_rating_table(res.reports)
    write_table(cfg, "table3_analyst_ratings", table3, "Table 3 (analyst half): analyst ratings (ours vs. Fin-Bias)")
    return {"data_report": summary_table(res.report), "synthetic_checks": synthetic_checks(res),
            "table2_sectors": table2, "table3_analyst_ratings": table3}


def run(cfg: RunConfig) -> DataResult:
    """Stage 00: load (or generate), validate, clean, extract ratings; write the artifacts
    (reports, prices, market, truth for the synthetic market, data_report.json) and Tables 2-3."""
    from finlib.core import artifacts

    res = load_data(cfg)
    for name in ("reports", "prices", "market"):
        res.paths[name] = artifacts.write_frame(cfg, name, getattr(res, name))
    if res.truth is not None:
        res.paths["truth"] = artifacts.write_frame(cfg, "truth", res.truth)
    res.paths["data_report"] = artifacts.write_json(cfg, "data_report", res.report)
    res.tables = write_tables(cfg, res)
    return res


def summary(cfg: RunConfig, result: DataResult) -> str:
    """Notebook 00's first output: the run, source and seed, where the artifacts went, the caveat of
    synthetic data, and the headline counts (reports, unrated first sentences, reports without prices)."""
    from finlib.core.tables import SYNTHETIC_CAVEAT

    rep = result.report
    lines = [f"Run `{cfg.name}`, source `{rep['source']}`, seed {cfg.seed}; artifacts in `{cfg.processed_dir}`."]
    if rep.get("synthetic"):
        lines.append(f"**{SYNTHETIC_CAVEAT}**")
    lines.append(f"**{rep['n_reports']} reports** on {rep['n_tickers']} tickers, {rep['date_range'][0]} to "
                 f"{rep['date_range'][1]}; first sentence without a rating: {rep['no_rating_in_first_sentence']} "
                 f"(kept, rating None); without prices: {rep['reports_without_prices']}; priced on their date: "
                 f"{rep['reports_priced_on_their_date']}.")
    return "\n\n".join(lines)


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


def table3_footnote(paper_num: int, paper_percentage: float, paper_total: int) -> str:
    """A footnote where the paper's printed share disagrees with its own counts (Table 3 prints analyst
    Neutral as 24.74 % where 2,432 / 8,868 = 27.42 %); "" where they agree to the printed 2 decimals."""
    share = 100.0 * paper_num / paper_total if paper_total else np.nan
    if not np.isfinite(share) or abs(share - paper_percentage) < 0.006:
        return ""
    return (f"printed {paper_percentage:.2f} % is inconsistent with the paper's own counts: "
            f"{paper_num:,} / {paper_total:,} = {share:.2f} %")


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
    df["paper_note"] = [table3_footnote(r["paper_num"], r["paper_percentage"], rows[-1]["paper_num"]) for r in rows]
    unrated = pd.DataFrame({"rating": [TABLE3_UNRATED[source]], "num": [int(ratings.isna().sum())],
                            "percentage": [np.nan], "paper_num": [None], "paper_percentage": [np.nan],
                            "paper_note": [""]})
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


def summary_table(report: dict) -> pd.DataFrame:
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

    walk("", report)
    return pd.DataFrame(rows, columns=["count", "value"]).astype({"value": str})


def synthetic_checks(rep: DataResult) -> pd.DataFrame:
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
