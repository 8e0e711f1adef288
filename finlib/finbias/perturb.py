"""Stage 02: the four report conditions of Fin-Bias (Sections 3 and 5.1, Appendix A.3).

- original:    the cleaned report.
- no_rating:   the first sentence (where the analyst states the rating) removed; every other
               byte unchanged.
- fake_rating: the rating word(s) of the first sentence swapped for a different rating of the
               same vocabulary family (Buy -> Sell, Outperform -> Underperform, Bullish ->
               Bearish), articles fixed ("a Buy" -> "an Underperform"), the rest byte-for-byte.
- no_opinion:  the no_rating text minus every sentence that contains an MPQA strongsubj word
               (`finlib.finbias.subjectivity`; the lexicon's POS honoured by default, `perturb.mpqa_pos`).

Rating extraction policy (used by stage 00 too, so analyst_rating and the perturbations agree)
----------------------------------------------------------------------------------------------
Only the FIRST sentence is read. Vocabulary is `finlib.core.vocab.RATING_SYNONYMS` (one source of
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
Oracle with an Outperform", "Maintain Hold").

Mentions that do not assert the current rating are set aside:
- negated: "not", "no", "never", "nor" or an "n't" word within the 3 words before
  ("we are not bullish", "no longer a Buy");
- previous: after "from", "previously", "formerly", "prior", "was/were" (skipping a/an/our/
  its/the/rated/rating/of): in "upgraded from Hold to Buy" or "to Buy from Hold" the current
  rating is Buy.
- hyphen compounds: "buy-back", "sell-side", "market-neutral" (but "Buy-rated" counts).

The rating is the one rating all remaining mentions agree on; none, or two different ones
("Buy/Hold/Sell", "Buy on ORCL, Sell on SAP") -> None (counted as "no rating", never guessed).

Fake ratings
------------
Every *current* mention is replaced by the same family's word for the new rating (families in
`_FAMILIES`), letter case kept (BUY -> SELL, Market Perform -> Market Underperform) and a
preceding a/an fixed. Previous and negated mentions are left alone, so "upgrade from Hold to
Buy" with fake Sell becomes "upgrade from Hold to Sell" (the verb is not rewritten: a known
oddity, like the paper's arbitrary fakes). "outperform" used as a verb ("shares should
outperform") gets the sell-side verb "market-perform" for neutral. The fake is drawn per report
from a generator seeded by (run seed, CRC32 of report_id); `perturb.fake_rating: both` makes
one row per alternative (item_id `<report_id>:fake_rating:<rating>`).

Reports whose first sentence states no rating
---------------------------------------------
They are counted (perturb_report.json) and get a *skipped* row for every condition with the
reason, including original: herding is measured against the analyst rating, and keeping them
out of all conditions keeps every comparison on the same set of reports.
"""
from __future__ import annotations

import html
import re
import zlib
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from pathlib import Path

import numpy as np
import pandas as pd

from finlib.finbias import subjectivity
from finlib.core.artifacts import read_frame, require_columns, write_frame, write_json
from finlib.core.config import RunConfig
from finlib.finbias.lexicon import (
    POS_POLICIES,
    TOKEN,
    Lexicon,
    LexiconUnavailable,
    load_lexicon,
    missing_message,
)
from finlib.finbias.postag import PosTagger
from finlib.core.vocab import (
    AMBIGUOUS_RATING_TERMS,
    CONDITIONS,
    HYPHENS,
    RATINGS,
    SWEEP_CONDITIONS,
    Condition,
    Rating,
    normalise_term,
    rating_vocabulary,
    term_pattern,
)
from finlib.finbias.sentences import (
    first_sentence_span,
    iter_sentence_spans,
    sentence_spans,
    split_sentences,
)
from finlib.finbias.subjectivity import (  # noqa: F401
    SubjectivityFilter,
    SubjectivityStats,
    remove_subjective_sentences,
)
from finlib.core.tables import synthetic_title

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
    r"initiat\w*|upgrad\w*|downgrad\w*|assign\w*|resum\w*|keep|keeps|kept|keeping)$"
)
_SLOT_PREDECESSORS = frozenset({"to", "at", "from", "as", "a", "an", "is", "of", "with", "on"})
_STANCE_VERBS = frozenset({"is", "are", "remain", "remains", "stay", "stays", "be", "turn", "turns",
                           "turned", "become", "becomes", "we're", "we\u2019re"})
_NEGATORS = frozenset({"not", "no", "never", "nor", "cannot"})
_PREVIOUS = frozenset({"from", "previously", "formerly", "prior", "was", "were", "earlier"})
_SKIPPABLE = frozenset({"a", "an", "our", "its", "the", "their", "rated", "rating", "of"})
_WORD = re.compile(r"[A-Za-z0-9'\u2019]+")
_AFTER_NOUN = re.compile(rf"\s*\)?\s*(?:[{_HYPHENS}]\s*)?(?:rating|recommendation|opinion|call|rated)\b",
                         re.IGNORECASE)
_OPEN_SLOT = re.compile(r"[:=(]\s*$")
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
    rating: Rating
    role: str         # current | previous | negated | not_a_rating


def _capitals_are_evidence(sentence: str) -> bool:
    """False for Title-Case / ALL-CAPS headlines, where a capital 'Buy' says nothing.

    A headline is a sentence of >= 3 words longer than three letters, all capitalised.
    """
    words = [w for w in re.findall(r"[A-Za-z]+", sentence) if len(w) > 3]
    return len(words) < 3 or any(w[0].islower() for w in words)


def _is_rating_use(phrase: str, surface: str, tokens: list[str], before: str, after: str,
                   capitals: bool) -> bool:
    """Is this vocabulary match used as a rating (tiers A/B/C, see the module docstring)?"""
    if phrase not in AMBIGUOUS_RATING_TERMS:  # tier A
        return True
    if _AFTER_NOUN.match(after) or _OPEN_SLOT.search(before):
        return True
    pred = tokens[-1] if tokens else ""
    if any(_CUE.match(t) for t in tokens[-8:]) and (pred in _SLOT_PREDECESSORS or _CUE.match(pred)):
        return True
    if phrase in TIER_B:
        stance = tokens[-2] if pred in ("a", "an") and len(tokens) > 1 else pred
        return stance in _STANCE_VERBS or (capitals and surface[:1].isupper())
    return False


def _role(phrase: str, surface: str, before: str, after: str, capitals: bool) -> str:
    tokens = [t.lower() for t in _WORD.findall(before)]
    if not _is_rating_use(phrase, surface, tokens, before, after, capitals):
        return "not_a_rating"
    if any(t in _NEGATORS or t.endswith(("n't", "n\u2019t")) for t in tokens[-3:]):
        return "negated"
    rest = list(tokens)
    while rest and rest[-1] in _SKIPPABLE:
        rest.pop()
    if rest and rest[-1] in _PREVIOUS:
        return "previous"
    return "current"


def find_rating_mentions(sentence: str) -> list[RatingMention]:
    """Every vocabulary match in `sentence`, each classified (see the module docstring)."""
    vocab = rating_vocabulary()
    capitals = _capitals_are_evidence(sentence)
    out = []
    for m in _mention_regex().finditer(sentence):
        phrase = normalise_term(m.group(0))
        role = _role(phrase, m.group(0), sentence[:m.start()], sentence[m.end():], capitals)
        out.append(RatingMention(m.start(), m.end(), m.group(0), phrase, vocab[phrase], role))
    return out


def rating_of_sentence(sentence: str) -> Rating | None:
    """The one rating the current mentions agree on; None when there is none or a conflict."""
    found = {m.rating for m in find_rating_mentions(sentence) if m.role == "current"}
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


def remove_rating_sentence(text: str) -> str:
    """The report without its first sentence: the text from the second sentence on, unchanged.

    The whitespace between the first and second sentence goes with the first sentence.
    """
    spans = list(islice(iter_sentence_spans(text), 2))
    if not spans:
        raise ValueError("empty report: there is no first sentence to remove")
    return text[spans[1][0]:] if len(spans) > 1 else ""


# ---- fake ratings -------------------------------------------------------------------------

# Vocabulary families: a phrase is replaced by the same family's word for the new rating,
# so "Outperform" becomes "Underperform", not "Sell". (bullish, neutral, bearish) per family.
_FAMILIES: dict[str, tuple[str, str, str]] = {
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
}
# "shares should outperform the market": as a verb the neutral counterpart is the sell-side
# verb "market-perform" (still rating vocabulary, so the fake reads back).
_VERB_FAMILY = ("outperform", "market-perform", "underperform")
_MODAL = re.compile(r"\b(?:to|will|should|could|may|might|would|can|shall)\s*$", re.IGNORECASE)


def _family(mention: RatingMention, before: str) -> tuple[str, str, str]:
    if mention.phrase in ("outperform", "underperform") and _MODAL.search(before):
        return _VERB_FAMILY
    try:
        return _FAMILIES[mention.phrase]
    except KeyError:  # a synonym added to schema without a family: fail loudly, not silently
        raise KeyError(f"no replacement family for rating phrase '{mention.phrase}'; "
                       "add it to finlib.finbias.perturb._FAMILIES") from None


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


def replace_rating_in_sentence(sentence: str, new: Rating) -> str:
    """Replace every current rating mention in `sentence` by `new` in the same vocabulary family."""
    mentions = [m for m in find_rating_mentions(sentence) if m.role == "current"]
    if not mentions:
        raise ValueError(f"no rating to replace in sentence: {sentence[:120]!r}")
    idx = RATINGS.index(Rating(new))
    out, pos = [], 0
    for m in mentions:
        prefix = sentence[pos:m.start]
        word = _match_case(_family(m, sentence[:m.start])[idx], m.surface)
        out.append(_fix_article(prefix, word))
        out.append(word)
        pos = m.end
    out.append(sentence[pos:])
    return "".join(out)


def replace_rating(text: str, new: Rating) -> str:
    """The report with its first-sentence rating replaced by `new`; all other bytes unchanged.

    Raises ValueError when the first sentence states no (unambiguous) rating or already
    states `new`: a fake rating must differ from the analyst's.
    """
    span = first_sentence_span(text)
    if span is None:
        raise ValueError("empty report: no first sentence")
    sentence = text[span[0]:span[1]]
    current = rating_of_sentence(sentence)
    if current is None:
        raise ValueError(f"first sentence states no unambiguous rating: {sentence[:120]!r}")
    if current is Rating(new):
        raise ValueError(f"the fake rating must differ from the analyst rating ({current.value})")
    return text[:span[0]] + replace_rating_in_sentence(sentence, new) + text[span[1]:]


# ---- the stage: conditions artifact -----------------------------------------------------------

CONDITION_COLUMNS = ("item_id", "report_id", "condition", "text", "analyst_rating", "fake_rating",
                     "reference_rating", "status", "skip_reason")
SKIP_NO_RATING = ("first sentence states no analyst rating: report left out of every condition, "
                  "so that all conditions compare the same reports")
SKIP_EMPTY_NO_RATING = "report has no sentence besides the rating sentence"
SKIP_ALL_SUBJECTIVE = "every sentence after the rating sentence contains an MPQA strongsubj word"
FAKE_MODES = ("one", "both")
# The keys of params `perturb:`; anything else (a typo) is an error, not a silent default.
PERTURB_KEYS: tuple[str, ...] = ("lexicon_path", "lexicon_url", "fake_rating", "top_triggers", "example_report",
                                  "mpqa_pos", "tagger_model", "tagger_processes", "tag_cache", "sweep_reports")
TAG_CHUNK = 256  # reports per tagging stream (spaCy batches sentences across the reports of a chunk)


def fake_ratings_for(report_id: str, rating: Rating, seed: int, mode: str) -> list[Rating]:
    """The fake rating(s) for one report: a seeded draw of one of the two others, or both.

    The generator is seeded by (run seed, CRC32 of the report id), so a report's fake does
    not depend on which other reports are in the run or on their order. ``mode`` ("one" or
    "both", FAKE_MODES) is validated once, by ``perturb_params``.
    """
    others = [r for r in RATINGS if r is not Rating(rating)]
    if mode == "both":
        return others
    rng = np.random.default_rng([int(seed), zlib.crc32(str(report_id).encode("utf-8"))])
    return [others[int(rng.integers(len(others)))]]


def _row(report_id: str, condition: Condition, text: str | None, analyst: Rating | None,
         fake: Rating | None = None, skip: str | None = None, item_suffix: str = "") -> dict:
    # fake_rating and the sweep: the reference is the rating shown (the `fake` argument)
    reference = fake if condition is Condition.FAKE_RATING or condition in SWEEP_CONDITIONS.values() else analyst
    return {
        "item_id": f"{report_id}:{condition.value}{item_suffix}", "report_id": report_id,
        "condition": condition.value, "text": None if skip else text,
        "analyst_rating": None if analyst is None else analyst.value,
        "fake_rating": None if fake is None else fake.value,
        "reference_rating": None if reference is None else reference.value,
        "status": "skipped" if skip else "ok", "skip_reason": skip,
    }


def report_conditions(report_id: str, text: str, seed: int, mode: str) -> tuple[list[dict], Rating | None, str]:
    """The original / no_rating / fake_rating rows of one report (ok or skipped with a reason), its
    analyst rating and its no_rating text; no_opinion comes from ``no_opinion_row``."""
    rating = extract_analyst_rating(text)
    if rating is None:
        return [_row(report_id, c, None, None, skip=SKIP_NO_RATING) for c in CONDITIONS], None, ""
    rows = [_row(report_id, Condition.ORIGINAL, text, rating)]
    rest = remove_rating_sentence(text)
    rows.append(_row(report_id, Condition.NO_RATING, rest, rating, skip=None if rest.strip() else SKIP_EMPTY_NO_RATING))
    for fake in fake_ratings_for(report_id, rating, seed, mode):
        suffix = f":{fake.value}" if mode == "both" else ""
        rows.append(_row(report_id, Condition.FAKE_RATING, replace_rating(text, fake), rating, fake, item_suffix=suffix))
    return rows, rating, rest


def sweep_rows(report_id: str, text: str, rating: Rating) -> list[dict]:
    """The rating sweep of one report (finlib.finbias.rating_sweep): the report shown with each of
    the three ratings, rewritten like fake_rating (the analyst's own phrasing: `replace_rating` =
    `finlib.finbias.ratings.rewrite_report_rating`, so a sweep row equals its fake_rating twin);
    the sweep of the analyst's own rating is the original text. `fake_rating` holds the shown rating."""
    return [_row(report_id, cond, text if shown is rating else replace_rating(text, shown), rating, shown)
            for shown, cond in SWEEP_CONDITIONS.items()]


def sweep_report_ids(reports: pd.DataFrame, n: int | None) -> set[str]:
    """The reports that get the sweep: the first `n` report ids (sorted) whose first sentence states
    a rating (None = all, 0 = none: the paper's run), independent of the order of the corpus."""
    if n == 0:
        return set()
    rated = sorted(str(r) for r, t in zip(reports["report_id"], reports["text"])
                   if isinstance(t, str) and extract_analyst_rating(t) is not None)
    return set(rated if n is None else rated[:n])


def no_opinion_row(report_id: str, rating: Rating, rest: str, filtered: str | None, lexicon_reason: str | None) -> dict:
    """The no_opinion row: `filtered` is the strongsubj filter's output (None: no lexicon)."""
    if not rest.strip():
        return _row(report_id, Condition.NO_OPINION, None, rating, skip=SKIP_EMPTY_NO_RATING)
    if filtered is None:
        return _row(report_id, Condition.NO_OPINION, None, rating, skip=lexicon_reason or "no lexicon")
    return _row(report_id, Condition.NO_OPINION, filtered, rating, skip=None if filtered.strip() else SKIP_ALL_SUBJECTIVE)


@dataclass
class StageResult:
    """Everything stage 02 produces, in memory, before it is written."""

    conditions: pd.DataFrame
    lexicon_stats: pd.DataFrame    # one row per report and policy (column `policy`)
    triggers: pd.DataFrame         # one row per trigger word, both policies' counts side by side
    report: dict
    subjectivity: SubjectivityFilter | None = None

    @property
    def lexicon(self) -> Lexicon | None:
        return None if self.subjectivity is None else self.subjectivity.lexicon


def build_conditions(reports: pd.DataFrame, seed: int, mode: str = "one", lexicon: Lexicon | None = None,
                     lexicon_reason: str | None = None, source: str = "reports.parquet", policy: str = "respect",
                     tagger: PosTagger | None = None, chunk: int = TAG_CHUNK,
                     sweep_ids: set[str] | None = None) -> StageResult:
    """The conditions artifact for a reports frame (columns report_id, text[, analyst_rating]).

    When the frame carries stage 00's `analyst_rating`, it must equal what the extractor reads
    now (same function): a difference means stale artifacts, and is an error naming the report.
    ``policy``: MPQA POS policy (`respect` tags with ``tagger``, an uncached one when None);
    reports are filtered in chunks of ``chunk`` so the tagger sees long streams.
    ``sweep_ids``: reports that also get the rating sweep rows (``sweep_report_ids``; none by default).
    """
    require_columns(reports, ("report_id", "text"), source)
    if policy not in POS_POLICIES:
        raise ValueError(f"perturb.mpqa_pos must be one of {POS_POLICIES}, got {policy!r}")
    filt = None
    if lexicon is not None:
        filt = SubjectivityFilter(lexicon, policy, (tagger or PosTagger()) if policy == "respect" else None)
    tally = subjectivity.TriggerTally(subjectivity.policies_reported(policy) if filt is not None else (policy,))
    rows: list[dict] = []
    has_stage00 = "analyst_rating" in reports.columns
    recs = list(reports.itertuples(index=False))
    for start in range(0, len(recs), chunk):
        pending = []
        for i, rec in enumerate(recs[start:start + chunk], start=start):
            rid, text = str(rec.report_id), rec.text
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{source}: row {i} (report_id {rid!r}), field 'text': empty or missing")
            r_rows, rating, rest = report_conditions(rid, text, seed, mode)
            if has_stage00:
                given = rec.analyst_rating if isinstance(rec.analyst_rating, str) else None
                if given != r_rows[0]["analyst_rating"]:
                    raise ValueError(f"{source}: row {i} (report_id {rid!r}), field 'analyst_rating': stage 00 "
                                     f"says {given!r} but the first sentence reads "
                                     f"{r_rows[0]['analyst_rating']!r}; rerun stage 00")
            rows.extend(r_rows)
            if rating is not None and rid in (sweep_ids or ()):
                rows.extend(sweep_rows(rid, text, rating))
            pending.append((rid, rating, rest))
        todo = [rest for _, rating, rest in pending if rating is not None and rest.strip()]
        results = iter(filt.run(todo) if filt is not None and todo else [])
        for rid, rating, rest in pending:
            res = next(results) if filt is not None and rating is not None and rest.strip() else None
            if rating is not None:
                rows.append(no_opinion_row(rid, rating, rest, None if res is None else res[0], lexicon_reason))
            reason = rows[-1]["skip_reason"] if rating is not None else SKIP_NO_RATING
            tally.add(rid, None if res is None else res[1:], reason)
    conditions = pd.DataFrame(rows, columns=list(CONDITION_COLUMNS)).astype("str")  # None stays missing
    report = stage_report(conditions, lexicon, lexicon_reason, mode, len(reports))
    report["mpqa"] = tally.summary(policy, filt.tagger if filt is not None else None)
    return StageResult(conditions, tally.stats_frame(), tally.triggers_frame(lexicon), report, filt)


def stage_report(conditions: pd.DataFrame, lexicon: Lexicon | None, lexicon_reason: str | None,
                 mode: str, n_reports: int) -> dict:
    """Counts and exclusions by reason, for perturb_report.json."""
    orig = conditions[conditions["condition"] == Condition.ORIGINAL.value]
    skipped = conditions[conditions["status"] == "skipped"]
    out = {
        "n_reports": int(n_reports),
        "n_reports_without_rating": int((orig["skip_reason"] == SKIP_NO_RATING).sum()),
        "fake_rating_mode": mode,
        "n_rows": int(len(conditions)),
        "n_ok_by_condition": {k: int(v) for k, v in
                              conditions[conditions["status"] == "ok"].groupby("condition").size().items()},
        "skipped_by_condition_and_reason": {f"{c} | {r}": int(n) for (c, r), n in
                                            skipped.groupby(["condition", "skip_reason"]).size().items()},
        "lexicon": None if lexicon is None else {
            "source": lexicon.source, "entries": len(lexicon.entries),
            "strongsubj_entries": sum(e.type == "strongsubj" for e in lexicon.entries),
            "strongsubj_words": len(lexicon.strong_words),
            "tolerated_tokens_without_equals": [f"line {n}: {t!r}" for n, t in lexicon.report.tokens_without_equals],
            "tolerated_unknown_keys": dict(lexicon.report.unknown_keys),
            "odd_stemmed_values_read_as_n": [f"line {n}: {v!r}" for n, v in lexicon.report.odd_stemmed],
            "lines_not_utf8_decoded_as_latin1": [f"line {n}: {v!r}" for n, v in lexicon.report.latin1_lines],
        },
        "lexicon_unavailable": lexicon_reason,
    }
    return out


def perturb_params(cfg: RunConfig) -> dict:
    """The `perturb:` section, unknown keys refused (e.g. `fake_ratings:` would otherwise mean `one`),
    the fake-rating mode and the MPQA POS policy checked: the one place they are validated."""
    params = cfg.section("perturb", known=PERTURB_KEYS)
    mode = params.get("fake_rating")
    if mode not in FAKE_MODES:
        raise ValueError(f"{cfg.params_file}: perturb.fake_rating must be one of {FAKE_MODES}, got {mode!r}")
    n = params.get("sweep_reports", 0)
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        raise ValueError(f"{cfg.params_file}: perturb.sweep_reports must be null (all reports) or an integer >= 0 "
                         f"(0 = no rating sweep, the paper's run), got {n!r}")
    if params.get("mpqa_pos") not in POS_POLICIES:
        raise ValueError(f"{cfg.params_file}: perturb.mpqa_pos must be one of {POS_POLICIES}, "
                         f"got {params.get('mpqa_pos')!r}")
    return params


def resolve_lexicon(cfg: RunConfig, params: dict) -> tuple[Lexicon | None, str | None]:
    """The lexicon at `perturb.lexicon_path`, or (None, reason) for a synthetic run without it.

    Nothing slow is tried here (no download): a real-data run without the lexicon raises the
    error that says where to get it; the synthetic default run marks no_opinion skipped.
    ``params``: ``perturb_params(cfg)``.
    """
    path = cfg.path(params["lexicon_path"])
    if path.is_file():
        lexicon = load_lexicon(path)
        lexicon.source = str(params["lexicon_path"])  # repo-relative: no machine paths in reports
        return lexicon, None
    message = missing_message(path, params.get("lexicon_url"))
    if cfg.is_synthetic:
        return None, message
    raise LexiconUnavailable(message)


def run_stage(cfg: RunConfig) -> StageResult:
    """Stage 02: read reports.parquet, write conditions / lexicon_stats / perturb_report."""
    params = perturb_params(cfg)
    lexicon, reason = resolve_lexicon(cfg, params)
    reports = read_frame(cfg, "reports")
    tagger = None
    if lexicon is not None and params["mpqa_pos"] == "respect":
        tagger = PosTagger(cfg.path(params["tag_cache"]), params["tagger_model"], int(params["tagger_processes"]))
    try:
        result = build_conditions(reports, cfg.seed, params["fake_rating"], lexicon, reason,
                                  source=str(cfg.processed_dir / "reports.parquet"), policy=params["mpqa_pos"],
                                  tagger=tagger, sweep_ids=sweep_report_ids(reports, params.get("sweep_reports", 0)))
    finally:
        if tagger is not None:
            tagger.close()
    write_frame(cfg, "conditions", result.conditions)
    write_frame(cfg, "lexicon_stats", result.lexicon_stats)
    write_json(cfg, "perturb_report", result.report)
    return result


# ---- validation, tables and the side-by-side example (notebook 02) ---------------------------

def validate_conditions(conditions: pd.DataFrame, subjectivity: SubjectivityFilter | None = None) -> pd.DataFrame:
    """Check the Appendix A.3 invariants on every ok report; one row per check with failures.

    - no_rating is the original from its second sentence on (only the first sentence differs);
    - fake_rating differs from the original, only in the first sentence, names a rating other
      than the analyst's, and the extractor reads the fake rating back;
    - no_opinion keeps only sentences of no_rating, none with a strongsubj word under the run's
      policy (with a lexicon: ``subjectivity`` is ``StageResult.subjectivity``; tags from its cache).
    """
    ok = conditions[conditions["status"] == "ok"]
    failures: dict[str, list[str]] = {k: [] for k in (
        "no_rating = original minus first sentence", "fake differs from original",
        "fake: only the first sentence differs", "fake rating != analyst rating",
        "extractor reads the fake rating back", "no_opinion: sentences of no_rating only",
        "no_opinion: no strongsubj word left", "sweep: extractor reads the shown rating back")}
    checked: Counter = Counter()
    for rid, group in ok.groupby("report_id", sort=False):
        by = {c: g for c, g in group.groupby("condition")}
        if Condition.ORIGINAL.value not in by:
            continue
        orig = by[Condition.ORIGINAL.value]["text"].iloc[0]
        o_spans = list(islice(iter_sentence_spans(orig), 2))
        after_first = orig[o_spans[0][1]:]
        if Condition.NO_RATING.value in by:
            checked["no_rating = original minus first sentence"] += 1
            if len(o_spans) < 2 or by[Condition.NO_RATING.value]["text"].iloc[0] != orig[o_spans[1][0]:]:
                failures["no_rating = original minus first sentence"].append(rid)
        for rec in by.get(Condition.FAKE_RATING.value, pd.DataFrame()).itertuples():
            fake = rec.text
            for k in ("fake differs from original", "fake: only the first sentence differs",
                      "fake rating != analyst rating", "extractor reads the fake rating back"):
                checked[k] += 1
            f_end = next(iter_sentence_spans(fake))[1]
            if fake == orig:
                failures["fake differs from original"].append(rid)
            if fake[f_end:] != after_first or not fake.startswith(orig[:o_spans[0][0]]):
                failures["fake: only the first sentence differs"].append(rid)
            if rec.fake_rating == rec.analyst_rating:
                failures["fake rating != analyst rating"].append(rid)
            read = extract_analyst_rating(fake)
            if read is None or read.value != rec.fake_rating:
                failures["extractor reads the fake rating back"].append(rid)
        for cond in SWEEP_CONDITIONS.values():  # the rating sweep: the shown rating is read back
            for rec in by.get(cond.value, pd.DataFrame()).itertuples():
                checked["sweep: extractor reads the shown rating back"] += 1
                read = extract_analyst_rating(rec.text)
                if read is None or read.value != rec.fake_rating or rec.text[next(iter_sentence_spans(rec.text))[1]:] \
                        != after_first:
                    failures["sweep: extractor reads the shown rating back"].append(rid)
        if Condition.NO_OPINION.value in by and Condition.NO_RATING.value in by:
            kept = split_sentences(by[Condition.NO_OPINION.value]["text"].iloc[0])
            pool = split_sentences(by[Condition.NO_RATING.value]["text"].iloc[0])
            checked["no_opinion: sentences of no_rating only"] += 1
            it = iter(pool)
            if not all(any(s == p for p in it) for s in kept):  # ordered subsequence
                failures["no_opinion: sentences of no_rating only"].append(rid)
            if subjectivity is not None:
                checked["no_opinion: no strongsubj word left"] += 1
                clean = set(subjectivity.clean_sentences(by[Condition.NO_RATING.value]["text"].iloc[0]))
                if not set(kept) <= clean:
                    failures["no_opinion: no strongsubj word left"].append(rid)
    return pd.DataFrame([{"check": k, "n_checked": checked[k], "n_failed": len(v),
                          "first_failures": ", ".join(v[:5])} for k, v in failures.items()])


def raise_on_failures(checks: pd.DataFrame) -> None:
    """Stop the stage when any validation check failed (the table says which reports)."""
    bad = checks[checks["n_failed"] > 0]
    if len(bad):
        lines = "; ".join(f"{r.check}: {r.n_failed} (e.g. {r.first_failures})" for r in bad.itertuples())
        raise AssertionError(f"stage 02 validation failed: {lines}")


def conditions_summary(conditions: pd.DataFrame) -> pd.DataFrame:
    """Per condition: items ok / skipped, mean words and characters of the ok texts."""
    rows = []
    for cond in (*CONDITIONS, *SWEEP_CONDITIONS.values()):
        g = conditions[conditions["condition"] == cond.value]
        if cond not in CONDITIONS and g.empty:  # the sweep is listed only when the run has it
            continue
        ok = g[g["status"] == "ok"]
        words = ok["text"].map(lambda t: len(TOKEN.findall(t))) if len(ok) else pd.Series(dtype=float)
        reasons = g.loc[g["status"] == "skipped", "skip_reason"].value_counts()
        rows.append({"condition": cond.value, "items_ok": len(ok), "items_skipped": int(len(g) - len(ok)),
                     "mean_words": float(words.mean()) if len(ok) else np.nan,
                     "mean_chars": float(ok["text"].str.len().mean()) if len(ok) else np.nan,
                     "skip_reasons": "; ".join(f"{r} ({n})" for r, n in reasons.items()) or ""})
    return pd.DataFrame(rows)


def _mark(text: str, spans: list[tuple[int, int, str]]) -> str:
    """HTML-escape `text`, wrapping each (start, end, tag) span in <tag>."""
    out, pos = [], 0
    for a, b, tag in sorted(spans):
        out += [html.escape(text[pos:a]), f"<{tag}>", html.escape(text[a:b]), f"</{tag}>"]
        pos = b
    out.append(html.escape(text[pos:]))
    return "".join(out).replace("\n", "<br>")


def example_html(conditions: pd.DataFrame, report_id: str, caption: str = "") -> str:
    """One report in all four conditions side by side, changed parts marked (paper Figs. 2-5).

    original: the rating words highlighted; no_rating: the removed first sentence struck
    through; fake_rating: the replaced words marked; no_opinion: the removed subjective
    sentences struck through.
    """
    g = conditions[(conditions["report_id"] == report_id) & (conditions["status"] == "ok")]
    text = {c: t for c, t in zip(g["condition"], g["text"])}
    orig = text[Condition.ORIGINAL.value]
    first = next(iter_sentence_spans(orig))
    rating_marks = [(first[0] + m.start, first[0] + m.end, "mark")
                    for m in find_rating_mentions(orig[first[0]:first[1]]) if m.role == "current"]
    cols = [("Original (Fig. 2)", _mark(orig, rating_marks))]
    if Condition.NO_RATING.value in text:
        cols.append(("Rating sentence removed (Fig. 3)", _mark(orig, [(first[0], first[1], "del")])))
    if Condition.FAKE_RATING.value in text:
        fake = text[Condition.FAKE_RATING.value]
        f_first = next(iter_sentence_spans(fake))
        marks = [(f_first[0] + m.start, f_first[0] + m.end, "ins")
                 for m in find_rating_mentions(fake[f_first[0]:f_first[1]]) if m.role == "current"]
        cols.append((f"Fake rating: {g.loc[g['condition'] == 'fake_rating', 'fake_rating'].iloc[0]} (Fig. 4)",
                     _mark(fake, marks)))
    if Condition.NO_OPINION.value in text and Condition.NO_RATING.value in text:
        rest = text[Condition.NO_RATING.value]
        kept = set(split_sentences(text[Condition.NO_OPINION.value]))
        gone = [(a, b, "del") for a, b in sentence_spans(rest) if rest[a:b] not in kept]
        cols.append(("Subjective sentences removed (Fig. 5)", _mark(rest, gone)))
    head = "".join(f"<th>{html.escape(t)}</th>" for t, _ in cols)
    body = "".join(f"<td>{c}</td>" for _, c in cols)
    style = ("table{border-collapse:collapse;font:12px sans-serif}td{vertical-align:top;width:25%;"
             "border:1px solid #ccc;padding:6px}del{color:#b00;background:#fee}ins{background:#cfc;"
             "text-decoration:none;font-weight:bold}mark{background:#ff8;font-weight:bold}")
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return (f"<!doctype html><meta charset='utf-8'><style>{style}</style>"
            f"<table>{cap}<tr>{head}</tr><tr>{body}</tr></table>")


def save_example(cfg: RunConfig, conditions: pd.DataFrame, report_id: str | None = None) -> Path:
    """Write the side-by-side example for one report to figures/<run>/example_conditions.html.

    Default report: the first one (sorted id) with all four conditions ok.
    """
    ok = conditions[conditions["status"] == "ok"]
    if report_id is None:
        full = ok.groupby("report_id")["condition"].nunique()
        candidates = sorted(full[full == full.max()].index) if len(full) else []
        if not candidates:
            raise ValueError("no report has an ok original condition to show")
        report_id = candidates[0]
    caption = synthetic_title(cfg, f"Report {report_id} in each condition")
    path = cfg.figures_dir / "example_conditions.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(example_html(conditions, report_id, caption), encoding="utf-8")
    return path


def example_note(cfg: RunConfig, path: Path) -> str:
    """Notebook 02's line under the example: where it was saved, and "(synthetic data)" when it is."""
    return synthetic_title(cfg, f"Saved to `{Path(path).relative_to(cfg.root)}`") + "."
