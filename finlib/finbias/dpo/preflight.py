"""`--dry-run`: stage 05's preflight of a GPU launch, runnable on a CPU machine.

It does everything a training launch does before the first optimizer step except loading the real
weights: params, the accelerate launch's environment (distributed type, mixed precision, FSDP
state-dict type, ZeRO stage, DeepSpeed gradient accumulation), the run's data (split, triplets or the
artifacts to build them), the tokenizer, the training records and `max_length` from the data, the
DPOConfig exactly as the launch builds it (the launch's precision, built before any weights, which is
what makes DeepSpeed ZeRO-3 init take effect), and then the DPOTrainer itself on a randomly
initialised one-layer model of the same architecture (the model's config shrunk), so that precision
flags, gradient accumulation and LoRA targets resolved against the model's modules are checked on the
object that would train. It stops there and prints one line per check.

Where the 7-8B model's tokenizer cannot be downloaded (no network), `--stand-in-tokenizer NAME`
uses a registry model's tokenizer instead (e.g. the embedded `smollm2-135m`) and says so in every
line it affects: lengths are then the stand-in's, not the real model's.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field

from finlib.core.config import ConfigError, RunConfig
from finlib.llm.backends import backend_of
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
            "fsdp_activation_checkpointing": env.get("FSDP_ACTIVATION_CHECKPOINTING", "false").lower() == "true",
            "grad_accum": env.get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS")}


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
        ga = env.get("grad_accum")
        if ga not in (None, "auto") and int(ga) != int(dp["grad_accum"]):
            pf.fail(f"DeepSpeed gradient_accumulation_steps={ga} (accelerate config) but dpo.grad_accum="
                    f"{dp['grad_accum']}: transformers refuses the mismatch when training starts, after the weights "
                    "load; make them equal")
        elif ga not in (None, "auto"):
            pf.ok(f"DeepSpeed gradient_accumulation_steps={ga} = dpo.grad_accum")
        if env["zero_stage"] == "3" and env["zero3_init"] != "true":
            pf.fail("ZeRO-3 without zero3_init_flag: every rank would load the full weights first")
        elif env["zero_stage"] == "3":
            pf.ok("ZeRO-3 init requested (zero3_init_flag: true); DPOConfig is built before the weights load")
    pf.ok(f"launch: {env['kind']}, world size {env['world_size']}, rank {os.environ.get('RANK', '0')}")


def check_eval_device(device: str, models: dict[str, bool], pf: Preflight) -> None:
    """Where the evaluation generates (`inference.device`): a 7-8B model (any record not marked
    `plumbing`) must not be evaluated on the CPU -- every test report generated by an 8B on CPU
    takes days. `models`: registry name -> plumbing flag."""
    big = [m for m, plumbing in models.items() if not plumbing]
    if big and device == "cpu":
        pf.fail(f"evaluation: inference.device=cpu would generate Table 8's answers of {big} on the CPU; "
                "set inference.device: cuda in the run's params (params/paper.yaml does)")
    else:
        pf.ok(f"evaluation: inference.device={device} for {list(models)}")


# Offline fallback when a model's config cannot be read: the architecture family from the model id.
FAMILY_BY_ID = (("qwen3", "qwen3"), ("qwen2", "qwen2"), ("llama", "llama"), ("smollm", "llama"), ("mistral", "mistral"))
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16}


def tiny_config(path: str, model_id: str, vocab_size: int):
    """(config, source): the model's own config shrunk to one small layer (same architecture class,
    same module names), or -- offline, without it -- the family named by the model id."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        conf, source = AutoConfig.from_pretrained(path), f"config of {path}"
    except (OSError, ValueError):
        family = next((f for key, f in FAMILY_BY_ID if key in model_id.lower()), None)
        if family is None:
            raise RuntimeError(f"no config for {model_id!r} offline and no known family in its id") from None
        conf, source = CONFIG_MAPPING[family](), f"STAND-IN {family} config (from the model id; offline)"
    for k, v in TINY.items():
        setattr(conf, k, v)
    conf.vocab_size = max(int(vocab_size), int(getattr(conf, "vocab_size", 0) or 0))  # every token id fits
    for k in ("layer_types", "sliding_window"):   # per-layer lists sized for the real depth
        if isinstance(getattr(conf, k, None), list):
            setattr(conf, k, getattr(conf, k)[:TINY["num_hidden_layers"]])
    return conf, source


def lora_targets_found(model, targets: list[str]) -> list[str]:
    """LoRA target names that match no module of the model (PEFT only refuses when NONE matches)."""
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    return [t for t in targets if t not in names]


def build_tiny_trainer(conf, tok, records: list[dict], args, dp: dict, torch_dtype):
    """The DPOTrainer the launch would build (same DPOConfig, LoRA config, records' format), on a
    randomly initialised one-layer model of the same architecture: returns the trainer."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import DPOTrainer

    from finlib.finbias.dpo import train as tr

    model = AutoModelForCausalLM.from_config(conf, dtype=torch_dtype)
    missing = lora_targets_found(model, list(dp["lora"]["target_modules"]))
    if missing:
        raise ValueError(f"dpo.lora.target_modules {missing} match no module of {type(model).__name__} "
                         f"(its linear layers: {sorted({n.rsplit('.', 1)[-1] for n, m in model.named_modules() if type(m).__name__ == 'Linear'})})")
    ds = Dataset.from_list([{k: r[k] for k in ("prompt", "chosen", "rejected", "chat_template_kwargs") if k in r}
                            for r in records[:2]])
    return DPOTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, peft_config=tr.lora_config(dp["lora"]))


def check_trainer(trainer, dtype: str, dp: dict, env: dict) -> list[str]:
    """Mismatches between the trainer as built and what the launch and params ask for."""
    a = trainer.args
    want = (dtype == "bfloat16", dtype == "float16")   # written out here, not taken from the code that set them
    bad = [] if (a.bf16, a.fp16) == want else [
        f"DPOConfig bf16={a.bf16}, fp16={a.fp16} but the launch trains in {dtype} (bf16={want[0]}, fp16={want[1]})"]
    if a.gradient_accumulation_steps != int(dp["grad_accum"]):
        bad.append(f"DPOConfig gradient_accumulation_steps={a.gradient_accumulation_steps} != dpo.grad_accum")
    ga = env.get("grad_accum")
    if ga not in (None, "auto") and int(ga) != a.gradient_accumulation_steps:
        bad.append(f"DeepSpeed gradient_accumulation_steps={ga} != DPOConfig's {a.gradient_accumulation_steps}")
    wrapped = {n.rsplit(".", 1)[-1] for n, m in trainer.model.named_modules() if hasattr(m, "lora_A")}
    if set(dp["lora"]["target_modules"]) - wrapped:
        bad.append(f"LoRA wraps {sorted(wrapped)}, not every dpo.lora.target_modules {dp['lora']['target_modules']}")
    return bad


def zero3_active() -> bool | None:
    """After DPOConfig exists: does transformers see ZeRO-3 (so from_pretrained partitions)? None when
    DeepSpeed is not installed (CPU machine): the GPU machine needs `pip install deepspeed`."""
    if importlib.util.find_spec("deepspeed") is None:
        return None
    from transformers.integrations import is_deepspeed_zero3_enabled

    return bool(is_deepspeed_zero3_enabled())


def dry_run(cfg: RunConfig, models: list[str] | None = None, stand_in_tokenizer: str | None = None) -> Preflight:
    """Run every preflight check for each model; the returned Preflight has one line per check and
    every problem found (the command line prints them and fails when there is any)."""
    from finlib.finbias.dpo import stage as st

    pf = Preflight()
    dp = st.dpo_params(cfg)
    pf.ok(f"params: {cfg.params_file} (dpo.models={dp['models']}, teacher={dp['teacher']}, dtype={dp['dtype']}, "
          f"gradient_checkpointing={dp['gradient_checkpointing']}, max_steps={dp['max_steps']}, "
          f"num_train_epochs={dp['num_train_epochs']})")
    env = launch_env()
    check_launch(dp, env, pf)
    check_eval_device(st._inference(cfg)["device"],
                      {m: bool(st._spec(cfg, m).plumbing) for m in models or dp["models"]}, pf)
    trip = _check_data(cfg, dp, pf)
    for name in models or dp["models"]:
        _check_model(cfg, dp, env, name, trip, stand_in_tokenizer, pf)
    return pf


def _check_data(cfg: RunConfig, dp: dict, pf: Preflight):
    """The run's triplets, or None with what exists instead (the split, or why there is none): a
    launch before the teacher ran still gets its tokenizer and launch checks."""
    from finlib.core.artifacts import read_frame
    from finlib.finbias.dpo import stage as st

    try:
        trip = read_frame(cfg, "dpo_triplets")
        pf.ok(f"data: dpo_triplets of run {cfg.name}: {int((trip['split'] == 'train').sum())} training triplets")
        return trip
    except FileNotFoundError:
        try:
            sp = st.split(cfg, dp)
            pf.ok(f"data: no triplets yet; split of {len(sp.reports)} reports: "
                  + ", ".join(f"{k} {v}" for k, v in sp.reports["split"].value_counts().items())
                  + f" (run `--parts triplets` first: the teacher writes {dp['teacher']} answers)")
        except FileNotFoundError as exc:
            pf.fail(f"data: {exc}")
        return None


def _check_model(cfg: RunConfig, dp: dict, env: dict, name: str, trip, stand_in_tokenizer: str | None,
                 pf: Preflight) -> None:
    """One model's checks in the order a launch meets them; the first failing step ends this
    model's checks (the later ones need what it would have built)."""
    from finlib.finbias.dpo import stage as st
    from finlib.finbias.dpo import train as tr

    spec = st._spec(cfg, name)
    loaded = _load_tokenizer(cfg, spec, stand_in_tokenizer, pf)
    if loaded is None or trip is None or not len(trip):
        return
    tok, path, tag = loaded
    records = st.train_records(cfg, dp, spec)
    tr.check_prompt_prefix(records, tok)
    pf.ok(f"{name}: evaluation prompt is a prefix of all {len(records)} training sequences{tag}")
    try:
        max_length = tr.required_max_length(tr.sequence_lengths(records, tok), int(dp["max_length_cap"]))
        pf.ok(f"{name}: max_length from the data = {max_length} <= cap {dp['max_length_cap']}{tag}")
    except tr.SequenceTooLongError as exc:
        pf.fail(f"{name}: {exc}{tag}")
        return
    if env["kind"] == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
        pf.ok(f"{name}: DPOConfig not built here: DeepSpeed is not installed on this machine "
              "(install it on the GPU machine: pip install deepspeed)")
        return
    torch_dtype = _training_dtype(dp, name, pf)
    if torch_dtype is None:
        return
    args = _check_dpo_config(cfg, dp, env, name, max_length, torch_dtype, pf)
    _check_tiny_trainer(dp, env, name, (path, spec.model_id), tok, records, args, torch_dtype, tag, pf)


def _weights_path(cfg: RunConfig, spec) -> str:
    """Where a model's tokenizer and config are read: the unpacked weights of a local record, else its
    hub path."""
    from finlib.finbias.dpo import stage as st

    if backend_of(spec).in_process:
        return st.weights_path(spec, cfg.path(st._inference(cfg)["model_cache"]))
    return spec.hf_path or spec.model_id


def _load_tokenizer(cfg: RunConfig, spec, stand_in_tokenizer: str | None, pf: Preflight):
    """(tokenizer, path, tag): the model's own tokenizer, or the named stand-in's with a tag that every
    line it affects carries (lengths are then the stand-in's); None when neither loads."""
    from finlib.finbias.dpo import stage as st

    name, path, tag = spec.name, _weights_path(cfg, spec), ""
    try:
        tok = st.load_tokenizer(path, spec.name)
    except RuntimeError as exc:
        if not stand_in_tokenizer:
            pf.fail(f"{name}: tokenizer: {exc}")
            return None
        sub = st._spec(cfg, stand_in_tokenizer)
        tok = st.load_tokenizer(st.weights_path(sub, cfg.path(st._inference(cfg)["model_cache"])), sub.name)
        tag = f" [STAND-IN tokenizer of {sub.name}: {name}'s own could not be loaded offline]"
    pf.ok(f"{name}: tokenizer loaded from {path if not tag else stand_in_tokenizer}{tag}")
    return tok, path, tag


def _training_dtype(dp: dict, name: str, pf: Preflight):
    """The precision the launch trains in (its mixed_precision); float32 when `auto` would be measured
    on a device this machine lacks; None (a finding) when the params and the launch disagree."""
    from finlib.finbias.dpo import stage as st

    try:
        torch_dtype, _ = st.training_dtype(dp)
    except ConfigError as exc:
        pf.fail(f"{name}: training precision: {exc}")
        return None
    except (AssertionError, RuntimeError) as exc:   # `auto` measures on a device this machine lacks
        import torch

        torch_dtype = torch.float32
        pf.ok(f"{name}: dpo.dtype auto without a launcher precision is measured on {dp['device']} at launch, "
              f"which this machine lacks ({type(exc).__name__}); the trainer below is built in float32")
    return torch_dtype


def _check_dpo_config(cfg: RunConfig, dp: dict, env: dict, name: str, max_length: int, torch_dtype,
                      pf: Preflight):
    """The DPOConfig exactly as the launch builds it (before any weights, which is what makes ZeRO-3
    init take effect), and whether transformers then sees ZeRO-3."""
    from finlib.finbias.dpo import stage as st
    from finlib.finbias.dpo import train as tr

    dtype = str(torch_dtype).removeprefix("torch.")
    args = tr.dpo_config(dp, st.model_dir(cfg, name), max_length, cfg.seed, dtype)
    z3 = zero3_active()
    if env["zero_stage"] == "3" and z3 is False:
        pf.fail(f"{name}: ZeRO-3 config not registered before loading weights")
    elif env["zero_stage"] == "3":
        pf.ok(f"{name}: ZeRO-3 registered before the weights load (from_pretrained will partition them)")
    pf.ok(f"{name}: DPOConfig built (training dtype {dtype}: bf16={args.bf16}, fp16={args.fp16}, "
          f"gradient_accumulation_steps={args.gradient_accumulation_steps}, gradient_checkpointing="
          f"{args.gradient_checkpointing}, max_length={args.max_length})")
    return args


def _check_tiny_trainer(dp: dict, env: dict, name: str, model: tuple[str, str], tok, records: list[dict], args,
                        torch_dtype, tag: str, pf: Preflight) -> None:
    """The DPOTrainer on a one-layer model of the same architecture (`model`: its path and model id):
    precision flags, gradient accumulation and LoRA targets checked on the object that would train."""
    path, model_id = model
    try:
        conf, source = tiny_config(path, model_id, len(tok))
        trainer = build_tiny_trainer(conf, tok, records, args, dp, torch_dtype)
    except Exception as exc:  # noqa: BLE001 -- every way the real trainer would fail is a finding
        pf.fail(f"{name}: DPOTrainer on a tiny model of the same architecture: {type(exc).__name__}: {exc}{tag}")
        return
    bad = check_trainer(trainer, str(torch_dtype).removeprefix("torch."), dp, env)
    for b in bad:
        pf.fail(f"{name}: {b}")
    if not bad:
        pf.ok(f"{name}: DPOTrainer built on a one-layer {type(trainer.model.get_base_model()).__name__} "
              f"({source}): LoRA on {sorted(dp['lora']['target_modules'])}, bf16={trainer.args.bf16}, "
              f"gradient_accumulation_steps={trainer.args.gradient_accumulation_steps}; stopping before the "
              f"real weights load{tag}")
    del trainer
