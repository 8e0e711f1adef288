"""Floating-point precision for torch models, chosen by measurement (`dtype: auto`).

Why measure: bfloat16 halves memory traffic and is ~2x faster on CPUs with AVX512-BF16/AMX, but
on the most common CPU class (AVX2 only) torch emulates it and a bf16 matmul ran 57x slower than
float32 (0.9 vs 51.8 GFLOP/s). No rule of thumb from CPU flags is reliable across torch builds,
so once per process and device we time one transformer layer's forward pass (the workload's
shape, not a bare matmul: see `measure_gflops`) in each candidate precision and take the
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
from collections.abc import Callable
from pathlib import Path

CANDIDATES = ("float32", "bfloat16", "float16")
FIXED = CANDIDATES                 # values a params file may fix instead of "auto"
MARGIN = 1.25                      # a lower precision must be >= 25 % faster than float32 to win: on CPUs where
                                   # bf16 and fp32 are close the choice would otherwise flip with timing noise
BLOCK_SHAPE = (64, 576, 1536)      # (tokens, hidden, ffn): one SmolLM2-sized transformer layer, ~0.35 GFLOP
HEADS = 9
WARMUP = 3                         # untimed calls first (the first fp32 calls ran 30x slower than later ones)
MIN_REPS = 4                       # timed calls at least, best kept
MIN_TIME_S = 0.05                  # per candidate and round (at least 2 reps, best kept); ~1-3 s in all
ROUNDS = 2                         # interleaved rounds, best kept: load noise on shared cores
MAX_REPS = 200
MIXED = {"bf16": "bfloat16", "fp16": "float16", "no": "float32"}  # accelerate mixed_precision -> dtype
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


def block_flops(tokens: int, hidden: int, ffn: int) -> float:
    """FLOPs of one pre-norm transformer layer over `tokens` (projections, FFN, attention)."""
    macs = tokens * (4 * hidden * hidden + 2 * hidden * ffn) + 2 * tokens * tokens * hidden
    return 2.0 * macs


def measure_gflops(dtype: str, device: str = "cpu", shape: tuple[int, int, int] = BLOCK_SHAPE,
                   min_time_s: float = MIN_TIME_S, max_reps: int = MAX_REPS) -> float | None:
    """GFLOP/s of one transformer layer's forward pass in `dtype` on `device` (None when the dtype
    cannot run it there).

    A whole layer, not a bare matmul: a matmul probe said bf16 was 2x faster on an AVX512-BF16 CPU
    while the real SmolLM2 forward pass ran 0.68x float32 there (norms, softmax, activations and
    conversions in bf16 are slow); this layer reproduced that (0.76x)."""
    import torch

    tokens, hidden, ffn = shape
    dt = getattr(torch, dtype)
    try:
        layer, x = _llama_layer(tokens, hidden, ffn, device, dt)
        with torch.inference_mode():
            for _ in range(WARMUP):  # kernel selection, JIT'd primitives, thread pool start: slow first calls
                layer(x).sum().item()
    except (RuntimeError, TypeError, NotImplementedError):
        return None
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    best, reps, t_all = float("inf"), 0, time.perf_counter()
    with torch.inference_mode():
        while reps < max_reps and (reps < MIN_REPS or time.perf_counter() - t_all < min_time_s):
            t0 = time.perf_counter()
            layer(x)
            sync()
            best = min(best, time.perf_counter() - t0)
            reps += 1
    return block_flops(tokens, hidden, ffn) / best / 1e9


def _llama_layer(tokens: int, hidden: int, ffn: int, device: str, dt):
    """One Llama-style decoder layer written with the ops transformers' Llama/Qwen code calls
    (RMSNorm by hand, linear projections, causal scaled-dot-product attention, SiLU-gated MLP):
    torch's own TransformerEncoderLayer takes a fused fast path whose fp32/bf16 speeds differ
    from those models' by 10x on some CPUs."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)

    def w(*shape):
        return (torch.randn(*shape, generator=g) / shape[-1] ** 0.5).to(device=device, dtype=dt)

    wq, wk, wv, wo = (w(hidden, hidden) for _ in range(4))
    wg, wu, wd = w(ffn, hidden), w(ffn, hidden), w(hidden, ffn)
    heads = HEADS

    def rms(h):
        return h * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(h.dtype)

    def layer(x):
        h = rms(x)
        q, k, v = (F.linear(h, m).view(1, tokens, heads, -1).transpose(1, 2) for m in (wq, wk, wv))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(1, tokens, hidden)
        x = x + F.linear(a, wo)
        h = rms(x)
        return x + F.linear(F.silu(F.linear(h, wg)) * F.linear(h, wu), wd)

    return layer, torch.randn(1, tokens, hidden, generator=g).to(device=device, dtype=dt)


def pick(gflops: dict[str, float | None], margin: float = MARGIN) -> str:
    """The fastest precision; a lower one only when it beats float32 by `margin` (pure: tested with
    injected timings)."""
    base = gflops.get("float32")
    if not base:
        raise ValueError(f"float32 could not be measured: {gflops}")
    best, best_speed = "float32", base
    for name, speed in gflops.items():
        if name != "float32" and speed and speed >= margin * base and speed > best_speed:
            best, best_speed = name, speed
    return best


def machine_key(device: str) -> str:
    """What the measured choice depends on: device, torch build and kernel set, CPU flags, threads."""
    import torch

    return json.dumps([device, torch.__version__, _cpu_capability(), cpu_features(), torch.get_num_threads()])


def default_cache_file() -> Path:
    """data/interim/precision.json of the repository: every stage (and a rerun) sees the same choice,
    so store keys, which name the dtype, do not change between processes."""
    from finlib.core.config import repo_root

    return repo_root() / "data" / "interim" / "precision.json"


NATIVE_FLAGS = {"bfloat16": {"avx512_bf16", "amx_bf16"}, "float16": {"avx512_fp16", "amx_fp16"}}


def cpu_candidates(features: list[str] | None = None, capability: str | None = None) -> tuple[str, ...]:
    """Precisions worth measuring on this CPU: float32, plus bf16/fp16 only where the CPU has the
    instructions and torch uses them (not when forced to AVX2 kernels). Elsewhere they are
    emulated (57x slower for bf16), and a noisy timing on a busy machine must never pick them."""
    feats = set(cpu_features() if features is None else features)
    cap = (_cpu_capability() if capability is None else capability) or ""
    wide = cap.upper() not in ("", "DEFAULT", "AVX2", "NO AVX")
    return ("float32", *(c for c in ("bfloat16", "float16") if wide and feats & NATIVE_FLAGS[c]))


def resolve_dtype(requested: str = "auto", device: str = "cpu",
                  measure: Callable[[str, str], float | None] = measure_gflops,
                  cache_file: Path | None | bool = None,
                  candidates: tuple[str, ...] | None = None) -> tuple[str, dict]:
    """(dtype name, report) for a params value: a fixed dtype is returned as is; "auto" measures
    once per machine (kernel set, CPU flags, threads) and keeps the choice in `cache_file`
    (default data/interim/precision.json; False = no file): a rerun must find its stored answers,
    whose keys name the dtype, even where two precisions are close and timings are noisy."""
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

    path = default_cache_file() if cache_file is None else (cache_file or None)
    mkey = machine_key(device)
    if path is not None and measure is measure_gflops and Path(path).is_file():
        try:
            saved = json.loads(Path(path).read_text()).get(mkey)
        except ValueError:
            saved = None
        if saved and saved.get("chosen") in CANDIDATES:
            report = {**saved, "source": f"measured earlier on this machine ({Path(path).name})"}
            _CACHE[key] = (saved["chosen"], report)
            return saved["chosen"], dict(report)

    if candidates is None:
        candidates = CANDIDATES if device.startswith("cuda") else cpu_candidates()
    gflops: dict[str, float | None] = {c: None for c in CANDIDATES}
    for _ in range(ROUNDS):  # interleaved, best of rounds: the first call also pays thread-pool start-up
        for c in candidates:
            g = measure(c, device)
            gflops[c] = g if gflops.get(c) is None else max(gflops[c], g or 0.0)
    chosen = pick(gflops)
    report = {"requested": "auto", "chosen": chosen, "source": "measured (fastest transformer layer)", "device": device,
              "candidates": list(candidates),
              "gflops": {k: None if v is None else round(v, 2) for k, v in gflops.items()},
              "speedup_vs_float32": round((gflops[chosen] or 0.0) / gflops["float32"], 2),
              "margin": MARGIN, "probe": "one transformer layer (tokens, hidden, ffn)", "probe_shape": list(BLOCK_SHAPE), "threads": torch.get_num_threads(),
              "cpu_features": cpu_features(), "torch_cpu_capability": _cpu_capability()}
    if measure is measure_gflops:
        _CACHE[key] = (chosen, report)
        if path is not None:
            _save(Path(path), mkey, report)
    return chosen, dict(report)


def _save(path: Path, mkey: str, report: dict) -> None:
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        data = {}
    data[mkey] = report
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)


def choose_dtype(device: str = "cpu", requested: str = "auto"):
    """(torch.dtype, report) for loading or training a model (stage 05 calls this)."""
    import torch

    name, report = resolve_dtype(requested, device)
    return getattr(torch, name), report


def launch_dtype(dtype: str, mixed_precision: str | None) -> str:
    """A training dtype (`dpo.dtype`) under a launcher: `auto` takes the accelerate config's mixed precision (the same
    on every rank, and bf16 only where the config asks for it); without a launcher precision `auto`
    stays `auto` and is measured on the one process (`choose_dtype`)."""
    return MIXED.get(mixed_precision, dtype) if dtype == "auto" and mixed_precision else dtype


def compute_threads(requested: int | None = None) -> int:
    """The CPU threads a local model computes with: the params' `threads` (`LocalModel` sets it), else
    torch's own count. Reduced-precision results depend on it (`engine.engine_key` names it)."""
    if requested:
        return int(requested)
    import torch

    return int(torch.get_num_threads())


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
