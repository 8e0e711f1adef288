"""Client throughput: streaming-to-store engine vs gather-then-write, against a local stub.

A zero-latency OpenAI-compatible stub (finlib.rehearsal.stub_server, stdlib asyncio, 127.0.0.1 only,
stops itself) runs in its own process. Each variant runs in its own child process (so peak RSS
is its own) and sends the same N prompts at concurrency C:
- streaming: finlib.llm.openai_backend.run_openai -- a fixed worker pool pulling prompts lazily,
  results group-committed to the SQLite store as they arrive -- on its default client, the JSON
  posted over aiohttp directly (finlib.llm.raw_client);
- streaming over the SDK: the same engine on the OpenAI SDK's client over its aiohttp transport (the
  reference the raw client is tested against), and on the SDK's default httpx transport;
- gather (baseline): one asyncio task per prompt behind a semaphore, asyncio.gather, then write
  every result to the store at the end.
Goal: streaming >= 1,000 answers per CPU-second with peak RSS <= 500 MB. CPU seconds are the child's
own (the stub runs in its own process; imports included), so answers per CPU-second is the client's
cost whatever the load; the ratios compare variants measured in the same run. The figures
go to benchmarks/results/client.json (benchmarks/results.py) as well as to the terminal.

    .venv/bin/python benchmarks/bench_client.py [--n 30000] [--concurrency 64]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import ROOT, machine, write_result

sys.path.insert(0, str(ROOT))

from finlib.core.memory import peak_rss_mb
from finlib.llm.spec import ModelSpec
from finlib.llm.store import Request, ResponseStore, Result, make_key
from finlib.rehearsal.stub_server import stub_spec

PARAMS = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 64}
REPORT = ("Revenue grew in the quarter while margins held steady and guidance was reaffirmed. " * 24).strip()


def prompts(n: int):
    """Lazily built requests (~2 KB of report text each), like a stage streaming its plan."""
    for i in range(n):
        msgs = [{"role": "system", "content": "You are an investor."},
                {"role": "user", "content": f"Report {i}. {REPORT}"}]
        yield Request(make_key("openai", "stub-model", msgs, PARAMS, "bench", "generate"), "stub", "openai",
                      "generate", msgs, dict(PARAMS), input_tokens_est=500)


def spec(base_url: str, concurrency: int) -> ModelSpec:
    return stub_spec(base_url, price_input_per_m=0.1, price_output_per_m=0.4, concurrency=concurrency,
                     max_attempts=3, timeout_s=60, api_key_env="BENCH_STUB_KEY")


async def streaming(s: ModelSpec, n: int, store: ResponseStore, transport: str = "raw") -> int:
    from finlib.llm.openai_backend import make_client, run_openai

    client = make_client(s, transport)
    try:
        state = await run_openai(s, prompts(n), store, client=client)
    finally:
        await client.close()
    return state["ok"]


async def streaming_sdk(s: ModelSpec, n: int, store: ResponseStore) -> int:
    return await streaming(s, n, store, "aiohttp")


async def streaming_httpx(s: ModelSpec, n: int, store: ResponseStore) -> int:
    return await streaming(s, n, store, "httpx")


async def gather_then_write(s: ModelSpec, n: int, store: ResponseStore) -> int:
    """Baseline: every request a task, all results held in memory, one write at the end."""
    from finlib.llm.openai_backend import make_client, request_kwargs

    client = make_client(s, "httpx")
    sem = asyncio.Semaphore(s.concurrency)

    async def one(req: Request) -> Result:
        async with sem:
            resp = await client.chat.completions.create(**request_kwargs(s, req))
        return Result.for_request(req, status="ok", raw_text=resp.choices[0].message.content,
                                  input_tokens=resp.usage.prompt_tokens, output_tokens=resp.usage.completion_tokens)

    results = await asyncio.gather(*(one(r) for r in prompts(n)))
    store.put_many(results)
    await client.close()
    return len(results)


def child(variant: str, base_url: str, n: int, concurrency: int) -> None:
    os.environ.setdefault("BENCH_STUB_KEY", "bench-dummy")
    with tempfile.TemporaryDirectory() as tmp, ResponseStore(Path(tmp) / "bench.sqlite") as store:
        fn = VARIANTS[variant]
        t0, c0 = time.perf_counter(), time.process_time()
        done = asyncio.run(fn(spec(base_url, concurrency), n, store))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        stored = store.count("ok")
    rss_mb = peak_rss_mb()
    print(json.dumps({"variant": variant, "n": n, "done": done, "stored": stored, "wall_s": wall, "cpu_s": cpu,
                      "req_per_s": done / wall, "peak_rss_mb": rss_mb}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=30_000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--child", choices=list(VARIANTS))
    ap.add_argument("--base-url")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.base_url, args.n, args.concurrency)
        return
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_STUB_KEY": "bench-dummy"}
    before = machine()
    server = subprocess.Popen([sys.executable, "-m", "finlib.rehearsal.stub_server", "--port", "0", "--max-seconds", "600"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        port = int(server.stdout.readline())
        base_url = f"http://127.0.0.1:{port}/v1"
        rows = []
        for variant in VARIANTS:
            out = subprocess.run([sys.executable, __file__, "--child", variant, "--base-url", base_url, "--n",
                                  str(args.n), "--concurrency", str(args.concurrency)], capture_output=True,
                                 text=True, env=env, timeout=600, check=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        server.terminate()
        server.wait(10)
    flags = sorted(set(Path("/proc/cpuinfo").read_text().split()) & {"avx2", "avx512f", "avx512_bf16", "amx_bf16"})
    print(f"{args.n} prompts, concurrency {args.concurrency}, zero-latency stub on 127.0.0.1 (separate process); "
          f"CPU flags {' '.join(flags)}; {os.cpu_count()} cores")
    print(f"{'variant':<22}{'req/s':>10}{'req/CPU-s':>11}{'peak RSS MB':>14}{'wall s':>9}{'stored':>9}")
    for r in rows:
        print(f"{r['variant']:<22}{r['req_per_s']:>10.0f}{r['done'] / r['cpu_s']:>11.0f}{r['peak_rss_mb']:>14.0f}"
              f"{r['wall_s']:>9.1f}{r['stored']:>9}")
    s, a, h, g = rows
    per_cpu = {r["variant"]: r["done"] / r["cpu_s"] for r in rows}
    ratios = {"answers_per_cpu_s_raw_vs_sdk_aiohttp": round(per_cpu["streaming"] / per_cpu["streaming-sdk"], 2),
              "answers_per_cpu_s_sdk_aiohttp_vs_httpx": round(per_cpu["streaming-sdk"] / per_cpu["streaming-httpx"], 2),
              "throughput_streaming_vs_gather": round(s["req_per_s"] / g["req_per_s"], 2),
              "rss_streaming_vs_gather": round(s["peak_rss_mb"] / g["peak_rss_mb"], 2)}
    print("ratios:", ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    goal_met = per_cpu["streaming"] >= 1000 and s["peak_rss_mb"] <= 500
    print(f"goal (>= 1,000 answers per CPU-second, peak RSS <= 500 MB): {'met' if goal_met else 'NOT met'}")
    variants = {r["variant"]: {**r, "answers_per_cpu_s": round(per_cpu[r["variant"]], 1)} for r in rows}
    print("written:", write_result("client", {"n": args.n, "concurrency": args.concurrency, "variants": variants,
                                              "ratios": ratios, "goal_met": goal_met}, before))

VARIANTS = {"streaming": streaming, "streaming-sdk": streaming_sdk, "streaming-httpx": streaming_httpx,
            "gather": gather_then_write}

if __name__ == "__main__":
    main()
