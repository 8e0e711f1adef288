"""The synthetic market at the real corpus's shape: every rating scale's wording, lists and tables.

Why: the default run's reports are short prose with "Bullish/Buy"-style first sentences. The real
Fin-Bias corpus (8,868 reports, ~4,000 tokens each) states its ratings in every broker scale
finlib.finbias.vocab.RATING_SCALES lists, as maintained ratings, initiations, upgrades and downgrades
("to Outperform from Sector Perform"), and lays out its numbers as line-broken bullet lists and
estimate tables. Those shapes are what stress the rating extractor, the sentence splitter, the
tagger and the models' context windows, so the rehearsal (params/rehearsal.yaml) generates them:

* `rating_wording: scales` draws the first sentence's English scale, term and action (maintain, initiate,
  upgrade, downgrade) per report; an upgrade or downgrade names the previous rating of the same
  scale ("to X from Y", "from Y to X"), which the extractor must read as previous.
* `layout: structured` puts line-broken lists ("Key points:" + "- ..." lines) and estimate tables
  (a header line and one line per metric, columns separated by runs of spaces) between paragraphs;
  their numbers move with the report's quality signal like the factual sentences do.
* `finlib.finbias.data.synth_cache.cached_market` writes the generated market once per (params, seed) and reuses it: the
  full-size market (8,868 reports of ~3,000 words) is made once, then read back in seconds.
"""
from __future__ import annotations

from finlib.finbias.vocab import RATING_SCALES, RATINGS, Rating

RATING_WORDINGS = ("paper", "scales")
LAYOUTS = ("prose", "structured")

# First sentences per action. {R}: current rating term, {P}: previous term, {A}: "a"/"an" before {R}.
_MAINTAIN = (
    "We maintain our {R} rating on {C} ({T}).",
    "We reiterate {A} {R} rating on {C} ({T}) after the Q{Q} results.",
    "Rating: {R} on {C} ({T}) with a 12-month horizon.",
    "We keep {C} ({T}) at {R} after the Q{Q} results.",
)
_INITIATE = (
    "We initiate coverage of {C} ({T}) with {A} {R} rating.",
    "We are initiating coverage of {C} ({T}) at {R}.",
)
_UPGRADE = (
    "We upgrade {C} ({T}) to {R} from {P}.",
    "{C} ({T}) is upgraded from {P} to {R} on better estimates.",
)
_DOWNGRADE = (
    "We downgrade {C} ({T}) to {R} from {P}.",
    "{C} ({T}) is downgraded from {P} to {R} after the Q{Q} update.",
)
ACTIONS = ("maintain", "initiate", "upgrade", "downgrade")
_TEMPLATES = {"maintain": _MAINTAIN, "initiate": _INITIATE, "upgrade": _UPGRADE, "downgrade": _DOWNGRADE}
_ORDER = {Rating.BEARISH: 0, Rating.NEUTRAL: 1, Rating.BULLISH: 2}


def english_scales() -> tuple:
    """The scales of finlib.finbias.vocab.RATING_SCALES written in English (the corpus's language): a
    Chinese broker term in an English sentence is not a shape the real corpus has."""
    return tuple(s for s in RATING_SCALES if all(t.isascii() for t in (*s.bullish, *s.neutral, *s.bearish)))


def display_term(term: str) -> str:
    """Report casing of a scale term: "equal-weight" -> "Equal-Weight", "in line" -> "In Line"."""
    return "-".join(" ".join(w[:1].upper() + w[1:] for w in part.split(" ")) for part in term.split("-"))


def _terms(scale, rating: Rating) -> tuple[str, ...]:
    return {Rating.BULLISH: scale.bullish, Rating.NEUTRAL: scale.neutral, Rating.BEARISH: scale.bearish}[rating]


def scale_first_sentence_planted(rating: Rating, d, ctx: dict) -> tuple[str, str, str | None]:
    """A first sentence in one of the published scales: maintain, initiate, upgrade or downgrade.

    `d` is the report's random source (finlib.finbias.data.synth._Draw). An upgrade needs a lower
    rating on the same scale and a downgrade a higher one; when the scale has none the draw
    falls back to maintain, so every (scale, term) is reachable. Returns the sentence, the current
    term and the previous term (None without a transition) as written.
    """
    scales = [s for s in english_scales() if _terms(s, rating)]
    scale = d.pick(scales)
    term = display_term(d.pick(_terms(scale, rating)))
    action = d.pick(ACTIONS)
    prev = None
    if action in ("upgrade", "downgrade"):
        want = [r for r in RATINGS if (_ORDER[r] < _ORDER[rating]) == (action == "upgrade")
                and r is not rating and _terms(scale, r)]
        if want:
            prev = display_term(d.pick(_terms(scale, d.pick(want))))
        else:
            action = "maintain"
    article = "an" if term[0] in "AEIOU" else "a"
    sentence = d.pick(_TEMPLATES[action]).format(R=term, P=prev, A=article, C=ctx["company"], T=ctx["ticker"],
                                                  Q=1 + int(d.u() * 4))
    return sentence, term, prev


def bullet_block(lines: list[str], d) -> str:
    """A line-broken list: a lead line, then one "- " or "* " line per item."""
    lead = d.pick(("Key points:", "Highlights of the quarter:", "What changed:", "Our estimates:"))
    mark = d.pick(("- ", "* ", "\u2022 "))
    return lead + "\n" + "\n".join(mark + s for s in lines)


def table_block(s: float, ctx: dict, d) -> str:
    """An estimates table: a header line and one line per metric, columns separated by spaces.

    Growth in the estimate columns moves with the quality signal `s` (as in the factual sentences).
    """
    yr = ctx["year"]
    rev = ctx["rev"] * 4000.0  # annual revenue, $ mn
    g = 0.04 + 0.05 * s + 0.01 * d.normal()
    cols = [f"FY{yr - 1}A", f"FY{yr}E", f"FY{yr + 1}E"]
    revs = [rev, rev * (1 + g), rev * (1 + g) ** 2]
    margin = ctx["margin"] + 1.5 * s
    eps = [ctx["eps"] * 4 * (1 + g * k + 0.02 * d.normal()) for k in range(3)]
    rows = [("Revenue ($ mn)", [f"{v:,.0f}" for v in revs]),
            ("Revenue growth (%)", [f"{100 * (g + 0.01 * d.normal()):.1f}" for _ in range(3)]),
            ("Operating margin (%)", [f"{margin + 0.5 * k + 0.3 * d.normal():.1f}" for k in range(3)]),
            ("Diluted EPS ($)", [f"{v:.2f}" for v in eps]),
            ("Net debt/EBITDA (x)", [f"{max(0.1, 2.2 - 0.5 * s + 0.2 * d.normal()):.1f}" for _ in range(3)])]
    width = max(len(r[0]) for r in rows) + 2
    head = "Estimates".ljust(width) + "   ".join(c.rjust(8) for c in cols)
    body = [name.ljust(width) + "   ".join(v.rjust(8) for v in vals) for name, vals in rows]
    return "\n".join([head, *body])
