"""Stage 03 entry point: every condition row x model -> predictions.parquet + inference_report.json.

Label scoring (one forward pass, three label probabilities) for every `ok` condition row with
local models; chain-of-thought generation (the paper's protocol) for the first
`inference.generate_subset` reports (all their conditions), and for every row with API models
(whose servers do not expose pre-filled label log-probabilities portably), sent live or, with
`inference.batch: true`, through the OpenAI Batch API. Every call goes through the response
store: a rerun only sends what is not answered yet. Answers are read once, with stage 04's parser
(`finlib.finbias.answers.parse_predictions`), so this stage reports the parse rate the metrics see.
"""
from __future__ import annotations

import dataclasses
import functools
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from finlib.core.artifacts import (
    ArtifactTexts,
    artifact_path,
    existing_artifact,
    read_frame,
    require_columns,
    use_returning_arrow_pool,
    write_atomic,
    write_frame,
    write_json,
)
from finlib.core.config import ConfigError, RunConfig
from finlib.core.memory import peak_rss_mb
from finlib.finbias.answers import TRUNCATED, TRUNCATED_READ, parse_predictions
from finlib.finbias.inference.draws import (
    SWEEP_VALUES,
    check_extension_params,
    draws_frame,
    draws_summary,
    extension_models,
    extension_report_ids,
)
from finlib.finbias.prompts import (
    FINBIAS_LABELS,
    build_messages,
    finbias_prompt,
    finbias_response_format,
    truncate_text,
)
from finlib.llm.backends import backend_of
from finlib.llm.context import CONTEXT_REFUSED, fits, not_fit_reason, output_room
from finlib.llm.engine import engine_key, send_pending
from finlib.llm.progress import Progress
from finlib.llm.registry import run_registry, select_models
from finlib.llm.spec import ModelSpec
from finlib.llm.store import Request, ResponseStore, make_key

CALL_COLUMNS = ["item_id", "report_id", "condition", "model", "mode", "raw_text", "p_bullish", "p_neutral",
                "p_bearish", "status", "error", "input_tokens", "output_tokens", "cost_usd", "latency_s",
                "truncated", "cache_key", "truncated_output", "output_room"]
# truncated_output: the answer stopped at the output-token limit (finish_reason "length"); NA when unknown
# output_room: output tokens asked for (the cap, or what the context leaves after the whole report); NA when scored
PARSE_COLUMNS = ["answer", "parsed", "parse_note", "answered"]  # stage 04's reading (04 reads again); answered:
# False for "not answered" rows (server/transport errors after retries), which are outside every N
PREDICTION_COLUMNS = CALL_COLUMNS + PARSE_COLUMNS
SORT_KEYS = ["model", "mode", "item_id"]  # the predictions artifact's row order
# what the stage report and notebook 03's tables read of the predictions (no reply text, no keys: at the
# paper's size every column but the text took ~0.4 GB as a frame, these about half of that)
SUMMARY_COLUMNS = ["item_id", "condition", "model", "mode", "p_bullish", "p_neutral", "p_bearish", "status", "error",
                   "input_tokens", "output_tokens", "cost_usd", "truncated_output", "parsed", "parse_note", "answered"]
SUMMARY_TEXT_COLUMNS = ("item_id", "condition", "model", "mode", "status", "error", "parse_note")  # read as categoricals
CONDITION_COLUMNS = ("item_id", "report_id", "condition", "text", "status", "skip_reason")
API_CHARS_PER_TOKEN = 4.0  # `prompt_length_by: estimate` (or no tokenizer on disk): characters per token


def inference_params(cfg: RunConfig) -> dict:
    """The `inference:` section, checked by the params schema (`finlib.core.params.InferenceSection`:
    every key present, types, ranges, unknown keys, the prompt version among the Fin-Bias prompts),
    then the extension knobs against each other."""
    inf = dict(cfg.section("inference"))
    check_extension_params(inf, str(cfg.params_file))
    return inf


class InferenceFailed(RuntimeError):
    """Most calls of a model failed (wrong key, server down, ...): the run must not go on to score them."""


def check_error_share(pred: pd.DataFrame, max_share: float) -> None:
    """Fail the stage when, for any model, more than `max_share` of its sent calls ended in error,
    naming the most frequent error -- a run whose every call got HTTP 401 must not "succeed".
    The artifacts are written first, so the failures can be inspected."""
    bad = []
    for model, g in pred[pred["status"] != "skipped"].groupby("model"):
        errors = g.loc[g["status"] == "error", "error"].astype(str)
        if len(g) and len(errors) / len(g) > max_share:
            top, n = Counter(errors.str[:300]).most_common(1)[0]
            bad.append(f"model '{model}': {len(errors)}/{len(g)} calls failed; most frequent error ({n}x): {top}")
    if bad:
        raise InferenceFailed("stage 03: too many failed calls (inference.max_error_share="
                              f"{max_share:g}): " + " | ".join(bad) + ". Answers already stored are kept; fix the "
                              "cause and rerun (only the failed calls are sent again).")


def check_conditions(df: pd.DataFrame, source: str = "conditions.parquet", text: bool = True) -> pd.DataFrame:
    """Fail loudly on a malformed stage-02 artifact (missing column, ok row without text;
    `text=False`: a frame without the text column, whose texts `_check_texts` reads apart)."""
    require_columns(df, [c for c in CONDITION_COLUMNS if text or c != "text"], source)
    if df["item_id"].duplicated().any():
        dup = df.loc[df["item_id"].duplicated(), "item_id"].iloc[0]
        raise ValueError(f"{source}: duplicate item_id {dup!r}")
    bad_status = df.loc[~df["status"].isin(["ok", "skipped"])]
    if len(bad_status):
        raise ValueError(f"{source}: row {bad_status.index[0]} (item_id {bad_status['item_id'].iloc[0]!r}), "
                         f"field 'status': {bad_status['status'].iloc[0]!r} is not ok/skipped")
    if text:
        _check_texts(df, source)
    return df


def _check_texts(df: pd.DataFrame, source: str) -> None:
    """An ok row must have a text with something besides whitespace (rows named by index)."""
    blank = df["text"].isna() | ~df["text"].astype("string").str.contains(r"\S", regex=True).fillna(False)
    no_text = df.loc[(df["status"] == "ok") & blank]
    if len(no_text):
        raise ValueError(f"{source}: row {no_text.index[0]} (item_id {no_text['item_id'].iloc[0]!r}), "
                         "field 'text': empty text on a status 'ok' row")


def generate_subset_ids(ok: pd.DataFrame, n: int) -> set[str]:
    """The first `n` report ids in sorted order: deterministic and the same for every model."""
    return set(sorted(ok["report_id"].astype(str).unique())[:n])


def max_new_tokens_for(spec: ModelSpec, inf: dict) -> int:
    """The output-token limit of a model in this run: the registry's (the authors' 4096) when
    `inference.max_new_tokens` is "registry", else the run's explicit override (a CPU-time cap)."""
    return spec.max_new_tokens if inf["max_new_tokens"] == "registry" else int(inf["max_new_tokens"])


def primary_mode(spec: ModelSpec, inf: dict) -> str:
    """The mode a model answers every row in: `inference.mode` for a backend that scores labels,
    else "generate"."""
    return inf["mode"] if backend_of(spec).scores_labels else "generate"


def engine_of(spec: ModelSpec, inf: dict) -> dict | None:
    """The store-key engine fields of a model under this run's params (see `engine.engine_key`)."""
    return engine_key(spec, inf["dtype"], threads=inf["threads"] if backend_of(spec).in_process else None)


def prompt_for(text: str, spec: ModelSpec, inf: dict, n_tokens: Callable[[str], int],
               overhead: int) -> tuple[list[dict], bool, int]:
    """(messages, whether the text was cut, prompt tokens) of one condition text: the whole report
    (`inference.max_input_tokens` null, the paper's protocol), or cut from the end at a numeric cap
    (a named CPU-time cap of the embedded run; first sentence kept)."""
    cap = inf["max_input_tokens"]
    text, truncated = (text, False) if cap is None else truncate_text(text, cap - overhead - 2, n_tokens)
    return build_messages(text, spec.supports_system, inf["prompt_version"]), truncated, overhead + n_tokens(text)


def tokenizer_on_disk(model_id: str) -> bool:
    """Whether the local Hugging Face cache holds a tokenizer file of `model_id`. Asked before
    transformers is imported: importing it (and torch with it) only to learn that nothing is on
    disk cost stage 03 ~0.2 GB of resident memory for the rest of the stage."""
    from huggingface_hub import try_to_load_from_cache

    return any(isinstance(try_to_load_from_cache(model_id, name), str)
               for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"))


@functools.lru_cache(maxsize=64)
def hub_tokenizer(model_id: str) -> Any | None:
    """The model's own tokenizer from the local Hugging Face cache (a vLLM server on this machine
    has put it there; `huggingface-cli download <id> --include "tokenizer*"` otherwise), loaded once
    per process; None when it is not on disk or `model_id` is no Hub repository. Never downloads:
    a run must not wait on the network to count tokens."""
    if "/" not in model_id or not tokenizer_on_disk(model_id):
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model_id, local_files_only=True)
    except Exception:  # noqa: BLE001 -- not cached, gated, no tokenizer files: the estimate is the fallback
        return None


def estimate_tokens(text: str) -> int:
    """The named fallback count: characters / `API_CHARS_PER_TOKEN` (a server's 400 corrects it)."""
    return int(np.ceil(len(text) / API_CHARS_PER_TOKEN))


def server_token_counter(spec: ModelSpec, inf: dict) -> tuple[Callable[[str], int], int, str]:
    """(count of a text, prompt overhead, how counted) for a server-backed model: its own tokenizer
    (`inference.prompt_length_by: model_tokenizer`, when on disk) sizes the output room of an
    8k-context model exactly; else the characters/4 estimate, named in the stage report."""
    empty = build_messages("", spec.supports_system, inf["prompt_version"])
    tok = hub_tokenizer(spec.model_id) if inf["prompt_length_by"] == "model_tokenizer" \
        else None
    if tok is None:
        why = "estimate" if inf.get("prompt_length_by") == "estimate" else "estimate (no tokenizer on disk)"
        return estimate_tokens, estimate_tokens(empty[0]["content"]) + 16, why

    def n_tokens(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False))
    try:
        overhead = len(tok.apply_chat_template(empty, add_generation_prompt=True, tokenize=True))
    except Exception:  # noqa: BLE001 -- no chat template: the instructions plus a margin for the roles
        overhead = n_tokens(empty[0]["content"]) + 16
    return n_tokens, overhead, "model_tokenizer"


def plan_requests(ok: pd.DataFrame, spec: ModelSpec, modes_for: Callable[[Mapping], list[str]],
                  inf: dict, n_tokens: Callable[[str], int], overhead: int,
                  samples_for: Callable[[Mapping, str], int] | None = None,
                  keep_messages: bool = True) -> list[Request]:
    """One Request per ok row x mode x draw (`samples_for`: draws of a row in a mode, default 1;
    draw s > 0 names its index in the store key). The report goes in whole (`inference.max_input_tokens`
    null, the paper's protocol) and a generated answer gets the output room the context leaves
    (`finlib.llm.context`, recorded per item as `output_room`). A report is never held back on the
    client's count: a server-backed model gets it with the room counted (the cap when the count
    leaves none: the server's 400 states its own count and the call is retried with that room, or
    refused -> an empty answer inside N); a local model whose exact count leaves no room gets the
    same empty answer without a call (meta `context_refused`, with the reason). A
    number in `max_input_tokens` is a named CPU-time cap of the embedded run: longer texts are cut
    from the end (first sentence kept) and flagged `truncated`. `keep_messages=False` plans keys
    only (messages None: `with_messages` builds them again for the calls that are sent)."""
    engine, backend = engine_of(spec, inf), backend_of(spec)
    version = inf["prompt_version"]
    max_new = max_new_tokens_for(spec, inf)
    cap = inf["max_input_tokens"]
    if cap is not None and cap - overhead - 2 <= 0:
        raise ConfigError(f"inference.max_input_tokens={cap} leaves no room for the report "
                          f"after the prompt ({overhead} tokens) for model {spec.name}")
    out = []
    constrained = spec.name in inf["constrained_json"]
    for row in ok.to_dict("records"):  # plain dicts: a Series per row cost more than the hashing
        modes = modes_for(row)
        if not modes:
            continue
        messages, truncated, prompt_tokens = prompt_for(str(row["text"]), spec, inf, n_tokens, overhead)
        room = output_room(spec.context_length, prompt_tokens, max_new)
        over = not fits(spec.context_length, prompt_tokens, max_new)
        for mode in modes:
            params = dict(spec.sampling)
            if mode == "generate":
                params["max_new_tokens"] = max_new if over else max(room, 1)
                if constrained:  # named option, embedded llama.cpp model only (checked in run_stage)
                    params["response_format"] = finbias_response_format()
            for sample in range(samples_for(row, mode) if samples_for else 1):
                p = dict(params)
                if sample and backend.in_process:  # in-process generation is seeded: a draw needs its own seed
                    p["seed"] = int(sample)
                key = make_key(spec.backend, spec.model_id, messages, p, version, mode, engine, sample=sample)
                out.append(Request(key=key, model=spec.name, backend=spec.backend, mode=mode,
                                   messages=messages if keep_messages else None,
                                   params=p, truncated=truncated, input_tokens_est=prompt_tokens,
                                   meta={"item_id": row["item_id"], "report_id": row["report_id"],
                                         "condition": row["condition"], "sample": sample,
                                         "output_room": room if mode == "generate" else None,
                                         "context_refused": not_fit_reason(spec.context_length, prompt_tokens)
                                         if mode == "generate" and over and backend.in_process else None}))
    return out


def with_messages(requests: Iterable[Request], texts: Mapping[str, str], spec: ModelSpec, inf: dict,
                  n_tokens: Callable[[str], int], overhead: int) -> Iterator[Request]:
    """The requests of a keys-only plan with their messages, built one at a time as the sender
    takes them (texts read in plan order: `ArtifactTexts` loads each row group once)."""
    for r in requests:
        yield dataclasses.replace(r, messages=prompt_for(texts[r.meta["item_id"]], spec, inf, n_tokens, overhead)[0])


def _unique(requests: list[Request]) -> list[Request]:
    seen: dict[str, Request] = {}
    for r in requests:
        seen.setdefault(r.key, r)
    return list(seen.values())


def _rows(requests: list[Request], stored: dict[str, dict]) -> list[dict]:
    rows = []
    for r in requests:
        s = stored.get(r.key)
        if s is None and r.meta.get("context_refused"):  # a local model's prompt fills its context: empty, in N
            s = {"status": "ok", "raw_text": "", "p_bullish": None, "p_neutral": None, "p_bearish": None,
                 "error": f"{CONTEXT_REFUSED}: {r.meta['context_refused']}", "input_tokens": 0, "output_tokens": 0,
                 "cost_usd": 0.0, "latency_s": 0.0, "truncated_output": False}
        status = "error" if s is None else s["status"]
        rows.append({**r.meta, "model": r.model, "mode": r.mode,
                     "raw_text": None if s is None else s["raw_text"],
                     "p_bullish": np.nan if s is None or s["p_bullish"] is None else s["p_bullish"],
                     "p_neutral": np.nan if s is None or s["p_neutral"] is None else s["p_neutral"],
                     "p_bearish": np.nan if s is None or s["p_bearish"] is None else s["p_bearish"],
                     "status": status,
                     "error": ("not sent (stopped before this call: budget or interruption)" if s is None
                               else s["error"] if status == "error" or str(s["error"] or "").startswith(CONTEXT_REFUSED)
                               else None),
                     "input_tokens": 0 if s is None else s["input_tokens"],
                     "output_tokens": 0 if s is None else s["output_tokens"],
                     "cost_usd": 0.0 if s is None else s["cost_usd"],
                     "latency_s": 0.0 if s is None else s["latency_s"],
                     "truncated": r.truncated, "cache_key": r.key,
                     "truncated_output": None if s is None or s["truncated_output"] is None
                     else bool(s["truncated_output"])})
    return rows


ROWS_PER_CHUNK = 2_000  # rows read back from the store, parsed and written at a time (see `write_model_rows`)


@dataclass
class ModelCalls:
    """One model's plan once its missing calls are sent: keys and rows' metadata, no reply text."""

    spec: ModelSpec
    primary: str
    requests: list[Request]
    unique: list[Request]
    answered: set[str]
    pending: list[Request]
    model: Any
    counted: str
    t0: float
    draw_ids: set[str]  # the reports answered `inference.samples_per_item` times (empty: not an extension model)


def _send_model(cfg: RunConfig, spec: ModelSpec, texts: ArtifactTexts, inf: dict, store: ResponseStore,
                budget, gen_ids: set[str], only_ids: set[str] | None = None,
                draw_ids: set[str] = frozenset()) -> ModelCalls:
    """Plan and send what is missing for one model (`only_ids`: the reports of a model that answers
    a subset, the embedded generator; None = every report; `draw_ids`: the reports this model
    answers `inference.samples_per_item` times, sweep rows included -- empty for a model outside
    `inference.extension_models`). The conditions are read a row group at a time (`texts`): the
    plan keeps keys, and messages are built as the sender takes them."""
    t0 = time.perf_counter()
    primary = primary_mode(spec, inf)

    def modes_for(row: Mapping) -> list[str]:
        if only_ids is not None and str(row["report_id"]) not in only_ids:
            return []
        if row["condition"] in SWEEP_VALUES:  # the rating sweep: extension models only, primary mode
            return [primary] if str(row["report_id"]) in draw_ids else []
        extra = ["generate"] if str(row["report_id"]) in gen_ids and primary != "generate" else []
        return [primary, *extra]

    def samples_for(row: Mapping, mode: str) -> int:
        """Generated draws are calls; label-scored draws come from one pass (finlib.finbias.inference.draws)."""
        if mode == "generate" and mode == primary and str(row["report_id"]) in draw_ids:
            return int(inf["samples_per_item"])
        return 1

    model, n_tokens, overhead, counted = model_and_counter(cfg, spec, inf)

    requests = [r for part in texts.frames(list(CONDITION_COLUMNS)) for r in plan_requests(
        part[part["status"] == "ok"], spec, modes_for, inf, n_tokens, overhead, samples_for, keep_messages=False)]
    unique = _unique(requests)
    answered = store.answered([r.key for r in unique])
    pending = [r for r in unique if r.key not in answered and not r.meta.get("context_refused")]
    if pending:
        todo: Iterable[Request] = with_messages(pending, texts, spec, inf, n_tokens, overhead)
        if backend_of(spec).in_process or inf["batch"]:  # these senders order or file the whole list
            todo = list(todo)
        progress = Progress(len(pending), desc=f"{spec.name} {'/'.join(sorted({r.mode for r in pending}))}",
                            disable=not inf["progress"])
        try:
            send_pending(spec, todo, store, budget=budget, progress=progress, local_model=model, batch=inf["batch"],
                         batch_dir=cfg.path(inf["batch_dir"]), batch_poll_s=float(inf["batch_poll_s"]),
                         model_cache=cfg.path(inf["model_cache"]), log_dir=cfg.run_dir)
        finally:
            progress.close()
    return ModelCalls(spec, primary, requests, unique, answered, pending, model, counted, t0, set(draw_ids))


def _artifact_order(requests: list[Request], skipped: list[dict]) -> list[Request | dict]:
    """A model's planned calls and its skipped rows in the artifact's row order (`SORT_KEYS` within
    one model: mode, then item_id; a stable sort, so a key's draws keep the plan's order)."""
    def key(entry: Request | dict) -> tuple[str, str]:
        return (entry.mode, entry.meta["item_id"]) if isinstance(entry, Request) else (entry["mode"], entry["item_id"])
    return sorted([*requests, *skipped], key=key)


@dataclass
class ModelRows:
    """What the rows of one model leave once written: the part files and the report's tallies."""

    parts: list[Path]
    extension: list[dict]
    context_refused: int
    label_masses: list[float]


def write_model_rows(run: ModelRun, calls: ModelCalls, store: ResponseStore, part_prefix: Path) -> ModelRows:
    """Read one model's rows back from the store, parse them and write its paper rows (draw 0 of
    the four conditions, skipped rows carried) as part files, `ROWS_PER_CHUNK` rows at a time in
    the artifact's order; the extension's rows (draws, sweep) are kept for the draws frame.

    Why in chunks: at the paper's size one model's replies, as Python rows and then as a frame, took
    ~0.5 GB; a chunk holds 2,000 of them, and each chunk's condition texts (the parser's echo check)
    are read together, a row group once (`ArtifactTexts.subset`)."""
    spec, draw_ids = calls.spec, calls.draw_ids
    primary_generates = calls.primary == "generate"
    entries = _artifact_order(calls.requests, skipped_rows(run.skipped, [spec], run.inf, run.subsets))
    out = ModelRows([], [], 0, [])
    seen: set[str] = set()
    for start in range(0, len(entries), ROWS_PER_CHUNK):
        chunk = entries[start:start + ROWS_PER_CHUNK]
        requests = [e for e in chunk if isinstance(e, Request)]
        stored = store.get(list(dict.fromkeys(r.key for r in requests)))
        for key, s in stored.items():  # each stored call once, as the report counts them
            if key not in seen:
                seen.add(key)
                if s["mode"] == "score" and s["label_mass"] is not None:
                    out.label_masses.append(s["label_mass"])
        called = iter(_rows(requests, stored))
        del stored
        paper: list[dict] = []
        for entry in chunk:
            if not isinstance(entry, Request):
                paper.append(entry)
                continue
            row = next(called)
            out.context_refused += str(row["error"] or "").startswith(CONTEXT_REFUSED)
            if str(row["report_id"]) in draw_ids and (row["mode"] == "generate") == primary_generates:
                out.extension.append(row)
            if row["sample"] == 0 and row["condition"] not in SWEEP_VALUES:
                paper.append(row)
        if paper:
            out.parts.append(write_part(part_prefix, len(out.parts), paper, run.texts))
    if not out.parts:  # a model without rows still leaves its (empty) part
        out.parts.append(write_part(part_prefix, 0, [], run.texts))
    return out


def write_part(prefix: Path, index: int, rows: list[dict], texts: ArtifactTexts) -> Path:
    """One chunk of a model's rows, parsed with its condition texts, written atomically."""
    contexts = texts.subset(r["item_id"] for r in rows if r["mode"] == "generate")
    part = to_frame(rows, contexts, release_rows=True, sort=False)  # already in the artifact's order
    path = prefix.with_name(f"{prefix.name}-{index:05d}.parquet")
    write_atomic(path, lambda tmp: part.to_parquet(tmp, index=False))
    return path


def model_and_counter(cfg: RunConfig, spec: ModelSpec, inf: dict) -> tuple[Any, Callable[[str], int], int, str]:
    """(the loaded local model or None, its token count of a text, the prompt's overhead in tokens,
    how the tokens were counted): a local model counts with its own tokenizer, a server-backed one
    with `server_token_counter`."""
    backend = backend_of(spec)
    if not backend.in_process:
        return (None, *server_token_counter(spec, inf))
    model = backend.open_model(spec, cfg.path(inf["model_cache"]), dtype=inf["dtype"], batch_size=inf["batch_size"],
                               score_batch_size=inf["score_batch_size"], max_batch_tokens=inf["max_batch_tokens"],
                               seed=cfg.seed, threads=inf["threads"], device=inf["device"], labels=FINBIAS_LABELS)
    overhead = model.n_tokens(model.prompt_text(build_messages("", spec.supports_system, inf["prompt_version"]),
                                                "score"))
    return model, model.n_tokens, overhead, "model_tokenizer (local)"


def model_report(calls: ModelCalls, inf: dict, only_ids: set[str] | None, rows: ModelRows) -> dict:
    """One model's block of the stage report: what was planned, sent and read from the store, the
    inputs cut and the answers' room, load and wall time, and the label mass of scored rows."""
    spec, primary, requests, model = calls.spec, calls.primary, calls.requests, calls.model
    masses = rows.label_masses
    return {
        "backend": spec.backend, "model_id": spec.model_id, "primary_mode": primary,
        "via": "batch_api" if inf["batch"] and backend_of(spec).batch_api else backend_of(spec).via,
        "reports": None if only_ids is None else len(only_ids),
        "constrained_json": spec.name in inf["constrained_json"],
        "requests": len(requests), "unique_keys": len(calls.unique), "cached": len(calls.answered),
        "sent": len(calls.pending),
        "extension_requests": sum(r.meta["sample"] > 0 or r.meta["condition"] in SWEEP_VALUES for r in requests),
        "truncated_inputs": int(sum(r.truncated for r in requests if r.mode == primary)),
        "not_sent_context": 0,  # a report is never held back on a count (see plan_requests)
        "prompt_length_by": calls.counted,
        "context_refused": int(rows.context_refused),
        "output_room_min": min((r.meta["output_room"] for r in requests if r.meta.get("output_room")), default=None),
        "output_room_below_cap": int(sum(r.meta.get("output_room") is not None and r.meta["output_room"] >= 1
                                         and r.meta["output_room"] < max_new_tokens_for(spec, inf) for r in requests)),
        "load_s": round(getattr(model, "load_s", 0.0), 3), "wall_s": round(time.perf_counter() - calls.t0, 3),
        "input_token_cap": inf["max_input_tokens"],  # null: whole reports (the paper's protocol)
        "max_new_tokens": max_new_tokens_for(spec, inf), "thinks": spec.thinks,
        # label scoring: total next-token probability of the three label stems before renormalising
        # (near 1 = the model answers in the format; small = the three-way probabilities are fragile)
        "label_mass_mean": float(np.mean(masses)) if masses else None,
        "label_mass_min": float(np.min(masses)) if masses else None,
    }


def skipped_rows(skipped: pd.DataFrame, specs: list[ModelSpec], inf: dict,
                 subsets: dict[str, set[str] | None] | None = None) -> list[dict]:
    """Condition rows stage 02 skipped: carried through with their reason, never dropped (for a
    model that answers a subset of reports, the skipped rows of those reports)."""
    rows = []
    for spec in specs:
        mode = primary_mode(spec, inf)
        only = (subsets or {}).get(spec.name)
        for _, r in skipped.iterrows():
            if only is not None and str(r["report_id"]) not in only:
                continue
            rows.append({"item_id": r["item_id"], "report_id": r["report_id"], "condition": r["condition"],
                         "model": spec.name, "mode": mode, "raw_text": None, "p_bullish": np.nan,
                         "p_neutral": np.nan, "p_bearish": np.nan, "status": "skipped",
                         "error": r["skip_reason"] if pd.notna(r["skip_reason"]) else "skipped by stage 02",
                         "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "latency_s": 0.0,
                         "truncated": False, "cache_key": None, "truncated_output": None})
    return rows


def to_frame(rows: list[dict], contexts: dict[str, str] | None = None, release_rows: bool = False,
             sort: bool = True) -> pd.DataFrame:
    """The predictions artifact with the contract's columns and dtypes, each row read once by stage
    04's parser (`contexts`: item_id -> input text, so ratings copied from the report are ignored).
    The replies stay a text column (missing: NaN) rather than Python objects: at the paper's size
    one model's replies are ~0.1 GB. `release_rows`: empty `rows` once the frame holds them, so
    the dicts' copy of every reply is freed before parsing (stage 03's per-model parts).
    `sort=False` keeps the rows' order (stage 03 writes its parts already in the artifact's order)."""
    df = pd.DataFrame(rows, columns=CALL_COLUMNS)
    if release_rows:
        rows.clear()
    df["raw_text"] = df["raw_text"].astype("str")
    for c in ("item_id", "report_id", "condition", "model", "mode", "status", "error", "cache_key"):
        df[c] = df[c].astype(object).where(df[c].notna(), None)
    for c in ("p_bullish", "p_neutral", "p_bearish", "cost_usd", "latency_s"):
        df[c] = df[c].astype("float64")
    for c in ("input_tokens", "output_tokens"):
        df[c] = df[c].astype("int64")
    df["truncated"] = df["truncated"].astype(bool)
    df["truncated_output"] = df["truncated_output"].astype("boolean")
    df["output_room"] = pd.to_numeric(df["output_room"], errors="coerce").astype("Int64")
    df = parse_predictions(df, contexts)  # in the rows' own order: the plan's, so texts are read in file order
    return df.sort_values(SORT_KEYS, kind="stable").reset_index(drop=True) if sort else df


def summarise(pred: pd.DataFrame, report: dict) -> dict:
    """Counts, usage per model x condition, parse rate of generated answers (stage 04's parser)."""
    report["counts"] = {f"{m}|{mode}|{s}": int(n) for (m, mode, s), n in
                        pred.groupby(["model", "mode", "status"]).size().items()}
    usage = pd.DataFrame({c: pred[c] for c in USAGE_COLUMNS[:5]} | answer_counts(pred))
    usage = usage.groupby(["model", "condition"])[USAGE_COLUMNS[2:]].sum()
    report["usage"] = [{"model": m, "condition": c, **{k: float(v) if k == "cost_usd" else int(v)
                                                       for k, v in row.items()}} for (m, c), row in usage.iterrows()]
    report["cost_usd_total"] = float(pred["cost_usd"].sum())
    report["cost_note"] = ("cost_usd per row is the cost of the stored call (paid once, possibly in an earlier run); "
                           "budget_spent_this_run_usd is what this run paid")
    gen = pred.loc[(pred["mode"] == "generate") & (pred["status"] == "ok"), ["model", "condition", "parsed",
                                                                          "parse_note"]]  # not every column
    report["generate_parse"] = {"n": int(len(gen)), "parsed": int(gen["parsed"].sum()),
                                "rate": float(gen["parsed"].mean()) if len(gen) else None,
                                "by_note": dict(Counter(gen["parse_note"])),
                                "parser": "finlib.finbias.answers.parse_rating_detail (the one parser)"}
    report["generate_parse_by_model"] = {  # the README quotes the embedded generator's rate from here
        m: {"n": int(len(g)), "parsed": int(g["parsed"].sum()), "rate": float(g["parsed"].mean()),
            "n_per_condition": {c: int(k) for c, k in g.groupby("condition").size().items()}}
        for m, g in gen.groupby("model")}
    report["truncated_outputs"] = int(pred["truncated_output"].fillna(False).astype(bool).sum())
    # the model's failures (answered but unparsed/truncated, inside N) apart from the
    # infrastructure's (not answered: errors after retries, outside N): a server outage is not the model's fault
    report["answer_status"] = {"answered": int(pred["answered"].sum()),
                               "not_answered": int((pred["parse_note"] == "not_answered").sum()),
                               "skipped": int((pred["parse_note"] == "skipped").sum()),
                               "answered_unparsed": int((pred["answered"] & ~pred["parsed"]).sum()),
                               "answered_truncated": int((pred["parse_note"] == TRUNCATED).sum()),
                               "answered_truncated_read": int((pred["parse_note"] == TRUNCATED_READ).sum())}
    refused = pred["status"].eq("ok") & starts_with(pred["error"], CONTEXT_REFUSED)
    # empty answers inside N by reason: the server refused the prompt for its context (the authors' vLLM
    # returned an empty output there) apart from a model that replied with nothing
    report["empty_answers_by_reason"] = {CONTEXT_REFUSED: int(refused.sum()),
                                         "model_replied_empty": int(((pred["parse_note"] == "empty")
                                                                     & ~refused & pred["answered"]).sum())}
    report["errors"] = dict(Counter(pred.loc[pred["status"] == "error", "error"].astype(str).str[:120]))
    return report


def resolve_precision(cfg: RunConfig, inf: dict, specs: list[ModelSpec]) -> tuple[dict, dict | None]:
    """`inference.dtype` resolved for this machine (auto: measured once per process; a fixed dtype
    wins) when a local torch model runs; recorded for the manifest (runs/<run>/precision.json) with the
    CPU threads computed with. The resolved dtype (and, in reduced precision, the threads) is what store
    keys name."""
    if not any(backend_of(s).in_process for s in specs):
        return inf, None
    from finlib.llm.precision import compute_threads, record_choice, resolve_dtype

    name, precision = resolve_dtype(inf["dtype"], inf["device"])
    precision = {**precision, "compute_threads": compute_threads(inf["threads"])}  # reduced precision depends on it
    record_choice(cfg.run_dir, "03", precision)
    return {**inf, "dtype": name}, precision


def subset_reports(ok: pd.DataFrame, specs: list[ModelSpec], inf: dict) -> dict[str, set[str] | None]:
    """Per model, the reports it answers: llama.cpp-served generators answer every condition of
    the first `inference.generator_reports` reports (null = all); every other model all reports.
    Constrained JSON is refused for any model not served by llama.cpp (never the paper's models)."""
    wrong = [s.name for s in specs if s.name in inf["constrained_json"] and not backend_of(s).constrained_json]
    if wrong:
        raise ConfigError(f"inference.constrained_json: {wrong} are not llamacpp records; constrained decoding is "
                          "a named option for the embedded llama.cpp generator only, never for the paper's models")
    n = inf["generator_reports"]
    return {s.name: generate_subset_ids(ok, n) if backend_of(s).subset_generator and n is not None else None
            for s in specs}


def open_conditions(cfg: RunConfig) -> tuple[pd.DataFrame, ArtifactTexts]:
    """Stage 02's conditions, checked: (every column but the text, the texts by item_id read a row
    group at a time). At the paper's size the texts are ~0.6 GB; stage 03 never holds them all."""
    path = existing_artifact(cfg, "conditions")
    conditions = read_frame(cfg, "conditions", [c for c in pq.read_schema(path).names if c != "text"])
    check_conditions(conditions, str(path), text=False)
    texts = ArtifactTexts(path)
    for part in texts.frames(["item_id", "status", "text"]):
        _check_texts(part, str(path))
    return conditions, texts


SECTION = "inference"
# what notebook 03 calls besides `run` and `summary`
NOTEBOOK_API = ("cost_note", "generation_note", "probability_reading")
# the tables of `result.tables` notebook 03 shows by name
TABLES = ("generated_answers", "inference_label_probabilities", "status", "usage")
REPORT_KEYS = ()  # the keys of `result.report` notebook 03 reads


@dataclass
class InferenceResult:
    """What stage 03 produced: its report (inference_report.json), the predictions' columns the
    report and tables read (`SUMMARY_COLUMNS`: counts and probabilities; `read_predictions(cfg)`
    reads every column, text included), and the tables notebook 03 shows."""

    report: dict
    predictions: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)


def report_head(inf: dict, conditions: pd.DataFrame, gen_ids: set[str], subsets: dict[str, set[str] | None],
                precision: dict | None) -> dict:
    """The stage report's opening block: the run's choices and the condition rows it starts from."""
    ok = conditions[conditions["status"] == "ok"]
    skipped = conditions[conditions["status"] == "skipped"]
    return {"precision": precision,
            "generator_reports": {n: sorted(ids) for n, ids in subsets.items() if ids is not None},
            "prompt_version": inf["prompt_version"],
            "prompt_source": finbias_prompt(inf["prompt_version"]).source,
            "models": {}, "n_conditions": int(len(conditions)),
            "n_ok_conditions": int(len(ok)), "n_skipped_conditions": int(len(skipped)),
            "skip_reasons": dict(Counter(skipped["skip_reason"].astype(str))),
            "generate_subset_reports": sorted(gen_ids), "budget_usd": float(inf["budget_usd"]),
            "params": {k: inf[k] for k in ("mode", "max_new_tokens", "max_input_tokens", "dtype", "batch_size",
                                            "score_batch_size", "device", "generator_reports", "constrained_json")}}


@dataclass
class ModelRun:
    """What every model of one stage-03 run shares: params, texts, report ids per role, the store."""

    cfg: RunConfig
    inf: dict
    texts: ArtifactTexts
    skipped: pd.DataFrame
    gen_ids: set[str]
    subsets: dict[str, set[str] | None]
    ext_models: set[str]
    draw_ids: set[str]
    report: dict


def send_models(run: ModelRun, specs: list[ModelSpec], budget,
                parts_dir: Path) -> tuple[dict[str, list[Path]], list[dict]]:
    """Every model in turn: plan, send what the store lacks, parse, and write its paper rows (draw 0 of
    the four conditions, skipped rows carried) as part files in the artifact's order; returns each
    model's parts and the extension's rows."""
    ext: list[dict] = []
    parts: dict[str, list[Path]] = {}  # model -> its chunks, parsed (joined in model order: the artifact's sort)
    try:
        with ResponseStore(run.cfg.path(run.inf["store"])) as store:
            for spec in specs:
                only = run.subsets[spec.name]
                calls = _send_model(run.cfg, spec, run.texts, run.inf, store, budget, run.gen_ids, only,
                                    run.draw_ids if spec.name in run.ext_models else set())
                rows = write_model_rows(run, calls, store, parts_dir / f"{len(parts):03d}")
                parts[spec.name] = rows.parts
                ext += rows.extension
                run.report["models"][spec.name] = model_report(calls, run.inf, only, rows)
                del calls, rows
                return_freed_memory()
    finally:
        from finlib.llm.llamacpp import close_servers

        close_servers()  # the llama.cpp server of this stage stops here, not at kernel exit
    return parts, ext


def extension_draws(ext: list[dict], texts: ArtifactTexts, inf: dict, seed: int) -> pd.DataFrame:
    """The extension's draws frame from its rows (`finlib.finbias.inference.draws`)."""
    samples = [r["sample"] for r in ext]
    ext_frame = to_frame(ext, texts) if ext else pd.DataFrame()
    if ext:  # to_frame keeps the contract's columns: the draw index comes back by position after its sort
        order = pd.DataFrame({"i": range(len(ext)), "model": [r["model"] for r in ext],
                              "mode": [r["mode"] for r in ext], "item_id": [r["item_id"] for r in ext]})
        order = order.sort_values(["model", "mode", "item_id"], kind="stable")
        ext_frame["sample"] = np.asarray(samples)[order["i"].to_numpy()]
    return draws_frame(ext_frame, int(inf["samples_per_item"]), seed)


def run_models(cfg: RunConfig, models: list[str] | None = None) -> tuple[dict, pd.DataFrame]:
    """Send every model's calls and write predictions.parquet, draws and inference_report.json;
    returns the report and the predictions' `SUMMARY_COLUMNS`.

    Each model's rows are read back, parsed and written to part files `ROWS_PER_CHUNK` at a time
    once the model's calls are sent, and the parts are joined into predictions.parquet without a
    frame of every row: at the paper's size (674k answers) memory holds one chunk of replies
    (`report["peak_rss_mb"]`)."""
    from finlib.llm.openai_backend import Budget

    t0 = time.perf_counter()
    use_returning_arrow_pool()  # before the first read: the conditions are read a row group at a time
    inf = inference_params(cfg)
    specs = select_models(run_registry(cfg), models or list(inf["models"]))
    conditions, texts = open_conditions(cfg)
    return_freed_memory()  # the text check read every row group once
    ok = conditions[conditions["status"] == "ok"]
    gen_ids = generate_subset_ids(ok, inf["generate_subset"])
    inf, precision = resolve_precision(cfg, inf, specs)
    subsets = subset_reports(ok, specs, inf)
    run = ModelRun(cfg, inf, texts, conditions[conditions["status"] == "skipped"], gen_ids, subsets,
                   set(extension_models(inf)), extension_report_ids(ok, inf),
                   report_head(inf, conditions, gen_ids, subsets, precision))
    budget = Budget(float(inf["budget_usd"]))
    parts_dir = cfg.processed_dir / ".predictions-parts"
    shutil.rmtree(parts_dir, ignore_errors=True)  # parts of an interrupted run: remade from the store
    parts_dir.mkdir(parents=True)
    parts, ext = send_models(run, specs, budget, parts_dir)
    run.report["peak_rss_mb_sending"] = peak_rss_mb()
    if parts:
        join_parts([p for name in sorted(parts) for p in parts[name]], artifact_path(cfg, "predictions"))
    else:
        write_frame(cfg, "predictions", to_frame([]))
    shutil.rmtree(parts_dir, ignore_errors=True)
    return_freed_memory()
    pred = read_summary_frame(cfg)
    draws = extension_draws(ext, texts, inf, cfg.seed)
    report = summarise(pred, run.report)
    report["draws"] = draws_summary(draws, int(inf["samples_per_item"]), run.draw_ids, inf)
    report["budget_spent_this_run_usd"] = budget.spent
    report["wall_s"] = round(time.perf_counter() - t0, 3)
    report["peak_rss_mb"] = peak_rss_mb()
    write_frame(cfg, "draws", draws)
    write_json(cfg, "inference_report", report)
    check_error_share(pred, float(inf["max_error_share"]))
    check_error_share(draws[draws["draw"] == "stored answer"], float(inf["max_error_share"]))
    return report, pred


def write_tables(cfg: RunConfig, report: dict, pred: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The label-probability table, written with its caption; plus what notebook 03 shows beside it
    (rows per status, the first generated answers of each model, usage and cost), not written."""
    from finlib.core.tables import write_table

    probs = probability_summary(pred)
    write_table(cfg, "inference_label_probabilities", probs,
                "Stage 03: mean label probabilities by model and condition (label scoring).")
    return {"status": status_summary(pred), "inference_label_probabilities": probs,
            "generated_answers": generation_summary(generated_rows(cfg)), "usage": usage_table(report)}


def run(cfg: RunConfig, models: list[str] | None = None) -> InferenceResult:
    """Stage 03: every ok condition row x model (`models`: a subset of `inference.models`) through
    the response store; writes predictions, draws, inference_report.json and the table."""
    report, pred = run_models(cfg, models)
    return InferenceResult(report, pred, write_tables(cfg, report, pred))


def summary(cfg: RunConfig, result: InferenceResult) -> str:
    """Notebook 03's first output: the synthetic-data caveat, the run's choices (models, mode, prompt,
    output and input caps, budget), and per model what was sent, read from the store and cut."""
    from finlib.core.tables import SYNTHETIC_CAVEAT

    rep, inf = result.report, inference_params(cfg)
    lines = [f"**{SYNTHETIC_CAVEAT}**"] if cfg.is_synthetic else []
    lines.append(f"Run `{cfg.name}`: models {inf['models']}, mode `{inf['mode']}`, "
                 f"prompt `{inf['prompt_version']}`, output tokens `{inf['max_new_tokens']}` "
                 "(`registry` = the authors' 4,096; an integer = this run's CPU-time cap), "
                 f"generation subset {inf['generate_subset']} report(s), "
                 f"max input {inf['max_input_tokens']} tokens, budget ${inf['budget_usd']:.2f}.")
    lines.append("Per model: " + "; ".join(
        f"`{name}` {m['sent']} sent, {m['cached']} from the store, {m['truncated_inputs']} truncated inputs, "
        f"load {m['load_s']} s, {m['wall_s']} s, mean label mass {m['label_mass_mean']}"
        for name, m in rep["models"].items()))
    return "\n\n".join(lines)


def generation_note(report: dict) -> str:
    """The generated answers' parse counts (stage 04's parser) and, per model, the parse rate."""
    parse = report["generate_parse"]
    return (f"Generated answers: {parse['n']}, parsed as a rating by stage 04's parser: {parse['parsed']} "
            f"(reasons: {parse['by_note']}); cut at the output-token limit: {report['truncated_outputs']}. "
            f"All rows: {report['answer_status']}.\n\n" + generation_reading(report))


def cost_note(report: dict) -> str:
    """The run's total cost of the stored calls and the stage's wall time."""
    return f"Total cost: ${report['cost_usd_total']:.4f}; stage wall time {report['wall_s']} s."


def return_freed_memory() -> None:
    """Hand memory freed by a model's part back to the system: Arrow's pool and glibc's malloc keep
    freed blocks for reuse, and across 19 models the process crept up by ~10 MB a model (measured
    at 1/4 of the corpus) on top of each part's own peak. A no-op where libc has no malloc_trim."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    pa.default_memory_pool().release_unused()
    libc = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(libc), "malloc_trim", None) if libc else None
    if trim is not None:
        trim(0)


def join_parts(parts: list[Path], path: Path) -> None:
    """Write the part files, each already in the artifact's order (`SORT_KEYS`: `_artifact_order`
    sorts every model's rows and `send_models` names the parts in model order), as one parquet, a
    part at a time (atomically): a column that is all null in one part and text in another takes
    the text type. A part is one row group of the artifact."""
    schemas = [pq.read_schema(p) for p in parts]
    schema = pa.unify_schemas([s.remove_metadata() for s in schemas], promote_options="permissive")
    schema = schema.with_metadata(schemas[0].metadata)  # pandas dtypes (nullable booleans, Int64) round-trip

    def write(tmp) -> None:
        with pq.ParquetWriter(tmp, schema) as writer:
            for p in parts:
                writer.write_table(pq.read_table(p).cast(schema))

    write_atomic(path, write)


PREVIEW_ROWS_PER_MODEL = 20  # generated answers per model the notebook shows (the counts cover every row)


def read_summary_frame(cfg: RunConfig) -> pd.DataFrame:
    """predictions.parquet's `SUMMARY_COLUMNS`, each text column a categorical whose categories are
    sorted: a group-by on it gives the groups, their order and the counts of the text column
    (`tests/finbias/test_stage_streaming.py` compares the report and tables), while 674k rows of
    repeated names take a byte or two each instead of a string each (~0.1 GB less at the paper's size)."""
    pred = read_frame(cfg, "predictions", SUMMARY_COLUMNS, read_dictionary=list(SUMMARY_TEXT_COLUMNS))
    for c in SUMMARY_TEXT_COLUMNS:
        if isinstance(pred[c].dtype, pd.CategoricalDtype):  # an all-null column stays as it is read
            pred[c] = pred[c].cat.set_categories(sorted(pred[c].cat.categories))
    return pred


def read_predictions(cfg: RunConfig, text: bool = True) -> pd.DataFrame:
    """predictions.parquet; `text=False` leaves out the answers' text (at the paper's size ~0.8 GB),
    which the counts and probability tables do not need."""
    if text:
        return read_frame(cfg, "predictions")
    return read_frame(cfg, "predictions", [c for c in PREDICTION_COLUMNS if c != "raw_text"])


def generated_rows(cfg: RunConfig, per_model: int = PREVIEW_ROWS_PER_MODEL) -> pd.DataFrame:
    """The first `per_model` generated rows of each model, with their text (the notebook's preview)."""
    f = pq.ParquetFile(existing_artifact(cfg, "predictions"))
    taken: dict[str, int] = {}
    keep = []
    for batch in f.iter_batches(batch_size=4096):
        part = batch.to_pandas()
        part = part[part["mode"] == "generate"]
        # counts already taken per model, as plain ints (a map over an arrow-string column of a batch with no
        # generated rows would keep the string dtype, and adding it to cumcount fails)
        seen = np.array([taken.get(m, 0) for m in part["model"]], dtype=int)
        part = part[part.groupby("model").cumcount().to_numpy() + seen < per_model]
        for m, n in part["model"].value_counts().items():
            taken[m] = taken.get(m, 0) + int(n)
        keep.append(part)
    return pd.concat(keep, ignore_index=True) if keep else pd.DataFrame(columns=PREDICTION_COLUMNS)


def probability_summary(pred: pd.DataFrame) -> pd.DataFrame:
    """Per model x condition: scored rows, mean label probabilities, and the argmax shares."""
    s = pred[(pred["mode"] == "score") & (pred["status"] == "ok")].copy()
    probs = s[["p_bullish", "p_neutral", "p_bearish"]]
    s["argmax"] = probs.idxmax(axis=1).str.removeprefix("p_")
    out = s.groupby(["model", "condition"]).agg(
        n=("item_id", "size"), p_bullish=("p_bullish", "mean"), p_neutral=("p_neutral", "mean"),
        p_bearish=("p_bearish", "mean"), argmax_bullish=("argmax", lambda a: (a == "bullish").mean()))
    return out.round(3).reset_index()


BULLISH_FLAT = 0.1  # spread of the bullish argmax share across conditions below which a model "barely moves"


def probability_reading(report: dict, probs: pd.DataFrame) -> str:
    """What this run's label probabilities say, per scored model, in words computed from its numbers
    (the notebook's prose must describe the run it shows, not a run someone had once)."""
    lines = []
    for model, g in probs.groupby("model", sort=True):
        share = g.set_index("condition")["argmax_bullish"]
        spread = float(share.max() - share.min()) if len(share) else float("nan")
        moves = "barely moves" if spread < BULLISH_FLAT else "moves"
        mass = (report.get("models", {}).get(model.split(" [")[0], {}) or {}).get("label_mass_mean")
        mass_text = (f"; mean label mass {100 * mass:.1f} % (the next-token probability on the three label stems "
                     "before renormalising: small means the three-way probabilities are fragile)"
                     if isinstance(mass, (int, float)) else "")
        lines.append(f"- `{model}`: bullish is the most probable label in {100 * share.min():.0f}–"
                     f"{100 * share.max():.0f} % of rows across conditions, so its preference {moves} with the "
                     f"condition (spread {100 * spread:.0f} points){mass_text}.")
    return "\n".join(lines) or "No label-scored rows in this run."


def generation_reading(report: dict) -> str:
    """The generated answers' parse rate per model, from this run's report, in words."""
    by_model = report.get("generate_parse_by_model") or {}
    lines = []
    for model, p in sorted(by_model.items()):
        n, parsed = int(p.get("n", 0)), int(p.get("parsed", 0))
        if n:
            lines.append(f"- `{model}`: {parsed} of {n} generated answers parsed as a rating "
                         f"({100 * parsed / n:.0f} %).")
    return "\n".join(lines) or "No generated answers in this run (`inference.generate_subset` is 0 for local models)."


def generation_summary(pred: pd.DataFrame, width: int = 160) -> pd.DataFrame:
    """Generated answers with stage 04's reading of them (None = unparsed, with the reason) and
    the start of the text."""
    g = pred[pred["mode"] == "generate"].rename(columns={"answer": "parsed_answer"})
    g["raw_text_start"] = g["raw_text"].fillna("").str.replace(r"\s+", " ", regex=True).str[:width]
    return g[["model", "item_id", "status", "output_tokens", "truncated_output", "parsed_answer", "parse_note",
              "raw_text_start"]].reset_index(drop=True)


def status_summary(pred: pd.DataFrame) -> pd.DataFrame:
    """Rows per model x mode x status (skipped and error rows are counted, never dropped)."""
    return pred.groupby(["model", "mode", "status"]).size().rename("rows").reset_index()


USAGE_COLUMNS = ["model", "condition", "input_tokens", "output_tokens", "cost_usd", "cut_read", "cut_unparsed",
                 "context_refused"]


def answer_counts(pred: pd.DataFrame) -> dict[str, pd.Series]:
    """Per row, 0/1 columns of the usage table: a reply cut at the output limit and read
    (`truncated_read`) or not (`truncated`), and an empty answer for a prompt the server refused
    for its context length (inside N)."""
    note = pred["parse_note"] if "parse_note" in pred else pd.Series("", index=pred.index)
    refused = starts_with(pred["error"], CONTEXT_REFUSED) if "error" in pred else False
    return {"cut_read": (note == TRUNCATED_READ).astype(int), "cut_unparsed": (note == TRUNCATED).astype(int),
            "context_refused": (pred["status"].eq("ok") & refused).astype(int)}


def starts_with(col: pd.Series, prefix: str) -> pd.Series:
    """Whether each value starts with `prefix` (missing: False). A categorical column is asked once
    per category, not once per row (the summary frame's `error`: 674k rows, a few distinct texts)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        hit = np.append(np.asarray(col.cat.categories.astype(str).str.startswith(prefix), dtype=bool), False)
        return pd.Series(hit[col.cat.codes.to_numpy()], index=col.index)  # code -1 (missing) -> the False
    return col.astype("string").str.startswith(prefix).fillna(False).astype(bool)


def usage_table(report: dict) -> pd.DataFrame:
    """Tokens, cost and the cut / context-refused answers per model x condition from the stage report
    (reports written before those counts show them empty)."""
    return pd.DataFrame(report["usage"], columns=USAGE_COLUMNS)
