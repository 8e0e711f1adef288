"""OpenAI-compatible backend against the local stub: retries, Retry-After, timeouts, rate limits,
streaming to the store, budget cap."""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import random
import sqlite3
import threading

import numpy as np
import pytest
from llm_helpers import STUB_SPEC as SPEC
from llm_helpers import make_request as req

from finlib.llm import openai_backend
from finlib.llm.openai_backend import Budget, BudgetExceeded, RateLimiter, backoff_s, redact, request_kwargs, run_openai
from finlib.llm.spec import MissingKeyError
from finlib.llm.store import ResponseStore
from finlib.rehearsal.stub_server import ThreadedStub


@pytest.fixture()
def stub(monkeypatch):
    monkeypatch.setenv("STUB_TEST_KEY", "dummy")
    with ThreadedStub() as s:
        yield s


def run(spec, requests, store, **kw):
    return asyncio.run(run_openai(spec, requests, store, backoff_base_s=0.01, backoff_cap_s=0.05, seed=0, **kw))


def test_retries_then_answers(stub, tmp_path, simulated_clock):
    spec = dataclasses.replace(SPEC, base_url=stub.base_url)
    texts = ["plain", "a [[429x2:0.3]]", "b [[500x2]]", "c [[sleepx1:2]]"]
    with ResponseStore(tmp_path / "r.sqlite") as s:
        counts = run(spec, [req(t) for t in texts], s)
        rows = s.get([req(t).key for t in texts])
    assert counts["ok"] == 4 and counts["error"] == 0
    attempts = {t: rows[req(t).key]["attempts"] for t in texts}
    assert attempts == {"plain": 1, "a [[429x2:0.3]]": 3, "b [[500x2]]": 3, "c [[sleepx1:2]]": 2}
    assert stub.stub.attempts["c [[sleepx1:2]]"] == 2  # the timed-out attempt was really retried
    # one wait per retry (2 + 2 + 1); Retry-After honoured: backoff alone is capped at 0.05 s, the
    # two retries of the 429 answer wait the server's 0.3 s
    waits = sorted(simulated_clock.sleeps)
    assert len(waits) == 5 and waits[-2:] == [0.3, 0.3] and max(waits[:-2]) <= 0.05


def test_terminal_failures_recorded_with_reason(stub, tmp_path):
    spec = dataclasses.replace(SPEC, base_url=stub.base_url)
    with ResponseStore(tmp_path / "r.sqlite") as s:
        run(spec, [req("x [[400]]"), req("y [[500x99]]")], s)
        rows = s.get([req("x [[400]]").key, req("y [[500x99]]").key])
        assert s.answered(list(rows)) == set()
    bad, down = rows[req("x [[400]]").key], rows[req("y [[500x99]]").key]
    assert bad["status"] == "error" and bad["attempts"] == 1 and "HTTP 400" in bad["error"]  # not retryable
    assert down["status"] == "error" and down["attempts"] == spec.max_attempts and "HTTP 500" in down["error"]
    assert bad["raw_text"] is None and down["raw_text"] is None


def test_request_carries_exact_sampling_and_token_limit_name():
    kw = request_kwargs(dataclasses.replace(SPEC, max_tokens_param="max_completion_tokens"), req("t"))
    assert kw["temperature"] == 1.0 and kw["top_p"] == 1.0 and kw["max_completion_tokens"] == 16
    assert "max_tokens" not in kw


def test_backoff_grows_and_honours_retry_after():
    rng = random.Random(1)
    caps = [max(backoff_s(a, 1.0, 8.0, None, rng) for _ in range(200)) for a in (1, 2, 3, 5)]
    assert caps[0] <= 1.0 < caps[1] <= 2.0 < caps[2] <= 4.0 < caps[3] <= 8.0
    assert backoff_s(1, 1.0, 8.0, 30.0, rng) == 30.0


def test_rate_limiter_spaces_requests(stub, tmp_path, simulated_clock, monkeypatch):
    granted: list[float] = []  # simulated time at which each call was let through

    class RecordingLimiter(RateLimiter):
        async def acquire(self, tokens: int = 0) -> None:
            await super().acquire(tokens)
            granted.append(self.clock())

    monkeypatch.setattr(openai_backend, "RateLimiter", functools.partial(RecordingLimiter, clock=simulated_clock))
    spec = dataclasses.replace(SPEC, base_url=stub.base_url, rpm=1200)  # 20/s, 1 s of burst
    with ResponseStore(tmp_path / "r.sqlite") as s:
        assert run(spec, [req(f"r{i}") for i in range(40)], s)["ok"] == 40
    # 40 requests at 20/s with a 20-request burst: the first 20 at once, then one every 0.05 s
    assert len(granted) == 40 and granted[:20] == [0.0] * 20
    assert sum(simulated_clock.sleeps) == pytest.approx(1.0)
    assert np.diff(granted[19:]) == pytest.approx([0.05] * 20)
    for i, t in enumerate(granted):  # no 1-second window holds more than rate + burst
        assert sum(1 for u in granted[i:] if u - t < 1.0) <= 41


def test_token_limiter_waits_for_tokens(simulated_clock):
    async def go():
        lim = RateLimiter(tpm=6000, clock=simulated_clock)  # 100 tokens/s, bucket of 100
        for _ in range(3):
            await lim.acquire(100)
    asyncio.run(go())
    # the bucket pays for the first call; each later one waits a second for 100 more tokens
    assert simulated_clock.sleeps == pytest.approx([1.0, 1.0])


def test_results_stream_into_the_store_before_the_run_ends(stub, tmp_path):
    spec = dataclasses.replace(SPEC, base_url=stub.base_url, concurrency=4)
    seen: list[int] = []

    with ResponseStore(tmp_path / "r.sqlite") as s:
        class Spy:
            def update(self, n, tokens, cost, errors=0):
                seen.append(s.count())  # committed rows at the moment results are counted
        requests = [req("slow [[sleepx1:0.4]]")] + [req(f"fast {i}") for i in range(20)]
        run(dataclasses.replace(spec, timeout_s=5), requests, s, progress=Spy())
        assert s.count() == 21
    assert seen[0] < 21, "nothing was committed before the slow request finished"


def test_budget_stops_before_exceeding(stub, tmp_path):
    priced = dataclasses.replace(SPEC, base_url=stub.base_url, price_input_per_m=1000.0, price_output_per_m=1000.0,
                                 concurrency=2)
    budget = Budget(0.3)  # each call reserves (100 + 16) tokens * $1000/M = $0.116; costs ~$0.013
    with ResponseStore(tmp_path / "r.sqlite") as s:
        with pytest.raises(BudgetExceeded, match="budget_usd"):
            run(priced, [req(f"p{i}") for i in range(30)], s, budget=budget)
        stored = s.count()
    assert 0 < stored < 30
    assert budget.spent <= 0.3
    assert stub.stub.n_requests == stored  # nothing sent beyond what the budget allowed


def test_missing_key_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("STUB_TEST_KEY", raising=False)
    with ResponseStore(tmp_path / "r.sqlite") as s, pytest.raises(MissingKeyError, match="STUB_TEST_KEY"):
        run(SPEC, [req("x")], s)


def test_redact_removes_keys():
    assert "secret-value-123" not in redact("Incorrect API key provided: secret-value-123", "secret-value-123")
    assert "sk-abcdefgh1234" not in redact("Incorrect API key provided: sk-abcdefgh1234.", None)


def test_stage_can_run_async_backend_inside_a_running_loop():
    """Jupyter kernels already run an event loop; the stage must still be able to send."""
    from finlib.llm.loop import run_coroutine

    async def answer():
        await asyncio.sleep(0)
        return 42

    async def notebook_cell():
        return run_coroutine(answer())

    assert asyncio.run(notebook_cell()) == 42
    assert run_coroutine(answer()) == 42


def test_length_finish_reason_is_stored(stub, tmp_path):
    spec = dataclasses.replace(SPEC, base_url=stub.base_url)
    with ResponseStore(tmp_path / "r.sqlite") as s:
        run(spec, [req("cut [[length]]"), req("whole")], s)
        rows = s.get([req("cut [[length]]").key, req("whole").key])
    assert rows[req("cut [[length]]").key]["truncated_output"] == 1
    assert rows[req("whole").key]["truncated_output"] == 0


class FailingStore(ResponseStore):
    """The disk fills up after the first group commit."""

    def put_many(self, results):
        if self.count() > 0:
            raise sqlite3.OperationalError("database or disk is full")
        return super().put_many(results)


def test_store_failure_stops_the_workers_instead_of_hanging(stub, tmp_path):
    """Drill: the response store's disk fills up while calls are sent."""
    spec = dataclasses.replace(SPEC, base_url=stub.base_url, concurrency=2)  # queue holds 8 results
    outcome: list[BaseException | None] = []

    def client_thread(store) -> None:  # a daemon thread: a hang fails the test instead of blocking it
        try:
            asyncio.run(run_openai(spec, [req(f"q{i}") for i in range(200)], store, backoff_base_s=0.01, seed=0))
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 -- inspected below
            outcome.append(exc)

    with FailingStore(tmp_path / "r.sqlite") as s:
        t = threading.Thread(target=client_thread, args=(s,), daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive(), "run_openai hung on the full queue after the store failed"
    assert isinstance(outcome[0], sqlite3.OperationalError) and "disk is full" in str(outcome[0])
    assert stub.stub.n_requests < 200  # stopped sending once nothing more could be stored
