"""LLM judges for BizFinBench's judge-scored tasks (FTU, FQA, FDD): the vanilla LLM-as-a-judge and
IteraJudge (BizFinBench Section 3.3, Eq. 1-2, Figure 4).

IteraJudge rewrites the evaluated answer one evaluation dimension at a time,
`y_k = refine(y_{k-1} || P(e_k, q))` with the question q in every step, and then asks the judge
to score the ORIGINAL answer against the fully refined `y_K`: `score(y) = judge(q, y, y_K, E)`.
The published code's judge client (`tools.ExternalApi`) was never released, so this module is
written from the paper; the choices it leaves open are named in `finlib/bizfin/prompts.py` (judge
section) and the README.

Every call goes through `finlib.llm.engine.chat`, so each refinement step is its own response-store
key (its messages contain y_{k-1}): an interrupted run resumes where it stopped without repeating a
finished step, costs are counted and the run's budget caps the spend. A judge reply that is not one
JSON object with an integer `score` inside the scale is "invalid" (kept with its raw text, never
scored 0); a failed call is "not_answered".
"""
from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from finlib.bizfin.iterajudge.rubrics import Rubrics
from finlib.llm import engine
from finlib.llm.engine import ChatItem
from finlib.llm.replies import read_json_objects, strip_think
from finlib.llm.spec import ModelSpec
from finlib.llm.store import ResponseStore

METHODS = ("vanilla", "iterajudge")
STATUSES = ("ok", "invalid", "not_answered")
DEFAULT_SCORE_RANGE = (0, 100)


@dataclass(frozen=True)
class JudgeInput:
    """One answer to judge: the task, the question q, the evaluated answer y, the task's evaluation
    dimensions E in the order they are applied, and the task's reference answer when it has one."""

    id: str
    task: str
    question: str
    answer: str
    dimensions: tuple[str, ...]
    reference: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.dimensions, tuple):
            object.__setattr__(self, "dimensions", tuple(self.dimensions))
        if not self.dimensions or not all(isinstance(d, str) and d.strip() for d in self.dimensions):
            raise ValueError(f"judge input {self.id!r} (task {self.task}): dimensions must be non-empty strings, "
                             f"got {self.dimensions!r}")
        for name in ("question", "answer"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"judge input {self.id!r} (task {self.task}): {name} must be a string")


@dataclass(frozen=True)
class JudgeResult:
    """The judge's verdict on one input. status: ok | invalid (the judge's reply could not be read:
    recorded, never scored) | not_answered (a call failed or was not sent)."""

    id: str
    score: float | None
    status: str
    raw_text: str | None
    note: str
    cost_usd: float = 0.0


@dataclass(frozen=True)
class Step:
    """One refinement step of IteraJudge: y_k for dimension e_k."""

    k: int
    dimension: str
    text: str | None
    status: str            # ok | error | empty
    error: str | None
    truncated: bool | None
    cost_usd: float
    cached: bool


@dataclass
class Trajectory:
    """IteraJudge's record for one input: y_0 (the answer), the steps y_1..y_K, the judge's raw
    reply and the parsed verdict."""

    input: JudgeInput
    steps: list[Step] = field(default_factory=list)
    judge_raw: str | None = None
    result: JudgeResult | None = None

    def texts(self) -> list[str]:
        """y_0..y_k as far as the refinement got."""
        return [self.input.answer] + [s.text for s in self.steps if s.status == "ok"]


_FTU_PUBLISHED_SCORE = re.compile(r"评分\s*：\s*\[?\s*\[?\s*(\d+)\s*\]?\s*\]?")
# Where each verdict format keeps its score: ours {"score": n}; the published FDD judge {"评分分数": "n"};
# the published FQA judge {"总评分": {"总分": x}}; the published FTU judge "评分：[[n]]" in prose.
SCORE_PATHS = {"json": ("score",), "fdd_published": ("评分分数",), "fqa_published": ("总评分", "总分")}


def _dig(obj: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return False, None
        obj = obj[key]
    return True, obj


def parse_judge_score(text: Any, score_range: tuple[int, int] = DEFAULT_SCORE_RANGE,
                      fmt: str = "json") -> tuple[float | None, str]:
    """(score, why) from a judge reply; score None means invalid.

    Strict on purpose: the reply must hold JSON object(s) whose score field (`fmt`: ours `score`, or
    where the published judge prompts put it) is an integer (a number with no fraction, or a string
    of digits; the published FQA total may carry decimals) inside the scale; several objects must
    agree. A number in prose ("I give it 80") is not read, except the published FTU judge's own
    "评分：[[n]]" line: a judge that cannot follow the output format is invalid, not guessed at.
    """
    if not isinstance(text, str) or not text.strip():
        return None, "empty reply"
    if fmt == "ftu_published":
        m = _FTU_PUBLISHED_SCORE.search(strip_think(text))
        if m is None:
            return None, "no '评分：[[n]]' line"
        value = int(m.group(1))
        lo, hi = score_range
        return (float(value), "published FTU line") if lo <= value <= hi else (None, f"score {value} outside {lo}..{hi}")
    if fmt not in SCORE_PATHS:
        raise ValueError(f"unknown judge verdict format {fmt!r}; known: {sorted(SCORE_PATHS) + ['ftu_published']}")
    scores = []
    # <think> blocks dropped first (scratch work is not the verdict); the whole verdict read, however long
    for obj in read_json_objects(text, max_chars=None):
        found, value = _dig(obj, SCORE_PATHS[fmt])
        if not found:
            continue
        if fmt == "fqa_published" and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = float(value)
            if value.is_integer():
                value = int(value)
        if isinstance(value, bool):
            return None, f"score is not an integer: {value!r}"
        if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            value = int(value)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) and not (fmt == "fqa_published" and isinstance(value, float)):
            return None, f"score is not an integer: {value!r}"
        scores.append(value)
    if not scores:
        return None, f"no JSON object with a {'.'.join(SCORE_PATHS[fmt])!r} key"
    if len(set(scores)) > 1:
        return None, f"conflicting scores {sorted(set(scores))}"
    lo, hi = score_range
    if not lo <= scores[0] <= hi:
        return None, f"score {scores[0]} outside {lo}..{hi}"
    return scores[0], "json"


def _check_inputs(inputs: list[JudgeInput]) -> None:
    seen: set[str] = set()
    for inp in inputs:
        if inp.id in seen:
            raise ValueError(f"duplicate judge input id {inp.id!r}: ids must be unique within a batch")
        seen.add(inp.id)


def _verdict(inp_id: str, row: Any, score_range: tuple[int, int], cost: float, fmt: str = "json") -> JudgeResult:
    """JudgeResult from one engine row (a judge call)."""
    if row["status"] != "ok":
        return JudgeResult(inp_id, None, "not_answered", None, f"judge call failed: {row['error']}", cost)
    score, why = parse_judge_score(row["raw_text"], score_range, fmt)
    if score is None:
        return JudgeResult(inp_id, None, "invalid", row["raw_text"], f"judge output unreadable: {why}", cost)
    note = "judge output cut at the token limit" if row["truncated_output"] else ""
    return JudgeResult(inp_id, float(score), "ok", row["raw_text"], note, cost)


def _chat(spec: ModelSpec, items: list[ChatItem], store: ResponseStore, max_new_tokens: int, **kw) -> pd.DataFrame:
    if not items:
        return pd.DataFrame(columns=engine.CHAT_COLUMNS)
    return engine.chat(spec, items, store, max_new_tokens=max_new_tokens, **kw)


def vanilla_judge(judge_spec: ModelSpec, store: ResponseStore, inputs: list[JudgeInput], *, budget=None,
                  max_new_tokens: int = 128, score_range: tuple[int, int] = DEFAULT_SCORE_RANGE,
                  progress: bool = True, model_cache: Path | None = None, log_dir: Path | None = None,
                  sampling: dict | None = None, rubrics: Rubrics | None = None) -> list[JudgeResult]:
    """The plain LLM-as-a-judge: one call per answer with the task's rubric (question, answer,
    dimensions, reference). `sampling` overrides the registry record's (e.g. temperature 0 for a
    judge); `rubrics` picks ours (default) or the published prompt files."""
    _check_inputs(inputs)
    rubrics = rubrics or Rubrics()
    calls = [rubrics.vanilla(i, score_range) for i in inputs]
    items = [ChatItem(f"{i.id}#judge", msgs, version) for i, (msgs, version, _) in zip(inputs, calls)]
    rows = _chat(judge_spec, items, store, max_new_tokens, budget=budget, progress=progress,
                 model_cache=model_cache, log_dir=log_dir, sampling=sampling, desc=f"{judge_spec.name} judges answers")
    return [_verdict(i.id, row, score_range, float(row["cost_usd"]), fmt)
            for i, (_, row), (_, _, fmt) in zip(inputs, rows.iterrows(), calls)]


def _step(k: int, dimension: str, row: Any) -> Step:
    if row["status"] != "ok":
        return Step(k, dimension, None, "error", str(row["error"]), None, float(row["cost_usd"]), bool(row["cached"]))
    text = strip_think(row["raw_text"] or "").strip()
    status, error = ("ok", None) if text else ("empty", "the refiner returned no text")
    return Step(k, dimension, text or None, status, error, row["truncated_output"], float(row["cost_usd"]),
                bool(row["cached"]))


def iterajudge(judge_spec: ModelSpec, store: ResponseStore, inputs: list[JudgeInput], *,
               refiner_spec: ModelSpec | None = None, budget=None, max_new_tokens: int = 128,
               refine_max_new_tokens: int | None = None, score_range: tuple[int, int] = DEFAULT_SCORE_RANGE,
               progress: bool = True, model_cache: Path | None = None, log_dir: Path | None = None,
               sampling: dict | None = None, rubrics: Rubrics | None = None) -> list[Trajectory]:
    """IteraJudge on a batch, returning each input's whole trajectory (y_0..y_K, judge raw reply,
    verdict).

    Step k is sent for all inputs still going as one batch (inputs with fewer dimensions stop
    earlier); an input whose step fails stops there ("not_answered"; the failed step is retried
    on the next run, the finished ones come from the store). The refiner defaults to the judge.
    """
    _check_inputs(inputs)
    rubrics = rubrics or Rubrics()
    refiner = refiner_spec or judge_spec
    refine_tokens = int(refine_max_new_tokens or max_new_tokens)
    trajs = [Trajectory(i) for i in inputs]
    kw = {"budget": budget, "progress": progress, "model_cache": model_cache, "log_dir": log_dir,
          "sampling": sampling}  # rubrics are applied here, not passed on
    for k in range(1, max(len(i.dimensions) for i in inputs) + 1 if inputs else 1):
        going = [t for t in trajs if len(t.input.dimensions) >= k and all(s.status == "ok" for s in t.steps)]
        if not going:
            break
        items = [ChatItem(f"{t.input.id}#refine{k}", *rubrics.refine(t.input, t.input.dimensions[k - 1], t.texts()[-1]))
                 for t in going]
        rows = _chat(refiner, items, store, refine_tokens, desc=f"{refiner.name} refines, dimension {k}", **kw)
        for t, (_, row) in zip(going, rows.iterrows()):
            t.steps.append(_step(k, t.input.dimensions[k - 1], row))
    ready = [t for t in trajs if len(t.steps) == len(t.input.dimensions) and all(s.status == "ok" for s in t.steps)]
    if ready:
        calls = [rubrics.contrastive(t.input, t.texts()[-1], score_range) for t in ready]
        items = [ChatItem(f"{t.input.id}#contrastive", msgs, version) for t, (msgs, version, _) in zip(ready, calls)]
        rows = _chat(judge_spec, items, store, int(max_new_tokens), desc=f"{judge_spec.name} contrastive judge", **kw)
        for t, (_, row), (_, _, fmt) in zip(ready, rows.iterrows(), calls):
            t.judge_raw = row["raw_text"]
            cost = float(row["cost_usd"]) + sum(s.cost_usd for s in t.steps)
            verdict = _verdict(t.input.id, row, score_range, cost, fmt)
            cut = [s.k for s in t.steps if s.truncated]
            if cut and verdict.status == "ok":
                note = "; ".join(x for x in (verdict.note, f"refinement cut at the token limit in step(s) {cut}") if x)
                verdict = dataclasses.replace(verdict, note=note)
            t.result = verdict
    for t in trajs:
        if t.result is None:
            bad = next(s for s in t.steps if s.status != "ok")
            status = "not_answered" if bad.status == "error" else "invalid"
            t.result = JudgeResult(t.input.id, None, status, None,
                                   f"refinement step {bad.k} ({bad.dimension}) failed: {bad.error}",
                                   sum(s.cost_usd for s in t.steps))
    return trajs


def judge_batch(judge_spec: ModelSpec, store: ResponseStore, inputs: list[JudgeInput], *, method: str = "vanilla",
                budget=None, max_new_tokens: int = 128, model_cache: Path | None = None, log_dir: Path | None = None,
                refiner_spec: ModelSpec | None = None, refine_max_new_tokens: int | None = None,
                score_range: tuple[int, int] = DEFAULT_SCORE_RANGE, progress: bool = True,
                sampling: dict | None = None, rubrics: Rubrics | None = None) -> list[JudgeResult]:
    """Judge a batch of answers with the vanilla judge or IteraJudge; one result per input, in order.

    `max_new_tokens` is the judge's output length, `refine_max_new_tokens` the refiner's (defaults
    to the judge's). For IteraJudge's trajectories call `iterajudge` with the same arguments:
    every call comes from the store, nothing is sent twice.
    """
    if method not in METHODS:
        raise ValueError(f"unknown judge method {method!r}; known: {METHODS}")
    kw = {"budget": budget, "max_new_tokens": max_new_tokens, "score_range": tuple(score_range),
          "progress": progress, "model_cache": model_cache, "log_dir": log_dir, "sampling": sampling,
          "rubrics": rubrics}
    if method == "vanilla":
        return vanilla_judge(judge_spec, store, inputs, **kw)
    trajs = iterajudge(judge_spec, store, inputs, refiner_spec=refiner_spec,
                       refine_max_new_tokens=refine_max_new_tokens, **kw)
    return [t.result for t in trajs]


def inline_diff(before: str, after: str, max_chars: int = 400) -> str:
    """The changed spans of a refinement step as `[-old-]{+new+}` chunks joined by ' … ' (character
    level: works for Chinese text without a tokenizer); '' when nothing changed. A rewrite that
    keeps less than half of the text is shown as one replacement (scattered one-character
    matches would only be noise)."""
    sm = difflib.SequenceMatcher(None, before, after, autojunk=False)
    if before != after and sm.ratio() < 0.5:
        out = f"[-{before}-]{{+{after}+}}"
        return out if len(out) <= max_chars else out[:max_chars] + "…"
    parts = []
    for op, a0, a1, b0, b1 in sm.get_opcodes():
        if op == "equal":
            continue
        old = f"[-{before[a0:a1]}-]" if a1 > a0 else ""
        new = f"{{+{after[b0:b1]}+}}" if b1 > b0 else ""
        parts.append(old + new)
    out = " … ".join(parts)
    return out if len(out) <= max_chars else out[:max_chars] + "…"


TRAJECTORY_COLUMNS = ["id", "task", "k", "dimension", "text", "step_status", "error", "truncated", "similarity",
                      "chars_added", "chars_removed", "diff", "cost_usd", "cached"]


def trajectories_frame(trajs: list[Trajectory]) -> pd.DataFrame:
    """Long table of every trajectory for the stage artifact: one row per y_k (k=0 is the original
    answer) with the per-dimension delta against y_{k-1} (similarity ratio, characters added and
    removed, the changed spans)."""
    rows = []
    for t in trajs:
        prev = t.input.answer
        rows.append({"id": t.input.id, "task": t.input.task, "k": 0, "dimension": None, "text": prev,
                     "step_status": "original", "error": None, "truncated": None, "similarity": 1.0,
                     "chars_added": 0, "chars_removed": 0, "diff": "", "cost_usd": 0.0, "cached": None})
        for s in t.steps:
            row = {"id": t.input.id, "task": t.input.task, "k": s.k, "dimension": s.dimension, "text": s.text,
                   "step_status": s.status, "error": s.error, "truncated": s.truncated, "similarity": None,
                   "chars_added": None, "chars_removed": None, "diff": None, "cost_usd": s.cost_usd,
                   "cached": s.cached}
            if s.text is not None:
                sm = difflib.SequenceMatcher(None, prev, s.text, autojunk=False)
                ops = sm.get_opcodes()
                row.update(similarity=round(sm.ratio(), 4),
                           chars_added=sum(b1 - b0 for op, _, _, b0, b1 in ops if op != "equal"),
                           chars_removed=sum(a1 - a0 for op, a0, a1, _, _ in ops if op != "equal"),
                           diff=inline_diff(prev, s.text))
                prev = s.text
            rows.append(row)
    return pd.DataFrame(rows, columns=TRAJECTORY_COLUMNS)


RESULT_COLUMNS = ["id", "task", "method", "judge", "score", "status", "note", "raw_text", "cost_usd"]


def results_frame(inputs: list[JudgeInput], results: list[JudgeResult], method: str, judge: str) -> pd.DataFrame:
    """One row per judged answer (for artifacts and counts of invalid / not answered)."""
    return pd.DataFrame([{"id": i.id, "task": i.task, "method": method, "judge": judge, "score": r.score,
                          "status": r.status, "note": r.note, "raw_text": r.raw_text, "cost_usd": r.cost_usd}
                         for i, r in zip(inputs, results)], columns=RESULT_COLUMNS)


def trajectory_summary(trajs: list[Trajectory]) -> pd.DataFrame:
    """One row per input: its verdict and, per dimension, how much that refinement changed
    (1 - similarity): the paper's "delta (y_K - y) reveals the dimensional deficiencies"."""
    frame = trajectories_frame(trajs)
    steps = frame[frame["k"] > 0]
    out = []
    for t in trajs:
        mine = steps[steps["id"] == t.input.id]
        row = {"id": t.input.id, "task": t.input.task, "score": t.result.score if t.result else None,
               "status": t.result.status if t.result else None}
        for _, s in mine.iterrows():
            row[f"change[{s['dimension']}]"] = None if s["similarity"] is None else round(1 - s["similarity"], 4)
        out.append(row)
    return pd.DataFrame(out)


def to_json(trajs: list[Trajectory]) -> list[dict]:
    """Trajectories as plain JSON-able dicts (for write_json / a viewer)."""
    return [{"id": t.input.id, "task": t.input.task, "question": t.input.question,
             "dimensions": list(t.input.dimensions), "y": t.texts(),
             "steps": [s.__dict__ for s in t.steps], "judge_raw": t.judge_raw,
             "result": None if t.result is None else t.result.__dict__} for t in trajs]


__all__ = ["JudgeInput", "JudgeResult", "Step", "Trajectory", "judge_batch", "vanilla_judge", "iterajudge",
           "parse_judge_score", "trajectories_frame", "trajectory_summary", "results_frame",
           "inline_diff", "to_json", "METHODS", "STATUSES"]
