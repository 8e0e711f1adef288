"""One way to send chat requests to any registry model through the response store.

Stage 03 (Fin-Bias conditions), stage 05 (DPO teacher), stage 07 (BizFinBench answers and judges)
and IteraJudge all call models; they all go through `send_pending` (the model's backend record sends) and,
for plain chat work, `chat` (messages in -> stored answers out). So every call is cached by
content, resumable after a crash, cost-counted against the run's budget and never sent twice.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from finlib.llm.backends import SendOptions, backend_of
from finlib.llm.progress import Progress
from finlib.llm.spec import ModelSpec
from finlib.llm.store import Request, ResponseStore, make_key

CHAT_COLUMNS = ["id", "model", "status", "raw_text", "error", "input_tokens", "output_tokens", "reasoning_tokens",
                "cost_usd", "latency_s", "truncated_output", "cache_key", "cached"]


@dataclass(frozen=True)
class ChatItem:
    """One chat call: an id of the caller's (not part of the key), the exact messages, and the
    prompt version that made them (part of the key: a reworded prompt is a new call)."""

    id: str
    messages: list[dict[str, str]]
    prompt_version: str


def engine_key(spec: ModelSpec, dtype: str | None = None, adapter_sha256: str | None = None,
               threads: int | None = None) -> dict | None:
    """What besides messages and sampling fixes a self-hosted model's output (part of its store
    key), as its backend declares it (`backends.BackendRecord.engine_key`): a torch model's weight
    source and dtype (in bfloat16 / float16 also the CPU threads it computes with,
    `precision.compute_threads(threads)` for the params' `threads` (null: torch's), since the
    kernels' split of a reduction changes its rounding: label probabilities moved by up to 0.025
    between 1 and 2 threads, float32's by rounding only), a llama.cpp GGUF's pinned hash, and a
    LoRA adapter's content hash. None for remote servers, whose model id names the weights."""
    return backend_of(spec).engine_key(spec, dtype, adapter_sha256, threads)


def send_pending(spec: ModelSpec, pending: Iterable[Request], store: ResponseStore, *, budget=None,
                 progress: Progress | None = None, local_model=None, batch: bool = False,
                 batch_dir: Path | None = None, batch_poll_s: float = 60.0, model_cache: Path | None = None,
                 log_dir: Path | None = None) -> None:
    """Send requests not yet answered to the model's backend; results land in `store`.

    The model's backend record (`finlib.llm.backends`) sends: local torch (`local_model`), the
    OpenAI Batch API (`batch`), or live OpenAI-compatible chat completions (API models, vLLM,
    llama.cpp servers). `model_cache` (where self-hosted weights are unpacked) and `log_dir`
    (server logs) are for self-hosted servers started here: a `llamacpp` record gets a llama.cpp
    server on a free local port (one per process, reused, see `llamacpp.ensure_server`) and is
    then sent exactly like a vLLM record, through the openai backend with the server's slots as
    its concurrency. The live senders take `pending` one request at a time (an iterator builds
    each request's messages only when it is sent); in-process and Batch API senders need a list.
    """
    if not pending:
        return
    backend_of(spec).send(spec, pending, store, SendOptions(
        budget=budget, progress=progress, local_model=local_model, batch=batch, batch_dir=batch_dir,
        batch_poll_s=batch_poll_s, model_cache=model_cache, log_dir=log_dir))


def chat_requests(spec: ModelSpec, items: Iterable[ChatItem], max_new_tokens: int,
                  sampling: dict | None = None, dtype: str | None = None) -> list[Request]:
    """Requests (with store keys) for chat items; `sampling` overrides the registry's."""
    params = {**(spec.sampling if sampling is None else sampling), "max_new_tokens": int(max_new_tokens)}
    out = []
    for it in items:
        key = make_key(spec.backend, spec.model_id, it.messages, params, it.prompt_version, "generate",
                       engine_key(spec, dtype))
        out.append(Request(key=key, model=spec.name, backend=spec.backend, mode="generate", messages=it.messages,
                           params=dict(params), meta={"id": it.id}))
    return out


def chat(spec: ModelSpec, items: list[ChatItem], store: ResponseStore, *, max_new_tokens: int,
         sampling: dict | None = None, budget=None, progress: bool = True, local_model=None,
         dtype: str | None = None, model_cache: Path | None = None, log_dir: Path | None = None,
         desc: str | None = None) -> pd.DataFrame:
    """Answer every item (from the store when already answered) and return one row per item.
    `desc` says what the calls are for on the progress line (default: the model's name).

    Rows keep their order; an item that failed (after the backend's retries) or was not sent
    (budget) has status "error" and its reason: never an empty answer.
    """
    requests = chat_requests(spec, items, max_new_tokens, sampling, dtype)
    unique: dict[str, Request] = {}
    for r in requests:
        unique.setdefault(r.key, r)
    answered = store.answered(list(unique))
    pending = [r for k, r in unique.items() if k not in answered]
    bar = Progress(len(pending), desc=desc or spec.name, disable=not progress or not pending)
    try:
        send_pending(spec, pending, store, budget=budget, progress=bar, local_model=local_model,
                     model_cache=model_cache, log_dir=log_dir)
    finally:
        bar.close()
    stored = store.get(list(unique))
    rows: list[dict[str, Any]] = []
    for r in requests:
        s = stored.get(r.key)
        rows.append({"id": r.meta["id"], "model": spec.name,
                     "status": "error" if s is None else s["status"],
                     "raw_text": None if s is None else s["raw_text"],
                     "error": "not sent (stopped before this call: budget or interruption)" if s is None
                     else (s["error"] if s["status"] == "error" else None),
                     "input_tokens": 0 if s is None else s["input_tokens"],
                     "output_tokens": 0 if s is None else s["output_tokens"],
                     "reasoning_tokens": None if s is None else s["reasoning_tokens"],
                     "cost_usd": 0.0 if s is None else s["cost_usd"],
                     "latency_s": 0.0 if s is None else s["latency_s"],
                     "truncated_output": None if s is None or s["truncated_output"] is None
                     else bool(s["truncated_output"]),
                     "cache_key": r.key, "cached": r.key in answered})
    return pd.DataFrame(rows, columns=CHAT_COLUMNS)
