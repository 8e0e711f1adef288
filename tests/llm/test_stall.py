"""A server that accepts connections and never answers: the model stops after `stall_s` of silence
(not after `timeout_s` per attempt), a busy server with long generations is not taken for a stalled
one, and Ctrl-C against a stalled server ends the wait within the interrupt's grace, a second
Ctrl-C at once. Counted at the stalled server (request lines it received)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from llm_helpers import STUB_SPEC, make_request

from finlib.llm.openai_backend import CircuitOpen, run_openai
from finlib.llm.store import ResponseStore
from finlib.rehearsal.stub_server import StalledServer, ThreadedStub

ROOT = Path(__file__).resolve().parents[2]
N = 20


def _run(spec, requests, store) -> dict:
    import asyncio

    return asyncio.run(run_openai(spec, requests, store, seed=0))


def test_a_stalled_server_stops_the_model_after_stall_s_not_after_the_timeout(tmp_path, monkeypatch):
    """Drill: a server that accepts connections and never answers, with a per-call timeout of `timeout_s: 120`.

    The first wave of calls (one per worker) reaches the server, nothing more; the model stops
    with the stall named, every call accounted (the calls in flight failed, the rest not sent)."""
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    with StalledServer() as server:
        spec = dataclasses.replace(STUB_SPEC, base_url=server.base_url, concurrency=4, timeout_s=120.0, stall_s=1.0)
        requests = [make_request(f"stalled {i}", spec) for i in range(N)]
        with ResponseStore(tmp_path / "r.sqlite") as store:
            with pytest.raises(CircuitOpen, match=r"no response for \d+ s to any of 4 call\(s\) in flight") as err:
                _run(spec, requests, store)
            rows = store.get([r.key for r in requests])
        posts, gets = len(server.posts), server.gets
    assert posts == spec.concurrency and gets >= 1  # the first wave, then the probe: not one attempt more
    assert len(rows) == N and all(r["status"] == "error" for r in rows.values())
    assert sum(r["attempts"] > 0 for r in rows.values()) == spec.concurrency
    assert "16 call(s) not sent" in str(err.value)


def test_a_busy_server_with_long_generations_is_not_a_stall(tmp_path, monkeypatch):
    """Drill: every answer takes longer than stall_s (long generations) on a server that is alive.

    The stall probe (GET /models) gets a response, so the silence is not a stall: every call is
    answered."""
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    with ThreadedStub() as stub:
        spec = dataclasses.replace(
            STUB_SPEC, base_url=stub.base_url, concurrency=4, timeout_s=30.0, stall_s=0.5, max_attempts=1
        )
        requests = [make_request(f"long {i} [[sleepx1:2]]", spec) for i in range(8)]
        with ResponseStore(tmp_path / "r.sqlite") as store:
            counts = _run(spec, requests, store)
        stats = stub.stub.stats()
    assert counts["ok"] == 8 and counts["error"] == 0
    assert stats["attempts"] == 8 and stub.stub.n_requests > 8  # the probes went to the server as well


SENDER = textwrap.dedent("""
    import dataclasses, sys
    sys.path.insert(0, sys.argv[1])
    from llm_helpers import STUB_SPEC, make_request
    from finlib.llm.loop import run_in_thread
    from finlib.llm.openai_backend import run_openai
    from finlib.llm.store import ResponseStore
    spec = dataclasses.replace(STUB_SPEC, base_url=sys.argv[2], concurrency=4, timeout_s=120.0, stall_s=0.0)
    with ResponseStore(sys.argv[3]) as store:
        run_in_thread(run_openai(spec, [make_request(f"text {i}", spec) for i in range(20)], store))
""")


def _sender(server: StalledServer, tmp_path: Path) -> subprocess.Popen:
    """A process sending from a worker thread, as a kernel does, with SIGINT as a terminal gives it."""
    env = {**os.environ, "STUB_TEST_KEY": "k", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", SENDER, str(ROOT / "tests"), server.base_url, str(tmp_path / "r.sqlite")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _wait_for_posts(server: StalledServer, n: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while len(server.posts) < n and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)


@pytest.mark.parametrize("second_ctrl_c", [False, True])
def test_ctrl_c_against_a_stalled_server_exits_within_the_grace(second_ctrl_c, tmp_path):
    """Drill: Ctrl-C while every call in flight waits on a server that never answers (`timeout_s: 120`, stall watch off).

    One Ctrl-C: the process exits once the interrupt's grace has passed (the calls in flight given
    up, not after the 120 s timeout); a second Ctrl-C: it exits at once. No request after the
    signal; the last line says how many calls were in flight and that a rerun resumes."""
    with StalledServer() as server:
        proc = _sender(server, tmp_path)
        _wait_for_posts(server, 4, proc)
        proc.send_signal(signal.SIGINT)
        t_signal = time.monotonic()
        if second_ctrl_c:
            time.sleep(0.5)
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        late = [t for t in server.posts if t > t_signal]
    assert proc.returncode != 0 and late == [], err
    last = err.strip().splitlines()[-1]
    if second_ctrl_c:
        assert "interrupted twice: stopped waiting for the calls in flight" in last, err  # not the senders' line
    else:
        assert "4 call(s) were in flight (0 answered and stored, 4 not answered)" in last, err
        assert "Rerun the same command to resume" in last
