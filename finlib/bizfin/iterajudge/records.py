"""What IteraJudge knows of each judge-scored task, one declared record per task (beside its `TaskRecord`,
`finlib.bizfin.tasks`, keyed by the same name): the authors' prompt files and how their judge writes its
verdict (`finlib.bizfin.iterajudge.rubrics` reads them), and the judge-calibration study's reference set (the
rubric points each error kind costs, the ladder of injected errors, the case builder) that
`finlib.bizfin.iterajudge.calibration` scores and `reference_set` writes. Table 4's columns are the tasks
with a reference set, in declaration order. Adding a task's IteraJudge facts is one `IteraJudgeRecord`
passed to `register_iterajudge`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from finlib.bizfin.iterajudge import cases

CODE = "benchmark_code/BizFinBench"  # the authors' evaluation scripts inside their repository


@dataclass(frozen=True)
class IteraJudgeRecord:
    """One judge task's IteraJudge facts. `published`: (role, file, variable) of each template the authors
    publish, roles `vanilla`, `refine:<our dimension name>` (in the authors' revision order) and
    `contrastive`; `answer_field`: the field their vanilla template fills with the reply. `weights`: the
    rubric points each error kind costs, lost once per kind (the reference score's rule); `ladder`: the
    error patterns every question is answered with, best to worst; `cases`: n -> n (question, answer maker)."""

    task: str
    published: tuple[tuple[str, str, str], ...] = ()
    verdict_format: str | None = None  # how the published judge writes its verdict (judge.parse_judge_score)
    answer_field: str = "predict_result"
    weights: tuple[tuple[str, int], ...] = ()
    ladder: tuple[dict[str, int], ...] = ()
    cases: Callable[[int], list[cases.Case]] | None = None

    @property
    def calibrated(self) -> bool:
        """Whether the task has a reference set (a Table 4 column)."""
        return bool(self.weights)


ITERAJUDGE: dict[str, IteraJudgeRecord] = {
    r.task: r
    for r in (
        # The rule follows the rubric the judges are given (ours and the published one say the same), so a judge
        # applying it perfectly ranks the answers as the reference does (Spearman 1): a wrong trend -> 0; else a
        # wrong number -> 60; else 100 (a day left out contradicts no datum: the rubric deducts for contradictions).
        IteraJudgeRecord(
            "FDD",
            published=(("vanilla", f"{CODE}/eval_financial_description.py", "prompt"),
                       ("refine:数据一致性", f"{CODE}/eval_financial_description_revise.py", "prompt_1"),
                       ("refine:趋势准确性", f"{CODE}/eval_financial_description_revise.py", "prompt_2"),
                       ("contrastive", f"{CODE}/eval_financial_description_revise.py", "prompt_judge")),
            verdict_format="fdd_published",
            weights=(("trend", 100), ("number", 40), ("omission", 0)),
            ladder=({}, {"omission": 1}, {"number": 1}, {"number": 2}, {"trend": 1}, {"trend": 1, "number": 1},
                    {"trend": 2}),
            cases=cases.fdd_cases,
        ),
        # Tool choice 30 + parameters 20 + effectiveness 50: a wrong tool costs the 30, a wrong parameter value
        # the 20, an incomplete plan (a required call dropped) the 50.
        IteraJudgeRecord(
            "FTU",
            published=(("vanilla", f"{CODE}/eval_multi_tools_use.py", "prompt_judge"),),
            verdict_format="ftu_published",
            answer_field="answer",  # get_prompt's (question, answer)
            weights=(("tool", 30), ("param", 20), ("coordination", 50)),
            ladder=({}, {"param": 1}, {"coordination": 1}, {"tool": 1}, {"param": 1, "coordination": 1},
                    {"tool": 1, "param": 1}, {"tool": 1, "coordination": 1}),
            cases=cases.ftu_cases,
        ),
        IteraJudgeRecord(
            "FQA",
            published=(("vanilla", f"{CODE}/eval_financial_encyclopedia.py", "prompt"),),
            verdict_format="fqa_published",
        ),
    )
}


def register_iterajudge(record: IteraJudgeRecord) -> IteraJudgeRecord:
    """Declare one more task's IteraJudge facts (after the others: its own Table 4 column if calibrated)."""
    if record.task in ITERAJUDGE:
        raise ValueError(f"IteraJudge record {record.task!r} is declared already")
    if record.calibrated and (record.cases is None or not record.ladder):
        raise ValueError(f"IteraJudge record {record.task}: a reference set needs weights, ladder and cases")
    ITERAJUDGE[record.task] = record
    return record


def iterajudge_record(task: str) -> IteraJudgeRecord:
    """The task's record; a judge task without one has no published prompts and no reference set."""
    return ITERAJUDGE.get(task, IteraJudgeRecord(task))


def calibration_tasks() -> tuple[str, ...]:
    """The tasks with a reference set, in declaration order: Table 4's columns."""
    return tuple(t for t, r in ITERAJUDGE.items() if r.calibrated)


def rule_weights(task: str) -> dict[str, int]:
    """Error kind -> the rubric points it costs; a task without a reference set is an error naming those with one."""
    record = ITERAJUDGE.get(task)
    if record is None or not record.calibrated:
        raise KeyError(f"no reference set for task {task!r} (have {', '.join(calibration_tasks())})")
    return dict(record.weights)


def published_prompts() -> dict[str, dict[str, tuple[str, str]]]:
    """task -> role -> (file, variable) of every published template this project uses."""
    return {t: {role: (f, var) for role, f, var in r.published} for t, r in ITERAJUDGE.items() if r.published}
