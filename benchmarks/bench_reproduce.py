"""Wall and CPU time of the main job (`make reproduce`: every stage and the report) from nothing, then
rerun from the response store; writes benchmarks/results/reproduce_<run>.json.

    nice .venv/bin/python benchmarks/bench_reproduce.py [--run default]

The first run starts from empty caches of its own (response store, model cache, POS-tag cache, under
runs/bench-<run>/), as on a fresh clone after `make venv`; the second run reruns every stage with the
store the first one filled. Each stage's wall and CPU seconds (the kernel and what it waited for,
`cpu_seconds` in the run's manifest) and its kernel's peak RSS (`peak_rss_mb`) are copied from the manifest. CPU seconds barely move with other
load on the machine; wall seconds do: the file records the load average before and after, and
`machine_before.idle` says whether the machine was idle.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import ROOT, machine, write_result


def bench_params(run: str, folder: Path) -> Path:
    """params/<run>.yaml resolved, with the caches moved into `folder` (nothing reused from before)."""
    sys.path.insert(0, str(ROOT))
    from finlib.core.config import load_params

    params = load_params(ROOT / "params" / f"{run}.yaml")
    params.setdefault("inference", {}).update(store=str(folder / "responses.sqlite"),
                                              model_cache=str(folder / "models"))
    params.setdefault("perturb", {})["tag_cache"] = str(folder / "postags")
    path = folder / f"{folder.name}.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return path


def run_once(name: str, params: Path) -> dict:
    """One `python -m finlib.pipeline.runner --report` (what `make reproduce` calls), timed from outside."""
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "finlib.pipeline.runner", "--run", name, "--params", str(params), "--report"],
                   cwd=ROOT, check=True)
    wall = time.time() - t0
    manifest = json.loads((ROOT / "runs" / name / "manifest.json").read_text(encoding="utf-8"))
    stages = {k: {"seconds": v["seconds"], "cpu_seconds": v.get("cpu_seconds"), "peak_rss_mb": v.get("peak_rss_mb")}
              for k, v in sorted(manifest["stages"].items())}
    return {"wall_seconds": round(wall, 1), "wall_minutes": round(wall / 60, 1),
            "cpu_seconds": round(sum(s["cpu_seconds"] or 0 for s in stages.values()), 1),
            "report_seconds": manifest.get("report", {}).get("seconds"), "stages": stages}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="default", help="params/<run>.yaml to measure")
    a = ap.parse_args()
    name = f"bench-{a.run}"
    folder = ROOT / "runs" / name
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(ROOT / "data" / "processed" / name, ignore_errors=True)
    shutil.rmtree(ROOT / "figures" / name, ignore_errors=True)
    folder.mkdir(parents=True)
    params = bench_params(a.run, folder)
    before = machine()
    first = run_once(name, params)
    rerun = run_once(name, params)
    path = write_result(f"reproduce_{a.run}", {"run": a.run, "params": f"params/{a.run}.yaml", "first": first,
                                                "rerun": rerun}, before)
    print(f"first run {first['wall_minutes']} min ({first['cpu_seconds']} CPU s), rerun {rerun['wall_seconds']} s; "
          f"machine idle: {before['idle']} (load {before['load_average_1_5_15']}); {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
