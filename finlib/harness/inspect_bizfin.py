"""BizFinBench's nine families as inspect_ai tasks: `inspect eval finlib/bizfinbench_fnc --model ...`.

One sample is one published item; the solver sends its messages as stage 07 does (empty system
turns dropped; for a model without a system role the system text joins the user turn). Rule-scored
families (AEA, FNC, FTR, ER, SP, FNER) get two scores per item, the authors' rule (`official`) and
the project's tolerant reading (`tolerant`); judge-scored families (FTU, FQA, FDD) are model-graded
with the project's judge prompts (`finlib.bizfin.iterajudge.rubrics.Rubrics`): the vanilla judge, or
IteraJudge (`judge_method="iterajudge"`: one refinement per evaluation dimension, then the
contrastive judge). The judge is inspect's `grader` role (`--model-role grader=...`), else the
evaluated model. The task metric is stage 07's `task_scores` (percent, a failed call outside N).
"""

from __future__ import annotations

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import GenerateConfig, Model, get_model
from inspect_ai.scorer import Metric, SampleScore, Score, Target, metric, scorer
from inspect_ai.solver import Generate, Solver, TaskState, solver

from finlib.bizfin.iterajudge.judge import DEFAULT_SCORE_RANGE, METHODS, JudgeResult, parse_judge_score
from finlib.bizfin.iterajudge.rubrics import Rubrics
from finlib.bizfin.tasks import TASKS, task_info
from finlib.harness.bizfin_rows import (
    family_scores,
    item_of,
    item_record,
    judge_question,
    judged_row,
    load_items,
    rule_row,
)
from finlib.harness.inspect_common import ask, generate_config, registry_record

REPLY = "bizfin_reply"


@solver
def item_reply(supports_system: bool, cache: bool) -> Solver:
    """Send the item's published messages; the reply record (or its error) goes to the store."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        msgs = item_of(state.metadata).chat_messages(supports_system)
        state.store.set(REPLY, await ask(get_model(), msgs, cache))
        return state

    return solve


@metric
def bizfin_scores(model: str) -> Metric:
    """Stage 07's family score under both rules, with N, not-answered and parse-rate counts."""

    def compute(scores: list[SampleScore]) -> dict[str, float]:
        rows = [s.score.metadata["row"] for s in scores if (s.score.metadata or {}).get("row")]
        return family_scores(rows, model)

    return compute


def _score(row: dict) -> Score:
    """A per-item score: both rules' values (None where the item is outside N) and stage 07's row."""
    value = {k: (None if row[k] != row[k] else float(row[k])) for k in ("official", "ours")}
    return Score(
        value={"official": value["official"], "tolerant": value["ours"]},
        answer=row["answer"],
        explanation=row["note"],
        metadata={"row": row},
    )


@scorer(metrics=[])
def rule_scorer() -> object:
    """The authors' rule and the tolerant one on the reply (`finlib.bizfin.score_item_detail`)."""

    async def score(state: TaskState, target: Target) -> Score:
        reply = state.store.get(REPLY, {})
        return _score(rule_row(state.metadata, reply.get("raw_text") if reply.get("status") == "ok" else None))

    return score


async def judge_verdict(
    judge: Model, inp, method: str, scale: tuple[int, int], config: GenerateConfig, cache: bool
) -> JudgeResult:
    """The vanilla judge's or IteraJudge's verdict on one answer, with the project's prompts and
    reader (`Rubrics`, `parse_judge_score`); a failed call is "not_answered", an unreadable verdict
    "invalid" (never scored 0), as `finlib.bizfin.iterajudge.judge` records them."""
    rubrics = Rubrics()
    if method == "vanilla":
        msgs, _, fmt = rubrics.vanilla(inp, scale)
    else:
        current = inp.answer
        for k, dimension in enumerate(inp.dimensions, start=1):
            step = await ask(judge, rubrics.refine(inp, dimension, current)[0], cache, config)
            if step["status"] != "ok" or not (step["raw_text"] or "").strip():
                status = "not_answered" if step["status"] != "ok" else "invalid"
                return JudgeResult(
                    inp.id,
                    None,
                    status,
                    None,
                    f"refinement step {k} ({dimension}) failed: {step['error'] or 'the refiner returned no text'}",
                )
            current = step["raw_text"].strip()
        msgs, _, fmt = rubrics.contrastive(inp, current, scale)
    rep = await ask(judge, msgs, cache, config)
    if rep["status"] != "ok":
        return JudgeResult(inp.id, None, "not_answered", None, f"judge call failed: {rep['error']}")
    value, why = parse_judge_score(rep["raw_text"], scale, fmt)
    if value is None:
        return JudgeResult(inp.id, None, "invalid", rep["raw_text"], f"judge output unreadable: {why}")
    return JudgeResult(inp.id, float(value), "ok", rep["raw_text"], "")


@scorer(metrics=[])
def judge_scorer(method: str, scale: tuple[int, int], max_new_tokens: int, cache: bool) -> object:
    """Model-graded: the judge (inspect's `grader` role, else the evaluated model) scores the reply."""

    async def score(state: TaskState, target: Target) -> Score:
        reply = state.store.get(REPLY, {})
        text = reply.get("raw_text") if reply.get("status") == "ok" else None
        verdict = None
        if text is not None:
            judge = get_model(role="grader", default=get_model())
            verdict = await judge_verdict(
                judge,
                judge_question(state.metadata, text),
                method,
                scale,
                GenerateConfig(max_tokens=max_new_tokens),
                cache,
            )
        return _score(judged_row(state.metadata, text, verdict, scale))

    return score


def bizfinbench(
    family: str,
    record: str,
    data_dir: str | None = None,
    registry: str = "params/models.yaml",
    max_new_tokens: int = 1024,
    temperature: float | None = None,
    judge_method: str = "vanilla",
    judge_max_new_tokens: int = 1024,
    cache: bool = True,
) -> Task:
    """One family's task for the registry `record` (system-role support, sampling, attempts,
    concurrency): the published files of `data_dir`, else the format samples shipped with the package.
    The answer budget is stage 07's (`bizfin.max_new_tokens`, 1,024 as in the paper, plus the record's
    reasoning tokens)."""
    info = task_info(family)
    if judge_method not in METHODS:
        raise ValueError(f"judge_method {judge_method!r}: known {METHODS}")
    spec = registry_record(record, registry)
    items = load_items(family, data_dir)
    if not items:
        raise ValueError(f"{data_dir or 'format samples'}: no {family} items")
    dataset = MemoryDataset(
        [Sample(input=it.question, id=it.id, metadata=item_record(it)) for it in items],
        name=f"bizfinbench_{family.lower()}",
    )
    scorer_ = (
        rule_scorer()
        if info.kind == "accuracy"
        else judge_scorer(judge_method, DEFAULT_SCORE_RANGE, judge_max_new_tokens, cache)
    )
    budget = int(max_new_tokens) + int(spec.reasoning_tokens or 0)
    return Task(
        dataset=dataset,
        solver=item_reply(spec.supports_system, cache),
        scorer=scorer_,
        metrics=[bizfin_scores(spec.name)],
        config=generate_config(spec, budget, temperature),
        name=f"bizfinbench_{family.lower()}",
    )


def _family_task(family: str):
    """An inspect task function for one family (registered as `bizfinbench_<family>`)."""

    def make(
        record: str,
        data_dir: str | None = None,
        registry: str = "params/models.yaml",
        max_new_tokens: int = 1024,
        temperature: float | None = None,
        judge_method: str = "vanilla",
        judge_max_new_tokens: int = 1024,
        cache: bool = True,
    ) -> Task:
        return bizfinbench(
            family, record, data_dir, registry, max_new_tokens, temperature, judge_method, judge_max_new_tokens, cache
        )

    make.__doc__ = f"BizFinBench {TASKS[family].name} ({family}): see `finlib.harness.inspect_bizfin.bizfinbench`."
    return task(name=f"bizfinbench_{family.lower()}")(make)


FAMILY_TASKS = {f"bizfinbench_{f.lower()}": _family_task(f) for f in TASKS}
