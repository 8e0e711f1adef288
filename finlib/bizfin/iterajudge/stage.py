"""Stage 08: IteraJudge on stage 07's judge-task answers and the judge-calibration study (Table 4).

Flow: params `bizfin.iterajudge` -> (A) stage 07's answers of the judge tasks (`bizfin_items`,
when present) through IteraJudge, trajectories kept -> (B) the constructed reference set
through the vanilla judge and IteraJudge for every judge model -> Spearman with bootstrap CIs and the paired IteraJudge - vanilla difference -> Table 4's layout
beside the paper's numbers. Every call goes through the engine and the
response store (resumable, cost-counted, budget-capped). The stage contract (`finlib.core.stage`):
`SECTION`, `run(cfg)`, `summary(cfg, result)`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pandas as pd

from finlib.bizfin.benchmark.stage import CallsFailed, authors_code, bizfin_params, run_rubrics
from finlib.bizfin.iterajudge import calibration as cal
from finlib.bizfin.iterajudge.judge import (
    JudgeInput,
    Trajectory,
    iterajudge,
    results_frame,
    trajectories_frame,
    trajectory_summary,
)
from finlib.bizfin.iterajudge.records import calibration_tasks
from finlib.bizfin.official import official_label
from finlib.bizfin.prompts import JUDGE_CONTRASTIVE_VERSION, JUDGE_REFINE_VERSION, JUDGE_VANILLA_VERSION
from finlib.bizfin.tasks import check_tasks, judge_task_names
from finlib.core.artifacts import MissingArtifactError, read_frame, write_frame, write_json
from finlib.core.compare import write_comparison
from finlib.core.config import ConfigError, RunConfig
from finlib.core.tables import paper_table, write_table
from finlib.llm.registry import run_registry, select_models

SECTION = "bizfin"  # IteraJudge's knobs are `bizfin.iterajudge`
# what notebook 08 calls besides `run` and `summary`
NOTEBOOK_API = ("calibration_view", "iterajudge_params", "side_by_side", "trajectory_summary")
TABLES = ("table4", "correlations", "difference")  # the tables of `result.tables` notebook 08 shows by name
REPORT_KEYS = ()  # the keys of `result.report` notebook 08 reads

NOT_COMPARABLE_TABLE4 = ("Not comparable: ours correlate the run's judges with rule-assigned scores on a small "
                         "constructed reference set; the paper's correlate its judges with expert scores")


@dataclass
class IteraResult:
    """What stage 08 produced."""

    trajectories: list[Trajectory]
    scores: pd.DataFrame            # reference set: one row per (answer, judge, method)
    correlations: pd.DataFrame      # Spearman per (judge, method, task)
    table: pd.DataFrame             # Table 4's layout
    report: dict = field(default_factory=dict)
    difference: pd.DataFrame | None = None  # paired IteraJudge - vanilla per (judge, task)

    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        """What notebook 08 shows, by name: Table 4's layout, the Spearman values, the paired difference."""
        return {"table4": self.table, "correlations": self.correlations,
                "difference": pd.DataFrame() if self.difference is None else self.difference}


def iterajudge_params(cfg: RunConfig) -> dict:
    """`bizfin.iterajudge`, checked by the params schema (`finlib.core.params.IteraJudgeSection`: every
    key present, the score range, at least one judge), then against the judge tasks and reference sets."""
    p = cfg.section("bizfin")["iterajudge"]
    where = f"{cfg.params_file}: bizfin.iterajudge"
    judged = judge_task_names()
    bad = [t for t in [*p["tasks"], *p["calibration_tasks"]] if t not in judged]
    if bad:
        raise ConfigError(f"{where}: {bad} are not judge-scored tasks (judge tasks: {list(judged)})")
    check_tasks(list(p["tasks"]), "bizfin.iterajudge.tasks")
    bad = [t for t in p["calibration_tasks"] if t not in calibration_tasks()]
    if bad:
        raise ConfigError(f"{where}.calibration_tasks: no reference set for {bad} (have: {sorted(calibration_tasks())})")
    try:
        cal.ordered_dimensions(judged[0], p["dimension_order"])  # the order word, checked on any judge task
    except ValueError as exc:
        raise ConfigError(f"{cfg.params_file}: {exc}") from None
    return p


def stage07_inputs(cfg: RunConfig, p: dict) -> tuple[list[JudgeInput], str]:
    """Judge inputs from stage 07's answers of the judge tasks (first `max_items_per_task` per
    model and task, answered items only), and a note saying what was taken or why nothing was."""
    try:
        items = read_frame(cfg, "bizfin_items")
    except MissingArtifactError as exc:
        return [], f"stage 07 artifact missing, IteraJudge on its answers skipped ({exc})"
    from finlib.bizfin import judge_input
    from finlib.bizfin.benchmark.stage import load_items, rubrics_root

    bp = bizfin_params(cfg)
    loaded, _ = load_items(cfg, bp)
    verbatim = rubrics_root(cfg, bp) is not None   # the published prompts get the reply as written
    by_id = {it.id: it for its in loaded.values() for it in its}
    mine = items[(items["kind"] == "judge") & items["task"].isin(p["tasks"])]
    answered = mine[mine["status"] == "ok"]
    n = p["max_items_per_task"]
    chosen = answered.groupby(["model", "task"], sort=False).head(n) if n is not None else answered
    inputs = []
    for r in chosen.itertuples():
        if r.item_id not in by_id:
            raise KeyError(f"bizfin_items: item {r.item_id!r} ({r.task}) is not among the items stage 07 loads now; "
                           f"rerun stage 07")
        inp = judge_input(by_id[r.item_id], r.raw_text, item_id=f"{r.model}|{r.item_id}", verbatim=verbatim)
        inputs.append(dataclasses.replace(inp, dimensions=cal.ordered_dimensions(r.task, p["dimension_order"])))
    note = (f"{len(inputs)} answers of {sorted(set(chosen['task']))} from stage 07 "
            f"({len(mine) - len(answered)} unanswered items left out)")
    return inputs, note


def judge_kwargs(cfg: RunConfig, p: dict, budget, rubrics=None) -> dict:
    """Arguments every judge call of this stage shares."""
    inf = cfg["inference"]
    return {"budget": budget, "rubrics": rubrics, "max_new_tokens": int(p["judge_max_new_tokens"]),
            "refine_max_new_tokens": int(p["refine_max_new_tokens"]), "score_range": tuple(p["score_range"]),
            "progress": bool(inf["progress"]), "model_cache": cfg.path(inf["model_cache"]),
            "log_dir": cfg.run_dir / "logs",
            "sampling": None if p["temperature"] is None else {"temperature": float(p["temperature"]), "top_p": 1.0}}


def table4_comparison(corr: pd.DataFrame, paper_names: dict[str, str]) -> pd.DataFrame:
    """Our Spearman values beside the paper's in the common paper-vs-ours layout (stage 06 collects
    it). Judges match through the registry's `paper_name`; ours run on the constructed reference
    set, so even a matched row compares different reference scores (the caption says so)."""
    from finlib.core.compare import paper_vs_ours

    ours = pd.DataFrame({"method": corr["method"].map(cal.METHOD_LABELS),
                         "judge": corr["judge"].map(lambda j: paper_names.get(j) or j),
                         "task": corr["task"], "spearman": corr["spearman"]})
    cmp = paper_vs_ours(ours, paper_table("bizfin_table4"), ["method", "judge", "task"], "spearman",
                        table="bizfin_table4")
    return pd.DataFrame({"table": cmp["table"], "row": cmp["method"] + " (" + cmp["judge"] + ")",
                         "column": cmp["task"], "ours": cmp["ours"], "paper": cmp["paper"], "diff": cmp["diff"],
                         "status": cmp["status"]})


def run(cfg: RunConfig) -> IteraResult:
    """Run both parts and write `iterajudge_trajectories`, `iterajudge_results`,
    `judge_calibration_scores`, `judge_calibration`, Table 4 and `iterajudge_report.json`."""
    from finlib.llm.openai_backend import Budget

    p = iterajudge_params(cfg)
    registry = run_registry(cfg)
    refiner = select_models(registry, [p["refiner"]], source="bizfin.iterajudge.refiner")[0]
    judges = select_models(registry, list(p["judges"]), source="bizfin.iterajudge.judges")
    budget = Budget(float(cfg["inference"]["budget_usd"]))
    bp = bizfin_params(cfg)
    rubrics = run_rubrics(cfg, bp)
    authors = authors_code(cfg, bp)
    official = official_label(None if authors is None else authors.commit)
    inputs, note = stage07_inputs(cfg, p)
    ref = cal.load_reference_sets(list(p["calibration_tasks"]), p["calibration_questions"],
                                  p["calibration_answers"])
    trajs, scores = judge_all(cfg, p, judges, refiner, inputs, ref, judge_kwargs(cfg, p, budget, rubrics))
    corr = cal.correlation_table(scores, int(p["bootstrap_reps"]), float(p["ci"]), cfg.seed)
    diff = cal.difference_table(scores, int(p["bootstrap_reps"]), float(p["ci"]), cfg.seed,
                                mixed_rubrics=rubrics.mixed())
    table = cal.table4(corr, diff=diff)
    write_frames(cfg, inputs, trajs, scores, corr, diff, judges[0].name)
    write_table(cfg, "bizfin_table4_judge", table, table4_caption(p, len(ref), rubrics, official),
                synthetic_caveat=False)  # no synthetic market here: the caption states what the scores are
    report = {"stage07": note, "refiner": refiner.name, "judges": [j.name for j in judges],
              "plumbing_models": sorted({s.name for s in [refiner, *judges] if s.plumbing}),
              **judge_facts(p, trajs, scores, corr, diff, budget, len(ref)),
              "rubric_source": rubrics.label(), "official_rules": official,
              "answer_status": judge_answer_status(scores, trajs)}
    report = {k: report[k] for k in REPORT_ORDER}
    write_comparison(cfg, "bizfin_table4", table4_comparison(corr, {j.name: j.paper_name for j in judges}),
                     f"Table 4: Spearman with reference scores (official rules: {official}; "
                     f"judge rubric: {rubrics.label()})", not_comparable=NOT_COMPARABLE_TABLE4)
    write_json(cfg, "iterajudge_report", report)
    check_judge_errors(scores, trajs, float(cfg["inference"]["max_error_share"]))
    return IteraResult(trajs, scores, corr, table, report, diff)


REPORT_ORDER = ("stage07", "refiner", "judges", "plumbing_models", "dimension_order", "score_range", "prompt_versions",
                "trajectory_status", "calibration_items", "calibration_status", "cost_usd", "budget_refused",
                "reference_set", "rubric_source", "official_rules", "answer_status", "paired_difference",
                "degenerate")  # the keys of `iterajudge_report.json`, in the order it lists them


def judge_all(cfg: RunConfig, p: dict, judges: list, refiner, inputs: list[JudgeInput], ref, kw: dict):
    """(A) IteraJudge on stage 07's answers (first judge) and (B) every judge, vanilla and IteraJudge,
    on the reference set: (trajectories, reference-set scores)."""
    from finlib.llm.store import ResponseStore

    with ResponseStore(cfg.path(cfg["inference"]["store"])) as store:
        trajs = iterajudge(judges[0], store, inputs, refiner_spec=refiner, **kw) if inputs else []
        scores = cal.judge_reference_set(ref, judges, store, refiner=refiner, dimension_order=p["dimension_order"],
                                         **kw)
    return trajs, scores


def write_frames(cfg: RunConfig, inputs: list[JudgeInput], trajs: list[Trajectory], scores: pd.DataFrame,
                 corr: pd.DataFrame, diff: pd.DataFrame, judge: str) -> None:
    """The stage's artifacts: trajectories, IteraJudge results on stage 07's answers, calibration frames."""
    write_frame(cfg, "iterajudge_trajectories", trajectories_frame(trajs))
    write_frame(cfg, "iterajudge_results", results_frame(inputs, [t.result for t in trajs], "iterajudge", judge))
    write_frame(cfg, "judge_calibration_scores", scores)
    write_frame(cfg, "judge_calibration", corr)
    write_frame(cfg, "judge_calibration_difference", diff)


def table4_caption(p: dict, n_answers: int, rubrics, official: str) -> str:
    """Table 4's caption, from params (CI level, resamples, dimension order) and this run's sources."""
    return (f"BizFinBench Table 4 layout: Spearman of each judge with the reference scores [{p['ci']:.0%} "
            f"percentile bootstrap CI] (n answers scored, usable resamples of {p['bootstrap_reps']}); the "
            f"paired row is IteraJudge - vanilla on the answers both scored, one resample for both. This run: "
            f"{cal.REFERENCE_LABEL}, {n_answers} answers; paper: expert scores. Dimension order: "
            f"{p['dimension_order']}. Judge rubric: {rubrics.label()}. Official rules: "
            f"{official}.")


def judge_facts(p: dict, trajs: list[Trajectory], scores: pd.DataFrame, corr: pd.DataFrame, diff: pd.DataFrame,
                budget, n_reference: int) -> dict:
    """What the report records of the judging: settings, statuses, cost, paired difference, degenerate intervals."""
    return {
        "dimension_order": p["dimension_order"], "score_range": list(p["score_range"]),
        "prompt_versions": [JUDGE_VANILLA_VERSION, JUDGE_REFINE_VERSION, JUDGE_CONTRASTIVE_VERSION],
        "trajectory_status": pd.Series([t.result.status for t in trajs], dtype=object).value_counts().to_dict(),
        "calibration_items": n_reference, "calibration_status": scores.groupby(["method", "status"]).size()
        .rename("n").reset_index().to_dict(orient="records"),
        "cost_usd": float(scores["cost_usd"].sum()) + sum(t.result.cost_usd for t in trajs),
        "budget_refused": int(budget.refused), "reference_set": cal.REFERENCE_LABEL,
        "paired_difference": diff.to_dict(orient="records"),
        "degenerate": [f"{r.judge}/{r.method}/{r.task}: {r.warning}" for r in corr.itertuples() if r.warning]
        + [f"{r.judge}/difference/{r.task}: {r.warning}" for r in diff.itertuples() if r.warning],
    }


def judge_answer_status(scores: pd.DataFrame, trajs: list[Trajectory]) -> dict[str, int]:
    """The counts the runner reads: every judge verdict of this stage (calibration and stage 07 answers)
    in exactly one of answered / not_answered (a failed or unsent call)."""
    statuses = list(scores["status"]) + [t.result.status for t in trajs]
    missing = sum(s == "not_answered" for s in statuses)
    return {"answered": len(statuses) - missing, "not_answered": missing}


def check_judge_errors(scores: pd.DataFrame, trajs: list[Trajectory], max_share: float) -> None:
    """Stage 08's error-share gate (as stage 03 and 07): more than `inference.max_error_share` of a
    judge's calls for one method not answered fails the stage with one line, after the artifacts."""
    frames = [scores[["judge", "method", "status", "note"]]]
    if trajs:
        frames.append(pd.DataFrame({"judge": "stage 07 answers", "method": "iterajudge",
                                    "status": [t.result.status for t in trajs], "note": [t.result.note for t in trajs]}))
    bad = []
    for (judge, method), g in pd.concat(frames, ignore_index=True).groupby(["judge", "method"], sort=False):
        failed = g[g["status"] == "not_answered"]
        if len(g) and len(failed) / len(g) > max_share:
            bad.append(f"{judge} ({method}): {len(failed)}/{len(g)} judge calls failed ({failed['note'].mode().iat[0]})")
    if bad:
        raise CallsFailed(f"stage 08: too many failed calls (inference.max_error_share={max_share:g}): "
                              + " | ".join(bad) + "; answers already stored are kept, fix the cause and rerun")


def side_by_side(trajs: list[Trajectory], width: int = 120) -> pd.DataFrame:
    """Each trajectory as one row per y_k (original first), texts cut to `width` characters, for
    reading in the notebook beside the per-dimension change."""
    frame = trajectories_frame(trajs)
    shown = frame[["id", "k", "dimension", "step_status", "similarity", "diff", "text"]].copy()
    shown["text"] = shown["text"].map(lambda s: s if s is None or len(s) <= width else s[:width] + "…")
    return shown


def summary(cfg: RunConfig, result: IteraResult) -> str:
    """What the numbers below are, and what they are not (shown before any number)."""
    r = result.report
    lines = [(f"**Reference scores: {r['reference_set']}.** The Spearman values exercise the code path on "
              f"{r['calibration_items']} constructed answers; they are not the paper's experiment.")]
    if r["plumbing_models"]:
        lines.append(f"**Plumbing models: {', '.join(r['plumbing_models'])}.** A 0.5B model as refiner and judge "
                     "tests the pipeline; its scores and rewrites are not research results.")
    lines.append(f"Stage 07 answers: {r['stage07']}. Cost this stage: ${r['cost_usd']:.4f}.")
    lines.append(f"**Judge rubric:** {r['rubric_source']}. **Official rules:** {r['official_rules']}.")
    if r.get("degenerate"):
        lines.append("**Degenerate intervals (do not read them as precise):** " + "; ".join(r["degenerate"]) + ".")
    return "\n\n".join(lines)


def calibration_view(scores: pd.DataFrame) -> pd.DataFrame:
    """The reference set's verdicts side by side: one row per answer, the reference score and each
    (judge, method)'s score, or its status when it has none."""
    cell = scores.assign(v=[f"{s:.0f}" if st == "ok" else st for s, st in zip(scores["score"], scores["status"])])
    wide = cell.pivot_table(index=["task", "id", "reference_score"], columns=["judge", "method"], values="v",
                            aggfunc="first")
    return wide.reset_index()


__all__ = ["SECTION", "run", "summary", "calibration_view", "iterajudge_params", "stage07_inputs", "side_by_side",
           "trajectory_summary", "IteraResult"]
