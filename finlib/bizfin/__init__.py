"""BizFinBench (stage 07): the nine task families, their published scoring rules, Table 3 / Table 6.

Public entry point for one item: `score_item(task, item, prediction, judge=None) -> float`
(0..1; the published rule's score). Accuracy tasks use the rule-based scorers in
`finlib.bizfin.scorers`; judge tasks (FTU, FQA, FDD) call `judge`, a callable
`(JudgeInput) -> JudgeResult` (`finlib.bizfin.judge`), and return NaN when the judge's output
was invalid or the call failed: such an item is reported, never scored 0.
"""
from __future__ import annotations

import math
from typing import Callable

from finlib.bizfin.data import BizFinItem
from finlib.bizfin.scorers import ACCURACY_SCORERS, ItemScore
from finlib.bizfin.tasks import TASKS, task_info

DEFAULT_JUDGE_SCALE = (0, 100)


def judge_input(item: BizFinItem, prediction: str, item_id: str | None = None):
    """What the judge sees: the question, the answer (reasoning blocks stripped), the task's
    Table 2 dimensions, and the gold text as reference when the task has one."""
    from finlib.llm.answers import strip_think
    from finlib.bizfin.judge import JudgeInput

    return JudgeInput(id=item_id or item.id, task=item.task, question=item.question,
                      answer=strip_think(prediction or ""), dimensions=task_info(item.task).dimensions,
                      reference=item.gold or None)


def unit_score(score: float | None, scale: tuple[int, int] = DEFAULT_JUDGE_SCALE) -> float:
    """A judge score on its integer scale mapped to 0..1 (NaN when there is none)."""
    if score is None or not math.isfinite(float(score)):
        return math.nan
    lo, hi = scale
    return (float(score) - lo) / (hi - lo)


def score_item_detail(task: str, item: BizFinItem, prediction: str | None,
                      judge: Callable | None = None, scale: tuple[int, int] = DEFAULT_JUDGE_SCALE) -> ItemScore:
    """Official and our score of one prediction, whether it was parsed, and a note."""
    info = task_info(task)
    if item.task != task:
        raise ValueError(f"item {item.id} belongs to task {item.task}, not {task}")
    if info.kind == "judge":
        if judge is None:
            raise ValueError(f"{task} is judge-scored: pass judge=<callable JudgeInput -> JudgeResult>")
        res = judge(judge_input(item, prediction or ""))
        s = unit_score(res.score, scale) if res.status == "ok" else math.nan
        return ItemScore(s, s, res.status == "ok", None if res.score is None else str(res.score),
                         "" if res.status == "ok" else f"judge {res.status}: {res.note}")
    if prediction is None:
        return ItemScore(0.0, 0.0, False, None, "no answer (inference error)")
    return ACCURACY_SCORERS[task](item.gold, prediction)   # gold validated when the item was loaded


def score_item(task: str, item: BizFinItem, prediction: str | None, judge: Callable | None = None) -> float:
    """The published rule's score of one prediction (0..1; NaN for an invalid judge output)."""
    return score_item_detail(task, item, prediction, judge).official


__all__ = ["TASKS", "BizFinItem", "ItemScore", "score_item", "score_item_detail", "judge_input", "unit_score"]
