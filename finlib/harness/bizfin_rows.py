"""BizFinBench items as harness samples, and stage 07's scores of the replies a harness got.

No harness import here. A rule-scored reply is scored by `score_item_detail` (the official, i.e.
authors', rule and the tolerant one, `official` and `ours`); a judged reply's verdict is read by
`parse_judge_score` and turned into both columns as stage 07 does (`official_judge_score`); the task
score is stage 07's `task_scores` (Eq.: mean over the scored items, a failed call outside N).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from finlib.bizfin import judge_input, score_item_detail, unit_score
from finlib.bizfin.benchmark.results import task_scores
from finlib.bizfin.benchmark.stage import official_judge_score
from finlib.bizfin.data import BizFinItem, load_format_samples, load_local
from finlib.bizfin.iterajudge.judge import JudgeResult
from finlib.bizfin.tasks import TASKS, task_info

NOT_ANSWERED = "not answered (the call ended in an error)"


def load_items(task: str, data_dir: str | Path | None = None) -> list[BizFinItem]:
    """A family's items: the published JSONL files of `data_dir` (stage 07's local folder), or the
    format samples shipped with the package when no folder is given (tests, a first look)."""
    task_info(task)
    loaded = load_local(Path(data_dir), [task]) if data_dir else load_format_samples([task])
    return list(loaded.get(task, []))


def item_record(item: BizFinItem) -> dict:
    """A JSON-safe record of an item (a harness sample's metadata)."""
    return {
        "task": item.task,
        "id": item.id,
        "line": item.line,
        "messages": [list(m) for m in item.messages],
        "gold": item.gold,
        "source": item.source,
    }


def item_of(record: Mapping) -> BizFinItem:
    """The item back from its record."""
    return BizFinItem(
        task=record["task"],
        id=record["id"],
        line=int(record["line"]),
        messages=tuple(tuple(m) for m in record["messages"]),
        gold=record["gold"],
        source=record["source"],
    )


def rule_row(record: Mapping, reply: str | None) -> dict:
    """Stage 07's item row of a rule-scored reply (None: the call failed, not answered)."""
    item = item_of(record)
    s = score_item_detail(item.task, item, reply)
    return {
        "task": item.task,
        "item_id": item.id,
        "source": item.source,
        "status": "ok" if reply is not None else "error",
        "parsed": s.parsed,
        "official": s.official,
        "ours": s.ours,
        "answer": s.answer,
        "note": s.note,
        "judge_status": None,
    }


def judged_row(record: Mapping, reply: str | None, verdict: JudgeResult | None, scale: tuple[int, int]) -> dict:
    """Stage 07's item row of a judged reply: `verdict` is the judge's result (None when there was no
    answer to judge); both columns as stage 07 computes them under the project's rubric."""
    item = item_of(record)
    base = {
        "task": item.task,
        "item_id": item.id,
        "source": item.source,
        "status": "ok" if reply is not None else "error",
    }
    if reply is None or verdict is None:
        return {
            **base,
            "parsed": False,
            "official": math.nan,
            "ours": math.nan,
            "answer": None,
            "note": NOT_ANSWERED,
            "judge_status": "no_answer",
        }
    ours = unit_score(verdict.score, scale) if verdict.status == "ok" else math.nan
    return {
        **base,
        "parsed": verdict.status == "ok",
        "official": official_judge_score(item.task, verdict, False, scale),
        "ours": ours,
        "answer": None if verdict.score is None else str(verdict.score),
        "note": verdict.note,
        "judge_status": verdict.status,
    }


def judge_question(record: Mapping, reply: str):
    """The judge's input for a reply, as stage 07 builds it (`finlib.bizfin.judge_input`)."""
    return judge_input(item_of(record), reply)


def family_scores(rows: Iterable[Mapping], model: str) -> dict[str, float]:
    """Stage 07's score of one family (`task_scores`, in percent) under both rules, with its N and
    counts, flat for a harness metric; an undefined value (no scored item yet) is left out."""
    items = pd.DataFrame(list(rows))
    if items.empty:
        return {}
    long = task_scores(items.assign(model=model), reps=0, seed=0)
    out: dict[str, float] = {}
    for rec in long[long["task"].isin(list(TASKS))].to_dict(orient="records"):
        rule = "tolerant" if rec["rule"] == "ours" else rec["rule"]
        out[rule] = float(rec["score"])
        out[f"{rule}_n"] = float(rec["n_scored"])
        out["n_items"], out["not_answered"] = float(rec["n_items"]), float(rec["not_answered"])
        out["parse_rate"], out["judge_invalid"] = float(rec["parse_rate"]), float(rec["judge_invalid"])
    return {k: v for k, v in out.items() if not math.isnan(v)}
