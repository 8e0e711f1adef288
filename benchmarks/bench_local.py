"""Local model: label scoring vs generate-then-parse, and scoring vs a plain forward pass.

Same prompts (the study's chat prompt over synthetic ~400-700-token reports), the embedded
SmolLM2 in the run's dtype (params inference.dtype), measured side by side in one process:
1. prompts/s of label scoring (finlib.llm.local_backend.LocalModel.score: tokenise, chat
   template, length-sorted left-padded batches, one forward pass, label probabilities) vs
   generate-then-parse (LocalModel.generate with --max-new-tokens, then stage 04's parse_rating).
   Goal >= 3x. Generation gets the run's `inference.max_new_tokens` (256 by default: room for
   the paper's chain of thought and its JSON); a smaller --max-new-tokens narrows the gap.
2. prompt tokens/s of the scoring path vs a plain single forward pass per prompt (batch 1, no
   padding, logits_to_keep=1: the machine's prefill limit). Goal >= 80 %. Best of 2 rounds each,
   alternated, to damp noise from other processes on the machine.
The figures go to benchmarks/results/local.json (benchmarks/results.py) as well as to the terminal.

    .venv/bin/python benchmarks/bench_local.py [--n 16] [--max-new-tokens 256]
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import ROOT, machine, write_result

sys.path.insert(0, str(ROOT))

from finlib.core.config import load_run
from finlib.finbias.answers import parse_rating
from finlib.finbias.inference.stage import FINBIAS_LABELS, inference_params
from finlib.finbias.prompts import build_messages
from finlib.llm.local_backend import LocalModel
from finlib.llm.registry import load_registry
from finlib.llm.store import Request, make_key

WORDS = ("revenue growth margin guidance demand cost pricing segment cash flow debt outlook risk competition "
         "quarter earnings management valuation dividend capital expenditure backlog orders inventory").split()


def reports(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        body = " ".join(" ".join(rng.choice(WORDS) for _ in range(12)).capitalize() + "." for _ in range(rng.randint(25, 45)))
        out.append(f"We rate Firm {i} Inc. a Buy with a ${rng.randint(20, 200)} target. {body}")
    return out


def requests(texts: list[str], mode: str, max_new_tokens: int) -> list[Request]:
    params = {"temperature": 1.0, "top_p": 1.0, **({"max_new_tokens": max_new_tokens} if mode == "generate" else {})}
    out = []
    for t in texts:
        msgs = build_messages(t, True)
        out.append(Request(make_key("local", "smol", msgs, params, "bench", mode), "smollm2-135m", "local", mode,
                           msgs, params))
    return out


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def plain_forward(model: LocalModel, seqs: list[list[int]]) -> None:
    import torch

    with torch.inference_mode():
        for s in seqs:
            model.model(input_ids=torch.tensor([s]), logits_to_keep=1, use_cache=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=None,
                    help="generation length (default: params inference.max_new_tokens of the default run)")
    args = ap.parse_args()
    cfg = load_run("default")
    inf = inference_params(cfg)
    spec = load_registry(cfg.path(inf["registry"]))["smollm2-135m"]
    model = LocalModel(spec, cfg.path(inf["model_cache"]), dtype=inf["dtype"], batch_size=inf["batch_size"],
                       score_batch_size=inf["score_batch_size"], max_batch_tokens=inf["max_batch_tokens"],
                       labels=FINBIAS_LABELS)  # as stage 03 loads it: score mode reads the answer labels
    args.max_new_tokens = args.max_new_tokens or inf["max_new_tokens"]
    texts = reports(args.n)
    score_reqs = requests(texts, "score", 0)
    gen_reqs = requests(texts, "generate", args.max_new_tokens)
    seqs = [model.tok(model.prompt_text(r.messages, "score"), add_special_tokens=False)["input_ids"]
            for r in score_reqs]
    n_tokens = sum(map(len, seqs))
    before = machine()
    list(model.score(score_reqs[:2]))  # warm-up (allocator, kernels)
    plain_forward(model, seqs[:2])

    plain_s, score_s = [], []
    for _ in range(2):
        plain_s.append(timed(lambda: plain_forward(model, seqs))[0])
        dt, scored = timed(lambda: [r for b in model.score(score_reqs) for r in b])
        score_s.append(dt)
    gen_s, generated = timed(lambda: [r for b in model.generate(gen_reqs) for r in b])
    parsed = sum(parse_rating(r.raw_text) is not None for r in generated)
    out_tokens = sum(r.output_tokens for r in generated)

    best_plain, best_score = min(plain_s), min(score_s)
    print(f"rounds (s): plain {[round(x, 2) for x in plain_s]}, scoring {[round(x, 2) for x in score_s]}")
    print(f"SmolLM2-135M ({model.dtype}, params dtype {inf['dtype']}), {args.n} prompts, {n_tokens} prompt tokens "
          f"(mean {n_tokens / args.n:.0f}), scoring batch {inf['score_batch_size']}, "
          f"generation batch {inf['batch_size']}")
    print(f"{'path':<34}{'seconds':>9}{'prompts/s':>11}{'prompt tok/s':>14}")
    print(f"{'plain forward (batch 1, no pad)':<34}{best_plain:>9.2f}{args.n / best_plain:>11.2f}{n_tokens / best_plain:>14.0f}")
    print(f"{'label scoring (engine)':<34}{best_score:>9.2f}{args.n / best_score:>11.2f}{n_tokens / best_score:>14.0f}")
    print(f"{'generate-then-parse':<34}{gen_s:>9.2f}{args.n / gen_s:>11.2f}{'':>14}"
          f"   ({out_tokens} new tokens, max {args.max_new_tokens}/prompt; {parsed}/{args.n} parsed as JSON)")
    speedup = gen_s / best_score
    efficiency = best_plain / best_score
    print(f"scoring vs generate-then-parse: {speedup:.1f}x prompts/s (goal >= 3x: {'met' if speedup >= 3 else 'NOT met'})")
    print(f"usable ratings/s: scoring {args.n / best_score:.2f} (every prompt) vs generation {parsed / gen_s:.2f} "
          f"({parsed} parsed)")
    print(f"scoring prompt tok/s vs plain forward: {100 * efficiency:.0f} % (goal >= 80 %: "
          f"{'met' if efficiency >= 0.8 else 'NOT met'})")
    print("written:", write_result("local", {
        "model": "smollm2-135m", "dtype": str(model.dtype), "n": args.n, "prompt_tokens": n_tokens,
        "max_new_tokens": args.max_new_tokens, "parsed": parsed, "new_tokens": out_tokens,
        "seconds": {"plain_forward": round(best_plain, 3), "scoring": round(best_score, 3), "generate": round(gen_s, 3)},
        "prompts_per_s": {"scoring": round(args.n / best_score, 2), "generate": round(args.n / gen_s, 2)},
        "ratio_scoring_vs_generate": round(speedup, 1), "scoring_vs_plain_forward_pct": round(100 * efficiency),
        "goal_met": speedup >= 3 and efficiency >= 0.8}, before))


if __name__ == "__main__":
    main()
