"""The constructed reference set of the judge-calibration study (FDD and FTU): fictional questions,
answers of graded quality made by injecting counted errors into a correct answer, and a reference
score from the stated rule (each task's IteraJudge record's `weights`, `finlib.bizfin.iterajudge.records`).

Why constructed: the paper's expert scores are not public. Why by rule: every answer's quality is
known exactly (which errors, how many), so the reference ranking is not one more judge's opinion.
Each question gets the same ladder of error patterns (its IteraJudge record's `ladder`,
`finlib.bizfin.iterajudge.records`), so the set spans the whole scale.

The shipped files `format_samples/calibration_<TASK>.jsonl` are this module's output
(`python -m finlib.bizfin.iterajudge.reference_set` rewrites them; a test checks they are unchanged).
"""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from finlib.bizfin.iterajudge.calibration import rule_score
from finlib.bizfin.iterajudge.records import calibration_tasks, iterajudge_record

NOTE = ("calibration reference set constructed for this repository (NOT the paper's expert scores, which are not "
        "public): fictional questions, answers made by injecting the counted errors into a correct answer; "
        "reference_score by rule from the errors (finlib.bizfin.iterajudge.calibration.RULES)")

QUESTIONS_PER_TASK = 20   # enough questions for a question-clustered bootstrap interval to keep its coverage


def build(task: str) -> list[dict]:
    """Every reference answer of a task, in file order: each of its record's questions answered with each
    pattern of its ladder."""
    record = iterajudge_record(task)
    if not record.calibrated or record.cases is None:
        raise KeyError(f"no reference set for task {task!r} (have {', '.join(calibration_tasks())})")
    rows = []
    for q, (question, make) in enumerate(record.cases(QUESTIONS_PER_TASK), 1):
        for a, errors in enumerate(record.ladder, 1):
            rows.append({"id": f"{task}-q{q}-a{a}", "task": task, "question_id": f"{task}-q{q}",
                         "question": question, "answer": make(errors), "errors": dict(errors),
                         "reference_score": rule_score(task, errors), "_note": NOTE})
    return rows


def render(task: str) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in build(task))


def main() -> int:
    root = Path(str(resources.files("finlib.bizfin") / "format_samples"))
    for task in calibration_tasks():
        (root / f"calibration_{task}.jsonl").write_text(render(task), encoding="utf-8")
        print(f"wrote {root / f'calibration_{task}.jsonl'} ({len(build(task))} answers)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
