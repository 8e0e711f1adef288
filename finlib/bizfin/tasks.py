"""The nine BizFinBench task families as data: abbreviation -> published file, metric kind and
the judge's evaluation dimensions (BizFinBench Table 2).

A registry instead of `if task == ...` branches (the lm-eval / inspect_ai way): the loader, the
scorer and the stage look a task up here, so adding a task is one record. Order is Table 3's
column order, which the result tables keep.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskInfo:
    """One task family: where its items live and how they are scored."""

    abbrev: str                     # Table 3 column (AEA, FNC, ...)
    name: str                       # English name as printed in Table 2
    file_stem: str                  # published JSONL file name without `.jsonl` (local and Hugging Face)
    kind: str                       # "accuracy" (rule-based scorer) | "judge" (LLM-as-judge score)
    dimensions: tuple[str, ...]     # Table 2 "Evaluation Dimensions" (given to the judge)
    table6_name: str                # the row name printed in Table 6 ("NER" for FNER)


TASKS: dict[str, TaskInfo] = {t.abbrev: t for t in (
    TaskInfo("AEA", "Anomalous Event Attribution", "Anomalous_Event_Attribution", "accuracy",
             ("Causal consistency", "Information relevance", "Noise resistance"), "AEA"),
    TaskInfo("FNC", "Financial Numerical Computation", "Financial_Numerical_Computation", "accuracy",
             ("Computational accuracy", "Unit consistency"), "FNC"),
    TaskInfo("FTR", "Financial Time Reasoning", "Financial_Time_Reasoning", "accuracy",
             ("Temporal reasoning correctness",), "FTR"),
    TaskInfo("FTU", "Financial Tool Usage", "Financial_Tool_Usage", "judge",
             ("Tool selection appropriateness", "Parameter input accuracy", "Multi-tool coordination"), "FTU"),
    TaskInfo("FQA", "Financial Knowledge QA", "Financial_Knowledge_QA", "judge",
             ("Question comprehension", "Knowledge coverage", "Answer accuracy"), "FQA"),
    TaskInfo("FDD", "Financial Data Description", "Financial_Data_Description", "judge",
             ("Trend accuracy", "Data consistency"), "FDD"),
    TaskInfo("ER", "Emotion Recognition", "Emotion_Recognition", "accuracy",
             ("Emotion classification accuracy", "Implicit information extraction"), "ER"),
    TaskInfo("SP", "Stock Price Prediction", "Stock_Price_Prediction", "accuracy",
             ("Trend judgment", "Causal reasoning"), "SP"),
    # Table 2 prints 435 FNER items, Table 6 and the published file 433: counts are checked against both.
    TaskInfo("FNER", "Financial Named Entity Recognition", "Financial_Named_Entity_Recognition", "accuracy",
             ("Recognition accuracy", "Entity classification correctness"), "NER"),
)}

TASK_ORDER: tuple[str, ...] = tuple(TASKS)
JUDGE_TASKS: tuple[str, ...] = tuple(a for a, t in TASKS.items() if t.kind == "judge")


def task_info(abbrev: str) -> TaskInfo:
    """The record of one task; an unknown abbreviation is an error naming the known ones."""
    try:
        return TASKS[abbrev]
    except KeyError:
        raise KeyError(f"unknown BizFinBench task {abbrev!r}; known: {', '.join(TASK_ORDER)}") from None


def check_tasks(tasks: list[str], where: str = "bizfin.tasks") -> list[str]:
    """Validate a params list of task abbreviations (order kept, duplicates refused)."""
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ValueError(f"{where}: unknown task(s) {unknown}; known: {', '.join(TASK_ORDER)}")
    if len(set(tasks)) != len(tasks):
        raise ValueError(f"{where}: duplicate tasks in {tasks}")
    return list(tasks)


def task_names() -> tuple[str, ...]:
    """The names `bizfin.tasks` may hold (`finlib.core.params.VOCABULARIES`: checked at params load)."""
    return tuple(TASKS)


def judge_task_names() -> tuple[str, ...]:
    """The judge-scored task names (`bizfin.iterajudge.tasks` and `calibration_tasks` draw from them)."""
    return tuple(a for a, t in TASKS.items() if t.kind == "judge")
