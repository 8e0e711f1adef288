"""Stage 07: BizFinBench — load items, ask the models through the engine, score, write tables.

Flow: items (real files where present, else the format samples) -> `engine.chat` per model
(response store: cached, resumable, cost-counted) -> accuracy tasks scored by the published
rules (and ours beside them) -> judge tasks scored by the vanilla LLM-as-judge
(`finlib.bizfin.iterajudge.judge`) -> item-level artifact `bizfin_items.parquet` -> Table 3 and Table 6
(`finlib.bizfin.benchmark.results`). The stage contract (`finlib.core.stage`): `SECTION`, `run(cfg)`,
`summary(cfg, result)`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from finlib.bizfin import score_item_detail, unit_score
from finlib.bizfin.data import BizFinItem, check_counts, load_format_samples, load_huggingface, load_local
from finlib.bizfin.official import official_label
from finlib.bizfin.prompts import BIZFIN_ANSWER_VERSION
from finlib.bizfin.scorers import ItemScore
from finlib.bizfin.tasks import TASKS, check_tasks, judge_task_names, official_unscorable, task_info
from finlib.core.artifacts import write_frame, write_json
from finlib.core.config import ConfigError, RunConfig
from finlib.llm.engine import ChatItem, chat
from finlib.llm.registry import run_registry, select_models
from finlib.llm.replies import cut_in_think, strip_think
from finlib.llm.spec import ModelSpec

SECTION = "bizfin"
NOTEBOOK_API = ("bizfin_params", "item_view")  # what notebook 07 calls besides `run` and `summary`
SCORES_TABLE = "bizfin_table3_ci"  # Table 3 in long form with N and intervals: the run's results file reads it
TABLES = ("rules", "table3", "table3_long", "table6")  # the tables of `result.tables` notebook 07 shows by name
# the keys of `result.report` notebook 07 reads
REPORT_KEYS = ("answer_status", "cost_usd", "counts", "judge_status", "official_rule_unscorable_gold")
ITEM_COLUMNS = ["model", "task", "kind", "item_id", "source", "status", "parsed", "official", "official_n", "ours",
                "answer", "note", "judge_status", "scoring_error", "raw_text", "input_tokens", "output_tokens",
                "reasoning_tokens", "cost_usd", "cached"]


@dataclass
class BizFinResult:
    """What stage 07 produced: item-level scores, the items asked, and the stage report."""

    items: pd.DataFrame
    asked: dict[str, list[BizFinItem]]
    loaded: dict[str, list[BizFinItem]]
    report: dict = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)   # Table 3 (wide, long), rules, Table 6


def bizfin_params(cfg: RunConfig) -> dict:
    """The `bizfin:` section, checked by the params schema (`finlib.core.params.BizfinSection`: every key
    present, sources, selections, counts), then what only BizFinBench knows: its task names, the
    published code and rubrics folders."""
    p = cfg.section("bizfin")
    if p["official_code_dir"] is not None:
        from finlib.bizfin.authors_code import AuthorsCode, AuthorsCodeError

        try:
            AuthorsCode(cfg.path(p["official_code_dir"]))
        except AuthorsCodeError as exc:
            raise ConfigError(f"{cfg.params_file}: bizfin.official_code_dir: {exc}") from None
    rubrics = rubrics_root(cfg, p)
    if rubrics is not None:
        from finlib.bizfin.iterajudge.rubrics import check_rubrics_dir

        check_rubrics_dir(rubrics, f"{cfg.params_file}: bizfin.rubrics_dir")
    check_tasks(list(p["tasks"]), "bizfin.tasks")
    return p


def judge_scale(p: dict) -> tuple[int, int]:
    """The judge's integer score scale: `bizfin.iterajudge.score_range` (one scale for both judges;
    params/default.yaml: the paper's 0-100)."""
    rng = p["iterajudge"]["score_range"]
    return int(rng[0]), int(rng[1])


def sampling_for(spec: ModelSpec, p: dict) -> dict | None:
    """The answer sampling: the registry record's, with `bizfin.temperature` when set (the paper: 0)."""
    if p["temperature"] is None or not spec.accepts_temperature:
        return None if p["temperature"] is None else dict(spec.sampling)
    return {**spec.sampling, "temperature": float(p["temperature"])}


def max_new_tokens_for(spec: ModelSpec, p: dict) -> int:
    """The answer budget: `bizfin.max_new_tokens` for the answer, plus the record's `reasoning_tokens`
    for a model that reasons before answering (its reasoning counts against the same output limit)."""
    return int(p["max_new_tokens"]) + int(spec.reasoning_tokens or 0)


def load_items(cfg: RunConfig, p: dict) -> tuple[dict[str, list[BizFinItem]], dict]:
    """Every available item per task: the real files for the tasks they cover, the format samples
    for the rest (source `auto`), and a report saying which task came from where."""
    tasks = list(p["tasks"])
    real: dict[str, list[BizFinItem]] = {}
    if p["source"] in ("auto", "local"):
        folder = cfg.path(p["data_dir"])
        real = load_local(folder, tasks) if folder.is_dir() else {}
        if p["source"] == "local" and not real:
            raise FileNotFoundError(f"bizfin.source: local, but no task file (e.g. {task_info(tasks[0]).file_stem}"
                                    f".jsonl) in {folder}. Link or copy the published JSONL files there.")
    elif p["source"] == "huggingface":
        real = load_huggingface(tasks, p["hf_dataset"], p["hf_revision"])
    rest = [t for t in tasks if t not in real] if p["source"] in ("auto", "format_sample") else []
    samples = load_format_samples(rest)
    loaded = {t: real.get(t) or samples.get(t) for t in tasks if t in real or t in samples}
    missing = [t for t in tasks if t not in loaded]
    counts = check_counts(loaded)
    unscorable = {t: sum(official_unscorable(t, it.gold) is not None for it in its) for t, its in real.items()}
    report = {"source_param": p["source"], "tasks_from_files": sorted(real, key=tasks.index),
              "tasks_from_format_samples": sorted(samples, key=tasks.index), "tasks_missing": missing,
              "counts": counts.to_dict(orient="records"), "official_rule_unscorable_gold": unscorable}
    return loaded, report


def select_items(loaded: dict[str, list[BizFinItem]], p: dict) -> dict[str, list[BizFinItem]]:
    """The items asked this run: `real_items_per_task` benchmark items (the shortest queries or
    the first ones: `item_selection`) and `sample_items_per_task` format samples; null = all."""
    out = {}
    for t, its in loaded.items():
        n = p["real_items_per_task"] if its and its[0].source == "benchmark" else p["sample_items_per_task"]
        order = sorted(its, key=lambda i: (len(i.query_text()), i.line)) if p["item_selection"] == "shortest" else its
        out[t] = list(order if n is None else order[:n])
    return out


def rubrics_root(cfg: RunConfig, p: dict):
    """Where the published judge prompts are read: `bizfin.rubrics_dir`, else the checkout named by
    `bizfin.official_code_dir` (a run scored by the authors' code is judged with their rubrics), else
    None (our rubric)."""
    folder = p.get("rubrics_dir") or p.get("official_code_dir")
    return None if folder is None else cfg.path(folder)


def run_rubrics(cfg: RunConfig, p: dict):
    """The judge rubric of this run: ours, or the published prompt files (see `rubrics_root`)."""
    from finlib.bizfin.iterajudge.rubrics import Rubrics

    return Rubrics.from_dir(rubrics_root(cfg, p))


def authors_code(cfg: RunConfig, p: dict):
    """The authors' scripts when `bizfin.official_code_dir` names a checkout (None: the re-implementation)."""
    if p.get("official_code_dir") is None:
        return None
    from finlib.bizfin.authors_code import AuthorsCode

    return AuthorsCode(cfg.path(p["official_code_dir"]))


def rubric_source(cfg: RunConfig, p: dict) -> str:
    """What the captions say about the judge rubric."""
    return run_rubrics(cfg, p).label()


def _judge_fn(judge_spec: ModelSpec, store, p: dict, budget, inf: dict, cfg: RunConfig):
    """A batch judge with everything but the inputs fixed (the stage's vanilla judge, sampled at
    `bizfin.temperature` like the answers)."""
    from finlib.bizfin.iterajudge.judge import judge_batch

    rubrics = run_rubrics(cfg, p)

    def run(inputs):
        return judge_batch(judge_spec, store, inputs, method="vanilla", budget=budget,
                           max_new_tokens=int(p["judge_max_new_tokens"]), score_range=judge_scale(p),
                           model_cache=cfg.path(inf["model_cache"]), log_dir=cfg.run_dir / "logs",
                           progress=bool(inf["progress"]), sampling=sampling_for(judge_spec, p),
                           rubrics=rubrics)
    return run


def official_judge_score(task: str, res, published_rubric: bool, scale: tuple[int, int]) -> float:
    """The official column of a judged answer. Under the published rubric: the published script's reading
    of the raw verdict (the task record's `verdict_reader`; FDD, FTU: an unreadable verdict is 0 inside N;
    FQA: a total not above 0 is left out of N). Under our rubric (no published verdict to read): our reading
    with that same N rule (`zero_verdict_outside_n`)."""
    info = task_info(task)
    if res.status == "not_answered":
        return math.nan
    if published_rubric:
        v = info.verdict_reader(res.raw_text or "")
        return math.nan if v is None else float(v)
    s = unit_score(res.score, scale) if res.status == "ok" else 0.0
    if info.zero_verdict_outside_n and not s > 0:
        return math.nan
    return s


OUT_OF_BUDGET = "out_of_budget_reasoning"
OUT_OF_BUDGET_NOTE = ("the output budget ran out while reasoning (empty or null content at the limit, or an "
                      "unclosed <think>): not answered")


def ran_out_while_reasoning(text, truncated_output) -> bool:
    """One status however the server returns it: a reply that ends inside an unclosed `<think>`, or one
    cut at the output limit with nothing outside its reasoning (empty content; null content, which the
    backend stores as empty)."""
    if cut_in_think(text):
        return True
    at_limit = truncated_output is not None and not pd.isna(truncated_output) and bool(truncated_output)
    return at_limit and (text is None or not strip_think(str(text)))


def guarded_score(task: str, item: BizFinItem, text: str | None):
    """(ItemScore, None), or (NaN under both rules, the error) when scoring this one reply raises: a
    reply that breaks a reader must cost its own item only, never the stage (stored replies are
    rescored on every rerun). The error is kept in the row and counted in the report."""
    try:
        return score_item_detail(task, item, text), None
    except Exception as exc:  # noqa: BLE001 - any reader failure is this item's, counted, never the run's
        error = f"{type(exc).__name__}: {str(exc)[:200]}"
        return ItemScore(math.nan, math.nan, False, None, f"scoring raised {error}"), error


def official_n(task: str, official: float, verdict: str | None, published_rubric: bool) -> int:
    """How many times the official column counts this item in its N: 0 when it has no official score,
    the published script's count for a published verdict (FDD counts a JSON verdict without a readable
    score twice), else 1."""
    if not math.isfinite(official):
        return 0
    if TASKS[task].kind == "judge" and published_rubric:
        return TASKS[task].verdict_n(verdict or "")
    return 1


def score_model(spec_name: str, asked: dict[str, list[BizFinItem]], answers: pd.DataFrame, judge_batch_fn,
                scale: tuple[int, int], published_rubric: bool = False, authors=None) -> list[dict]:
    """Item rows for one model: accuracy tasks by rule, judge tasks by one judge batch; with `authors`
    (the published scripts), the official column comes from running them."""
    by_id = answers.set_index("id")
    rows, to_judge = [], []
    for t, its in asked.items():
        for it in its:
            a = by_id.loc[it.id]
            spent = a["status"] == "ok" and ran_out_while_reasoning(a["raw_text"], a.get("truncated_output"))
            ok = a["status"] == "ok" and not spent
            reasoning = a.get("reasoning_tokens")
            base = {"model": spec_name, "task": t, "kind": TASKS[t].kind, "item_id": it.id, "source": it.source,
                    "status": OUT_OF_BUDGET if spent else a["status"], "raw_text": a["raw_text"],
                    "input_tokens": int(a["input_tokens"]), "output_tokens": int(a["output_tokens"]),
                    "reasoning_tokens": None if reasoning is None or pd.isna(reasoning) else int(reasoning),
                    "cost_usd": float(a["cost_usd"]), "cached": bool(a["cached"]), "judge_status": None,
                    "scoring_error": None}
            if TASKS[t].kind == "judge":
                if ok:
                    to_judge.append((base, it, a["raw_text"]))
                else:
                    why = OUT_OF_BUDGET_NOTE if spent else f"no answer to judge ({a['error']})"
                    rows.append({**base, "parsed": False, "official": math.nan, "official_n": 0, "ours": math.nan,
                                 "answer": None, "note": why, "judge_status": "no_answer"})
                continue
            # not answered: NaN, outside N; out of budget while reasoning: the official rule scores the text
            # as returned (as the published scripts would), ours leaves it out of N
            s, error = guarded_score(t, it, a["raw_text"] if ok or spent else None)
            if spent:
                s = ItemScore(s.official, math.nan, False, None, "; ".join(x for x in (OUT_OF_BUDGET_NOTE, s.note) if x))
            note = s.note if ok or spent else f"not answered: {a['error']}"
            rows.append({**base, "parsed": s.parsed, "official": s.official, "ours": s.ours, "answer": s.answer,
                         "official_n": official_n(t, s.official, None, published_rubric), "note": note,
                         "scoring_error": error, "_gold": it.gold})
    if to_judge:
        from finlib.bizfin import judge_input

        inputs = [judge_input(it, text, item_id=f"{spec_name}|{it.id}", verbatim=published_rubric)
                  for _, it, text in to_judge]
        results = judge_batch_fn(inputs)
        for (base, it, _), res in zip(to_judge, results, strict=True):
            s = unit_score(res.score, scale) if res.status == "ok" else math.nan
            official = official_judge_score(it.task, res, published_rubric, scale)
            rows.append({**base, "parsed": res.status == "ok", "official": official, "ours": s,
                         "official_n": official_n(it.task, official, res.raw_text, published_rubric),
                         "answer": None if res.score is None else str(res.score),
                         "note": res.note if res.status != "ok" else "", "judge_status": res.status,
                         "_verdict": res.raw_text})
    if authors is not None:
        official_from_scripts(rows, authors, published_rubric)
    for r in rows:
        r.pop("_gold", None)
        r.pop("_verdict", None)
    return rows


def official_from_scripts(rows: list[dict], authors, published_rubric: bool) -> None:
    """Replace the official column by the authors' scripts run on the answers (one batch per task):
    the rule scripts on the replies, the judge scripts' `evaluation` on the verdicts (published rubric
    only; under our rubric there is no published verdict to read)."""
    by_task: dict[str, list[dict]] = {}
    for r in rows:
        if (r["status"] == "ok" and (r["kind"] == "accuracy" or (published_rubric and r["judge_status"] in
                                                                   ("ok", "invalid")))) \
                or (r["status"] == OUT_OF_BUDGET and r["kind"] == "accuracy"):
            by_task.setdefault(r["task"], []).append(r)
    for task, group in by_task.items():
        if TASKS[task].kind == "accuracy":
            got = authors.score_rules(task, [r["_gold"] for r in group], [r["raw_text"] for r in group])
        else:
            got = authors.score_verdicts(task, [r["_verdict"] or "" for r in group])
        for r, g in zip(group, got, strict=True):
            r["official"] = math.nan if g.score is None else float(g.score)
            r["official_n"] = 0 if g.score is None else int(g.n)
            if g.error:
                r["note"] = "; ".join(x for x in (r["note"], f"official: {g.error}") if x)


def _answers_or_failure(spec: ModelSpec, items, store, p: dict, budget, inf: dict, cfg: RunConfig, desc: str):
    """(answers, None), or (rows marking every item not answered, the cause) when the model's endpoint is
    dead (wrong key, missing key, wrong URL): that model stops, the others go on."""
    from finlib.llm.openai_backend import BudgetExceeded, CircuitOpen
    from finlib.llm.spec import MissingKeyError

    try:
        return chat(spec, items, store, max_new_tokens=max_new_tokens_for(spec, p), budget=budget,
                    sampling=sampling_for(spec, p), progress=bool(inf["progress"]),
                    model_cache=cfg.path(inf["model_cache"]), log_dir=cfg.run_dir / "logs",
                    desc=desc), None
    except (CircuitOpen, MissingKeyError, BudgetExceeded) as exc:
        cause = f"{type(exc).__name__}: {str(exc)[:500]}"
        failed = pd.DataFrame({"id": [i.id for i in items], "status": "error", "raw_text": None, "error": cause,
                               "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "cached": False})
        return failed, cause


def run(cfg: RunConfig, count_tokens=None, tokenizer_name: str | None = None) -> BizFinResult:
    """Stage 07: load, ask, score; write `bizfin_items.parquet`, `bizfin_report.json` and the tables
    (`make_tables`; `count_tokens`/`tokenizer_name` replace Table 6's tokenizer, e.g. in tests). A model
    whose endpoint is dead stops alone: the others finish, the artifacts are written, then the stage
    fails naming it (before any table: a table must not show a dead model's items as scored)."""
    from finlib.core.params import empty_model_lists, raise_errors

    raise_errors(empty_model_lists(cfg.params, ["07"]), cfg.params_file)  # before any item is asked or written
    res = answer_and_score(cfg)
    res.tables = make_tables(cfg, res, count_tokens, tokenizer_name)
    return res


def answer_and_score(cfg: RunConfig) -> BizFinResult:
    """Load the items, ask every model, score the answers; write `bizfin_items` and `bizfin_report`."""
    from finlib.llm.openai_backend import Budget

    p = bizfin_params(cfg)
    inf = cfg["inference"]
    loaded, report = load_items(cfg, p)
    asked = select_items(loaded, p)
    registry = run_registry(cfg)
    specs = select_models(registry, list(p["models"]), source="bizfin.models")
    judge_spec = select_models(registry, [p["judge"]], source="bizfin.judge")[0] if any(
        TASKS[t].kind == "judge" for t in asked) else None
    budget = Budget(float(inf["budget_usd"]))
    authors = authors_code(cfg, p)
    rows, dead = ask_models(cfg, p, asked, specs, judge_spec, budget, authors)
    df = pd.DataFrame(rows, columns=ITEM_COLUMNS)
    report.update(run_facts(cfg, p, df, specs, judge_spec, asked, budget, authors, dead))
    report["not_answered"] = not_answered_counts(df)
    write_frame(cfg, "bizfin_items", df)
    write_json(cfg, "bizfin_report", report)
    if dead:
        raise CallsFailed("stage 07: model(s) stopped, their items not answered (the other models finished and "
                          "the artifacts are written): " + " | ".join(f"'{m}': {c}" for m, c in dead.items()))
    check_error_share(df, float(inf["max_error_share"]), "stage 07")
    return BizFinResult(df, asked, loaded, report)


def ask_models(cfg: RunConfig, p: dict, asked: dict, specs: list[ModelSpec], judge_spec: ModelSpec | None, budget,
               authors) -> tuple[list[dict], dict[str, str]]:
    """Every model's answers to the asked items, scored (judge tasks by `judge_spec`): (item rows, the
    models whose endpoint died with the cause)."""
    from finlib.llm.store import ResponseStore

    inf = cfg["inference"]
    published_rubric = rubrics_root(cfg, p) is not None
    rows: list[dict] = []
    dead: dict[str, str] = {}
    with ResponseStore(cfg.path(inf["store"])) as store:
        judge_fn = _judge_fn(judge_spec, store, p, budget, inf, cfg) if judge_spec else None
        for spec in specs:
            items = [ChatItem(it.id, it.chat_messages(spec.supports_system), TASKS[t].answer_version)
                     for t, its in asked.items() for it in its]
            answers, cause = _answers_or_failure(spec, items, store, p, budget, inf, cfg,
                                                 f"{spec.name} answers {len(asked)} tasks")
            if cause:
                dead[spec.name] = cause
            rows += score_model(spec.name, asked, answers, judge_fn, judge_scale(p), published_rubric, authors)
    return rows, dead


def run_facts(cfg: RunConfig, p: dict, df: pd.DataFrame, specs: list[ModelSpec], judge_spec: ModelSpec | None,
              asked: dict, budget, authors, dead: dict[str, str]) -> dict:
    """What `bizfin_report.json` records of the calls: models, judge, statuses, cost, rules and prompt."""
    return {
        "models": [s.name for s in specs], "judge": None if judge_spec is None else judge_spec.name,
        "judge_plumbing": bool(judge_spec is not None and judge_spec.plumbing),
        "plumbing_models": [s.name for s in specs if s.plumbing],
        "items_asked": {t: len(v) for t, v in asked.items()},
        "answer_status": answer_status(df),
        "call_status": df.groupby("status").size().to_dict() if len(df) else {},
        "judge_status": df["judge_status"].value_counts().to_dict() if len(df) else {},
        "out_of_budget_reasoning": out_of_budget_counts(df), "scoring_errors": scoring_error_counts(df),
        "cost_usd": float(df["cost_usd"].sum()) if len(df) else 0.0, "budget_refused": int(budget.refused),
        "official_rules": official_label(None if authors is None else authors.commit),
        "official_code_commit": None if authors is None else authors.commit,
        "rubric_source": rubric_source(cfg, p), "answer_prompt_version": BIZFIN_ANSWER_VERSION,
        "max_new_tokens": int(p["max_new_tokens"]), "temperature": p["temperature"], "dead_models": dead,
    }


def answer_status(items: pd.DataFrame) -> dict[str, int]:
    """The counts the runner reads (`finlib.pipeline.runner.not_answered`): every item in exactly one of
    answered / not_answered; a judged answer whose judge call failed is not answered either."""
    if not len(items):
        return {"answered": 0, "not_answered": 0}
    missing = (items["status"] != "ok") | (items["judge_status"] == "not_answered")
    return {"answered": int((~missing).sum()), "not_answered": int(missing.sum())}


def out_of_budget_counts(items: pd.DataFrame) -> dict[str, int]:
    """Per model: answers whose output budget ran out while the model was reasoning (status
    `out_of_budget_reasoning`): not answered under ours, shown under Table 3."""
    if not len(items):
        return {}
    spent = items["status"].eq(OUT_OF_BUDGET)
    return {str(m): int(n) for m, n in spent.groupby(items["model"], sort=False).sum().items()}


def scoring_error_counts(items: pd.DataFrame) -> dict[str, int]:
    """Per model: replies whose scoring raised (outside N under both rules, the error in the row)."""
    if not len(items) or "scoring_error" not in items:
        return {}
    bad = items["scoring_error"].notna()
    return {str(m): int(n) for m, n in bad.groupby(items["model"], sort=False).sum().items()}


class CallsFailed(RuntimeError):
    """Most calls of a model failed (wrong key, server down, ...): the stage must not report them as
    answers (stage 03's rule, `finlib.finbias.inference.stage.InferenceFailed`, for BizFinBench)."""


def not_answered_counts(items: pd.DataFrame) -> dict[str, dict]:
    """Per model: answers whose call ended in an error and judge calls that failed, with the most
    frequent error (outside every N, shown in the report)."""
    out = {}
    for model, g in items.groupby("model", sort=False):
        failed = g[g["status"] == "error"]   # failed calls; out of budget while reasoning is the model's
        judged = g[g["judge_status"].notna() & (g["judge_status"] != "no_answer")]
        out[str(model)] = {"answers": int(len(failed)), "of": int(len(g)),
                           "judge_calls": int((judged["judge_status"] == "not_answered").sum()),
                           "judged": int(len(judged)),
                           "top_error": failed["note"].astype(str).str[:300].mode().iat[0] if len(failed) else None}
    return out


def check_error_share(items: pd.DataFrame, max_share: float, stage: str) -> None:
    """Fail the stage (after its artifacts are written) when, for any model, more than
    `inference.max_error_share` of its answer calls or of its judge calls ended in an error: a run
    whose every call got HTTP 401 must not print a table of zeros and succeed. One line, naming the
    model and the most frequent error (the rule of Fin-Bias stage 03)."""
    bad = []
    for model, c in not_answered_counts(items).items():
        if c["of"] and c["answers"] / c["of"] > max_share:
            bad.append(f"model '{model}': {c['answers']}/{c['of']} answer calls failed ({c['top_error']})")
        if c["judged"] and c["judge_calls"] / c["judged"] > max_share:
            bad.append(f"model '{model}': {c['judge_calls']}/{c['judged']} judge calls failed")
    if bad:
        raise CallsFailed(f"{stage}: too many failed calls (inference.max_error_share={max_share:g}): "
                              + " | ".join(bad) + "; answers already stored are kept, fix the cause and rerun")


def rule_differences(long: pd.DataFrame) -> pd.DataFrame:
    """Official vs our reading per model x task (docs/bizfinbench.md lists every difference)."""
    w = long[long["task"] != "Average"].pivot_table(index=["model", "task"], columns="rule", values="score",
                                                    sort=False).reset_index()
    w["difference"] = w["ours"] - w["official"]
    return w


def make_tables(cfg: RunConfig, run: BizFinResult, count_tokens=None, tokenizer_name: str | None = None) -> dict:
    """Table 3 (long with CIs, wide with the paper's rows), the rule comparison and Table 6;
    all written as CSV/Markdown/LaTeX. `count_tokens` defaults to the `bizfin.table6_model` model's."""
    from finlib.bizfin.benchmark import results
    from finlib.core.tables import write_table

    sc = cfg["scoring"]
    ci = float(sc["ci"])
    long = results.task_scores(run.items, int(sc["bootstrap_reps"]), cfg.seed, ci)
    caption = results.table3_caption(run.report, long, run.items)
    wide = results.table3(long)
    out = {"table3_long": long, "table3": wide, "rules": rule_differences(long)}
    # BizFinBench never uses the synthetic Fin-Bias market: its own caveat (format sample / plumbing) is in the caption.
    write_table(cfg, "bizfin_table3", wide, caption, synthetic_caveat=False)
    write_table(cfg, SCORES_TABLE, long, caption + " Long form: N, parse rate, judge-invalid count, "
                f"{100 * ci:g} % bootstrap interval over items.", synthetic_caveat=False)
    from finlib.bizfin.benchmark.figures import plot_task_scores

    plot_task_scores(cfg, long, ci)
    write_table(cfg, "bizfin_rules", out["rules"], "BizFinBench: the official column vs our tolerant reading "
                "(score %, difference = ours - official); docs/bizfinbench.md lists every difference with an "
                "example. " + results.rules_caption(run.report) + " " + results.source_caveats(run.report, long),
                synthetic_caveat=False)
    if count_tokens is None:
        p = bizfin_params(cfg)
        registry = run_registry(cfg)
        spec = select_models(registry, [p["table6_model"]], source="bizfin.table6_model")[0]
        count_tokens = results.hf_counter(results.load_tokenizer(spec, cfg.path(cfg["inference"]["model_cache"])))
        tokenizer_name = f"{spec.name} ({spec.model_id})"
    t6 = results.token_lengths(run.loaded, count_tokens)
    out["table6"] = t6
    write_table(cfg, "bizfin_table6", t6, f"BizFinBench Table 6: query token lengths of the items present, tokenizer "
                f"{tokenizer_name} (the paper does not name its tokenizer); format-sample rows measure our samples, "
                f"not the benchmark. " + results.rules_caption(run.report), float_format="{:.1f}",
                synthetic_caveat=False)
    return out


def item_view(run: BizFinResult, width: int = 140) -> pd.DataFrame:
    """Item-level view for the notebook: scores, parse flags, notes and the start of each answer."""
    cols = ["model", "task", "item_id", "source", "status", "parsed", "official", "ours", "answer", "judge_status",
            "note"]
    v = run.items[cols].copy()
    v["reply"] = run.items["raw_text"].fillna("").str.replace(r"\s+", " ", regex=True).str.slice(0, width)
    return v


def summary(cfg: RunConfig, result: BizFinResult) -> str:
    """What the numbers are: the judge, the sources, and the plumbing caveat, in one paragraph."""
    r = result.report
    lines = [f"**Models:** {', '.join(r['models'])}; **judge ({'/'.join(judge_task_names())}):** {r['judge']} (vanilla LLM-as-judge; "
             f"the paper used GPT-4o)."]
    if r["tasks_from_files"]:
        lines.append(f"**Real benchmark files:** {', '.join(r['tasks_from_files'])} — only "
                     f"{max(r['items_asked'][t] for t in r['tasks_from_files'])} item(s) per task asked: a plumbing result.")
    if r["tasks_from_format_samples"]:
        lines.append(f"**Format samples (not the benchmark):** {', '.join(r['tasks_from_format_samples'])}.")
    if r["tasks_missing"]:
        lines.append(f"**Tasks without items:** {', '.join(r['tasks_missing'])}.")
    if r["plumbing_models"] or r["judge_plumbing"]:
        lines.append("**Plumbing model(s):** the embedded model and judge test the pipeline; their scores are not "
                     "research results.")
    return "\n\n".join(lines)
