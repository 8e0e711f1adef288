"""Stage 05 entry point: triplets -> LoRA DPO training -> base vs DPO evaluation -> Table 8.

`run_stage(cfg)` is what notebook 05, `make dpo` and `python -m finlib.finbias.dpo` call; with
`parts=("train",)` it is also what `accelerate launch -m finlib.finbias.dpo` runs on GPUs (README).
Training is skipped when `runs/<run>/dpo/` already holds an adapter made from the same records,
params, seed and precision (fingerprint), so a rerun of the pipeline does not retrain.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from finlib.core.artifacts import read_frame, write_frame, write_json
from finlib.core.config import ConfigError, RunConfig
from finlib.finbias.dpo import evaluate as ev
from finlib.finbias.dpo import train as tr
from finlib.finbias.dpo import triplets as tp

DPO_KEYS = ("model", "teacher", "teacher_max_new_tokens", "split_cutoff", "train_share", "max_train_pairs",
            "max_length_cap", "lora", "beta", "learning_rate", "max_steps", "batch_size", "grad_accum",
            "gradient_checkpointing", "dtype", "device")
LORA_KEYS = ("r", "alpha", "dropout", "target_modules")
PARTS = ("triplets", "train", "evaluate")


def dpo_params(cfg: RunConfig) -> dict:
    """The `dpo:` section, checked: every key documented in params/default.yaml, none defaulted."""
    dp = dict(cfg.section("dpo", known=DPO_KEYS, required=DPO_KEYS))
    if not isinstance(dp["lora"], dict):
        raise ConfigError(f"{cfg.params_file}: dpo.lora must be a mapping with keys {LORA_KEYS}")
    bad = sorted(set(dp["lora"]) ^ set(LORA_KEYS))
    if bad:
        raise ConfigError(f"{cfg.params_file}: dpo.lora: unknown or missing key(s) {bad} (expected {LORA_KEYS})")
    for k in ("max_steps", "batch_size", "grad_accum", "max_length_cap", "teacher_max_new_tokens"):
        if not isinstance(dp[k], int) or isinstance(dp[k], bool) or dp[k] < 1:
            raise ConfigError(f"{cfg.params_file}: dpo.{k} must be an integer >= 1, got {dp[k]!r}")
    if dp["max_train_pairs"] is not None and (not isinstance(dp["max_train_pairs"], int) or dp["max_train_pairs"] < 1):
        raise ConfigError(f"{cfg.params_file}: dpo.max_train_pairs must be null or an integer >= 1")
    return dp


def _registry(cfg: RunConfig) -> dict:
    from finlib.llm.registry import load_registry
    from finlib.finbias.inference import inference_params

    return load_registry(cfg.path(inference_params(cfg)["registry"]))


def _store_path(cfg: RunConfig) -> Path:
    from finlib.finbias.inference import inference_params

    return cfg.path(inference_params(cfg)["store"])


# ----------------------------------------------------------------------------------------------
# Triplets
# ----------------------------------------------------------------------------------------------

def make_teacher(cfg: RunConfig, dp: dict, store):
    """(teacher, name): the template teacher, or a registry model through the inference engine."""
    if dp["teacher"] == "template":
        return tp.template_teacher, tp.TEMPLATE_TEACHER
    from finlib.llm.openai_backend import Budget
    from finlib.llm.registry import select_models
    from finlib.finbias.inference import inference_params

    inf = inference_params(cfg)
    spec = select_models(_registry(cfg), [dp["teacher"]], source="dpo.teacher")[0]
    local = None
    if spec.backend == "local":
        from finlib.llm.local_backend import LocalModel

        local = LocalModel(spec, cfg.path(inf["model_cache"]), dtype=inf["dtype"], batch_size=inf["batch_size"],
                           seed=cfg.seed, threads=inf["threads"], device=inf["device"])
    teach = tp.model_teacher(spec, store, max_new_tokens=dp["teacher_max_new_tokens"],
                             budget=Budget(float(inf["budget_usd"])), progress=bool(inf["progress"]),
                             model_cache=cfg.path(inf["model_cache"]), log_dir=cfg.run_dir, local_model=local,
                             dtype=inf["dtype"])
    return teach, f"{spec.name} (teacher)"


def build(cfg: RunConfig, dp: dict) -> tuple[tp.Split, tp.Triplets]:
    """Split the reports and build the triplets; write `dpo_split`, `dpo_triplets`, `dpo_drops`."""
    from finlib.llm.store import ResponseStore

    reports = read_frame(cfg, "reports")
    split = tp.split_reports(reports, tp.resolve_cutoff(reports["date"], dp["split_cutoff"], float(dp["train_share"])))
    tp.check_split(split.reports)
    labels = read_frame(cfg, "labels")
    with ResponseStore(_store_path(cfg)) as store:
        teacher, name = make_teacher(cfg, dp, store)
        trip = tp.build_triplets(split, labels, read_frame(cfg, "conditions"), teacher, name)
    write_frame(cfg, "dpo_split", split.reports.drop(columns=["text"], errors="ignore")
                .merge(labels[["report_id", "label"]], on="report_id", how="left"))
    write_frame(cfg, "dpo_triplets", trip.triplets)
    write_frame(cfg, "dpo_drops", trip.drops)
    return split, trip


# ----------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------

def load_for_training(spec, cache_root: Path, torch_dtype):
    """(model, tokenizer) of the model to tune: the local safetensors cache (converted once from the
    GGUF, as stage 03 does), or the record's `hf_path` / Hugging Face id (online, or a local folder)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from finlib.llm.local_backend import ensure_cache

    hf_logging.disable_progress_bar()  # weight-loading bars would clutter executed notebooks

    path = ensure_cache(spec, cache_root) if spec.backend == "local" else (spec.hf_path or spec.model_id)
    try:
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    except OSError as exc:
        raise RuntimeError(f"dpo: cannot load weights of {spec.name!r} from {path!r} ({exc}). Offline, download "
                           f"them once (`hf download {spec.model_id} --local-dir <dir>`) and set `hf_path: <dir>` "
                           "in its params/models.yaml record") from exc
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok  # left on CPU: the Trainer places it (DDP) or shards it (ZeRO-3 / FSDP)


def train_records(cfg: RunConfig, dp: dict, spec) -> list[dict]:
    """Training records from the train triplets (earliest first, capped at `dpo.max_train_pairs`),
    with the inference prompt of stage 03 (same prompt version and system-role handling)."""
    from finlib.llm.prompts import build_messages
    from finlib.finbias.inference import inference_params

    version = inference_params(cfg)["prompt_version"]
    trip = read_frame(cfg, "dpo_triplets")
    train = trip[trip["split"] == tp.TRAIN].sort_values(["date", "report_id"])
    if dp["max_train_pairs"]:
        train = train.head(int(dp["max_train_pairs"]))
    return tr.to_records(train, lambda text: build_messages(text, spec.supports_system, version))


def fingerprint(records: list[dict], dp: dict, seed: int, dtype: str, model: str) -> str:
    blob = json.dumps({"records": records, "dpo": dp, "seed": seed, "dtype": dtype, "model": model},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def train(cfg: RunConfig, dp: dict, model_name: str | None = None) -> tr.TrainResult:
    """Train (or reuse) the LoRA adapter under runs/<run>/dpo/<model>/ with the measured precision."""
    from finlib.llm.precision import choose_dtype, record_choice
    from finlib.llm.registry import select_models

    spec = select_models(_registry(cfg), [model_name or dp["model"]], source="dpo.model")[0]
    import torch

    device = "cuda" if dp["device"] == "auto" and torch.cuda.is_available() else \
        ("cpu" if dp["device"] == "auto" else dp["device"])
    if dp["dtype"] == "auto" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("dpo.dtype: auto measures in every process and ranks could disagree; fix it "
                          "(bfloat16 on GPUs, matching the accelerate config's mixed_precision)")
    torch_dtype, report = choose_dtype(device, dp["dtype"])
    dtype = str(torch_dtype).removeprefix("torch.")
    record_choice(cfg.run_dir, "05_dpo_training", report)
    records = train_records(cfg, dp, spec)
    out = cfg.run_dir / "dpo" / spec.name
    fp = fingerprint(records, dp, cfg.seed, dtype, spec.name)
    fp_file = out / "fingerprint.json"
    if fp_file.is_file() and json.loads(fp_file.read_text()).get("fingerprint") == fp \
            and (out / "adapter" / tr.ADAPTER_FILES[1]).is_file():
        meta = json.loads(fp_file.read_text())
        return tr.TrainResult(out / "adapter", tr.adapter_hash(out / "adapter"), pd.read_csv(out / "train_log.csv"),
                              meta["max_length"], len(records), 0.0, dtype, reused=True)
    model, tok = load_for_training(spec, cfg.path(_inference(cfg)["model_cache"]), torch_dtype)
    res = tr.train_dpo(model, tok, records, out, dp, cfg.seed, dtype)
    if res.is_main:
        fp_file.write_text(json.dumps({"fingerprint": fp, "max_length": res.max_length, "train_s": res.train_s}))
    return res


def _inference(cfg: RunConfig) -> dict:
    from finlib.finbias.inference import inference_params

    return inference_params(cfg)


# ----------------------------------------------------------------------------------------------
# Evaluation and the stage
# ----------------------------------------------------------------------------------------------

@dataclass
class DPOResult:
    """Everything stage 05 produced, for the notebook."""

    split: pd.DataFrame
    split_summary: pd.DataFrame
    triplet_summary: pd.DataFrame
    drops: pd.DataFrame
    train_log: pd.DataFrame
    metrics: pd.DataFrame
    tests: pd.DataFrame
    table8: pd.DataFrame
    report: dict = field(default_factory=dict)


def as_local(spec):
    """The record evaluated with the local transformers backend (label scoring): an API/vLLM record
    of an open model loads its `hf_path` or Hugging Face id."""
    if spec.backend == "local":
        return spec
    return dataclasses.replace(spec, backend="local", hf_path=spec.hf_path or spec.model_id)


def evaluate(cfg: RunConfig, dp: dict, trained: tr.TrainResult,
             model_name: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Base and DPO model on the test split's original-condition items; metrics, paired tests, Table 8."""
    from finlib.llm.registry import select_models
    from finlib.llm.store import ResponseStore
    from finlib.finbias.scoring import scoring_params

    sc = scoring_params(cfg)
    spec = as_local(select_models(_registry(cfg), [model_name or dp["model"]], source="dpo.model")[0])
    split = read_frame(cfg, "dpo_split")
    conditions = read_frame(cfg, "conditions")
    items = ev.test_items(conditions, set(split.loc[split["split"] == tp.TEST, "report_id"]))
    if items.empty:
        raise ValueError("dpo evaluation: the test split has no original-condition items (see the split summary)")
    tuned = spec.name + ev.DPO_SUFFIX
    with ResponseStore(_store_path(cfg)) as store:
        base_pred = ev.score_test_items(cfg, spec, items, store, spec.name)
        dpo_pred = ev.score_test_items(cfg, spec, items, store, tuned, adapter=trained.adapter_dir,
                                       adapter_sha256=trained.adapter_sha256)
    pred = pd.concat([base_pred, dpo_pred], ignore_index=True)
    reps, ci = int(sc["bootstrap_reps"]), float(sc["ci"])
    rows, metrics = ev.evaluate(pred, conditions, read_frame(cfg, "labels"), read_frame(cfg, "reports"),
                                reps, cfg.seed, ci)
    tests = ev.paired_base_vs_dpo(rows, spec.name, tuned, reps, cfg.seed, ci)
    write_frame(cfg, "dpo_predictions", pred)
    write_frame(cfg, "dpo_metrics", metrics)
    write_frame(cfg, "dpo_paired_tests", tests)
    return metrics, tests, ev.table8(metrics, tests, spec.name, tuned)


def _has_train_pairs(cfg: RunConfig) -> bool:
    trip = read_frame(cfg, "dpo_triplets")
    return bool((trip["split"] == tp.TRAIN).any())


def _skipped(cfg: RunConfig, dp: dict, report: dict) -> DPOResult:
    """No training pair survived (e.g. no `no_opinion` texts without the MPQA lexicon): the stage
    says so with the drop counts instead of training on nothing or inventing pairs."""
    split_df, drops = read_frame(cfg, "dpo_split"), read_frame(cfg, "dpo_drops")
    trip = tp.Triplets(read_frame(cfg, "dpo_triplets"), drops, dp["teacher"])
    tsum = tp.triplet_summary(tp.Split(split_df, pd.Timestamp(report.get("cutoff", "1970-01-01"))), trip)
    report["skipped"] = ("no training triplets: every candidate pair was dropped ("
                         + ", ".join(f"{r.split}/{r.reason}: {r.n}" for r in drops.itertuples()) + ")")
    write_json(cfg, "dpo_report", report)
    empty = pd.DataFrame()
    return DPOResult(split_df, tp.split_summary(split_df), tsum, drops, pd.DataFrame(columns=tr.LOG_COLUMNS),
                     empty, pd.DataFrame(columns=list(ev.PAIRED_COLUMNS)), empty, report)


def caveat(cfg: RunConfig, res: DPOResult) -> str:
    """Markdown warning above the results: skipped stage, synthetic data, template teacher, plumbing model."""
    lines = []
    if res.report.get("skipped"):
        lines.append(f"**Stage skipped:** {res.report['skipped']}.")
    if cfg.is_synthetic:
        lines.append("**Synthetic data.** These numbers test the pipeline; they are not research results.")
    if res.report.get("teacher") == "template":
        lines.append(f"**{tp.TEMPLATE_TEACHER.capitalize()}**: chosen/rejected answers are deterministic templates "
                     "(factual vs opinion sentences), not a model's reasoning.")
    model = res.report.get("model")
    if model and getattr(_registry(cfg).get(model), "plumbing", False):
        lines.append(f"**Plumbing model: {model}** (registry `plumbing: true`), trained for "
                     f"{res.report.get('train_records', 0)} pairs x {cfg['dpo']['max_steps']} step(s) on CPU.")
    return "\n\n".join(f"> ⚠️ {line}" for line in lines) or "(real data, model teacher)"


def plot_training(cfg: RunConfig, res: DPOResult):
    """The per-step training curves, saved as figures/<run>/fig_dpo_training.{png,pdf}."""
    from finlib.core.tables import save_figure, synthetic_title

    title = synthetic_title(cfg, f"DPO training log: {res.report.get('model')} ({res.report.get('dtype', '-')})")
    fig = tr.plot_log(res.train_log, title)
    save_figure(cfg, fig, "fig_dpo_training")
    return fig


def pooled_metrics(res: DPOResult) -> pd.DataFrame:
    """Pooled accuracy and herding with CIs, N and parse rate, base and DPO (the notebook shows it)."""
    if res.metrics.empty:
        return res.metrics
    from finlib.core.vocab import POOLED

    m = res.metrics
    return m[(m["sector"] == POOLED) & m["metric"].isin(["accuracy", "herding", "accuracy_all", "herding_all",
                                                               "prob_herding"])]\
        .reset_index(drop=True)


def run_stage(cfg: RunConfig, parts: tuple[str, ...] = PARTS, model: str | None = None) -> DPOResult | None:
    """Stage 05: the requested parts in order; writes artifacts, runs/<run>/dpo/ and Table 8."""
    from finlib.core.tables import write_table

    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise ValueError(f"dpo: unknown part(s) {unknown}; known: {PARTS}")
    dp = dpo_params(cfg)
    t0 = time.perf_counter()
    report: dict = {"teacher": dp["teacher"], "model": model or dp["model"], "parts": list(parts)}
    if "triplets" in parts:
        split, trip = build(cfg, dp)
        report["cutoff"] = str(split.cutoff.date())
        report["split_drops"] = split.dropped
    if not _has_train_pairs(cfg):
        return _skipped(cfg, dp, report)
    trained = train(cfg, dp, model) if "train" in parts or "evaluate" in parts else None
    if trained is not None and not trained.is_main:
        return None  # a non-main accelerate rank: rank 0 writes everything
    if "evaluate" not in parts:
        return None
    metrics, tests, t8 = evaluate(cfg, dp, trained, model)
    split_df = read_frame(cfg, "dpo_split")
    trip_df, drops = read_frame(cfg, "dpo_triplets"), read_frame(cfg, "dpo_drops")
    tsum = tp.triplet_summary(tp.Split(split_df, pd.Timestamp(report.get("cutoff", "1970-01-01"))),
                              tp.Triplets(trip_df, drops, dp["teacher"]))
    report.update({"max_length": trained.max_length, "train_records": trained.n_records,
                   "train_s": round(trained.train_s, 2), "reused_adapter": trained.reused, "dtype": trained.dtype,
                   "adapter_sha256": trained.adapter_sha256, "adapter_dir": str(trained.adapter_dir),
                   "wall_s": round(time.perf_counter() - t0, 2),
                   "triplets": tsum.to_dict(orient="records")})
    write_json(cfg, "dpo_report", report)
    write_table(cfg, "table8_accuracy_dpo", t8,
                "Table 8: accuracy (%) of the base and the DPO-tuned model on the held-out test reports (original "
                "condition), per sector; delta = DPO - base with the pooled exact McNemar p; the paper's rows: "
                "its DPO accuracy (Table 8), the same model's Table 6 accuracy with the rating, and their delta")
    write_table(cfg, "table8_paired_tests", tests,
                "DPO vs base on the same test reports: exact McNemar for correctness and herding, paired "
                "difference with its cluster-bootstrap CI", float_format="{:.4g}")
    return DPOResult(split_df, tp.split_summary(split_df), tsum, drops, trained.log, metrics, tests, t8, report)
