"""Report front pages laid out the way research providers print them, with what was planted in each.

Why: a report from Argus, CFRA, Morningstar, Zacks or a sell-side desk rarely opens with its rating
sentence. Its first page carries a title or headline, a date and analyst line, a header block of
key-value fields ("Rating: BUY", "Price target"), a provider box (CFRA's STARS, Morningstar's stars
and valuation words, "Zacks Rank #2 (Buy)"), an estimates table, a disclaimer and page furniture, in
some order, before or around the rating. The rehearsal's messy share lays reports out this way so the
full run checks that stage 02 finds the rating (by the rule a reader of the layout expects), removes
exactly the statement and writes a fake that reads back as the new rating.

Written from how those pages look, independently of the statement reader it checks
(`finlib.finbias.perturb.statement`): the layouts, the providers' scales (`SCALES`) and the reader of a
planted statement (`read_slots`) are this module's own. Each report records (`ProviderPlant`) the
statement's span, the bytes removal must keep, the expected rule, and the statement as literal pieces
around its rating slots, so a rewritten statement is read back by matching the pieces and reading each
slot on its scale -- never by the project's extractor.

Layout templates: ``[[ ... ]]`` marks the statement; ``{kind}`` a rating slot written for the planted
rating (`SLOT_KINDS`); ``{prev}`` the previous rating of a move and ``{verb}`` its verb (a fake may
change both, so long as the verb points from the previous rating to the new one);
``{company}``, ``{ticker}``, ``{target}``, ``{body}`` fill in. ``<<`` marks where the bytes removal must keep
begin when the separator after the statement is not only whitespace (" | ").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from finlib.finbias.vocab import Rating

B, N, S = Rating.BULLISH, Rating.NEUTRAL, Rating.BEARISH
RANK = {S: 0, N: 1, B: 2}
# The providers' published scales (CFRA STARS, Morningstar Rating for Stocks, Zacks Rank) and the sell-side
# words of the layouts, each point's rating as the provider defines it.
SCALES: dict[str, dict[str, Rating]] = {
    "cfra": {"5": B, "4": B, "3": N, "2": S, "1": S},
    "morningstar": {"5": B, "4": B, "3": N, "2": S, "1": S},
    "zacks": {"1": B, "2": B, "3": N, "4": S, "5": S},
    "valuation": {"undervalued": B, "fairly valued": N, "overvalued": S},
    "word": {
        "buy": B,
        "strong buy": B,
        "outperform": B,
        "overweight": B,
        "accumulate": B,
        "add": B,
        "bullish": B,
        "hold": N,
        "neutral": N,
        "market perform": N,
        "equal weight": N,
        "sell": S,
        "strong sell": S,
        "bearish": S,
        "underperform": S,
        "underweight": S,
        "reduce": S,
    },
}
# The words a layout writes: a field's value may be any of them ("Rating: REDUCE"); in running text
# "reduce" is a verb as often as a rating, so sentences write the others.
FIELD_WORDS: dict[Rating, tuple[str, ...]] = {
    r: tuple(
        w
        for w, v in SCALES["word"].items()
        if v is r and w not in ("strong buy", "strong sell", "add", "bullish", "bearish")
    )
    for r in RANK
}
WORDS: dict[Rating, tuple[str, ...]] = {r: tuple(w for w in ws if w != "reduce") for r, ws in FIELD_WORDS.items()}
ZACKS_LABELS = {1: "Strong Buy", 2: "Buy", 3: "Hold", 4: "Sell", 5: "Strong Sell"}
CFRA_LABELS = {5: "Strong Buy", 4: "Buy", 3: "Hold", 2: "Sell", 1: "Strong Sell"}
SLOT_KINDS = ("word", "prev", "cfra", "cfra_glyphs", "morningstar", "ms_glyphs", "valuation", "zacks", "verb")
FILLED, EMPTY = "\u2605", "\u2606"
DISCLAIMER = (
    "This report is for information only and does not take into account the objectives or circumstances of any "
    "investor. Past performance is not a guide to future returns. See the important disclosures at the end."
)
# (name, the rule a front-matter reader names, template). Written as each provider lays out a first page.
LAYOUTS: tuple[tuple[str, str, str], ...] = (
    (
        "argus_header",
        "rating_field",
        "ARGUS RESEARCH\n{company} ({ticker})\nReport created {date}\n\n[[Rating: {word}]]\nTarget Price: ${target}\n"
        "Analyst: J. Halvorsen\n\n{body}",
    ),
    (
        "argus_headline",
        "front_matter_sentence",
        "{company} ({ticker})\nStrong quarter, guidance raised\n\n[[We are reiterating our {word} rating on {company} "
        "and our target of ${target}.]] {body}",
    ),
    (
        "sellside_title_date",
        "front_matter_sentence",
        "{COMPANY}\n{date}\nEquity Research | Americas | Consumer\n\n[[We {verb} {company} ({ticker}) to {word} from "
        "{prev} and set a ${target} price target.]]\n\n{body}",
    ),
    (
        "sellside_summary_heading",
        "front_matter_sentence",
        "Summary\n[[{company} ({ticker}): we {verb} the shares to {word} from {prev} on a better margin "
        "outlook.]] {body}",
    ),
    (
        "sellside_key_takeaways",
        "front_matter_sentence",
        "Key takeaways\n\n[[We rate {company} {word}, with a 12-month price target of ${target}.]]\n\n{body}",
    ),
    (
        "pipe_header",
        "rating_field",
        "{company} ({ticker}) | Company Update | {date}\n[[Rating: {word}]] | <<Price target: ${target} | "
        "Market cap: $4.2 bn\n\n{body}",
    ),
    (
        "recommendation_field",
        "rating_field",
        "{COMPANY} ({ticker})\n\n[[Recommendation: {word}]]\nPrice Objective: ${target}\nRisk: Medium\n\n{body}",
    ),
    (
        "cfra_stars_box",
        "rating_field",
        "CFRA Equity Research\n{company} ({ticker})\n\n[[STARS: {cfra_glyphs}]]\n12-Mo. Target Price: ${target}\n"
        "Investment Style: Large-Cap Blend\n\n{body}",
    ),
    (
        "cfra_stars_sentence",
        "front_matter_sentence",
        "Stock Report | {date}\n{company} ({ticker})\n\n[[We keep our opinion on the shares at {cfra}-STARS.]] {body}",
    ),
    (
        "cfra_recommendation_box",
        "rating_field",
        "{company} ({ticker})\n[[Recommendation: {cfra} ({word})]]\n12-Mo. Target Price: ${target}\n\n{body}",
    ),
    (
        "morningstar_stars_field",
        "rating_field",
        "Morningstar Equity Analyst Report | {date}\n{company} {ticker}\n\n[[Morningstar Rating: {ms_glyphs}]]\n"
        "Fair Value Estimate: ${target}\nEconomic Moat: Narrow\n\n{body}",
    ),
    (
        "morningstar_stars_sentence",
        "front_matter_sentence",
        "Analyst Note | {date}\n\n[[We rate {company} shares {morningstar} stars.]] {body}",
    ),
    (
        "morningstar_valuation_sentence",
        "front_matter_sentence",
        "{company} ({ticker})\nAnalyst Note\n\n[[We think the shares are {valuation} relative to our fair value "
        "estimate of ${target}.]] {body}",
    ),
    (
        "morningstar_valuation_field",
        "rating_field",
        "Morningstar Equity Research\n{company} ({ticker})\nFair Value: ${target}\n[[Valuation: {valuation}]]\n"
        "Uncertainty: High\n\n{body}",
    ),
    (
        "zacks_rank_field",
        "rating_field",
        "Zacks Equity Research | {date}\n{company} ({ticker})\n\n[[Zacks Rank: #{zacks} ({word})]]\n"
        "Style Scores: A Value | B Growth\n\n{body}",
    ),
    (
        "zacks_rank_sentence",
        "front_matter_sentence",
        "{company} ({ticker})\n{date}\n\n[[{company} currently carries a Zacks Rank #{zacks} ({word}).]] {body}",
    ),
    (
        "estimates_table_first",
        "front_matter_sentence",
        "{company} ({ticker})\nUS$ mn\tFY24A\tFY25E\tFY26E\nRevenue\t8,412\t8,790\t9,150\nEPS ($)\t3.25\t3.10\t3.42\n\n"
        "[[We {verb} the shares to {word} from {prev}.]] {body}",
    ),
    (
        "disclaimer_first",
        "front_matter_sentence",
        "{company} ({ticker}) | {date}\n\n" + DISCLAIMER + "\n\n[[We maintain our {word} rating on {company} "
        "with a ${target} target.]] {body}",
    ),
    (
        "page_furniture",
        "front_matter_sentence",
        "Page 1 of 12\nFor the exclusive use of clients. Not for redistribution\n{company} ({ticker})\n\n"
        "[[Our rating on {company} stays at {word} after the results.]]\n\n{body}",
    ),
    (
        "numbered_list_first",
        "front_matter_sentence",
        "{company} ({ticker}): Q3 review\n1. Sales ahead of consensus\n2. Margin guidance unchanged\n\n"
        "[[We reiterate {word} on the shares.]] {body}",
    ),
    (
        "soft_wrap_statement",
        "front_matter_sentence",
        "{COMPANY}\n{date}\n\n[[We {verb} {company} ({ticker}) to {word} from {prev} after a\nstronger than expected "
        "quarter and a higher dividend.]] {body}",
    ),
    (
        "ellipsis_statement",
        "front_matter_sentence",
        "{company} ({ticker})\nQuarter in brief\n\n[[Still {word} on {company}, with more upside to come...]]\n\n"
        "{body}",
    ),
    (
        "headline_no_period",
        "front_matter_sentence",
        "{company} ({ticker}) Q3 beat on cost discipline\n[[We stay at {word} and keep our ${target} target.]] {body}",
    ),
    (
        "bullets_then_statement",
        "front_matter_sentence",
        "{company} ({ticker})\n\u2022 Q3 sales up 4%\n\u2022 Margin guidance unchanged\n\n"
        "[[We keep {company} at {word} with a ${target} target.]] {body}",
    ),
    (
        "first_sentence_plain",
        "first_sentence",
        "[[We reiterate our {word} rating on {company} ({ticker}) with a ${target} target.]] {body}",
    ),
    (
        "crlf_header_nbsp",
        "rating_field",
        "{COMPANY} ({ticker})\r\n{date}\r\n\r\n[[Investment\u00a0Rating:\u00a0{word}]]\r\nPrice\u00a0target: ${target}\r\n"
        "\r\n{body}",
    ),
    (
        "crlf_soft_wrap_sentence",
        "front_matter_sentence",
        "{company} ({ticker})\r\nResults review\r\n\r\n[[We {verb} {company} to {word} from {prev} on the back of\r\n"
        "better pricing\u00a0\u2011 and lower costs.]]\r\n\r\n{body}",
    ),
    ("first_sentence_move", "first_sentence", "[[We {verb} {company} ({ticker}) to {word} from {prev}.]]\n\n{body}"),
)
_SLOT = re.compile(r"\{(" + "|".join(SLOT_KINDS) + r")\}")


@dataclass(frozen=True)
class ProviderPlant:
    """What a provider layout planted: the statement and what removal and a fake must leave alone."""

    layout: str
    rule: str  # the rule a front-matter reader names (first_sentence | rating_field | front_matter_sentence)
    start: int  # the statement's span in the report
    end: int
    keep_from: int  # removal keeps every byte from here on (after the statement's separator)
    pieces: tuple[str, ...]  # the statement as literal pieces around its slots: len(pieces) = len(kinds) + 1
    kinds: tuple[str, ...]  # the slots' kinds (SLOT_KINDS), in order
    rating: Rating
    term: str  # the rating as written in the first rating slot
    previous: str | None  # a move's previous rating as written


def _stars(n: int) -> str:
    return FILLED * n + EMPTY * (5 - n)


def _point(scale: str, rating: Rating, pick: Callable[[int], int]) -> int:
    points = [int(p) for p, r in SCALES[scale].items() if r is rating]
    return points[pick(len(points))]


def _fill(
    kind: str,
    rating: Rating,
    prev: Rating | None,
    pick: Callable[[int], int],
    upper: bool,
    point: dict,
    words: dict[Rating, tuple[str, ...]],
) -> str:
    """A slot's text for `rating`; a provider's number and the label beside it name the same point."""
    if kind == "word":
        if "zacks" in point:
            return ZACKS_LABELS[point["zacks"]]
        if "cfra" in point:
            return CFRA_LABELS[point["cfra"]]
        w = words[rating][pick(len(words[rating]))]
        w = "Equal-Weight" if w == "equal weight" else w.title()
        return w.upper() if upper else w
    if kind in ("cfra", "morningstar", "zacks"):
        point[kind] = _point(kind, rating, pick)
        return str(point[kind])
    if kind in ("cfra_glyphs", "ms_glyphs"):
        return _stars(_point("cfra" if kind == "cfra_glyphs" else "morningstar", rating, pick))
    if kind == "prev":
        assert prev is not None, "a move needs a previous rating"
        return point.setdefault("prev_word", WORDS[prev][pick(len(WORDS[prev]))].title())
    if kind == "valuation":
        return next(w for w, r in SCALES["valuation"].items() if r is rating)
    assert prev is not None, "a move verb needs a previous rating"
    return "upgrade" if RANK[rating] > RANK[prev] else "downgrade"


def provider_report(
    rating: Rating,
    body: Sequence[str],
    pick: Callable[[int], int],
    company: str,
    ticker: str,
    date: str = "14 March 2024",
    layout: int | None = None,
) -> tuple[str, ProviderPlant]:
    """One report laid out by a provider layout (`pick`ed, or `layout`), its body sentences in paragraphs
    after the front matter, and what was planted."""
    name, rule, template = LAYOUTS[pick(len(LAYOUTS)) if layout is None else layout]
    prev = None
    if "{prev}" in template:
        others = [r for r in RANK if r is not rating]
        prev = others[pick(len(others))]
    upper = pick(3) == 0
    paras = [" ".join(body[i : i + 4]) for i in range(0, len(body), 4)] or ["No further comment."]
    fixed = {
        "company": company,
        "COMPANY": company.upper(),
        "ticker": ticker,
        "date": date,
        "target": str(40 + pick(60)),
        "body": "\n\n".join(paras),
    }
    head, rest = template.split("[[", 1)
    stmt, tail = rest.split("]]", 1)

    def lit(s: str) -> str:
        return re.sub(r"\{(company|COMPANY|ticker|date|target|body)\}", lambda m: fixed[m.group(1)], s)

    before = lit(head)
    point: dict = {}
    pieces, kinds, out, term = [""], [], before, None
    for i, part in enumerate(_SLOT.split(stmt)):  # literal, kind, literal, kind, ..., literal
        if i % 2 == 0:
            pieces[-1] += lit(part)
            out += lit(part)
            continue
        value = _fill(part, rating, prev, pick, upper, point, FIELD_WORDS if rule == "rating_field" else WORDS)
        kinds.append(part)
        pieces.append("")
        out += value
        if term is None and part not in ("verb", "prev"):
            term = value
    end = len(out)
    gap, _, after = tail.partition("<<") if "<<" in tail else ("", "", tail)
    ws = len(after) - len(after.lstrip())
    text = out + lit(gap) + lit(after)
    keep_from = end + len(lit(gap)) + (0 if gap else ws)
    plant = ProviderPlant(
        f"provider:{name}",
        rule,
        len(before),
        end,
        keep_from,
        tuple(pieces),
        tuple(kinds),
        rating,
        term or "",
        point.get("prev_word"),
    )
    return text, plant


def statement_pattern(pieces: Sequence[str]) -> re.Pattern:
    """The planted statement with each slot open: literal pieces as written (a whitespace run matches any
    run), each slot a lazy group."""
    lits = [
        r"\s+".join(re.escape(w) for w in re.split(r"\s+", p)) if p.strip() else (r"\s*" if p else "") for p in pieces
    ]
    return re.compile("(.+?)".join(lits), re.DOTALL)


def read_slot(kind: str, value: str) -> Rating | None:
    """One slot's rating on its scale (None: not a point of the scale)."""
    v = " ".join(value.strip().lower().split())
    if kind in ("cfra_glyphs", "ms_glyphs"):
        if not v or any(ch not in FILLED + EMPTY for ch in v):
            return None
        return SCALES["cfra" if kind == "cfra_glyphs" else "morningstar"].get(str(v.count(FILLED)))
    scale = "word" if kind == "prev" else kind
    return SCALES.get(scale, {}).get(v.replace("-", " ") if scale == "word" else v) or SCALES.get(scale, {}).get(v)


def read_statement(statement: str, pieces: Sequence[str], kinds: Sequence[str]) -> tuple[Rating | None, str]:
    """The rating a (rewritten) statement states, read at the planted slots: every rating slot must name
    the same rating, and a move must go from a different previous rating with the verb pointing that way
    ("upgrade ... to Buy from Hold"). Returns (rating, why not)."""
    m = statement_pattern(pieces).fullmatch(statement)
    if m is None:
        return None, "the words around the rating slots changed"
    read = {k: " ".join(g.split()) for k, g in zip(kinds, m.groups())}
    ratings = {read_slot(k, g) for k, g in zip(kinds, m.groups()) if k not in ("verb", "prev")}
    if len(ratings) != 1 or None in ratings:
        return None, f"the rating slots read {sorted(str(r) for r in ratings)}: {list(m.groups())}"
    rating = ratings.pop()
    if "prev" in read:
        prev = read_slot("word", read["prev"])
        if prev is None or prev is rating:
            return None, f"a move from {read['prev']!r} to {rating.value}"
        want = "upgrade" if RANK[rating] > RANK[prev] else "downgrade"
        if "verb" in read and read["verb"].lower() != want:
            return None, f"move verb {read['verb']!r} from {read['prev']!r} to {rating.value}"
    return rating, ""
