"""The reliability drills on the wall clock, at the registry's defaults (concurrency 16, 6 attempts,
`timeout_s: 120`, breaker after 10 failures, `breaker_grace_s: 20`, `stall_s: 30`, real backoff from
1 s capped at 60 s), 111 calls pending (a stage-03 model's size): how many requests reached the
server and how many seconds passed until the failure line, for

- every attempt answered 429 with `Retry-After: 1` (no answer between),
- a server that accepts connections and never answers (a stall),
- Ctrl-C while every call in flight waits on that stalled server (stall watch off), once and twice.

The tests (`tests/llm/test_circuit_breaker.py`, `tests/llm/test_stall.py`) assert the outcomes on a
simulated clock or with small knobs; this file measures the real times. Results go to
benchmarks/results/reliability_drills.json (benchmarks/results.py), with the machine's load.

    .venv/bin/python benchmarks/bench_reliability_drills.py
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import ROOT, machine, write_result

sys.path.insert(0, str(ROOT))
from finlib.llm.openai_backend import CircuitOpen, reset_breakers, run_openai
from finlib.llm.spec import ModelSpec
from finlib.llm.store import Request, ResponseStore, make_key
from finlib.rehearsal.stub_server import StalledServer, ThreadedStub, stub_spec

N = 111
KEY_ENV = "BENCH_DRILLS_KEY"
DEFAULTS = {
    f.name: f.default
    for f in dataclasses.fields(ModelSpec)
    if f.name in ("max_attempts", "timeout_s", "breaker_failures", "breaker_grace_s", "stall_s")
}


def spec_for(base_url: str, **fields) -> ModelSpec:
    """The stub's record at the registry's defaults and an API record's concurrency (16)."""
    return stub_spec(base_url, concurrency=16, api_key_env=KEY_ENV, **{**DEFAULTS, **fields})


def requests(spec: ModelSpec, directive: str = "") -> list[Request]:
    params = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 16}
    out = []
    for i in range(N):
        msgs = [{"role": "user", "content": f"drill {i} {directive}"}]
        out.append(
            Request(
                make_key("openai", spec.model_id, msgs, params, "b", "generate"),
                spec.name,
                "openai",
                "generate",
                msgs,
                params,
            )
        )
    return out


def until_failure(spec: ModelSpec, reqs: list[Request], store_path: str) -> tuple[float, str]:
    """Seconds from the first call to the failure line, and that line (or "no stop")."""
    reset_breakers()
    t0 = time.monotonic()
    with ResponseStore(store_path) as store:
        try:
            asyncio.run(run_openai(spec, reqs, store, seed=0))
            outcome = "no stop"
        except CircuitOpen as exc:
            outcome = str(exc)
    return time.monotonic() - t0, outcome


def drill_retry_after(tmp: str) -> dict:
    with ThreadedStub() as stub:
        spec = spec_for(stub.base_url)
        seconds, outcome = until_failure(spec, requests(spec, "[[429x9999:1]]"), f"{tmp}/ra.sqlite")
        sent = stub.stub.stats()["attempts"]
    print(f"429 with Retry-After on every attempt: {sent} requests, {seconds:.1f} s to the failure line")
    return {
        "requests": sent,
        "seconds_to_failure_line": round(seconds, 1),
        "pending_calls": N,
        "without_breaker_requests": N * DEFAULTS["max_attempts"],
        "outcome": outcome[:240],
    }


def drill_stall(tmp: str) -> dict:
    with StalledServer() as server:
        spec = spec_for(server.base_url)
        seconds, outcome = until_failure(spec, requests(spec), f"{tmp}/stall.sqlite")
        posts, gets = len(server.posts), server.gets
    print(f"stalled server: {posts} requests (+{gets} probe), {seconds:.1f} s to the failure line")
    return {
        "requests": posts,
        "probes": gets,
        "seconds_to_failure_line": round(seconds, 1),
        "timeout_s": DEFAULTS["timeout_s"],
        "stall_s": DEFAULTS["stall_s"],
        "outcome": outcome[:240],
    }


SENDER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    from bench_reliability_drills import requests, spec_for
    from finlib.llm.loop import run_in_thread
    from finlib.llm.openai_backend import run_openai
    from finlib.llm.store import ResponseStore
    spec = spec_for(sys.argv[2], stall_s=0.0)
    with ResponseStore(sys.argv[3]) as store:
        run_in_thread(run_openai(spec, requests(spec), store))
""")


def drill_ctrl_c(tmp: str, twice: bool) -> dict:
    """A process sending from a worker thread (as a kernel does); SIGINT once the first wave is in flight."""
    with StalledServer() as server:
        env = {**os.environ, KEY_ENV: "k", "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                SENDER,
                str(ROOT / "benchmarks"),
                server.base_url,
                f"{tmp}/ctrlc{int(twice)}.sqlite",
            ],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        while len(server.posts) < 16 and proc.poll() is None:
            time.sleep(0.02)
        t_signal = time.monotonic()
        proc.send_signal(signal.SIGINT)
        if twice:
            time.sleep(1.0)
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
        seconds = time.monotonic() - t_signal
        after = sum(t > t_signal for t in server.posts)
    last = (err.strip().splitlines() or [""])[-1]
    print(
        f"Ctrl-C {'twice' if twice else 'once'} against a stalled server: exit after {seconds:.1f} s, "
        f"{after} requests after the signal"
    )
    return {
        "seconds_to_exit": round(seconds, 1),
        "requests_after_signal": after,
        "exit_code": proc.returncode,
        "second_signal_after_s": 1.0 if twice else None,
        "last_line": last[:240],
    }


if __name__ == "__main__":
    os.environ[KEY_ENV] = "k"
    before = machine()
    with tempfile.TemporaryDirectory() as tmp:
        data = {
            "registry_defaults": DEFAULTS,
            "retry_after_429_streak": drill_retry_after(tmp),
            "stalled_server": drill_stall(tmp),
            "ctrl_c_stalled_once": drill_ctrl_c(tmp, twice=False),
            "ctrl_c_stalled_twice": drill_ctrl_c(tmp, twice=True),
        }
    print(write_result("reliability_drills", data, before))
