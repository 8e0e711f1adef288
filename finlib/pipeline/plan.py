"""`make plan RUN=name`: what a run will send, cost and take — before a single call is made.

For every model x condition: the number of requests; input tokens measured with the model's
own tokenizer where one is on disk (a local model's cache, a Hugging Face cache, `hf_path`),
else the documented characters-per-token estimate; output tokens twice — at the output cap
(the worst case, the authors' 4,096) and at the answer length measured in the response store
(else `plan.answer_tokens`); cost from the registry's prices; wall time from each record's
rate limits (rpm, tpm, concurrency). The texts are the run's own stage-02 conditions when they
exist; otherwise the published corpus size and mean report length (Fin-Bias §3: 8,868 reports,
about 4,000 tokens each) stand in, and the table says so.

`preflight(cfg)` lists what a run cannot reach from here (corpus, prices, lexicon, keys,
servers) so `make reproduce RUN=paper` fails at once, naming every missing piece.
"""
from __future__ import annotations

import os
import socket
import sqlite3
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pandas as pd

from finlib.core.config import RunConfig
from finlib.finbias import conditions as condition_table
from finlib.finbias.vocab import Condition
from finlib.llm.backends import backend_of
from finlib.llm.registry import run_registry, select_models
from finlib.llm.spec import ModelSpec
from finlib.pipeline.plan_compute import SERVE_FLOPS, gpu_hours, gpu_source, other_stages_plan, self_hosted

HF_HOST, YAHOO_HOST = ("huggingface.co", 443), ("query1.finance.yahoo.com", 443)


def plan_params(cfg: RunConfig) -> dict:
    """The `plan:` section, checked by the params schema (`finlib.core.params.PlanSection`: every key
    present, types, ranges, misspellings)."""
    return cfg.section("plan")


# ---- token counting -----------------------------------------------------------------------

@dataclass(frozen=True)
class TokenCounter:
    """Counts tokens for one model, and says how (`source`)."""

    count: Callable[[str], int]
    source: str


def estimate_counter(chars_per_token: float) -> TokenCounter:
    return TokenCounter(lambda t: int(np.ceil(len(t) / chars_per_token)),
                        f"estimate ({chars_per_token:g} chars/token)")


def tokenizer_counter(spec: ModelSpec, model_cache: Path) -> TokenCounter | None:
    """The model's own tokenizer if it is on disk (never downloaded): cache, hf_path, HF cache."""
    candidates = [str(model_cache / spec.name)] if (model_cache / spec.name / "tokenizer_config.json").is_file() else []
    candidates += [c for c in (spec.hf_path, spec.model_id) if c]
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None
    for cand in candidates:
        try:
            tok = AutoTokenizer.from_pretrained(cand, local_files_only=True)
        except Exception:  # noqa: BLE001, S112 — not on disk (or not a tokenizer): try the next, then estimate
            continue
        return TokenCounter(lambda t, tok=tok: len(tok(t, add_special_tokens=False)["input_ids"]),
                            f"tokenizer ({Path(cand).name if os.path.isdir(cand) else cand})")
    return None


# ---- what will be sent --------------------------------------------------------------------

def condition_texts(cfg: RunConfig, sample: int, seed: int) -> tuple[dict[str, list[str]], dict[str, int], str]:
    """Per condition: a sample of the texts and the number of ok rows, from this run's stage 02;
    ({}, published counts, "published corpus") when the run has no conditions yet."""
    path = cfg.processed_dir / "conditions.parquet"
    if not path.is_file():
        synthetic = cfg.section("data")["synthetic"]["n_reports"] if cfg.is_synthetic else None
        n = int(synthetic) if synthetic else int(plan_params(cfg)["corpus_reports"])
        fake_mode = cfg.section("perturb")["fake_rating"]
        counts = {r.name: n * r.variants(fake_mode) for r in condition_table.declared()}
        where = (f"the synthetic corpus size (data.synthetic.n_reports = {n}), stage 02 not run" if synthetic
                 else "published corpus size (Fin-Bias §3), stage 02 not run")
        return {}, counts, where
    cond = pd.read_parquet(path)
    ok = cond[cond["status"] == "ok"]
    texts, counts = {}, {}
    for c in (r.name for r in condition_table.declared()):
        rows = ok[ok["condition"] == c]
        counts[c] = len(rows)
        take = rows.sample(n=min(sample, len(rows)), random_state=seed) if len(rows) else rows
        texts[c] = take["text"].astype(str).tolist()
    return texts, counts, f"this run's stage 02 conditions ({len(ok)} ok rows)"


def measured_answer_tokens(store_path: Path) -> dict[str, tuple[float, int]]:
    """Mean output tokens of the generated answers already in the response store, per model name."""
    if not store_path.is_file():
        return {}
    with sqlite3.connect(f"file:{store_path}?mode=ro", uri=True) as con:
        rows = con.execute("SELECT model, AVG(output_tokens), COUNT(*) FROM responses WHERE mode = 'generate' "
                           "AND status = 'ok' AND output_tokens > 0 GROUP BY model").fetchall()
    return {m: (float(avg), int(n)) for m, avg, n in rows}


def output_cap(cfg: RunConfig, spec: ModelSpec) -> int:
    """The output-token cap a call gets: `plan.output_cap` if set, else the run's max_new_tokens
    (a number), else the record's own `max_new_tokens` when the registry has one, else 4,096."""
    p = plan_params(cfg)
    if p["output_cap"] is not None:
        return int(p["output_cap"])
    inf = cfg.section("inference")["max_new_tokens"]
    if isinstance(inf, int) and not isinstance(inf, bool):
        return inf
    return int(getattr(spec, "max_new_tokens", None) or 4096)


@dataclass(frozen=True)
class Throughput:
    """Tokens (prompt + answer) per second a model sustained in a finished stage 03, on this machine."""

    tokens_per_s: float
    load_s: float
    source: str


def measured_throughput(root: Path) -> dict[str, Throughput]:
    """Per model, the most recent stage-03 measurement on disk (`data/processed/*/inference_report.json`):
    tokens of the requests it sent (the usage table's prompt + answer tokens, scaled by sent / requests)
    over the seconds it spent sending (model `wall_s` minus `load_s`). A local model's time follows its
    tokens, not a per-request latency: 12 reports and 60 differ by their tokens."""
    import json

    found: dict[str, tuple[float, Throughput]] = {}
    for path in (root / "data" / "processed").glob("*/inference_report.json"):
        try:
            rep = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        usage = pd.DataFrame(rep.get("usage") or [])
        for name, m in (rep.get("models") or {}).items():
            sent, reqs = int(m.get("sent") or 0), int(m.get("requests") or 0)
            busy = float(m.get("wall_s") or 0) - float(m.get("load_s") or 0)
            if not sent or not reqs or busy <= 0 or usage.empty or "model" not in usage:
                continue
            mine = usage[usage["model"] == name]
            tokens = float(mine["input_tokens"].sum() + mine["output_tokens"].sum()) * sent / reqs
            if tokens <= 0:
                continue
            at = path.stat().st_mtime
            if name not in found or at > found[name][0]:
                found[name] = (at, Throughput(tokens / busy, float(m.get("load_s") or 0),
                                              f"measured {tokens / busy:,.0f} tok/s (run {path.parent.name}, stage 03: "
                                              f"{tokens:,.0f} tokens in {busy:,.1f} s)"))
    return {k: v for k, (_, v) in found.items()}


def wall_hours(requests: int, tokens: float, spec: ModelSpec, latency_s: float,
               throughput: Throughput | None = None) -> tuple[float, str]:
    """Hours to send `requests` carrying `tokens` under the record's limits; says which limit binds. A local
    model (in-process or llama.cpp) with a measured throughput: its tokens over that rate."""
    if throughput is not None and backend_of(spec).self_hosted:
        return tokens / throughput.tokens_per_s / 3600, throughput.source
    cands = {"concurrency x latency": requests * latency_s / max(spec.concurrency, 1) / 3600}
    if spec.rpm:
        cands["rpm"] = requests / spec.rpm / 60
    if spec.tpm:
        cands["tpm"] = tokens / spec.tpm / 60
    which = max(cands, key=cands.get)
    return cands[which], which


def model_plan(cfg: RunConfig, spec: ModelSpec, texts: dict[str, list[str]], counts: dict[str, int],
               counter: TokenCounter, answers: dict[str, tuple[float, int]],
               throughput: Throughput | None = None) -> list[dict]:
    """One row per condition for one model (requests, tokens, cost, hours)."""
    from finlib.finbias.prompts import build_messages

    p, inf = plan_params(cfg), cfg.section("inference")
    cap = output_cap(cfg, spec)
    # whole reports (max_input_tokens null), else the run's named input cap; the output cap of a call is
    # what the context leaves after its prompt (finlib.llm.context), never a cut of the report
    budget = spec.context_length if inf["max_input_tokens"] is None else int(inf["max_input_tokens"])
    overhead = sum(counter.count(m["content"]) for m in build_messages("", spec.supports_system)) + 8
    measured = answers.get(spec.name)
    answer = min(measured[0], cap) if measured else min(float(p["answer_tokens"]), cap)
    answer_src = f"measured (n={measured[1]})" if measured else "plan.answer_tokens"
    if backend_of(spec).scores_labels and inf["mode"] == "score":  # one forward pass, no output tokens
        answer, cap, answer_src = 0.0, 0, "label scoring (no output; the generate subset is not planned)"
    discount = 0.5 if inf["batch"] and backend_of(spec).batch_api else 1.0
    rows = []
    for cond, n in counts.items():
        sample = texts.get(cond)
        per = ([min(counter.count(t), budget) for t in sample] if sample
               else [min(int(p["report_tokens"]), budget)])
        in_tok = n * (float(np.mean(per)) + overhead) if per else 0.0
        room = float(np.mean([max(0, min(cap, spec.context_length - t - overhead)) for t in per])) if per else cap
        out_exp, out_cap = n * min(answer, room), n * room
        hours, binding = wall_hours(n, in_tok + out_exp, spec, float(p["latency_s"]), throughput)
        gpu, gpu_cap = (gpu_hours(in_tok + out, spec, SERVE_FLOPS, float(p["gpu_tflops"])) for out in (out_exp, out_cap))
        if gpu is not None and throughput is None and not backend_of(spec).self_hosted:  # a served model of
            # known size: its GPU time binds (a model run here, unmeasured, keeps the latency bound: often a CPU)
            hours, binding = gpu, gpu_source(spec, SERVE_FLOPS, float(p["gpu_tflops"]))
        elif self_hosted(spec) and spec.parameters_b is None:
            binding += "; size unknown (registry parameters_b missing): no GPU-hours"
        usd = float(p["gpu_hour_usd"])
        rows.append({
            "model": spec.name, "condition": cond, "requests": n,
            "input_tokens": round(in_tok), "input_source": counter.source if sample else
            f"plan.report_tokens ({int(p['report_tokens'])}/report)",
            "output_tokens_expected": round(out_exp), "answer_source": answer_src,
            "output_tokens_cap": int(out_cap), "gpu_hours": gpu,
            "cost_usd_expected": gpu * usd if gpu is not None else spec.cost(in_tok, out_exp, discount),
            "cost_usd_cap": gpu_cap * usd if gpu_cap is not None else spec.cost(in_tok, out_cap, discount),
            "billed_usd_cap": spec.cost(in_tok, out_cap, discount),  # what a provider bills (the budget cap counts it)
            "wall_hours": hours, "binding_limit": binding,
        })
    return rows


def extension_counts(cfg: RunConfig, spec: ModelSpec, counts: dict[str, int]) -> dict[str, int]:
    """New calls beyond the paper for one model (finlib.finbias.inference.draws): the rating sweep
    (`perturb.sweep_reports`) and draws 2..k (`inference.samples_per_item`) of the chosen reports.
    The sweep of the analyst's own rating and of the fake rating are the paper's calls (same key),
    so a sweep report costs 3 - 1 - (fakes per report) new texts; label scoring pays one pass per
    new text (its k draws come from that pass), generation k calls per text."""
    inf, pert = cfg.section("inference"), cfg.section("perturb")
    listed = inf["extension_models"]
    if listed is not None and spec.name not in listed:
        return {}
    k = int(inf["samples_per_item"])
    n_rep = counts.get(Condition.ORIGINAL.value, 0)
    sweep_n = n_rep if pert["sweep_reports"] is None else min(int(pert["sweep_reports"]), n_rep)
    built = cfg.processed_dir / "conditions.parquet"
    if built.is_file():  # stage 02 ran: the reports it gave the sweep
        cond = pd.read_parquet(built, columns=["report_id", "condition", "status"])
        sweep_n = int(cond.loc[cond["condition"].str.startswith("sweep_") & (cond["status"] == "ok"),
                               "report_id"].nunique())
    draw_n = n_rep if inf["samples_reports"] is None else min(int(inf["samples_reports"]), n_rep)
    per_call = 1 if backend_of(spec).scores_labels and inf["mode"] == "score" else k
    new_texts = 3 - 1 - condition_table.rows_per_report(Condition.FAKE_RATING.value, pert["fake_rating"])
    out = {}
    if sweep_n and new_texts:
        out["sweep_<rating> (new texts)"] = sweep_n * new_texts * per_call
    if per_call > 1 and n_rep:
        paper = sum(counts.get(r.name, 0) for r in condition_table.declared())
        out[f"draws 2..{k} (paper conditions)"] = round((k - 1) * paper * max(draw_n, sweep_n) / n_rep)
    return out


def generator_counts(spec: ModelSpec, counts: dict[str, int], generator_reports: int | None) -> dict[str, int]:
    """Requests per condition for one model: a llama.cpp generator answers every condition of the first
    `inference.generator_reports` reports only (stage 03's subset_reports), every other model all."""
    if not backend_of(spec).subset_generator or generator_reports is None:
        return counts
    return {c: min(n, int(generator_reports)) for c, n in counts.items()}


def build_plan(cfg: RunConfig) -> pd.DataFrame:
    """The whole plan: one row per model x condition. Makes no model call and downloads nothing."""
    p = plan_params(cfg)
    inf = cfg.section("inference")
    specs = select_models(run_registry(cfg), list(inf["models"]))
    texts, counts, _ = condition_texts(cfg, int(p["sample_texts"]), cfg.seed)
    answers = measured_answer_tokens(cfg.path(inf["store"]))
    cache = cfg.path(inf["model_cache"])
    rates = measured_throughput(cfg.root)
    rows = []
    for spec in specs:
        counter = tokenizer_counter(spec, cache) or estimate_counter(float(p["estimate_chars"]))
        extra = extension_counts(cfg, spec, counts)  # beyond the paper: sweep and repeated draws
        mine = generator_counts(spec, counts, inf["generator_reports"])
        rows += model_plan(cfg, spec, {**texts, **{c: texts.get(Condition.ORIGINAL.value) for c in extra}},
                           {**mine, **extra}, counter, answers, rates.get(spec.name))
    return pd.DataFrame(rows)


def plan_totals(plan: pd.DataFrame) -> pd.DataFrame:
    """Per model (conditions summed; wall time assumes the conditions run one after another) and a total."""
    num = ["requests", "input_tokens", "output_tokens_expected", "output_tokens_cap", "gpu_hours", "cost_usd_expected",
           "cost_usd_cap", "wall_hours"]
    per = plan.groupby("model", sort=False)[num].sum(min_count=1).reset_index()
    total = per[num].sum().to_frame().T.assign(model="TOTAL (models one after another)")
    return pd.concat([per, total], ignore_index=True)


def plan_markdown(cfg: RunConfig, plan: pd.DataFrame, other: pd.DataFrame | None = None) -> str:
    """The README-ready table: per model totals, then the sources of every estimate."""
    _, _, where = condition_texts(cfg, 1, cfg.seed)
    t = plan_totals(plan)
    shown = pd.DataFrame({
        "model": t["model"], "requests": t["requests"].map("{:,.0f}".format),
        "input tokens (M)": (t["input_tokens"] / 1e6).map("{:,.1f}".format),
        "output tokens (M): expected / cap": [f"{a / 1e6:,.1f} / {b / 1e6:,.1f}" for a, b in
                                              zip(t["output_tokens_expected"], t["output_tokens_cap"])],
        "GPU-hours": t["gpu_hours"].map(_hours),
        "cost USD: expected / cap": [f"{a:,.0f} / {b:,.0f}" for a, b in zip(t["cost_usd_expected"], t["cost_usd_cap"])],
        "wall hours": t["wall_hours"].map("{:,.1f}".format),
    })
    first = plan.groupby("model", sort=False).agg(input=("input_source", "first"), answers=("answer_source", "first"),
                                                  limit=("binding_limit", "first"))
    groups = first.reset_index().groupby(["input", "answers", "limit"], sort=False)["model"].agg(", ".join)
    notes = "\n".join(f"- {models}: input tokens from {i}; answer length {a}; wall time bound by {lim}"
                       for (i, a, lim), models in groups.items())
    return (f"**Plan for run `{cfg.name}`** (no calls made). Requests from {where}.\n\n"
            f"Stage 03 (inference):\n\n{shown.to_markdown(index=False, disable_numparse=True)}\n\nSources of each estimate:\n{notes}\n"
            + ("" if other is None else other_stages_markdown(cfg, other)) + whole_run_line(plan, other))


def _hours(h: float) -> str:
    """GPU-hours as the tables print them; '-' for a model billed per token (or of unknown size)."""
    return "-" if pd.isna(h) else f"{h:,.2f}" if h >= 1 else f"{h:.2g}"


def other_stages_markdown(cfg: RunConfig, other: pd.DataFrame) -> str:
    """The table of stages 05 and 07-08 (DPO training, BizFinBench, IteraJudge), one row each."""
    if other.empty:
        return "\nStages 05 and 07-08: none in this run.\n"
    p = plan_params(cfg)
    shown = pd.DataFrame({
        "stage": other["stage"], "model": other["model"], "what": other["role"],
        "requests": other["requests"].map("{:,.0f}".format),
        "tokens (M): input / output": [f"{a / 1e6:,.2f} / {b / 1e6:,.2f}"
                                       for a, b in zip(other["input_tokens"], other["output_tokens"])],
        "GPU-hours": other["gpu_hours"].map(_hours), "cost USD": other["cost_usd"].map("{:,.2f}".format),
    })
    notes = "\n".join(f"- {st} {m} {r}: {src}" for st, m, r, src in
                      zip(other["stage"], other["model"], other["role"], other["source"]))
    return (f"\nStages 05 and 07-08 (GPU-hours at the assumed plan.gpu_tflops {float(p['gpu_tflops']):g} TFLOP/s per "
            f"GPU, cost at plan.gpu_hour_usd {float(p['gpu_hour_usd']):g}; billed models at their prices, outputs at "
            f"the cap):\n\n{shown.to_markdown(index=False, disable_numparse=True)}\n\n{notes}\n")


def whole_run_line(plan: pd.DataFrame, other: pd.DataFrame | None) -> str:
    """One line: the whole run's GPU-hours and expected cost, every planned stage together."""
    frames = [plan.rename(columns={"cost_usd_expected": "cost_usd"})[["gpu_hours", "cost_usd"]]]
    if other is not None and not other.empty:
        frames.append(other[["gpu_hours", "cost_usd"]])
    both = pd.concat(frames, ignore_index=True)
    return (f"\n**Whole run**: {_hours(both['gpu_hours'].sum())} GPU-hours of self-hosted models, "
            f"{both['cost_usd'].sum():,.2f} USD expected (stage 03 at the expected answer length, the others at the cap).\n")


def stage03_prompt_tokens(cfg: RunConfig, plan: pd.DataFrame) -> float:
    """Tokens of one prompt with its report: the stage-03 plan's original condition (per request, averaged
    over its models), else plan.report_tokens; DPO pairs are built from these prompts."""
    orig = plan[(plan["condition"] == Condition.ORIGINAL.value) & (plan["requests"] > 0)] if len(plan) else plan
    if len(orig):
        return float((orig["input_tokens"] / orig["requests"]).mean())
    return float(plan_params(cfg)["report_tokens"])


def write_plan(cfg: RunConfig) -> tuple[pd.DataFrame, Path]:
    """Write `runs/<run>/plan.{csv,md}` (stage 03) and `plan_stages.csv` (stages 05, 07-08); return the
    stage-03 plan and the Markdown path."""
    plan = build_plan(cfg)
    _, counts, _ = condition_texts(cfg, 1, cfg.seed)
    other = other_stages_plan(cfg, stage03_prompt_tokens(cfg, plan), counts.get(Condition.ORIGINAL.value, 0))
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    plan.to_csv(cfg.run_dir / "plan.csv", index=False)
    other.to_csv(cfg.run_dir / "plan_stages.csv", index=False)
    md = cfg.run_dir / "plan.md"
    md.write_text(plan_markdown(cfg, plan, other), encoding="utf-8")
    return plan, md


# ---- preflight ----------------------------------------------------------------------------

def reachable(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether a TCP connection opens (no request is sent)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def served_models(base_url: str, timeout: float = 3.0) -> list[str] | None:
    """The model ids an OpenAI-compatible server lists at GET <base_url>/models (vLLM: the one it
    serves), or None when it does not answer that route (then only reachability is known)."""
    import json
    import urllib.request

    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=timeout) as resp:
            return [str(m.get("id")) for m in json.loads(resp.read()).get("data", [])]
    except Exception:  # noqa: BLE001 -- any failure means "not listed", reported by the caller's reachability check
        return None


def model_names(obj) -> set[str]:
    """Every string in params (judges, refiners, teachers, BizFinBench models name registry records)."""
    if isinstance(obj, dict):
        return set().union(*(model_names(v) for v in obj.values())) if obj else set()
    if isinstance(obj, list):
        return set().union(*(model_names(v) for v in obj)) if obj else set()
    return {obj} if isinstance(obj, str) else set()


def unknown_model_names(cfg: RunConfig, registry: dict, sections: set[str] | None) -> list[str]:
    """One problem line per model name in params (every `MODEL_NAME_KEYS` key, of `sections` only
    when given) that the run's registry does not hold."""
    from finlib.core.params import MODEL_NAME_STAGES, model_names_used

    rfile = (cfg.params.get("inference") or {}).get("registry") or "params/models.yaml"
    return [f"models: {key} names {name!r}, not a record of the model registry {rfile} (fix the name or add a record)"
            for key, names in model_names_used(cfg.params, MODEL_NAME_STAGES).items()
            if sections is None or key.split(".")[0] in sections
            for name in names if name not in registry]


def stage_sections(stages: Iterable[str] | None) -> set[str]:
    """The params sections `stages` read (None: every stage), from the stage table: what the
    preflight checks of a partial run."""
    from finlib.pipeline.stages import STAGE_MODULES, stage_section

    return {sec for s in (STAGE_MODULES if stages is None else stages) if (sec := stage_section(s)) is not None}


def preflight(cfg: RunConfig, can_reach: Callable[[str, int], bool] | None = None,
              list_models: Callable[[str], list[str] | None] | None = None,
              stages: Iterable[str] | None = None) -> list[str]:
    """Everything this run needs that is not here: one line each, with what to do about it.

    Every model the params name (stage 03's, BizFinBench's answerers and judges, the DPO teacher)
    is checked before any call: its server must accept a connection and, for a local server
    (vLLM), list the model's id at /v1/models -- a model whose server does not answer is named
    here instead of being scored on error rows. `stages`: only what those stages use (stage 02
    alone needs no model server); None = the whole run."""
    can_reach = can_reach or reachable
    needs = stage_sections(stages)
    problems: list[str] = []
    # a stage list that reads no corpus: nothing of the corpus or prices is checked
    data = cfg.section("data") if "data" in needs else {"source": "synthetic", "reports": {}, "prices": {}}
    source = data["source"]
    reports = data["reports"]
    if source == "huggingface" and not can_reach(*HF_HOST):
        problems.append(f"corpus: Hugging Face dataset {reports.get('hf_dataset')} unreachable (no network); "
                        "download it where you have network and set data.source: local with data.reports.path")
    if source == "huggingface" and not reports.get("hf_revision"):
        problems.append(f"corpus: data.reports.hf_revision is not pinned for {reports.get('hf_dataset')}; set it to the "
                        "dataset commit you read (huggingface_hub.HfApi().dataset_info(repo).sha)")
    biz = cfg.section("bizfin") if "bizfin" in needs and "bizfin" in cfg.params else {}  # a Fin-Bias-only params file
    if biz.get("source") == "huggingface" and not biz.get("hf_revision"):
        problems.append(f"bizfin: bizfin.hf_revision is not pinned for {biz.get('hf_dataset')}; set it to the dataset "
                        "commit you read")
    if source == "local" and not (reports.get("path") and cfg.path(reports["path"]).is_file()):
        problems.append(f"corpus: data.reports.path {reports.get('path')!r} is not a file")
    prices = data["prices"]
    if source != "synthetic":
        for key in ("path", "market_path"):
            if prices.get(key) and not cfg.path(prices[key]).is_file():
                problems.append(f"prices: data.prices.{key} {prices[key]!r} is not a file")
        if (not prices.get("path") or not prices.get("market_path")) and not can_reach(*YAHOO_HOST):
            problems.append("prices: yfinance needs network (Yahoo Finance unreachable); give data.prices.path and "
                            "data.prices.market_path (long date,ticker,adj_close files) instead")
    lex = cfg.section("perturb")["lexicon_path"] if "perturb" in needs else None
    if lex and not cfg.path(lex).is_file():
        problems.append(f"lexicon: {lex} missing (no_opinion condition); run `make data` with network")
    specs = select_models(run_registry(cfg), list(cfg.section("inference")["models"])) if "inference" in needs else []
    for env in sorted({s.api_key_env for s in specs if s.api_key_env and not os.environ.get(s.api_key_env)}):
        users = [s.name for s in specs if s.api_key_env == env]
        problems.append(f"keys: environment variable {env} unset (models {', '.join(users)})")
    registry = run_registry(cfg)
    problems += unknown_model_names(cfg, registry, None if stages is None else needs)
    named = model_names(cfg.params if stages is None else {k: cfg.params.get(k) for k in needs})
    used = [registry[n] for n in sorted(named & set(registry), key=str)]
    specs += [s for s in used if s not in specs]
    list_models = list_models or served_models
    servers: dict[tuple[str, int], list[ModelSpec]] = {}
    for s in specs:
        if backend_of(s).http_endpoint and s.base_url:
            u = urlparse(s.base_url)
            servers.setdefault((u.hostname or "", u.port or (443 if u.scheme == "https" else 80)), []).append(s)
    for (host, port), group in servers.items():
        names = [s.name for s in group]
        local = host in ("localhost", "127.0.0.1", "::1") or host.startswith("127.")
        if not can_reach(host, port):
            todo = "start the server (e.g. vLLM, docs/real-runs.md) or fix base_url" if local else "no network to this API"
            problems.append(f"server: {host}:{port} unreachable (models {', '.join(names[:4])}"
                            f"{' …' if len(names) > 4 else ''}); {todo}")
            continue
        if not local:  # an API lists its models only with a key; reachability is what can be checked here
            continue
        for s in group:
            served = list_models(s.base_url)
            if served is not None and s.model_id not in served:
                problems.append(f"server: {s.base_url} does not serve model '{s.name}' ({s.model_id}; it serves "
                                f"{', '.join(served[:3]) or 'nothing'}): start its own server and set its endpoint "
                                f"(inference.endpoints or FINLIB_BASE_URL__<NAME>)")
    return problems


def check_preflight(cfg: RunConfig, stages: Iterable[str] | None = None) -> None:
    """Raise at once, listing every missing piece `stages` need (None: the whole run), when
    `plan.preflight` is on and anything is missing."""
    if not plan_params(cfg)["preflight"]:
        return
    problems = preflight(cfg, stages=stages)
    if problems:
        raise SystemExit(f"run '{cfg.name}' ({cfg.params_file.name}) cannot start here — missing:\n  - "
                         + "\n  - ".join(problems) + "\n(`make plan RUN=" + cfg.name + "` works offline.)")


def main(argv: list[str] | None = None) -> int:
    import argparse

    from finlib.core.config import load_run, repo_root

    ap = argparse.ArgumentParser(description="Plan a run (requests, tokens, cost, wall time); makes no calls.")
    ap.add_argument("--run", default=os.environ.get("RUN", "default"))
    ap.add_argument("--params", default=None)
    args = ap.parse_args(argv)
    os.chdir(repo_root())
    from finlib.core.config import split_run_arg

    run, from_path = split_run_arg(args.run)  # RUN=params/mine.yaml, as the runner reads it
    try:
        cfg = load_run(run, args.params or from_path)
        _, md = write_plan(cfg)
    except (ValueError, OSError, KeyError, LookupError) as exc:  # one line, as the runner prints it
        print(f"[{run}] plan FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(md.read_text(encoding="utf-8"))
    print(f"written: {md} and {md.with_suffix('.csv')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
