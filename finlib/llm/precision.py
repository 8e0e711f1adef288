"""Floating-point precision for torch models, chosen by measurement (`dtype: auto`).

Why measure: bfloat16 halves memory traffic and is ~2x faster on CPUs with AVX512-BF16/AMX, but
on the most common CPU class (AVX2 only) torch emulates it and a bf16 matmul ran 57x slower than
float32 (0.9 vs 51.8 GFLOP/s). No rule of thumb from CPU flags is reliable across torch builds,
so once per process and device we time a short matmul in each candidate precision and take the
fastest; a lower precision must beat float32 by `MARGIN` to be chosen (it costs accuracy, so a
tie goes to float32). A fixed dtype in params always wins over the measurement.

Used by stage 03 (label scoring / generation with transformers) and stage 05 (DPO training:
`DPOConfig(bf16=..., fp16=...)` from `trainer_flags`). The report dict goes into the stage
report and the run manifest (`record_choice`).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

CANDIDATES = ("float32", "bfloat16", "float16")
FIXED = CANDIDATES                 # values a params file may fix instead of "auto"
MARGIN = 1.10                      # a lower precision must be >= 10 % faster than float32 to win
MATMUL_SHAPE = (64, 576, 1536)     # (tokens, hidden, ffn): a SmolLM2-sized MLP matmul, ~0.11 GFLOP
MIN_TIME_S = 0.05                  # per candidate and round; the whole probe costs ~1 s on a slow CPU
ROUNDS = 2                         # interleaved rounds, best kept: load noise on shared cores
MAX_REPS = 200
CPU_FEATURES = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_fp16")

_CACHE: dict[tuple[str, int], tuple[str, dict]] = {}


def cpu_features(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    """The CPU flags that decide low-precision speed (empty where /proc/cpuinfo is absent)."""
    try:
        flags = set()
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                flags.update(line.split(":", 1)[1].split())
                break
    except OSError:
        return []
    return [f for f in CPU_FEATURES if f in flags]


def measure_gflops(dtype: str, device: str = "cpu", shape: tuple[int, int, int] = MATMUL_SHAPE,
                   min_time_s: float = MIN_TIME_S, max_reps: int = MAX_REPS) -> float | None:
    """GFLOP/s of `a @ b` in `dtype` on `device` (None when the dtype cannot run a matmul there)."""
    import torch

    m, k, n = shape
    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(0)
    try:
        a = torch.randn(m, k, generator=gen).to(device=device, dtype=dt)
        b = torch.randn(k, n, generator=gen).to(device=device, dtype=dt)
        (a @ b).sum().item()  # warm-up (kernel selection, lazy init)
    except (RuntimeError, TypeError):
        return None
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    reps, t0 = 0, time.perf_counter()
    while True:
        a @ b
        reps += 1
        sync()
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time_s or reps >= max_reps:
            break
    return 2.0 * m * k * n * reps / elapsed / 1e9


def pick(gflops: dict[str, float | None], margin: float = MARGIN) -> str:
    """The fastest precision; a lower one only when it beats float32 by `margin` (pure: tested with
    injected timings)."""
    base = gflops.get("float32")
    if not base:
        raise ValueError(f"float32 matmul could not be measured: {gflops}")
    best, best_speed = "float32", base
    for name, speed in gflops.items():
        if name != "float32" and speed and speed >= margin * base and speed > best_speed:
            best, best_speed = name, speed
    return best


def resolve_dtype(requested: str = "auto", device: str = "cpu",
                  measure: Callable[[str, str], float | None] = measure_gflops) -> tuple[str, dict]:
    """(dtype name, report) for a params value: a fixed dtype is returned as is (measured only
    for the report when auto would be measured anyway); "auto" measures once per process and device."""
    if requested != "auto" and requested not in FIXED:
        raise ValueError(f"dtype must be 'auto' or one of {FIXED}, got {requested!r}")
    device = _device(device)
    if requested != "auto":
        return requested, {"requested": requested, "chosen": requested, "source": "params (fixed dtype wins)",
                           "device": device, "cpu_features": cpu_features()}
    key = (device, os.getpid())
    if measure is measure_gflops and key in _CACHE:
        return _CACHE[key][0], dict(_CACHE[key][1])
    import torch

    gflops: dict[str, float | None] = {}
    for _ in range(ROUNDS):  # interleaved, best of rounds: the first call also pays thread-pool start-up
        for c in CANDIDATES:
            g = measure(c, device)
            gflops[c] = g if gflops.get(c) is None else max(gflops[c], g or 0.0)
    chosen = pick(gflops)
    report = {"requested": "auto", "chosen": chosen, "source": "measured (fastest matmul)", "device": device,
              "gflops": {k: None if v is None else round(v, 2) for k, v in gflops.items()},
              "speedup_vs_float32": round((gflops[chosen] or 0.0) / gflops["float32"], 2),
              "margin": MARGIN, "matmul_shape": list(MATMUL_SHAPE), "threads": torch.get_num_threads(),
              "cpu_features": cpu_features(), "torch_cpu_capability": _cpu_capability()}
    if measure is measure_gflops:
        _CACHE[key] = (chosen, report)
    return chosen, dict(report)


def choose_dtype(device: str = "cpu", requested: str = "auto"):
    """(torch.dtype, report) for loading or training a model (stage 05 calls this)."""
    import torch

    name, report = resolve_dtype(requested, device)
    return getattr(torch, name), report


def trainer_flags(dtype_name: str) -> dict[str, bool]:
    """`bf16` / `fp16` for transformers' TrainingArguments / TRL's DPOConfig: always explicit,
    because DPOConfig defaults to bf16=True (57x slower on AVX2-only CPUs)."""
    return {"bf16": dtype_name == "bfloat16", "fp16": dtype_name == "float16"}


def record_choice(run_dir: Path, stage: str, report: dict) -> Path:
    """Merge one stage's precision report into runs/<run>/precision.json (the runner copies it
    into the manifest after each stage)."""
    path = Path(run_dir) / "precision.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[stage] = report
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)
    return path


def _device(device: str) -> str:
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def _cpu_capability() -> str | None:
    """torch's CPU kernel set (e.g. AVX2, AVX512; ATEN_CPU_CAPABILITY=avx2 forces AVX2)."""
    try:
        import torch

        return torch.backends.cpu.get_cpu_capability()
    except Exception:  # noqa: BLE001 -- informational only
        return None
