"""BizFinBench's prompts: the judge rubrics and templates (stage 08) and the answer prompt version (stage 07).

Everything a judge or a BizFinBench model sees is built here, so changing a word means a new
`*_VERSION`, which is part of every response-store key: old verdicts are never reused for a new prompt.
"""
from __future__ import annotations

from dataclasses import dataclass

# --- BizFinBench judges: vanilla LLM-as-a-judge and IteraJudge (stages 07-08) -------------
# The rubrics follow the structure of the authors' published judge and revision prompts
# (HiThink-Research/BizFinBench, benchmark_code/BizFinBench/eval_financial_description*.py,
# eval_multi_tools_use*.py, eval_financial_encyclopedia.py): per task the same dimensions, what each
# checks, their order and the score scale (FDD: 100 / 60 / 0; FTU: tool choice 30 + parameters 20 +
# effectiveness 50; FQA: accuracy 40 %, completeness 30 %, depth 20 %, clarity 10 %). The wording is
# ours. `bizfin.rubrics_dir` replaces them with the published files read verbatim at run time
# (finlib.bizfin.iterajudge.rubrics). Both judges return one JSON object {"score": <integer>, "reason": "..."};
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


# One rubric per judge task; its task record (`finlib.bizfin.tasks`) names it.
FDD_RUBRIC = JudgeRubric(
        "FDD", "你在评估一段金融数据描述是否准确。",
        (("数据一致性", "回答里引用的每个数值都要能在问题给出的数据里找到，且对应正确的指标和日期；"
                   "不能把一个指标的数值安到另一个指标上，不能写错时间，也不能改动数字"
                   "（例如数据是从55.32升到59.14，却写成从55.24升到58.32）。"),
         ("趋势准确性", "回答对数据的描述不能与数据本身相反：逐日升高的序列不能说成下降，"
                   "两两比较、最大值和最小值要判断正确，涨跌幅为正不能说成下跌，资金净流出不能说成流入；"
                   "问题中缺失或为空的数据不能说成0。")),
        "只能给100、60或0分：100分 = 趋势和数值都正确、表述通顺、没有编造；"
        "60分 = 趋势正确，但有数值写错；0分 = 趋势描述错误（只要趋势错就是0分）。",
        "authors' FDD judge and revision prompts (structure), our wording")
FTU_RUBRIC = JudgeRubric(
        "FTU", "你在评估一个规划智能体为回答用户问题而选择和调用金融工具的能力。",
        (("工具选择", "所选工具是否适合解决用户的问题，有没有用错工具、漏掉必需的工具或调用多余的工具（30分）。"),
         ("参数准确性", "每次调用的参数是否符合该工具对参数的要求：必填参数齐全，代码、指标、时间范围等取值正确（20分）。"),
         ("方案有效性", "多个工具的组合与先后顺序能否真正解决用户的问题、达成其目标（50分）。")),
        "满分100分，由三项相加：工具选择30分、参数准确性20分、方案有效性50分；"
        "只有完全符合全部标准时才给100分。",
        "authors' FTU judge prompt (structure), our wording")
FQA_RUBRIC = JudgeRubric(
        "FQA", "你在评估一个金融知识问答的回答。",
        (("准确性", "概念、公式、计算和结论是否符合金融领域的标准知识，有没有错误（权重40%）。"),
         ("完整性", "是否回答了问题的全部要求，给出必要的背景、推理过程和支持细节（权重30%）。"),
         ("分析深度", "是否从多个角度分析、考虑主要影响因素，而不只是表面描述（权重20%）。"),
         ("清晰度", "表达是否简洁、有条理、术语使用准确（权重10%）。")),
        "每项按0到100评分，总分 = 准确性×0.4 + 完整性×0.3 + 分析深度×0.2 + 清晰度×0.1，取整数。",
        "authors' FQA judge prompt (structure), our wording")


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


def build_vanilla_judge_messages(rubric: JudgeRubric, question: str, answer: str, dimensions: tuple[str, ...] | list[str],
                                 score_range: tuple[int, int], reference: str | None = None) -> list[dict[str, str]]:
    """One user turn: the plain LLM-as-a-judge with the task's rubric (Table 3's FTU/FQA/FDD and
    Table 4's baseline); a reference answer is shown when the task has one."""
    r = rubric
    ref = "" if reference is None else JUDGE_REFERENCE_BLOCK.format(reference=reference)
    text = JUDGE_VANILLA_PROMPT.format(intro=r.intro, dimensions=_numbered(r, dimensions), scale=r.scale,
                                       question=question, answer=answer, reference=ref,
                                       lo=score_range[0], hi=score_range[1])
    return [{"role": "user", "content": text}]


def build_refine_messages(rubric: JudgeRubric, question: str, answer: str, dimension: str) -> list[dict[str, str]]:
    """One IteraJudge refinement step, Eq. 1: y_k = refine(y_{k-1} || P(e_k, q)); q in every step."""
    text = JUDGE_REFINE_PROMPT.format(question=question, answer=answer, dimension=dimension,
                                      check=rubric.check(dimension))
    return [{"role": "user", "content": text}]


def build_contrastive_judge_messages(rubric: JudgeRubric, question: str, answer: str, refined: str,
                                     dimensions: tuple[str, ...] | list[str],
                                     score_range: tuple[int, int]) -> list[dict[str, str]]:
    """IteraJudge's judge call, Eq. 2: score(y) = judge(q, y, y_K, E)."""
    r = rubric
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
