"""Broker text as the world writes it: rating sentences in every scale and case, and report skeletons.

Why: the synthetic market's own reports are tidy prose, so a rating extractor, sentence splitter or fake
writer tuned on them can fail on real reports without any test noticing. This module writes the shapes
real sell-side reports have and the generator's other templates lack:

* `first_sentences()`: >= 300 rating sentences, every term of every scale in
  `finlib.finbias.vocab.RATING_SCALES` (Chinese scales in Chinese sentences), as maintained ratings,
  initiations, upgrades and downgrades, in as-written, UPPER, lower and Title case, many with secondary
  direction words that are not the rating ("lower margins", "cost cuts", "raise our target",
  "cut our estimates", "up from", "down from") and some without a final period.
* `SKELETONS` (>= 30): report layouts - the rating line followed by headings without periods, bullet
  lists, tab-separated or space-aligned tables, key: value lines, lines without final punctuation, a
  rating line wrapped after a comma - filled with body sentences (`lay_out`).
* `messy_reports()`: a corpus crossing the two, with the planted rating of each report as metadata
  (`planted_rating`, `rating_sentence`, `rating_term`, `previous_rating_term`, `report_layout`: the
  fields of `finlib.finbias.data.synth.PlantedRating`), so checks compare with what was written, never with
  the project's extractor.

* `provider_reports()`: reports laid out as research providers print a front page (title lines, header
  blocks, CFRA / Morningstar / Zacks boxes, tables, disclaimers, page furniture before the rating;
  `finlib.finbias.data.provider_layouts`), every layout x rating, with the planted statement record.

The rehearsal mixes these layouts and sentences into the synthetic market (`data.synthetic.messy_share`:
half of that share as skeletons under a rating sentence, half as provider front pages).
Everything is deterministic: the corpus is a function of its arguments.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from finlib.finbias.data import provider_layouts
from finlib.finbias.vocab import RATING_SCALES, RATINGS, Rating, is_cjk

CASES = ("as_written", "upper", "lower", "title")
_RANK = {Rating.BEARISH: 0, Rating.NEUTRAL: 1, Rating.BULLISH: 2}

# (action, template). {R}: current term, {P}: previous term, {A}: a/an before {R}, {C}: company,
# {T}: ticker, {X}: a price target, {UP} / {LO}: a higher and a lower one. Written as brokers write first lines, not as the generator's.
EN_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("maintain", "We maintain our {R} rating on {C} ({T}) with a ${X} target"),
    ("maintain", "We rate {C} ({T}) {R} with a ${X} target."),
    ("maintain", "We reiterate our {R} rating and raise our target to ${UP} from ${LO}."),
    ("maintain", "{C} ({T}): reiterate {R}; we cut our estimates on lower margins"),
    ("maintain", "Rating: {R} | Price target: ${UP} (up from ${LO})"),
    ("maintain", "We stay at {R} on {C} ({T}) and trim our target to ${LO}, down from ${UP}."),
    ("maintain", "Our {R} rating on {C} ({T}) is unchanged despite cost cuts and lower volumes."),
    ("initiate", "We initiate coverage of {C} ({T}) with {A} {R} rating and a ${X} price target."),
    ("initiate", "Initiating at {R}: {C} ({T}) should gain as input costs fall"),
    ("upgrade", "We upgrade {C} ({T}) to {R} from {P} and raise our target to ${X}."),
    ("upgrade", "{C} ({T}) upgraded to {R} from {P}: margins up from 12% to 14%"),
    ("upgrade", "Upgrading {C} to {R} (from {P}) after cost cuts; target up to ${X}"),
    ("downgrade", "We downgrade {C} ({T}) to {R} from {P} on lower margins and cost cuts."),
    ("downgrade", "Downgrading {C} ({T}) to {R} from {P}; we cut our estimates"),
    ("downgrade", "{C} ({T}) cut to {R} from {P} as volumes fall, down from last year's peak."),
    ("move", "We move {C} ({T}) from {P} to {R} and lower our target to ${X}."),
)
ZH_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("maintain", "维持{C}{R}评级，下调盈利预测。"),
    ("initiate", "首次覆盖{C}，给予{R}评级，目标价{X}元。"),
    ("upgrade", "{C}评级由{P}上调至{R}，上调目标价至{X}元。"),
    ("downgrade", "{C}评级由{P}下调至{R}，下调盈利预测。"),
)
COMPANIES: tuple[tuple[str, str, str], ...] = (  # (company, ticker, Chinese name)
    ("Acme Corp.", "ACME", "艾克美"), ("Oracle Corp.", "ORCL", "甲骨文"), ("Nordvik Paper AB", "NRDV", "诺德纸业"),
    ("Halden & Co.", "HLDN", "海登公司"), ("Brightwater Inc.", "BRWT", "明水股份"),
    ("St. Clair Foods", "STCF", "圣克莱尔食品"),
)


@dataclass(frozen=True)
class FirstSentence:
    """One rating sentence and what it states, as written (not as read back)."""

    text: str
    rating: Rating
    term: str                 # the current-rating term as written in `text`
    previous: str | None      # an upgrade's / downgrade's previous term as written
    scale: str
    template: str
    case: str


def _display(term: str) -> str:
    return term if is_cjk(term) else "-".join(" ".join(w[:1].upper() + w[1:] for w in part.split(" "))
                                              for part in term.split("-"))


def _cased(text: str, case: str) -> str:
    if case == "upper":
        return text.upper()
    if case == "lower":
        return text.lower()
    if case == "title":
        return " ".join(w[:1].upper() + w[1:] for w in text.split(" "))
    return text


def _scale_terms(scale) -> dict[Rating, tuple[str, ...]]:
    return {Rating.BULLISH: scale.bullish, Rating.NEUTRAL: scale.neutral, Rating.BEARISH: scale.bearish}


def _previous_terms(scale, rating: Rating, action: str) -> list[str]:
    """Terms of the same scale an upgrade (lower ratings), downgrade (higher) or move (any other) comes from."""
    out = []
    for r, terms in _scale_terms(scale).items():
        up = _RANK[r] < _RANK[rating]
        if r is not rating and (action == "move" or (action == "upgrade") == up):
            out.extend(terms)
    return out


def render_first_sentence(template: str, rating: Rating, term: str, previous: str | None, case: str,
                          company: tuple[str, str, str], target: int) -> FirstSentence:
    """One rating sentence from a template; `term` / `previous` are recorded as they appear after casing."""
    cjk = is_cjk(term)
    r, p = _display(term), None if previous is None else _display(previous)
    c_case = "as_written" if cjk else case
    r_cased = _cased(r, c_case) if c_case in ("upper", "lower") else r
    p_cased = None if p is None else (_cased(p, c_case) if c_case in ("upper", "lower") else p)
    article = "an" if r[:1].lower() in "aeiou" else "a"
    text = template.format(R=r, P=p, A=article, C=company[2] if cjk else company[0], T=company[1],
                           X=target, UP=target + 5, LO=target - 5)
    return FirstSentence(_cased(text, c_case), rating, r_cased, p_cased, "", template, c_case)


def first_sentences() -> list[FirstSentence]:
    """Every term of every scale x every template its action allows x a case (cycled so every scale
    appears in every case): the rating sentences of the messy corpus, in a fixed order."""
    out: list[FirstSentence] = []
    k = 0
    for scale in RATING_SCALES:
        for rating, terms in _scale_terms(scale).items():
            for term in terms:
                templates = ZH_TEMPLATES if is_cjk(term) else EN_TEMPLATES
                for action, template in templates:
                    prev = None
                    if action in ("upgrade", "downgrade", "move"):
                        pool = _previous_terms(scale, rating, action)
                        if not pool:
                            continue
                        prev = pool[k % len(pool)]
                    case = CASES[k % len(CASES)]
                    fs = render_first_sentence(template, rating, term, prev, case, COMPANIES[k % len(COMPANIES)],
                                               40 + k % 60)
                    out.append(FirstSentence(fs.text, fs.rating, fs.term, fs.previous, scale.name, template, fs.case))
                    k += 1
    return out


def draw_first_sentence(rating: Rating, pick: Callable[[int], int], company: str, ticker: str) -> FirstSentence:
    """A rating sentence for `rating` in a random English scale, term, template and case (`pick(n)` draws an
    index below n): how the synthetic market writes the first line of a messy report."""
    scales = [s for s in RATING_SCALES if _scale_terms(s)[rating] and not is_cjk(_scale_terms(s)[rating][0])]
    scale = scales[pick(len(scales))]
    terms = _scale_terms(scale)[rating]
    term = terms[pick(len(terms))]
    usable = [(a, t) for a, t in EN_TEMPLATES if a in ("maintain", "initiate") or _previous_terms(scale, rating, a)]
    action, template = usable[pick(len(usable))]
    prev = None
    if action in ("upgrade", "downgrade", "move"):
        pool = _previous_terms(scale, rating, action)
        prev = pool[pick(len(pool))]
    fs = render_first_sentence(template, rating, term, prev, CASES[pick(len(CASES))], (company, ticker, ""),
                               40 + pick(60))
    return FirstSentence(fs.text, rating, fs.term, fs.previous, scale.name, template, fs.case)


# ---- report skeletons ---------------------------------------------------------------------------

BODY_SENTENCES: tuple[str, ...] = (
    "Revenue rose 4% year on year to $2.1 bn.",
    "Gross margin fell 80 bp on higher input costs.",
    "We cut our FY25 EPS estimate to $3.10 from $3.25.",
    "Management raised full-year guidance for the second time.",
    "Free cash flow was $410 mn, up from $350 mn a year ago.",
    "Net debt/EBITDA is 1.8x, down from 2.3x at year end.",
    "Orders in Europe were weak, while the U.S. held up.",
    "The results were impressive and the outlook is excellent.",
    "Execution on the cost programme has been disappointing.",
    "We see a compelling risk/reward at current levels.",
    "Pricing remains a concern in the consumer segment.",
    "Capex guidance was lowered to $600 mn.",
    "The buyback adds about 2% to EPS next year.",
    "Volumes declined 3%, offset by a 5% price increase.",
    "Our target implies 15% upside over 12 months.",
    "Inventory days rose to 84 from 77.",
)
HEADINGS = ("Key points", "KEY TAKEAWAYS", "Investment summary:", "What changed", "Valuation and risks",
            "ESTIMATES", "Risks to our rating:", "Quarter in brief")
BULLETS = ("- ", "\u2022 ", "* ", "1) ", "(a) ", "\u2013 ")


@dataclass(frozen=True)
class Skeleton:
    """A report layout: how the rating line ends and which blocks follow it (`lay_out` fills them)."""

    name: str
    rating_line: str          # period | no_period | wrapped (rating line broken after a comma)
    blocks: tuple[str, ...]   # heading_bullets, bullets, tab_table, space_table, kv, bare_lines, prose, heading_prose
    joiner: str               # "\n" (blocks on consecutive lines) or "\n\n" (blank lines between blocks)
    heading: str
    bullet: str


_BLOCK_ORDERS: tuple[tuple[str, ...], ...] = (
    ("heading_bullets", "prose", "tab_table"),
    ("bullets", "heading_prose", "space_table"),
    ("kv", "heading_bullets", "prose"),
    ("prose", "tab_table", "heading_prose"),
    ("bare_lines", "prose", "heading_bullets"),
    ("space_table", "bullets", "heading_prose"),
    ("heading_prose", "kv", "bare_lines"),
    ("tab_table", "heading_bullets", "prose"),
)
SKELETONS: tuple[Skeleton, ...] = tuple(
    Skeleton(f"{line}-{i}-{'single' if joiner == chr(10) else 'blank'}", line, blocks, joiner,
             HEADINGS[(i + j) % len(HEADINGS)], BULLETS[(i + 2 * j) % len(BULLETS)])
    for j, (line, joiner) in enumerate(itertools.product(("period", "no_period", "wrapped"), ("\n", "\n\n")))
    for i, blocks in enumerate(_BLOCK_ORDERS) if (i + j) % 3 != 2 or line == "no_period"
)


def _strip_period(s: str) -> str:
    return s[:-1] if s.endswith(".") else s


def _table(rows: Sequence[tuple[str, Sequence[str]]], sep: str) -> str:
    if sep == "\t":
        return "\n".join("\t".join([name, *cells]) for name, cells in rows)
    width = max(len(name) for name, _ in rows) + 2
    return "\n".join(name.ljust(width) + "   ".join(c.rjust(8) for c in cells) for name, cells in rows)


DEFAULT_TABLE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("US$ mn", ("FY24A", "FY25E", "FY26E")), ("Revenue", ("8,412", "8,790", "9,150")),
    ("EBIT margin (%)", ("14.2", "13.6", "14.1")), ("EPS ($)", ("3.25", "3.10", "3.42")),
)


def lay_out(skeleton: Skeleton, rating_line: str, body: Sequence[str],
            table: Sequence[tuple[str, Sequence[str]]] = DEFAULT_TABLE,
            pick: Callable[[int], int] = lambda n: 0) -> tuple[str, str]:
    """A report: `rating_line` shaped by the skeleton, then its blocks filled from `body` in order, then the
    rest of `body` as paragraphs (a heading without a period before every other one). ``pick(n)`` chooses
    an index below n (block sizes); the default is deterministic. Returns the text and the shaped rating
    line (the prefix of the text that states the rating: the planted `rating_sentence`)."""
    first = rating_line
    if skeleton.rating_line == "no_period":
        first = _strip_period(rating_line)
    elif skeleton.rating_line == "wrapped" and ", " in rating_line[20:]:
        cut = rating_line.index(", ", 20) + 1
        first = rating_line[:cut] + "\n" + rating_line[cut + 1:]
    parts, i = [first], 0

    def take(n: int) -> list[str]:
        nonlocal i
        got = list(body[i:i + n])
        i += len(got)
        return got

    for block in skeleton.blocks:
        n = 3 + pick(3)
        if block in ("heading_bullets", "bullets"):
            items = [skeleton.bullet + (_strip_period(s) if k % 2 else s) for k, s in enumerate(take(n))]
            head = [skeleton.heading] if block == "heading_bullets" else []
            parts.append("\n".join(head + items))
        elif block in ("tab_table", "space_table"):
            parts.append(_table(table, "\t" if block == "tab_table" else " "))
        elif block == "kv":
            x = table[-1][1]
            parts.append(f"Price target: ${40 + pick(60)} (up from ${35 + pick(50)})\nEPS FY25E: {x[1]}\n"
                         f"EPS FY26E: {x[2]}")
        elif block == "bare_lines":
            parts.append("\n".join(_strip_period(s) for s in take(n)))
        elif block == "prose":
            parts.append(" ".join(take(n)))
        else:  # heading_prose
            parts.append(skeleton.heading.rstrip(":") + "\n" + " ".join(take(n)))
    k = 0
    while i < len(body):
        para = " ".join(take(4 + pick(3)))
        parts.append((HEADINGS[k % len(HEADINGS)] + "\n" + para) if k % 2 == 0 else para)
        k += 1
    text = skeleton.joiner.join(parts[:2]) + ("\n\n" if len(parts) > 2 else "") + "\n\n".join(parts[2:])
    return text, first


def messy_reports(first: Sequence[FirstSentence] | None = None, english_only: bool = True) -> pd.DataFrame:
    """One report per rating sentence (English ones by default: the Fin-Bias corpus is English), each
    laid out by the next skeleton in turn, with the planted rating as metadata. Columns: report_id, text,
    planted_rating, rating_sentence, rating_term, previous_rating_term, report_layout, scale, case."""
    rows = []
    sentences = [s for s in (first if first is not None else first_sentences())
                 if not (english_only and is_cjk(s.term))]
    for k, fs in enumerate(sentences):
        sk = SKELETONS[k % len(SKELETONS)]
        body = [BODY_SENTENCES[(k + j) % len(BODY_SENTENCES)] for j in range(10 + k % 6)]
        text, line = lay_out(sk, fs.text, body)
        rows.append({"report_id": f"MESSY{k:04d}", "text": text, "planted_rating": fs.rating.value,
                     "rating_sentence": line, "rating_term": fs.term, "previous_rating_term": fs.previous,
                     "report_layout": f"messy:{sk.name}", "scale": fs.scale, "case": fs.case})
    return pd.DataFrame(rows)


def _draws(seed: int) -> Callable[[int], int]:
    """`pick(n)`: an index below n from a fixed linear congruential stream (a report's draws, no global state)."""
    state = [seed]

    def pick(n: int) -> int:
        state[0] = (state[0] * 1103515245 + 12345) % 2**31
        return (state[0] >> 8) % n

    return pick


def provider_reports(per_layout: int = 6) -> pd.DataFrame:
    """`per_layout` reports per provider layout (`provider_layouts.LAYOUTS`), cycling the ratings, each with a
    deterministic draw of words and points and the body sentences in paragraphs. Columns: report_id, text,
    planted_rating, report_layout, rule, and `plant` (the `provider_layouts.ProviderPlant`)."""
    rows = []
    for li in range(len(provider_layouts.LAYOUTS)):
        for k in range(per_layout):
            pick = _draws(li * 7919 + k * 104729)
            company, ticker, _ = COMPANIES[(li + k) % len(COMPANIES)]
            body = [BODY_SENTENCES[(li + k + j) % len(BODY_SENTENCES)] for j in range(6 + k % 5)]
            text, plant = provider_layouts.provider_report(RATINGS[k % 3], body, pick, company, ticker, layout=li)
            rows.append({"report_id": f"PROV{li:02d}{k:02d}", "text": text, "planted_rating": plant.rating.value,
                         "report_layout": plant.layout, "rule": plant.rule, "plant": plant})
    return pd.DataFrame(rows)
