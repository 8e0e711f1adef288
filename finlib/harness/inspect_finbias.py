"""Fin-Bias herding as an inspect_ai task: `inspect eval finlib/finbias_herding --model ...`.

One sample is one report with all of its conditions (original, no rating, no opinion, fake rating),
so `--limit N` is N whole reports and a failed call never drops the report's other conditions. The
solver sends the project's prompt (`finlib.finbias.prompts.build_messages`, the authors' by default)
for each condition with the registry record's sampling and output limit; a call that still fails
after the record's attempts is the project's "not answered" (outside N, counted), exactly as stage 03
stores it. The metric hands every reply to stage 04 (`finlib.harness.finbias_rows.herding_statistics`)
and tolerates partial input (inspect computes metrics of unfinished evals for its display).

inspect's own defaults that this task replaces, measured against a stub server: unlimited retries
(here `max_retries` = the record's attempts - 1, `timeout` = its timeout), concurrency that adapts to
40-52 requests in flight (here `max_connections` = the record's concurrency), and a response cache
that does not rely on the CLI's `--cache` reaching calls inside a custom solver (here a `CachePolicy` passed to
every call, task option `cache`). Epochs: the paired statistic takes one answer per item, the first
epoch's (`first_epoch` reducer); further epochs only spend calls -- the project's k draws are stage 09's.
"""

from __future__ import annotations

from inspect_ai import Epochs, Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import get_model
from inspect_ai.scorer import Metric, SampleScore, Score, ScoreReducer, Target, metric, score_reducer, scorer
from inspect_ai.solver import Generate, Solver, TaskState, solver

from finlib.finbias.prompts import PROMPT_VERSION, build_messages
from finlib.harness.finbias_rows import herding_statistics, item_answers, read_run, report_samples
from finlib.harness.inspect_common import ask, generate_config, registry_record

REPLIES = "finbias_replies"  # the sample store's key for item_id -> reply record


@solver
def condition_replies(supports_system: bool, prompt_version: str, cache: bool) -> Solver:
    """Send every condition of the report; each reply (or the error that ended its attempts) is
    stored per item, so the scorer sees all conditions, answered or not."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        model = get_model()
        replies: dict[str, dict] = {}
        for it in state.metadata["items"]:
            if it["status"] == "ok":
                msgs = build_messages(it["text"], supports_system, prompt_version)
                replies[it["item_id"]] = await ask(model, msgs, cache)
        state.store.set(REPLIES, replies)
        return state

    return solve


def _without_text(sample: dict) -> dict:
    return {**sample, "items": [{k: v for k, v in it.items() if k != "text"} for it in sample["items"]]}


@metric
def finbias_statistics(model: str) -> Metric:
    """Stage 04's pooled statistics (Eq. 1 per condition, counts, McNemar and Stuart-Maxwell rows)
    of every scored report so far."""

    def compute(scores: list[SampleScore]) -> dict[str, float]:
        samples, replies = [], {}
        for s in scores:
            meta = s.score.metadata or {}
            if "sample" in meta:
                samples.append(meta["sample"])
                replies.update(meta["replies"])
        return herding_statistics(samples, replies, model) if samples else {}

    return compute


@score_reducer(name="first_epoch")
def first_epoch() -> ScoreReducer:
    """The first epoch's score of a sample: the paired design takes one answer per item."""

    def reduce(scores: list[Score]) -> Score:
        return scores[0]

    return reduce


@scorer(metrics=[])
def herding_scorer(model: str) -> object:
    """Per report: each item's answer as stage 04 reads it; the replies ride along for the metric."""

    async def score(state: TaskState, target: Target) -> Score:
        sample = _without_text(state.metadata)
        replies = state.store.get(REPLIES, {})
        answers = item_answers([sample], replies, model)
        return Score(
            value=answers,
            answer=" ".join(f"{k}={v}" for k, v in answers.items()),
            metadata={"sample": sample, "replies": replies},
        )

    return score


@task
def finbias_herding(
    data_dir: str,
    record: str,
    registry: str = "params/models.yaml",
    prompt_version: str = PROMPT_VERSION,
    max_new_tokens: int | None = None,
    cache: bool = True,
) -> Task:
    """Fin-Bias herding on a run's processed folder (`data/processed/<run>/`, stages 00-02; an
    absolute path: inspect runs a file's task from the file's folder) for
    the registry `record` (its system-role support, sampling, output limit, attempts, concurrency).
    Pass the model as inspect names it, e.g. `--model openai-api/<service>/<model_id>`."""
    spec = registry_record(record, registry)
    samples = report_samples(*read_run(data_dir))
    dataset = MemoryDataset(
        [Sample(input=s["report_id"], id=s["report_id"], metadata=s) for s in samples], name="finbias_herding"
    )
    return Task(
        dataset=dataset,
        solver=condition_replies(spec.supports_system, prompt_version, cache),
        scorer=herding_scorer(spec.name),
        metrics=[finbias_statistics(spec.name)],
        config=generate_config(spec, max_new_tokens),
        epochs=Epochs(1, first_epoch()),
        name="finbias_herding",
    )
