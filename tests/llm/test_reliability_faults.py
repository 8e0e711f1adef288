"""Faults at scale: 2,000 chat calls through the engine against the stub server with 30 % seeded
faults of every kind. The stub's FaultPlan is the oracle: for each prompt it says which attempts
fail and how, so the expected outcome of every request (answered at attempt k, or failed with
the last fault's reason) is known exactly and checked against the store and the server's books."""
from __future__ import annotations

import time

import pandas as pd
import pytest

from finlib.finbias.answers import parse_predictions
from finlib.llm.engine import ChatItem, chat
from finlib.llm.store import ResponseStore
from finlib.rehearsal.stub_server import FAULT_KINDS, FaultPlan, ThreadedStub, stub_spec

N = 2000
RATE = 0.30
ATTEMPTS = 3
# what the client records for each injected fault kind (the reason after its last attempt)
REASON = {"429": "HTTP 429", "500": "HTTP 500", "503": "HTTP 503", "reset": "connection error",
          "timeout": "timeout", "truncated": "connection error", "invalid": "malformed response: body is not JSON",
          "missing": "malformed response: choice without message content", "empty": "malformed response: no choices"}
PRICE_IN, PRICE_OUT = 2.0, 8.0  # USD per million tokens, so cost can be tied out too


def expected(plan: FaultPlan, text: str, max_attempts: int, first_attempt: int = 1) -> tuple[str, int, str | None]:
    """(status, attempts this run, last fault) from the seeded plan alone (the independent oracle)."""
    for k in range(first_attempt, first_attempt + max_attempts):
        fault = plan.draw(text, k)
        if fault in (None, "slow"):
            return "ok", k - first_attempt + 1, None
    return "error", max_attempts, fault


def items(n: int) -> list[ChatItem]:
    return [ChatItem(f"q{i}", [{"role": "user", "content": f"Rate report {i}: revenue grew {i % 17} %."}], "t")
            for i in range(n)]


@pytest.mark.slow
def test_2000_requests_at_30_percent_faults(tmp_path, monkeypatch, simulated_clock):
    """Drill: injected faults on 30 % of attempts (every kind, seeded), then a rerun."""
    monkeypatch.setenv("STUB_TEST_KEY", "dummy")
    plan = FaultPlan(rate=RATE, seed=15, hang_s=30.0, slow_s=0.02, retry_after_s=7.0)
    spec = stub_spec(concurrency=32, max_attempts=ATTEMPTS, timeout_s=4.0, price_input_per_m=PRICE_IN,
                     price_output_per_m=PRICE_OUT)
    its = items(N)
    texts = {it.id: it.messages[-1]["content"] for it in its}
    oracle = {i: expected(plan, t, ATTEMPTS) for i, t in texts.items()}
    t0 = time.perf_counter()
    with ThreadedStub(faults=plan) as stub, ResponseStore(tmp_path / "r.sqlite") as store:
        spec = stub_spec(**{**spec.__dict__, "base_url": stub.base_url})
        first = chat(spec, its, store, max_new_tokens=16, progress=False)
        books1 = stub.stub.stats()
        attempts1 = dict(stub.stub.attempts)
        wall1 = time.perf_counter() - t0

        # every request is either answered or failed with the reason of its last fault
        got = first.set_index("id")
        assert len(got) == N and set(got["status"]) <= {"ok", "error"}
        for i, (status, n_att, fault) in oracle.items():
            row = got.loc[i]
            assert row["status"] == status, (i, row["error"], fault)
            assert attempts1[texts[i]] == n_att, i  # counted at the server: no extra or missing attempt
            if status == "error":
                assert pd.isna(row["raw_text"]) and REASON[fault] in row["error"], (fault, row["error"])
                assert f"after {ATTEMPTS} attempt(s)" in row["error"]
            else:
                assert isinstance(row["raw_text"], str) and pd.isna(row["error"])
        n_failed = int((got["status"] == "error").sum())
        assert 0 < n_failed < N * 0.1
        assert set(books1["faults"]) == set(FAULT_KINDS)  # every fault kind really happened
        assert sum(books1["faults"].values()) / books1["attempts"] == pytest.approx(RATE, abs=0.03)
        # Retry-After honoured (simulated clock): every 429 that was retried waited the server's 7 s
        n_429_retried = sum(1 for i, t in texts.items() for k in range(1, oracle[i][1])
                            if plan.draw(t, k) == "429")
        assert sum(1 for s in simulated_clock.sleeps if s == 7.0) == n_429_retried > 0

        # usage and cost add up to the server's own count of what it delivered
        ok = got[got["status"] == "ok"]
        assert books1["answers"] == len(ok) == books1["answered_texts"]
        assert int(ok["input_tokens"].sum()) == books1["usage"]["prompt_tokens"]
        assert int(ok["output_tokens"].sum()) == books1["usage"]["completion_tokens"]
        server_cost = (books1["usage"]["prompt_tokens"] * PRICE_IN + books1["usage"]["completion_tokens"] * PRICE_OUT) / 1e6
        assert got["cost_usd"].sum() == pytest.approx(server_cost, rel=1e-9)
        assert (got.loc[got["status"] == "error", ["input_tokens", "output_tokens", "cost_usd"]] == 0).all().all()

        # none of the failures is read as a rating: they are "not answered", outside N
        pred = parse_predictions(pd.DataFrame({
            "item_id": got.index, "mode": "generate", "status": got["status"].to_numpy(),
            "raw_text": got["raw_text"].to_numpy(), "truncated_output": got["truncated_output"].to_numpy(),
            "p_bullish": float("nan"), "p_neutral": float("nan"), "p_bearish": float("nan")}))
        failed = pred[pred["status"] == "error"]
        assert failed["answer"].isna().all() and not failed["parsed"].any()
        assert (pred.loc[pred["status"] == "ok", "answer"] == "bullish").all()

        # a second run sends only the failed requests, each continuing where its faults left off
        before = stub.stub.n_requests
        second = chat(spec, its, store, max_new_tokens=16, progress=False).set_index("id")
        resent = {t for t, n in stub.stub.attempts.items() if n > attempts1.get(t, 0)}
        assert resent == {texts[i] for i in got.index[got["status"] == "error"]}
        assert not second.loc[got["status"] == "ok", "cached"].eq(False).any()
        for i in got.index[got["status"] == "error"]:
            status, n_att, _ = expected(plan, texts[i], ATTEMPTS, first_attempt=ATTEMPTS + 1)
            assert second.loc[i, "status"] == status
            assert stub.stub.attempts[texts[i]] - attempts1[texts[i]] == n_att
        assert stub.stub.n_requests - before == sum(stub.stub.attempts[t] - attempts1[t] for t in resent)
        # answers from run 1 are unchanged (never overwritten), cost still ties out
        assert (second.loc[ok.index, "raw_text"] == ok["raw_text"]).all()
        books2 = stub.stub.stats()
        assert int(second.loc[second["status"] == "ok", "input_tokens"].sum()) == books2["usage"]["prompt_tokens"]
    print(f"\n{N} requests, {books1['attempts']} attempts, {n_failed} failed after {ATTEMPTS} attempts, "
          f"run 1 wall {wall1:.1f} s")


def test_fault_plan_is_seeded_and_order_free():
    plan = FaultPlan(rate=0.3, seed=1)
    draws = [plan.draw(f"t{i}", k) for i in range(500) for k in (1, 2)]
    assert draws == [FaultPlan(rate=0.3, seed=1).draw(f"t{i}", k) for i in range(500) for k in (1, 2)]
    assert draws != [FaultPlan(rate=0.3, seed=2).draw(f"t{i}", k) for i in range(500) for k in (1, 2)]
    assert sum(d is not None for d in draws) / len(draws) == pytest.approx(0.3, abs=0.05)
    assert FaultPlan(rate=1.0, weights={"reset": 1}).draw("x", 1) == "reset"
    assert FaultPlan().draw("x", 1) is None
