"""Sentence units as reports print them: soft wraps, hyphenation at a line end, ellipsis endings, CRLF, NBSP
and non-ASCII hyphens. Expected splits are written by hand."""

from __future__ import annotations

import pytest

from finlib.finbias.perturb.statement import find_rating_statement
from finlib.finbias.sentences import split_sentences
from finlib.finbias.vocab import Rating

WRAPPED = (
    "We are reiterating our SELL rating on AMC Entertainment\n"
    "Holdings Inc. (AMC) as dilution continues to weigh on\n"
    "the shares.\n\n"
    "Volumes fell."
)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (WRAPPED, [WRAPPED[: WRAPPED.index("\n\n")], "Volumes fell."]),
        (
            "We reiterate our BUY rating on JPMorgan Chase & Co.\n(JPM) and our $235 target.\n\nNext.",
            ["We reiterate our BUY rating on JPMorgan Chase & Co.\n(JPM) and our $235 target.", "Next."],
        ),
        (
            "We see the restruc-\nturing benefits in 2027. Margins rise.",
            ["We see the restruc-\nturing benefits in 2027.", "Margins rise."],
        ),
        (
            "We upgrade Snap (SNAP) to Buy from Hold... Demand held up. Margins rose.",
            ["We upgrade Snap (SNAP) to Buy from Hold...", "Demand held up.", "Margins rose."],
        ),
        (
            "We upgrade Snap (SNAP) to Buy from Hold\u2026 Demand held up.",
            ["We upgrade Snap (SNAP) to Buy from Hold\u2026", "Demand held up."],
        ),
        (
            "Q3 Review: Better Mix, Lower Costs\r\nWe rate Acme Corp. (ACME) Buy.\r\nOrders rose 9%.",
            ["Q3 Review: Better Mix, Lower Costs", "We rate Acme Corp. (ACME) Buy.", "Orders rose 9%."],
        ),
        (
            "Summary\nwe upgrade acme corp. (acme) to buy from hold.",
            ["Summary", "we upgrade acme corp. (acme) to buy from hold."],
        ),
        (
            "Margins Bottoming; Demand Stabilizing\nWe upgrade Acme to Buy.",
            ["Margins Bottoming; Demand Stabilizing", "We upgrade Acme to Buy."],
        ),
        (
            "We maintain our Buy rating on Acme Corp. (ACME) with a $40 target\nKey points\n- Sales rose",
            ["We maintain our Buy rating on Acme Corp. (ACME) with a $40 target", "Key points", "- Sales rose"],
        ),
        (
            "We maintain our Buy rating with a $40 target\nPrice target: $40 (up from $35)",
            ["We maintain our Buy rating with a $40 target", "Price target: $40 (up from $35)"],
        ),
    ],
)
def test_split_as_a_reader_splits(text, want):
    assert split_sentences(text) == want


@pytest.mark.parametrize(
    ("text", "rating"),
    [
        ("We downgrade Zoom (ZM) to Market\u2011Perform from Outperform.\n\nBody.", Rating.NEUTRAL),
        ("We downgrade Zoom (ZM) to Market\u2010Perform from Outperform.\n\nBody.", Rating.NEUTRAL),
        ("KEY POINTS\nWe rate Acme\u00a0Corp. (ACME)\u00a0Outperform.\n\nBody.", Rating.BULLISH),
        ("Hershey Co HSY\r\nMorningstar Rating: 3 stars\r\nFair Value Estimate: $190\r\n\r\nBody.", Rating.NEUTRAL),
        ("We think shares of Hershey are fairly\nvalued.\n\nBody.", Rating.NEUTRAL),
    ],
)
def test_unicode_hyphens_nbsp_crlf_and_wraps_are_read(text, rating):
    assert find_rating_statement(text).rating is rating


def test_a_prose_sentence_without_rating_ends_the_front_matter_of_its_paragraph():
    assert find_rating_statement("Gamma reported its third quarter. We rate it Hold.").rating is None
    got = find_rating_statement("This report is for institutional investors only.\n\nWe rate Gamma Hold.\n\nBody.")
    assert got.rating is Rating.NEUTRAL and got.rule == "front_matter_sentence" and got.unit == 1
