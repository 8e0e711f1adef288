"""Sentence splitting for analyst reports: NLTK Punkt, offline, tuned for financial prose.

Why not `nltk.sent_tokenize`: it needs the `punkt_tab` resource, which cannot be downloaded
offline, and an untrained `PunktSentenceTokenizer` splits at every abbreviation. Instead we
hand Punkt a fixed list of abbreviations common in analyst reports (Inc., Corp., U.S., vs.,
e.g., bn., approx., months ...) plus a short list of frequent sentence starters, so that
"... in the U.S. The company ..." still splits while "Oracle Corp. (ORCL)" does not.
No Punkt model is trained on the corpus (a fixed list is reproducible and needs no training corpus): a house
abbreviation of a real corpus goes into FINANCIAL_ABBREVIATIONS, or `extra_abbreviations`.
Decimals ("5.2%", "$1.2") and initials ("John A. Smith") are handled by Punkt itself.

Blank lines are hard boundaries: a heading or bullet without a final period must not
merge with the sentence after it (that would glue the rating sentence to the next one).

Sentences are returned as *spans* into the original text, so that removing or rewriting
one sentence leaves every other byte of the report untouched (the perturbation stage
relies on this).
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterator

from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

# Lowercase, without the final period (Punkt's convention). Internal periods stay ("u.s").
FINANCIAL_ABBREVIATIONS: frozenset[str] = frozenset(
    """
    inc corp co cos ltd plc llc lp llp bros assn assoc dept div intl natl mfg
    mr mrs ms dr prof sr jr st mt ft rev gen gov sen rep
    vs v etc e.g i.e cf al viz ca approx appr est incl excl avg max min
    no nos vol pp pg fig figs eq ex ref
    u.s u.k u.n e.u u.s.a n.a s.a a.g n.v
    jan feb mar apr jun jul aug sep sept oct nov dec
    mon tue tues wed thu thur thurs fri sat sun
    bn mn mln mil bil tr thou k m yr yrs qtr qtrs mo mos wk wks hr hrs
    fy fq ytd yoy y/y q/q qoq mom
    pct bps bp pts pt
    ave blvd rd
    dil ops adj fwd prev
    """.split()
)

# Capitalised words that, after an abbreviation, almost always open a new sentence
# ("... sales in the U.S. The company ..."). Lowercase, as Punkt compares them.
SENTENCE_STARTERS: frozenset[str] = frozenset(
    """
    the we our in this that these those it its however for as after while although though
    they he she there if when since given despite following during over with on at by from
    overall management shares revenue revenues sales earnings margins net gross operating
    free cash capital investors guidance valuation both all each looking
    """.split()
)

# Unit, month and "etc." abbreviations end a sentence whenever a capitalised word follows
# ("... $2.7 bn. Over the past 90 days ...", "... $204 mn. VSNV ended ..."), whatever that
# word is: Punkt alone splits there
# only before a known sentence starter, which made a split depend on the *next* sentence and
# hence change when that sentence is removed. Case-sensitive, so the initial in "John M. Smith"
# is not the unit "m.".
_UNIT_BREAK = re.compile(
    r"(?<![\w.])(?:bn|mn|mln|mil|bil|tr|k|m|yrs?|qtrs?|mos?|wks?|hrs?|pct|bps|bp|pts|pt|ytd|yoy|etc|"
    r"Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\.(\s+)(?=[A-Z])"
)

_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n")
_SINGLE_BREAK = re.compile(r"(?<!\n)[ \t]*\r?\n[ \t]*(?![\r\n])")


def join_lines(text: str) -> str:
    """Single line breaks as spaces, blank lines kept as paragraph breaks: the named normalisation
    `perturb.join_lines` (off by default: the authors send the report's lines as they are, lists and
    tables included)."""
    return _SINGLE_BREAK.sub(" ", text)


@lru_cache(maxsize=4)
def _tokenizer(extra_abbreviations: frozenset[str] = frozenset()) -> PunktSentenceTokenizer:
    params = PunktParameters()
    params.abbrev_types = set(FINANCIAL_ABBREVIATIONS | extra_abbreviations)
    params.sent_starters = set(SENTENCE_STARTERS)
    return PunktSentenceTokenizer(params)


def iter_sentence_spans(text: str, extra_abbreviations: frozenset[str] = frozenset()) -> Iterator[tuple[int, int]]:
    """Lazily yield (start, end) offsets of each sentence, whitespace excluded.

    Lazy because Punkt is the slow part of stage 02 (~7 us per word): reading the first
    sentence must not pay for splitting a 4,000-token report.
    """
    tok = _tokenizer(frozenset(extra_abbreviations))
    for start, end in _blocks(text):
        block = text[start:end]
        if block.strip():
            for a, b in tok.span_tokenize(block):
                piece = block[a:b]
                a += len(piece) - len(piece.lstrip())
                b -= len(piece) - len(piece.rstrip())
                for unit in _UNIT_BREAK.finditer(block, a, b):
                    yield start + a, start + unit.start(1)
                    a = unit.end(1)
                if b > a:
                    yield start + a, start + b


# Punkt works on one paragraph at a time; a "paragraph" longer than this is not prose (nltk's own
# regex guard raises TimeoutError on ~1 MB of ". "), so it is cut before the limit.
MAX_BLOCK_CHARS = 100_000


def _blocks(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each paragraph; one over MAX_BLOCK_CHARS is cut after its last sentence end
    (else its last space) before the limit."""
    start = 0
    for m in [*_PARAGRAPH_BREAK.finditer(text), None]:
        end = m.start() if m else len(text)
        while end - start > MAX_BLOCK_CHARS:
            limit = start + MAX_BLOCK_CHARS
            cut = max(text.rfind(f"{p} ", start, limit) for p in ".!?")  # after a sentence end, else a space
            cut = cut + 2 if cut > start else text.rfind(" ", start, limit) + 1
            cut = cut if cut > start else limit
            yield start, cut
            start = cut
        yield start, end
        if m:
            start = m.end()


def sentence_spans(text: str, extra_abbreviations: frozenset[str] = frozenset()) -> list[tuple[int, int]]:
    """(start, end) character offsets of each sentence in `text`, in order, whitespace excluded."""
    return list(iter_sentence_spans(text, extra_abbreviations))


def split_sentences(text: str, extra_abbreviations: frozenset[str] = frozenset()) -> list[str]:
    """The sentences of `text` (exact substrings, no normalisation)."""
    return [text[a:b] for a, b in sentence_spans(text, extra_abbreviations)]


def first_sentence_span(text: str) -> tuple[int, int] | None:
    """Span of the first sentence, or None for an empty / whitespace-only text."""
    return next(iter_sentence_spans(text), None)


def first_sentence(text: str) -> str | None:
    """The first sentence, where Fin-Bias reports state the analyst rating."""
    span = first_sentence_span(text)
    return None if span is None else text[span[0]:span[1]]
