"""Stage 05 on CPU: time of the embedded teacher (Qwen2.5-Coder-0.5B via llama.cpp) and of base/tuned
generation (SmolLM2-135M, torch), per call, on a run's own texts. Prints seconds per call so the
default run's sizes (`dpo.teacher`, `dpo.max_train_pairs`, `dpo.eval_reports`) can be chosen from them.

    .venv/bin/python benchmarks/bench_dpo_teacher.py --run default --calls 4
Needs stages 00-02's artifacts of the run (no_opinion texts need the MPQA lexicon). The figures go to
benchmarks/results/dpo_teacher_<run>.json (benchmarks/results.py) as well as to the terminal.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import ROOT, machine, write_result

sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", default="default")
    ap.add_argument("--calls", type=int, default=4, help="teacher calls (half herded, half independent)")
    ap.add_argument("--generate", type=int, default=4, help="SmolLM2 generations of the evaluation prompt")
    args = ap.parse_args()

    from finlib.core.artifacts import read_frame
    from finlib.core.config import load_run
    from finlib.finbias.dpo import stage as st
    from finlib.finbias.dpo import triplets as tp
    from finlib.finbias.inference.stage import inference_params
    from finlib.llm.llamacpp import close_servers
    from finlib.llm.store import ResponseStore

    before = machine()
    cfg = load_run(args.run)
    dp = st.dpo_params(cfg)
    cond = read_frame(cfg, "conditions")
    ok = cond[cond["status"] == "ok"]
    orig = ok[ok["condition"] == "original"].set_index("report_id")["text"]
    nop = ok[ok["condition"] == "no_opinion"].set_index("report_id")["text"]
    ids = [r for r in orig.index if r in nop.index][: max(1, args.calls // 2)]
    calls = []
    for rid in ids:
        calls.append(tp.TeacherCall(f"{rid}|herded", "herded", orig[rid], "bullish"))
        calls.append(tp.TeacherCall(f"{rid}|independent", "independent", nop[rid], "bearish"))
    with tempfile.TemporaryDirectory() as tmp, ResponseStore(Path(tmp) / "s.sqlite") as store:
        teach, name = st.make_teacher(cfg, {**dp, "teacher": "qwen2.5-coder-0.5b"}, store)
        t0 = time.perf_counter()
        out = teach(calls)
        dt = time.perf_counter() - t0
        close_servers()
    parsed = sum(tp._check_answer(r, c.rating, c.text) is None for (_, r), c in zip(out.iterrows(), calls))
    print(f"teacher {name}: {len(calls)} calls in {dt:.1f} s = {dt / len(calls):.1f} s/call "
          f"(incl. server start); intended rating parsed: {parsed}/{len(calls)}")
    print(out.assign(raw_text=out["raw_text"].str[:120]).to_string())
    result = {"run": args.run, "teacher": {"model": name, "calls": len(calls), "seconds": round(dt, 1),
                                           "seconds_per_call": round(dt / len(calls), 1), "parsed": parsed}}

    if args.generate:
        from finlib.finbias.prompts import build_messages
        from finlib.llm.local_backend import LocalModel
        from finlib.llm.registry import load_registry

        inf = inference_params(cfg)
        spec = load_registry(cfg.path(inf["registry"]))["smollm2-135m"]
        m = LocalModel(spec, cfg.path(inf["model_cache"]), dtype="float32", batch_size=args.generate)
        from finlib.llm.store import Request

        reqs = [Request(key=str(i), model=spec.name, backend="local", mode="generate",
                        messages=build_messages(t, True, inf["prompt_version"]),
                        params={**spec.sampling, "max_new_tokens": int(inf["max_new_tokens"])})
                for i, t in enumerate(orig.iloc[: args.generate])]
        t0 = time.perf_counter()
        res = [r for batch in m.generate(reqs) for r in batch]
        dt = time.perf_counter() - t0
        print(f"smollm2-135m generate: {len(res)} answers (batch {args.generate}, max_new_tokens "
              f"{inf['max_new_tokens']}) in {dt:.1f} s = {dt / len(res):.1f} s/answer; output tokens "
              f"{[r.output_tokens for r in res]}")
        result["generate"] = {"model": "smollm2-135m", "answers": len(res), "seconds": round(dt, 1),
                              "seconds_per_answer": round(dt / len(res), 1),
                              "output_tokens": [r.output_tokens for r in res]}
    print("written:", write_result(f"dpo_teacher_{args.run}", result, before))


if __name__ == "__main__":
    main()
