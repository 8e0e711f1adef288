"""Scaffolding shared by the LLM tests: the stub model's record, sampling parameters, a request
builder, and a simulated clock for everything that waits."""
from __future__ import annotations

import asyncio

from finlib.llm.registry import ModelSpec
from finlib.llm.store import Request, make_key
from finlib.llm.stub_server import stub_spec

PARAMS = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 16}
STUB_SPEC = stub_spec(concurrency=8, max_attempts=4, timeout_s=0.5)
_REAL_SLEEP = asyncio.sleep


def make_request(text: str, spec: ModelSpec = STUB_SPEC, params: dict = PARAMS,
                 input_tokens_est: int = 100) -> Request:
    """A generate request whose one user message is `text`, keyed like the stage keys it."""
    msgs = [{"role": "user", "content": text}]
    return Request(make_key(spec.backend, spec.model_id, msgs, params, "t", "generate"), spec.name, spec.backend,
                   "generate", msgs, dict(params), input_tokens_est=input_tokens_est)


class SimulatedClock:
    """A monotonic clock that only moves when the code under test sleeps: every requested wait
    is recorded and added to the clock, none is spent (no timed tests)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await _REAL_SLEEP(0)  # still hand control to the other tasks, as a real wait would
