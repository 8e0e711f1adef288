"""Research providers' own rating scales: CFRA STARS, Morningstar stars and valuation words, Zacks Rank.

Why a module of their own: these scales are not words a model answers with (the answer parser's
vocabulary, `finlib.finbias.vocab.RATING_SCALES`, must not read "undervalued" or "4 stars" as a rating),
but a report's front page states its rating in them. Each scale maps its points to the paper's three
ratings; the mapping is documented here and in docs/finbias.md and can be overridden in params
(`perturb.provider_scales`). A point the mapping does not list is no rating: counted, never guessed.

Default mappings (from the providers' published definitions):

- ``cfra_stars``: CFRA STARS 5 (Strong Buy) and 4 (Buy) bullish, 3 (Hold) neutral, 2 (Sell) and
  1 (Strong Sell) bearish. Written "4-STARS", "4 STARS", "STARS: 4", or as ★ glyphs in a STARS field.
- ``morningstar_stars``: Morningstar Rating for Stocks 4-5 stars bullish (undervalued), 3 stars neutral
  (fairly valued), 1-2 stars bearish (overvalued). Written "4 stars", "4-star", "four-star", ★★★★.
- ``morningstar_valuation``: "undervalued" bullish, "fairly valued" neutral, "overvalued" bearish
  (Morningstar's words for the same stars; "significantly" may precede).
- ``zacks_rank``: Zacks Rank #1 (Strong Buy) and #2 (Buy) bullish, #3 (Hold) neutral, #4 (Sell) and
  #5 (Strong Sell) bearish.

A fake rating on a point scale takes the mirrored point when it carries the new rating (4 -> 2,
1 -> 5), else the point nearest to it that does (the middle for neutral), so a number and the label
beside it ("Zacks Rank #2 (Buy)" -> "#4 (Sell)") stay in agreement: the label is written from
`LABELS`, not from the rating word's family.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from finlib.finbias.vocab import Rating

Scales = Mapping[str, Mapping[str, Rating]]
B, N, S = Rating.BULLISH, Rating.NEUTRAL, Rating.BEARISH
DEFAULT_PROVIDER_SCALES: dict[str, dict[str, Rating]] = {
    "cfra_stars": {"5": B, "4": B, "3": N, "2": S, "1": S},
    "morningstar_stars": {"5": B, "4": B, "3": N, "2": S, "1": S},
    "morningstar_valuation": {"undervalued": B, "fairly valued": N, "overvalued": S},
    "zacks_rank": {"1": B, "2": B, "3": N, "4": S, "5": S},
}
# The label printed beside a point, where the provider prints one.
LABELS: dict[str, dict[int, str]] = {
    "cfra_stars": {5: "strong buy", 4: "buy", 3: "hold", 2: "sell", 1: "strong sell"},
    "zacks_rank": {1: "strong buy", 2: "buy", 3: "hold", 4: "sell", 5: "strong sell"},
}
NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
STAR_GLYPHS = "\u2605\u2606\u272a\u2729"  # ★ filled, ☆ empty, and two variants


_POINTS: dict[str, tuple[str, ...]] = {
    "cfra_stars": ("1", "2", "3", "4", "5"),
    "morningstar_stars": ("1", "2", "3", "4", "5"),
    "morningstar_valuation": ("undervalued", "fairly valued", "overvalued"),
    "zacks_rank": ("1", "2", "3", "4", "5"),
}


def provider_scales(overrides: Mapping[str, list[str | None]] | None = None) -> dict[str, dict[str, Rating]]:
    """The default mappings with `overrides` (params `perturb.provider_scales`: per scale, the rating of each
    point in order, null = no rating) replacing whole scales. An unknown scale, a wrong number of points or
    an unknown rating is an error naming it."""
    out = {k: dict(v) for k, v in DEFAULT_PROVIDER_SCALES.items()}
    for name, ratings in (overrides or {}).items():
        if name not in out:
            raise ValueError(f"perturb.provider_scales: unknown scale {name!r}; known: {sorted(out)}")
        points = _POINTS[name]
        if len(ratings) != len(points):
            raise ValueError(f"perturb.provider_scales.{name}: {len(ratings)} ratings for the points {points}")
        try:
            out[name] = {p: Rating(str(r)) for p, r in zip(points, ratings) if r is not None}
        except ValueError as exc:
            raise ValueError(f"perturb.provider_scales.{name}: {exc}") from None
    return out


@dataclass(frozen=True)
class ProviderMention:
    """One point of a provider scale in a text: where, which scale and point, and what it maps to."""

    start: int
    end: int
    scale: str
    point: str  # "4" for 4 stars / Zacks #4; "undervalued" for a valuation word
    rating: Rating | None  # None: a point the mapping does not list (unread, never guessed)
    number_span: tuple[int, int] | None  # where the number (or glyph run) is written, for the rewrite


_CFRA = re.compile(r"(?<![\w#])([1-5])[ \t]*[-\u2010\u2011]?[ \t]*(STARS?)\b")
_MS_STARS = re.compile(
    r"(?<![\w#])([1-5]|one|two|three|four|five)[ \t]*[-\u2010\u2011 ][ \t]*(stars?)\b", re.IGNORECASE
)
_ZACKS = re.compile(r"\bZacks[ \t]+Rank[ \t]*(?:of[ \t]+)?(?::[ \t]*)?#?[ \t]*([1-5])\b", re.IGNORECASE)
_VALUATION = re.compile(r"\b(undervalued|fairly\s+valued|overvalued)\b", re.IGNORECASE)


def sentence_mentions(text: str, scales: Mapping[str, Mapping[str, Rating]]) -> list[ProviderMention]:
    """Provider-scale points written in running text: "4-STARS" (CFRA's capitals), "4-star" / "four
    stars" (Morningstar), "Zacks Rank #2", "undervalued" / "fairly valued" / "overvalued"."""
    out: list[ProviderMention] = []
    for m in _CFRA.finditer(text):
        out.append(_point("cfra_stars", m.group(1), m.start(), m.end(), m.span(1), scales))
    taken = [(p.start, p.end) for p in out]
    for m in _MS_STARS.finditer(text):
        if not any(a < m.end() and m.start() < b for a, b in taken):
            n = m.group(1).lower()
            out.append(_point("morningstar_stars", str(NUMBER_WORDS.get(n, n)), m.start(), m.end(), m.span(1), scales))
    for m in _ZACKS.finditer(text):
        out.append(_point("zacks_rank", m.group(1), m.start(), m.end(), m.span(1), scales))
    for m in _VALUATION.finditer(text):
        key = " ".join(m.group(1).lower().split())
        out.append(_point("morningstar_valuation", key, m.start(), m.end(), m.span(1), scales))
    return sorted(out, key=lambda p: p.start)


def _point(
    scale: str,
    point: str,
    start: int,
    end: int,
    number_span: tuple[int, int],
    scales: Mapping[str, Mapping[str, Rating]],
) -> ProviderMention:
    return ProviderMention(start, end, scale, point, scales[scale].get(point), number_span)


def glyph_mention(
    text: str, start: int, scale: str, scales: Mapping[str, Mapping[str, Rating]]
) -> ProviderMention | None:
    """A run of star glyphs ("★★★★☆": four filled of five) at or after `start`, read on `scale`."""
    m = re.compile(rf"[{STAR_GLYPHS}]+").search(text, start)
    if not m:
        return None
    filled = sum(ch not in "\u2606\u2729" for ch in m.group(0))
    return _point(scale, str(filled), m.start(), m.end(), m.span(), scales)


def fake_point(scale: Mapping[str, Rating], point: str, new: Rating) -> str | None:
    """The point that states `new` on a numeric scale: the mirror of `point` when it carries `new`, else
    the nearest point that does (ties: towards the middle); for a word scale, the word for `new`."""
    carrying = [k for k, r in scale.items() if r is new]
    if not carrying:
        return None
    if not point.isdigit():
        return carrying[0]
    numbers = sorted(int(k) for k in carrying if k.isdigit())
    if not numbers:
        return None
    top = max(int(k) for k in scale if k.isdigit())
    mirror = top + 1 - int(point)
    middle = (top + 1) / 2
    return str(min(numbers, key=lambda n: (abs(n - mirror), abs(n - middle))))


def write_point(written: str, old: str, new: str) -> str:
    """`new` in the form `written` had: a digit, a number word in its case, or a glyph run of the same
    length (filled stars then empty ones)."""
    if written.isdigit():
        return new
    if written.lower() in NUMBER_WORDS:
        word = {v: k for k, v in NUMBER_WORDS.items()}[int(new)]
        return word.upper() if written.isupper() else word.capitalize() if written[:1].isupper() else word
    if written and all(ch in STAR_GLYPHS for ch in written):
        total = max(len(written), int(new))
        filled = next((ch for ch in written if ch not in "\u2606\u2729"), "\u2605")
        empty = "\u2606" if any(ch in "\u2606\u2729" for ch in written) else ""
        return filled * int(new) + (empty * (total - int(new)) if empty else "")
    return new
