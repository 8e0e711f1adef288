"""How long a model with a wrong key, or whose server is down, runs before its circuit breaker stops
it, with the registry's default knobs (concurrency 16, 6 attempts, 120 s timeout, real backoff from
1 s capped at 60 s, breaker after 10 failures / 20 s of refused connections), against 5,000 pending
calls. Without the breaker every call would be sent with all its retries.

    .venv/bin/python benchmarks/bench_breaker.py
"""
from __future__ import annotations

import asyncio
import os
import socket
import time

from finlib.llm.openai_backend import CircuitOpen, run_openai
from finlib.llm.store import Request, ResponseStore, make_key
from finlib.llm.stub_server import ThreadedStub, stub_spec

N = 5000


def requests(spec) -> list[Request]:
    out = []
    for i in range(N):
        msgs = [{"role": "user", "content": f"report {i}"}]
        params = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 16}
        out.append(Request(make_key("openai", spec.model_id, msgs, params, "b", "generate"), spec.name, "openai",
                           "generate", msgs, params))
    return out


def trial(name: str, base_url: str, store_path: str) -> None:
    spec = stub_spec(base_url, concurrency=16, max_attempts=6, timeout_s=120.0, api_key_env="BENCH_BREAKER_KEY")
    t0 = time.perf_counter()
    with ResponseStore(store_path) as store:
        try:
            asyncio.run(run_openai(spec, requests(spec), store))
            outcome = "no trip"
        except CircuitOpen as exc:
            outcome = str(exc)[:160]
        sent = store.conn.execute("SELECT COUNT(*) FROM responses WHERE attempts > 0").fetchone()[0]
    print(f"{name}: stopped after {time.perf_counter() - t0:.1f} s; calls sent {sent}/{N}; {outcome}")


if __name__ == "__main__":
    import secrets
    import tempfile

    # Two different random values made at run time: the local stub accepts one, the client sends the other.
    os.environ["BENCH_BREAKER_KEY"] = secrets.token_hex(8)
    tmp = tempfile.mkdtemp()
    with ThreadedStub(require_key=secrets.token_hex(8)) as stub:
        trial("wrong key (HTTP 401)", stub.base_url, f"{tmp}/a.sqlite")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    trial("server down (connection refused)", f"http://127.0.0.1:{port}/v1", f"{tmp}/b.sqlite")
