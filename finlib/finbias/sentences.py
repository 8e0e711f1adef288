"""Sentence splitting for analyst reports: NLTK Punkt, offline, tuned for financial prose.

Why not `nltk.sent_tokenize`: it needs the `punkt_tab` resource, which cannot be downloaded
offline, and an untrained `PunktSentenceTokenizer` splits at every abbreviation. Instead we
hand Punkt a fixed list of abbreviations common in analyst reports (Inc., Corp., U.S., vs.,
e.g., bn., approx., months ...) plus a short list of frequent sentence starters, so that
"... in the U.S. The company ..." still splits while "Oracle Corp. (ORCL)" does not.
No Punkt model is trained on the corpus (a fixed list is reproducible and needs no training corpus): a house
abbreviation of a real corpus goes into FINANCIAL_ABBREVIATIONS, or `extra_abbreviations`.
Decimals ("5.2%", "$1.2") and initials ("John A. Smith") are handled by Punkt itself.

Line structure (`structural_breaks`): blank lines are hard boundaries, and so is a single line
break before
- a list item (a line opening with "-", "*", a bullet, "1.", "1)", "(a)", "a)"),
- a table row (a line with a tab, or with two runs of 2+ spaces between its cells) and the line after one,
- a heading (a line ending in ":" or written in capitals, e.g. "KEY POINTS") and the line after one,
- a capitalised line after a line without terminal punctuation (. ! ? or those before a closing quote or
  bracket), unless that line ends in a continuation: a comma, semicolon, hyphen or dash, "&", "/", an open
  bracket, or a joining word (and, or, of, the, to, with, for, on, by, from, in, at, a, an, our, its).
So "We maintain our BUY rating on Oracle (ORCL) with a $150 target\nKey points:\n- Revenue rose 4%" is three
sentences, while a sentence wrapped at "...on\nOracle" or "...target,\nraising..." stays one. Punkt then splits
the text between these boundaries; a line break anywhere else is ordinary whitespace to it, so prose wrapped
at a fixed width reads as it did. `structure=False` gives Punkt within blank-line paragraphs only (stage 02
counts the first sentences where the two differ).

Sentences are returned as *spans* into the original text, so that removing or rewriting
one sentence leaves every other byte of the report untouched (the perturbation stage
relies on this).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nltk.tokenize.punkt import PunktSentenceTokenizer

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
    # an ellipsis before a capital ends a sentence too ("... to Buy from Hold... Demand held up"): Punkt reads
    # "..." as a pause and would run the rating sentence into the body
    r"|(?:\.\.\.|\u2026)(\s+)(?=[A-Z])"
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
    """Punkt with the financial abbreviations and sentence starters. nltk is imported here, on the first
    split: importing it loads scipy and scikit-learn (~110 MB), which a stage that never splits (stage 03
    without a length cap) should not carry."""
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    params = PunktParameters()
    params.abbrev_types = set(FINANCIAL_ABBREVIATIONS | extra_abbreviations)
    params.sent_starters = set(SENTENCE_STARTERS)
    return PunktSentenceTokenizer(params)


# "(a)", "(iv)", "(3)" open a list item; "(JPM)", "(F)" at a line start are a wrapped ticker, not a marker.
_LIST_ITEM = re.compile(r"[ \t]*(?:[-*\u2022\u25aa\u25cf\u25e6\u2023\u2043\u00b7\u2013\u2014+>]|\d{1,2}[.)]|"
                        r"\((?:[a-z]|[ivx]{1,4}|\d{1,2})\)|[a-z][.)])[ \t]")
_SPACED_CELLS = re.compile(r"\S {2,}\S.*\S {2,}\S")
_TERMINAL = re.compile(r"[.!?\u3002\uff01\uff1f\u2026][\"'\u201d\u2019)\]]*\s*$")
_CONTINUATION = re.compile(r"(?:[,;\-\u2013\u2014&/(\[]|\b(?:and|or|of|the|to|with|for|on|by|from|in|at|a|an|our|its))\s*$",
                           re.IGNORECASE)
_HEADING_CAPS = re.compile(r"^[^a-z]*[A-Z]{2}[^a-z]*$")


def _is_table_row(line: str) -> bool:
    """Cells separated by a tab, or by two runs of 2+ spaces in a line that does not end a sentence."""
    line = line.strip()
    return "\t" in line or (bool(_SPACED_CELLS.search(line)) and not _TERMINAL.search(line))


def _is_heading(line: str) -> bool:
    """A line ending in ':' or written in capitals (short: a heading, not an all-caps paragraph)."""
    line = line.strip()
    return line.endswith((":", "\uff1a")) or (bool(_HEADING_CAPS.match(line)) and len(line.split()) <= 12
                                              and not _TERMINAL.search(line) and not _CONTINUATION.search(line))


def _is_title(line: str) -> bool:
    """A headline in Title Case ("Margins Bottoming; Demand Stabilizing"): >= 3 words longer than three
    letters, all capitalised, and no sentence end."""
    words = [w for w in re.findall(r"[A-Za-z]+", line) if len(w) > 3]
    return (len(words) >= 3 and all(w[0].isupper() for w in words) and not _TERMINAL.search(line)
            and not _CONTINUATION.search(line))


# A line wrapped at a fixed width: at least this share of the paragraph's longest line, which is at most
# MAX_WRAP_WIDTH characters (a paragraph on one long line is not wrapped) and at least MIN_WRAP_WIDTH, with
# >= 5 words; the next line's first word would not have fitted, and the run of such lines ends a sentence
# (or is as long up to the paragraph's end): `_WrapRuns`.
WRAP_SHARE = 0.85
MAX_WRAP_WIDTH = 120
MIN_WRAP_WIDTH = 40  # a block of a few short lines (a headline over a one-line sentence) is not wrapped prose


def _first_word_misses(line: str, nxt: str, width: int) -> bool:
    """Would the first word of `nxt` not have fitted on `line` at this width (why a wrap breaks there)?"""
    first_word = nxt.split()[0] if nxt.split() else ""
    return len(line.rstrip()) + 1 + len(first_word) > width


def _wrap_pair(prev: str, line: str, width: int) -> bool:
    """Was `prev` broken at the wrap width before `line`: a long prose line of >= 5 words, no sentence end,
    and the first word of `line` would not have fitted on it (why the line was broken there)?"""
    prev = prev.rstrip()
    if not prev or not MIN_WRAP_WIDTH <= width <= MAX_WRAP_WIDTH or len(prev) < WRAP_SHARE * width \
            or _TERMINAL.search(prev) or not _first_word_misses(prev, line, width):
        return False
    return len(re.findall(r"[A-Za-z][\w'\u2019-]*", prev)) >= 5


def _soft_wrap(prev: str, line: str, width: int, goes_on: bool | None) -> bool:
    """Is `prev` a prose line broken at the wrap width, so `line` continues its sentence (`_wrap_pair`)?
    `line` must also end a sentence, or be long and end the paragraph (`goes_on` None), or go on itself as
    wrapped prose (`goes_on`: the same question one line down, so a run of wrapped lines is prose only if it
    ends a sentence): in a run of unpunctuated one-sentence lines of about the same length ("upgrading X to
    overweight; target up to $57" over "U.S. sales rose 10.4% in the quarter" over "The shares trade at 17.6x
    forward earnings"), no line is the one before's continuation, since the run ends without a period."""
    if not _wrap_pair(prev, line, width):
        return False
    line = line.rstrip()
    if _TERMINAL.search(line):
        return True
    return len(line) >= WRAP_SHARE * width and goes_on is not False


class _WrapRuns:
    """Which lines of one block go on into the next as wrapped prose (`_soft_wrap`), reading lines only
    as far as a run of wrapped lines reaches: each line is read once and each verdict made once."""

    def __init__(self, lines: Iterator[tuple[int, str]], width: int):
        self._lines, self.width = lines, width
        self._read: list[tuple[int, str]] = []
        self._goes_on: dict[int, bool] = {}

    def line(self, i: int) -> tuple[int, str] | None:
        """Line i of the block ((start offset, text)), None past its end."""
        while len(self._read) <= i:
            here = next(self._lines, None)
            if here is None:
                return None
            self._read.append(here)
        return self._read[i]

    def _text(self, i: int) -> str | None:
        """Line i's text, None past the block's end or at a blank line (a paragraph's end)."""
        here = self.line(i)
        return here[1] if here is not None and here[1].strip() else None

    def goes_on(self, i: int) -> bool | None:
        """Does line i continue into line i + 1 as wrapped prose (None: line i ends the block)?"""
        if self._text(i) is None or self._text(i + 1) is None:
            return None
        run = [i]  # lines whose verdict waits on the next line's
        while True:
            j = run[-1]
            if j in self._goes_on:
                verdict = self._goes_on[j]
                break
            prev, line = self._text(j), self._text(j + 1)
            last = self._text(j + 2) is None
            if last or not _wrap_pair(prev, line, self.width) or _TERMINAL.search(line.rstrip()) \
                    or len(line.rstrip()) < WRAP_SHARE * self.width:  # the run ends at `line`
                verdict = _soft_wrap(prev, line, self.width, None if last else False)
                break
            run.append(j + 1)
        for j in run:
            self._goes_on[j] = verdict
        return verdict


_FIELD_LINE = re.compile(r"[ \t]*[A-Z][\w .&/-]{0,30}:[ \t]+\S")  # "Price target: $40", "Analyst: J. Doe"


def _is_short_heading(line: str) -> bool:
    """A heading of at most three words without a colon ("Summary", "Analyst note"): no sentence end, no
    continuation; the next line opens a sentence whatever its case."""
    line = line.strip()
    return len(line.split()) <= 3 and not _TERMINAL.search(line) and not _CONTINUATION.search(line)


def _break_between(prev: str, line: str, width: int = MAX_WRAP_WIDTH + 1, wrapped: bool = False) -> bool:
    """Does a single line break between `prev` and `line` end a sentence (module docstring)? ``width``: the
    paragraph's longest line, ``wrapped``: `prev` goes on into `line` as wrapped prose (`_WrapRuns`)."""
    if not line.strip() or not prev.strip():
        return False
    if _LIST_ITEM.match(line) or _is_table_row(line) or _is_table_row(prev):
        return True
    if _is_heading(line) or _is_heading(prev) or _is_short_heading(prev):
        return True
    if (_is_short_heading(line) and next((c for c in line if c.isalpha()), "").isupper()) or _FIELD_LINE.match(line):
        return True
    if wrapped:
        return False
    if _is_title(prev):
        return True
    first = next((c for c in line if c.isalpha()), "")
    return (first.isupper() and not _TERMINAL.search(prev) and not _CONTINUATION.search(prev)
            and not line.lstrip().startswith("("))  # "(Strong Buy)": a wrap


def _line_width(text: str, start: int, end: int, lines: int = 60) -> int:
    """The longest of the first `lines` lines of text[start:end] (the wrap width of wrapped prose)."""
    width, pos = 0, start
    for _ in range(lines):
        if pos >= end:
            break
        nl = text.find("\n", pos, end)
        stop = end if nl < 0 else nl
        width = max(width, len(text[pos:stop].rstrip()))
        pos = stop + 1
    return width


def _lines(text: str, start: int, end: int) -> Iterator[tuple[int, str]]:
    """(start offset, text) of each line of text[start:end], lazily."""
    line_start = start
    while line_start < end:
        nl = text.find("\n", line_start, end)
        line_end = end if nl < 0 else nl
        yield line_start, text[line_start:line_end]
        line_start = line_end + 1


def structural_breaks(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each run of lines in text[start:end] between structural boundaries (module
    docstring), lazily: a report's first run is found without reading the rest (lines are read ahead
    only as far as a run of wrapped prose lines reaches, `_WrapRuns`)."""
    runs = _WrapRuns(_lines(text, start, end), _line_width(text, start, end))
    seg_start, i = start, 1
    while (here := runs.line(i)) is not None:  # line i exists: so does line i - 1
        line_start, line = here
        if _break_between(runs.line(i - 1)[1], line, runs.width, bool(runs.goes_on(i - 1))):
            yield seg_start, line_start
            seg_start = line_start
        i += 1
    yield seg_start, end


def iter_sentence_spans(text: str, extra_abbreviations: frozenset[str] = frozenset(),
                        structure: bool = True) -> Iterator[tuple[int, int]]:
    """Lazily yield (start, end) offsets of each sentence, whitespace excluded.

    Lazy because Punkt is the slow part of stage 02 (~7 us per word): reading the first
    sentence must not pay for splitting a 4,000-token report. ``structure``: the line-structure
    boundaries (module docstring); False = Punkt within blank-line paragraphs only.
    """
    tok = _tokenizer(frozenset(extra_abbreviations))
    for p_start, p_end in _blocks(text):
        for start, end in (structural_breaks(text, p_start, p_end) if structure else [(p_start, p_end)]):
            yield from _punkt_spans(tok, text, start, end)


def _punkt_spans(tok: PunktSentenceTokenizer, text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """Punkt's sentences of text[start:end] (unit abbreviations before a capital also end one)."""
    block = text[start:end]
    if not block.strip():
        return
    for a, b in tok.span_tokenize(block):
        piece = block[a:b]
        a += len(piece) - len(piece.lstrip())
        b -= len(piece) - len(piece.rstrip())
        for unit in _UNIT_BREAK.finditer(block, a, b):
            gap = 1 if unit.group(1) is not None else 2
            yield start + a, start + unit.start(gap)
            a = unit.end(gap)
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


def first_sentence_span(text: str, structure: bool = True) -> tuple[int, int] | None:
    """Span of the first sentence, or None for an empty / whitespace-only text."""
    return next(iter_sentence_spans(text, structure=structure), None)


def first_sentence(text: str) -> str | None:
    """The first sentence, where Fin-Bias reports state the analyst rating."""
    span = first_sentence_span(text)
    return None if span is None else text[span[0]:span[1]]
