"""Names shared by every stage: the rating enum, the perturbation conditions, the sectors.

One place for each fact: stages, tests and notebooks import these instead of spelling
"bullish" or "Financial Services" themselves, so a typo is an ImportError, not a silent
empty group.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from types import MappingProxyType


class Rating(str, Enum):
    """An investment rating: the analyst's, a model's answer, or a return-based label."""

    BULLISH = "bullish"
    NEUTRAL = "neutral"
    BEARISH = "bearish"

    def __str__(self) -> str:  # f"{Rating.BULLISH}" -> "bullish", as stored in artifacts
        return self.value


RATINGS: tuple[Rating, ...] = (Rating.BULLISH, Rating.NEUTRAL, Rating.BEARISH)

@dataclass(frozen=True)
class RatingScale:
    """One published rating scale: its terms per rating, and where it comes from."""

    name: str
    bullish: tuple[str, ...]
    neutral: tuple[str, ...]
    bearish: tuple[str, ...]
    source: str


# The stock-rating scales major brokers publish (each firm's "ratings definitions" section of its
# research disclosures; read from memory of those disclosures, not fetched here: add a scale with
# its source when a corpus uses another). Tiers above/below the 3-way scale (Strong Buy,
# Conviction Buy, Strong Sell) map to the nearest of the paper's three ratings. "Not Rated",
# "Restricted", "Under Review" are no rating. The first rows are the generic words the paper and
# the models use.
RATING_SCALES: tuple[RatingScale, ...] = (
    RatingScale("Fin-Bias labels", ("bullish",), ("neutral",), ("bearish",), "Fin-Bias paper, Section 4.1"),
    RatingScale("generic tone", ("positive",), (), ("negative",), "common sell-side shorthand (ambiguous English)"),
    RatingScale("Argus / Goldman Sachs / Citi / UBS / Stifel / Truist", ("buy",), ("hold", "neutral"), ("sell",),
                "Buy/Hold/Sell (Argus, Stifel, Truist) and Buy/Neutral/Sell (Goldman Sachs, Citi, UBS) rating "
                "definitions"),
    RatingScale("CFRA / Zacks / Needham / Raymond James", ("strong buy", "buy"), ("hold",), ("sell", "strong sell"),
                "five-tier Strong Buy..Strong Sell scales (CFRA STARS, Zacks Rank; Needham and Raymond James "
                "'Strong Buy')"),
    RatingScale("Morgan Stanley / J.P. Morgan / Barclays / Wells Fargo / Piper Sandler",
                ("overweight",), ("equal weight", "equal-weight", "neutral", "market weight"), ("underweight",),
                "Overweight/Equal-weight/Underweight (Morgan Stanley, Barclays, Wells Fargo), "
                "Overweight/Neutral/Underweight (J.P. Morgan, Piper Sandler); Market Weight (older Wells Fargo)"),
    RatingScale("KeyBanc", ("overweight",), ("sector weight",), ("underweight",), "KeyBanc Capital Markets"),
    RatingScale("RBC / BMO / TD Cowen / Bernstein / Evercore ISI",
                ("outperform", "sector outperform", "market outperform"),
                ("sector perform", "market perform", "in line", "in-line", "peer perform"),
                ("underperform", "sector underperform", "market underperform"),
                "Outperform/Sector Perform/Underperform (RBC), Outperform/Market Perform/Underperform (BMO, "
                "TD Cowen, Bernstein), Outperform/In Line/Underperform (Evercore ISI), Peer Perform (Wolfe)"),
    RatingScale("Oppenheimer", ("outperform",), ("perform",), ("underperform",), "Oppenheimer & Co."),
    RatingScale("BofA / Jefferies / Mizuho / Baird / Macquarie", ("buy", "outperform"), ("neutral", "hold"),
                ("underperform",),
                "Buy/Neutral/Underperform (BofA Securities, Mizuho), Buy/Hold/Underperform (Jefferies), "
                "Outperform/Neutral/Underperform (Baird, Macquarie)"),
    RatingScale("HSBC / Nomura / European and Asian brokers", ("buy", "accumulate", "add"), ("hold", "neutral"),
                ("reduce", "sell"),
                "Buy/Hold/Reduce (HSBC), Buy/Neutral/Reduce (Nomura), Buy/Accumulate/Hold/Reduce/Sell and "
                "Add/Hold/Reduce scales of several European and Asian brokers"),
    # Chinese labels: the five-tier scale of mainland Chinese brokers, and the tone words models in the
    # study (Qwen, DeepSeek, GLM, Yi, InternLM) answer with when they reply in Chinese.
    RatingScale("Chinese brokers", ("买入", "增持"), ("中性", "持有"), ("减持", "卖出"),
                "买入/增持/中性/减持/卖出 (Buy/Overweight/Neutral/Underweight/Sell) rating definitions of "
                "mainland Chinese brokers; 持有 (Hold) of Hong Kong brokers' Chinese reports"),
    RatingScale("Chinese tone", ("看涨", "看多"), ("中性",), ("看跌", "看空"),
                "看涨/看多 (bullish), 中性 (neutral), 看跌/看空 (bearish): Chinese market-tone words"),
)


def synonyms_from_scales(scales: Iterable[RatingScale]) -> dict[Rating, tuple[str, ...]]:
    """Rating -> its terms over all scales (first appearance order, duplicates dropped)."""
    out: dict[Rating, list[str]] = {r: [] for r in RATINGS}
    for sc in scales:
        for rating, terms in ((Rating.BULLISH, sc.bullish), (Rating.NEUTRAL, sc.neutral),
                              (Rating.BEARISH, sc.bearish)):
            out[rating] += [t for t in terms if t not in out[rating]]
    return {r: tuple(t) for r, t in out.items()}


def scale_table() -> list[dict[str, str]]:
    """The scales as rows (scale, bullish, neutral, bearish, source): for a notebook or the README."""
    return [{"scale": sc.name, "bullish": ", ".join(sc.bullish), "neutral": ", ".join(sc.neutral),
             "bearish": ", ".join(sc.bearish), "source": sc.source} for sc in RATING_SCALES]


# Rating vocabulary used by the analyst-rating extractor (stage 02) and the answer parser
# (finlib.finbias.answers), derived from RATING_SCALES. Multi-word phrases are matched before single
# words. Lowercase.
RATING_SYNONYMS: dict[Rating, tuple[str, ...]] = synonyms_from_scales(RATING_SCALES)

# Rating words that are also ordinary English: "buy back shares", "sell-side", "hold talks",
# "add capacity", "reduce debt", "accumulate cash", "positive cash flow", "negative surprise",
# "neutral impact", "in line with guidance". Found in free text they are not evidence of a
# rating; stages trust them only in an explicit rating slot ("rated Buy", "Answer: Hold").
# The rest of RATING_SYNONYMS ("bullish", "outperform", "overweight", …) is rating jargon.
# Normalised phrases (see `normalise_term`).
AMBIGUOUS_RATING_TERMS: frozenset[str] = frozenset({
    "buy", "sell", "hold", "accumulate", "add", "reduce", "positive", "negative", "neutral", "in line",
    "perform",
    "买入", "卖出", "持有", "增持", "减持",   # also "buy into", "sell", "holding", "raise/cut a stake" in prose
})


def is_cjk(term: str) -> bool:
    """True for a term written in CJK characters: such words have no spaces around them in running
    text ("维持买入评级"), so word-boundary rules do not apply to them."""
    return any("\u3400" <= ch <= "\u9fff" for ch in term)

# Characters that join or split words like a hyphen in real text (PDF extraction yields Unicode
# hyphens, U+2010-2012, and en dashes, U+2013: "Market-Perform" in several spellings).
HYPHENS = "-\u2010\u2011\u2012\u2013"
_WORD_SEP = re.compile(rf"[\s{re.escape(HYPHENS)}]+")


def normalise_term(term: str) -> str:
    """Lowercase, hyphens and whitespace runs as one space: "Equal-Weight" -> "equal weight"."""
    return " ".join(w for w in _WORD_SEP.split(term.strip().lower()) if w)


@lru_cache(maxsize=1)
def rating_vocabulary() -> Mapping[str, Rating]:
    """Normalised phrase -> rating, from RATING_SYNONYMS; a phrase listed under two ratings is an
    error (it would make the extractor and the parser disagree on which one wins)."""
    vocab: dict[str, Rating] = {}
    for rating, phrases in RATING_SYNONYMS.items():
        for phrase in phrases:
            key = normalise_term(phrase)
            if vocab.setdefault(key, rating) is not rating:
                raise ValueError(f"RATING_SYNONYMS lists '{phrase}' under two ratings")
    return MappingProxyType(vocab)


def rating_of(term: str) -> Rating | None:
    """The rating a synonym names ("Market-Perform" -> neutral), None for any other word."""
    return rating_vocabulary().get(normalise_term(term))


def term_pattern(terms: Iterable[str], hyphens: str = "-", suffixes: Iterable[str] = ()) -> re.Pattern[str]:
    """Regex matching any of `terms` as whole words, case-insensitively.

    Longest phrase first, so "strong buy" wins over "buy"; inside a phrase any run of spaces or
    `hyphens` matches ("equal weight" = "Equal-Weight"). A term glued to a word or a hyphen
    compound does not match ("buyback", "sell-side", "pre-hold"), except before one of
    `suffixes` ("Buy-rated" with suffixes=("rated",)). The pattern is self-contained (scoped
    flag, lookarounds), so `.pattern` can be embedded in a larger regex.
    """
    keys = sorted({normalise_term(t) for t in terms} - {""}, key=lambda k: (-len(k), k))
    if not keys:
        raise ValueError("term_pattern needs at least one non-empty term")
    h = re.escape(hyphens)
    sep = rf"[\s{h}]+"
    words = [k for k in keys if not is_cjk(k)]
    cjk = [re.escape(k) for k in keys if is_cjk(k)]   # CJK: no word boundaries in running text
    alternation = "|".join(sep.join(re.escape(w) for w in k.split()) for k in words)
    allowed = "".join(rf"(?!(?i:{re.escape(s)})\b)" for s in suffixes)  # "Buy-Rated" too
    latin = rf"(?<![\w{h}])(?i:{alternation})(?!\w)(?![{h}]{allowed}\w)" if words else ""
    return re.compile("|".join(p for p in (latin, f"(?:{'|'.join(cjk)})" if cjk else "") if p))


class Condition(str, Enum):
    """The ways a report is shown to a model: the paper's four (Fin-Bias Sections 3 and 5.1) and
    the rating sweep beyond it (each report shown with each rating, finlib.finbias.beyond.rating_sweep)."""

    ORIGINAL = "original"
    NO_RATING = "no_rating"
    FAKE_RATING = "fake_rating"
    NO_OPINION = "no_opinion"
    SWEEP_BULLISH = "sweep_bullish"
    SWEEP_NEUTRAL = "sweep_neutral"
    SWEEP_BEARISH = "sweep_bearish"

    def __str__(self) -> str:
        return self.value


# The paper's four conditions (every paper table and test iterates these, never the sweep).
CONDITIONS: tuple[Condition, ...] = (Condition.ORIGINAL, Condition.NO_RATING, Condition.FAKE_RATING,
                                     Condition.NO_OPINION)
# The rating sweep: the report shown with this rating in the analyst's own phrasing (off in the paper run).
SWEEP_CONDITIONS: dict[Rating, Condition] = {Rating.BULLISH: Condition.SWEEP_BULLISH,
                                              Rating.NEUTRAL: Condition.SWEEP_NEUTRAL,
                                              Rating.BEARISH: Condition.SWEEP_BEARISH}


def shown_rating(condition: str) -> Rating | None:
    """The rating a sweep condition shows ("sweep_bearish" -> bearish); None for the paper's four."""
    for rating, cond in SWEEP_CONDITIONS.items():
        if condition == cond.value:
            return rating
    return None


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

# Names of the two averages in every results table: all reports pooled (the sector-count weighted
# mean; the paper's printed "Average" matches it in 60 of 116 cells, the plain mean in 5:
# finlib.finbias.scoring.paper_layout.printed_average_agreement), and the unweighted mean of the nine sectors.
POOLED = "Average (pooled)"
SECTOR_MEAN = "Mean of sectors"
