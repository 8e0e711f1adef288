"""LoRA DPO training with TRL's `DPOTrainer` (Fin-Bias §5.2): records, the length guard, the run.

Records are conversational, with the *inference* chat messages as the prompt (same system text and
chat template as stages 03/04), so the trained adapter is evaluated on exactly what it learned from.
TRL cuts every sequence at `max_length` (default 1024, `keep_start`): a long report would silently
lose its completion (loss stuck at log 2). So `max_length` is computed from the data, and a pair
longer than `dpo.max_length_cap` is an error naming the report, never truncated.

Scale-out is accelerate's job (`params/accelerate/*.yaml`, README "DPO on GPUs"): this module has
no distributed code; `python -m finlib.finbias.dpo` and `accelerate launch -m finlib.finbias.dpo` run the same code.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

LOG_COLUMNS = ["step", "loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies",
               "logps/chosen", "logps/rejected", "grad_norm", "learning_rate", "epoch"]
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


class SequenceTooLongError(ValueError):
    """A prompt + answer is longer than the allowed `max_length`: raising beats TRL's silent cut."""


def chat_template_kwargs(spec) -> dict:
    """Chat-template switches used in BOTH training and evaluation of stage 05. A thinking model
    (registry `thinks: true`, e.g. Qwen3) runs with thinking off: its template then renders the
    generation prompt with an empty `<think>\n\n</think>\n\n` block, the same block it renders
    before a stored final answer, so the tuned model is trained on exactly the text it continues at
    evaluation (trained after an empty thought and evaluated after a long one, it would not be).
    Base and tuned model are evaluated the same way; stage 03 keeps the model's default."""
    return {"enable_thinking": False} if getattr(spec, "thinks", False) else {}


def to_records(triplets: pd.DataFrame, build_messages: Callable[[str], list[dict]],
               template_kwargs: dict | None = None) -> list[dict]:
    """TRL conversational preference records: prompt = inference messages, chosen/rejected = one
    assistant turn each, `chat_template_kwargs` (TRL passes them to the chat template) when any;
    `report_id` is kept to name an offending record."""
    extra = {"chat_template_kwargs": dict(template_kwargs)} if template_kwargs else {}
    return [{"report_id": r["report_id"], "prompt": build_messages(r["prompt_text"]),
             "chosen": [{"role": "assistant", "content": r["chosen"]}],
             "rejected": [{"role": "assistant", "content": r["rejected"]}], **extra}
            for _, r in triplets.iterrows()]


def render(tok, rec: dict, side: str | None = None, tokenize: bool = False):
    """The record's prompt with the generation prompt (`side` None) or prompt + one side, rendered
    with the record's chat-template switches, as TRL renders it (text, or token ids)."""
    msgs = rec["prompt"] if side is None else rec["prompt"] + rec[side]
    extra = {"return_dict": False} if tokenize else {}
    return tok.apply_chat_template(msgs, add_generation_prompt=side is None, tokenize=tokenize, **extra,
                                   **rec.get("chat_template_kwargs", {}))


def sequence_lengths(records: list[dict], tok) -> pd.DataFrame:
    """Tokens of prompt (with generation prompt), prompt+chosen and prompt+rejected, per record,
    with the same chat template TRL applies."""
    rows = []
    for rec in records:
        p, c, r = (render(tok, rec, side, tokenize=True) for side in (None, "chosen", "rejected"))
        rows.append({"report_id": rec["report_id"], "prompt": len(p), "chosen": len(c), "rejected": len(r)})
    return pd.DataFrame(rows, columns=["report_id", "prompt", "chosen", "rejected"])


def required_max_length(lengths: pd.DataFrame, cap: int) -> int:
    """The longest prompt+answer (+1 for an appended EOS); a pair above `cap` is an error naming it."""
    if lengths.empty:
        raise ValueError("dpo: no training records (every candidate pair was dropped; see the drop counts)")
    longest = lengths[["chosen", "rejected"]].max(axis=1)
    need = int(longest.max()) + 1
    if need > cap:
        worst = lengths.loc[longest.idxmax(), "report_id"]
        raise SequenceTooLongError(
            f"dpo: report {worst!r} needs {need} tokens (prompt + answer) > dpo.max_length_cap={cap}; "
            "raise the cap (memory permitting) instead of letting TRL truncate the report silently")
    return need


PATH_KEYS = ("base_model_name_or_path",)   # where the base was loaded from: differs between checkouts


def adapter_hash(adapter_dir: Path) -> str:
    """sha256 over the adapter's config and weights: the store key of a tuned model's answers.

    The config is hashed without `base_model_name_or_path` (an absolute path of the model cache), so
    the same adapter gets the same key in every checkout; the base model itself is already in the key
    (the engine key names the model)."""
    h = hashlib.sha256()
    for name in ADAPTER_FILES:
        path = Path(adapter_dir) / name
        if not path.is_file():
            raise FileNotFoundError(f"{adapter_dir}: no {name} (not a saved PEFT adapter)")
        h.update(name.encode())
        if name == "adapter_config.json":
            conf = {k: v for k, v in json.loads(path.read_text(encoding="utf-8")).items() if k not in PATH_KEYS}
            h.update(json.dumps(conf, sort_keys=True).encode())
        else:
            h.update(path.read_bytes())
    return h.hexdigest()


@dataclass
class TrainResult:
    adapter_dir: Path
    adapter_sha256: str
    log: pd.DataFrame
    max_length: int
    n_records: int
    train_s: float
    dtype: str
    reused: bool = False   # an adapter with the same fingerprint was already on disk
    is_main: bool = True   # False on non-main accelerate ranks (they write nothing)
    margin_share: MarginShare | None = None  # reward margin on rating tokens (single-process runs; None: not measured)


def step_log(history: list[dict]) -> pd.DataFrame:
    """Per-step loss, rewards (chosen, rejected, margins, accuracy), log-probs from the trainer's history."""
    rows = [{c: h.get(c) for c in LOG_COLUMNS} for h in history if "loss" in h and "step" in h]
    return pd.DataFrame(rows, columns=LOG_COLUMNS)


def lora_config(p: dict):
    from peft import LoraConfig

    return LoraConfig(r=int(p["r"]), lora_alpha=int(p["alpha"]), lora_dropout=float(p["dropout"]),
                      target_modules=list(p["target_modules"]), task_type="CAUSAL_LM")


def check_prompt_prefix(records: list[dict], tok) -> None:
    """Every training sequence must be the evaluation prompt (chat template + generation prompt, as
    stage 05 renders it) followed directly by the answer, so the tuned model answers exactly where it
    was trained to. A template that inserts text between them fails here: Qwen3 with thinking on
    renders an empty `<think></think>` block before a stored answer but none in the generation
    prompt (`chat_template_kwargs` turns thinking off in both)."""
    for rec in records:
        prompt = render(tok, rec)
        for side in ("chosen", "rejected"):
            full = render(tok, rec, side)
            if not full.startswith(prompt):
                raise ValueError(f"dpo: record {rec['report_id']!r} ({side}): the chat template renders the "
                                 "training sequence with a different prompt than the evaluation prompt; "
                                 "training and evaluation would see different inputs")
            answer = rec[side][-1]["content"]
            if not full[len(prompt):].startswith(answer):
                raise ValueError(f"dpo: record {rec['report_id']!r} ({side}): the chat template puts "
                                 f"{full[len(prompt):len(prompt) + 40]!r} between the evaluation prompt and the "
                                 "answer; the model would be trained on text it does not see when evaluated "
                                 "(a thinking model: set its registry `thinks: true` so both run with thinking off)")


def steps_and_epochs(dp: dict) -> dict:
    """DPOConfig's length of training: `max_steps` (an integer) wins; null -> `num_train_epochs`."""
    if dp.get("max_steps"):
        return {"max_steps": int(dp["max_steps"])}
    return {"max_steps": -1, "num_train_epochs": float(dp["num_train_epochs"])}


def dpo_config(dp: dict, out_dir: Path, max_length: int, seed: int, dtype: str):
    """The DPOConfig, built BEFORE the model is loaded: under `accelerate launch` with a DeepSpeed
    ZeRO-3 config, creating it registers the DeepSpeed config (transformers' weak reference), and
    only then does `from_pretrained` load the weights already partitioned (zero3_init_flag)."""
    import torch
    from trl import DPOConfig

    from finlib.llm.precision import trainer_flags

    return DPOConfig(
        output_dir=str(Path(out_dir) / "trainer"), max_length=max_length, truncation_mode="keep_start",
        beta=float(dp["beta"]), learning_rate=float(dp["learning_rate"]), **steps_and_epochs(dp),
        per_device_train_batch_size=int(dp["batch_size"]), gradient_accumulation_steps=int(dp["grad_accum"]),
        gradient_checkpointing=bool(dp["gradient_checkpointing"]), **trainer_flags(dtype), seed=seed,
        data_seed=seed, logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(), lr_scheduler_type="constant", warmup_steps=0)


def step_progress(desc: str):
    """A TrainerCallback that reports optimizer steps (done/total, rate, ETA, last loss) as progress
    lines (finlib.core.progress_feed): the trainer's own bar is off (disable_tqdm) because every
    redraw would be a separate output in an executed notebook, and the runner's terminal shows these."""
    import sys

    from transformers import TrainerCallback

    from finlib.core.progress_feed import Meter

    class StepProgress(TrainerCallback):
        meter: Meter | None = None

        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                self.meter = Meter(state.max_steps, desc, unit="step", file=sys.stderr)

        def on_step_end(self, args, state, control, **kwargs):
            if self.meter is not None:
                loss = next((h["loss"] for h in reversed(state.log_history) if "loss" in h), None)
                self.meter.update(1, postfix=None if loss is None else f"loss {loss:.4f}")

        def on_train_end(self, args, state, control, **kwargs):
            if self.meter is not None:
                self.meter.close()

    return StepProgress()


def train_dpo(model, tok, records: list[dict], out_dir: Path, dp: dict, seed: int, dtype: str,
              args=None) -> TrainResult:
    """Train a LoRA adapter with DPO on `records`; save adapter, training args and the step log.

    `dtype` is the measured/declared precision of `model`; DPOConfig's bf16/fp16 are set from it
    explicitly (its bf16 default would silently choose bf16 on a CPU without fast bf16 kernels).
    `args`: a DPOConfig made before the model was loaded (ZeRO-3); else it is made here.
    """
    from datasets import Dataset
    from datasets.utils.logging import disable_progress_bar
    from transformers import set_seed
    from transformers.utils import logging as hf_logging
    from trl import DPOTrainer

    disable_progress_bar()  # per-dataset-map bars would flood executed notebooks
    hf_logging.disable_progress_bar()
    set_seed(seed)
    check_prompt_prefix(records, tok)
    lengths = sequence_lengths(records, tok)
    max_length = required_max_length(lengths, int(dp["max_length_cap"]))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ds = Dataset.from_list([{k: r[k] for k in ("prompt", "chosen", "rejected", "chat_template_kwargs") if k in r}
                            for r in records])
    if args is None:
        args = dpo_config(dp, out_dir, max_length, seed, dtype)
    elif args.max_length < max_length:
        raise SequenceTooLongError(f"dpo: DPOConfig.max_length={args.max_length} < the data's {max_length}")
    max_length = args.max_length
    trainer = DPOTrainer(model=model, args=args, train_dataset=ds, processing_class=tok,
                         peft_config=lora_config(dp["lora"]), callbacks=[step_progress(f"DPO training {out_dir.name}")])
    kept = len(trainer.train_dataset)
    if kept != len(records):  # TRL drops fully truncated examples: with our max_length that is a bug
        raise SequenceTooLongError(f"dpo: TRL kept {kept} of {len(records)} records at max_length={max_length}")
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0
    adapter = out_dir / "adapter"
    step(f"dpo: trained in {train_s:,.0f} s; saving the adapter to {adapter}")
    trainer.save_model(str(adapter))  # the adapter only; gathers ZeRO-3 shards; main process writes
    log = step_log(trainer.state.log_history)
    if not trainer.is_world_process_zero():
        return TrainResult(adapter, "", log, max_length, len(records), train_s, dtype, is_main=False)
    if not (adapter / ADAPTER_FILES[1]).is_file():  # FSDP with SHARDED_STATE_DICT: save_model writes nothing
        raise RuntimeError(f"dpo: no adapter written to {adapter}; under FSDP set fsdp_state_dict_type: "
                           "FULL_STATE_DICT (params/accelerate/fsdp.yaml) so save_model gathers the LoRA weights")
    log.to_csv(out_dir / "train_log.csv", index=False)
    share = NO_MARGIN
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:   # sharded models (FSDP, ZeRO-3) cannot run one rank's pass
        margins = margin_by_token(trainer.model, tok, records, float(dp["beta"]))
        margins.to_csv(out_dir / MARGIN_FILE, index=False)
        share = rating_margin_share(margins)
    (out_dir / "training_args.json").write_text(args.to_json_string(), encoding="utf-8")
    (out_dir / "dpo_params.json").write_text(json.dumps({**dp, "seed": seed, "dtype": dtype,
                                                         "max_length": max_length, "n_records": len(records)},
                                                        indent=2, default=str), encoding="utf-8")
    return TrainResult(adapter, adapter_hash(adapter), log, max_length, len(records), train_s, dtype,
                       margin_share=share)


RATING_WORDS = re.compile(r"\b(bullish|neutral|bearish)\b")
MARGIN_FILE = "margin_by_token.csv"


def step(line: str) -> None:
    """One progress line between the long steps of stage 05: to stderr (the notebook keeps it) and to the
    runner's terminal (`finlib.core.progress_feed`), so no step after training runs in silence."""
    from finlib.core.progress_feed import publish

    print(line, file=sys.stderr, flush=True)
    publish(line)


def _completion_logps(model, ids: list[int], start: int):
    """Log-probabilities of tokens ids[start:] given their prefix (logits kept for those only)."""
    import torch

    out = model(input_ids=torch.tensor([ids], device=model.device), logits_to_keep=len(ids) - start + 1)
    logp = torch.log_softmax(out.logits[0, :-1].float(), -1)
    return logp.gather(-1, torch.tensor(ids[start:], device=logp.device)[:, None])[:, 0].cpu()


def _side_rewards(model, tok, rec: dict, side: str, beta: float) -> tuple[float, float]:
    """(implicit reward of the whole answer, of its rating tokens): beta x (log pi - log pi_ref) summed
    over the answer's tokens, the reference being the base with the adapter disabled (TRL's reference
    with a PEFT model). Rating tokens: those overlapping a rating word of the answer."""
    import torch

    prompt, full = render(tok, rec), render(tok, rec, side)
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    start = next(i for i, (a, _) in enumerate(offsets) if a >= len(prompt))
    spans = [m.span() for m in RATING_WORDS.finditer(full, len(prompt))]
    mask = torch.tensor([any(a < e and b > s for s, e in spans) for a, b in offsets[start:]])
    with torch.no_grad():
        pol = _completion_logps(model, ids, start)
        with model.disable_adapter():
            ref = _completion_logps(model, ids, start)
    r = beta * (pol - ref)
    return float(r.sum()), float(r[mask].sum())


def margin_by_token(model, tok, records: list[dict], beta: float) -> pd.DataFrame:
    """Per training pair: DPO's reward margin (chosen - rejected implicit reward) after training and
    the part of it on rating tokens. A margin carried by wording that differs between the sides for
    other reasons (a fixed template phrase) teaches the template, not the rating; the pairs are built
    so that the rating carries it (docs/dpo.md)."""
    from finlib.core.progress_feed import Meter

    was_training = model.training
    model.eval()
    rows = []
    meter = Meter(len(records), "dpo: per-token reward margins (policy and reference passes of both answers)",
                  unit="pair", file=sys.stderr)
    for rec in records:
        c_all, c_rating = _side_rewards(model, tok, rec, "chosen", beta)
        r_all, r_rating = _side_rewards(model, tok, rec, "rejected", beta)
        meter.update(1)
        rows.append({"report_id": rec["report_id"], "margin": c_all - r_all, "rating_margin": c_rating - r_rating,
                     "chosen_reward": c_all, "chosen_rating_reward": c_rating, "rejected_reward": r_all,
                     "rejected_rating_reward": r_rating})
    meter.close()
    model.train(was_training)
    return pd.DataFrame(rows, columns=["report_id", "margin", "rating_margin", "chosen_reward", "chosen_rating_reward",
                                       "rejected_reward", "rejected_rating_reward"])


@dataclass(frozen=True)
class MarginShare:
    """Share of DPO's reward margin on rating tokens: the mean over pairs of each pair's share, with a
    Student-t interval over pairs (clipped to [0, 1]; NaN below two pairs)."""

    share: float
    ci_low: float
    ci_high: float
    pairs: int

    def as_dict(self) -> dict[str, float | int]:
        return {"share": round(self.share, 4), "ci_low": round(self.ci_low, 4), "ci_high": round(self.ci_high, 4),
                "pairs": self.pairs}


NO_MARGIN = MarginShare(float("nan"), float("nan"), float("nan"), 0)


def pair_rating_shares(margins: pd.DataFrame) -> np.ndarray:
    """Per pair, the share of its margin's size on rating tokens: |rating part| / (|rating part| + |rest|),
    in [0, 1] whatever the signs (NaN for a pair without any margin). Why per pair and in absolute
    values: a ratio of sums over pairs whose margins have mixed signs is unbounded and jumps with one
    pair at small n; a bounded per-pair share has a mean and an interval."""
    rating = margins["rating_margin"].to_numpy(float)
    rest = margins["margin"].to_numpy(float) - rating
    size = np.abs(rating) + np.abs(rest)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(size > 0, np.abs(rating) / size, np.nan)


def rating_margin_share(margins: pd.DataFrame, level: float = 0.95) -> MarginShare:
    """`MarginShare` over the pairs of `margin_by_token`'s frame (pairs without a margin left out)."""
    from scipy.stats import t as student_t

    shares = pair_rating_shares(margins) if len(margins) else np.array([])
    shares = shares[np.isfinite(shares)]
    n = len(shares)
    if not n:
        return NO_MARGIN
    mean = float(shares.mean())
    if n < 2:
        return MarginShare(mean, float("nan"), float("nan"), n)
    half = float(student_t.ppf(0.5 + level / 2, n - 1) * shares.std(ddof=1) / np.sqrt(n))
    return MarginShare(mean, max(0.0, mean - half), min(1.0, mean + half), n)


def plot_log(log: pd.DataFrame, title: str, width_in: float):
    """Loss, reward margin and reward accuracy per step (one figure, three panels): side by side at a
    double column's width, stacked in a narrower one so that tick labels keep their print size."""
    import textwrap

    import matplotlib.pyplot as plt

    from finlib.finbias.figures.base import DOUBLE_COLUMN_IN, chars_per_line, figure_style

    if log.empty:
        raise LookupError("no training steps logged")
    nrows, ncols = (1, 3) if width_in >= DOUBLE_COLUMN_IN else (3, 1)
    with figure_style():
        fig, axes = plt.subplots(nrows, ncols, figsize=(width_in, 2.6 * nrows), squeeze=False)
        title = "\n".join(textwrap.wrap(title, chars_per_line(width_in, 9)))
        for ax, col in zip(axes.ravel(), ["loss", "rewards/margins", "rewards/accuracies"]):
            ax.plot(log["step"], log[col], marker="o", color="#333333")
            ax.set_title(col)
            ax.set_xlabel("step")
        fig.suptitle(title)
        fig.tight_layout()
    return fig
