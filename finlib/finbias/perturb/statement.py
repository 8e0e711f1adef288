"""Where a report states its rating: the rating statement in the front matter, and the rule that found it.

Why: the authors' protocol reads the rating from the first sentence (their reports open with it), but a
report as a research provider prints it opens with a title, a date line, a header block, a provider box
("Zacks Rank: #2 (Buy)", "STARS: ★★★★", "Morningstar Rating: ★★★"), a table or a disclaimer. Read
only in the first sentence, such a report leaves every condition. `find_rating_statement` reads the
front matter -- the first `front_matter_units` sentence units (`finlib.finbias.sentences`) -- and records
per report where the rating was found and by which rule (`RULES`):

- ``first_sentence``: the authors' protocol, tried first: the first unit states a rating.
- ``rating_field``: a key-value field in a unit ("Rating: BUY", "Recommendation: Outperform", "Zacks
  Rank: #5-Strong Sell", "Valuation: Overvalued"), alone on its line or between "|" separators; the
  statement is the field, label and value.
- ``front_matter_sentence``: a later unit (after title lines, headings, furniture) states a rating.

A report whose rating cannot be read gets rule ``unread`` and the reason (`detail`): no statement in the
front matter, two ratings disagreeing in one statement, or a field whose value is on no known scale
("Rating: 2.45 (Quant Score)", "Not Rated"): counted by stage 02, never guessed. The first unit that
names a rating decides: a later one is not searched past an ambiguous one.

``front_matter_units: 1`` is the authors' protocol alone (params/paper.yaml); the rule column lets the
tables be restricted to first-sentence reports on any run.

Removal (`remove_statement`) takes out the statement, a list marker opening its line, and the "|" or
whitespace after it; every other byte stays. The fake (`rewrite_statement`) rewrites only the rating
words, provider points and move verb inside the statement (`finlib.finbias.perturb.ratings`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from itertools import islice

from finlib.finbias.perturb import provider_scales as ps
from finlib.finbias.perturb.ratings import (
    MAX_RATING_SENTENCE_CHARS,
    RatingMention,
    find_rating_mentions,
    rewrite_mentions,
)
from finlib.finbias.sentences import iter_sentence_spans
from finlib.finbias.vocab import Rating

RULES = ("first_sentence", "rating_field", "front_matter_sentence")
UNREAD = "unread"
DEFAULT_FRONT_MATTER_UNITS = 8


@dataclass(frozen=True)
class RatingReading:
    """How a run reads ratings (params `perturb.rating_front_matter_units`, `perturb.provider_scales`)."""

    front_matter_units: int = DEFAULT_FRONT_MATTER_UNITS
    scales: ps.Scales = field(default_factory=lambda: ps.DEFAULT_PROVIDER_SCALES)


DEFAULT_READING = RatingReading()
AUTHORS_READING = RatingReading(front_matter_units=1)


@dataclass(frozen=True)
class RatingStatement:
    """The statement of a report's rating: its span in the report, the rating, the rule and the unit."""

    start: int
    end: int
    rating: Rating | None
    rule: str  # one of RULES, or UNREAD
    unit: int  # index of the sentence unit (0 = the first sentence); -1 when none was found
    detail: str = ""  # for UNREAD: why


# Field labels: the generic ones and each provider's box. The scale a bare number or star glyphs in the
# value are read on follows from the label.
_LABELS: dict[str, str | None] = {
    "rating": None,
    "our rating": None,
    "analyst rating": None,
    "argus rating": None,
    "investment rating": None,
    "stock rating": None,
    "recommendation": "cfra_stars",
    "investment recommendation": None,
    "opinion": "cfra_stars",
    "investment opinion": None,
    "stars": "cfra_stars",
    "cfra stars": "cfra_stars",
    "stars rating": "cfra_stars",
    "morningstar rating": "morningstar_stars",
    "morningstar rating for stocks": "morningstar_stars",
    "star rating": "morningstar_stars",
    "valuation": None,
    "zacks rank": "zacks_rank",
}
_LABEL_RE = "|".join(
    r"[ \t\u00a0]+".join(re.escape(w) for w in k.split()) for k in sorted(_LABELS, key=len, reverse=True)
)
_FIELD = re.compile(
    rf"(?:^|(?<=\|)|(?<=\t))[ \t\u00a0]*(?P<label>(?i:{_LABEL_RE}))[ \t\u00a0]*[:=\t][ \t\u00a0]*"
    r"(?P<value>[^|\t\r\n]*[^|\t\r\n \u00a0])",
    re.MULTILINE,
)
_BARE_NUMBER = re.compile(r"#?[ \t]*([1-5])\b")
_MARKER = re.compile(
    r"(?:[-*\u2022\u25aa\u25cf\u25e6\u2023\u2043\u00b7\u2013\u2014+>]|\d{1,2}[.)]|\((?:[a-z]|[ivx]{1,4}|\d{1,2})\)|[a-z][.)])[ \t]+"
)


_REMEMBERED: tuple[RatingReading, dict[bytes, RatingStatement]] | None = None  # `remembered_statements`


@contextmanager
def remembered_statements(reading: RatingReading) -> Iterator[None]:
    """Within the block, each text's statement under `reading` is found once and then read from memory
    (keyed by a digest of the text): stage 02 reads every report's statement in several passes (the
    conditions, the sweep, the validation, the examples), and finding one splits the report's front."""
    global _REMEMBERED
    outer, _REMEMBERED = _REMEMBERED, (reading, {})
    try:
        yield
    finally:
        _REMEMBERED = outer


def find_rating_statement(text: str, reading: RatingReading = DEFAULT_READING) -> RatingStatement:
    """The report's rating statement (`_find_rating_statement`), from memory inside `remembered_statements`."""
    memo = _REMEMBERED
    if memo is None or not isinstance(text, str) or memo[0] != reading:
        return _find_rating_statement(text, reading)
    key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    found = memo[1].get(key)
    if found is None:
        found = memo[1][key] = _find_rating_statement(text, reading)
    return found


def _find_rating_statement(text: str, reading: RatingReading) -> RatingStatement:
    """The report's rating statement (module docstring): the first sentence when it states a rating, else
    the first field or sentence of the front matter that does; UNREAD with the reason otherwise. A prose
    sentence (one ending in . ! ? or an ellipsis) that states no rating ends the front matter of its
    paragraph: "Gamma reported its third quarter. We rate it Hold." is unread, a disclaimer paragraph before
    the rating paragraph is skipped."""
    if not isinstance(text, str) or not text.strip():
        return RatingStatement(0, 0, None, UNREAD, -1, "empty report")
    units = list(islice(iter_sentence_spans(text), max(1, reading.front_matter_units)))
    closed, prev_end = False, 0
    for i, (a, b) in enumerate(units):
        if b - a > MAX_RATING_SENTENCE_CHARS:
            return RatingStatement(a, b, None, UNREAD, i, f"unit {i} is longer than {MAX_RATING_SENTENCE_CHARS} chars")
        closed = closed and not _PARAGRAPH_GAP.search(text, prev_end, a)
        prev_end, a = b, _after_marker(text, a, b)
        if i == 0:
            found = _sentence_statement(text, a, b, i, "first_sentence", reading)
            if found is not None or reading.front_matter_units == 1:  # the authors' protocol decides alone
                return found or _none_found(reading, 1)
        if closed:
            continue
        found = _field_statement(text, a, b, i, reading)
        if found is None and i > 0:
            found = _sentence_statement(text, a, b, i, "front_matter_sentence", reading)
        if found is not None:
            return found
        closed = bool(_PROSE_END.search(text, a, b)) and bool(re.search(r"[^\W\d_]{2}", text[a:b]))  # not "1."
    return _none_found(reading, len(units))


_PARAGRAPH_GAP = re.compile(r"\n[ \t\r\f\v\u00a0]*\n")
_PROSE_END = re.compile(r"[.!?\u2026][\"'\u201d\u2019)\]]*\s*$")


def _none_found(reading: RatingReading, n: int) -> RatingStatement:
    where = "the first sentence" if reading.front_matter_units == 1 else f"the first {n} sentence units"
    return RatingStatement(0, 0, None, UNREAD, -1, f"no rating statement in {where}")


def _after_marker(text: str, a: int, b: int) -> int:
    """The start of a unit past a list marker ("• ", "1. "): the marker is not part of the statement."""
    m = _MARKER.match(text, a, b)
    return m.end() if m and m.end() < b else a


def _sentence_statement(text: str, a: int, b: int, i: int, rule: str, reading: RatingReading) -> RatingStatement | None:
    """The unit as a rating sentence: found, UNREAD when it names ratings that disagree (or a provider
    point its mapping does not list), None when it names none."""
    mentions = find_rating_mentions(text[a:b], reading.scales)
    return _decide(mentions, a, b, i, rule, f"unit {i} {text[a:b][:80]!r}")


def _decide(mentions: list[RatingMention], a: int, b: int, i: int, rule: str, what: str) -> RatingStatement | None:
    current = [m for m in mentions if m.role == "current"]
    if any(m.role == "unmapped" for m in mentions):
        points = ", ".join(f"{m.scale} {m.point}" for m in mentions if m.role == "unmapped")
        return RatingStatement(a, b, None, UNREAD, i, f"{what}: point not on the scale's mapping ({points})")
    ratings = {m.rating for m in current}
    if len(ratings) > 1:
        return RatingStatement(
            a, b, None, UNREAD, i, f"{what}: ratings disagree ({', '.join(sorted(r.value for r in ratings))})"
        )
    if ratings:
        return RatingStatement(a, b, ratings.pop(), rule, i)
    return None


def field_mentions(value: str, label: str, reading: RatingReading) -> list[RatingMention]:
    """The rating words and provider points of a field's value; a bare number ("#5-Strong Sell", "3 (Hold)")
    or star glyphs are read on the scale the label names."""
    # "#5-Strong Sell": the hyphen after the point joins no words (same length, so the offsets hold)
    mentions = find_rating_mentions(re.sub(r"^(#?[ \t]*[1-5])[-\u2010\u2011]", r"\1 ", value), reading.scales)
    # a field's whole value is a rating slot: "Rating: Reduce" is the rating, as "We rate it Reduce" is
    mentions = [
        replace(m, role="current") if m.role == "not_a_rating" and m.surface == value.strip() else m for m in mentions
    ]
    scale = _LABELS.get(" ".join(label.lower().split()))
    if scale is None:
        return mentions
    taken = [(m.start, m.end) for m in mentions if m.scale is not None]
    extra: list[ps.ProviderMention] = []
    glyph = ps.glyph_mention(value, 0, scale, reading.scales)
    if glyph is not None:
        extra.append(glyph)
    bare = _BARE_NUMBER.match(value)
    if bare and not glyph and not any(x < bare.end() and bare.start() < y for x, y in taken):
        extra.append(
            ps.ProviderMention(
                bare.start(), bare.end(), scale, bare.group(1), reading.scales[scale].get(bare.group(1)), bare.span(1)
            )
        )
    for p in extra:
        role = "current" if p.rating is not None else "unmapped"
        mentions.append(
            RatingMention(
                p.start,
                p.end,
                value[p.start : p.end],
                f"{p.scale}:{p.point}",
                p.rating,
                role,
                p.scale,
                p.point,
                p.number_span,
            )
        )
    return sorted(mentions, key=lambda m: m.start)


def _field_statement(text: str, a: int, b: int, i: int, reading: RatingReading) -> RatingStatement | None:
    """The first rating field of the unit: found, or UNREAD when its value is on no known scale."""
    for m in _FIELD.finditer(text, a, b):
        if m.end() > b:
            break
        mentions = field_mentions(m.group("value"), m.group("label"), reading)
        found = _decide(mentions, m.start("label"), m.end(), i, "rating_field", f"field {m.group(0).strip()!r}")
        if found is not None:
            return found
        if " ".join(m.group("label").lower().split()) != "valuation":
            return RatingStatement(
                m.start("label"),
                m.end(),
                None,
                UNREAD,
                i,
                f"field {m.group(0).strip()!r}: value on no known rating scale",
            )
    return None


_TRAILING = re.compile(r"[ \t\u00a0]*(?:\|[ \t\u00a0]*)?")


def remove_statement(text: str, st: RatingStatement) -> str:
    """The report without its rating statement (module docstring); from the next unit on when the statement
    opens the report, as the authors remove the first sentence."""
    if st.rating is None:
        raise ValueError(f"no rating statement to remove: {st.detail}")
    s, e = st.start, _TRAILING.match(text, st.end).end()
    line_start = text.rfind("\n", 0, s) + 1
    if _MARKER.fullmatch(text, line_start, s) or not text[line_start:s].strip():
        s = line_start if _MARKER.fullmatch(text, line_start, s) else s
    if e == len(text) or text[e] in "\r\n" or text[e].isspace():
        while e < len(text) and text[e].isspace():
            e += 1
    head = text[:s]
    return text[e:] if not head.strip() else head + text[e:]


def rewrite_statement(
    text: str, st: RatingStatement, new: Rating | str, reading: RatingReading = DEFAULT_READING
) -> tuple[str, str]:
    """The report with its rating statement rewritten to state `new` (`ratings.rewrite_mentions`), and the
    kind of rewrite; every byte outside the statement unchanged. ValueError when it cannot be written."""
    if st.rating is None:
        raise ValueError(f"no rating statement to rewrite: {st.detail}")
    piece = text[st.start : st.end]
    if st.rule == "rating_field":
        m = _FIELD.match(piece)
        if m is None:
            raise ValueError(f"rating field not found again in {piece!r}")
        v0 = m.start("value")
        mentions = [_shift(x, v0) for x in field_mentions(m.group("value"), m.group("label"), reading)]
    else:
        mentions = find_rating_mentions(piece, reading.scales)
    written, kind = rewrite_mentions(piece, mentions, new, reading.scales)
    return text[: st.start] + written + text[st.end :], kind


def _shift(m: RatingMention, by: int) -> RatingMention:
    span = None if m.number_span is None else (m.number_span[0] + by, m.number_span[1] + by)
    return RatingMention(m.start + by, m.end + by, m.surface, m.phrase, m.rating, m.role, m.scale, m.point, span)
