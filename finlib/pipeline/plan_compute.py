"""GPU-hours of self-hosted models, and the plan of stage 05 (DPO) and stages 07-08 (BizFinBench).

A self-hosted model (a registry price of 0, or a model run here: local or llama.cpp) bills no tokens,
yet its run is not free and its length follows its size: an 8B model serves about 16 GFLOP per token,
a 70B one nine times more. Its GPU-hours are FLOPs over a STATED throughput (`plan.gpu_tflops`, the
sustained TFLOP/s of one GPU) and its cost is those hours at `plan.gpu_hour_usd`. FLOPs per token and
parameter: 2 for a forward pass (serving, scoring), 8 for a DPO-trained token (the policy's forward and
backward pass, 6, and the frozen reference model's forward pass, 2). Parameters come from the registry
(`parameters_b`, active parameters for a mixture of experts); a record without it is planned by its rate
limits alone and the plan says "size unknown".

Stage 05 trains on pairs x epochs (or max_steps x batch x accumulation) x the tokens of a pair (the prompt
with its report and the teacher's answer, for the chosen and the rejected side); a teacher model writes
two answers per training pair. Stages 07-08 reuse the BizFinBench plan (`finlib.bizfin.benchmark.plan`):
items x task families, judge calls for the judged families, IteraJudge's refinements and judge calls.
"""
from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from finlib.core.config import RunConfig
from finlib.llm.backends import backend_of
from finlib.llm.registry import run_registry
from finlib.llm.spec import ModelSpec

SERVE_FLOPS = 2.0  # FLOPs per parameter per token of a forward pass
DPO_FLOPS = 8.0    # per DPO-trained token: policy forward + backward (6) and reference forward (2)
COLUMNS = ["stage", "model", "role", "requests", "input_tokens", "output_tokens", "gpu_hours", "cost_usd",
           "wall_hours", "source"]


def self_hosted(spec: ModelSpec) -> bool:
    """Whether nobody bills this model's tokens: it runs here (local, llama.cpp) or its record prices
    tokens at 0 (a vLLM server): then GPU time is its cost."""
    return backend_of(spec).self_hosted or (spec.price_input_per_m == 0 and spec.price_output_per_m == 0)


def gpu_hours(tokens: float, spec: ModelSpec, flops_per_param: float, tflops: float) -> float | None:
    """GPU-hours of `tokens` through a model of `spec.parameters_b` billion parameters at `tflops`
    sustained TFLOP/s; None when the record gives no size or the model bills per token."""
    if not self_hosted(spec) or spec.parameters_b is None:
        return None
    return tokens * flops_per_param * spec.parameters_b * 1e9 / (tflops * 1e12) / 3600


def gpu_source(spec: ModelSpec, flops_per_param: float, tflops: float) -> str:
    """How the GPU-hours of `spec` were found, for the plan's notes."""
    if spec.parameters_b is None:
        return f"{spec.name}: size unknown (registry parameters_b missing)"
    return (f"GPU compute ({spec.parameters_b:g}B params x {flops_per_param:g} FLOPs/token at "
            f"plan.gpu_tflops {tflops:g} TFLOP/s)")


def _row(stage: str, spec: ModelSpec, role: str, requests: float, tin: float, tout: float,
         flops: float, p: Mapping, billed_usd: float, source: str) -> dict:
    """One plan row: a self-hosted model's cost is its GPU-hours at gpu_hour_usd, else the billed tokens."""
    hours = gpu_hours(tin + tout, spec, flops, float(p["gpu_tflops"]))
    cost = hours * float(p["gpu_hour_usd"]) if hours is not None else (0.0 if self_hosted(spec) else billed_usd)
    how = gpu_source(spec, flops, float(p["gpu_tflops"])) if self_hosted(spec) else "billed tokens"
    return {"stage": stage, "model": spec.name, "role": role, "requests": requests, "input_tokens": tin,
            "output_tokens": tout, "gpu_hours": hours, "cost_usd": cost, "wall_hours": hours,
            "source": f"{source}; {how}"}


def dpo_pairs_seen(dp: Mapping, n_reports: int) -> tuple[int, float, str]:
    """(training pairs, pairs the optimiser sees, how): pairs are `dpo.max_train_pairs`, or when null the
    reports before the cut-off of non-test firms (n_reports x train_share x (1 - test_firm_share));
    seen = max_steps x batch_size x grad_accum when max_steps is set, else pairs x num_train_epochs."""
    if dp["max_train_pairs"] is not None:
        pairs, how = int(dp["max_train_pairs"]), f"dpo.max_train_pairs {int(dp['max_train_pairs'])}"
    else:
        pairs = round(n_reports * float(dp["train_share"]) * (1 - float(dp["test_firm_share"])))
        how = f"{n_reports} reports x train_share x (1 - test_firm_share)"
    if dp["max_steps"]:
        seen = int(dp["max_steps"]) * int(dp["batch_size"]) * int(dp["grad_accum"])
        return pairs, float(seen), f"{how}; {dp['max_steps']} steps x batch {dp['batch_size']} x accum {dp['grad_accum']}"
    return pairs, pairs * float(dp["num_train_epochs"]), f"{how} x {dp['num_train_epochs']:g} epochs"


def dpo_rows(cfg: RunConfig, prompt_tokens: float, n_reports: int) -> list[dict]:
    """Stage 05: per tuned model, training (pairs seen x 2 sequences x (prompt + answer) tokens, capped at
    dpo.max_length_cap) and, for a model teacher, its two answers per training pair."""
    dp, p = cfg.params.get("dpo"), cfg.section("plan")
    if not dp or not dp.get("models"):
        return []
    registry = run_registry(cfg)
    pairs, seen, how = dpo_pairs_seen(dp, n_reports)
    answer = int(dp["teacher_max_new_tokens"])
    per_seq = min(prompt_tokens + answer, float(dp["max_length_cap"]))
    rows = []
    for name in dp["models"]:
        spec = _spec(registry, name, "dpo.models")
        rows.append(_row("05 DPO", spec, "training", 0, seen * 2 * per_seq, 0.0, DPO_FLOPS, p, 0.0,
                         f"{how}; 2 x ({prompt_tokens:,.0f} prompt + {answer} answer) tokens per pair"))
    if dp["teacher"] != "template":
        spec = _spec(registry, dp["teacher"], "dpo.teacher")
        tin, tout = 2 * pairs * prompt_tokens, 2 * pairs * answer
        rows.append(_row("05 DPO", spec, "teacher answers", 2 * pairs, tin, tout, SERVE_FLOPS, p,
                         spec.cost(tin, tout), f"2 answers x {pairs} pairs, at the cap"))
    return rows


def bizfin_rows(cfg: RunConfig) -> list[dict]:
    """Stages 07-08 from the BizFinBench plan (worst case: every output at its cap)."""
    if not (cfg.params.get("bizfin") or {}).get("models"):
        return []
    from finlib.bizfin.benchmark.plan import build_plan as bizfin_plan

    p, registry = cfg.section("plan"), run_registry(cfg)
    rows = []
    for r in bizfin_plan(cfg).to_dict("records"):
        if r["model"] == "TOTAL":
            continue
        stage = "08 IteraJudge" if str(r["role"]).startswith("stage 08") else "07 BizFinBench"
        role = str(r["role"]).removeprefix("stage 08 ")
        rows.append(_row(stage, _spec(registry, r["model"], "bizfin"), role, r["requests"], r["input_tokens"],
                         r["output_tokens_cap"], SERVE_FLOPS, p, float(r["usd_worst_case"]),
                         "items x task families (Table 2 lengths), outputs at the cap"))
    return rows


def _spec(registry: Mapping[str, ModelSpec], name: str, where: str) -> ModelSpec:
    """The registry record of `name`, or an error naming the params key."""
    if name not in registry:
        raise LookupError(f"{where} names {name!r}, not a record of the model registry")
    return registry[name]


def other_stages_plan(cfg: RunConfig, prompt_tokens: float, n_reports: int) -> pd.DataFrame:
    """Stages 05 and 07-08 as rows (`COLUMNS`); empty when the run has none of them."""
    return pd.DataFrame(dpo_rows(cfg, prompt_tokens, n_reports) + bizfin_rows(cfg), columns=COLUMNS)
