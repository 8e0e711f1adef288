"""What a BizFinBench run will send and cost, before any call: `python -m finlib.bizfin.benchmark.plan --run NAME`.

Per model: answer requests (items asked per task) and judge requests (judge-scored tasks), input
tokens from Table 2's average query length per task (the paper's counts, tokenizer unnamed), output
tokens at the cap (the worst case): `bizfin.max_new_tokens` plus the record's `reasoning_tokens` for a
thinker (its reasoning is billed as output), cost from the registry's prices. Stage 08 is planned too:
IteraJudge on stage 07's answers (one refinement per rubric dimension, then one judge call, per answer)
and the calibration study (every judge, vanilla and IteraJudge, on the reference set). Nothing is
downloaded and no model is called.
"""
from __future__ import annotations

import argparse

import pandas as pd

from finlib.bizfin.data import load_format_samples
from finlib.bizfin.tasks import TASKS
from finlib.core.config import RunConfig, load_run
from finlib.core.tables import paper_table
from finlib.llm.registry import run_registry, select_models

JUDGE_PROMPT_TOKENS = 400   # rubric + dimensions around the question and answer (our judge prompt, ~Chinese chars)


def task_sizes(tasks: list[str]) -> pd.DataFrame:
    """Per task (index) its item count (`numbers`) and average query length (`avg_len`): Table 2's row for a
    task the paper prints; for a declared task it does not, counted from the task's format samples."""
    table2 = paper_table("bizfin_table2").set_index("abbrev")[["numbers", "avg_len"]]
    extra = [t for t in tasks if not TASKS[t].paper]
    if not extra:
        return table2
    samples = load_format_samples(extra)
    rows = [(len(samples.get(t, [])), sum(len(i.question) for i in samples.get(t, [])) / max(1, len(samples.get(t, []))))
            for t in extra]
    return pd.concat([table2, pd.DataFrame(rows, index=extra, columns=["numbers", "avg_len"])])


def items_per_task(p: dict) -> dict[str, int]:
    """Items a run asks per task: `real_items_per_task`, or the full count (`task_sizes`) when null."""
    counts = task_sizes(list(p["tasks"]))["numbers"]
    n = p["real_items_per_task"]
    return {t: int(counts[t]) if n is None else min(int(n), int(counts[t])) for t in p["tasks"]}


def build_plan(cfg: RunConfig) -> pd.DataFrame:
    """One row per model (answers) and one for the judge: requests, tokens, worst-case USD."""
    from finlib.bizfin.benchmark.stage import bizfin_params

    p = bizfin_params(cfg)
    avg_len = task_sizes(list(p["tasks"]))["avg_len"]
    n = items_per_task(p)
    registry = run_registry(cfg)
    out_cap, judge_cap = int(p["max_new_tokens"]), int(p["judge_max_new_tokens"])
    rows = []
    specs = select_models(registry, list(p["models"]), source="bizfin.models")
    for spec in specs:
        req = sum(n.values())
        tin = sum(n[t] * float(avg_len[t]) for t in n)
        cap = out_cap + int(spec.reasoning_tokens or 0)          # thinking tokens are billed as output
        rows.append({"model": spec.name, "role": "answers", "requests": req, "input_tokens": tin,
                     "output_tokens_cap": req * cap, "usd_worst_case": spec.cost(tin, req * cap)})
    judge = select_models(registry, [p["judge"]], source="bizfin.judge")[0]
    jn = {t: n[t] for t in n if TASKS[t].kind == "judge"}
    jreq = len(specs) * sum(jn.values())
    jin = len(specs) * sum(jn[t] * (float(avg_len[t]) + out_cap + JUDGE_PROMPT_TOKENS) for t in jn)
    jcap = judge_cap + int(judge.reasoning_tokens or 0)
    rows.append({"model": judge.name, "role": "judge", "requests": jreq, "input_tokens": jin,
                 "output_tokens_cap": jreq * jcap, "usd_worst_case": judge.cost(jin, jreq * jcap)})
    if p.get("iterajudge"):
        rows += stage08_rows(p, n, len(specs), registry, avg_len)
    df = pd.DataFrame(rows)
    total = {"model": "TOTAL", "role": "", **df[["requests", "input_tokens", "output_tokens_cap",
                                                 "usd_worst_case"]].sum().to_dict()}
    out = pd.concat([df, pd.DataFrame([total])], ignore_index=True)
    for c in ("requests", "input_tokens", "output_tokens_cap"):
        out[c] = out[c].round().astype(int)
    return out


def stage08_rows(p: dict, n: dict[str, int], n_models: int, registry, avg_len) -> list[dict]:
    """Stage 08's calls: IteraJudge on stage 07's answers of `iterajudge.tasks` (K refinements with the
    refiner, one judge call) and the calibration study (each judge, vanilla + IteraJudge, on the reference
    set). Worst case: every output at its cap, each refinement step's input carrying an answer at the cap."""
    from finlib.bizfin.iterajudge.calibration import load_reference_sets
    from finlib.bizfin.iterajudge.rubrics import dimensions_for

    ip = p["iterajudge"]
    refiner = select_models(registry, [ip["refiner"]], source="bizfin.iterajudge.refiner")[0]
    judges = select_models(registry, list(ip["judges"]), source="bizfin.iterajudge.judges")
    r_cap, j_cap = int(ip["refine_max_new_tokens"]), int(ip["judge_max_new_tokens"])
    answer_cap = int(p["max_new_tokens"])
    per = ip.get("max_items_per_task")
    answers = {t: n_models * (n.get(t, 0) if per is None else min(int(per), n.get(t, 0))) for t in ip["tasks"]}
    ref = load_reference_sets(list(ip["calibration_tasks"]), ip.get("calibration_questions"),
                              ip.get("calibration_answers"))
    calib = ref.groupby("task").size().to_dict() if len(ref) else {}
    rows = []

    def add(spec, role: str, requests: float, tin: float, cap: int) -> None:
        cap = cap + int(spec.reasoning_tokens or 0)
        rows.append({"model": spec.name, "role": role, "requests": requests, "input_tokens": tin,
                     "output_tokens_cap": requests * cap, "usd_worst_case": spec.cost(tin, requests * cap)})

    def steps(counts: dict[str, int]) -> tuple[float, float]:
        k = sum(c * len(dimensions_for(t)) for t, c in counts.items())
        tin = sum(c * len(dimensions_for(t)) * (float(avg_len[t]) + answer_cap + JUDGE_PROMPT_TOKENS)
                  for t, c in counts.items())
        return k, tin

    k, tin = steps(answers)
    add(refiner, "stage 08 refine (stage 07 answers)", k, tin, r_cap)
    jn = sum(answers.values())
    add(judges[0], "stage 08 judge (stage 07 answers)", jn,
        sum(c * (float(avg_len[t]) + 2 * answer_cap + JUDGE_PROMPT_TOKENS) for t, c in answers.items()), j_cap)
    k, tin = steps(calib)
    add(refiner, "stage 08 refine (calibration)", k * len(judges), tin * len(judges), r_cap)
    for j in judges:
        add(j, "stage 08 calibration judge", 2 * sum(calib.values()),
            2 * sum(c * (float(avg_len[t]) + 2 * answer_cap + JUDGE_PROMPT_TOKENS) for t, c in calib.items()), j_cap)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="bizfinbench")
    ap.add_argument("--params", default=None)
    args = ap.parse_args(argv)
    cfg = load_run(args.run, args.params)
    print(build_plan(cfg).to_markdown(index=False, floatfmt=",.2f", intfmt=","))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
