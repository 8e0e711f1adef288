"""Where a benchmark writes what it measured: `benchmarks/results/<name>.json`, with the machine it ran
on (CPU flags, cores, load average before and after) and the commit it measured. The docs quote a
measured figure only from such a file, with a marker naming the file and key (tests/repository/test_docs.py
checks that the figure and the file agree)."""
from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FLAGS_OF_INTEREST = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "fma")
IDLE_LOAD_PER_CORE = 0.25  # 1-minute load average per core below which a machine counts as idle


def cpu_flags() -> list[str]:
    """The CPU's SIMD flags that decide which kernels torch and llama.cpp use."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    flags = set(line.split(":", 1)[-1].split())
    return [f for f in FLAGS_OF_INTEREST if f in flags]


def machine() -> dict[str, Any]:
    """What the timing depends on, read now (call it before the measurement and once more after)."""
    load = os.getloadavg()
    cores = os.cpu_count() or 1
    return {"cpu_flags": cpu_flags(), "cores": cores, "load_average_1_5_15": [round(x, 2) for x in load],
            "idle": load[0] / cores < IDLE_LOAD_PER_CORE, "platform": platform.platform(),
            "python": platform.python_version(), "at": datetime.now(UTC).isoformat(timespec="seconds")}


def git_commit() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()
    return {"commit": git("rev-parse", "HEAD") or None, "dirty": bool(git("status", "--porcelain"))}


def write_result(name: str, data: dict[str, Any], before: dict[str, Any]) -> Path:
    """benchmarks/results/<name>.json: the figures, the machine before and after, the commit."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    record = {"benchmark": name, "machine_before": before, "machine_after": machine(), **git_commit(), **data}
    path.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return path
