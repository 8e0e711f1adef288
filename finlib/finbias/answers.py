"""Model answers -> ratings: the one parser every stage uses (03 inference report, 04 metrics,
05 DPO triplets, 07 BizFinBench JSON answers).

Kept apart from `finlib.finbias.scoring.stage` (metrics, statistics, tables) so the stages form a one-way flow:
`finlib.finbias.inference.stage` and `finlib.finbias.scoring.stage` both import this module, never each other. Unparsed is
never turned into "neutral": a default answer would silently move herding and accuracy towards
whatever the default happens to be.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from finlib.finbias.vocab import (
    AMBIGUOUS_RATING_TERMS,
    RATING_SYNONYMS,
    RATINGS,
    Rating,
    normalise_term,
    rating_of,
    term_pattern,
)
from finlib.llm.replies import MAX_PARSE_CHARS, find_json_objects, strip_think

# Synonyms that are also everyday English (schema.AMBIGUOUS_RATING_TERMS: "buy back", "hold
# talks", "in line with") are trusted only inside an explicit rating slot (JSON `answer`,
# "Answer: …", "I would rate this a …") or as the whole reply, never when merely mentioned in
# prose. Local adjustment: "neutral" is ambiguous in a report ("neutral impact") but in a model's
# answer it is the label itself, so "I am neutral" counts here.
WEAK_TERMS: frozenset[str] = AMBIGUOUS_RATING_TERMS - {Rating.NEUTRAL.value}

_VOCAB = [t for terms in RATING_SYNONYMS.values() for t in terms]
# Whole words only, ASCII hyphen as joiner: a term glued to letters or a hyphen-word does not count
# ("sell-side", "buyback", "holdings"), while an en dash still separates ("Rating–Buy",
# "neutral–bullish" is a hedge).
_ALL_TERMS = term_pattern(_VOCAB).pattern
_STRONG_TERMS = term_pattern(t for t in _VOCAB if normalise_term(t) not in WEAK_TERMS).pattern
_TERM = r"(?P<term>" + _ALL_TERMS + r")"
_TERM_RE = re.compile(_TERM)
_NEG = r"(?:not|n't|no\s+longer|never|hardly|cannot\s+be|can't\s+be)"
_NEG_BEFORE = re.compile(_NEG + r"\s+(?:(?:be|a|an|really|very|too|so|overly|particularly|yet)\s+){0,2}$"
                         r"|(?:不|非|没有|沒有|未|无|無|并不|並不)\s*(?:是|太|再)?\s*$")  # 不看涨: "not bullish"

# Only explicit answer slots count (the model's own answer, not a mood described in prose):
# priority 0: "Answer: X", "final answer - X", "the answer is X";
# priority 1: a labelled slot ("Rating: X", "Recommendation - Hold"), a first-person slot
# ("my rating is X", "our final recommendation would be X", "the verdict would be X"),
# a first-person verb ("I would rate this a Buy", "I'd give it a sell rating", "I recommend a
# hold") or stance ("I am bullish"). "The market was bearish", "Analysts are bullish" and
# "the consensus rating is bullish" are prose about others and never an answer.
# Priority 0 beats 1: a model that quotes "my rating is Buy" and then says "Final answer:
# Neutral" answered neutral.
_SLOT_SEP = r"(?:\s*(?:[:=>\-–—]|\bis\b|\bwould\s+be\b|\bwill\s+be\b|\bshould\s+be\b|\bremains\b|\bof\b))+\s*"
_LABEL_SEP = r"\s*[:=>\-–—]+\s*"
_ARTICLE = r"(?:(?:a|an)\s+)?"
_SLOT_NOUNS = (r"(?:rating|recommendation|verdict|decision|conclusion|classification|prediction|"
               r"stance|call|view|assessment)")
_OWN = r"(?:my|our|final|overall)\s+(?:(?:final|overall|investment|stock|own)\s+)?"
_FIRST_PERSON = (r"\b(?:i|we)(?:\s*'d|\s*'ll|\s+would|\s+will|\s+should|\s+must|\s+can|\s+could)?"
                 r"(?:\s+(?:therefore|thus|also|still|now|ultimately|strongly|would))?\s+")
_TERM_SLOT = r"[\"']?\s*" + _ARTICLE + r"(?P<neg>" + _NEG + r"\s+" + _ARTICLE + r")?" + _TERM
_CUES: tuple[tuple[int, re.Pattern], ...] = (
    (0, re.compile(r"\b(?:final\s+(?:answer|rating|recommendation|verdict|call)|answer)\b[\"']?"
                   + _SLOT_SEP + _TERM_SLOT)),
    (1, re.compile(r"\b" + _SLOT_NOUNS + r"\b[\"']?" + _LABEL_SEP + _TERM_SLOT)),
    (1, re.compile(r"(?:\b" + _OWN + _SLOT_NOUNS + r"|\bthe\s+(?:final\s+)?(?:verdict|conclusion))\b"
                   + _SLOT_SEP + _TERM_SLOT)),
    (1, re.compile(_FIRST_PERSON + r"(?:rate|classify|consider|label|recommend|assign|give|call)\b\s+"
                   r"(?:(?:this|it|the|stock|company|firm|shares|report|as|a|an|rating|of|with|overall)\s+){0,4}"
                   r"(?P<neg>" + _NEG + r"\s+" + _ARTICLE + r")?" + _TERM)),
    (1, re.compile(r"\b(?:i\s+am|i'm|we\s+are|we're|i\s+remain|we\s+remain|i\s+would\s+be|i'd\s+be)\s+"
                   r"(?P<neg>" + _NEG + r"\s+)?(?P<term>" + _STRONG_TERMS + r")")),
    # Chinese slots: "答案：看跌", "最终答案是中性", "投资评级：买入", "我的结论为看多", "我(们)看涨".
    (0, re.compile(r"(?:最终)?答案\s*(?:[:：]|是|为|為)\s*[\"'“「]?\s*(?P<neg>(?:不|非)\s*)?" + _TERM)),
    (1, re.compile(r"(?:评级|評級|建议|建議|结论|結論|判断|判斷|观点|觀點|预测|預測|立场|立場)\s*(?:[:：]|是|为|為)\s*"
                   r"[\"'“「]?\s*(?P<neg>(?:不|非)\s*)?" + _TERM)),
    (1, re.compile(r"我们?\s*(?:认为|認為|维持|給予|给予)?\s*(?P<neg>(?:不|并不|並不)\s*)?(?P<term>看涨|看多|看跌|看空)")),
)
# A heading on its own line ("### Answer\nBearish", "## Investment Rating\n**Neutral**") is a labelled
# slot when the next non-blank line holds the rating and nothing else; any other line after a heading
# ("## Recommendation\nBuy the dip? No. **Neutral**") is prose, not a slot.
_HEADING_SLOT = re.compile(
    r"(?im)^[ \t#*_>]*(?P<head>(?:(?:my|our|final|overall|investment|stock)\s+){0,2}"
    r"(?:answer|rating|recommendation|verdict|decision|conclusion|assessment|call|view|stance|classification"
    r"|prediction))[ \t*_:]*\n(?:[ \t]*\n)*(?P<line>[^\n]*)")
_HEADING_LINE_JUNK = re.compile(r"[*_`#>\"'“”「」\[\]()]+|^\s*(?:[-•+]|\d+[.)])\s+")
# "bullish or neutral", "neutral/bullish", "neutral to bullish", "bullish and bearish", 看涨或中性: a hedge.
_JOINERS = r"(?:or|/|to|and|\\|-|–|versus|vs\.?|或者?|和|与|與|到|至|、)"
_HEDGE_AFTER = re.compile(r"^\s*" + _JOINERS + r"\s*" + _ARTICLE + _TERM)
_LEANING = re.compile(r"^\s*偏")  # 中性偏多 "neutral leaning bullish": a hedge
_HEDGE_BEFORE = re.compile(_TERM + r"\s*" + _JOINERS + r"\s*" + _ARTICLE + r"$")
_STRONG_RE = re.compile(r"(?P<term>" + _STRONG_TERMS + r")")
_WHOLE_RE = re.compile(r"^\s*" + _ARTICLE + _TERM + r"(?:\s+rating|\s*评级)?\s*[.!。！]?\s*$")
# JSON keys models really use for their answer. "answer" (the authors' field) and "final_answer"
# come first; the others are read only when no object has one of those (a reply with both an
# `answer` and a `recommendation` is answered by `answer`). Keys naming someone else's view
# ("analyst_rating", "consensus") are deliberately absent.
ANSWER_KEYS: tuple[str, ...] = ("answer", "final_answer")
ALT_ANSWER_KEYS: tuple[str, ...] = (
    "rating", "investment_rating", "final_rating", "my_rating", "recommendation", "investment_recommendation",
    "final_recommendation", "decision", "investment_decision", "final_decision", "verdict", "prediction",
    "label", "classification", "stance", "sentiment", "outlook", "view")
_ANY_KEY = "|".join(sorted({*ANSWER_KEYS, *ALT_ANSWER_KEYS}, key=len, reverse=True))
_ANSWER_KEY_RE = re.compile(
    r"[\"'](?P<key>" + _ANY_KEY + r")[\"']\s*:\s*(?:\"(?P<dq>[^\"\n]{0,80})(?P<dqend>\")?"
    r"|'(?P<sq>[^'\n]{0,80})(?P<sqend>')?|(?P<bare>[A-Za-z][A-Za-z \-]{0,40}))",
    re.IGNORECASE)
_REASON_KEY_RE = re.compile(r"[\"']\s*(?:reason|reasoning|rationale|analysis)\s*[\"']\s*:", re.IGNORECASE)


def _normalise(text: str) -> str:
    """Lowercase and drop markdown emphasis and typographic quotes, so "**Buy**" reads as "buy"."""
    t = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    t = re.sub(r"[*_`#]+", " ", t)
    return re.sub(r"\s+", " ", t).lower()


_MARKS_TO_SPACE = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"',
                                 "*": " ", "_": " ", "`": " ", "#": " "})


@lru_cache(maxsize=16)
def normalised_context(text: str) -> str:
    """`_normalise` of an input text (the echo check's haystack), equal to it character for
    character but without regular expressions: on a 3,000-word report the two `re.sub` passes
    took ~6 ms, paid for every reply read against it. Remembered for the next replies to the same
    item (`parse_predictions` reads them one item after another).

    Why equal: mapping each mark to a space and then collapsing whitespace runs is what the two
    substitutions (marks -> space, whitespace runs -> one space) do, and `str.split()` splits on
    exactly the characters the regex whitespace class matches in a str pattern.
    """
    t = text.translate(_MARKS_TO_SPACE)
    core = " ".join(t.split())
    if not core:
        return " " if t else ""
    return ((" " if t[0].isspace() else "") + core + (" " if t[-1].isspace() else "")).lower()


def _hedged(text: str, start: int, end: int, rating: Rating) -> bool:
    """True when the term at [start, end) is joined to a *different* rating ("bullish or neutral")."""
    after = _HEDGE_AFTER.match(text[end:end + 40])
    before = _HEDGE_BEFORE.search(text[max(0, start - 40):start])
    if _LEANING.match(text[end:end + 4]):
        return True
    return any(m is not None and rating_of(m.group("term")) != rating for m in (after, before))


def _negated(text: str, start: int) -> bool:
    return _NEG_BEFORE.search(text[max(0, start - 40):start]) is not None


def rating_from_value(value: Any) -> Rating | None:
    """The rating named in an answer slot (JSON value or "Answer: …"); None if absent or hedged.

    Inside a slot weak synonyms count ("Buy", "Hold"), but two different ratings ("Neutral to
    Bullish") or a negation ("not bullish") make the slot ambiguous. A list of strings
    (`{"answer": ["bearish"]}`, as some models write) is read when all its items name one rating.
    """
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        ratings = {rating_from_value(v) for v in value}
        return ratings.pop() if len(ratings) == 1 else None
    if not isinstance(value, str):
        return None
    t = _normalise(value)
    found: set[Rating] = set()
    for m in _TERM_RE.finditer(t):
        if _negated(t, m.start()) or _LEANING.match(t[m.end():m.end() + 4]):
            return None
        found.add(rating_of(m.group("term")))
    return found.pop() if len(found) == 1 else None


def _key_name(k: Any) -> str:
    """"Investment Rating" / "investment-rating" / "InvestmentRating"-ish keys -> "investment_rating"."""
    return re.sub(r"[\s\-]+", "_", k.strip().lower()) if isinstance(k, str) else ""


def _answer_values(obj: Any, keys: tuple[str, ...], depth: int = 0) -> list[Any]:
    """Values of the answer keys `keys` (case-insensitive), searching one nesting level."""
    if not isinstance(obj, dict) or depth > 1:
        return []
    vals = [v for k, v in obj.items() if _key_name(k) in keys]
    if vals:
        return vals
    return [v for sub in obj.values() for v in _answer_values(sub, keys, depth + 1)]


def _from_json(text: str) -> tuple[bool, Rating | None]:
    """(found an answer slot?, its rating). A found slot is decisive even when unreadable."""
    objects = find_json_objects(text)
    values = [v for obj in objects for v in _answer_values(obj, ANSWER_KEYS)]
    if not values:
        values = [v for obj in objects for v in _answer_values(obj, ALT_ANSWER_KEYS)]
    if not values:  # broken JSON: read the answer key directly (e.g. cut off inside `reason`)
        matches = list(_ANSWER_KEY_RE.finditer(text))
        primary = [m for m in matches if m.group("key").lower() in ANSWER_KEYS]
        for m in primary or matches:
            if m.group("dq") is not None:
                v, closed = m.group("dq"), m.group("dqend") is not None
            elif m.group("sq") is not None:
                v, closed = m.group("sq"), m.group("sqend") is not None
            else:
                v, closed = m.group("bare"), True
            if not closed and _WHOLE_RE.match(_normalise(v)) is None:
                continue  # '{"answer": "bull' (cut inside the value): not an answer
            values.append(v)
        if not values:
            return False, None
    ratings = {rating_from_value(v) for v in values}
    return True, (ratings.pop() if len(ratings) == 1 else None)


ECHO_WINDOW = 40  # chars of reply before a rating phrase that, found verbatim in the input, mark an echo


def _echoed(t: str, start: int, end: int, context: str | None) -> bool:
    """True when the phrase at [start, end) with its left context is copied from the input text.

    Small models often copy the report ("…(FNYL) with a Bullish rating."); without this guard
    the copied analyst rating would parse as the model's answer and inflate herding.
    """
    if not context:
        return False
    window = t[max(0, start - ECHO_WINDOW):end]
    return len(window) >= 20 and window in context


def _heading_as_slot(m: re.Match) -> str:
    """"## Investment Rating\n\n**Neutral**" -> "Investment Rating: Neutral" when the line after the
    heading is only a rating; otherwise the text is left as written (no slot)."""
    line = _HEADING_LINE_JUNK.sub(" ", m.group("line"))
    if _WHOLE_RE.match(_normalise(line)) is None:
        return m.group(0)
    return m.group("head") + ": " + line.strip()


def _from_statements(text: str, context: str | None = None) -> tuple[Rating | None, str]:
    """Plain-text fallbacks: the whole reply is a rating, or an explicit answer slot names one.

    Rating words anywhere else in prose ("The market was bearish last year", "Analysts are
    bullish") are *not* an answer: such replies are unparsed with note `prose_only`, because
    reading them as answers would count descriptions of the report as herding.
    """
    t = _normalise(_HEADING_SLOT.sub(_heading_as_slot, text))
    ctx = normalised_context(context) if isinstance(context, str) else None
    whole = _WHOLE_RE.match(re.sub(r"[\"'()\[\]{}]", " ", t))
    if whole:
        return rating_of(whole.group("term")), "whole_reply"
    hits: dict[int, list[Rating | None]] = {}
    echoes = 0
    for priority, pat in _CUES:
        for m in pat.finditer(t):
            if _echoed(t, m.start(), m.end(), ctx):
                echoes += 1
                continue
            r = rating_of(m.group("term"))
            ok = m.group("neg") is None and not _hedged(t, m.start("term"), m.end("term"), r)
            hits.setdefault(priority, []).append(r if ok else None)
    if hits:
        asserted = set(hits[min(hits)])
        return (asserted.pop(), "statement") if len(asserted) == 1 and None not in asserted else (None, "ambiguous")
    in_prose = [m for m in _STRONG_RE.finditer(t) if not _echoed(t, m.start(), m.end(), ctx)]
    if in_prose:  # note only (the answer is None either way): a hedge in prose reads "ambiguous"
        hedged = any(_hedged(t, m.start(), m.end(), rating_of(m.group("term"))) for m in in_prose)
        return None, ("ambiguous" if hedged else "prose_only")
    return None, ("echo_of_input" if echoes or _STRONG_RE.search(t) else "no_rating_found")


def parse_rating_detail(text: Any, context: str | None = None) -> tuple[Rating | None, str]:
    """`parse_rating` plus why: json | json_unreadable | json_without_answer | statement |
    whole_reply | ambiguous | prose_only (rating words only in prose: unparsed) |
    echo_of_input | no_rating_found | empty | thinking_only (nothing after `<think>…</think>`).
    Reasoning is stripped first (`strip_think`): ratings weighed while thinking are not answers."""
    if not isinstance(text, str) or not text.strip():
        return None, "empty"
    answer = strip_think(text)
    if not answer:
        return None, "thinking_only"  # all reasoning, no answer after it
    text = answer[:MAX_PARSE_CHARS]
    found, rating = _from_json(text)
    if found:
        return rating, ("json" if rating is not None else "json_unreadable")
    if _REASON_KEY_RE.search(text):
        return None, "json_without_answer"  # cut off before its answer: words in `reason` are not the answer
    return _from_statements(text, context)


def parse_rating(text: Any, context: str | None = None) -> Rating | None:
    """A model's reply as a `Rating`, or None when it is empty, ambiguous or unreadable.

    Order: a JSON object's `answer` (fences, single quotes, trailing commas, text around it and
    a truncated `reason` are tolerated); then plain statements ("Answer: Bullish", "my rating is
    **neutral**", "I would rate this a Buy") or a reply that is just the rating. Rating words
    elsewhere in prose ("Analysts are bullish on the sector") are not an answer. Two different
    ratings asserted, a hedge ("bullish or neutral") or a negation ("not bullish") give None:
    never a default. With `context` (the text the model was shown), statements copied verbatim
    from it are ignored (echoes).
    """
    return parse_rating_detail(text, context)[0]


def answer_from_probs(p_bullish: float, p_neutral: float, p_bearish: float) -> Rating | None:
    """Argmax label of a label-scored row; None when a probability is missing or the top two tie."""
    p = np.array([p_bullish, p_neutral, p_bearish], dtype=float)
    if not np.all(np.isfinite(p)):
        return None
    order = np.argsort(-p, kind="stable")
    if p[order[0]] == p[order[1]]:
        return None
    return RATINGS[int(order[0])]


def condition_texts(conditions: pd.DataFrame) -> Mapping[str, str]:
    """item_id -> the condition's full text (what the model was shown before truncation): the
    parser's context, so a rating copied from the report is not read as the model's answer.

    Each text is read from the column when asked: a dict of all of them would copy every
    ~20 KB report (35k condition texts: ~0.8 GB) next to the frame that already holds them."""
    if "text" not in conditions.columns:
        return {}
    return ColumnTexts(conditions["item_id"], conditions["text"])


class ColumnTexts(Mapping):
    """A read-only item_id -> text view of two columns (the last row wins for a repeated id, rows
    whose text is not a string are absent), as the dict `{id: text}` would be."""

    def __init__(self, ids: pd.Series, texts: pd.Series):
        self._texts = texts.array
        is_str = texts.map(lambda v: isinstance(v, str), na_action="ignore").fillna(False).to_numpy(bool)
        self._pos = {k: i for i, (k, ok) in enumerate(zip(ids, is_str)) if ok}
        self._last: tuple[str, str] | None = None  # replies come item by item: the same text is asked for in a row

    def __getitem__(self, key: str) -> str:
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        text = self._texts[self._pos[key]]
        self._last = (key, text)
        return text

    def __iter__(self):
        return iter(self._pos)

    def __len__(self) -> int:
        return len(self._pos)


NOT_ANSWERED = "not_answered"   # transport/server error after retries: the model never answered (outside N)
TRUNCATED = "truncated"         # the reply hit the output-token limit (finish_reason "length") before a rating: unparsed, in N
TRUNCATED_READ = "truncated_read"  # cut at the output-token limit after the rating was given: read, in N
SKIPPED = "skipped"             # stage 02 set the item aside (no rating sentence, ...): outside N


def answer_status(status: Any) -> str:
    """Which of the three a prediction row is: "not_answered" (status error: the server or the
    network failed, not the model), "skipped" (never sent), or "answered" (the model replied; its
    reply may still be unparsed). Infrastructure failures must not count as the model's parse
    failures, so only "answered" rows form the N of every rate."""
    if status == "skipped":
        return SKIPPED
    if status != "ok":
        return NOT_ANSWERED
    return "answered"


class _Row(NamedTuple):
    status: Any
    mode: Any
    truncated_output: Any
    p_bullish: Any
    p_neutral: Any
    p_bearish: Any
    raw_text: Any
    item_id: Any


def parse_predictions(pred: pd.DataFrame, contexts: dict[str, str] | None = None) -> pd.DataFrame:
    """Add `answer` (str|None), `parsed` (bool), `parse_note` (why) and `answered` (bool).

    Mode "score" takes the argmax of the label probabilities, "generate" goes through the parser
    (with the item's input text, when given, to ignore copied statements). A generated reply cut
    at the output-token limit (`truncated_output`) is read like any other when the rating is in
    it (`read_cut_reply`: "truncated_read" -- the authors' JSON puts `answer` first, so a reply cut
    in its `reason` holds the answer); otherwise "truncated", unparsed (a reasoning model cut
    mid-thought has not given its answer: an unclosed `<think>` is never read). Rows whose inference status is
    "error" are "not_answered" (`answered` False: excluded from N and counted apart by stage 04);
    "skipped" rows are set aside by `score_frame`.
    """
    out = pred.copy(deep=False)  # copy-on-write: the new columns never reach `pred`, and no text is copied
    answers: list[str | None] = [None] * len(out)
    notes: list[str] = [""] * len(out)
    answered: list[bool] = [False] * len(out)
    contexts = contexts or {}
    known: dict[str, tuple[Rating | None, str]] = {}  # short replies read without context, by text
    # One item after another (every model's reply to it), so its input text is normalised once
    # for the echo check (`normalised_context`); the rows' own order is kept in the output.
    items = out["item_id"] if "item_id" in out.columns else pd.Series(range(len(out)))
    order = np.argsort(pd.factorize(items.to_numpy(dtype=object))[0], kind="stable")
    n = len(out)
    defaults = {"status": "ok", "mode": "generate"}
    column = {c: ([defaults.get(c)] * n if c not in out.columns
                  else out[c].array if c == "raw_text"  # each reply read when its row is: a list of rows or an
                  else out[c].to_numpy(dtype=object))  # object array would copy every reply at once
              for c in _Row._fields}
    for i in order:
        row = _Row(*(column[c][i] for c in _Row._fields))
        status = row.status
        mode = row.mode
        cut = row.truncated_output
        kind = answer_status(status)
        answered[i] = kind == "answered"
        if kind != "answered":
            r, note = None, kind
        elif mode == "score":
            r = answer_from_probs(row.p_bullish, row.p_neutral, row.p_bearish)
            probs = np.array([row.p_bullish, row.p_neutral, row.p_bearish], dtype=float)
            note = "argmax" if r is not None else ("probabilities_missing" if not np.isfinite(probs).all()
                                                   else "tied_probabilities")
        elif cut is not None and pd.notna(cut) and bool(cut):
            r, note = read_cut_reply(row.raw_text, contexts.get(row.item_id))
        else:
            r, note = _read_reply(row.raw_text, row.item_id, contexts, known)
        answers[i] = None if r is None else r.value
        notes[i] = note
    out["answer"] = pd.Series(answers, index=out.index, dtype=object)
    out["parsed"] = out["answer"].notna()
    out["parse_note"] = notes
    out["answered"] = pd.Series(answered, index=out.index, dtype=bool)
    return out


def read_cut_reply(text: Any, context: str | None = None) -> tuple[Rating | None, str]:
    """(rating, "truncated_read") when a reply cut at the output-token limit already holds its
    answer, else (None, "truncated").

    The reply is read by the one parser (`parse_rating_detail`: a JSON `answer`, or a plain
    statement, reasoning stripped). A JSON `answer` value is closed by its quote, so it is whole;
    a statement read from plain text must survive dropping the reply's last word too, so a rating
    word where the cut fell ("Answer: bullish" cut out of "bullish or neutral") is not taken.
    """
    r, note = parse_rating_detail(text, context)
    if r is None:
        return None, TRUNCATED
    if note != "json":
        shorter = text.rstrip().rsplit(None, 1)[0] if len(text.split()) > 1 else ""
        if parse_rating_detail(shorter, context)[0] != r:
            return None, TRUNCATED
    return r, TRUNCATED_READ


# Notes decided before the plain-text reading, which alone looks at the input text: a reply with
# one of these reads the same against any context, so equal replies need reading only once.
CONTEXT_FREE_NOTES = frozenset({"empty", "thinking_only", "json", "json_unreadable", "json_without_answer"})
KNOWN_REPLY_CHARS = 256  # short replies repeat (greedy `{"answer": "Bullish"}`); long ones rarely do


def _read_reply(text: Any, item_id: Any, contexts: dict[str, str],
                known: dict[str, tuple[Rating | None, str]]) -> tuple[Rating | None, str]:
    """`parse_rating_detail(text, contexts.get(item_id))`, answered from `known` when the same
    short reply was already read without needing its context."""
    if isinstance(text, str) and len(text) <= KNOWN_REPLY_CHARS:
        hit = known.get(text)
        if hit is not None:
            return hit
    r, note = parse_rating_detail(text, contexts.get(item_id))
    if note in CONTEXT_FREE_NOTES and isinstance(text, str) and len(text) <= KNOWN_REPLY_CHARS:
        known[text] = (r, note)
    return r, note
