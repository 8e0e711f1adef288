"""Stage 05 entry point: split -> triplets -> LoRA DPO training per model -> generated-answer evaluation
-> one Table 8 with every trained model beside the paper's rows.

`run(cfg)` is what notebook 05, `make dpo` and `python -m finlib.finbias.dpo` call (the stage contract of
`finlib.core.stage`: `SECTION`, `run`, `summary`); with
`parts=("train",)` it is also what `accelerate launch -m finlib.finbias.dpo` runs on GPUs (docs/dpo.md).
Training is skipped when `runs/<run>/dpo/<model>/` already holds an adapter made from the same
records, params, seed and precision (fingerprint), so a rerun of the pipeline does not retrain.
Each model's evaluation lives in `runs/<run>/dpo/<model>/eval/`; Table 8 and the `dpo_*` artifacts
are assembled from every model of `dpo.models` evaluated so far, so models trained in separate
launches (one per GPU job) end up in one table.
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
from finlib.finbias.prompts import FINBIAS_LABELS
from finlib.llm.backends import LOCAL, backend_of

PARTS = ("triplets", "train", "evaluate")
SECTION = "dpo"
NOTEBOOK_API = ("dpo_params",)  # what notebook 05 calls besides `run` and `summary`
TABLES = ("pooled_metrics",)  # the tables of `result.tables` notebook 05 shows by name
REPORT_KEYS = ()  # the keys of `result.report` notebook 05 reads
# Measured (benchmarks/bench_dpo_teacher.py, 2 AVX2 cores): why the offline default does not use the
# embedded generator as its teacher. Printed above the results whenever the template teacher is used.
TEMPLATE_TEACHER_REASON = (
    "the embedded generator (qwen2.5-coder-0.5b via llama.cpp) took 31 s per teacher answer on 2 AVX2 cores "
    "shared with other jobs (4 answers, 3 parsed to the intended rating; ~5-8 s per answer expected on idle "
    "cores), and 6 training pairs need 12 answers: more than the stage's share of the ~15 min `make "
    "reproduce` budget. Set dpo.teacher: qwen2.5-coder-0.5b to use it (answers are stored: paid once)")


def dpo_params(cfg: RunConfig) -> dict:
    """The `dpo:` section, checked by the params schema (`finlib.core.params.DpoSection`: every key
    present, `lora:` closed, types and ranges; the model names against the registry at load)."""
    return dict(cfg.section("dpo"))


def _registry(cfg: RunConfig) -> dict:
    from finlib.llm.registry import run_registry

    return run_registry(cfg)


def _inference(cfg: RunConfig) -> dict:
    from finlib.finbias.inference.stage import inference_params

    return inference_params(cfg)


def _store_path(cfg: RunConfig) -> Path:
    return cfg.path(_inference(cfg)["store"])


def _spec(cfg: RunConfig, name: str):
    from finlib.llm.registry import select_models

    return select_models(_registry(cfg), [name], source="dpo.models")[0]


def model_dir(cfg: RunConfig, name: str) -> Path:
    return cfg.run_dir / "dpo" / name


# ----------------------------------------------------------------------------------------------
# Split and triplets
# ----------------------------------------------------------------------------------------------

def make_teacher(cfg: RunConfig, dp: dict, store):
    """(teacher, name): the template teacher, or a registry model through the inference engine."""
    if dp["teacher"] == "template":
        return tp.template_teacher, tp.TEMPLATE_TEACHER
    from finlib.llm.openai_backend import Budget

    inf = _inference(cfg)
    spec = _spec(cfg, dp["teacher"])
    local = None
    backend = backend_of(spec)
    if backend.in_process:
        local = backend.open_model(spec, cfg.path(inf["model_cache"]), dtype=inf["dtype"], batch_size=inf["batch_size"],
                                   seed=cfg.seed, threads=inf["threads"], device=inf["device"], labels=FINBIAS_LABELS)
    teach = tp.model_teacher(spec, store, max_new_tokens=dp["teacher_max_new_tokens"],
                             budget=Budget(float(inf["budget_usd"])), progress=bool(inf["progress"]),
                             model_cache=cfg.path(inf["model_cache"]), log_dir=cfg.run_dir, local_model=local,
                             dtype=inf["dtype"])
    return teach, f"{spec.name} (teacher)"


def label_window(cfg: RunConfig) -> int:
    """Stage 01's return window in trading days (the embargo's length)."""
    from finlib.finbias.labels.market_model import options_from_params

    return int(options_from_params(dict(cfg["labels"] or {}))["window"])


def trading_days(cfg: RunConfig) -> pd.DatetimeIndex | None:
    """The market's trading calendar (stage 00's `market` artifact), or None when it is absent."""
    try:
        return pd.DatetimeIndex(pd.to_datetime(read_frame(cfg, "market")["date"]))
    except (FileNotFoundError, KeyError):
        return None


def split(cfg: RunConfig, dp: dict) -> tp.Split:
    """The leakage-checked split of the labelled reports (`tp.split_reports` + `tp.check_split`)."""
    labels = read_frame(cfg, "labels")
    reports = read_frame(cfg, "reports").drop(columns=["text"], errors="ignore")
    reports = reports.merge(labels[["report_id", "label"]], on="report_id", how="left", validate="one_to_one")
    return tp.make_split(reports, dp, label_window=label_window(cfg), trading_days=trading_days(cfg))


def build(cfg: RunConfig, dp: dict) -> tuple[tp.Split, tp.Triplets]:
    """Split the reports and build the training triplets; write `dpo_split`, `dpo_triplets`, `dpo_drops`."""
    from finlib.llm.store import ResponseStore

    sp = split(cfg, dp)
    with ResponseStore(_store_path(cfg)) as store:
        teacher, name = make_teacher(cfg, dp, store)
        try:
            trip = tp.build_triplets(sp, read_frame(cfg, "labels"), read_frame(cfg, "conditions"), teacher, name,
                                     dp["max_train_pairs"])
        finally:
            from finlib.llm.llamacpp import close_servers

            close_servers()  # an embedded llama.cpp teacher stops here
    write_frame(cfg, "dpo_split", sp.reports)
    write_frame(cfg, "dpo_triplets", trip.triplets)
    write_frame(cfg, "dpo_drops", trip.drops)
    return sp, trip


# ----------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------

def weights_path(spec, cache_root: Path) -> str:
    """Where the model to tune loads from: the local safetensors cache (converted once from the GGUF,
    as stage 03 does), or the record's `hf_path` / Hugging Face id (online, or a local folder)."""
    from finlib.llm.local_backend import ensure_cache

    return str(ensure_cache(spec, cache_root) if backend_of(spec).in_process else (spec.hf_path or spec.model_id))


def load_tokenizer(path: str, name: str):
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path)
    except OSError as exc:
        raise RuntimeError(f"dpo: cannot load the tokenizer of {name!r} from {path!r} ({exc}). Offline, download "
                           f"the model once (`hf download <model_id> --local-dir <dir>`) and set `hf_path: <dir>` "
                           "in its params/models.yaml record") from exc
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(path: str, name: str, torch_dtype):
    """The weights, left on CPU: the Trainer places them (DDP) or shards them (ZeRO-3 / FSDP)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # weight-loading bars would clutter executed notebooks
    try:
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    except OSError as exc:
        raise RuntimeError(f"dpo: cannot load weights of {name!r} from {path!r} ({exc}); set `hf_path` in its "
                           "params/models.yaml record to a downloaded copy") from exc


def train_records(cfg: RunConfig, dp: dict, spec) -> list[dict]:
    """Training records from the train triplets (earliest first; the cap was applied before any
    teacher call), with the inference prompt of stage 03 (same prompt version and system handling)."""
    from finlib.finbias.prompts import build_messages

    version = _inference(cfg)["prompt_version"]
    trip = read_frame(cfg, "dpo_triplets")
    train = trip[trip["split"] == tp.TRAIN].sort_values(["date", "report_id"])
    return tr.to_records(train, lambda text: build_messages(text, spec.supports_system, version),
                         tr.chat_template_kwargs(spec))


NOT_TRAINING_INPUTS = ("models", "eval_reports", "device", "json_answer_prefix")   # dpo keys that do not change the adapter


class AdapterMissingError(RuntimeError):
    """`--parts evaluate` found no adapter for the current training inputs: it never trains one."""


def fingerprint(records: list[dict], dp: dict, seed: int, model: str) -> str:
    """What the adapter is made from: records, training params (as declared), seed, model. Not the
    precision the process resolves (a launch's bf16 vs an evaluation process's measured float32 must
    not make the same adapter look stale), nor the evaluation's settings."""
    keep = {k: v for k, v in dp.items() if k not in NOT_TRAINING_INPUTS}
    blob = json.dumps({"records": records, "dpo": keep, "seed": seed, "model": model}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def saved_adapter(cfg: RunConfig, dp: dict, model_name: str) -> tr.TrainResult | None:
    """The adapter under runs/<run>/dpo/<model>/ when it was trained from the current fingerprint
    (records, params, seed, model), else None. Reads files only: loads no model, trains nothing."""
    spec = _spec(cfg, model_name)
    out = model_dir(cfg, spec.name)
    records = train_records(cfg, dp, spec)
    fp = fingerprint(records, dp, cfg.seed, spec.name)
    if _adapter_fingerprint(out) != fp:
        source = adopt_adapter(cfg, out, fp)
        if source is None:
            return None
        tr.step(f"dpo: adapter of {spec.name} reused from {source} (trained from the same records, params, seed "
             "and model): not trained again")
    meta = json.loads((out / "fingerprint.json").read_text())
    log = pd.read_csv(out / "train_log.csv") if (out / "train_log.csv").is_file() else \
        pd.DataFrame(columns=tr.LOG_COLUMNS)
    margins = out / tr.MARGIN_FILE
    share = tr.rating_margin_share(pd.read_csv(margins)) if margins.is_file() else tr.NO_MARGIN
    return tr.TrainResult(out / "adapter", tr.adapter_hash(out / "adapter"), log, int(meta["max_length"]),
                          len(records), 0.0, str(meta.get("dtype", "")), reused=True, margin_share=share)


def _adapter_fingerprint(folder: Path) -> str | None:
    """The fingerprint of the adapter saved in `folder`, None when there is none (or it is unreadable)."""
    if not (folder / "adapter" / tr.ADAPTER_FILES[1]).is_file():
        return None
    try:
        return json.loads((folder / "fingerprint.json").read_text()).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        return None


ADAPTER_CACHE_FILES = ("fingerprint.json", "train_log.csv", tr.MARGIN_FILE)


def adopt_adapter(cfg: RunConfig, out: Path, fp: str) -> Path | None:
    """Adapters are cached by their inputs: one trained from fingerprint `fp` by another run
    (runs/<other>/dpo/<model>/) is copied into `out`, so a run that changes only what training does not
    read (a stage-04 knob, the evaluation) never retrains. Returns the folder it came from, or None."""
    import shutil

    for fp_file in sorted((cfg.root / "runs").glob(f"*/dpo/{out.name}/fingerprint.json")):
        src = fp_file.parent
        if src.resolve() == out.resolve() or _adapter_fingerprint(src) != fp:
            continue
        out.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src / "adapter", out / "adapter", dirs_exist_ok=True)
        for name in ADAPTER_CACHE_FILES:
            if (src / name).is_file():
                shutil.copy2(src / name, out / name)
        return src.relative_to(cfg.root) if src.is_relative_to(cfg.root) else src
    return None


def write_fingerprint(out: Path, fp: str, res: tr.TrainResult) -> None:
    """Beside the adapter: the fingerprint it was trained from, its max_length, and (information
    only, not part of the fingerprint) the precision it was trained in."""
    (Path(out) / "fingerprint.json").write_text(json.dumps({"fingerprint": fp, "max_length": res.max_length,
                                                            "train_s": res.train_s, "dtype": res.dtype}))


def require_adapter(cfg: RunConfig, dp: dict, model_name: str) -> tr.TrainResult:
    """`--parts evaluate`: the adapter of the current fingerprint, or a clear refusal (never trains)."""
    res = saved_adapter(cfg, dp, model_name)
    if res is None:
        out = model_dir(cfg, model_name)
        why = ("no adapter there" if not (out / "adapter" / tr.ADAPTER_FILES[1]).is_file() else
               "the adapter there was trained from other records, params, seed or model (fingerprint differs)")
        raise AdapterMissingError(
            f"dpo evaluate: no adapter of {model_name!r} for the current training inputs in {out} ({why}); "
            f"evaluate never trains: run `python -m finlib.finbias.dpo --run {cfg.name} --parts train --model "
            f"{model_name}` (or its accelerate launch, docs/dpo.md) first")
    return res


def training_dtype(dp: dict):
    """(torch dtype, precision report): `auto` takes an accelerate launch's mixed precision
    (`precision.launch_dtype`), else it is measured -- on one process only (ranks could disagree)."""
    import torch

    from finlib.llm.precision import choose_dtype, launch_dtype

    device = "cuda" if dp["device"] == "auto" and torch.cuda.is_available() else \
        ("cpu" if dp["device"] == "auto" else dp["device"])
    dtype = launch_dtype(dp["dtype"], os.environ.get("ACCELERATE_MIXED_PRECISION"))
    if dtype == "auto" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("dpo.dtype: auto measures in every process and ranks could disagree; set "
                          "mixed_precision in the accelerate config (it is then taken) or fix dpo.dtype")
    return choose_dtype(device, dtype)


def train(cfg: RunConfig, dp: dict, model_name: str) -> tr.TrainResult:
    """Train (or reuse) the LoRA adapter under runs/<run>/dpo/<model>/ with the chosen precision.

    Order matters for DeepSpeed ZeRO-3: tokenizer -> records -> max_length -> DPOConfig (registers
    the DeepSpeed config) -> weights (then loaded partitioned)."""
    from finlib.llm.precision import record_choice

    spec = _spec(cfg, model_name)
    torch_dtype, report = training_dtype(dp)
    dtype = str(torch_dtype).removeprefix("torch.")
    record_choice(cfg.run_dir, "05_dpo_training", report)
    out = model_dir(cfg, spec.name)
    path = weights_path(spec, cfg.path(_inference(cfg)["model_cache"]))
    tok = load_tokenizer(path, spec.name)
    records = train_records(cfg, dp, spec)
    fp = fingerprint(records, dp, cfg.seed, spec.name)
    reuse = saved_adapter(cfg, dp, spec.name)
    if reuse is not None:
        return reuse
    tr.check_prompt_prefix(records, tok)
    max_length = tr.required_max_length(tr.sequence_lengths(records, tok), int(dp["max_length_cap"]))
    args = tr.dpo_config(dp, out, max_length, cfg.seed, dtype)   # before the weights (ZeRO-3 init)
    model = load_model(path, spec.name, torch_dtype)
    res = tr.train_dpo(model, tok, records, out, dp, cfg.seed, dtype, args=args)
    if res.is_main:
        write_fingerprint(out, fp, res)
    return res


# ----------------------------------------------------------------------------------------------
# Evaluation, per model, and Table 8 over every model
# ----------------------------------------------------------------------------------------------

def as_local(spec):
    """The record evaluated with the local transformers backend: an API/vLLM record of an open model
    loads its `hf_path` or Hugging Face id (generation and label scoring on the GPU machine)."""
    if backend_of(spec).trains:
        return spec
    return dataclasses.replace(spec, backend=LOCAL.name, hf_path=spec.hf_path or spec.model_id)


EVAL_FILES = ("predictions", "metrics", "paired_tests")


def evaluate(cfg: RunConfig, dp: dict, trained: tr.TrainResult, model_name: str) -> dict[str, pd.DataFrame]:
    """Base and DPO model on the test split's original-condition items: generated answers for the
    first `dpo.eval_reports` test reports, label scores for all; metrics and paired tests per
    measure. Written to runs/<run>/dpo/<model>/eval/ (one folder per model: nothing is overwritten)."""
    from finlib.finbias.scoring.stage import scoring_params
    from finlib.llm.store import ResponseStore

    sc = scoring_params(cfg)
    spec = as_local(_spec(cfg, model_name))
    sp = read_frame(cfg, "dpo_split")
    conditions = read_frame(cfg, "conditions")
    items = ev.test_items(conditions, set(sp.loc[sp["split"] == tp.TEST, "report_id"]))
    if items.empty:
        raise ValueError("dpo evaluation: the test split has no original-condition items (see the split summary)")
    parts = ev.part_ids(sp)
    gen_ids = ev.eval_report_ids(items, dp["eval_reports"], parts[ev.OUT_OF_TIME])
    tuned = spec.name + ev.DPO_SUFFIX
    what = f"{len(items)} test items scored, {len(gen_ids)} report(s) generated"
    with ResponseStore(_store_path(cfg)) as store:
        prefix = ev.JSON_PREFIX if dp["json_answer_prefix"] else None
        tr.step(f"dpo: evaluating {spec.name}: loading the base model ({what})")
        base = ev.predict_test_items(cfg, spec, items, store, spec.name, gen_ids, answer_prefix=prefix)
        tr.step(f"dpo: evaluating {tuned}: loading the base model with the trained adapter ({what})")
        pred = pd.concat([base, ev.predict_test_items(cfg, spec, items, store, tuned, gen_ids,
                                                      adapter=trained.adapter_dir, adapter_sha256=trained.adapter_sha256,
                                                      answer_prefix=prefix)], ignore_index=True)
    reps, ci = int(sc["bootstrap_reps"]), float(sc["ci"])
    labels, reports = read_frame(cfg, "labels"), read_frame(cfg, "reports")
    metrics, tests = [], []
    cells = [(mode, measure, part, ids) for mode, measure in ev.MEASURES.items() for part, ids in parts.items()]
    for i, (mode, measure, part, ids) in enumerate(cells, 1):  # whole test split, in time, out of time: each its N
        p = pred[(pred["mode"] == mode) & pred["report_id"].astype(str).isin(ids)]
        if not p.empty:
            tr.step(f"dpo: {spec.name} metrics {i}/{len(cells)}: {measure}, {part} ({p['report_id'].nunique()} reports, "
                 f"{reps} bootstrap replicates, base vs tuned paired tests)")
            rows, m = ev.evaluate(p, conditions, labels, reports, reps, cfg.seed, ci)
            metrics.append(m.assign(measure=measure, test_part=part))
            tests.append(ev.paired_base_vs_dpo(rows, spec.name, tuned, reps, cfg.seed, ci)
                         .assign(measure=measure, test_part=part))
    out = {"predictions": pred.assign(measure=pred["mode"].map(ev.MEASURES)),
           "metrics": pd.concat(metrics, ignore_index=True), "paired_tests": pd.concat(tests, ignore_index=True)}
    folder = model_dir(cfg, spec.name) / "eval"
    folder.mkdir(parents=True, exist_ok=True)
    for name, df in out.items():
        df.to_parquet(folder / f"{name}.parquet", index=False)
    (folder / "eval.json").write_text(json.dumps({"adapter_sha256": trained.adapter_sha256,
                                                  "generated_reports": sorted(gen_ids),
                                                  "test_items": int(len(items)),
                                                  "test_reports_by_part": {k: len(v) for k, v in parts.items()}},
                                                 indent=2))
    return out


def assemble(cfg: RunConfig, dp: dict) -> tuple[dict[str, pd.DataFrame], list[str], list[str]]:
    """Every model of `dpo.models` evaluated so far -> combined frames and Table 8 (models in
    `dpo.models` order); also the models still missing (trained in another launch, or not yet)."""
    have, missing, parts = [], [], {n: [] for n in EVAL_FILES}
    for name in dp["models"]:
        folder = model_dir(cfg, name) / "eval"
        if all((folder / f"{n}.parquet").is_file() for n in EVAL_FILES):
            have.append(name)
            for n in EVAL_FILES:
                parts[n].append(pd.read_parquet(folder / f"{n}.parquet"))
        else:
            missing.append(name)
    frames = {n: pd.concat(v, ignore_index=True) if v else pd.DataFrame() for n, v in parts.items()}
    frames["table8"] = ev.table8(frames["metrics"], frames["paired_tests"], have) if have else pd.DataFrame()
    return frames, have, missing


def write_outputs(cfg: RunConfig, frames: dict[str, pd.DataFrame]) -> None:
    """The combined artifacts (generated answers on the whole test split in `dpo_metrics`, which stage
    06 draws; the rest -- label scoring, and every measure per test part -- in
    `dpo_metrics_label_scoring`, named by its `measure` and `test_part` columns) and the two Table 8 tables."""
    from finlib.core.tables import write_table

    m = frames["metrics"]
    write_frame(cfg, "dpo_predictions", frames["predictions"])
    write_frame(cfg, "dpo_metrics", m[(m["measure"] == ev.GENERATED) & (m["test_part"] == ev.WHOLE)]
                .reset_index(drop=True))   # stage 06 compares the whole test split with the paper
    write_frame(cfg, "dpo_metrics_label_scoring", m[(m["measure"] == ev.LABEL_SCORING) | (m["test_part"] != ev.WHOLE)]
                .reset_index(drop=True))
    write_frame(cfg, "dpo_paired_tests", frames["paired_tests"])
    write_table(cfg, "table8_accuracy_dpo", frames["table8"],
                "Table 8: accuracy (%) of each base and DPO-tuned model on the held-out test reports (original "
                "condition), per sector, by Eq. 1 over all N answered (an unparsed answer is no match; the "
                "definition of Tables 4-7), from generated answers read by the shared parser (the paper's measure; "
                "the pooled accuracy's cluster-bootstrap interval at scoring.ci; parse rate, parsed-only accuracy and its N "
                "as named extras), then the same from label scoring "
                "(named so); each for the whole test split, its in-time part (test firms before the cut-off) and "
                "its out-of-time part (on/after the cut-off), with N; delta = DPO - base (derived) with the pooled "
                "exact McNemar p; the paper's rows: its DPO accuracy (Table 8), the same model's Table 6 accuracy "
                "with the rating, and their difference (derived)")
    write_table(cfg, "table8_paired_tests", frames["paired_tests"],
                "DPO vs base on the same test reports, per measure and test part: exact McNemar for correctness "
                "and herding as Eq. 1 counts them (unparsed = no match), "
                "paired difference with its cluster-bootstrap CI", float_format="{:.4g}")


# ----------------------------------------------------------------------------------------------
# The stage
# ----------------------------------------------------------------------------------------------

@dataclass
class DPOResult:
    """Everything stage 05 produced, for the notebook (frames over every evaluated model)."""

    split: pd.DataFrame
    split_summary: pd.DataFrame
    triplet_summary: pd.DataFrame
    drops: pd.DataFrame
    train_log: pd.DataFrame
    metrics: pd.DataFrame
    tests: pd.DataFrame
    table8: pd.DataFrame
    report: dict = field(default_factory=dict)
    predictions: pd.DataFrame = field(default_factory=pd.DataFrame)
    figures: dict = field(default_factory=dict)   # name -> the saved figure (closed, displayable) or None

    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        """What notebook 05 shows, by name (Table 8 and the frames it is made from)."""
        return {"split_summary": self.split_summary, "triplet_summary": self.triplet_summary, "drops": self.drops,
                "train_log": self.train_log, "table8": self.table8, "pooled_metrics": pooled_metrics(self),
                "paired_tests": self.tests}


def _summaries(cfg: RunConfig, dp: dict, report: dict) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    split_df, drops = read_frame(cfg, "dpo_split"), read_frame(cfg, "dpo_drops")
    trip = tp.Triplets(read_frame(cfg, "dpo_triplets"), drops, dp["teacher"], int(report.get("teacher_calls", 0)))
    tsum = tp.triplet_summary(tp.Split(split_df, pd.Timestamp(report.get("cutoff", "1970-01-01"))), trip)
    return split_df, tp.split_summary(split_df), tsum, drops


def _without_evaluation(cfg: RunConfig, dp: dict, report: dict) -> DPOResult:
    """The split and triplet summaries with empty training and evaluation frames: what a launch that
    evaluates nothing has to show (no pair survived, or a training-only launch)."""
    split_df, ssum, tsum, drops = _summaries(cfg, dp, report)
    empty = pd.DataFrame()
    from finlib.finbias.inference.stage import PREDICTION_COLUMNS

    return DPOResult(split_df, ssum, tsum, drops, pd.DataFrame(columns=["model", *tr.LOG_COLUMNS]),
                     empty, pd.DataFrame(columns=list(ev.PAIRED_COLUMNS)), empty, report,
                     pd.DataFrame(columns=[*PREDICTION_COLUMNS, "measure"]))


def _skipped(cfg: RunConfig, dp: dict, report: dict) -> DPOResult:
    """No training pair survived (every candidate dropped: e.g. the analyst agrees with every label):
    the stage says so with the drop counts instead of training on nothing or inventing pairs."""
    drops = read_frame(cfg, "dpo_drops")
    report["skipped"] = ("no training triplets: every candidate pair was dropped ("
                         + ", ".join(f"{r.split}/{r.reason}: {r.n}" for r in drops.itertuples()) + ")")
    write_json(cfg, "dpo_report", report)
    return with_figures(cfg, _without_evaluation(cfg, dp, report))


def summary(cfg: RunConfig, result: DPOResult) -> str:
    """Markdown warning above the results: skipped stage, synthetic data, template teacher, plumbing models."""
    res = result
    lines = []
    if res.report.get("skipped"):
        lines.append(f"**Stage skipped:** {res.report['skipped']}.")
    if res.report.get("not_evaluated"):
        lines.append(f"**Not evaluated:** {res.report['not_evaluated']}.")
    if cfg.is_synthetic:
        lines.append("**Synthetic data.** These numbers test the pipeline; they are not research results.")
    if res.report.get("teacher") == "template":
        lines.append(f"**{tp.TEMPLATE_TEACHER.capitalize()}**: chosen/rejected answers are deterministic templates "
                     "(the same factual sentences on both sides, differing in the rating and the words tied to it), not a "
                     "model's reasoning."
                     + (f" Why not the embedded generator: {res.report['teacher_reason']}"
                        if res.report.get("teacher_reason") else ""))
    reg = _registry(cfg)
    for model in res.report.get("models", []):
        if getattr(reg.get(model), "plumbing", False):
            lines.append(f"**Plumbing model: {model}** (registry `plumbing: true`), trained for "
                         f"{res.report.get('train_records', {}).get(model, 0)} pairs x "
                         f"{cfg['dpo']['max_steps']} step(s) on CPU.")
    return "\n\n".join(f"> ⚠️ {line}" for line in lines) or "(real data, model teacher)"


def plot_training(cfg: RunConfig, res: DPOResult):
    """The per-step training curves (first model), saved as figures/<run>/fig_dpo_training.{png,pdf}."""
    from finlib.core.tables import figure_width, save_figure, skip_figure, synthetic_title
    from finlib.finbias.figures.base import caption

    log = res.train_log
    model = log["model"].iloc[0] if len(log) else (res.report.get("models") or ["-"])[0]
    if log.empty:
        skip_figure(cfg, "fig_dpo_training", f"no DPO training step logged for {model}")
        return None
    title = synthetic_title(cfg, f"DPO training log: {model} ({res.report.get('dtype', {}).get(model, '-')})")
    fig = tr.plot_log(log[log["model"] == model], title, figure_width(cfg))
    save_figure(cfg, fig, "fig_dpo_training", caption=caption(
        cfg, f"DPO training of {model}: loss, reward margin and reward accuracy per optimiser step (stage 05)."))
    return fig


def pooled_metrics(res: DPOResult) -> pd.DataFrame:
    """Pooled accuracy and herding (Eq. 1 over all N; parsed-only as named extras) with CIs, N and
    parse rate, base and DPO, per measure and test part."""
    if res.metrics.empty:
        return res.metrics
    from finlib.finbias.vocab import POOLED

    m = res.metrics
    return m[(m["sector"] == POOLED) & m["metric"].isin(ev.TABLE8_METRICS)].reset_index(drop=True)


def run(cfg: RunConfig, parts: tuple[str, ...] = PARTS, models: list[str] | None = None) -> DPOResult:
    """Stage 05: the requested parts in order, for every model of `dpo.models` (or `models`);
    writes the split/triplet artifacts once, runs/<run>/dpo/<model>/ per model, and one Table 8.

    A launch that does not evaluate (`parts` without "evaluate", or a non-main accelerate rank) returns
    the split and triplet summaries with empty results and `report["not_evaluated"]` saying why; it
    writes no report or figure (the evaluating launch does)."""
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise ValueError(f"dpo: unknown part(s) {unknown}; known: {PARTS}")
    dp = dpo_params(cfg)
    names = list(models or dp["models"])
    t0 = time.perf_counter()
    report: dict = {"teacher": dp["teacher"], "models": names, "parts": list(parts)}
    if dp["teacher"] == "template":
        report["teacher_reason"] = TEMPLATE_TEACHER_REASON
    report.update(_split_facts(cfg, dp) if "triplets" in parts else _earlier_split_facts(cfg))
    if not (read_frame(cfg, "dpo_triplets")["split"] == tp.TRAIN).any():
        return _skipped(cfg, dp, report)
    trained = _trained(cfg, dp, names, parts) if "train" in parts or "evaluate" in parts else {}
    if not trained or "evaluate" not in parts:
        report["not_evaluated"] = ("this launch evaluates nothing: " + (f"parts {list(parts)} without evaluate"
                                   if "evaluate" not in parts else "a non-main accelerate rank"))
        return _without_evaluation(cfg, dp, report)
    for name, res in trained.items():
        evaluate(cfg, dp, res, name)
    tr.step(f"dpo: Table 8 and the combined predictions, metrics and paired tests of {', '.join(trained)}")
    frames, have, missing = assemble(cfg, dp)
    write_outputs(cfg, frames)
    split_df, ssum, tsum, drops = _summaries(cfg, dp, report)
    report.update(_training_facts(trained), table8_models=have, table8_missing=missing,
                  eval_reports=dp["eval_reports"], wall_s=round(time.perf_counter() - t0, 2),
                  triplets=tsum.to_dict(orient="records"))
    write_json(cfg, "dpo_report", report)
    logs = [r.log.assign(model=n) for n, r in trained.items()]
    log = pd.concat(logs, ignore_index=True) if logs else pd.DataFrame(columns=["model", *tr.LOG_COLUMNS])
    tr.step("dpo: the training figure")
    res = with_figures(cfg, DPOResult(split_df, ssum, tsum, drops, log, frames["metrics"], frames["paired_tests"],
                                      frames["table8"], report, frames["predictions"]))
    tr.step(f"dpo: done in {time.perf_counter() - t0:,.0f} s")
    return res


def with_figures(cfg: RunConfig, res: DPOResult) -> DPOResult:
    """The stage's figure (the training log; a note file when nothing was trained), saved and closed:
    a notebook shows it where it wants it."""
    from finlib.finbias.scoring.stage import closed

    res.figures["fig_dpo_training"] = closed(plot_training(cfg, res))
    return res


def _split_facts(cfg: RunConfig, dp: dict) -> dict:
    """Build the split and the triplets now; what the report keeps of them."""
    sp, trip = build(cfg, dp)
    return {"cutoff": str(sp.cutoff.date()), "split_drops": sp.dropped, "teacher_calls": trip.teacher_calls,
            "test_firms": len(sp.reports.attrs.get("test_firms", []))}


def _earlier_split_facts(cfg: RunConfig) -> dict:
    """The split and triplets of an earlier launch (e.g. `--parts triplets` on another machine): what
    its report said of them ({} when it wrote none)."""
    from finlib.core.artifacts import read_json

    try:
        prev = read_json(cfg, "dpo_report")
    except FileNotFoundError:
        prev = {}
    return {k: prev[k] for k in ("cutoff", "split_drops", "teacher_calls", "test_firms") if k in prev}


def _trained(cfg: RunConfig, dp: dict, names: list[str], parts: tuple[str, ...]) -> dict[str, tr.TrainResult]:
    """Each model's adapter, trained now ("train" in parts) or the one of the current fingerprint
    (evaluate alone never trains); empty on a non-main accelerate rank (rank 0 writes everything)."""
    trained = {}
    for name in names:
        res = train(cfg, dp, name) if "train" in parts else require_adapter(cfg, dp, name)
        if res.is_main:
            trained[name] = res
    return trained


def _training_facts(trained: dict[str, tr.TrainResult]) -> dict:
    """Per model: what the report keeps of its training (lengths, records, time, precision, hash)."""
    return {"max_length": {n: r.max_length for n, r in trained.items()},
            "train_records": {n: r.n_records for n, r in trained.items()},
            "train_s": {n: round(r.train_s, 2) for n, r in trained.items()},
            "reused_adapter": {n: r.reused for n, r in trained.items()},
            "dtype": {n: r.dtype for n, r in trained.items()},
            "rating_margin_share": {n: (r.margin_share or tr.NO_MARGIN).as_dict() for n, r in trained.items()},
            "adapter_sha256": {n: r.adapter_sha256 for n, r in trained.items()}}
