"""How long a model with a wrong key, or whose server is down, runs before its circuit breaker stops
it, with the registry's default knobs (concurrency 16, 6 attempts, 120 s timeout, real backoff from
1 s capped at 60 s, breaker after 10 failures / 20 s of refused connections), against 5,000 pending
calls. Without the breaker every call would be sent with all its retries. The figures go to
benchmarks/results/breaker.json (benchmarks/results.py) as well as to the terminal.

    .venv/bin/python benchmarks/bench_breaker.py
"""
from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import ROOT, machine, write_result

sys.path.insert(0, str(ROOT))
from finlib.llm.openai_backend import CircuitOpen, run_openai
from finlib.llm.store import Request, ResponseStore, make_key
from finlib.rehearsal.stub_server import ThreadedStub, stub_spec

N = 5000


def requests(spec) -> list[Request]:
    out = []
    for i in range(N):
        msgs = [{"role": "user", "content": f"report {i}"}]
        params = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 16}
        out.append(Request(make_key("openai", spec.model_id, msgs, params, "b", "generate"), spec.name, "openai",
                           "generate", msgs, params))
    return out


def trial(name: str, base_url: str, store_path: str) -> dict:
    spec = stub_spec(base_url, concurrency=16, max_attempts=6, timeout_s=120.0, api_key_env="BENCH_BREAKER_KEY")
    t0 = time.perf_counter()
    with ResponseStore(store_path) as store:
        try:
            asyncio.run(run_openai(spec, requests(spec), store))
            outcome = "no trip"
        except CircuitOpen as exc:
            outcome = str(exc)[:160]
        sent = store.conn.execute("SELECT COUNT(*) FROM responses WHERE attempts > 0").fetchone()[0]
    seconds = time.perf_counter() - t0
    print(f"{name}: stopped after {seconds:.1f} s; calls sent {sent}/{N}; {outcome}")
    return {"seconds": round(seconds, 1), "calls_sent": sent, "outcome": outcome}


if __name__ == "__main__":
    import secrets
    import tempfile

    # Two different random values made at run time: the local stub accepts one, the client sends the other.
    os.environ["BENCH_BREAKER_KEY"] = secrets.token_hex(8)
    tmp = tempfile.mkdtemp()
    before = machine()
    with ThreadedStub(require_key=secrets.token_hex(8)) as stub:
        wrong_key = trial("wrong key (HTTP 401)", stub.base_url, f"{tmp}/a.sqlite")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = trial("server down (connection refused)", f"http://127.0.0.1:{port}/v1", f"{tmp}/b.sqlite")
    print("written:", write_result("breaker", {"pending_calls": N, "wrong_key": wrong_key, "server_down": down},
                                   before))
