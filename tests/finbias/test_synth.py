"""The synthetic market: determinism, planted statistics, calendar, text and lexicon facts.

The statistics are checked with independent computations (numpy over the written prices,
the real MPQA file when ../shared/data is present), never with the generator's own helpers.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from finlib.finbias.data.synth import (
    NEGATIVE_STRONGSUBJ,
    POSITIVE_STRONGSUBJ,
    STRONGSUBJ_WORDS,
    SynthConfigError,
    SynthParams,
    generate_market,
    write_market,
)
from finlib.finbias.vocab import SECTORS

BIG = {"n_reports": 3000, "n_firms": 200, "words_min": 400, "words_max": 600}  # paper-like report length
# Famous tickers typed here independently of finlib.finbias.data.synth's blacklist.
FAMOUS = {"AAPL", "MSFT", "AMZN", "GOOG", "META", "NVDA", "TSLA", "ORCL", "INTC", "CSCO", "ADBE", "NFLX",
          "PYPL", "QCOM", "AMGN", "GILD", "COST", "SBUX", "ABBV", "BKNG", "UBER", "SHOP", "SNOW", "PLTR"}


@pytest.fixture(scope="module")
def big():
    return generate_market(BIG, seed=11)


def _write_bytes(tmp: Path, cfg: dict, seed: int) -> dict[str, bytes]:
    paths = write_market(generate_market(cfg, seed), tmp)
    return {k: p.read_bytes() for k, p in paths.items()}


def test_same_seed_identical_bytes_different_seed_differs(tmp_path):
    cfg = {"n_reports": 25, "n_firms": 8}
    a = _write_bytes(tmp_path / "a", cfg, 5)
    b = _write_bytes(tmp_path / "b", cfg, 5)
    c = _write_bytes(tmp_path / "c", cfg, 6)
    assert set(a) >= {"reports", "prices", "market", "truth"}
    assert a == b
    assert all(a[k] != c[k] for k in ("reports", "prices", "market", "truth"))


def test_columns_and_dtypes(big):
    r = big.reports
    assert list(r.columns) == ["report_id", "ticker", "company", "sector", "date", "text", "analyst_rating"]
    assert r["report_id"].is_unique
    assert r["date"].dtype == "datetime64[ns]"
    assert list(big.prices.columns) == ["date", "ticker", "adj_close"]
    assert list(big.market.columns) == ["date", "market_close"]
    assert list(big.truth.columns) == ["report_id", "q", "drift", "beta", "planted_rating", "rating_sentence",
                                       "rating_term", "previous_rating_term", "report_layout"]
    p = big.prices
    assert p.equals(p.sort_values(["ticker", "date"], kind="stable").reset_index(drop=True))
    assert (p["adj_close"] > 0).all() and (big.market["market_close"] > 0).all()


def test_rating_shares_near_72_25_3(big):
    share = big.reports["analyst_rating"].value_counts(normalize=True)
    assert abs(share["bullish"] - 0.72) < 0.03
    assert abs(share["neutral"] - 0.25) < 0.03
    assert 0.01 < share["bearish"] < 0.06


def test_sector_shares_follow_table2(big):
    paper = {"Technology": 16.8, "Industrials": 16.2, "Financial Services": 15.4, "Healthcare": 14.5,
             "Consumer Defensive": 11.07, "Utilities": 7.9, "Communication Services": 6.6, "Energy": 6.9,
             "Real Estate": 4.5}
    share = big.reports["sector"].value_counts(normalize=True)
    assert set(share.index) <= set(SECTORS)
    for sector, pct in paper.items():
        assert abs(share.get(sector, 0.0) - pct / 100) < 0.03, sector


def test_betas_and_firm_fields(big):
    assert big.truth["beta"].between(0.5, 1.6).all()
    assert big.firms["idio_vol"].gt(0).all()


def _car_numpy(m, window: int = 60) -> np.ndarray:
    """60-day abnormal return r_i - beta*r_m from the written prices, with the true beta."""
    wide = m.prices.pivot(index="date", columns="ticker", values="adj_close")
    px = wide.to_numpy()
    ret = px[1:] / px[:-1] - 1.0
    mk = m.market.set_index("date")["market_close"].reindex(wide.index).to_numpy()
    mret = mk[1:] / mk[:-1] - 1.0
    day = wide.index.get_indexer(m.reports["date"])
    col = wide.columns.get_indexer(m.reports["ticker"])
    # return on day d (d>=1) is ret[d-1]; days +1..+window -> ret[day .. day+window-1]
    idx = day[:, None] + np.arange(window)[None, :]
    ab = ret[idx, col[:, None]] - m.truth["beta"].to_numpy()[:, None] * mret[idx]
    return ab.sum(axis=1)


def test_car60_correlates_with_q(big):
    car = _car_numpy(big)
    corr = np.corrcoef(car, big.truth["q"].to_numpy())[0, 1]
    # Target 0.5 for an isolated report; overlapping windows of the same firm dilute it. Measured at
    # this size: 0.443-0.466 over seeds 1-5 and 11; the sampling sd at n=3000 is ~0.015, so +-4 sd.
    assert 0.40 <= corr <= 0.52, corr


def test_calendar_weekdays_and_coverage(big):
    dates = pd.DatetimeIndex(big.market["date"])
    assert (dates.day_of_week < 5).all()
    assert dates.is_monotonic_increasing and dates.is_unique
    counts = big.prices.groupby("ticker")["date"].agg(["min", "max", "count"])
    assert (counts["count"] == len(dates)).all()  # every firm priced on every trading day
    pos = dates.get_indexer(big.reports["date"])
    assert (pos >= 300).all(), "need >= 300 trading days before each report"
    assert (len(dates) - 1 - pos >= 90).all(), "need >= 90 trading days after each report"


def test_no_real_tickers_or_names(big, shared_data_optional):
    tickers = set(big.firms["ticker"])
    assert all(re.fullmatch(r"[A-Z]{4}", t) for t in tickers)
    assert len(tickers) == len(big.firms)
    assert not tickers & FAMOUS
    if shared_data_optional is not None:
        real = pd.read_csv(shared_data_optional / "prices" / "sectors.csv")
        assert not tickers & set(real["ticker"])
        real_first_words = {str(n).split()[0].lower() for n in real["name"]}
        ours_first = {c.split()[0].lower() for c in big.firms["company"]}
        assert not ours_first & real_first_words


@pytest.fixture(scope="module")
def shared_data_optional():
    p = (Path(__file__).parents[2] / ".." / "shared" / "data").resolve()
    return p if p.is_dir() else None


def test_first_sentence_readable_by_extractor(big):
    from finlib.finbias.perturb.ratings import extract_analyst_rating

    got = big.reports["text"].map(lambda t: (lambda r: None if r is None else str(r))(extract_analyst_rating(t)))
    bad = big.reports.loc[got != big.reports["analyst_rating"], "text"].str.slice(0, 90).tolist()
    assert not bad, bad[:5]


def test_first_sentence_wording_mix(big):
    first = big.reports["text"].str.split("\n").str[0]
    standard = first.str.contains(r"\b(?:Bullish|Neutral|Bearish)\b")
    assert 0.7 < standard.mean() < 0.9
    broker = first.str.contains(r"\b(?:Buy|Hold|Sell|Outperform|Overweight|Underperform|Underweight|"
                                r"Accumulate|Reduce|Market Perform|Equal-Weight)\b")
    assert (standard ^ broker).all()


def test_text_length_and_splitter_stressors():
    m = generate_market({"n_reports": 40, "n_firms": 10, "words_min": 400, "words_max": 600}, 3)
    words = m.reports["text"].str.split().str.len()
    assert words.between(400, 660).all()
    joined = " ".join(m.reports["text"])
    for token in ("Inc.", "U.S.", "vs.", "approx.", " bn", "e.g.", "Q3"):
        assert token in joined, token
    assert re.search(r"\$\d+\.\d bn", joined)
    long = generate_market({"n_reports": 3, "n_firms": 3, "words_min": 2800, "words_max": 3000}, 3)
    assert long.reports["text"].str.split().str.len().between(2800, 3100).all()


def _tone(text: str) -> float:
    toks = re.findall(r"[a-z]+", text.lower())
    pos = sum(t in POSITIVE_STRONGSUBJ for t in toks)
    neg = sum(t in NEGATIVE_STRONGSUBJ for t in toks)
    return (pos - neg) / max(pos + neg, 1)


def test_opinion_tone_follows_the_analyst_not_q(big):
    tone = big.reports["text"].map(_tone)
    rating = big.reports["analyst_rating"]
    assert tone[rating == "bullish"].mean() > tone[rating == "neutral"].mean() + 0.5
    bull = rating == "bullish"
    within = np.corrcoef(tone[bull], big.truth["q"][bull])[0, 1]
    assert abs(within) < 0.2, "within a rating the tone must not track q"


def _strongsubj(shared: Path) -> tuple[set[str], set[str]]:
    exact, stemmed = set(), set()
    for line in (shared / "mpqa" / "subjclueslen1-HLTEMNLP05.tff").read_text(encoding="utf-8").splitlines():
        kv = dict(x.split("=", 1) for x in line.split() if "=" in x)
        if kv.get("type") == "strongsubj":
            exact.add(kv["word1"])
            if kv.get("stemmed1") == "y":
                stemmed.add(kv["word1"])
    return exact, stemmed


def test_opinion_words_are_mpqa_strongsubj(shared_data):
    exact, _ = _strongsubj(shared_data)
    assert STRONGSUBJ_WORDS <= exact, sorted(STRONGSUBJ_WORDS - exact)


def test_factual_sentences_have_no_strongsubj_word(shared_data):
    from nltk.stem import PorterStemmer

    from finlib.finbias.sentences import split_sentences

    exact, stemmed = _strongsubj(shared_data)
    ps = PorterStemmer()
    stems = {ps.stem(w) for w in stemmed}
    m = generate_market({"n_reports": 150, "n_firms": 30, "words_min": 400, "words_max": 600}, 21)
    offenders = []
    for text in m.reports["text"]:
        for sent in split_sentences(text)[1:]:  # the first sentence states the rating
            toks = re.findall(r"[a-z]+", sent.lower())
            if any(t in STRONGSUBJ_WORDS for t in toks):
                continue  # an opinion sentence
            hits = [t for t in toks if t in exact or ps.stem(t) in stems]
            if hits:
                offenders.append((hits, sent))
    assert not offenders, offenders[:5]


def test_unknown_or_invalid_params_are_errors():
    from finlib.core.config import ConfigError

    with pytest.raises(ConfigError, match=r"data\.synthetic: invalid params:\n  - unknown key 'data\.synthetic\.n_reprots' \(value 3\)"):
        SynthParams.from_section({"n_reprots": 3})
    with pytest.raises(SynthConfigError, match="no room"):
        generate_market({"n_reports": 3, "n_firms": 2, "start": "2020-01-01", "end": "2020-12-31",
                         "first_report": "2020-06-01"}, 1)


def test_factual_numbers_carry_q(big):
    """Revenue growth stated in the text (parsed here by regex) must rise with q."""
    pat = re.compile(r"Revenue (grew|declined) (\d+\.\d)% y/y")
    growth = big.reports["text"].map(
        lambda t: np.mean([float(v) * (1 if w == "grew" else -1) for w, v in pat.findall(t)] or [np.nan]))
    ok = growth.notna()
    assert ok.mean() > 0.9
    assert np.corrcoef(growth[ok], big.truth["q"][ok])[0, 1] > 0.5


def test_every_synthetic_rating_word_is_a_synonym_of_its_rating():
    """The generator's first-sentence vocabulary must stay inside finlib.finbias.vocab.RATING_SYNONYMS."""
    from finlib.finbias.data.synth import _RATING_WORDS
    from finlib.finbias.vocab import RATING_SYNONYMS, Rating

    assert set(_RATING_WORDS) == {"standard", "broker"}
    for style, by_rating in _RATING_WORDS.items():
        assert set(by_rating) == set(Rating), style
        for rating, words in by_rating.items():
            for word in words:
                assert word.lower() in RATING_SYNONYMS[rating], (style, rating, word)
                others = [r for r in Rating if r is not rating and word.lower() in RATING_SYNONYMS[r]]
                assert not others, (word, others)


def test_every_rating_word_is_read_back_by_the_extractor():
    from finlib.finbias.data.synth import _FIRST_SENTENCE, _RATING_WORDS
    from finlib.finbias.perturb.ratings import extract_analyst_rating

    for style, by_rating in _RATING_WORDS.items():
        for rating, words in by_rating.items():
            for word in words:
                for template in _FIRST_SENTENCE[style]:
                    sent = template.format(R=word, C="Corvanta Systems Inc.", T="CRVS", Q=3)
                    assert extract_analyst_rating(sent) == rating, sent


@pytest.mark.parametrize("section", [{"n_reports": 40, "n_firms": 12},
                                     {"n_reports": 40, "n_firms": 12, "rating_wording": "scales",
                                      "layout": "structured"}])
def test_truth_records_the_planted_rating_as_written(section):
    """The truth table says, for every report, the rating the generator planted and the text holding it,
    so checks of the pipeline need not read it back with the project's extractor."""
    from finlib.finbias.data.synth import PLANTED_COLUMNS
    from finlib.finbias.vocab import rating_of

    m = generate_market(section, 5)
    t = m.truth.merge(m.reports[["report_id", "text", "analyst_rating"]], on="report_id")
    assert set(PLANTED_COLUMNS) <= set(t.columns)
    assert (t["planted_rating"] == t["analyst_rating"]).all()
    for rec in t.itertuples():
        assert rec.text.startswith(rec.rating_sentence)
        assert rec.rating_term in rec.rating_sentence
        assert rating_of(rec.rating_term).value == rec.planted_rating
        if isinstance(rec.previous_rating_term, str):
            assert rec.previous_rating_term in rec.rating_sentence
            assert rating_of(rec.previous_rating_term).value != rec.planted_rating


def test_messy_share_lays_out_broker_text_and_records_it():
    """A quarter of the reports in broker layouts, about half of them provider front pages; a skeleton's planted
    rating line is the first sentence, a front page's planted head opens the report, and the rating read is the
    planted one; the other reports are the same text as without the mix."""
    from finlib.finbias.perturb.ratings import extract_analyst_rating
    from finlib.finbias.perturb.statement import find_rating_statement
    from finlib.finbias.sentences import first_sentence

    base = {"n_reports": 200, "n_firms": 15, "rating_wording": "scales", "layout": "structured",
            "words_min": 300, "words_max": 400}
    mixed = generate_market({**base, "messy_share": 0.25}, 9)
    plain = generate_market(base, 9)
    t = mixed.truth.merge(mixed.reports[["report_id", "text"]], on="report_id")
    provider = t["report_layout"].str.startswith("provider:")
    messy = t["report_layout"].str.startswith("messy:") | provider
    assert 0.15 < messy.mean() < 0.35 and t.loc[messy, "report_layout"].nunique() > 10
    assert 0.25 < provider.sum() / messy.sum() < 0.75
    for rec in t.itertuples():
        assert rec.text.startswith(rec.rating_sentence)
        if rec.report_layout.startswith("provider:"):
            assert find_rating_statement(rec.text).rating.value == rec.planted_rating
            continue
        assert first_sentence(rec.text) == rec.rating_sentence
        assert extract_analyst_rating(rec.text).value == rec.planted_rating
    same = plain.reports.set_index("report_id")["text"]
    assert all(same[r.report_id] == r.text for r in t[~messy].itertuples())
    assert not any(same[r.report_id] == r.text for r in t[messy].itertuples())
