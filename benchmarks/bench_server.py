"""The embedded generator two ways, on the same prompts in one run: transformers `generate` vs
the llama.cpp server (the default path), for Qwen2.5-Coder-0.5B-Instruct.

Same chat prompts (the default run's Fin-Bias prompt over short synthetic reports), greedy
decoding, the same output-token cap. Each engine runs in its own child process so its peak RSS
is its own:
- transformers: the GGUF de-quantised to float32 (converted once to a safetensors cache under
  data/interim/models/<name>-hf/), dtype from `finlib.llm.precision` (auto); prompt tok/s from a
  timed prefill forward pass, generated tok/s from generate time minus that prefill.
- llama.cpp: `finlib.llm.llamacpp.serve` (xllamacpp, Q4_K_M as shipped), one slot, called over
  HTTP through the openai client; prompt and generated tok/s from the server's own timings, peak
  RSS of the server process (VmHWM).
The faster path is the default (`backend: llamacpp` in params/models.yaml). The figures go to
benchmarks/results/server.json (benchmarks/results.py) as well as to the terminal.

    .venv/bin/python benchmarks/bench_server.py [--n 3] [--max-new-tokens 64] [--threads N]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import ROOT, machine, write_result

sys.path.insert(0, str(ROOT))

from finlib.core.config import load_run
from finlib.core.memory import peak_rss_mb
from finlib.finbias.prompts import build_messages
from finlib.llm.llamacpp import gguf_path, serve, server_config, server_pid
from finlib.llm.registry import load_registry

MODEL = "qwen2.5-coder-0.5b"


def prompts(n: int) -> list[list[dict]]:
    from finlib.finbias.data.synth import generate_market

    cfg = load_run("default")
    syn = dict(cfg.section("data")["synthetic"], n_reports=max(n, 4))
    texts = list(generate_market(syn, seed=cfg.seed).reports["text"])[:n]
    return [build_messages(t) for t in texts]


def run_transformers(n: int, max_new: int, threads: int | None) -> dict:
    """Child process: load (cached safetensors), then prefill + generate each prompt."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from finlib.llm.local_backend import quiet_gguf_conversion
    from finlib.llm.precision import resolve_dtype

    if threads:
        torch.set_num_threads(threads)
    cfg = load_run("default")
    spec = load_registry(cfg.path("params/models.yaml"))[MODEL]
    cache = cfg.path("data/interim/models") / f"{MODEL}-hf"
    t0 = time.perf_counter()
    if not (cache / "config.json").is_file():
        src = gguf_path(spec, cfg.path("data/interim/models"))
        with quiet_gguf_conversion():
            tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
            model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name)
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(cache)
        tok.save_pretrained(cache)
    dtype, _ = resolve_dtype("auto", "cpu")
    tok = AutoTokenizer.from_pretrained(cache)
    model = AutoModelForCausalLM.from_pretrained(cache, dtype=getattr(torch, dtype)).eval()
    load_s = time.perf_counter() - t0
    p_tok = p_s = g_tok = g_s = 0.0
    with torch.inference_mode():
        for msgs in prompts(n):
            ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
            ids = ids["input_ids"]
            t = time.perf_counter()
            model(input_ids=ids, logits_to_keep=1)
            prefill = time.perf_counter() - t
            t = time.perf_counter()
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                                 do_sample=False, pad_token_id=tok.eos_token_id)
            total = time.perf_counter() - t
            p_tok, p_s = p_tok + ids.shape[1], p_s + prefill
            g_tok, g_s = g_tok + out.shape[1] - ids.shape[1], g_s + max(total - prefill, 1e-9)
    rss = peak_rss_mb()
    return {"engine": f"transformers ({dtype})", "load_s": load_s, "prompt_tok_s": p_tok / p_s,
            "gen_tok_s": g_tok / g_s, "prompt_tokens": p_tok, "gen_tokens": g_tok, "peak_rss_mb": rss}


def run_llamacpp(n: int, max_new: int, threads: int | None) -> dict:
    from dataclasses import replace

    from openai import OpenAI

    cfg = load_run("default")
    spec = load_registry(cfg.path("params/models.yaml"))[MODEL]
    scfg = replace(server_config(spec, cfg.path("data/interim/models")), n_parallel=1, threads=threads)
    t0 = time.perf_counter()
    with serve(scfg, Path("/tmp") / "bench_server_logs") as url:
        load_s = time.perf_counter() - t0
        client = OpenAI(base_url=url, api_key="EMPTY", timeout=600)
        p_tok = p_ms = g_tok = g_ms = 0.0
        for msgs in prompts(n):
            body = client.chat.completions.create(model=spec.name, messages=msgs, max_tokens=max_new,
                                                  temperature=0.0).model_dump()
            tm = body["timings"]
            p_tok, p_ms = p_tok + tm["prompt_n"], p_ms + tm["prompt_ms"]
            g_tok, g_ms = g_tok + tm["predicted_n"], g_ms + tm["predicted_ms"]
        pid = server_pid(url)
        rss = _vm_hwm_mb(pid) if pid else float("nan")
    return {"engine": "llama.cpp server (Q4_K_M)", "load_s": load_s, "prompt_tok_s": 1000 * p_tok / p_ms,
            "gen_tok_s": 1000 * g_tok / g_ms, "prompt_tokens": p_tok, "gen_tokens": g_tok, "peak_rss_mb": rss}


def _vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None, help="both engines (default: all cores)")
    ap.add_argument("--child", choices=["transformers", "llamacpp"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        fn = run_transformers if args.child == "transformers" else run_llamacpp
        print(json.dumps(fn(args.n, args.max_new_tokens, args.threads)))
        return 0
    rows = []
    before = machine()
    for engine in ("llamacpp", "transformers"):
        cmd = [sys.executable, __file__, "--child", engine, "--n", str(args.n), "--max-new-tokens",
               str(args.max_new_tokens)] + (["--threads", str(args.threads)] if args.threads else [])
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{engine}: failed\n{out.stderr[-2000:]}")
            return 1
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{MODEL}, {args.n} prompts, greedy, max {args.max_new_tokens} new tokens")
    print(f"{'engine':<30}{'load s':>8}{'prompt tok/s':>14}{'gen tok/s':>11}{'peak RSS MB':>13}")
    for r in rows:
        print(f"{r['engine']:<30}{r['load_s']:>8.1f}{r['prompt_tok_s']:>14.1f}{r['gen_tok_s']:>11.1f}"
              f"{r['peak_rss_mb']:>13.0f}")
    lc, tf = rows
    print(f"llama.cpp vs transformers: prompt {lc['prompt_tok_s'] / tf['prompt_tok_s']:.1f}x, generated "
          f"{lc['gen_tok_s'] / tf['gen_tok_s']:.1f}x, memory {lc['peak_rss_mb'] / tf['peak_rss_mb']:.2f}x -> default: "
          f"{'llama.cpp server' if lc['gen_tok_s'] >= tf['gen_tok_s'] else 'transformers'}")
    ratios = {"prompt": round(lc["prompt_tok_s"] / tf["prompt_tok_s"], 2),
              "generated": round(lc["gen_tok_s"] / tf["gen_tok_s"], 2),
              "memory": round(lc["peak_rss_mb"] / tf["peak_rss_mb"], 2)}
    print("written:", write_result("server", {"model": MODEL, "n": args.n, "max_new_tokens": args.max_new_tokens,
                                              "threads": args.threads, "llamacpp": lc, "transformers": tf,
                                              "ratios_llamacpp_vs_transformers": ratios}, before))
    return 0


if __name__ == "__main__":
    sys.exit(main())
