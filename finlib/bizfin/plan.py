"""What a BizFinBench run will send and cost, before any call: `python -m finlib.bizfin.plan --run NAME`.

Per model: answer requests (items asked per task) and judge requests (judge-scored tasks), input
tokens from Table 2's average query length per task (the paper's counts, tokenizer unnamed) unless
the items are on disk, output tokens at the cap (`bizfin.max_new_tokens`, the worst case), cost
from the registry's prices. Nothing is downloaded and no model is called.
"""
from __future__ import annotations

import argparse

import pandas as pd

from finlib.bizfin.tasks import TASKS
from finlib.core.config import RunConfig, load_run
from finlib.llm.registry import run_registry, select_models
from finlib.core.tables import paper_table

JUDGE_PROMPT_TOKENS = 400   # rubric + dimensions around the question and answer (our judge prompt, ~Chinese chars)


def items_per_task(p: dict) -> dict[str, int]:
    """Items a run asks per task: `real_items_per_task`, or the full Table 2 count when null."""
    counts = paper_table("bizfin_table2").set_index("abbrev")["numbers"]
    n = p["real_items_per_task"]
    return {t: int(counts[t]) if n is None else min(int(n), int(counts[t])) for t in p["tasks"]}


def build_plan(cfg: RunConfig) -> pd.DataFrame:
    """One row per model (answers) and one for the judge: requests, tokens, worst-case USD."""
    from finlib.bizfin.stage import bizfin_params

    p = bizfin_params(cfg)
    avg_len = paper_table("bizfin_table2").set_index("abbrev")["avg_len"]
    n = items_per_task(p)
    registry = run_registry(cfg)
    out_cap, judge_cap = int(p["max_new_tokens"]), int(p["judge_max_new_tokens"])
    rows = []
    specs = select_models(registry, list(p["models"]), source="bizfin.models")
    for spec in specs:
        req = sum(n.values())
        tin = sum(n[t] * float(avg_len[t]) for t in n)
        rows.append({"model": spec.name, "role": "answers", "requests": req, "input_tokens": tin,
                     "output_tokens_cap": req * out_cap, "usd_worst_case": spec.cost(tin, req * out_cap)})
    judge = select_models(registry, [p["judge"]], source="bizfin.judge")[0]
    jn = {t: n[t] for t in n if TASKS[t].kind == "judge"}
    jreq = len(specs) * sum(jn.values())
    jin = len(specs) * sum(jn[t] * (float(avg_len[t]) + out_cap + JUDGE_PROMPT_TOKENS) for t in jn)
    rows.append({"model": judge.name, "role": "judge", "requests": jreq, "input_tokens": jin,
                 "output_tokens_cap": jreq * judge_cap, "usd_worst_case": judge.cost(jin, jreq * judge_cap)})
    df = pd.DataFrame(rows)
    total = {"model": "TOTAL", "role": "", **df[["requests", "input_tokens", "output_tokens_cap",
                                                 "usd_worst_case"]].sum().to_dict()}
    out = pd.concat([df, pd.DataFrame([total])], ignore_index=True)
    for c in ("requests", "input_tokens", "output_tokens_cap"):
        out[c] = out[c].round().astype(int)
    return out


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
