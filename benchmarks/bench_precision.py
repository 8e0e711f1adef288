"""dtype auto: the chosen precision's throughput next to float32 on the same machine.

Two measurements, side by side in one process, for the native CPU kernels and (in a child
process) for torch forced to AVX2 kernels (`ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`,
the most common user CPU class):
1. the probe `finlib.llm.precision` uses (one transformer layer per candidate): GFLOP/s and the choice;
2. the real workload: SmolLM2-135M label-scoring forward passes over the same prompts in float32
   and in every candidate the probe did not find hopeless (> 4x slower than float32 is skipped:
   bf16 on AVX2 would take minutes), prompt tokens/s, best of 2 alternated rounds.
Goal: the chosen precision is never slower than float32 on the real workload (5 % noise margin).
The figures go to benchmarks/results/precision_native.json and (the AVX2-forced child)
benchmarks/results/precision_avx2.json (benchmarks/results.py) as well as to the terminal.

    .venv/bin/python benchmarks/bench_precision.py [--n 8] [--native-only]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import ROOT, machine, write_result

sys.path.insert(0, str(ROOT))

from finlib.llm.precision import CANDIDATES, cpu_features, resolve_dtype

AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
HOPELESS = 4.0   # a candidate this many times slower than float32 in the probe is not run on the model
NOISE = 0.95     # "never slower" allows 5 % timing noise on a shared machine


def prompts(n: int) -> list[str]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_local import reports  # the same synthetic report text as the label-scoring benchmark

    return [t[:900] for t in reports(n)]  # ~250 tokens: the default run's short reports


def forward_tok_s(dtype: str, texts: list[str], rounds: int = 2) -> float:
    """Prompt tokens/s of SmolLM2 label-scoring forward passes (batch 1, logits_to_keep=1)."""
    import torch

    from finlib.core.config import load_run
    from finlib.finbias.prompts import build_messages
    from finlib.llm.local_backend import LocalModel
    from finlib.llm.registry import load_registry

    cfg = load_run("default")
    spec = load_registry(cfg.path("params/models.yaml"))["smollm2-135m"]
    model = LocalModel(spec, cfg.path("data/interim/models"), dtype=dtype)
    seqs = [model.tok(model.prompt_text(build_messages(t), "score"), add_special_tokens=False)["input_ids"]
            for t in texts]
    best = float("inf")
    with torch.inference_mode():
        model.model(input_ids=torch.tensor([seqs[0]]), logits_to_keep=1, use_cache=False)  # warm-up
        for _ in range(rounds):
            t0 = time.perf_counter()
            for s in seqs:
                model.model(input_ids=torch.tensor([s]), logits_to_keep=1, use_cache=False)
            best = min(best, time.perf_counter() - t0)
    return sum(map(len, seqs)) / best


def run(n: int) -> dict:
    import torch

    chosen, report = resolve_dtype("auto", "cpu", cache_file=False)  # measure now; leave the run's saved choice alone
    g = report["gflops"]
    print(f"kernels: torch {report['torch_cpu_capability']} (CPU flags {', '.join(cpu_features())}), "
          f"{torch.get_num_threads()} threads")
    print("probe (transformer layer, tokens x hidden x ffn " + "x".join(map(str, report["probe_shape"])) + "): " +
          ", ".join(f"{c} {g[c]} GFLOP/s" for c in CANDIDATES) + f" -> chosen {chosen}")
    texts = prompts(n)
    runnable = [c for c in CANDIDATES if g[c] and g[c] * HOPELESS >= g["float32"]]
    speed = {}
    for c in runnable:  # alternate rounds would need both models loaded; each is best of 2 rounds
        speed[c] = forward_tok_s(c, texts)
    for c in CANDIDATES:
        if c in speed:
            print(f"  SmolLM2 scoring forward, {c:<9}: {speed[c]:8.0f} prompt tok/s "
                  f"({speed[c] / speed['float32']:.2f}x float32)")
        elif g[c] is None:
            print(f"  SmolLM2 scoring forward, {c:<9}: not a candidate here (no native instructions, or AVX2 kernels)")
        else:
            print(f"  SmolLM2 scoring forward, {c:<9}: skipped (probe {g[c]} GFLOP/s, > {HOPELESS:.0f}x slower "
                  "than float32)")
    ok = speed[chosen] >= NOISE * speed["float32"]
    print(f"chosen {chosen}: {speed[chosen]:.0f} vs float32 {speed['float32']:.0f} prompt tok/s -> never slower: "
          f"{'met' if ok else 'NOT met'}")
    return {"kernels": report["torch_cpu_capability"], "threads": torch.get_num_threads(), "probe_gflops": g,
            "chosen": chosen, "prompt_tok_s": {c: round(s, 1) for c, s in speed.items()},
            "ratio_to_float32": {c: round(s / speed["float32"], 2) for c, s in speed.items()}, "goal_met": ok}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--native-only", action="store_true", help="skip the AVX2-emulated child run")
    args = ap.parse_args()
    forced = all(os.environ.get(k) == v for k, v in AVX2_ENV.items())
    print("== " + ("torch forced to AVX2 kernels" if forced else "native CPU kernels"))
    before = machine()
    result = run(args.n)
    print("written:", write_result("precision_avx2" if forced else "precision_native", {"n": args.n, **result}, before))
    ok = result["goal_met"]
    if not args.native_only and not forced:
        print("== torch forced to AVX2 kernels (ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2)", flush=True)
        child = subprocess.run([sys.executable, __file__, "--n", str(args.n), "--native-only"],
                               env={**os.environ, **AVX2_ENV}, capture_output=True, text=True)
        print("\n".join(line for line in child.stdout.splitlines() if not line.startswith("==")))
        ok = ok and child.returncode == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
