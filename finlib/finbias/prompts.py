"""The prompts of the study, versioned, and the helpers that shape them.

Everything a model sees is built here, so changing a word means a new `*_VERSION`, which is part
of every response-store key: old answers are never reused for a new prompt.

Fin-Bias (stage 03): the default is the authors' own prompt, copied verbatim from their public code
(github.com/Xiaoyu1216/Fin-Bias, `run_api.py` / `run_vllm.py`, function `prepare_cot_inv_input`):
system text = five lines joined with "\n", user turn = the report text; for models without a
system role (their list: gemma, OLMo, Mistral, Mixtral, starcoder2) one user turn
`system + "\n" + report`. The wording this repository used before the authors' code was read (a
reconstruction from the paper's description of Figure 1) stays available as a second, named
version (`inference.prompt_version: finbias-cot-v1`); it is never the default and never mixed
with the authors' answers (different store keys, and the version is recorded in the stage report).

Answers are parsed by `finlib.finbias.answers.parse_rating`, the only parser: stage 03's report and
notebook use it too, so the parse rate shown there is the one the metrics see.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from finlib.finbias.sentences import first_sentence_span
from finlib.finbias.vocab import RATINGS, Rating
from finlib.llm.local_backend import LabelScoring

# --- Fin-Bias: the investor prompt -------------------------------------------------------------

AUTHORS_SYSTEM_PROMPT = (
    "You are an investor. Analyze the firm analyst report logically.\n"
    "Then provide your own investment rating.\n"
    "Format as a JSON object with the following fields:\n"
    "answer: The precise answer to the question. Only one of {bullish, neutral, bearish}.\n"
    "reason: One or more paragraphs indicating why you provide the answer."
)

RECONSTRUCTED_SYSTEM_PROMPT = (
    "You are an investor. Read the following firm analyst report and analyse it logically, "
    "step by step: the firm's business, its financial performance, its risks and its outlook. "
    "Then give your own investment rating for the firm. "
    'Respond only with a JSON object of the form {"answer": "...", "reason": "..."}, where '
    '"answer" is one of "bullish", "neutral" or "bearish" and "reason" explains your rating briefly.'
)


@dataclass(frozen=True)
class FinBiasPrompt:
    """One named Fin-Bias prompt: its system text and how it is merged into the user turn for
    models without a system role (the authors join with one newline)."""

    version: str
    system: str
    joiner: str
    source: str


FINBIAS_PROMPTS: dict[str, FinBiasPrompt] = {p.version: p for p in (
    FinBiasPrompt("finbias-authors-v1", AUTHORS_SYSTEM_PROMPT, "\n",
                  "authors' code: Xiaoyu1216/Fin-Bias run_api.py / run_vllm.py, prepare_cot_inv_input"),
    FinBiasPrompt("finbias-cot-v1", RECONSTRUCTED_SYSTEM_PROMPT, "\n\n",
                  "this repository's reconstruction from the paper's description of Figure 1 (superseded)"),
)}
PROMPT_VERSION = "finbias-authors-v1"   # the default: the authors' protocol
SYSTEM_PROMPT = FINBIAS_PROMPTS[PROMPT_VERSION].system


def finbias_prompt(version: str = PROMPT_VERSION) -> FinBiasPrompt:
    """The named Fin-Bias prompt; an unknown version is an error listing the known ones."""
    try:
        return FINBIAS_PROMPTS[version]
    except KeyError:
        raise ValueError(f"unknown Fin-Bias prompt version {version!r}; known: {sorted(FINBIAS_PROMPTS)}") from None


# Label scoring: the assistant turn is pre-filled with this prefix and the next token decides
# the label (stack.md: `bull` / `neutral` / `bear`, no leading space after the quote).
SCORE_PREFIX = '{"answer": "'
LABEL_STEMS: dict[Rating, str] = {Rating.BULLISH: "bull", Rating.NEUTRAL: "neutral", Rating.BEARISH: "bear"}
FINBIAS_LABELS = LabelScoring(prefix=SCORE_PREFIX, stems={r.value: LABEL_STEMS[r] for r in RATINGS})



def build_messages(text: str, supports_system: bool = True,
                   version: str = PROMPT_VERSION) -> list[dict[str, str]]:
    """Chat messages for one report under a named prompt version: system + user turns, or for
    models without a system role one user turn `system + joiner + report` (the authors' rule)."""
    p = finbias_prompt(version)
    if supports_system:
        return [{"role": "system", "content": p.system}, {"role": "user", "content": text}]
    return [{"role": "user", "content": f"{p.system}{p.joiner}{text}"}]


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


# --- Embedded generator: constrained JSON decoding (stage 03) ------------------------
# A NAMED option for the embedded llama.cpp model only (`inference.constrained_json` lists the
# models; stage 03 refuses any record that is not backend llamacpp, so the paper's models are never
# constrained). llama.cpp turns this JSON schema into a grammar: the reply is always one JSON object
# with the answer first (one of the three labels) and a reason of at most FINBIAS_REASON_CHARS
# characters (bounded output = bounded CPU time). The prompt text itself is unchanged.
FINBIAS_SCHEMA_VERSION = "finbias-answer-schema-v1"
FINBIAS_REASON_CHARS = 120  # ~30 tokens: bounded output = bounded CPU time (200 gave ~60 output tokens)


def finbias_response_format() -> dict:
    """The `response_format` of a constrained Fin-Bias call (part of the request, so of its store key)."""
    schema = {"type": "object",
              "properties": {"answer": {"type": "string", "enum": [r.value for r in Rating]},
                             "reason": {"type": "string", "maxLength": FINBIAS_REASON_CHARS}},
              "required": ["answer", "reason"], "additionalProperties": False}
    return {"type": "json_schema",
            "json_schema": {"name": FINBIAS_SCHEMA_VERSION, "schema": schema, "strict": True}}
