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
# The rubrics follow the structure of the authors' published judge and revision prompts
# (HiThink-Research/BizFinBench, benchmark_code/BizFinBench/eval_financial_description*.py,
# eval_multi_tools_use*.py, eval_financial_encyclopedia.py): per task the same dimensions, what each
# checks, their order and the score scale (FDD: 100 / 60 / 0; FTU: tool choice 30 + parameters 20 +
# effectiveness 50; FQA: accuracy 40 %, completeness 30 %, depth 20 %, clarity 10 %). The wording is
# ours. `bizfin.rubrics_dir` replaces them with the published files read verbatim at run time
# (finlib.bizfin.rubrics). Both judges return one JSON object {"score": <integer>, "reason": "..."};
# IteraJudge's refiner sees the question, the current answer and ONE dimension per call and returns
# only the revised answer (unchanged when already fine). Each family has its own version (part of
# every store key).
JUDGE_VANILLA_VERSION = "bizfin-judge-vanilla-v2"
JUDGE_REFINE_VERSION = "bizfin-judge-refine-v2"
JUDGE_CONTRASTIVE_VERSION = "bizfin-judge-contrastive-v2"


@dataclass(frozen=True)
class JudgeRubric:
    """One judge task's rubric: its dimensions in the authors' refinement order (name -> what it
    checks) and the scale the judge applies."""

    task: str
    intro: str
    dimensions: tuple[tuple[str, str], ...]
    scale: str
    source: str

    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.dimensions)

    def check(self, name: str) -> str:
        for n, text in self.dimensions:
            if n == name:
                return text
        raise KeyError(f"{self.task}: no rubric dimension {name!r}; known: {self.names()}")


JUDGE_RUBRICS: dict[str, JudgeRubric] = {r.task: r for r in (
    JudgeRubric(
        "FDD", "你在评估一段金融数据描述是否准确。",
        (("数据一致性", "回答里引用的每个数值都要能在问题给出的数据里找到，且对应正确的指标和日期；"
                   "不能把一个指标的数值安到另一个指标上，不能写错时间，也不能改动数字"
                   "（例如数据是从55.32升到59.14，却写成从55.24升到58.32）。"),
         ("趋势准确性", "回答对数据的描述不能与数据本身相反：逐日升高的序列不能说成下降，"
                   "两两比较、最大值和最小值要判断正确，涨跌幅为正不能说成下跌，资金净流出不能说成流入；"
                   "问题中缺失或为空的数据不能说成0。")),
        "只能给100、60或0分：100分 = 趋势和数值都正确、表述通顺、没有编造；"
        "60分 = 趋势正确，但有数值写错；0分 = 趋势描述错误（只要趋势错就是0分）。",
        "authors' FDD judge and revision prompts (structure), our wording"),
    JudgeRubric(
        "FTU", "你在评估一个规划智能体为回答用户问题而选择和调用金融工具的能力。",
        (("工具选择", "所选工具是否适合解决用户的问题，有没有用错工具、漏掉必需的工具或调用多余的工具（30分）。"),
         ("参数准确性", "每次调用的参数是否符合该工具对参数的要求：必填参数齐全，代码、指标、时间范围等取值正确（20分）。"),
         ("方案有效性", "多个工具的组合与先后顺序能否真正解决用户的问题、达成其目标（50分）。")),
        "满分100分，由三项相加：工具选择30分、参数准确性20分、方案有效性50分；"
        "只有完全符合全部标准时才给100分。",
        "authors' FTU judge prompt (structure), our wording"),
    JudgeRubric(
        "FQA", "你在评估一个金融知识问答的回答。",
        (("准确性", "概念、公式、计算和结论是否符合金融领域的标准知识，有没有错误（权重40%）。"),
         ("完整性", "是否回答了问题的全部要求，给出必要的背景、推理过程和支持细节（权重30%）。"),
         ("分析深度", "是否从多个角度分析、考虑主要影响因素，而不只是表面描述（权重20%）。"),
         ("清晰度", "表达是否简洁、有条理、术语使用准确（权重10%）。")),
        "每项按0到100评分，总分 = 准确性×0.4 + 完整性×0.3 + 分析深度×0.2 + 清晰度×0.1，取整数。",
        "authors' FQA judge prompt (structure), our wording"),
)}


def judge_rubric(task: str) -> JudgeRubric:
    """The rubric of a judge task; an unknown task is an error naming the known ones."""
    try:
        return JUDGE_RUBRICS[task]
    except KeyError:
        raise KeyError(f"no judge rubric for task {task!r}; known: {sorted(JUDGE_RUBRICS)}") from None


_JUDGE_FORMAT = ('请给出{lo}到{hi}之间的整数分数。只输出一个JSON对象，不要输出其他内容，格式为：'
                 '{{"score": <整数>, "reason": "<简短理由>"}}')

JUDGE_VANILLA_PROMPT = (
    "你是一名金融内容评测专家。{intro}请按下列评估维度给【回答】打分。\n\n"
    "【评估维度】\n{dimensions}\n\n【评分标准】\n{scale}\n\n"
    "【问题】\n{question}\n\n【回答】\n{answer}\n\n{reference}" + _JUDGE_FORMAT
)
JUDGE_REFERENCE_BLOCK = "【参考答案】\n{reference}\n\n"

JUDGE_REFINE_PROMPT = (
    "你是一名严谨的金融内容修订者。请只按照下面这一条评估标准，修订AI助手对问题的回答；"
    "如果回答在这一条标准上已经足够好，就原样返回，不做任何修改。\n\n"
    "【问题】\n{question}\n\n【评估标准：{dimension}】\n{check}\n\n【回答】\n{answer}\n\n"
    "不要解释你的修改，只输出修订后的完整回答。"
)

JUDGE_CONTRASTIVE_PROMPT = (
    "你是一名金融内容评测专家。{intro}请把【回答】与【参考回答】对照，按下列评估维度给【回答】打分。"
    "【参考回答】是把【回答】按这些维度逐一修订后得到的：两者在某一维度上的差异说明【回答】在该维度上有错误或不足；"
    "两者相同说明没有发现需要修订之处。\n\n"
    "【评估维度】\n{dimensions}\n\n【评分标准】\n{scale}\n\n"
    "【问题】\n{question}\n\n【回答】\n{answer}\n\n【参考回答】\n{refined}\n\n" + _JUDGE_FORMAT
)


def _numbered(rubric: JudgeRubric, names: tuple[str, ...] | list[str]) -> str:
    return "\n".join(f"{i}. {n}：{rubric.check(n)}" for i, n in enumerate(names, 1))


def build_vanilla_judge_messages(task: str, question: str, answer: str, dimensions: tuple[str, ...] | list[str],
                                 score_range: tuple[int, int], reference: str | None = None) -> list[dict[str, str]]:
    """One user turn: the plain LLM-as-a-judge with the task's rubric (Table 3's FTU/FQA/FDD and
    Table 4's baseline); a reference answer is shown when the task has one."""
    r = judge_rubric(task)
    ref = "" if reference is None else JUDGE_REFERENCE_BLOCK.format(reference=reference)
    text = JUDGE_VANILLA_PROMPT.format(intro=r.intro, dimensions=_numbered(r, dimensions), scale=r.scale,
                                       question=question, answer=answer, reference=ref,
                                       lo=score_range[0], hi=score_range[1])
    return [{"role": "user", "content": text}]


def build_refine_messages(task: str, question: str, answer: str, dimension: str) -> list[dict[str, str]]:
    """One IteraJudge refinement step, Eq. 1: y_k = refine(y_{k-1} || P(e_k, q)); q in every step."""
    text = JUDGE_REFINE_PROMPT.format(question=question, answer=answer, dimension=dimension,
                                      check=judge_rubric(task).check(dimension))
    return [{"role": "user", "content": text}]


def build_contrastive_judge_messages(task: str, question: str, answer: str, refined: str,
                                     dimensions: tuple[str, ...] | list[str],
                                     score_range: tuple[int, int]) -> list[dict[str, str]]:
    """IteraJudge's judge call, Eq. 2: score(y) = judge(q, y, y_K, E)."""
    r = judge_rubric(task)
    text = JUDGE_CONTRASTIVE_PROMPT.format(intro=r.intro, dimensions=_numbered(r, dimensions), scale=r.scale,
                                           question=question, answer=answer, refined=refined,
                                           lo=score_range[0], hi=score_range[1])
    return [{"role": "user", "content": text}]


def fill_published_template(template: str, fields: dict[str, str]) -> list[dict[str, str]]:
    """A prompt file of the authors' repository (read at run time from `bizfin.rubrics_dir`, never
    stored here) filled the way their code fills it: each `{name}` replaced in turn."""
    for key, value in fields.items():
        template = template.replace("{" + key + "}", str(value))
    return [{"role": "user", "content": template}]


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


# The rejected answer when the analyst's rating equals the label (such pairs are kept): reasoning from
# the same report to a rating the returns contradict. Its own version, so the other prompts' stored
# answers keep their keys.
DPO_CONTRARY_VERSION = "dpo-teacher-contrary-v1"
DPO_CONTRARY_SYSTEM = (
    "You are an investor. Read the firm analyst report and write a plausible but mistaken reasoning "
    "that leads to the rating {rating}, citing the report's facts.\n"
    'Respond only with a JSON object {{"answer": "{rating}", "reason": "..."}}, where "reason" is one '
    "short paragraph."
)


def dpo_teacher_version(kind: str) -> str:
    """The prompt version named in a teacher answer's store key."""
    return DPO_CONTRARY_VERSION if kind == "contrary" else DPO_TEACHER_VERSION


def build_dpo_teacher_messages(kind: str, text: str, rating: str) -> list[dict[str, str]]:
    """Teacher messages for one side of a DPO pair: `herded` (original report, analyst rating:
    the rejected answer y_l), `contrary` (original report, a rating the returns contradict: y_l when
    the analyst was right) or `independent` (no_opinion text, return-based label: the chosen y_w)."""
    templates = {"herded": DPO_HERDED_SYSTEM, "contrary": DPO_CONTRARY_SYSTEM, "independent": DPO_INDEPENDENT_SYSTEM}
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
