"""`make plan`'s GPU-hours, stage 05 (DPO) and stages 07-08 (BizFinBench), against hand-computed values."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from finlib.core.config import RunConfig, deep_merge, load_params
from finlib.pipeline import plan, plan_compute

ROOT = Path(__file__).resolve().parents[2]
PLAN = {"corpus_reports": 100, "report_tokens": 1000, "estimate_chars": 4.0, "answer_tokens": 300,
        "output_cap": None, "latency_s": 10.0, "sample_texts": 50, "preflight": False,
        "gpu_tflops": 100.0, "gpu_hour_usd": 3.0}
BASE = {"supports_system": False, "context_length": 32768, "api_key_env": None, "concurrency": 4}
REGISTRY = {"defaults": {"sampling": {"temperature": 1.0, "top_p": 1.0}},
            "models": [
                {"name": "api", "backend": "openai", "model_id": "x", "base_url": "https://api.example.invalid/v1",
                 **BASE, "api_key_env": "G_PLAN_TEST_KEY", "price_input_per_m": 2.0, "price_output_per_m": 8.0},
                {"name": "b8", "parameters_b": 8.0, "backend": "openai", "model_id": "y",
                 "base_url": "http://localhost:1/v1", **BASE, "price_input_per_m": 0.0, "price_output_per_m": 0.0},
                {"name": "b70", "parameters_b": 70.0, "backend": "openai", "model_id": "z",
                 "base_url": "http://localhost:2/v1", **BASE, "price_input_per_m": 0.0, "price_output_per_m": 0.0},
                {"name": "nosize", "backend": "openai", "model_id": "w",
                 "base_url": "http://localhost:3/v1", **BASE, "price_input_per_m": 0.0, "price_output_per_m": 0.0},
                {"name": "here", "parameters_b": 0.5, "backend": "llamacpp", "model_id": "q", "gguf_file": "q.gguf",
                 "gguf_package": "q==1", **BASE, "price_input_per_m": 0.0, "price_output_per_m": 0.0}]}
DPO = {"models": ["b8"], "teacher": "template", "teacher_max_new_tokens": 256, "max_train_pairs": 6,
       "train_share": 0.8, "test_firm_share": 0.2, "max_steps": 3, "batch_size": 2, "grad_accum": 1,
       "num_train_epochs": 1, "max_length_cap": 4096}


def make_cfg(tmp_path: Path, models=("b8",), dpo: dict | None = None) -> RunConfig:
    tmp_path.mkdir(parents=True, exist_ok=True)
    reg = tmp_path / "models.yaml"
    reg.write_text(yaml.safe_dump(REGISTRY))
    # the declared params (params/default.yaml) with the paper's corpus, no extension calls and this registry
    declared = {k: v for k, v in load_params(ROOT / "params" / "default.yaml").items()
                if k in ("seed", "data", "perturb", "inference")}
    params = deep_merge(declared, {
        "seed": 1, "data": {"source": "huggingface"},
        "perturb": {"fake_rating": "one", "lexicon_path": None, "sweep_reports": 0},
        "inference": {"models": list(models), "registry": str(reg), "store": str(tmp_path / "s.sqlite"),
                      "max_new_tokens": 4096, "max_input_tokens": 16000, "batch": False,
                      "model_cache": str(tmp_path / "cache"), "samples_per_item": 1, "mode": "generate",
                      "endpoints": {}, "constrained_json": [], "extension_models": None,
                      "generator_reports": None}})
    params["plan"] = dict(PLAN)
    if dpo is not None:
        params["dpo"] = dpo
    cfg = RunConfig(name="p", params=params, root=tmp_path, params_file=tmp_path / "p.yaml")
    cfg.processed_dir.mkdir(parents=True)
    return cfg


def test_self_hosted_gpu_hours_follow_the_model_size(tmp_path):
    """100 requests of an 8B model at 100 TFLOP/s: (input + output tokens) x 2 x 8e9 FLOPs; a 70B model
    takes 70/8 as long; its cost is those hours at 3 USD; a billed API model has no GPU-hours."""
    p = plan.build_plan(make_cfg(tmp_path, models=("b8", "b70", "api", "nosize"))).set_index(["model", "condition"])
    row = p.loc[("b8", "original")]
    tokens = row["input_tokens"] + row["output_tokens_expected"]
    assert row["gpu_hours"] == pytest.approx(tokens * 16e9 / 100e12 / 3600)
    assert row["wall_hours"] == pytest.approx(row["gpu_hours"])
    assert row["cost_usd_expected"] == pytest.approx(3.0 * row["gpu_hours"])
    assert row["cost_usd_cap"] == pytest.approx(3.0 * (row["input_tokens"] + row["output_tokens_cap"]) * 16e9
                                                / 100e12 / 3600)
    assert "8B params" in row["binding_limit"] and "100 TFLOP/s" in row["binding_limit"]
    assert row["billed_usd_cap"] == 0  # nobody bills its tokens: the budget cap and `make card` count no dollars
    big = p.loc[("b70", "original")]
    assert big["gpu_hours"] == pytest.approx(row["gpu_hours"] * 70 / 8)
    assert pd.isna(p.loc[("api", "original"), "gpu_hours"])  # billed per token
    assert p.loc[("api", "original"), "cost_usd_expected"] > 0
    unknown = p.loc[("nosize", "original")]
    assert "size unknown" in unknown["binding_limit"] and unknown["cost_usd_expected"] == 0


def test_model_run_here_keeps_its_latency_bound_and_reports_gpu_hours(tmp_path):
    """A llama.cpp model (run on this machine, often its CPU) without a stage-03 measurement: wall time is
    100 requests x 10 s / concurrency 4, its GPU-hours still (tokens) x 2 x 0.5e9 / 100 TFLOP/s."""
    row = plan.build_plan(make_cfg(tmp_path, models=("here",))).set_index("condition").loc["original"]
    assert row["binding_limit"] == "concurrency x latency"
    assert row["wall_hours"] == pytest.approx(100 * 10 / 4 / 3600)
    tokens = row["input_tokens"] + row["output_tokens_expected"]
    assert row["gpu_hours"] == pytest.approx(tokens * 2 * 0.5e9 / 100e12 / 3600)


def test_dpo_training_hours_by_hand(tmp_path):
    """3 steps x batch 2 = 6 pairs seen; each pair 2 sequences of 1,000 prompt + 256 answer tokens;
    8 FLOPs per parameter and trained token, 8e9 parameters, 100 TFLOP/s."""
    cfg = make_cfg(tmp_path, dpo=dict(DPO))
    rows = plan_compute.dpo_rows(cfg, prompt_tokens=1000.0, n_reports=100)
    assert len(rows) == 1 and rows[0]["stage"] == "05 DPO" and rows[0]["role"] == "training"
    assert rows[0]["input_tokens"] == 6 * 2 * 1256
    assert rows[0]["gpu_hours"] == pytest.approx(6 * 2 * 1256 * 8 * 8e9 / 100e12 / 3600)
    assert rows[0]["cost_usd"] == pytest.approx(3.0 * rows[0]["gpu_hours"])


def test_dpo_epochs_pairs_and_length_cap(tmp_path):
    """max_steps null: pairs x epochs; max_train_pairs null: 100 reports x 0.8 x (1 - 0.2) = 64 pairs;
    a pair's sequence never exceeds max_length_cap."""
    dpo = {**DPO, "max_steps": None, "num_train_epochs": 2}
    rows = plan_compute.dpo_rows(make_cfg(tmp_path, dpo=dpo), prompt_tokens=1000.0, n_reports=100)
    assert rows[0]["input_tokens"] == 6 * 2 * 2 * 1256
    dpo = {**DPO, "max_steps": None, "max_train_pairs": None, "max_length_cap": 1100}
    rows = plan_compute.dpo_rows(make_cfg(tmp_path / "b", dpo=dpo), prompt_tokens=1000.0, n_reports=100)
    assert rows[0]["input_tokens"] == 64 * 2 * 1100


def test_dpo_model_teacher_is_billed_per_answer(tmp_path):
    """A billed teacher writes two answers (herded, independent) per training pair: 12 calls of 1,000 input and
    at most 256 output tokens at 2 / 8 USD per million."""
    rows = plan_compute.dpo_rows(make_cfg(tmp_path, dpo={**DPO, "teacher": "api"}), 1000.0, 100)
    teacher = next(r for r in rows if r["role"] == "teacher answers")
    assert teacher["requests"] == 12 and teacher["gpu_hours"] is None
    assert teacher["cost_usd"] == pytest.approx((12 * 1000 * 2.0 + 12 * 256 * 8.0) / 1e6)


def default_cfg(tmp_path: Path) -> RunConfig:
    """The embedded default run's params (BizFinBench: 9 tasks x 1 item, the 0.49B llama.cpp model answering
    and judging), its plan knobs at 200 TFLOP/s and 2 USD per GPU-hour."""
    path = ROOT / "params" / "default.yaml"
    params = load_params(path)
    params["inference"]["registry"] = str(ROOT / "params" / "models.yaml")
    params["plan"].update(gpu_tflops=200.0, gpu_hour_usd=2.0)
    return RunConfig(name="planned", params=params, root=tmp_path, params_file=path)


def test_bizfinbench_items_families_and_judge_calls_by_hand(tmp_path):
    """Table 2's mean query lengths of the nine tasks sum to 14,851 tokens; 9 answers of at most 128 tokens;
    the three judged families (FTU 4,556 / FQA 22 / FDD 311) get one judge call each, carrying the question,
    a 128-token answer and 400 rubric tokens, 96 tokens out. IteraJudge (FDD: 2 rubric dimensions): 2
    refinements and 1 judge call; calibration: 1 question x 3 answers x 2 dimensions refined, 2 x 3 judged."""
    rows = {(r["stage"], r["role"]): r for r in plan_compute.bizfin_rows(default_cfg(tmp_path))}
    ans = rows[("07 BizFinBench", "answers")]
    assert ans["requests"] == 9 and ans["input_tokens"] == 14851 and ans["output_tokens"] == 9 * 128
    assert ans["gpu_hours"] == pytest.approx((14851 + 1152) * 2 * 0.49e9 / 200e12 / 3600)
    assert ans["cost_usd"] == pytest.approx(2.0 * ans["gpu_hours"])
    judge = rows[("07 BizFinBench", "judge")]
    assert judge["requests"] == 3 and judge["input_tokens"] == 4556 + 22 + 311 + 3 * (128 + 400)
    assert judge["output_tokens"] == 3 * 96
    assert rows[("08 IteraJudge", "refine (stage 07 answers)")]["requests"] == 2
    assert rows[("08 IteraJudge", "judge (stage 07 answers)")]["requests"] == 1
    assert rows[("08 IteraJudge", "refine (calibration)")]["requests"] == 6
    assert rows[("08 IteraJudge", "calibration judge")]["requests"] == 6


def test_written_plan_has_every_stage_and_a_whole_run_line(tmp_path):
    cfg = default_cfg(tmp_path)
    _, md = plan.write_plan(cfg)
    text = md.read_text(encoding="utf-8")
    assert "Stage 03 (inference)" in text and "Stages 05 and 07-08" in text
    assert "05 DPO" in text and "07 BizFinBench" in text and "08 IteraJudge" in text and "Whole run" in text
    stages = (cfg.run_dir / "plan_stages.csv").read_text(encoding="utf-8")
    assert "training" in stages and "smollm2-135m" in stages


def test_registry_refuses_a_size_that_is_not_positive(tmp_path):
    from finlib.llm.registry import RegistryError, load_registry

    bad = {**REGISTRY, "models": [{**REGISTRY["models"][1], "parameters_b": 0}]}
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(RegistryError, match="parameters_b"):
        load_registry(path)


def test_every_self_hosted_record_of_the_paper_runs_has_a_size():
    """Every vLLM / local record of params/models.yaml gives parameters_b, so no open model is planned at $0."""
    from finlib.llm.registry import load_registry

    registry = load_registry(ROOT / "params" / "models.yaml")
    missing = [s.name for s in registry.values() if plan_compute.self_hosted(s) and s.parameters_b is None]
    assert missing == []
