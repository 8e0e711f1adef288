"""The shared rating vocabulary: normalised lookup, the whole-word pattern, the ambiguous words.

Expectations are written by hand from how the phrases appear in analyst reports and model replies.
"""
from __future__ import annotations

import re

import pytest

from finlib.finbias import vocab as schema
from finlib.finbias.vocab import (
    AMBIGUOUS_RATING_TERMS,
    HYPHENS,
    Rating,
    normalise_term,
    rating_of,
    rating_vocabulary,
    term_pattern,
)

B, N, S = Rating.BULLISH, Rating.NEUTRAL, Rating.BEARISH


@pytest.mark.parametrize(("term", "expected"), [
    (" Equal-Weight ", "equal weight"),
    ("MARKET\u2011PERFORM", "market perform"),       # non-breaking hyphen from a PDF
    ("in \u2013 line", "in line"),                    # en dash with spaces
    ("strong\t buy", "strong buy"),
])
def test_normalise_term(term, expected):
    assert normalise_term(term) == expected


@pytest.mark.parametrize(("term", "expected"), [
    ("Bullish", B), ("STRONG BUY", B), ("sector  outperform", B), ("Overweight", B), ("add", B),
    ("Market-Perform", N), ("equal weight", N), ("Equal-Weight", N), ("in-line", N), ("In Line", N),
    ("peer\u2010perform", N), ("hold", N), ("Sector Weight", N), ("market-weight", N), ("Perform", N),
    ("underperform", S), ("Strong-Sell", S), ("reduce", S), ("negative", S),
])
def test_rating_of_known_synonyms(term, expected):
    assert rating_of(term) is expected


@pytest.mark.parametrize("term", ["buyback", "holding", "outperformance", "bull", "", "strong", "performance", "weight"])
def test_rating_of_other_words_is_none(term):
    assert rating_of(term) is None


def test_vocabulary_refuses_a_phrase_under_two_ratings(monkeypatch):
    monkeypatch.setattr(schema, "RATING_SYNONYMS", {B: ("buy",), N: ("hold",), S: ("Buy",)})
    rating_vocabulary.cache_clear()
    try:
        with pytest.raises(ValueError, match="'Buy' under two ratings"):
            rating_vocabulary()
    finally:
        monkeypatch.undo()
        rating_vocabulary.cache_clear()
    assert rating_of("buy") is B


def test_vocabulary_is_read_only():
    with pytest.raises(TypeError):
        rating_vocabulary()["bullish"] = S  # type: ignore[index]


def _found(pattern: re.Pattern[str], text: str) -> list[str]:
    return [m.group() for m in pattern.finditer(text)]


def test_term_pattern_longest_phrase_first_and_any_case():
    p = term_pattern(["buy", "strong buy", "sell"])
    assert _found(p, "We rate it Strong Buy, not SELL.") == ["Strong Buy", "SELL"]


def test_term_pattern_spaces_and_hyphens_interchangeable():
    p = term_pattern(["equal-weight", "in line"])
    assert _found(p, "Equal Weight; equal-weight; EQUAL  WEIGHT; In-Line; in line") == [
        "Equal Weight", "equal-weight", "EQUAL  WEIGHT", "In-Line", "in line"]


@pytest.mark.parametrize("text", ["buyback", "the sell-side view", "holdings", "pre-hold", "rebuy", "buy_"])
def test_term_pattern_whole_words_only(text):
    assert _found(term_pattern(["buy", "sell", "hold"]), text) == []


@pytest.mark.parametrize(("text", "expected"), [
    ("Buy.", ["Buy"]), ("(Hold)", ["Hold"]), ("buy, hold", ["buy", "hold"]), ('"sell"', ["sell"]),
    ("Rating\u2013Buy", ["Buy"]),                     # en dash is not a joiner by default
])
def test_term_pattern_matches_next_to_punctuation(text, expected):
    assert _found(term_pattern(["buy", "sell", "hold"]), text) == expected


def test_term_pattern_hyphen_set_is_the_callers_choice():
    ascii_only, pdf = term_pattern(["sell", "equal weight"]), term_pattern(["sell", "equal weight"], hyphens=HYPHENS)
    assert _found(ascii_only, "sell\u2011side") == ["sell"]
    assert _found(pdf, "sell\u2011side") == []
    assert _found(ascii_only, "Equal\u2013Weight") == []
    assert _found(pdf, "Equal\u2013Weight") == ["Equal\u2013Weight"]


def test_term_pattern_allowed_suffixes():
    assert _found(term_pattern(["buy"]), "a Buy-rated stock") == []
    rated = term_pattern(["buy"], suffixes=("rated",))
    assert _found(rated, "a Buy-rated stock, a buy-side desk, a buy-ratedness") == ["Buy"]


def test_term_pattern_embeds_in_a_larger_regex():
    p = term_pattern(["hold", "buy"])
    slot = re.compile(r"rating:\s*(?P<term>" + p.pattern + r")")
    assert slot.search("final rating: HOLD").group("term") == "HOLD"   # case-insensitive inside only
    assert slot.search("Rating: hold") is None
    assert slot.search("rating: holdings") is None


def test_term_pattern_needs_a_term():
    with pytest.raises(ValueError, match="at least one"):
        term_pattern([" ", ""])


def test_ambiguous_terms_are_everyday_words_of_the_vocabulary():
    assert AMBIGUOUS_RATING_TERMS <= set(rating_vocabulary())   # a typo here would silently do nothing
    for word in ("buy", "sell", "hold", "add", "reduce", "positive", "negative", "in line", "neutral"):
        assert word in AMBIGUOUS_RATING_TERMS
    for jargon in ("bullish", "bearish", "outperform", "underweight", "strong buy", "market perform"):
        assert jargon not in AMBIGUOUS_RATING_TERMS


def test_average_labels():
    # the two averages every results table shows (stage 01 and stage 04 tables, notebooks' text)
    assert (schema.POOLED, schema.SECTOR_MEAN) == ("Average (pooled)", "Mean of sectors")


def test_term_pattern_suffix_exception_is_case_insensitive():
    from finlib.finbias.vocab import term_pattern

    pat = term_pattern(["buy"], suffixes=("rated",))
    for text in ("a Buy-rated stock", "a BUY-RATED stock", "a Buy-Rated stock"):
        assert pat.search(text), text
    assert not pat.search("a buy-side desk")


def test_vocabulary_comes_from_published_scales_with_sources():
    from finlib.finbias.vocab import RATING_SCALES, RATING_SYNONYMS, scale_table, synonyms_from_scales

    assert synonyms_from_scales(RATING_SCALES) == RATING_SYNONYMS
    assert all(sc.source.strip() for sc in RATING_SCALES)
    rows = {r["scale"]: r for r in scale_table()}
    assert "overweight" in rows["Morgan Stanley / J.P. Morgan / Barclays / Wells Fargo / Piper Sandler"]["bullish"]
    # every scale's three tiers read as the paper's three ratings
    for sc in RATING_SCALES:
        for rating, terms in ((B, sc.bullish), (N, sc.neutral), (S, sc.bearish)):
            assert all(rating_of(t) is rating for t in terms), sc.name
    # Oppenheimer's "Perform" is everyday English: trusted only in a rating slot
    assert "perform" in AMBIGUOUS_RATING_TERMS
