"""Rating extraction and the fake-rating rewrite (`finlib.finbias.perturb.ratings`): every term of every published
scale is read and faked, and a fake transition is a coherent analyst sentence (the new rating differs from
the previous one shown, and the direction verb agrees with the move)."""
from __future__ import annotations

import re

import pytest

from finlib.finbias.perturb.ratings import (
    FAMILIES,
    REWRITE_KINDS,
    find_rating_mentions,
    rating_of_sentence,
    replace_rating,
    rewrite_rating,
)
from finlib.finbias.vocab import RATING_SCALES, RATINGS, Rating, is_cjk

B, N, S = Rating.BULLISH, Rating.NEUTRAL, Rating.BEARISH
RANK = {S: 0, N: 1, B: 2}
TERMS = sorted({(t, r) for sc in RATING_SCALES for r, terms in ((B, sc.bullish), (N, sc.neutral), (S, sc.bearish))
                for t in terms})
UP = re.compile(r"\b(?:upgrad\w*|rais\w*|lift\w*|boost\w*)\b|上调|调高|调升", re.IGNORECASE)
DOWN = re.compile(r"\b(?:downgrad\w*|lower\w*|cut\w*|trim\w*)\b|下调|调低|调降", re.IGNORECASE)


def _slot(term: str) -> str:
    """A first sentence stating `term` as the rating, in the report's language."""
    return f"维持{term}评级。" if is_cjk(term) else f"Rating: {term.title()}."


def test_every_scale_term_has_a_replacement_family() -> None:
    from finlib.finbias.vocab import normalise_term

    assert {normalise_term(t) for t, _ in TERMS} <= set(FAMILIES)


@pytest.mark.parametrize("term,rating", TERMS, ids=[t for t, _ in TERMS])
def test_every_scale_term_is_extracted_and_faked(term: str, rating: Rating) -> None:
    sentence = _slot(term)
    assert rating_of_sentence(sentence) is rating
    for new in RATINGS:
        if new is rating:
            continue
        out, kind = rewrite_rating(sentence, new)
        assert rating_of_sentence(out) is new and kind in REWRITE_KINDS, (sentence, out)


def _coherent(sentence: str) -> bool:
    """Independent reading of a rewritten sentence: previous rating != current, verb agrees with the move."""
    ms = find_rating_mentions(sentence)
    cur = {m.rating for m in ms if m.role == "current"}
    prev = {m.rating for m in ms if m.role == "previous"}
    if len(cur) != 1:
        return False
    (c,) = cur
    if c in prev:
        return False
    up, down = bool(UP.search(sentence)), bool(DOWN.search(sentence))
    if prev:
        (p,) = prev
        return not (up and RANK[c] < RANK[p]) and not (down and RANK[c] > RANK[p])
    return not (up and c is S) and not (down and c is B)


TRANSITIONS = [
    "We upgrade Caterpillar (CAT) to Buy from Hold.",
    "Morgan Stanley downgrades Intel to Equal-weight from Overweight.",
    "Raising Home Depot (HD) to Overweight from Neutral.",
    "We move Exxon (XOM) to Reduce from Accumulate.",
    "We are downgrading Intel Corp. (INTC) to SELL from HOLD.",
    "We upgrade ORCL from Hold to Buy.",
    "Upgrading Acme to Outperform.",
    "We cut Acme to Underweight.",
    "We lower our rating on Acme to Market Perform from Outperform.",
    "由持有上调至买入评级。",
]


@pytest.mark.parametrize("sentence", TRANSITIONS)
def test_fake_transitions_are_coherent(sentence: str) -> None:
    analyst = rating_of_sentence(sentence)
    assert analyst is not None and _coherent(sentence)
    for new in RATINGS:
        if new is analyst:
            continue
        out, kind = rewrite_rating(sentence, new)
        assert rating_of_sentence(out) is new, out
        assert _coherent(out), (sentence, new, out)
        assert kind.startswith("transition"), kind


@pytest.mark.parametrize("sentence,new,expected,kind", [
    ("We upgrade Caterpillar (CAT) to Buy from Hold.", N, "We downgrade Caterpillar (CAT) to Hold from Buy.",
     "transition_previous_verb"),
    ("We upgrade Caterpillar (CAT) to Buy from Hold.", S, "We downgrade Caterpillar (CAT) to Sell from Hold.",
     "transition_verb"),
    ("Raising Home Depot (HD) to Overweight from Neutral.", N,
     "Lowering Home Depot (HD) to Equal-Weight from Overweight.", "transition_previous_verb"),
    ("We move Exxon (XOM) to Reduce from Accumulate.", B, "We move Exxon (XOM) to Add from Reduce.",
     "transition_previous"),
    ("We upgrade ORCL to Buy from Hold.", S, "We downgrade ORCL to Sell from Hold.", "transition_verb"),
    ("Maintain Hold.", B, "Maintain Buy.", "plain"),
    ("We rate Acme a Market Weight.", B, "We rate Acme an Overweight.", "plain"),
])
def test_rewrite_examples(sentence: str, new: Rating, expected: str, kind: str) -> None:
    assert rewrite_rating(sentence, new) == (expected, kind)


@pytest.mark.parametrize("sentence,rating", [
    ("We move Exxon (XOM) to Reduce from Accumulate.", S),
    ("Acme: Market Weight.", N), ("We rate Acme Sector Weight.", N), ("Rating: Perform.", N),
])
def test_ratings_that_crashed_or_went_unread(sentence: str, rating: Rating) -> None:
    assert rating_of_sentence(sentence) is rating
    for new in RATINGS:
        if new is not rating:
            assert rating_of_sentence(replace_rating(sentence + " Sales rose.", new)) is new


def test_rewrite_refuses_the_same_or_no_rating() -> None:
    with pytest.raises(ValueError, match="differ"):
        rewrite_rating("Maintain Hold.", N)
    with pytest.raises(ValueError, match="no unambiguous rating"):
        rewrite_rating("Revenue fell.", B)
