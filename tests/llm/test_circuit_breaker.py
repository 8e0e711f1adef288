"""Circuit breaker per model endpoint: failures that waiting cannot heal (wrong key, no access, wrong
model/URL, server down, every call stalling) stop the model after a few attempts instead of sending
every item with its retries; transient faults (429, 5xx) never open it. Counted at the stub server:
what was sent, what was stored, what was marked not sent."""
from __future__ import annotations

import asyncio
import dataclasses
import socket

import pytest
from llm_helpers import STUB_SPEC, make_request as req

from finlib.llm.openai_backend import Breaker, CircuitOpen, run_openai
from finlib.llm.store import ResponseStore
from finlib.llm.stub_server import ThreadedStub

N_ITEMS = 40


def run(spec, requests, store):
    return asyncio.run(run_openai(spec, requests, store, backoff_base_s=0.01, backoff_cap_s=0.02, seed=0))


def accounted(store: ResponseStore, requests) -> dict:
    """Every request ends as a stored row: answered, failed after attempts, or not sent (0 attempts)."""
    rows = store.get([r.key for r in requests])
    return {"rows": len(rows), "ok": sum(r["status"] == "ok" for r in rows.values()),
            "failed": sum(r["status"] == "error" and r["attempts"] > 0 for r in rows.values()),
            "not_sent": sum(r["attempts"] == 0 for r in rows.values()),
            "not_sent_errors": {r["error"] for r in rows.values() if r["attempts"] == 0}}


@pytest.mark.parametrize("scenario, directive, kind", [
    ("wrong key: every call 401", None, "HTTP 401"),
    ("no access: every call 403", "[[403]]", "HTTP 403"),
    ("wrong model or URL: every call 404", "[[404]]", "HTTP 404"),
])
def test_breaker_trips_on_rejected_requests(scenario, directive, kind, tmp_path, monkeypatch, simulated_clock):
    """Drill: wrong key, no access or wrong model (401/403/404 on every call)."""
    monkeypatch.setenv("STUB_TEST_KEY", "sk-wrong-0000000000")
    with ThreadedStub(require_key=None if directive else "sk-right-1111111111") as stub:
        spec = dataclasses.replace(STUB_SPEC, base_url=stub.base_url, concurrency=4, breaker_failures=3)
        requests = [req(f"item {i} {directive or ''}") for i in range(N_ITEMS)]
        with ResponseStore(tmp_path / "r.sqlite") as s:
            with pytest.raises(CircuitOpen) as err:
                run(spec, requests, s)
            books = accounted(s, requests)
        sent = stub.stub.stats()["attempts"] if directive else stub.stub.n_requests
    msg = str(err.value)
    assert "\n" not in msg and "model 'stub' stopped: 3 consecutive rejected requests" in msg and kind in msg
    # 3 failures open it; at most the other in-flight workers' calls (concurrency - 1) follow
    assert 3 <= sent <= 3 + spec.concurrency - 1
    assert books["rows"] == N_ITEMS and books["ok"] == 0 and books["failed"] == sent  # 401/403/404: no retry
    assert books["not_sent"] == N_ITEMS - sent  # accounted: nothing lost, nothing sent after the trip
    assert len(books["not_sent_errors"]) == 1 and "circuit breaker" in books["not_sent_errors"].pop()
    assert f"{N_ITEMS - sent} call(s) not sent" in msg


def test_breaker_trips_when_every_call_times_out(tmp_path, monkeypatch, simulated_clock):
    """Drill: a server that stalls (every call times out)."""
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    with ThreadedStub() as stub:
        spec = dataclasses.replace(STUB_SPEC, base_url=stub.base_url, concurrency=2, timeout_s=0.2, max_attempts=3,
                                   breaker_failures=4)
        requests = [req(f"stall {i} [[sleepx9:0.6]]") for i in range(N_ITEMS)]
        with ResponseStore(tmp_path / "r.sqlite") as s:
            with pytest.raises(CircuitOpen, match="4 consecutive timeouts; last: timeout"):
                run(spec, requests, s)
            books = accounted(s, requests)
        attempts = stub.stub.stats()["attempts"]
    assert 4 <= attempts <= 4 + spec.concurrency - 1  # not N_ITEMS x max_attempts = 120
    assert books["rows"] == N_ITEMS and books["ok"] == 0 and books["not_sent"] >= N_ITEMS - spec.concurrency


def _dead_port() -> int:
    """A loopback port nobody listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_breaker_trips_on_refused_connections_after_the_grace_period(tmp_path, monkeypatch):
    """Drill: a server that is down (connection refused past the grace period)."""
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    spec = dataclasses.replace(STUB_SPEC, base_url=f"http://127.0.0.1:{_dead_port()}/v1", concurrency=2,
                               max_attempts=3, breaker_failures=3, breaker_grace_s=0.3)
    requests = [req(f"down {i}") for i in range(N_ITEMS)]
    with ResponseStore(tmp_path / "r.sqlite") as s:
        with pytest.raises(CircuitOpen, match=r"consecutive refused connections for \d+ s; last: connection error"):
            run(spec, requests, s)
        books = accounted(s, requests)
    assert books["rows"] == N_ITEMS and books["ok"] == 0 and books["not_sent"] > 0


def test_refused_within_the_grace_period_does_not_trip(tmp_path, monkeypatch, simulated_clock):
    """Drill: a server restarting (connection refused within the grace period).

    A server restarting refuses for a moment: inside the grace period calls fail after their
    retries (simulated backoff takes no time) and the model is not stopped."""
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    spec = dataclasses.replace(STUB_SPEC, base_url=f"http://127.0.0.1:{_dead_port()}/v1", concurrency=2,
                               max_attempts=2, breaker_failures=2, breaker_grace_s=600.0)
    requests = [req(f"restarting {i}") for i in range(6)]
    with ResponseStore(tmp_path / "r.sqlite") as s:
        counts = run(spec, requests, s)
        books = accounted(s, requests)
    assert counts["error"] == 6 and books["failed"] == 6 and books["not_sent"] == 0


@pytest.mark.parametrize("scenario, directive", [
    ("server errors: every attempt 500", "[[500x99]]"),
    ("rate limited: every attempt 429", "[[429x99:0.01]]"),
])
def test_transient_faults_never_trip(scenario, directive, tmp_path, monkeypatch, simulated_clock):
    """Drill: transient faults on every attempt (500, 429) never stop the model."""
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    with ThreadedStub() as stub:
        spec = dataclasses.replace(STUB_SPEC, base_url=stub.base_url, concurrency=2, max_attempts=2,
                                   breaker_failures=2)
        requests = [req(f"flaky {i} {directive}") for i in range(8)]
        with ResponseStore(tmp_path / "r.sqlite") as s:
            counts = run(spec, requests, s)
            books = accounted(s, requests)
        attempts = stub.stub.stats()["attempts"]
    assert counts["error"] == 8 and attempts == 8 * spec.max_attempts  # every item kept its retries
    assert books["failed"] == 8 and books["not_sent"] == 0


def test_lasting_failures_between_answers_do_not_trip(tmp_path, monkeypatch, simulated_clock):
    """Drill: rejected calls between answers (a 404 on every other call) never stop the model.

    Consecutive means consecutive: one worker, so the streak never reaches 2."""
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    with ThreadedStub() as stub:
        spec = dataclasses.replace(STUB_SPEC, base_url=stub.base_url, concurrency=1, breaker_failures=2)
        requests = [req(f"mixed {i} {'[[404]]' if i % 2 else ''}") for i in range(10)]
        with ResponseStore(tmp_path / "r.sqlite") as s:
            counts = run(spec, requests, s)
    assert counts == {**counts, "ok": 5, "error": 5}


def test_breaker_threshold_zero_never_opens():
    b = Breaker(0, 0.0)
    for _ in range(100):
        b.record("http", "HTTP 401")
    assert b.cause is None and not b.opened.is_set()


def test_breaker_streak_restarts_when_the_kind_changes():
    now = [0.0]
    b = Breaker(3, 5.0, clock=lambda: now[0])
    for kind in ("http", "http", "timeout", "timeout", None, "timeout", "timeout"):
        b.record(kind, "x")
    assert b.cause is None
    for _ in range(3):  # refused: 3 in a row are not enough until the streak has lasted 5 s
        b.record("refused", "connection error")
    assert b.cause is None
    now[0] = 5.0
    b.record("refused", "connection error")
    assert b.cause == "4 consecutive refused connections for 5 s; last: connection error"


def _stage_on(tmp_run, base_url: str, **fields) -> None:
    """Stage 03 of the smoke run on one stub-served model (6 calls), one call at a time."""
    from llm_helpers import api_record, write_registry
    from test_llm_secrets import conditions

    from finlib.core.artifacts import write_frame

    record = api_record("stub-api", base_url, "STUB_RELIABILITY_KEY", concurrency=1, max_attempts=2,
                        breaker_failures=2, **fields)
    tmp_run.params["inference"].update(registry=write_registry(tmp_run.root, record), models=["stub-api"],
                                       budget_usd=1.0, progress=False)
    write_frame(tmp_run, "conditions", conditions())


def test_wrong_key_stops_a_finbias_stage_after_the_breaker_threshold(tmp_run, monkeypatch):
    """Drill: wrong key in a Fin-Bias stage (stage 03 stops after the breaker's threshold)."""
    from finlib.finbias.inference import run_stage

    monkeypatch.setenv("STUB_RELIABILITY_KEY", "sk-wrong-key-0000000000")
    with ThreadedStub(require_key="sk-right-key-1111111111") as stub:
        _stage_on(tmp_run, stub.base_url)
        with pytest.raises(CircuitOpen, match=r"^model 'stub-api' stopped: 2 consecutive rejected requests; last: "
                                              r"HTTP 401.* 4 call\(s\) not sent and 2 failed") as err:
            run_stage(tmp_run)
        sent = stub.stub.n_requests
    assert sent == 2 and "\n" not in str(err.value)  # 2 of the stage's 6 calls sent, 4 never sent
    assert "wrong-key-0000000000" not in str(err.value) and "STUB_RELIABILITY_KEY" in str(err.value)


def test_dead_server_stops_a_finbias_stage(tmp_run, monkeypatch, simulated_clock):
    """Drill: server down during a Fin-Bias stage (connection refused: stage 03 stops)."""
    from finlib.finbias.inference import run_stage

    monkeypatch.setenv("STUB_RELIABILITY_KEY", "k")
    _stage_on(tmp_run, f"http://127.0.0.1:{_dead_port()}/v1", breaker_grace_s=0)
    with pytest.raises(CircuitOpen, match=r"^model 'stub-api' stopped: 2 consecutive refused connections .* "
                                          r"\d call\(s\) not sent"):
        run_stage(tmp_run)


def test_wrong_key_stops_engine_chat_used_by_bizfinbench(tmp_path, monkeypatch, simulated_clock):
    """Drill: wrong key in engine.chat (the path of BizFinBench answers, judges and IteraJudge)."""
    from finlib.llm.engine import ChatItem, chat

    monkeypatch.setenv("STUB_TEST_KEY", "sk-wrong-0000000000")
    items = [ChatItem(f"q{i}", [{"role": "user", "content": f"question {i}"}], "t") for i in range(30)]
    with ThreadedStub(require_key="sk-right-1111111111") as stub:
        spec = dataclasses.replace(STUB_SPEC, base_url=stub.base_url, concurrency=1, breaker_failures=3)
        with ResponseStore(tmp_path / "r.sqlite") as s:
            with pytest.raises(CircuitOpen, match=r"3 consecutive rejected requests; last: HTTP 401.* 27 call\(s\) "
                                                  r"not sent and 3 failed"):
                chat(spec, items, s, max_new_tokens=8, progress=False)
            assert s.count("error") == 30 and s.count("ok") == 0  # every item accounted, none answered
        assert stub.stub.n_requests == 3
