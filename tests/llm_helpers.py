"""Scaffolding shared by the LLM tests: the stub model's record, sampling parameters, a request
builder, and a simulated clock for everything that waits."""
from __future__ import annotations

import asyncio
import logging
from contextlib import contextmanager
from pathlib import Path

import yaml

from finlib.llm.spec import ModelSpec
from finlib.llm.store import Request, make_key
from finlib.rehearsal.stub_server import stub_spec

PARAMS = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 16}
STUB_SPEC = stub_spec(concurrency=8, max_attempts=4, timeout_s=0.5)
_REAL_SLEEP = asyncio.sleep


def make_request(text: str, spec: ModelSpec = STUB_SPEC, params: dict = PARAMS,
                 input_tokens_est: int = 100) -> Request:
    """A generate request whose one user message is `text`, keyed like the stage keys it."""
    msgs = [{"role": "user", "content": text}]
    return Request(make_key(spec.backend, spec.model_id, msgs, params, "t", "generate"), spec.name, spec.backend,
                   "generate", msgs, dict(params), input_tokens_est=input_tokens_est)


SETTLE_TURNS = 3  # event-loop turns the simulated clock waits before it jumps


class SimulatedClock:
    """A monotonic clock that only moves when the code under test sleeps: every requested wait is
    recorded, none is spent (no timed tests). Waits that overlap run side by side as they would on
    a wall clock: the clock moves to the earliest pending wake-up, so two workers' 60 s backoffs
    started together end at 60 s, not 120 s."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self._pending: list[float] = []
        self.busy = 0  # calls in flight on the wall clock (`ClockedClient`): the clock waits for them

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        wake = self.now + max(0.0, seconds)
        self._pending.append(wake)
        try:
            quiet = 0  # loop turns in a row with no call in flight and this the earliest wake-up
            while wake > self.now:
                quiet = quiet + 1 if not self.busy and wake <= min(self._pending) else 0
                if quiet > SETTLE_TURNS:  # nothing can happen before it wakes (a wait just scheduled as a
                    self.now = wake       # task registers within these turns)
                    break
                await _REAL_SLEEP(0)
        finally:
            self._pending.remove(wake)
        await _REAL_SLEEP(0)  # still hand control to the other tasks, as a real wait would


class ClockedClient:
    """An SDK client whose calls hold the simulated clock while they are in flight, so the clock
    never jumps past an answer (or error) that is on its way: a call takes no simulated time."""

    def __init__(self, inner, clock: SimulatedClock):
        self.inner, self.clock = inner, clock

    async def post(self, *args, **kwargs):
        self.clock.busy += 1
        try:
            return await self.inner.post(*args, **kwargs)
        finally:
            self.clock.busy -= 1

    async def close(self) -> None:
        await self.inner.close()


def hold_clock_during_threads(monkeypatch, clock: SimulatedClock) -> None:
    """Work handed to threads (the store's claims, renewals, commits) holds the simulated clock too:
    it takes no simulated time, and no wait may end while it runs."""
    real = asyncio.to_thread

    async def to_thread(func, /, *args, **kwargs):
        clock.busy += 1
        try:
            return await real(func, *args, **kwargs)
        finally:
            clock.busy -= 1

    monkeypatch.setattr(asyncio, "to_thread", to_thread)


def api_record(name: str, base_url: str, api_key_env: str, **fields) -> dict:
    """A registry record (as written in models.yaml) of an OpenAI-compatible model for tests."""
    return {"name": name, "backend": "openai", "model_id": f"{name}-model", "base_url": base_url,
            "api_key_env": api_key_env, "supports_system": True, "context_length": 8192,
            "price_input_per_m": 1.0, "price_output_per_m": 2.0,
            "sampling": {"temperature": 1.0, "top_p": 1.0}, **fields}


def write_registry(root: Path, record: dict) -> str:
    """Write a registry under `root/params/`, the shipped records plus `record`, and return its
    repo-relative path (the load checks every model name of the params against the run's registry,
    so the default params' judges, teachers and BizFinBench models stay records)."""
    shipped = yaml.safe_load((Path(__file__).resolve().parents[1] / "params" / "models.yaml").read_text())
    rel = f"params/models_{record['name']}.yaml"
    (root / rel).write_text(yaml.safe_dump({**shipped, "models": [*shipped["models"], record]}))
    return rel


@contextmanager
def debug_log(path: Path):
    """Send every logger (openai, httpx, papermill, …) at DEBUG to `path` for the duration."""
    handler = logging.FileHandler(path)
    root_logger = logging.getLogger()
    old_level = root_logger.level
    root_logger.addHandler(handler)
    root_logger.setLevel(logging.DEBUG)
    try:
        yield path
    finally:
        root_logger.removeHandler(handler)
        root_logger.setLevel(old_level)
        handler.close()
