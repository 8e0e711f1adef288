"""Growth benchmark: each measured stage's CPU seconds and peak RSS at 1/8, 1/4 and 1/2 of a corpus, with
the log-log slope fitted per stage (1.0 = linear growth, below 1 = a fixed part, above 1 = worse than linear).

The stages are `bench_scale.py`'s, each in its own child process on synthetic inputs of Fin-Bias's shape
(`scale_data.py`), so nothing from stages 00-02 is needed:
- 04: `score_all` (parse, metrics with the configured bootstrap replicates, paired tests, Tables 4-7);
- store: the resume check (`ResponseStore.answered`) over every stored key;
- 03: one model's share of requests through the client path (keys, resume check, `run_openai` against the
  stub server in its own process, read back, parse).

CPU seconds (user + system of the child) move less with other load on the cores than wall time, so the
slope is fitted on them; wall seconds are written too. `--corpus` is the corpus the fractions are taken of
(default 1/16 of the 8,868 reports: a few minutes on 2 cores). Results go to benchmarks/results/growth.json
with the machine's CPU flags and load before and after (`machine_before.idle` says whether it was idle).

    nice .venv/bin/python benchmarks/bench_growth.py [--corpus 554] [--stages 04 store 03] [--reps 1000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import FULL_REPORTS, _make_store, _run_child
from results import ROOT, machine, write_result

FRACTIONS = (Fraction(1, 8), Fraction(1, 4), Fraction(1, 2))
SIZE_NAME = {"04": "answers", "store": "keys", "03": "requests"}


def loglog_slope(sizes: list[float], values: list[float]) -> float | None:
    """Least-squares slope of log(value) on log(size): the exponent b of value ~ size^b."""
    pts = [(s, v) for s, v in zip(sizes, values) if s > 0 and v is not None and v > 0]
    if len(pts) < 2:
        return None
    x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return round(float(np.polyfit(x, y, 1)[0]), 3)


def child_args(stage: str, reports: int, reps: int, store_path: Path | None, url: str | None) -> list[str]:
    """The `bench_scale.py --child` arguments measuring `stage` on `reports` reports."""
    return {
        "04": ["04", str(reports), str(reps)],
        "store": ["store", str(store_path), str(reports * 4 * 19)],
        "03": ["03", str(reports * 4), url or ""],
    }[stage]


def measure(stage: str, reports: int, reps: int, tmp: Path) -> dict:
    """One stage at one size, in its own process (a store or stub server made for it first)."""
    store_path, server, url = None, None, None
    if stage == "store":
        sys.path.insert(0, str(ROOT))
        store_path = tmp / f"store_{reports}.sqlite"
        _make_store(store_path, reports * 4 * 19)
    if stage == "03":
        server = subprocess.Popen(
            [sys.executable, "-m", "finlib.rehearsal.stub_server", "--port", "0", "--max-seconds", "3000"],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        url = f"http://127.0.0.1:{int(server.stdout.readline())}/v1"
    try:
        before = machine()
        row = _run_child("new", child_args(stage, reports, reps, store_path, url), ROOT)
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        if store_path is not None:
            store_path.unlink(missing_ok=True)
    if "error" in row:
        raise SystemExit(f"stage {stage} at {reports} reports failed: {row['error']}")
    size = {"04": row.get("answers"), "store": row.get("keys"), "03": row.get("requests")}[stage]
    return {
        "reports": reports,
        SIZE_NAME[stage]: size,
        "cpu_s": round(row["cpu_s"], 3),
        "wall_s": round(row["wall_s"], 3),
        "peak_rss_mb": round(row["peak_rss_mb"], 1),
        "cpu_s_per_1000": round(1000 * row["cpu_s"] / size, 4),
        "load_1min_before": before["load_average_1_5_15"][0],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--corpus",
        type=int,
        default=round(FULL_REPORTS / 16),
        help="reports in the corpus the fractions 1/8, 1/4, 1/2 are taken of",
    )
    ap.add_argument("--stages", nargs="+", default=["04", "store", "03"], choices=["04", "store", "03"])
    ap.add_argument("--reps", type=int, default=1000, help="bootstrap replicates in stage 04")
    args = ap.parse_args(argv)
    before = machine()
    print(
        f"CPU flags: {' '.join(before['cpu_flags'])}; cores {before['cores']}; load "
        f"{before['load_average_1_5_15']}; corpus {args.corpus} reports",
        flush=True,
    )
    stages: dict[str, dict] = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for stage in args.stages:
            rows = {}
            for f in FRACTIONS:
                reports = max(1, round(args.corpus * f))
                rows[str(f)] = measure(stage, reports, args.reps, Path(tmp))
                print(f"stage {stage:<5} {str(f):>4} of the corpus: {json.dumps(rows[str(f)])}", flush=True)
            sizes = [r[SIZE_NAME[stage]] for r in rows.values()]
            stages[stage] = {
                "fractions": rows,
                "size": SIZE_NAME[stage],
                "slope_cpu_s": loglog_slope(sizes, [r["cpu_s"] for r in rows.values()]),
                "slope_peak_rss_mb": loglog_slope(sizes, [r["peak_rss_mb"] for r in rows.values()]),
            }
            print(
                f"stage {stage}: log-log slope of CPU seconds {stages[stage]['slope_cpu_s']}, of peak RSS "
                f"{stages[stage]['slope_peak_rss_mb']}",
                flush=True,
            )
    after = machine()
    loaded = not (before["idle"] and after["idle"])
    note = (
        "The machine was loaded (other processes on its cores: see machine_before/after): CPU seconds are "
        "the comparable figures, wall seconds are not idle figures."
        if loaded
        else "The machine was idle before and after the measurement."
    )
    print(
        "written:",
        write_result(
            "growth",
            {
                "corpus_reports": args.corpus,
                "full_reports": FULL_REPORTS,
                "reps": args.reps,
                "stages": stages,
                "machine_loaded": loaded,
                "note": note,
                "seconds_total": round(time.perf_counter() - t0),
            },
            before,
        ),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
