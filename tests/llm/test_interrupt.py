"""Ctrl-C while calls are being sent: nothing new starts after the signal, the calls in flight are
stored as they finish, the error says how many were in flight, and a rerun completes exactly (each
text answered once in all). Counted at the stub server, which logs when each request arrived."""
from __future__ import annotations

import dataclasses
import os
import re
import signal
import threading
import time

import pytest
from llm_helpers import STUB_SPEC, make_request

from finlib.llm.interrupt import Interrupted
from finlib.llm.loop import run_in_thread
from finlib.llm.openai_backend import run_openai
from finlib.llm.store import ResponseStore
from finlib.rehearsal.stub_server import ThreadedStub

N, SIGNAL_AFTER = 40, 8
HANDLED_WITHIN_S = 0.05  # the main thread turns the signal into the stop within this


def _interrupt_when(stub, n: int, at: dict) -> threading.Thread:
    """SIGINT to this process (as Ctrl-C or a kernel interrupt) once the server has seen `n` requests."""
    def fire() -> None:
        deadline = time.monotonic() + 30
        while stub.stub.n_requests < n and time.monotonic() < deadline:
            time.sleep(0.002)
        at["t"] = time.monotonic()
        at["requests"] = stub.stub.n_requests
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=fire, daemon=True)
    thread.start()
    return thread


@pytest.fixture()
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in the main thread, as in a terminal or a Jupyter kernel.

    A process launched in the background or under nohup inherits SIGINT ignored, so the test sets
    the handler it needs and gives the previous one back."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_sending_starts_no_new_request_and_a_resume_completes_exactly(tmp_path, monkeypatch,
                                                                                  ctrl_c_raises):
    """Drill: Ctrl-C while a model's calls are sent from a kernel (the event loop in a worker thread).

    No request starts after the signal (only those in flight finish), the error says how many were
    in flight, and a resume sends exactly the texts not stored: one answer per text in all."""
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    at: dict = {}
    with ThreadedStub() as stub:
        spec = dataclasses.replace(STUB_SPEC, base_url=stub.base_url, concurrency=4)
        requests = [make_request(f"text {i} [[sleepx1:0.2]]", spec) for i in range(N)]
        with ResponseStore(tmp_path / "r.sqlite") as store:
            fire = _interrupt_when(stub, SIGNAL_AFTER, at)
            with pytest.raises(Interrupted) as err:
                run_in_thread(run_openai(spec, requests, store, seed=0))
            fire.join()
            stored_first = store.answered([r.key for r in requests])
            arrivals = [t for t, _, _ in stub.stub.log]
            late = [t - at["t"] for t in arrivals if t > at["t"] + HANDLED_WITHIN_S]
            assert late == [], f"{len(late)} request(s) started after the signal"
            assert len(arrivals) <= at["requests"] + spec.concurrency and len(arrivals) < N
            said = re.search(r"(\d+) call\(s\) were in flight \((\d+) answered and stored", str(err.value))
            assert said and 0 < int(said[1]) <= spec.concurrency, str(err.value)
            assert int(said[2]) == int(said[1]) and len(stored_first) == len(arrivals)  # in flight: kept
            assert "Rerun the same command to resume" in str(err.value)
            pending = [r for r in requests if r.key not in stored_first]
            counts = run_in_thread(run_openai(spec, pending, store, seed=0))  # the resume
            assert counts["ok"] == len(pending) and len(store.answered([r.key for r in requests])) == N
        answers = dict(stub.stub.answers)
    assert len(answers) == N and set(answers.values()) == {1}  # each text answered once, across both runs
