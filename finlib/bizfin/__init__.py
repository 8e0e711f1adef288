"""BizFinBench: stage 07 (`benchmark/`: nine task families, Tables 3 and 6), stage 08 (`iterajudge/`: Table 4).

Public entry point for one item: `score_item(task, item, prediction, judge=None) -> float`
(0..1; the published rule's score). `item` is a loaded `BizFinItem` or the published record itself
(the dict of one benchmark JSONL line), validated the same way. Accuracy tasks use the rule-based scorers in
`finlib.bizfin.scorers`; judge tasks (FTU, FQA, FDD) call `judge`, a callable
`(JudgeInput) -> JudgeResult` (`finlib.bizfin.iterajudge.judge`), and return NaN when the judge's output
was invalid or the call failed: such an item is reported, never scored 0.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from finlib.bizfin.data import BizFinItem, parse_record
from finlib.bizfin.scorers import ItemScore
from finlib.bizfin.tasks import TASKS, task_info

DEFAULT_JUDGE_SCALE = (0, 100)


def judge_input(item: BizFinItem, prediction: str, item_id: str | None = None, verbatim: bool = False):
    """What the judge sees: the question, the answer (reasoning blocks stripped), the task's rubric
    dimensions in the authors' order, and the gold text as reference when the task has one. A task record
    with a `judge_view` shows what it extracts instead (FTU: the user segment of the query and the reply's
    `Actions`, as the authors' `data_preprocess` does, `finlib.bizfin.official.ftu_judge_view`). `verbatim`
    (the published rubric): the reply as written, `<think>` included, as the authors' `data_preprocess`
    passes it."""
    from finlib.bizfin.iterajudge.judge import JudgeInput
    from finlib.bizfin.iterajudge.rubrics import dimensions_for
    from finlib.llm.replies import strip_think

    question, answer = item.question, (prediction or "") if verbatim else strip_think(prediction or "")
    view = task_info(item.task).judge_view
    if view is not None:
        question, answer = view(item.question, prediction or "")
    return JudgeInput(id=item_id or item.id, task=item.task, question=question, answer=answer,
                      dimensions=dimensions_for(item.task), reference=item.gold or None)


def unit_score(score: float | None, scale: tuple[int, int] = DEFAULT_JUDGE_SCALE) -> float:
    """A judge score on its integer scale mapped to 0..1 (NaN when there is none)."""
    if score is None or not math.isfinite(float(score)):
        return math.nan
    lo, hi = scale
    return (float(score) - lo) / (hi - lo)


def as_item(task: str, item: BizFinItem | dict[str, Any]) -> BizFinItem:
    """A loaded item, or a published record (one JSONL line as a dict) validated like a file line."""
    if isinstance(item, BizFinItem):
        return item
    if isinstance(item, dict):
        return parse_record(item, task, 0, "<record passed to score_item>", "benchmark")
    raise TypeError(f"item must be a BizFinItem or the published record (dict), got {type(item).__name__}")


def score_item_detail(task: str, item: BizFinItem | dict[str, Any], prediction: str | None,
                      judge: Callable | None = None, scale: tuple[int, int] = DEFAULT_JUDGE_SCALE) -> ItemScore:
    """Official and our score of one prediction, whether it was parsed, and a note. A prediction of
    None (the call ended in an error) is not answered: NaN under every rule, never a wrong answer."""
    info = task_info(task)
    item = as_item(task, item)
    if item.task != task:
        raise ValueError(f"item {item.id} belongs to task {item.task}, not {task}")
    if prediction is None:
        return ItemScore(math.nan, math.nan, False, None, "not answered (the call ended in an error)")
    if info.kind == "judge":
        if judge is None:
            raise ValueError(f"{task} is judge-scored: pass judge=<callable JudgeInput -> JudgeResult>")
        res = judge(judge_input(item, prediction))
        s = unit_score(res.score, scale) if res.status == "ok" else math.nan
        return ItemScore(s, s, res.status == "ok", None if res.score is None else str(res.score),
                         "" if res.status == "ok" else f"judge {res.status}: {res.note}")
    return info.scorer(item.gold, prediction, item.question)   # gold validated at load time


def score_item(task: str, item: BizFinItem | dict[str, Any], prediction: str | None,
               judge: Callable | None = None) -> float:
    """The published rule's score of one prediction (0..1; NaN for an invalid judge output)."""
    return score_item_detail(task, item, prediction, judge).official


__all__ = ["TASKS", "BizFinItem", "ItemScore", "as_item", "score_item", "score_item_detail", "judge_input", "unit_score"]
