"""Circuit breaker per model endpoint: failures that waiting cannot heal (wrong key, no access, wrong
model/URL, server down, every call stalling) stop the model after a few attempts instead of sending
every item with its retries; transient faults (429, 5xx) never open it. Counted at the stub server:
what was sent, what was stored, what was marked not sent."""
from __future__ import annotations

import asyncio
import dataclasses
import socket

import pytest
from llm_helpers import STUB_SPEC
from llm_helpers import make_request as req

from finlib.llm.openai_backend import Breaker, CircuitOpen, run_openai
from finlib.llm.store import ResponseStore
from finlib.rehearsal.stub_server import ThreadedStub

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


@pytest.mark.parametrize("scenario, directive, kind, what", [
    ("wrong key: every call 401", None, "HTTP 401", "rejected requests"),
    ("no access: every call 403", "[[403]]", "HTTP 403", "rejected requests"),
    ("wrong model or URL: every call 404", "[[404]]", "HTTP 404", "rejections of the model name"),
])
def test_breaker_trips_on_rejected_requests(scenario, directive, kind, what, tmp_path, monkeypatch,
                                            simulated_clock):
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
    assert "\n" not in msg and f"model 'stub' stopped: 3 consecutive {what}" in msg and kind in msg
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


def test_refused_within_the_grace_period_does_not_trip():
    """Drill: a server restarting (connection refused within the grace period, then an answer).

    Past the threshold the breaker is suspect: one probe per grace/PROBES_PER_GRACE goes out, the
    other workers wait; the probe that is answered ends the streak and the model goes on."""
    now = [0.0]
    b = Breaker(3, 20.0, clock=lambda: now[0])
    for _ in range(3):
        b.record("refused", "connection refused")
    assert b.suspect and b.cause is None
    assert b.probe_wait() == 0.0 and b.probe_wait() == pytest.approx(5.0)  # one probe, then wait 20/4 s
    now[0] = 5.0
    assert b.probe_wait() == 0.0
    b.record("refused", "connection refused")  # 5 s < 20 s: still not open
    now[0] = 10.0
    b.record(None)  # the server is back
    assert not b.suspect and b.cause is None and b.probe_wait() == 0.0


@pytest.mark.parametrize("scenario, directive, ok", [
    ("server errors: the first attempt of every text 500", "[[500x1]]", 8),
])
def test_transient_faults_never_trip(scenario, directive, ok, tmp_path, monkeypatch, simulated_clock):
    """Drill: transient faults (a 500 the retry heals) never stop the model.

    A 429 with Retry-After comes from a server that is alive and says when to come back."""
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    with ThreadedStub() as stub:
        spec = dataclasses.replace(STUB_SPEC, base_url=stub.base_url, concurrency=2, max_attempts=2,
                                   breaker_failures=2)
        requests = [req(f"flaky {i} {directive}") for i in range(8)]
        with ResponseStore(tmp_path / "r.sqlite") as s:
            counts = run(spec, requests, s)
            books = accounted(s, requests)
        attempts = stub.stub.stats()["attempts"]
    assert counts["ok"] == ok and counts["error"] == 8 - ok and attempts == 8 * spec.max_attempts  # every retry kept
    assert books["failed"] == 8 - ok and books["not_sent"] == 0


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
    assert b.cause is None and not b.is_open


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
    from finlib.finbias.inference.stage import run as run_inference

    monkeypatch.setenv("STUB_RELIABILITY_KEY", "sk-wrong-key-0000000000")
    with ThreadedStub(require_key="sk-right-key-1111111111") as stub:
        _stage_on(tmp_run, stub.base_url)
        with pytest.raises(CircuitOpen, match=r"^model 'stub-api' stopped: 2 consecutive rejected requests; last: "
                                              r"HTTP 401.* 4 call\(s\) not sent and 2 failed") as err:
            run_inference(tmp_run)
        sent = stub.stub.n_requests
    assert sent == 2 and "\n" not in str(err.value)  # 2 of the stage's 6 calls sent, 4 never sent
    assert "wrong-key-0000000000" not in str(err.value) and "STUB_RELIABILITY_KEY" in str(err.value)


def test_dead_server_stops_a_finbias_stage(tmp_run, monkeypatch, simulated_clock):
    """Drill: server down during a Fin-Bias stage (connection refused: stage 03 stops)."""
    from finlib.finbias.inference.stage import run as run_inference

    monkeypatch.setenv("STUB_RELIABILITY_KEY", "k")
    _stage_on(tmp_run, f"http://127.0.0.1:{_dead_port()}/v1", breaker_grace_s=0)
    with pytest.raises(CircuitOpen, match=r"^model 'stub-api' stopped: 2 consecutive refused connections .* "
                                          r"\d call\(s\) not sent"):
        run_inference(tmp_run)


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


DRILL_ITEMS = 111  # the stage-03 size of the measured drills
DRILL_GOAL_S, DRILL_GOAL_CALLS = 60.0, 50


def _registry_default_spec(base_url: str):
    """The stub's record with the registry's defaults (ModelSpec: 6 attempts, 120 s timeout, breaker
    after 10 in a row, 20 s grace) and an API record's concurrency (16, as in params/models.yaml)."""
    from finlib.llm.spec import ModelSpec

    defaults = {f.name: f.default for f in dataclasses.fields(ModelSpec)
                if f.name in ("max_attempts", "timeout_s", "breaker_failures", "breaker_grace_s", "retry_after_max_s")}
    return dataclasses.replace(STUB_SPEC, base_url=base_url, concurrency=16, **defaults)


def _drill(spec, directive: str, tmp_path, clock, monkeypatch) -> dict:
    """Send DRILL_ITEMS calls at registry-default backoff (1 s base, 60 s cap) until the breaker
    stops the model; the calls are counted from the stored attempts (every attempt is booked)."""
    from llm_helpers import ClockedClient, hold_clock_during_threads

    from finlib.llm.openai_backend import make_client

    hold_clock_during_threads(monkeypatch, clock)

    async def send() -> None:
        client = ClockedClient(make_client(spec), clock)
        try:
            await run_openai(spec, requests, s, client=client, backoff_base_s=1.0, backoff_cap_s=60.0, seed=0)
        finally:
            await client.close()

    requests = [req(f"drill {i} {directive}", spec=spec) for i in range(DRILL_ITEMS)]
    with ResponseStore(tmp_path / "r.sqlite") as s:
        with pytest.raises(CircuitOpen) as err:
            asyncio.run(send())
        books = accounted(s, requests)
        calls = sum(r["attempts"] for r in s.get([r.key for r in requests]).values())
    assert books["rows"] == DRILL_ITEMS and books["ok"] == 0  # every item accounted
    return {"seconds": clock.now, "calls": calls, "message": str(err.value)}


@pytest.mark.parametrize("scenario, directive, what", [
    ("a gateway answering 502 to everything", "[[502]]", "server errors (5xx)"),
    ("quota spent: 429 insufficient_quota without Retry-After", "[[quota]]", "quota refusals (429)"),
    ("429 without Retry-After on every call", "[[ratelimit]]", "rate limits without Retry-After (429)"),
    ("429 with Retry-After 1 s on every attempt", "[[429x9999:1]]", "rate limits with Retry-After (429)"),
    ("429 with Retry-After 600 s on every attempt", "[[429x9999:600]]",
     "rate limits with Retry-After (429) and no answer between for 0 s (the server asks to wait 600 s more)"),
    ("400: the model does not exist", "[[nomodel]]", "rejections of the model name"),
])
def test_breaker_drill_failures_that_cannot_heal(scenario, directive, what, tmp_path, monkeypatch, simulated_clock):
    """Drill: a failure that waiting cannot heal (502 gateway, spent quota, 429 with or without Retry-After and no answer between, unknown model) stops the model at registry defaults.

    Goal: <= 60 s of simulated time and <= 50 calls to the endpoint, 111 calls pending."""
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    with ThreadedStub() as stub:
        got = _drill(_registry_default_spec(stub.base_url), directive, tmp_path, simulated_clock, monkeypatch)
        assert got["calls"] == stub.stub.stats()["attempts"]  # the server's books agree with the store's
    assert f"consecutive {what}" in got["message"]
    print(f"drill: {got['seconds']:.1f} s simulated, {got['calls']} calls until the stop")
    assert got["calls"] <= DRILL_GOAL_CALLS and got["seconds"] <= DRILL_GOAL_S, got


async def _send_on_clock(spec, requests, store, clock) -> dict:
    """run_openai through a client whose calls hold the simulated clock (waits cost no wall time)."""
    from llm_helpers import ClockedClient

    from finlib.llm.openai_backend import make_client

    client = ClockedClient(make_client(spec), clock)
    try:
        return await run_openai(spec, requests, store, client=client, seed=0)
    finally:
        await client.close()


def test_a_rate_limit_that_lets_answers_through_heals(tmp_path, monkeypatch, simulated_clock):
    """Drill: a rate-limited server (three attempts in ten 429 with `Retry-After: 2`) answers every call at registry defaults.

    Answers between the refusals end each streak, so the breaker never opens however long the run."""
    from llm_helpers import hold_clock_during_threads

    from finlib.rehearsal.stub_server import FaultPlan

    monkeypatch.setenv("STUB_TEST_KEY", "k")
    hold_clock_during_threads(monkeypatch, simulated_clock)
    plan = FaultPlan(rate=0.3, seed=4, weights={"429": 1.0}, retry_after_s=2.0)
    with ThreadedStub(faults=plan) as stub:
        spec = _registry_default_spec(stub.base_url)
        requests = [req(f"limited {i}", spec=spec) for i in range(DRILL_ITEMS)]

        with ResponseStore(tmp_path / "r.sqlite") as s:
            counts = asyncio.run(_send_on_clock(spec, requests, s, simulated_clock))
        refused = stub.stub.stats()["faults"].get("429", 0)
    assert counts["ok"] == DRILL_ITEMS and counts["error"] == 0
    assert refused > 10  # more refusals than the breaker's threshold, spread between answers


def test_a_per_minute_window_is_waited_out(tmp_path, monkeypatch, simulated_clock):
    """Drill: a spent per-minute limit (every call 429 with the rest of its window as Retry-After) is waited out at registry defaults.

    The window's rest (up to 60 s) is longer than the grace. A Retry-After within `retry_after_max_s` is waited out, so the streak of refusals until the window ends
    never opens the breaker; with that wait not honoured (0) the same server stops the model."""
    from llm_helpers import hold_clock_during_threads

    from finlib.llm.openai_backend import reset_breakers
    from finlib.rehearsal.simulated_servers import Profile, SimulatedServer

    monkeypatch.setenv("STUB_TEST_KEY", "k")
    hold_clock_during_threads(monkeypatch, simulated_clock)
    per_minute, n_calls = 30, 100

    def send(retry_after_max_s: float, tag: str) -> tuple[dict, int]:
        reset_breakers()
        server = SimulatedServer(Profile(name="w", model_id=STUB_SPEC.model_id, context_length=100_000, rpm=per_minute,
                                         unparsed=0.0, runaway=0.0, latency_s=0.0),
                                 time_scale=0.0, clock=simulated_clock)
        with ThreadedStub(server=server) as stub:
            spec = dataclasses.replace(_registry_default_spec(stub.base_url), retry_after_max_s=retry_after_max_s)
            requests = [req(f"window {tag} {i}", spec=spec) for i in range(n_calls)]
            with ResponseStore(tmp_path / f"{tag}.sqlite") as s:
                try:
                    counts = asyncio.run(_send_on_clock(spec, requests, s, simulated_clock))
                except CircuitOpen:
                    counts = {"ok": -1}
            return counts, server.books.rate_429

    counts, refused = send(90.0, "honoured")
    assert counts["ok"] == n_calls and counts["error"] == 0
    assert refused > 10  # more refusals than the breaker's threshold, in streaks with no answer between
    assert simulated_clock.now >= 60.0 * (n_calls // per_minute)  # one window per 30 answers, waited out
    counts, _ = send(0.0, "not-honoured")
    assert counts["ok"] == -1  # the same refusals open the breaker when the wait is not honoured


def test_breaker_drill_host_not_found(tmp_path, monkeypatch, simulated_clock):
    """Drill: a wrong host name (DNS lookup fails) stops the model within the goal."""
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    got = _drill(_registry_default_spec("http://api.no-such-host.invalid/v1"), "", tmp_path, simulated_clock,
                 monkeypatch)
    assert "consecutive host name lookups that failed" in got["message"]
    print(f"drill: {got['seconds']:.1f} s simulated, {got['calls']} calls until the stop")
    assert got["calls"] <= DRILL_GOAL_CALLS and got["seconds"] <= DRILL_GOAL_S, got


def test_one_breaker_per_endpoint_across_batches_and_models(tmp_path, monkeypatch, simulated_clock):
    """Drill: small batches of two models on one endpoint (stage 08's judges) share one breaker.

    After the threshold no batch sends anything more."""
    monkeypatch.setenv("STUB_TEST_KEY", "sk-wrong-0000000000")
    with ThreadedStub(require_key="sk-right-1111111111") as stub:
        judge = dataclasses.replace(STUB_SPEC, base_url=stub.base_url, concurrency=1, breaker_failures=3)
        other = dataclasses.replace(judge, name="other", model_id="other-model")
        stopped = 0
        with ResponseStore(tmp_path / "r.sqlite") as s:
            for batch in range(10):  # ten batches of two calls, each its own run_openai
                spec = judge if batch % 2 else other
                try:
                    run(spec, [req(f"batch {batch} item {i}", spec=spec) for i in range(2)], s)
                except CircuitOpen:
                    stopped += 1
        assert stub.stub.n_requests == 3 and stopped == 9  # a breaker per run_openai would send all 20


def test_an_unknown_model_stops_only_that_model(tmp_path, monkeypatch, simulated_clock):
    """Drill: a model name the server does not know stops that model, not the others on its endpoint."""
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    with ThreadedStub() as stub:
        typo = dataclasses.replace(STUB_SPEC, base_url=stub.base_url, concurrency=1, breaker_failures=2,
                                   name="typo", model_id="gpt-4o-typo")
        good = dataclasses.replace(typo, name="good", model_id="gpt-4o")
        with ResponseStore(tmp_path / "r.sqlite") as s:
            with pytest.raises(CircuitOpen, match="2 consecutive rejections of the model name"):
                run(typo, [req(f"q {i} [[nomodel]]", spec=typo) for i in range(5)], s)
            assert run(good, [req(f"q {i}", spec=good) for i in range(5)], s)["ok"] == 5
