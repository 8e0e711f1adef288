"""`--dry-run`: stage 05's preflight of a GPU launch, runnable on a CPU machine.

It does everything a training launch does before the first optimizer step except loading weights:
params, the accelerate launch's environment (distributed type, mixed precision, FSDP state-dict type,
ZeRO stage), the run's data (split, triplets or the artifacts to build them), the tokenizer, the
training records and `max_length` from the data, and the DPOConfig (built before any weights, which
is what makes DeepSpeed ZeRO-3 init take effect). It stops there and prints one line per check.

Where the 7-8B model's tokenizer cannot be downloaded (no network), `--stand-in-tokenizer NAME`
uses a registry model's tokenizer instead (e.g. the embedded `smollm2-135m`) and says so in every
line it affects: lengths are then the stand-in's, not the real model's.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field

from finlib.core.config import ConfigError, RunConfig
from finlib.llm.precision import MIXED, launch_dtype



@dataclass
class Preflight:
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def ok(self, text: str) -> None:
        self.lines.append(f"ok    {text}")

    def fail(self, text: str) -> None:
        self.lines.append(f"FAIL  {text}")
        self.problems.append(text)


def launch_env(env: dict | None = None) -> dict:
    """What `accelerate launch` told this process (its ACCELERATE_* / FSDP_* variables)."""
    env = dict(os.environ if env is None else env)
    deepspeed = env.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"
    fsdp = env.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    return {"world_size": int(env.get("WORLD_SIZE", "1")), "mixed_precision": env.get("ACCELERATE_MIXED_PRECISION"),
            "kind": "deepspeed" if deepspeed else "fsdp" if fsdp else ("ddp" if int(env.get("WORLD_SIZE", "1")) > 1
                                                                       else "single"),
            "zero_stage": env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE"),
            "zero3_init": env.get("ACCELERATE_DEEPSPEED_ZERO3_INIT"),
            "fsdp_state_dict_type": env.get("FSDP_STATE_DICT_TYPE"),
            "fsdp_activation_checkpointing": env.get("FSDP_ACTIVATION_CHECKPOINTING", "false").lower() == "true"}


def check_launch(dp: dict, env: dict, pf: Preflight) -> None:
    """Precision, adapter saving and ZeRO-3 init consistent with the params (pure: testable)."""
    mp = env["mixed_precision"]
    dp = {**dp, "dtype": launch_dtype(dp["dtype"], mp)}
    if mp is not None:
        want = MIXED.get(mp)
        if want != dp["dtype"]:
            pf.fail(f"accelerate mixed_precision={mp} but dpo.dtype={dp['dtype']} (set dpo.dtype: {want})")
        else:
            pf.ok(f"precision: accelerate mixed_precision={mp} = dpo.dtype={dp['dtype']}")
    if env["world_size"] > 1 and dp["dtype"] == "auto":
        pf.fail("dpo.dtype: auto on several ranks without a launcher precision (ranks could measure "
                "differently): set mixed_precision in the accelerate config, or fix dpo.dtype")
    if env["kind"] == "fsdp":
        if env["fsdp_state_dict_type"] != "FULL_STATE_DICT":
            pf.fail(f"FSDP state dict {env['fsdp_state_dict_type']}: save_model writes no adapter; use FULL_STATE_DICT")
        else:
            pf.ok("FSDP: FULL_STATE_DICT, save_model gathers and writes the LoRA adapter on rank 0")
        if env["fsdp_activation_checkpointing"] and dp["gradient_checkpointing"]:
            pf.fail("FSDP activation checkpointing and dpo.gradient_checkpointing are both on (transformers refuses)")
    if env["kind"] == "deepspeed":
        if env["zero_stage"] == "3" and env["zero3_init"] != "true":
            pf.fail("ZeRO-3 without zero3_init_flag: every rank would load the full weights first")
        elif env["zero_stage"] == "3":
            pf.ok("ZeRO-3 init requested (zero3_init_flag: true); DPOConfig is built before the weights load")
    pf.ok(f"launch: {env['kind']}, world size {env['world_size']}, rank {os.environ.get('RANK', '0')}")


def zero3_active() -> bool | None:
    """After DPOConfig exists: does transformers see ZeRO-3 (so from_pretrained partitions)? None when
    DeepSpeed is not installed (CPU machine): the GPU machine needs `pip install deepspeed`."""
    if importlib.util.find_spec("deepspeed") is None:
        return None
    from transformers.integrations import is_deepspeed_zero3_enabled

    return bool(is_deepspeed_zero3_enabled())


def dry_run(cfg: RunConfig, models: list[str] | None = None, stand_in_tokenizer: str | None = None) -> Preflight:
    """Run every preflight check for each model; raise ConfigError listing all problems at the end."""
    from finlib.core.artifacts import read_frame
    from finlib.finbias.dpo import stage as st
    from finlib.finbias.dpo import train as tr

    pf = Preflight()
    dp = st.dpo_params(cfg)
    pf.ok(f"params: {cfg.params_file} (dpo.models={dp['models']}, teacher={dp['teacher']}, dtype={dp['dtype']}, "
          f"gradient_checkpointing={dp['gradient_checkpointing']}, max_steps={dp['max_steps']}, "
          f"num_train_epochs={dp['num_train_epochs']})")
    env = launch_env()
    check_launch(dp, env, pf)
    try:
        trip = read_frame(cfg, "dpo_triplets")
        n_train = int((trip["split"] == "train").sum())
        pf.ok(f"data: dpo_triplets of run {cfg.name}: {n_train} training triplets")
    except FileNotFoundError:
        try:
            sp = st.split(cfg, dp)
            pf.ok(f"data: no triplets yet; split of {len(sp.reports)} reports: "
                  + ", ".join(f"{k} {v}" for k, v in sp.reports["split"].value_counts().items())
                  + f" (run `--parts triplets` first: the teacher writes {dp['teacher']} answers)")
        except FileNotFoundError as exc:
            pf.fail(f"data: {exc}")
        trip = None
    for name in models or dp["models"]:
        spec = st._spec(cfg, name)
        path = st.weights_path(spec, cfg.path(st._inference(cfg)["model_cache"])) if spec.backend == "local" \
            else (spec.hf_path or spec.model_id)
        tag = ""
        try:
            tok = st.load_tokenizer(path, spec.name)
        except RuntimeError as exc:
            if not stand_in_tokenizer:
                pf.fail(f"{name}: tokenizer: {exc}")
                continue
            sub = st._spec(cfg, stand_in_tokenizer)
            tok = st.load_tokenizer(st.weights_path(sub, cfg.path(st._inference(cfg)["model_cache"])), sub.name)
            tag = f" [STAND-IN tokenizer of {sub.name}: {name}'s own could not be loaded offline]"
        pf.ok(f"{name}: tokenizer loaded from {path if not tag else stand_in_tokenizer}{tag}")
        if trip is None or not len(trip):
            continue
        records = st.train_records(cfg, dp, spec)
        tr.check_prompt_prefix(records, tok)
        pf.ok(f"{name}: evaluation prompt is a prefix of all {len(records)} training sequences{tag}")
        try:
            max_length = tr.required_max_length(tr.sequence_lengths(records, tok), int(dp["max_length_cap"]))
            pf.ok(f"{name}: max_length from the data = {max_length} <= cap {dp['max_length_cap']}{tag}")
        except tr.SequenceTooLongError as exc:
            pf.fail(f"{name}: {exc}{tag}")
            continue
        if env["kind"] == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
            pf.ok(f"{name}: DPOConfig not built here: DeepSpeed is not installed on this machine "
                  "(install it on the GPU machine: pip install deepspeed)")
            continue
        args = tr.dpo_config(dp, st.model_dir(cfg, name), max_length, cfg.seed,
                             dp["dtype"] if dp["dtype"] != "auto" else "float32")
        z3 = zero3_active()
        if env["zero_stage"] == "3" and z3 is False:
            pf.fail(f"{name}: ZeRO-3 config not registered before loading weights")
        elif env["zero_stage"] == "3":
            pf.ok(f"{name}: ZeRO-3 registered before the weights load (from_pretrained will partition them)")
        pf.ok(f"{name}: DPOConfig built (bf16={args.bf16}, fp16={args.fp16}, gradient_checkpointing="
              f"{args.gradient_checkpointing}, max_length={args.max_length}); stopping before the weights load")
    return pf
