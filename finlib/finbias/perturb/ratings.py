"""Analyst ratings in a report's first sentence: extraction and the fake-rating rewrite.

Used by stage 00 (analyst_rating), stage 02 (the fake_rating condition) and the rating sweep, so
the rating a report is labelled with and the rating its perturbations show agree. Public API:
`extract_analyst_rating(text)`, `rating_of_sentence(sentence)`, `find_rating_mentions(sentence)`,
`rewrite_rating(sentence, new_rating) -> (sentence, kind)` and `replace_rating(text, new_rating)`.

Extraction
----------
`extract_analyst_rating` reads the FIRST sentence only (the authors' protocol); where else a report states its
rating (front-matter fields, later sentences, provider boxes) is `finlib.finbias.perturb.statement`, which reads
each candidate with `rating_of_sentence`. Provider points ("4-STARS", "Zacks Rank #2", "4-star", "undervalued")
are mentions too (`finlib.finbias.perturb.provider_scales`). Vocabulary is `finlib.finbias.vocab.RATING_SYNONYMS` (one source of
truth), matched case-insensitively as whole words, longest phrase first, hyphen or space
between the words of a phrase ("Market-Perform" = "market perform"). A mention counts only
when it is used as a rating; the vocabulary has three tiers because some rating words are
also ordinary English:

- tier A, unambiguous (bullish, bearish, outperform, overweight, equal-weight, market
  perform, strong buy, ...): always a rating.
- tier B, rating words that are also common verbs/adjectives (buy, sell, hold, accumulate,
  neutral): a rating when capitalised ("Buy", "BUY"; capitalisation is no evidence in a
  Title-Case or ALL-CAPS headline), or in a rating slot (below), or right after
  "is/are/remain/stay/be/turn/become" ("shares are a buy", "we remain neutral").
  "Oracle agreed to buy Cerner" is not a rating.
- tier C, words that are mostly ordinary (add, reduce, positive, negative, in line): only in
  a rating slot. "We reduce our estimate", "a positive quarter", "in line with consensus"
  are not ratings; "Rating: Positive", "upgrade to Add", "Maintain Reduce", "an In-Line
  rating" are.

A *rating slot* is: directly followed by rating/recommendation/opinion/call/-rated
("our BUY rating", "(buy) opinion"); directly after ':' '=' or '(' ("Rating: Buy", "(Buy)");
or within 7 words after a rating cue (rate/rating/recommend/maintain/reiterate/reaffirm/
initiate/upgrade/downgrade/assign/resume/keep) with the word right before the mention one of
to/at/from/as/a/an/is/of/with/on or the cue itself ("rates ORCL a BUY", "initiate coverage of
Oracle with an Outperform", "Maintain Hold"); after "rate/rates/rated" and its object of at most five words,
none a rating word or a phrase opener (on, with, despite, the, ...): "We rate Acme Corp. (ACME) Reduce"; or
after a stance verb and "at" ("we stay at Add").

Mentions that do not assert the current rating are set aside:
- negated: "not", "no", "never", "nor" or an "n't" word within the 3 words before
  ("we are not bullish", "no longer a Buy");
- previous: after "from", "previously", "formerly", "prior", "was/were" (skipping a/an/our/
  its/the/rated/rating/of): in "upgraded from Hold to Buy" or "to Buy from Hold" the current
  rating is Buy.
- hyphen compounds: "buy-back", "sell-side", "market-neutral" (but "Buy-rated" counts).

The rating is the one rating all remaining mentions agree on; none, or two different ones
("Buy/Hold/Sell", "Buy on ORCL, Sell on SAP") -> None (counted as "no rating", never guessed).

Chinese terms (买入, 增持, 中性, 持有, 减持, 卖出, 看涨, ...) are read in a Chinese sentence: the
everyday ones (买入, 卖出, 持有, 增持, 减持) only before 评级 or after 维持/给予/上调至/下调至/评级：;
after 由/从 ("from") they are the previous rating.

Fake ratings (`rewrite_rating`)
-------------------------------
Every *current* mention is replaced by the same family's word for the new rating (families in
`FAMILIES`, one for every term of every scale in `finlib.finbias.vocab.RATING_SCALES`), letter case
kept (BUY -> SELL, Market Perform -> Market Underperform) and a preceding a/an fixed. The
sentence must stay a coherent analyst sentence:

- a transition "to X from Y" / "from Y to X": when the new rating equals the previous one Y,
  the previous mention becomes the analyst's current rating instead, in the current rating's
  scale ("upgrade to Buy from Hold", fake Hold -> "downgrade to Hold from Buy"; "Raising to
  Overweight from Neutral", fake neutral -> "Lowering to Equal-Weight from Overweight"), so a fake
  never repeats the previous rating;
- only the verb of the rating move may change (`rating_move_verbs`): the direction verb right before the
  current rating, the one governing the first rating mention with no object of its own in between, or an
  upgrade/downgrade verb; "lower margins", "cost cuts", "raise our target", "cut our estimates" stay;
- that verb (upgrade/downgrade, raise/lift/boost vs lower/cut/trim, 上调 vs 下调) agrees with
  the move: with a previous rating, its direction is previous -> new (bullish > neutral >
  bearish); without one, a move *to* the top rating is an upgrade and a move to the bottom
  rating a downgrade (a move to neutral can be either: the verb is kept). A verb that
  disagrees is swapped for its opposite in the same form ("Raising" -> "Lowering").

The kind of rewrite is returned and counted by stage 02: `plain` (no transition), `transition`
(already coherent), `transition_previous` (previous rating replaced), `transition_verb` (verb
swapped), `transition_previous_verb` (both). Negated mentions are left alone. "outperform" used
as a verb ("shares should outperform") gets the sell-side verb "market-perform" for neutral.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from finlib.finbias.perturb import provider_scales as ps
from finlib.finbias.sentences import first_sentence_span
from finlib.finbias.vocab import (
    AMBIGUOUS_RATING_TERMS,
    HYPHENS,
    RATINGS,
    Rating,
    is_cjk,
    normalise_term,
    rating_vocabulary,
    term_pattern,
)

# Tiers (normalised phrases). Tier A: the rating jargon, everything outside the shared
# schema.AMBIGUOUS_RATING_TERMS. The ambiguous terms split further here, because reading an
# analyst's first sentence needs more than the answer parser's "explicit slot only" rule:
# tier B (verbs/adjectives that analysts also use as a stance: "we are Buy") is trusted after a
# stance verb or capitalised; tier C (mostly ordinary words) only in a rating slot.
TIER_C: frozenset[str] = frozenset({"add", "reduce", "positive", "negative", "in line"})
TIER_B: frozenset[str] = AMBIGUOUS_RATING_TERMS - TIER_C

_HYPHENS = re.escape(HYPHENS)  # for character classes
_CUE = re.compile(
    r"^(?:rat(?:e|es|ed|ing|ings)|recommend\w*|maintain\w*|reiterat\w*|reaffirm\w*|"
    r"initiat\w*|upgrad\w*|downgrad\w*|assign\w*|resum\w*|keep|keeps|kept|keeping|"
    r"mov(?:e|es|ed|ing)|rais(?:e|es|ed|ing)|lift(?:s|ed|ing)?|lower(?:s|ed|ing)?|cut(?:s|ting)?|"
    r"boost(?:s|ed|ing)?|trim(?:s|med|ming)?|tak(?:e|es|ing)|took)$"
)
_SLOT_PREDECESSORS = frozenset({"to", "at", "from", "as", "a", "an", "is", "of", "with", "on"})
_STANCE_VERBS = frozenset({"is", "are", "remain", "remains", "remained", "stay", "stays", "stayed", "be", "turn", "turns",
                           "turned", "become", "becomes", "we're", "we\u2019re"})
_NEGATORS = frozenset({"not", "no", "never", "nor", "cannot"})
_PREVIOUS = frozenset({"from", "previously", "formerly", "prior", "was", "were", "earlier"})
_SKIPPABLE = frozenset({"a", "an", "our", "its", "the", "their", "rated", "rating", "of",
                        "stars", "star", "1", "2", "3", "4", "5", "zacks", "rank"})  # "from 4-STARS (Buy)"
# Words after which a lowercase tier B/C word may still be a rating ("to buy from hold", "neutral on",
# "hold with a $40 target"); any other lowercase word after it makes it ordinary English ("to hold
# inventories lean", "on positive traffic trends").
_RATING_FOLLOWERS = frozenset({
    "from", "to", "on", "with", "and", "or", "as", "at", "for", "in", "after", "given", "despite", "amid",
    "ahead", "since", "but", "while", "following", "rating", "ratings", "recommendation", "opinion", "call",
    "stance", "we", "our", "the", "a", "an", "into", "until", "pending", "by", "based", "due", "because",
    "here", "now", "still", "again", "rated", "is", "are", "was", "were", "this", "its", "their", "though",
    "although", "versus", "vs", "previously", "before", "over", "near", "unchanged", "territory"})
_WORD = re.compile(r"[A-Za-z0-9'\u2019]+")
_AFTER_NOUN = re.compile(rf"\s*\)?\s*(?:[{_HYPHENS}]\s*)?(?:rating|recommendation|opinion|call|rated|stance)\b",
                         re.IGNORECASE)
_OPEN_SLOT = re.compile(r"[:=(]\s*$")
# "We rate Acme Corp. (ACME) Accumulate": the verb "rate", its object (up to five words, none a rating
# word or a word that starts a new phrase), then the rating.
_RATE_OBJECT = re.compile(r"\b(?:rate|rates|rated|rating)\s+((?:\S+\s+){0,5}?)$", re.IGNORECASE)
_NOT_OBJECT = frozenset({"despite", "on", "with", "after", "as", "but", "and", "given", "amid", "for", "at", "in",
                         "to", "from", "is", "are", "was", "while", "though", "although", "because", "since",
                         "we", "our", "its", "their", "the"})
_VOWELS = "aeiouAEIOU"


@lru_cache(maxsize=1)
def _mention_regex() -> re.Pattern[str]:
    """The shared vocabulary as whole words, not inside a word or a hyphen compound; "-rated"
    may follow ("Buy-rated"). Compiled case-insensitively as a whole, so the suffix matches in
    any case too ("BUY-RATED"; schema.term_pattern folds case in the terms only)."""
    pattern = term_pattern(rating_vocabulary(), hyphens=HYPHENS, suffixes=("rated",))
    return re.compile(pattern.pattern, re.IGNORECASE)


@dataclass(frozen=True)
class RatingMention:
    """One rating word in a sentence and how it is read."""

    start: int        # offsets into the text that was searched
    end: int
    surface: str      # as written ("BUY", "Market-Perform")
    phrase: str       # normalised vocabulary key ("buy", "market perform")
    rating: Rating | None  # None: a provider-scale point the mapping does not list
    role: str         # current | previous | negated | not_a_rating | unmapped
    scale: str | None = None   # a provider scale (`provider_scales`): its name, the point, the number's span
    point: str | None = None
    number_span: tuple[int, int] | None = None


def _capitals_are_evidence(sentence: str) -> bool:
    """False for Title-Case / ALL-CAPS headlines, where a capital 'Buy' says nothing.

    A headline is a sentence of >= 3 words longer than three letters, all capitalised.
    """
    words = [w for w in re.findall(r"[A-Za-z]+", sentence) if len(w) > 3]
    return len(words) < 3 or any(w[0].islower() for w in words)


_CJK_SLOT_AFTER = re.compile(r"^\s*(?:评级|評級|投资评级)")
_CJK_SLOT_BEFORE = re.compile(r"(?:维持|維持|给予|給予|上调至|下调至|调高至|调低至|上调为|下调为|评级[:：为]?|[:：(（])\s*$")
_CJK_PREVIOUS = re.compile(r"(?:由|从|從)\s*$")


def _is_rating_use(phrase: str, surface: str, tokens: list[str], before: str, after: str,
                   capitals: bool) -> bool:
    """Is this vocabulary match used as a rating (tiers A/B/C, see the module docstring)?"""
    if phrase not in AMBIGUOUS_RATING_TERMS:  # tier A
        return True
    if is_cjk(phrase):
        return bool(_CJK_SLOT_AFTER.match(after) or _CJK_SLOT_BEFORE.search(before) or _CJK_PREVIOUS.search(before))
    if _AFTER_NOUN.match(after) or _OPEN_SLOT.search(before) or _rate_object_slot(before):
        return True
    pred = tokens[-1] if tokens else ""
    if any(_CUE.match(t) for t in tokens[-12:]) and (pred in _SLOT_PREDECESSORS or _CUE.match(pred)):
        return True
    if pred == "at" and len(tokens) > 1 and tokens[-2] in _STANCE_VERBS:  # "we stay at Add", "remains at Hold"
        return True
    if phrase in TIER_B:
        stance = tokens[-2] if pred in ("a", "an") and len(tokens) > 1 else pred
        return stance in _STANCE_VERBS or (capitals and surface[:1].isupper())
    return False


def _rate_object_slot(before: str) -> bool:
    """Is the mention the rating in "rate <object> <rating>" ("We rate Acme Corp. (ACME) Reduce")?"""
    m = _RATE_OBJECT.search(before)
    if not m:
        return False
    words = [w.lower() for w in _WORD.findall(m.group(1))]
    return bool(words) and not any(w in _NOT_OBJECT for w in words) and not _mention_regex().search(m.group(1))


_NAME_SUFFIX = r"(?:Co|Cos|Corp|Corporation|Inc|Ltd|LLC|plc|PLC|Holdings|Group|Partners|Capital|Brands|Company|" \
    r"Companies|Industries|Trust|Bancorp|AG|SA|NV)"
_NAME_AFTER = re.compile(rf"^[ \t\u00a0]+{_NAME_SUFFIX}\b")
_TICKER_BEFORE = re.compile(rf"\b{_NAME_SUFFIX}\.?[ \t\u00a0]*\($")


def _in_company_name(phrase: str, surface: str, before: str, after: str) -> bool:
    """A rating word that is part of a company's name or ticker: "The Hold Co. (HOLD)", "Buy Capital Inc."."""
    if phrase not in AMBIGUOUS_RATING_TERMS or surface.islower() or is_cjk(phrase):
        return False
    ticker = surface.isupper() and bool(_TICKER_BEFORE.search(before)) and after.lstrip().startswith(")")
    return bool(_NAME_AFTER.match(after)) or ticker


def _ordinary_english(phrase: str, surface: str, after: str) -> bool:
    """A lowercase tier B/C word followed by a content word is English, not a rating ("continues to hold
    inventories lean", "on positive traffic trends"): a rating word is followed by a function word, a
    clause break or nothing ("to buy from hold", "remain neutral on the shares")."""
    if phrase not in AMBIGUOUS_RATING_TERMS or is_cjk(phrase) or not surface.islower():
        return False
    nxt = re.match(r"[ \t\u00a0]*([a-z][a-z'\u2019]*)", after)
    return bool(nxt) and nxt.group(1) not in _RATING_FOLLOWERS


def _role(phrase: str, surface: str, before: str, after: str, capitals: bool) -> str:
    tokens = [t.lower() for t in _WORD.findall(before)]
    if not _is_rating_use(phrase, surface, tokens, before, after, capitals) or _ordinary_english(phrase, surface,
                                                                                                   after) \
            or _in_company_name(phrase, surface, before, after):
        return "not_a_rating"
    if any(t in _NEGATORS or t.endswith(("n't", "n\u2019t")) for t in tokens[-3:]):
        return "negated"
    if is_cjk(phrase) and _CJK_PREVIOUS.search(before):
        return "previous"
    rest = list(tokens)
    while rest and rest[-1] in _SKIPPABLE:
        rest.pop()
    if rest and rest[-1] in _PREVIOUS:
        return "previous"
    return "current"


def find_rating_mentions(sentence: str, scales: ps.Scales | None = None) -> list[RatingMention]:
    """Every vocabulary match and provider-scale point in `sentence`, each classified (module docstring);
    ``scales``: the provider mappings (`provider_scales.provider_scales`; None = the defaults)."""
    vocab = rating_vocabulary()
    capitals = _capitals_are_evidence(sentence)
    out = []
    for m in _mention_regex().finditer(sentence):
        phrase = normalise_term(m.group(0))
        role = _role(phrase, m.group(0), sentence[:m.start()], sentence[m.end():], capitals)
        out.append(RatingMention(m.start(), m.end(), m.group(0), phrase, vocab[phrase], role))
    for p in ps.sentence_mentions(sentence, scales or ps.DEFAULT_PROVIDER_SCALES):
        out.append(_provider_mention(sentence, p))
    return sorted(out, key=lambda m: m.start)


def _provider_mention(sentence: str, p: ps.ProviderMention) -> RatingMention:
    """A provider point as a mention: negated and previous like a rating word; unmapped when the scale's
    mapping does not list the point (the sentence is then unread, never guessed)."""
    tokens = [t.lower() for t in _WORD.findall(sentence[:p.start])]
    role = "current"
    if any(t in _NEGATORS or t.endswith(("n't", "n\u2019t")) for t in tokens[-3:]):
        role = "negated"
    else:
        rest = list(tokens)
        while rest and rest[-1] in _SKIPPABLE | {"as", "look", "looks", "seem", "significantly", "in"}:
            rest.pop()
        role = "previous" if rest and rest[-1] in _PREVIOUS else role
    if p.rating is None and role == "current":
        role = "unmapped"
    return RatingMention(p.start, p.end, sentence[p.start:p.end], f"{p.scale}:{p.point}", p.rating, role, p.scale,
                         p.point, p.number_span)


def rating_of_sentence(sentence: str, scales: ps.Scales | None = None) -> Rating | None:
    """The one rating the current mentions agree on; None when there is none, a conflict, or a
    provider point its scale's mapping does not list."""
    mentions = find_rating_mentions(sentence, scales)
    if any(m.role == "unmapped" for m in mentions):
        return None
    found = {m.rating for m in mentions if m.role == "current"}
    return found.pop() if len(found) == 1 else None


# A rating sentence is one line of a report (real ones are < 500 characters); a "first sentence"
# far longer is a text without sentence breaks, read as "no rating" (counted by stage 02) rather
# than searched for rating phrases, which is quadratic in the number of rating words.
MAX_RATING_SENTENCE_CHARS = 5_000


def extract_analyst_rating(text: str) -> Rating | None:
    """The analyst rating stated in the first sentence of a report, or None (never guessed)."""
    if not isinstance(text, str):
        return None
    span = first_sentence_span(text)
    if span is None or span[1] - span[0] > MAX_RATING_SENTENCE_CHARS:
        return None
    return rating_of_sentence(text[span[0]:span[1]])


# ---- fake ratings -------------------------------------------------------------------------

# Vocabulary families: a phrase is replaced by the same family's word for the new rating,
# so "Outperform" becomes "Underperform", not "Sell". (bullish, neutral, bearish) per family.
FAMILIES: dict[str, tuple[str, str, str]] = {
    "bullish": ("bullish", "neutral", "bearish"),
    "neutral": ("bullish", "neutral", "bearish"),
    "bearish": ("bullish", "neutral", "bearish"),
    "buy": ("buy", "hold", "sell"),
    "hold": ("buy", "hold", "sell"),
    "sell": ("buy", "hold", "sell"),
    "strong buy": ("strong buy", "hold", "strong sell"),
    "strong sell": ("strong buy", "hold", "strong sell"),
    "accumulate": ("accumulate", "hold", "reduce"),
    "add": ("add", "hold", "reduce"),
    "reduce": ("add", "hold", "reduce"),
    "outperform": ("outperform", "market perform", "underperform"),
    "underperform": ("outperform", "market perform", "underperform"),
    "market perform": ("outperform", "market perform", "underperform"),
    "market outperform": ("market outperform", "market perform", "market underperform"),
    "market underperform": ("market outperform", "market perform", "market underperform"),
    "sector outperform": ("sector outperform", "sector perform", "sector underperform"),
    "sector perform": ("sector outperform", "sector perform", "sector underperform"),
    "sector underperform": ("sector outperform", "sector perform", "sector underperform"),
    "peer perform": ("outperform", "peer perform", "underperform"),
    "in line": ("outperform", "in-line", "underperform"),
    "overweight": ("overweight", "equal-weight", "underweight"),
    "underweight": ("overweight", "equal-weight", "underweight"),
    "equal weight": ("overweight", "equal-weight", "underweight"),
    "positive": ("positive", "neutral", "negative"),
    "negative": ("positive", "neutral", "negative"),
    "market weight": ("overweight", "market weight", "underweight"),
    "sector weight": ("overweight", "sector weight", "underweight"),
    "perform": ("outperform", "perform", "underperform"),
    "买入": ("买入", "中性", "卖出"),
    "卖出": ("买入", "中性", "卖出"),
    "增持": ("增持", "中性", "减持"),
    "减持": ("增持", "中性", "减持"),
    "中性": ("增持", "中性", "减持"),
    "持有": ("买入", "持有", "卖出"),
    "看涨": ("看涨", "中性", "看跌"),
    "看跌": ("看涨", "中性", "看跌"),
    "看多": ("看多", "中性", "看空"),
    "看空": ("看多", "中性", "看空"),
}
# "shares should outperform the market": as a verb the neutral counterpart is the sell-side
# verb "market-perform" (still rating vocabulary, so the fake reads back).
_VERB_FAMILY = ("outperform", "market-perform", "underperform")
_MODAL = re.compile(r"\b(?:to|will|should|could|may|might|would|can|shall)\s*$", re.IGNORECASE)


def _family(mention: RatingMention, before: str) -> tuple[str, str, str]:
    if mention.phrase in ("outperform", "underperform") and _MODAL.search(before):
        return _VERB_FAMILY
    try:
        return FAMILIES[mention.phrase]
    except KeyError:  # a synonym added to schema without a family: fail loudly, not silently
        raise KeyError(f"no replacement family for rating phrase '{mention.phrase}'; "
                       "add it to finlib.finbias.perturb.ratings.FAMILIES") from None


def _match_case(word: str, like: str) -> str:
    """Write `word` in the letter case of `like` (BUY -> SELL, Market-Perform -> Market Underperform)."""
    letters = [c for c in like if c.isalpha()]
    if letters and all(c.isupper() for c in letters) and len(letters) > 1:
        return word.upper()
    if like[:1].isupper():
        parts = re.split(r"([\s-])", word)
        every = all(p[:1].isupper() for p in re.split(r"[\s-]+", like) if p)
        if every:
            return "".join(p[:1].upper() + p[1:] for p in parts)
        return word[:1].upper() + word[1:]
    return word


def _fix_article(prefix: str, replacement: str) -> str:
    """Adjust a trailing 'a'/'an' in `prefix` to the replacement's first sound ("a Buy" -> "an Add")."""
    m = re.search(r"(?<![\w])(a|an|A|An|AN)(\s+)$", prefix)
    if not m:
        return prefix
    art = m.group(1)
    new = "an" if replacement[:1] in _VOWELS else "a"
    if art == "AN" or (art == "A" and replacement.isupper() and len(replacement) > 1):
        new = new.upper()
    elif art[:1].isupper():
        new = new.capitalize()
    return prefix[:m.start(1)] + new + m.group(2)


# Direction verbs and their opposites, form for form (a verb that contradicts the move is swapped).
_UP_TO_DOWN: dict[str, str] = {
    "upgrade": "downgrade", "upgrades": "downgrades", "upgraded": "downgraded", "upgrading": "downgrading",
    "raise": "lower", "raises": "lowers", "raised": "lowered", "raising": "lowering",
    "lift": "lower", "lifts": "lowers", "lifted": "lowered", "lifting": "lowering",
    "boost": "cut", "boosts": "cuts", "boosted": "cut", "boosting": "cutting",
    "上调": "下调", "调高": "调低", "调升": "调降", "上调至": "下调至",
}
_DOWN_TO_UP: dict[str, str] = {
    "downgrade": "upgrade", "downgrades": "upgrades", "downgraded": "upgraded", "downgrading": "upgrading",
    "lower": "raise", "lowers": "raises", "lowered": "raised", "lowering": "raising",
    "cut": "raise", "cuts": "raises", "cutting": "raising",
    "trim": "raise", "trims": "raises", "trimmed": "raised", "trimming": "raising",
    "下调": "上调", "调低": "调高", "调降": "调升", "下调至": "上调至",
}
_VERB_RE = re.compile("|".join(
    [rf"(?<![\w-])(?i:{v})(?![\w-])" for v in sorted({**_UP_TO_DOWN, **_DOWN_TO_UP}, key=len, reverse=True)
     if not is_cjk(v)] + [v for v in sorted({**_UP_TO_DOWN, **_DOWN_TO_UP}, key=len, reverse=True) if is_cjk(v)]))
_PRESENT_SUBJECTS = frozenset({"we", "i", "they", "to", "will", "would", "should", "may", "might", "could",
                               "and", "also", "now", "not"})


def _opposite(verb: str, before: str) -> str:
    """The verb's opposite in the same form; "cut" is present or past ("We cut Acme to Hold" / "Acme (ACME)
    cut to Sell"): after a subject pronoun, modal or "to", or opening the sentence, it is present."""
    if verb == "cut":
        words = _WORD.findall(before)
        return "raise" if not words or words[-1].lower() in _PRESENT_SUBJECTS else "raised"
    return {**_UP_TO_DOWN, **_DOWN_TO_UP}[verb]


_RANK = {Rating.BEARISH: 0, Rating.NEUTRAL: 1, Rating.BULLISH: 2}
REWRITE_KINDS = ("plain", "transition", "transition_previous", "transition_verb", "transition_previous_verb")


# Words a direction verb has as its object when it does not move the rating ("cut our estimates", "raise
# our target to $60", "lower margins"): between such a verb and the rating, they mean it is not the move.
# Lowercase only: "Target (TGT)", "Price Co." and the ticker "(COST)" are names, not the verb's object.
_OBJECT_WORDS = ("target|estimate|forecast|price|margin|guidance|eps|cost|number|outlook|view|dividend|capex|"
                 "payout|stake|exposure|weighting")
_OBJECT = re.compile(rf"(?:{_OBJECT_WORDS}|EPS)|[;$%\d]|预测|目标价|盈利")
_GAP_WORDS = 30  # at most this many words between the move verb and the first rating mention (long company names)
# An upgrade/downgrade word after the first rating mention moves the rating only when "to"/"from" follows it
# ("Buy (upgraded from Hold)"); "a multi-year upgrade cycle", "since our upgrade in March" are nouns.
_MOVE_PREPOSITION = re.compile(r"\s+(?:to|from)\b", re.IGNORECASE)


def rating_move_verbs(sentence: str, mentions: list[RatingMention]) -> list[re.Match]:
    """The direction verbs that move the rating ("We downgrade Acme to Hold", "cut to Sell from Hold",
    "由持有上调至买入"), and no other direction word ("lower margins", "raise our target", "cost cuts"):

    - a verb right before a current mention (only spaces, or 至/为, between): "Lowering to Sell";
    - the last direction verb before the first mention, when the words between (at most eight) hold no
      object of its own (target, estimates, margins, costs, a number, ';') and no other rating cue:
      "We upgrade Acme Corp. (ACME) to Buy", "Acme is downgraded from Buy to Hold";
    - an upgrade/downgrade verb followed by "to"/"from", unless an object of its own follows ("upgraded from
      Hold"; not "upgrade our estimates", "a multi-year upgrade cycle", "since our upgrade in March").
    """
    rated = [m for m in mentions if m.role in ("current", "previous")]
    if not rated:
        return []
    spans = [(m.start, m.end) for m in mentions]
    found = [v for v in _VERB_RE.finditer(sentence) if not any(a < v.end() and v.start() < b for a, b in spans)]
    first = min(m.start for m in rated)
    out = []
    before_first = [v for v in found if v.end() <= first]
    governing = before_first[-1] if before_first else None
    for v in found:
        gap_next = sentence[v.end():]
        if any(m.role == "current" and re.fullmatch(r"\s*(?:至|为|為)?\s*", sentence[v.end():m.start]) for m in rated
               if m.start >= v.end()):
            out.append(v)
        elif v is governing:
            gap = sentence[v.end():first]
            words = _WORD.findall(gap)
            if len(words) <= _GAP_WORDS and not _OBJECT.search(gap) and not any(_CUE.match(w.lower()) and w.lower() not in ("rating", "ratings")
                                                                         for w in words):
                out.append(v)
        elif v.group(0).lower().rstrip("sd").startswith(("upgrad", "downgrad")) and \
                _MOVE_PREPOSITION.match(gap_next) and not _OBJECT.search(" ".join(_WORD.findall(gap_next)[:3])):
            out.append(v)
    return out


def _replace_spans(sentence: str, edits: list[tuple[int, int, str]]) -> str:
    """`sentence` with each (start, end) replaced; a/an before a replaced rating word fixed."""
    out, pos = [], 0
    for a, b, word in sorted(edits):
        out.append(_fix_article(sentence[pos:a], word))
        out.append(word)
        pos = b
    out.append(sentence[pos:])
    return "".join(out)


def rewrite_rating(sentence: str, new_rating: Rating | str, scales: ps.Scales | None = None) -> tuple[str, str]:
    """The rating sentence rewritten to state `new_rating`, and the kind of rewrite (`REWRITE_KINDS`).

    Current mentions take the same family's word for the new rating; a transition stays coherent
    (the module docstring states the rule): the new rating never equals the previous one shown,
    and a direction verb agrees with the move. Raises ValueError when the sentence states no
    unambiguous rating, or already states `new_rating` (a fake must differ from the analyst's).
    """
    return rewrite_mentions(sentence, find_rating_mentions(sentence, scales), new_rating, scales)


def rewrite_mentions(sentence: str, mentions: list[RatingMention], new_rating: Rating | str,
                     scales: ps.Scales | None = None) -> tuple[str, str]:
    """`rewrite_rating` on mentions already found (a rating field adds its star glyphs to them)."""
    scales = scales or ps.DEFAULT_PROVIDER_SCALES
    new = Rating(new_rating)
    current = [m for m in mentions if m.role == "current"]
    found = {m.rating for m in current}
    if any(m.role == "unmapped" for m in mentions) or len(found) != 1:
        raise ValueError(f"sentence states no unambiguous rating: {sentence[:120]!r}")
    analyst = found.pop()
    if analyst is new:
        raise ValueError(f"the new rating must differ from the sentence's rating ({analyst.value})")
    edits = _mention_edits(sentence, mentions, current, new, scales)
    previous = [m for m in mentions if m.role == "previous"]
    changed_previous = False
    shown_previous = {m.rating for m in previous}
    if new in shown_previous:  # "to Hold from Hold": the previous becomes the analyst's rating
        edits += _mention_edits(sentence, mentions, previous, analyst, scales, like=current[0])
        shown_previous, changed_previous = {analyst}, True
    verbs = rating_move_verbs(sentence, mentions)
    if len(shown_previous) == 1:
        want = _RANK[new] - _RANK[next(iter(shown_previous))]
    else:  # no previous: a move to the top is up, to the bottom down, to the middle either
        want = {2: 1, 0: -1}.get(_RANK[new], 0)
    changed_verb = False
    for v in verbs:
        low = v.group(0).lower()
        if (want < 0 and low in _UP_TO_DOWN) or (want > 0 and low in _DOWN_TO_UP):
            edits.append((v.start(), v.end(), _match_case(_opposite(low, sentence[:v.start()]), v.group(0))))
            changed_verb = True
    kind = "plain" if not previous and not verbs else "transition" + ("_previous" if changed_previous else "") \
        + ("_verb" if changed_verb else "")
    return _replace_spans(sentence, edits), kind


_LABEL_GAP = re.compile(rf"[\s(:{_HYPHENS}]*")


def _mention_edits(sentence: str, mentions: list[RatingMention], chosen: list[RatingMention], target: Rating,
                   scales: ps.Scales, like: RatingMention | None = None) -> list[tuple[int, int, str]]:
    """Edits writing `target` into each of `chosen`: a word takes its family's word (the family of `like`
    when given: a previous rating written in the current rating's scale), a provider point the point that
    states `target` (`provider_scales.fake_point`), and a label printed right after a point ("#2 (Buy)",
    "4-STARS (Buy)") the provider's label for the new point, so number and label agree."""
    idx = RATINGS.index(target)
    points: dict[int, tuple[RatingMention, str]] = {}  # end of a provider mention -> (mention, new point)
    edits = []
    for m in chosen:
        if m.scale is None:
            continue
        point = ps.fake_point(scales[m.scale], m.point or "", target)
        if point is None:
            raise ValueError(f"provider scale {m.scale} has no point for {target.value}")
        points[m.end] = (m, point)
        if m.number_span is not None and m.point is not None and m.point.isdigit():
            a, b = m.number_span
            edits.append((a, b, ps.write_point(sentence[a:b], m.point, point)))
        else:
            edits.append((m.start, m.end, _match_case(point, m.surface)))
    for m in chosen:
        if m.scale is not None:
            continue
        label = next((ps.LABELS[p.scale].get(int(pt)) for end, (p, pt) in points.items()
                      if p.scale in ps.LABELS and pt.isdigit() and end <= m.start
                      and _LABEL_GAP.fullmatch(sentence[end:m.start])), None)
        if label is None and like is not None and like.scale is None:
            label = _family(like, sentence[:like.start])[idx]
        word = label if label is not None else _family(m, sentence[:m.start])[idx]
        edits.append((m.start, m.end, _match_case(word, m.surface)))
    return edits


def rewrite_report_rating(text: str, new_rating: Rating | str) -> tuple[str, str]:
    """The report with its first-sentence rating rewritten (`rewrite_rating`), and the kind of rewrite;
    every byte outside the first sentence unchanged."""
    span = first_sentence_span(text)
    if span is None:
        raise ValueError("empty report: no first sentence")
    sentence, kind = rewrite_rating(text[span[0]:span[1]], new_rating)
    return text[:span[0]] + sentence + text[span[1]:], kind


def replace_rating(text: str, new: Rating) -> str:
    """The report with its first-sentence rating replaced by `new` (`rewrite_report_rating` without the kind).

    Raises ValueError when the first sentence states no (unambiguous) rating or already
    states `new`: a fake rating must differ from the analyst's.
    """
    return rewrite_report_rating(text, new)[0]
