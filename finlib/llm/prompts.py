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

Answers are parsed by `finlib.llm.answers.parse_rating`, the only parser: stage 03's report and
notebook use it too, so the parse rate shown there is the one the metrics see.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from finlib.core.vocab import Rating
from finlib.finbias.sentences import first_sentence_span

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


# --- BizFinBench judges: vanilla LLM-as-a-judge and IteraJudge (stages 07-08) -------------
# BizFinBench Section 3.3 (Eq. 1-2) gives the method, not the prompts: the wording below is ours
# (Chinese, like the benchmark). What we chose where the paper is silent: the refiner sees the
# question, the current answer and ONE dimension per call and returns only the revised answer
# (unchanged when already fine); both judges return one JSON object {"score": <integer>,
# "reason": "..."} on an integer scale given by the caller (params: bizfin.iterajudge.score_range).
# Each family has its own version (part of every store key).
JUDGE_VANILLA_VERSION = "bizfin-judge-vanilla-v1"
JUDGE_REFINE_VERSION = "bizfin-judge-refine-v1"
JUDGE_CONTRASTIVE_VERSION = "bizfin-judge-contrastive-v1"

_JUDGE_SCALE = (
    "请给出{lo}到{hi}之间的整数分数：{hi}分表示在所有评估维度上完全正确，{lo}分表示完全错误。\n"
    '只输出一个JSON对象，不要输出其他内容，格式为：{{"score": <整数>, "reason": "<简短理由>"}}'
)

JUDGE_VANILLA_PROMPT = (
    "你是一名金融内容评测专家。请按照下列评估维度，评价AI助手对用户问题的回答。\n\n"
    "【评估维度】\n{dimensions}\n\n"
    "【问题】\n{question}\n\n"
    "【回答】\n{answer}\n\n"
    "{reference}" + _JUDGE_SCALE
)
JUDGE_REFERENCE_BLOCK = "【参考答案】\n{reference}\n\n"

JUDGE_REFINE_PROMPT = (
    "你是一名严谨的金融内容修订者。下面是用户的问题和AI助手的回答。\n"
    "请只针对评估维度“{dimension}”修订这个回答：改正它在这一维度上的错误和不足，其余内容保持不变；"
    "如果回答在这一维度上已经没有问题，就原样返回。\n\n"
    "【问题】\n{question}\n\n"
    "【回答】\n{answer}\n\n"
    "【评估维度】\n{dimension}\n\n"
    "只输出修订后的完整回答，不要解释，不要添加其他内容。"
)

JUDGE_CONTRASTIVE_PROMPT = (
    "你是一名金融内容评测专家。请按照下列评估维度，评价AI助手对用户问题的【待评回答】。\n"
    "【参考回答】是把【待评回答】按这些维度逐一修订后得到的版本：两者在某一维度上的差异，"
    "说明【待评回答】在该维度上存在不足；两者相同，说明没有发现需要修订之处。\n\n"
    "【评估维度】\n{dimensions}\n\n"
    "【问题】\n{question}\n\n"
    "【待评回答】\n{answer}\n\n"
    "【参考回答】\n{refined}\n\n" + _JUDGE_SCALE
)


def _numbered(dimensions: tuple[str, ...] | list[str]) -> str:
    return "\n".join(f"{i}. {d}" for i, d in enumerate(dimensions, 1))


def build_vanilla_judge_messages(question: str, answer: str, dimensions: tuple[str, ...] | list[str],
                                 score_range: tuple[int, int], reference: str | None = None) -> list[dict[str, str]]:
    """One user turn: the plain LLM-as-a-judge (Table 4's baseline); a reference answer is shown
    when the task has one."""
    ref = "" if reference is None else JUDGE_REFERENCE_BLOCK.format(reference=reference)
    text = JUDGE_VANILLA_PROMPT.format(dimensions=_numbered(dimensions), question=question, answer=answer,
                                       reference=ref, lo=score_range[0], hi=score_range[1])
    return [{"role": "user", "content": text}]


def build_refine_messages(question: str, answer: str, dimension: str) -> list[dict[str, str]]:
    """One IteraJudge refinement step, Eq. 1: y_k = refine(y_{k-1} || P(e_k, q)); q in every step."""
    return [{"role": "user", "content": JUDGE_REFINE_PROMPT.format(question=question, answer=answer,
                                                                   dimension=dimension)}]


def build_contrastive_judge_messages(question: str, answer: str, refined: str,
                                     dimensions: tuple[str, ...] | list[str],
                                     score_range: tuple[int, int]) -> list[dict[str, str]]:
    """IteraJudge's judge call, Eq. 2: score(y) = judge(q, y, y_K, E)."""
    text = JUDGE_CONTRASTIVE_PROMPT.format(dimensions=_numbered(dimensions), question=question, answer=answer,
                                           refined=refined, lo=score_range[0], hi=score_range[1])
    return [{"role": "user", "content": text}]


# --- BizFinBench answers (stage 07) -------------------------------------------
# The benchmark items carry their own task prompt and answer format (e.g. FNC/FTR: a JSON object
# with "cot" and "answer", Section 4.2), so stage 07 sends each item's messages exactly as
# published: no wording of ours is added. The version names that choice in every store key; if an
# answer-format instruction is ever added here, bump it.
BIZFIN_ANSWER_VERSION = "bizfin-items-verbatim-v1"


# --- DPO teacher (stage 05) ---------------------------------------------------
# Fin-Bias Section 5.2 builds (x, y_w, y_l) triplets with a teacher model. Both answers use the
# evaluation prompt's JSON format ({"answer": ..., "reason": ...}) so they are read by the one parser
# and so the trained model's first answer token is the one label scoring looks at.
DPO_TEACHER_VERSION = "dpo-teacher-v1"

DPO_HERDED_SYSTEM = (
    "You are an investor who trusts sell-side analysts. Read the firm analyst report and reason along "
    "the analyst's view: restate the analyst's arguments, opinions and rating as your own. "
    "Your final rating must be the analyst's rating, {rating}.\n"
    'Respond only with a JSON object {{"answer": "{rating}", "reason": "..."}}, where "reason" is one '
    "short paragraph."
)

DPO_INDEPENDENT_SYSTEM = (
    "You are an independent investor. You are given a firm report from which the analyst's rating and "
    "opinions were removed, and the rating that the firm's realised stock returns later justified: {rating}. "
    "Derive a reasoning chain from the firm's fundamentals in the text (business, financial performance, "
    "risks, outlook) that leads to that rating. Disregard any analyst opinion.\n"
    'Respond only with a JSON object {{"answer": "{rating}", "reason": "..."}}, where "reason" is one '
    "short paragraph."
)


def build_dpo_teacher_messages(kind: str, text: str, rating: str) -> list[dict[str, str]]:
    """Teacher messages for one side of a DPO pair: `herded` (original report, analyst rating:
    the rejected answer y_l) or `independent` (no_opinion text, return-based label: the chosen y_w)."""
    templates = {"herded": DPO_HERDED_SYSTEM, "independent": DPO_INDEPENDENT_SYSTEM}
    if kind not in templates:
        raise ValueError(f"DPO teacher kind must be one of {sorted(templates)}, got {kind!r}")
    return [{"role": "system", "content": templates[kind].format(rating=rating)},
            {"role": "user", "content": text}]


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
