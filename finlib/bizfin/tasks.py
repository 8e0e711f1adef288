"""BizFinBench's task families, one declared record each: where its items live, how a reply is scored
under the published rule and ours, what the judge is shown and with which rubric, and its column and
label in the tables and the figure.

The rest of the code reads these records and never asks which task it holds (the lm-eval task folder /
inspect_ai `@task` way): the loader (`finlib.bizfin.data`), the scorers (`finlib.bizfin.score_item_detail`),
the judge (`finlib.bizfin.judge_input`, `finlib.bizfin.iterajudge.rubrics`), stage 07's official column and
N, Table 3, Table 6, the figure, the harness tasks (the lm-eval YAML files are generated from the records:
`finlib.harness.lm_eval_yaml`), the rehearsal's simulated replies (`reply`), and the params check
(`bizfin.tasks` may hold only a declared name: this module registers the vocabularies with
`finlib.core.params.register_vocabulary`). Adding a task is one `TaskRecord` passed to
`register_task`; order is Table 3's column order, which the result tables keep.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from finlib.bizfin import official as published
from finlib.bizfin import replies, scorers
from finlib.bizfin.prompts import BIZFIN_ANSWER_VERSION, FDD_RUBRIC, FQA_RUBRIC, FTU_RUBRIC, JudgeRubric
from finlib.core.params import register_vocabulary

KINDS = ("accuracy", "judge")


def _once(verdict: str) -> int:
    """A published judge script that counts every verdict once in its N."""
    return 1


@dataclass(frozen=True)
class TaskRecord:
    """One task family, everything the pipeline needs to ask, score, tabulate and plot it.

    Accuracy tasks give `scorer` (gold, reply, question -> `ItemScore`: the published rule and ours,
    `scorers.rule_pair` builds one from the two readings) and `official_rule` (the published rule alone,
    held reply by reply to the authors' script in the differential test). Judge tasks give `rubric` (our
    words, the authors' structure) and `verdict_reader` (the published script's reading of a verdict)."""

    abbrev: str  # Table 3 column and the name `bizfin.tasks` lists (AEA, FNC, ...)
    name: str  # family label, as printed in Table 2
    file_stem: str  # loader: the published JSONL file name without `.jsonl` (local and Hugging Face)
    kind: str  # "accuracy" (rule-based scorer) | "judge" (LLM-as-judge score)
    dimensions: tuple[str, ...]  # Table 2 "Evaluation Dimensions"
    table6_name: str | None  # the row name printed in Table 6 ("NER" for FNER); None: not in the paper
    scorer: Callable[..., scorers.ItemScore] | None = None
    official_rule: Callable[[str, str], float | None] | None = None
    gold_check: Callable[[str], Any] | None = None  # reads the gold at load: a bad one names file and line
    unscorable: Callable[[str], str | None] | None = None  # why the published rule can never score a gold 1
    script: str | None = None  # the authors' evaluation script (`bizfin.official_code_dir` runs it)
    rubric: JudgeRubric | None = None
    verdict_reader: Callable[[str], float | None] | None = None
    verdict_n: Callable[[str], int] = _once  # how many times the published script counts a verdict in N
    zero_verdict_outside_n: bool = False  # our rubric: a verdict scoring 0 leaves N (the published FQA rule)
    script_scale: float = 1.0  # the published judge script's batch mean per unit score (FTU's is on 0-100)
    full_mark_verdict: str | None = None  # a verdict the script scores 100: measures a 0 verdict's N beside it
    judge_view: Callable[[str, str], tuple[str, str]] | None = None  # (query, reply) -> what the judge sees
    samples: Path | None = None  # format samples; None: the package's `format_samples/sample_<abbrev>.jsonl`
    answer_version: str = BIZFIN_ANSWER_VERSION  # the answer prompt's version, part of every store key
    reply: Callable[[str, bool], str] = replies.free_text  # (gold, right) -> a reply in the task's format

    @property
    def paper(self) -> bool:
        """Whether the paper prints this task (Tables 2, 3 and 6 have its row and column)."""
        return self.table6_name is not None


def check_record(record: TaskRecord) -> TaskRecord:
    """A record complete for its kind; an incomplete one is an error naming the task and the field."""
    if record.kind not in KINDS:
        raise ValueError(f"task {record.abbrev}: kind {record.kind!r}; known: {KINDS}")
    need = ("scorer", "official_rule") if record.kind == "accuracy" else ("rubric", "verdict_reader")
    missing = [f for f in need if getattr(record, f) is None]
    if missing:
        raise ValueError(f"task {record.abbrev}: a {record.kind} task needs {', '.join(missing)}")
    if record.rubric is not None and record.rubric.task != record.abbrev:
        raise ValueError(f"task {record.abbrev}: its rubric is declared for {record.rubric.task}")
    return record


def _accuracy(abbrev, name, stem, dims, table6, scorer, rule, **kw) -> TaskRecord:
    return TaskRecord(abbrev, name, stem, "accuracy", dims, table6, scorer=scorer, official_rule=rule, **kw)


def _judge(abbrev, name, stem, dims, rubric, reader, script, **kw) -> TaskRecord:
    return TaskRecord(
        abbrev, name, stem, "judge", dims, abbrev, rubric=rubric, verdict_reader=reader, script=script, **kw
    )


TASKS: dict[str, TaskRecord] = {
    t.abbrev: check_record(t)
    for t in (
        _accuracy(
            "AEA",
            "Anomalous Event Attribution",
            "Anomalous_Event_Attribution",
            ("Causal consistency", "Information relevance", "Noise resistance"),
            "AEA",
            scorers.score_aea,
            published.aea,
            gold_check=scorers.parse_gold_indices,
            script="eval_AEA.py",
            reply=replies.news_indices,
        ),
        _accuracy(
            "FNC",
            "Financial Numerical Computation",
            "Financial_Numerical_Computation",
            ("Computational accuracy", "Unit consistency"),
            "FNC",
            scorers.score_fnc,
            published.fnc,
            script="eval_financial_calculation.py",
            reply=replies.answer_json,
        ),
        _accuracy(
            "FTR",
            "Financial Time Reasoning",
            "Financial_Time_Reasoning",
            ("Temporal reasoning correctness",),
            "FTR",
            scorers.score_ftr,
            published.ftr,
            script="eval_financial_timereason.py",
            reply=replies.answer_json,
        ),
        _judge(
            "FTU",
            "Financial Tool Usage",
            "Financial_Tool_Usage",
            ("Tool selection appropriateness", "Parameter input accuracy", "Multi-tool coordination"),
            FTU_RUBRIC,
            published.ftu_verdict,
            "eval_multi_tools_use.py",
            judge_view=published.ftu_judge_view,
            script_scale=100.0,
        ),
        _judge(
            "FQA",
            "Financial Knowledge QA",
            "Financial_Knowledge_QA",
            ("Question comprehension", "Knowledge coverage", "Answer accuracy"),
            FQA_RUBRIC,
            published.fqa_verdict,
            "eval_financial_encyclopedia.py",
            verdict_n=published.fqa_verdict_n,
            zero_verdict_outside_n=True,
        ),
        _judge(
            "FDD",
            "Financial Data Description",
            "Financial_Data_Description",
            ("Trend accuracy", "Data consistency"),
            FDD_RUBRIC,
            published.fdd_verdict,
            "eval_financial_description.py",
            verdict_n=published.fdd_verdict_n,
            full_mark_verdict='{"评分分数": "100", "描述": "完全正确"}',
        ),
        _accuracy(
            "ER",
            "Emotion Recognition",
            "Emotion_Recognition",
            ("Emotion classification accuracy", "Implicit information extraction"),
            "ER",
            scorers.score_er,
            published.er,
            gold_check=scorers.er_gold,
            script="eval_financial_sentiment.py",
            reply=replies.emotion_list,
        ),
        _accuracy(
            "SP",
            "Stock Price Prediction",
            "Stock_Price_Prediction",
            ("Trend judgment", "Causal reasoning"),
            "SP",
            scorers.score_sp,
            published.sp,
            script="eval_stock_prediction.py",
            reply=replies.price_direction,
        ),
        # Table 2 prints 435 FNER items, Table 6 and the published file 433: counts are checked against both.
        _accuracy(
            "FNER",
            "Financial Named Entity Recognition",
            "Financial_Named_Entity_Recognition",
            ("Recognition accuracy", "Entity classification correctness"),
            "NER",
            scorers.score_fner,
            published.fner,
            gold_check=scorers.fner_gold,
            unscorable=scorers.fner_unscorable,
            script="eval_fin_ner.py",
            reply=replies.entity_results,
        ),
    )
}

# The paper's nine families in Table 3's order (the paper's Average is their plain mean).
TASK_ORDER: tuple[str, ...] = tuple(a for a, t in TASKS.items() if t.paper)
JUDGE_TASKS: tuple[str, ...] = tuple(a for a in TASK_ORDER if TASKS[a].kind == "judge")


def register_task(record: TaskRecord) -> TaskRecord:
    """Declare one more task: checked, then listed after the others (its own Table 3 column)."""
    if record.abbrev in TASKS or record.abbrev == "Average":
        raise ValueError(f"task {record.abbrev!r} is declared already")
    TASKS[record.abbrev] = check_record(record)
    return record


def task_order() -> tuple[str, ...]:
    """Every declared task in column order: the paper's nine, then the ones registered after them."""
    return tuple(TASKS)


def task_info(abbrev: str) -> TaskRecord:
    """The record of one task; an unknown abbreviation is an error naming the known ones."""
    try:
        return TASKS[abbrev]
    except KeyError:
        raise KeyError(f"unknown BizFinBench task {abbrev!r}; known: {', '.join(TASKS)}") from None


def judge_rubric(task: str) -> JudgeRubric:
    """The rubric of a judge task; a task without one is an error naming the judge tasks."""
    rubric = TASKS[task].rubric if task in TASKS else None
    if rubric is None:
        raise KeyError(f"no judge rubric for task {task!r}; known: {sorted(judge_task_names())}")
    return rubric


def official_unscorable(task: str, gold: str) -> str | None:
    """Why the published rule can never score this gold 1 (None when it can), shown in the stage report."""
    check = task_info(task).unscorable
    return None if check is None else check(gold)


def check_tasks(tasks: list[str], where: str = "bizfin.tasks") -> list[str]:
    """Validate a params list of task abbreviations (order kept, duplicates refused)."""
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ValueError(f"{where}: unknown task(s) {unknown}; known: {', '.join(TASKS)}")
    if len(set(tasks)) != len(tasks):
        raise ValueError(f"{where}: duplicate tasks in {tasks}")
    return list(tasks)


def task_names() -> tuple[str, ...]:
    """The names `bizfin.tasks` may hold (registered below: checked at params load)."""
    return tuple(TASKS)


def judge_task_names() -> tuple[str, ...]:
    """The judge-scored task names (`bizfin.iterajudge.tasks` and `calibration_tasks` draw from them)."""
    return tuple(a for a, t in TASKS.items() if t.kind == "judge")


register_vocabulary("bizfin.tasks", task_names)
register_vocabulary("bizfin.iterajudge.tasks", judge_task_names)
register_vocabulary("bizfin.iterajudge.calibration_tasks", judge_task_names)
