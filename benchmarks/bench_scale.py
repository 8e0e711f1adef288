"""Stage time and peak RSS at Fin-Bias's full size (8,868 reports x 4 conditions x 19 models = 674k
answers) and at 1/8, 1/4, 1/2 of it, old code beside new.

Inputs are synthetic artifacts built directly at that shape (benchmarks/scale_data.py), so no
stage 00-03 run is needed. Every measurement runs in its own child process (its peak RSS is its
own); "new" imports `finlib` from this checkout and, with `--base REV` (any git revision: a branch, a
tag, a commit), "old" imports it from that revision (extracted with `git archive` into a temporary
folder), measured side by side. Stages:
- 04: `score_all` (parse + metrics + paired tests + tables) with the configured 1,000 bootstrap
  replicates; the parse part is timed apart;
- store: the resume check (`ResponseStore.answered`) over every stored key;
- 03: the client path of one model's share of requests (keys of ~20 KB messages, resume check,
  `run_openai` against the stub OpenAI-compatible server, read back, parse);
- 06: the figures and HTML report are timed by `make figures`/`make report` on a run (see
  docs/performance.md), not here.

Every figure also goes to benchmarks/results/scale.json under `<stage>.<fraction>.<variant>` (fractions
written 1/8, 1/4, 1/2, 1), with the machine's CPU flags and load before and after.

    nice .venv/bin/python benchmarks/bench_scale.py [--stages 04 store 03] [--fractions 0.125 0.25 0.5 1]
        [--base REV] [--reps 1000]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import ROOT, machine, write_result

from finlib.core.memory import peak_rss_mb

FULL_REPORTS = 8_868


def _vm_kb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1])
    return float("nan")


def _reset_peak() -> None:
    """Restart the peak-RSS count (Linux clear_refs 5), so a stage's peak is not the input builder's."""
    import gc

    gc.collect()
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _cpu_s() -> float:
    """CPU seconds of this process so far: less sensitive than wall time to other load on the cores."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child_04(n_reports: int, reps: int) -> dict:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scale_data import scale_frames

    from finlib.finbias.scoring import stage as scoring

    f = scale_frames(n_reports)
    _reset_peak()
    rss_inputs = _vm_kb("VmRSS") / 1024
    parse_s, parse_cpu = [], []
    inner = scoring.parse_predictions

    def timed(*a, **k):
        t, c = time.perf_counter(), _cpu_s()
        out = inner(*a, **k)
        parse_s.append(time.perf_counter() - t)
        parse_cpu.append(_cpu_s() - c)
        return out

    scoring.parse_predictions = timed
    t0, c0 = time.perf_counter(), _cpu_s()
    res = scoring.score_all(f["predictions"], f["conditions"], f["labels"], f["reports"], reps=reps, seed=0)
    wall = time.perf_counter() - t0
    n, cpu = len(f["predictions"]), _cpu_s() - c0
    return {"answers": n, "wall_s": wall, "cpu_s": cpu, "answers_per_cpu_s": n / cpu, "parse_s": sum(parse_s),
            "parse_cpu_s": sum(parse_cpu), "answers_per_cpu_s_parse": n / sum(parse_cpu),
            "rss_inputs_mb": rss_inputs, "peak_rss_mb": peak_rss_mb(), "metric_rows": len(res.metrics)}


def _make_store(path: Path, n_keys: int) -> list[str]:
    """A store with `n_keys` answers (~1.5 KB reply each) and 1 % errors; returns all keys."""
    from finlib.llm.store import ResponseStore, Result

    keys = [f"{i:064x}" for i in range(n_keys)]
    reply = '{"answer": "bullish", "reason": "' + "Margins held while revenue grew. " * 45 + '"}'
    with ResponseStore(path) as store:
        for i in range(0, n_keys, 5000):
            store.put_many(Result(key=k, model="m", backend="openai", mode="generate",
                                  status="error" if j % 100 == 0 else "ok",
                                  raw_text=None if j % 100 == 0 else reply, error="HTTP 503" if j % 100 == 0 else None)
                           for j, k in enumerate(keys[i:i + 5000], start=i))
    return keys


def child_store(path: str, n_keys: int) -> dict:
    from finlib.llm.store import ResponseStore

    keys = [f"{i:064x}" for i in range(n_keys)]
    with ResponseStore(path) as store:
        t0, c0 = time.perf_counter(), _cpu_s()
        done = store.answered(keys)
        wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    return {"keys": n_keys, "answered": len(done), "wall_s": wall, "cpu_s": cpu, "peak_rss_mb": peak_rss_mb(),
            "store_mb": Path(path).stat().st_size / 1e6}


def child_03(n_requests: int, base_url: str) -> dict:
    """One model's requests through the stage's client path, timed end to end."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import numpy as np
    import pandas as pd
    from scale_data import _body

    from finlib.finbias.answers import parse_predictions
    from finlib.llm.openai_backend import run_openai
    from finlib.llm.store import Request, ResponseStore, make_key
    from finlib.rehearsal.stub_server import stub_spec

    os.environ.setdefault("BENCH_STUB_KEY", "bench-dummy")
    spec = stub_spec(base_url, concurrency=64, max_attempts=3, timeout_s=60, api_key_env="BENCH_STUB_KEY")
    bodies = [_body(np.random.default_rng(s), 3_000) for s in range(8)]
    params = {"temperature": 0.0, "top_p": 1.0, "max_new_tokens": 512}

    def requests():
        for i in range(n_requests):
            msgs = [{"role": "system", "content": "You are a financial analyst."},
                    {"role": "user", "content": f"Report r{i}. {bodies[i % 8]}"}]
            yield Request(make_key("openai", "stub-model", msgs, params, "bench", "generate"), "stub", "openai",
                          "generate", msgs, dict(params), meta={"item_id": f"r{i}"})

    with tempfile.TemporaryDirectory() as tmp, ResponseStore(Path(tmp) / "s.sqlite") as store:
        t0, c0 = time.perf_counter(), _cpu_s()
        keys = [r.key for r in requests()]
        done = store.answered(keys)
        state = asyncio.run(run_openai(spec, (r for r in requests() if r.key not in done), store))
        stored = store.get(keys)
        pred = pd.DataFrame({"item_id": [f"r{i}" for i in range(n_requests)], "mode": "generate", "status": "ok",
                             "raw_text": [stored[k]["raw_text"] for k in keys]})
        parse_predictions(pred)
        wall = time.perf_counter() - t0
    cpu = _cpu_s() - c0
    return {"requests": n_requests, "ok": state["ok"], "wall_s": wall, "cpu_s": cpu, "answers_per_s": n_requests / wall,
            "answers_per_cpu_s": n_requests / cpu, "peak_rss_mb": peak_rss_mb()}


def _run_child(variant: str, args: list[str], base_dir: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(base_dir if variant == "old" else ROOT), "BENCH_STUB_KEY": "bench-dummy"}
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env,
                         cwd=tempfile.gettempdir(), timeout=3600)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"rc {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cpu_flags() -> str:
    try:
        flags = next(ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags")).split()
    except (OSError, StopIteration):
        return "unknown"
    return " ".join(f for f in ("avx", "avx2", "avx512f", "fma") if f in flags)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", nargs="+", default=["04", "store", "03"])
    ap.add_argument("--fractions", nargs="+", type=float, default=[0.125, 0.25, 0.5, 1.0])
    ap.add_argument("--variants", nargs="+", default=None,
                    help="old and/or new (default: new, plus old when --base is given)")
    ap.add_argument("--old-fractions", nargs="+", type=float, default=[0.125, 0.25],
                    help="fractions the old code is run at (it needs ~9.5 GB at full size)")
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--base", default=None, help="git revision the old variant imports finlib from")
    ap.add_argument("--child", nargs="+")
    a = ap.parse_args()
    if a.child:
        kind, *rest = a.child
        fn = {"04": lambda: child_04(int(rest[0]), int(rest[1])), "store": lambda: child_store(rest[0], int(rest[1])),
              "03": lambda: child_03(int(rest[0]), rest[1])}[kind]
        print(json.dumps(fn()), flush=True)
        return
    variants = a.variants or (["old", "new"] if a.base else ["new"])
    if "old" in variants and not a.base:
        ap.error("the old variant needs --base REV (the revision to compare against)")
    before = machine()
    measured: dict[str, dict[str, dict[str, dict]]] = {}
    load = os.getloadavg()
    print(f"CPU flags: {_cpu_flags()}; cores: {os.cpu_count()}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        base_dir = Path(tmp) / "base"
        base_dir.mkdir()
        if a.base:
            subprocess.run(["bash", "-c", f"git -C {ROOT} archive {a.base} finlib | tar -x -C {base_dir}"], check=True)
        for stage in a.stages:
            for frac in a.fractions:
                reports = round(FULL_REPORTS * frac)
                store_path = None
                if stage == "store":
                    store_path = Path(tmp) / f"store_{frac}.sqlite"
                    sys.path.insert(0, str(ROOT))
                    t = time.perf_counter()
                    _make_store(store_path, reports * 4 * 19)
                    print(f"  (built store with {reports * 4 * 19} keys in {time.perf_counter() - t:.0f} s)")
                server = None
                if stage == "03":
                    server = subprocess.Popen([sys.executable, "-m", "finlib.rehearsal.stub_server", "--port", "0",
                                               "--max-seconds", "3000"], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                                              env={**os.environ, "PYTHONPATH": str(ROOT)})
                    url = f"http://127.0.0.1:{int(server.stdout.readline())}/v1"
                for variant in variants:
                    if variant == "old" and frac not in a.old_fractions:
                        continue
                    args = {"04": ["04", str(reports), str(a.reps)],
                            "store": ["store", str(store_path), str(reports * 4 * 19)],
                            "03": ["03", str(reports * 4), url if server else ""]}[stage]
                    r = _run_child(variant, args, base_dir)
                    fraction = str(Fraction(frac).limit_denominator(1000))
                    measured.setdefault(stage, {}).setdefault(fraction, {})[variant] = {
                        "reports": reports, **{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}}
                    print(f"stage {stage:<5} N={frac:<6} ({reports} reports) {variant:<4} " + json.dumps(
                        {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()}), flush=True)
                if server is not None:
                    server.terminate()
                    server.wait(10)
                if store_path is not None:
                    store_path.unlink()
    print("written:", write_result("scale", {"base": a.base, "reps": a.reps, **measured}, before))


if __name__ == "__main__":
    main()
