"""Benchmark: how the rehearsal's stages grow with the corpus, at fractions of Fin-Bias's 8,868 reports.

Each fraction is `make rehearse` (params/rehearsal.yaml: 19 simulated models x 4 conditions, BizFinBench's
grid) on a synthetic market of that fraction of the reports and firms, in its own child process, with an
empty response store and an empty POS-tag cache of its own: every stage does a first run's work (no answer
or tag is reused from another fraction). It prints, side by side, each stage's seconds, stage 03's answers
per second and peak memory (its report's `peak_rss_mb`), and the seconds per 1,000 reports, and writes them to
benchmarks/results/rehearsal_scaling.json under `fractions.<fraction>` (a fraction measured again replaces its
entry; each entry keeps the machine's CPU flags and load before and after it).

    nice .venv/bin/python benchmarks/bench_rehearsal_scaling.py --fractions 1/8 1/4 1/2 [--keep]

A fraction's artifacts, store and tag cache are removed afterwards unless `--keep`.
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import RESULTS, ROOT, machine, write_result

FULL_REPORTS, FULL_FIRMS = 8_868, 480
WORK = ROOT / "data" / "interim" / "bench-rehearsal-scaling"


def scaled_params(fraction: Fraction, run: str) -> Path:
    """A params file extending rehearsal.yaml at `fraction` of the corpus, with its own store and tag cache."""
    folder = WORK / "params"
    folder.mkdir(parents=True, exist_ok=True)
    for f in (ROOT / "params").glob("*.yaml"):  # `extends` is read relative to the file's folder
        shutil.copy(f, folder / f.name)
    params = {"extends": "rehearsal.yaml",
              "data": {"synthetic": {"n_reports": round(FULL_REPORTS * fraction),
                                     "n_firms": max(9, round(FULL_FIRMS * fraction))}},
              "perturb": {"tag_cache": str((WORK / run / "postags").relative_to(ROOT))},
              "inference": {"store": str((WORK / run / "responses.sqlite").relative_to(ROOT))}}
    path = folder / f"{run}.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def clean(run: str) -> None:
    for d in (WORK / run, ROOT / "data" / "processed" / run, ROOT / "data" / "raw" / "synthetic" / run,
              ROOT / "runs" / run, ROOT / "figures" / run):
        shutil.rmtree(d, ignore_errors=True)


def measure(fraction: Fraction) -> dict:
    run = f"rehearsal_scale_{fraction.numerator}of{fraction.denominator}"
    clean(run)
    params = scaled_params(fraction, run)
    machine_before = machine()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "finlib.rehearsal.rehearse", "--run", run, "--params", str(params)],
                          cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    outcome_file = ROOT / "runs" / run / "rehearsal.json"
    if not outcome_file.is_file():
        raise SystemExit(f"{run}: the rehearsal wrote no outcome (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    outcome = json.loads(outcome_file.read_text())
    inference = json.loads((ROOT / "data" / "processed" / run / "inference_report.json").read_text())
    sent = sum(m["sent"] for m in inference["models"].values())
    return {"fraction": str(fraction), "reports": round(FULL_REPORTS * fraction), "wall_s": round(wall),
            "cpu_s": round((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)),
            "checks": "passed" if outcome["checks"]["ok"] else "FAILED: " + "; ".join(outcome["checks"]["problems"]),
            "stages": outcome["stage_seconds"], "stage_peak_rss_mb": outcome["stage_peak_rss_mb"], "answers_sent": sent,
            "stage03_answers_per_s": round(sent / max(outcome["stage_seconds"].get("03", 0), 1), 1),
            "stage03_peak_rss_mb": inference.get("peak_rss_mb"),
            "stage03_peak_rss_mb_sending": inference.get("peak_rss_mb_sending"),
            "servers_peak_rss_mb": outcome["peak_rss_mb"], "run": run,
            "machine_before": machine_before, "machine_after": machine()}


def write_rows(rows: list[dict]) -> Path:
    """benchmarks/results/rehearsal_scaling.json: the fractions measured before, with these replaced."""
    path = RESULTS / "rehearsal_scaling.json"
    fractions = json.loads(path.read_text(encoding="utf-8")).get("fractions", {}) if path.is_file() else {}
    fractions.update({r["fraction"]: r for r in rows})
    return write_result("rehearsal_scaling", {"fractions": fractions}, rows[0]["machine_before"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fractions", nargs="+", default=["1/32", "1/16"],
                    help="of the 8,868 reports (the measured table: 1/8 1/4 1/2; `make bench` runs the default)")
    ap.add_argument("--keep", action="store_true", help="keep each fraction's artifacts, store and tag cache")
    args = ap.parse_args(argv)
    cpu = subprocess.run("grep -o -w 'avx2\\|avx512f\\|avx512_bf16\\|amx_bf16' /proc/cpuinfo | sort -u",
                         shell=True, capture_output=True, text=True).stdout.split()
    print(f"CPU flags: {' '.join(cpu) or 'none of avx2/avx512f/avx512_bf16/amx_bf16'}", flush=True)
    rows = []
    for f in map(Fraction, args.fractions):
        row = measure(f)
        rows.append(row)
        print(json.dumps(row), flush=True)
        write_rows([row])  # each fraction as it finishes: a later fraction that fails keeps the earlier ones
        if not args.keep:
            clean(row["run"])
    stages = sorted({s for r in rows for s in r["stages"]})
    print("\n| fraction | reports | " + " | ".join(f"stage {s} s" for s in stages)
          + " | total s | CPU s | stage 03 answers/s | stage 03 peak RSS MB | checks |")
    print("|---" * (len(stages) + 7) + "|")
    for r in rows:
        print(f"| {r['fraction']} | {r['reports']:,} | " + " | ".join(str(r["stages"].get(s, "")) for s in stages)
              + f" | {r['wall_s']} | {r['cpu_s']} | {r['stage03_answers_per_s']} | {r['stage03_peak_rss_mb']} | "
              f"{r['checks']} |")
    base = rows[0]
    print("\nseconds per 1,000 reports, each stage, relative to the smallest fraction:")
    for s in stages:
        per = [r["stages"].get(s, 0) / r["reports"] * 1000 for r in rows]
        print(f"  stage {s}: " + ", ".join(f"{r['fraction']}: {p:.1f} s ({p / max(per[0], 1e-9):.2f}x)"
                                          for r, p in zip(rows, per)))
    shutil.rmtree(WORK / "params", ignore_errors=True)
    print("written:", RESULTS / "rehearsal_scaling.json")
    return 0 if all(r["checks"] == "passed" for r in rows) and base else 1


if __name__ == "__main__":
    sys.exit(main())
