"""Names shared by every stage: the rating enum, the perturbation conditions, the sectors.

One place for each fact: stages, tests and notebooks import these instead of spelling
"bullish" or "Financial Services" themselves, so a typo is an ImportError, not a silent
empty group.
"""
from __future__ import annotations

from enum import Enum


class Rating(str, Enum):
    """An investment rating: the analyst's, a model's answer, or a return-based label."""

    BULLISH = "bullish"
    NEUTRAL = "neutral"
    BEARISH = "bearish"

    def __str__(self) -> str:  # f"{Rating.BULLISH}" -> "bullish", as stored in artifacts
        return self.value


RATINGS: tuple[Rating, ...] = (Rating.BULLISH, Rating.NEUTRAL, Rating.BEARISH)

# Rating vocabulary used by the analyst-rating extractor (stage 02) and the answer parser
# (stage 04). Multi-word phrases are matched before single words. Lowercase.
RATING_SYNONYMS: dict[Rating, tuple[str, ...]] = {
    Rating.BULLISH: (
        "bullish", "strong buy", "buy", "outperform", "overweight", "accumulate",
        "market outperform", "sector outperform", "positive", "add",
    ),
    Rating.NEUTRAL: (
        "neutral", "hold", "market perform", "sector perform", "equal-weight", "equal weight",
        "peer perform", "in-line", "in line",
    ),
    Rating.BEARISH: (
        "bearish", "strong sell", "sell", "underperform", "underweight", "reduce",
        "market underperform", "sector underperform", "negative",
    ),
}


class Condition(str, Enum):
    """The four ways a report is shown to a model (Fin-Bias Sections 3 and 5.1)."""

    ORIGINAL = "original"
    NO_RATING = "no_rating"
    FAKE_RATING = "fake_rating"
    NO_OPINION = "no_opinion"

    def __str__(self) -> str:
        return self.value


CONDITIONS: tuple[Condition, ...] = tuple(Condition)

# The nine sectors of Fin-Bias Table 2, Yahoo-style names, in the paper's column order.
SECTORS: tuple[str, ...] = (
    "Communication Services",
    "Consumer Defensive",
    "Energy",
    "Financial Services",
    "Healthcare",
    "Industrials",
    "Real Estate",
    "Technology",
    "Utilities",
)

# GICS and other spellings a real corpus may use, mapped to the paper's Yahoo-style names.
# Sectors outside the paper's nine (e.g. Consumer Cyclical, Basic Materials) are kept under
# their own name by the loader and reported as "outside the paper's sectors", not remapped.
SECTOR_ALIASES: dict[str, str] = {
    "information technology": "Technology",
    "technology": "Technology",
    "tech": "Technology",
    "industrials": "Industrials",
    "financials": "Financial Services",
    "financial services": "Financial Services",
    "financial": "Financial Services",
    "health care": "Healthcare",
    "healthcare": "Healthcare",
    "consumer staples": "Consumer Defensive",
    "consumer defensive": "Consumer Defensive",
    "utilities": "Utilities",
    "communication services": "Communication Services",
    "communications": "Communication Services",
    "telecommunication services": "Communication Services",
    "energy": "Energy",
    "real estate": "Real Estate",
    "consumer discretionary": "Consumer Cyclical",
    "consumer cyclical": "Consumer Cyclical",
    "materials": "Basic Materials",
    "basic materials": "Basic Materials",
}

SYNTHETIC_CAVEAT = (
    "Synthetic data: numbers below come from finlib's seeded synthetic market, not from real "
    "analyst reports; they exercise the pipeline and are not research results."
)
