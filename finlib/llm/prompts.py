"""The one prompt of the study (Fin-Bias Section 4.1, Figure 1) and the helpers that shape it.

Everything a model sees is built here, so changing a word means bumping `PROMPT_VERSION`,
which is part of every response-store key: old answers are never reused for a new prompt.

The paper's Figure 1 is an image that did not survive text extraction; the wording below is
reconstructed from the paper's description (an investor, analyse the analyst report
logically, give your own rating as JSON with `answer` and `reason`).

Answers are parsed by stage 04's parser (`finlib.answers.parse_rating`), the only one: stage 03's
report and notebook use it too, so the parse rate shown there is the one the metrics see.
"""
from __future__ import annotations

import re
from typing import Callable

from finlib.schema import Rating
from finlib.sentences import first_sentence_span

PROMPT_VERSION = "finbias-cot-v1"

SYSTEM_PROMPT = (
    "You are an investor. Read the following firm analyst report and analyse it logically, "
    "step by step: the firm's business, its financial performance, its risks and its outlook. "
    "Then give your own investment rating for the firm. "
    'Respond only with a JSON object of the form {"answer": "...", "reason": "..."}, where '
    '"answer" is one of "bullish", "neutral" or "bearish" and "reason" explains your rating briefly.'
)

# Label scoring: the assistant turn is pre-filled with this prefix and the next token decides
# the label (stack.md: `bull` / `neutral` / `bear`, no leading space after the quote).
SCORE_PREFIX = '{"answer": "'
LABEL_STEMS: dict[Rating, str] = {Rating.BULLISH: "bull", Rating.NEUTRAL: "neutral", Rating.BEARISH: "bear"}



def build_messages(text: str, supports_system: bool = True) -> list[dict[str, str]]:
    """Chat messages for one report; models without a system role get it prepended to the user
    turn (as the paper's code does for Gemma/Mistral), separated by a blank line."""
    if supports_system:
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": text}]
    return [{"role": "user", "content": f"{SYSTEM_PROMPT}\n\n{text}"}]


def first_sentence_end(text: str) -> int:
    """Character index just after the first sentence (the analyst-rating sentence), using the
    same sentence splitter as stage 02 (so "Acme Corp. rated Buy." is one sentence); the whole
    text when it has no sentence break."""
    span = first_sentence_span(text)
    return len(text) if span is None else span[1]


def truncate_text(text: str, max_tokens: int, n_tokens: Callable[[str], int]) -> tuple[str, bool]:
    """Cut `text` from the end at a word boundary until `n_tokens(text) <= max_tokens`.

    The first sentence is never cut (it carries the analyst rating the study is about): if it
    alone is over budget it is kept whole and the caller sees an over-long prompt rather than a
    silently removed rating. Binary search over word boundaries: ~log2(words) tokenizations.
    """
    if n_tokens(text) <= max_tokens:
        return text, False
    keep = first_sentence_end(text)
    cuts = [m.start() for m in re.finditer(r"\s+", text) if m.start() >= keep]
    if not cuts:
        return text[:keep], keep < len(text)
    lo, hi, best = 0, len(cuts) - 1, text[:keep].rstrip()
    while lo <= hi:
        mid = (lo + hi) // 2
        candidate = text[:cuts[mid]]
        if n_tokens(candidate) <= max_tokens:
            best, lo = candidate, mid + 1
        else:
            hi = mid - 1
    return best, True
